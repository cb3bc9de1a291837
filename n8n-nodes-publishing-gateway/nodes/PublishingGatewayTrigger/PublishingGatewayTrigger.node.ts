import type {
	IDataObject,
	INodeExecutionData,
	INodeType,
	INodeTypeDescription,
	IPollFunctions,
	JsonObject,
} from 'n8n-workflow';
import { NodeApiError, NodeConnectionTypes } from 'n8n-workflow';

import {
	GatewayFailure,
	gatewayRequest,
	setRetryWindow,
	toNodeError,
} from '../PublishingGateway/GatewayClient';

const PAGE = 100;
const MAX_PAGES = 20; // at most 2,000 changes per poll; the cursor keeps the rest for the next
const DRAIN_PAGE = 500;
const MAX_DRAIN_PAGES = 1000;
/** How long a poll retries the gateway (seconds): less than n8n's shortest poll interval
 * (a minute) and than n8n 2.41's poll budget (a poll past 45 s is abandoned, with a margin of
 * at least 5 s: 36 s by default). */
const POLL_RETRY_SECONDS = 25;

/** The error for a failed poll: a refused token said as such (not "could not be reached"). */
function pollError(context: IPollFunctions, error: unknown): Error {
	if (error instanceof GatewayFailure && (error.status === 401 || error.status === 403)) {
		const report = error.report;
		return new NodeApiError(context.getNode(), { ...report } as JsonObject, {
			message: `the gateway refused the token (HTTP ${String(report.status)}: ${String(report.title)})`,
			description: `${String(report.detail ?? '')}\nCheck the token of the Publishing Gateway API credential: a workflow token from "gateway tokens create --role workflow", not revoked`,
			httpCode: String(report.status),
		});
	}
	return toNodeError(context, error);
}

/** Whether the gateway refused `cursor=now` (an older gateway takes only the cursors it gave
 * out: 422 validation-failed, pointer /cursor, or a 400). */
function cursorNowRefused(error: unknown): boolean {
	return error instanceof GatewayFailure && (error.status === 422 || error.status === 400);
}

/**
 * Polls the gateway's changes feed (GET /v1/job-changes, docs/api.md) and emits one item per
 * job that reached one of the chosen events since the last poll: "approval pending",
 * "approved" or "changes requested" (an editor's decision on the version; the change carries
 * the decision with its note), "published" or "needs attention" (failed, unknown outcome, an
 * open review item, or a run stalled past the gateway's attention time). The feed's cursor is kept in the workflow's
 * static data, so an event is emitted once per change. The first activation starts from now
 * (Start From: All History emits every job's latest change first); a manual test run reads
 * from the start without keeping a cursor.
 */
export class PublishingGatewayTrigger implements INodeType {
	description: INodeTypeDescription = {
		displayName: 'Publishing Gateway Poll Trigger',
		name: 'publishingGatewayTrigger', // unchanged: saved workflows load by this name
		icon: {
			light: 'file:../../icons/gateway.svg',
			dark: 'file:../../icons/gateway.dark.svg',
		},
		group: ['trigger'],
		version: 1,
		subtitle: '={{ $parameter["events"].join(", ") }}',
		description:
			'Polls for jobs awaiting approval, approved or sent back, published or needing attention (at most once a minute; the Publishing Gateway Trigger hears them within seconds)',
		defaults: { name: 'Publishing Gateway Poll Trigger' },
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
					{ name: 'Approved', value: 'approved' },
					{ name: 'Cancelled', value: 'cancelled' },
					{ name: 'Changes Requested', value: 'changes_requested' },
					{ name: 'Commented', value: 'commented' },
					{ name: 'Needs Attention', value: 'needs_attention' },
					{ name: 'Published', value: 'published' },
					{ name: 'Revoked', value: 'revoked' },
					{ name: 'Scheduled', value: 'scheduled' },
				],
				default: [
					'approval_pending',
					'approved',
					'changes_requested',
					'published',
					'needs_attention',
				],
				required: true,
			},
			{
				displayName: 'Start From',
				name: 'startFrom',
				type: 'options',
				options: [
					{
						name: 'Now',
						value: 'now',
						description: 'Only changes after the first activation',
					},
					{
						name: 'All History',
						value: 'history',
						description:
							"Every job's latest change since the tenant's first job, then the new ones",
					},
				],
				default: 'now',
				description: 'Where the first activation starts reading the changes feed',
			},
		],
	};

	async poll(this: IPollFunctions): Promise<INodeExecutionData[][] | null> {
		// within n8n's poll interval and budget: two polls never overlap on one cursor (which
		// would emit the same change twice), n8n never abandons the poll; the next poll retries
		setRetryWindow(this, POLL_RETRY_SECONDS);
		const wanted = new Set(this.getNodeParameter('events') as string[]);
		const state = this.getWorkflowStaticData('node');
		const manual = this.getMode() === 'manual';
		let cursor = (state.cursor as string | undefined) ?? undefined;
		const found: INodeExecutionData[] = [];
		try {
			if (cursor === undefined && !manual && this.getNodeParameter('startFrom', 'now') === 'now') {
				cursor = await startNow(this);
				state.cursor = cursor;
				return null; // the first activation: nothing has happened since "now"
			}
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
			throw pollError(this, error);
		}
		if (!manual) {
			state.cursor = cursor;
		}
		return found.length > 0 ? [found] : null;
	}
}

/**
 * The cursor at "now": `GET /v1/job-changes?cursor=now` (an empty page whose `next_cursor` is
 * now). A gateway that refuses `cursor=now` (older than the feed's "now") is read to its end
 * instead, emitting nothing, and its last cursor kept: the same start, in more requests.
 */
async function startNow(context: IPollFunctions): Promise<string | undefined> {
	try {
		const answer = await gatewayRequest(context, 'GET', '/v1/job-changes', undefined, {
			cursor: 'now',
			limit: 1,
		});
		return (answer.next_cursor as string | null) ?? undefined;
	} catch (error) {
		if (!cursorNowRefused(error)) {
			throw toNodeError(context, error);
		}
	}
	let cursor: string | undefined;
	for (let page = 0; page < MAX_DRAIN_PAGES; page++) {
		const qs: IDataObject = { limit: DRAIN_PAGE };
		if (cursor) {
			qs.cursor = cursor;
		}
		const answer = await gatewayRequest(context, 'GET', '/v1/job-changes', undefined, qs);
		cursor = (answer.next_cursor as string | null) ?? cursor;
		if (((answer.changes ?? []) as IDataObject[]).length < DRAIN_PAGE) {
			break;
		}
	}
	return cursor;
}
