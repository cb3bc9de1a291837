import type {
	IDataObject,
	INodeExecutionData,
	INodeType,
	INodeTypeDescription,
	IPollFunctions,
} from 'n8n-workflow';
import { NodeConnectionTypes } from 'n8n-workflow';

import { gatewayRequest, toNodeError } from '../PublishingGateway/GatewayClient';

const PAGE = 100;
const MAX_PAGES = 20; // at most 2,000 changes per poll; the cursor keeps the rest for the next

/**
 * Polls the gateway's changes feed (GET /v1/job-changes, docs/api.md) and emits one item per
 * job that reached one of the chosen events since the last poll: "approval pending",
 * "published" or "needs attention" (failed, unknown outcome or an open review item). The
 * feed's cursor is kept in the workflow's static data, so an event is emitted once per change.
 */
export class PublishingGatewayTrigger implements INodeType {
	description: INodeTypeDescription = {
		displayName: 'Publishing Gateway Trigger',
		name: 'publishingGatewayTrigger',
		icon: {
			light: 'file:../../icons/gateway.svg',
			dark: 'file:../../icons/gateway.dark.svg',
		},
		group: ['trigger'],
		version: 1,
		subtitle: '={{ $parameter["events"].join(", ") }}',
		description: 'Starts a workflow when a job awaits approval, is published or needs attention',
		defaults: { name: 'Publishing Gateway Trigger' },
		polling: true,
		inputs: [],
		outputs: [NodeConnectionTypes.Main],
		credentials: [{ name: 'publishingGatewayApi', required: true }],
		properties: [
			{
				displayName: 'Events',
				name: 'events',
				type: 'multiOptions',
				options: [
					{ name: 'Approval Pending', value: 'approval_pending' },
					{ name: 'Needs Attention', value: 'needs_attention' },
					{ name: 'Published', value: 'published' },
				],
				default: ['approval_pending', 'published', 'needs_attention'],
				required: true,
			},
		],
	};

	async poll(this: IPollFunctions): Promise<INodeExecutionData[][] | null> {
		const wanted = new Set(this.getNodeParameter('events') as string[]);
		const state = this.getWorkflowStaticData('node');
		let cursor = (state.cursor as string | undefined) ?? undefined;
		const found: INodeExecutionData[] = [];
		try {
			for (let page = 0; page < MAX_PAGES; page++) {
				const qs: IDataObject = { limit: PAGE };
				if (cursor) {
					qs.cursor = cursor;
				}
				const answer = await gatewayRequest(this, 'GET', '/v1/job-changes', undefined, qs);
				const changes = (answer.changes ?? []) as IDataObject[];
				for (const change of changes) {
					for (const event of (change.events ?? []) as string[]) {
						if (wanted.has(event)) {
							found.push({ json: { event, ...change } });
						}
					}
				}
				cursor = (answer.next_cursor as string | null) ?? cursor;
				if (changes.length < PAGE) {
					break;
				}
			}
		} catch (error) {
			throw toNodeError(this, error);
		}
		if (this.getMode() !== 'manual') {
			state.cursor = cursor;
		}
		return found.length > 0 ? [found] : null;
	}
}
