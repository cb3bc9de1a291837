import type {
	IDataObject,
	IHookFunctions,
	INodeType,
	INodeTypeDescription,
	IWebhookFunctions,
	IWebhookResponseData,
	JsonObject,
} from 'n8n-workflow';
import { NodeApiError, NodeConnectionTypes } from 'n8n-workflow';

import {
	GatewayFailure,
	gatewayRequest,
	setRetryWindow,
	toNodeError,
} from '../PublishingGateway/GatewayClient';
import { EVENT_TYPES } from './EventTypes';
import { signatureProblem } from './Signature';

/** How long an activation's gateway call is retried (seconds): the gateway restarting while
 * n8n activates is ridden out, a gateway that stays down fails the activation soon enough. */
const ACTIVATION_RETRY_SECONDS = 30;

/** An endpoint this node registered at the gateway. */
interface Endpoint {
	id: string;
	secret: string;
	events: string[];
}

/**
 * The node's static data: its endpoints by webhook URL. n8n activates the production URL
 * (`/webhook/...`) and, while the editor listens for a test event, the test URL
 * (`/webhook-test/...`) with the same static data: keyed by URL, the test's subscription never
 * replaces or deletes the production one.
 */
interface Registered {
	endpoints?: Record<string, Endpoint>;
}

function endpointsOf(context: IHookFunctions | IWebhookFunctions): Record<string, Endpoint> {
	const state = context.getWorkflowStaticData('node') as Registered;
	state.endpoints = state.endpoints ?? {};
	return state.endpoints;
}

function sameEvents(a: unknown, b: string[]): boolean {
	const left = Array.isArray(a) ? [...(a as string[])].sort() : [];
	const right = [...b].sort();
	return left.length === right.length && left.every((value, index) => value === right[index]);
}

function chosenEvents(context: IHookFunctions): string[] {
	return [...new Set(context.getNodeParameter('events') as string[])];
}

async function listEndpoints(context: IHookFunctions): Promise<IDataObject[]> {
	const answer = await gatewayRequest(context, 'GET', '/v1/webhook-endpoints');
	return (answer.endpoints ?? []) as IDataObject[];
}

/** DELETE /v1/webhook-endpoints/{id}; a 404 (already gone) counts as deleted. */
async function deleteEndpoint(context: IHookFunctions, endpointId: string): Promise<void> {
	try {
		await gatewayRequest(
			context,
			'DELETE',
			`/v1/webhook-endpoints/${encodeURIComponent(endpointId)}`,
		);
	} catch (error) {
		if (!(error instanceof GatewayFailure && error.status === 404)) {
			throw toNodeError(context, error);
		}
	}
}

/**
 * Starts a workflow the moment the gateway decides an event (an editor approves, requests
 * changes, a post is published...): activating the workflow subscribes this node's webhook
 * URL at the gateway (`POST /v1/webhook-endpoints` with the chosen events; the secret the
 * gateway shows once is kept in the workflow's static data), deactivating it deletes the
 * subscription. Each delivery's Standard Webhooks signature is verified on the raw body
 * before the workflow runs: a missing or wrong signature, or a timestamp more than five
 * minutes off, is answered 401 and starts nothing. The item is the delivery's `data` with
 * `type`, `event_id` (the `webhook-id`: the same on a retried delivery) and `timestamp`.
 */
export class PublishingGatewayEventTrigger implements INodeType {
	description: INodeTypeDescription = {
		displayName: 'Publishing Gateway Trigger',
		name: 'publishingGatewayEventTrigger',
		icon: {
			light: 'file:../../icons/gateway.svg',
			dark: 'file:../../icons/gateway.dark.svg',
		},
		group: ['trigger'],
		version: 1,
		subtitle: '={{ $parameter["events"].join(", ") }}',
		description:
			'Starts a workflow within seconds when an editor approves or requests changes, a post is published or a job needs attention (signed webhook deliveries)',
		defaults: { name: 'Publishing Gateway Trigger' },
		inputs: [],
		outputs: [NodeConnectionTypes.Main],
		credentials: [{ name: 'publishingGatewayApi', required: true }],
		webhooks: [
			{
				name: 'default',
				httpMethod: 'POST',
				responseMode: 'onReceived',
				path: 'webhook',
			},
		],
		properties: [
			{
				displayName: 'Events',
				name: 'events',
				type: 'multiOptions',
				options: EVENT_TYPES,
				default: ['approved'],
				required: true,
				description:
					'The events that start the workflow; the gateway delivers only these to this workflow',
			},
		],
	};

	webhookMethods = {
		default: {
			/** Whether the endpoint this node registered for this webhook URL is still at the
			 * gateway with these events; one with other events is deleted (made anew). */
			async checkExists(this: IHookFunctions): Promise<boolean> {
				setRetryWindow(this, ACTIVATION_RETRY_SECONDS);
				const url = this.getNodeWebhookUrl('default') as string;
				const endpoints = endpointsOf(this);
				const mine = endpoints[url];
				if (!mine) {
					return false;
				}
				try {
					const listed = (await listEndpoints(this)).find((e) => e.id === mine.id);
					if (listed && listed.url === url && sameEvents(listed.event_types, chosenEvents(this))) {
						return true;
					}
					if (listed) {
						await deleteEndpoint(this, mine.id);
					}
				} catch (error) {
					throw toNodeError(this, error);
				}
				delete endpoints[url];
				return false;
			},

			/** Subscribe this node's webhook URL: an endpoint of the same URL left behind (its
			 * secret lost, e.g. the workflow imported again) is deleted first, so the gateway
			 * never delivers one event twice to this workflow. */
			async create(this: IHookFunctions): Promise<boolean> {
				setRetryWindow(this, ACTIVATION_RETRY_SECONDS);
				const url = this.getNodeWebhookUrl('default') as string;
				const events = chosenEvents(this);
				try {
					for (const stale of await listEndpoints(this)) {
						if (stale.url === url) {
							await deleteEndpoint(this, String(stale.id));
						}
					}
					const created = await gatewayRequest(this, 'POST', '/v1/webhook-endpoints', {
						url,
						event_types: events,
						description:
							`n8n: workflow ${this.getWorkflow().id ?? ''} / ${this.getNode().name}`.slice(0, 200),
					});
					if (typeof created.secret !== 'string' || !created.secret.startsWith('whsec_')) {
						throw new NodeApiError(this.getNode(), created as JsonObject, {
							message: "the gateway did not show the new webhook endpoint's secret",
							description: 'Deactivate and activate the workflow again: the endpoint is made anew',
						});
					}
					// a POST whose answer was lost and that the retry sent again left a twin
					for (const twin of await listEndpoints(this)) {
						if (twin.url === url && twin.id !== created.id) {
							await deleteEndpoint(this, String(twin.id));
						}
					}
					endpointsOf(this)[url] = { id: String(created.id), secret: created.secret, events };
				} catch (error) {
					throw toNodeError(this, error);
				}
				return true;
			},

			/** Delete this webhook URL's endpoint (a 404: already gone, deleted all the same). */
			async delete(this: IHookFunctions): Promise<boolean> {
				setRetryWindow(this, ACTIVATION_RETRY_SECONDS);
				const url = this.getNodeWebhookUrl('default') as string;
				const endpoints = endpointsOf(this);
				const mine = endpoints[url];
				if (mine) {
					try {
						await deleteEndpoint(this, mine.id);
					} catch (error) {
						this.logger.warn(
							`Publishing Gateway Trigger: could not delete webhook endpoint ${mine.id}: ${(error as Error).message}`,
						);
						return false;
					}
				}
				delete endpoints[url];
				return true;
			},
		},
	};

	async webhook(this: IWebhookFunctions): Promise<IWebhookResponseData> {
		const request = this.getRequestObject();
		const rawBody = (request as unknown as { rawBody?: Buffer }).rawBody;
		const now = Math.floor(Date.now() / 1000);
		// the production and (while the editor listens) the test URL's endpoints: n8n's
		// webhook context gives the production URL for both, so each secret is tried
		let problem: string | null = 'no webhook endpoint registered: activate the workflow';
		for (const { secret } of Object.values(endpointsOf(this))) {
			problem = signatureProblem(secret, this.getHeaderData(), rawBody, now);
			if (problem === null) {
				break;
			}
		}
		if (problem !== null) {
			this.logger.warn(`Publishing Gateway Trigger: delivery refused (401): ${problem}`);
			this.getResponseObject()
				.status(401)
				.json({ status: 401, title: 'Unauthorized', detail: `signature: ${problem}` });
			return { noWebhookResponse: true };
		}
		const body = this.getBodyData();
		const type = String(body.type ?? '');
		if (!(this.getNodeParameter('events') as string[]).includes(type)) {
			return {}; // answered 200, nothing runs: an event this node no longer waits for
		}
		const data = (body.data ?? {}) as IDataObject;
		const eventId = String(data.event_id ?? this.getHeaderData()['webhook-id'] ?? '');
		return {
			workflowData: [
				this.helpers.returnJsonArray({
					...data,
					type,
					event_id: eventId,
					timestamp: body.timestamp ?? null,
				}),
			],
		};
	}
}
