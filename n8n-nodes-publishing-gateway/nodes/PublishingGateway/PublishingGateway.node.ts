import type {
	IDataObject,
	IExecuteFunctions,
	INodeExecutionData,
	INodeType,
	INodeTypeDescription,
} from 'n8n-workflow';
import { NodeConnectionTypes } from 'n8n-workflow';

import type { JobIdentity } from './Article';
import { publishArticle } from './Article';
import { articleFromFields, loadOptions } from './ArticleFields';
import { properties } from './Descriptions';
import {
	errorItemJson,
	gatewayRequest,
	inputRefusal,
	jobPath,
	RETRY,
	setRetryWindow,
	toNodeError,
} from './GatewayClient';

function jsonParameter(context: IExecuteFunctions, name: string, itemIndex: number): IDataObject {
	const value = context.getNodeParameter(name, itemIndex) as unknown;
	if (typeof value === 'string') {
		try {
			const parsed = JSON.parse(value) as unknown;
			if (parsed && typeof parsed === 'object' && !Array.isArray(parsed)) {
				return parsed as IDataObject;
			}
		} catch {
			throw inputRefusal(
				context.getNode(),
				`The ${name} is not valid JSON`,
				`${name}: not valid JSON`,
				[{ pointer: '', message: 'not valid JSON' }],
			);
		}
	}
	if (!value || typeof value !== 'object' || Array.isArray(value)) {
		throw inputRefusal(
			context.getNode(),
			`The ${name} is not a JSON object`,
			`${name}: a JSON object is required`,
			[{ pointer: '', message: 'a JSON object is required' }],
		);
	}
	return value as IDataObject;
}

/** Version 2: the job's site and task version are the node's parameters (the workflow
 * author's), never the article JSON's; version 1 reads them from the article. */
function identity(context: IExecuteFunctions, i: number): JobIdentity | null {
	if (context.getNode().typeVersion < 2) {
		return null;
	}
	const site = String(context.getNodeParameter('site', i) ?? '').trim();
	const taskVersion = Number(context.getNodeParameter('taskVersion', i));
	const errors = [];
	if (site === '') {
		errors.push({ pointer: '/site', message: "the node's Site is empty" });
	}
	if (!Number.isInteger(taskVersion) || taskVersion < 1) {
		errors.push({
			pointer: '/task_version',
			message: "the node's Task Version must be an integer of at least 1",
		});
	}
	if (errors.length > 0) {
		throw inputRefusal(
			context.getNode(),
			'The node parameters are invalid',
			errors.map((e) => e.message).join('; '),
			errors,
		);
	}
	return { site, taskVersion };
}

/** Publish Article's input `{article, images}`: version 3's fields, or the Article JSON. */
function articleInput(context: IExecuteFunctions, i: number): IDataObject {
	const fromFields =
		context.getNode().typeVersion >= 3 &&
		context.getNodeParameter('articleInput', i, 'fields') === 'fields';
	return fromFields ? articleFromFields(context, i) : jsonParameter(context, 'article', i);
}

async function mediaBody(context: IExecuteFunctions, i: number): Promise<IDataObject> {
	const fields = context.getNodeParameter('mediaFields', i, {}) as IDataObject;
	const body: IDataObject = Object.fromEntries(Object.entries(fields).filter(([, v]) => v !== ''));
	const source = context.getNodeParameter('source', i) as string;
	if (source === 'url') {
		body.source_url = context.getNodeParameter('sourceUrl', i) as string;
	} else if (source === 'base64') {
		body.content_base64 = context.getNodeParameter('contentBase64', i) as string;
	} else {
		const property = context.getNodeParameter('binaryPropertyName', i) as string;
		const binary = context.helpers.assertBinaryData(i, property);
		const buffer = await context.helpers.getBinaryDataBuffer(i, property);
		body.content_base64 = buffer.toString('base64');
		body.filename = body.filename ?? binary.fileName;
	}
	return body;
}

/** Version 3's Return All / Limit (at most `limit` jobs); versions 1 and 2 return all. */
function jobLimit(context: IExecuteFunctions, i: number): number {
	if (context.getNode().typeVersion < 3 || context.getNodeParameter('returnAll', i, false)) {
		return Infinity;
	}
	return Number(context.getNodeParameter('limit', i, 50));
}

async function listJobs(context: IExecuteFunctions, i: number): Promise<IDataObject[]> {
	const wanted = jobLimit(context, i);
	const qs: IDataObject = { limit: Math.min(500, wanted) };
	const phase = context.getNodeParameter('phase', i, '') as string;
	const statuses = context.getNodeParameter('statuses', i, '') as string;
	if (phase) {
		qs.phase = phase;
	}
	if (context.getNodeParameter('unfinished', i, false) === true) {
		qs.unfinished = 'true';
	}
	if (statuses) {
		qs.status = statuses;
	}
	const jobs: IDataObject[] = [];
	for (;;) {
		const page = await gatewayRequest(context, 'GET', '/v1/jobs', undefined, qs);
		jobs.push(...((page.jobs ?? []) as IDataObject[]));
		if (jobs.length >= wanted) {
			return jobs.slice(0, wanted);
		}
		if (page.next_after === null || page.next_after === undefined) {
			return jobs;
		}
		qs.after = page.next_after;
	}
}

async function runOne(context: IExecuteFunctions, i: number): Promise<IDataObject | IDataObject[]> {
	const resource = context.getNodeParameter('resource', i) as string;
	const operation = context.getNodeParameter('operation', i) as string;
	if (resource === 'job' && operation === 'list') {
		return await listJobs(context, i);
	}
	const jobId = String(context.getNodeParameter('jobId', i) ?? '');
	const call = async (method: 'GET' | 'PUT' | 'POST', rest: string, body?: IDataObject) => ({
		job_id: jobId,
		...(await gatewayRequest(context, method, jobPath(jobId, rest), body)),
	});
	switch (`${resource}:${operation}`) {
		case 'article:publishArticle':
			return await publishArticle(
				context,
				i,
				jobId,
				articleInput(context, i),
				identity(context, i),
			);
		case 'job:put':
			return await call('PUT', '', {
				site: context.getNodeParameter('site', i) as string,
				task_version: context.getNodeParameter('taskVersion', i) as number,
			});
		case 'job:get':
			return await call('GET', '');
		case 'job:cancel':
			return await call('POST', '/cancel', {
				reason: context.getNodeParameter('reason', i) as string,
			});
		case 'job:recover':
			return await call('POST', '/recover', {});
		case 'job:resume':
			return await call('POST', '/resume', {});
		case 'media:upload': {
			const slot = context.getNodeParameter('slot', i) as string;
			return await call('PUT', `/media/${encodeURIComponent(slot)}`, await mediaBody(context, i));
		}
		case 'draft:put':
			return await call('PUT', '/draft', jsonParameter(context, 'draft', i));
		case 'draft:verify':
			return await call('GET', '/verification');
		case 'block:put': {
			const name = context.getNodeParameter('blockName', i) as string;
			return await call('PUT', `/blocks/${encodeURIComponent(name)}`, {
				html: context.getNodeParameter('html', i) as string,
			});
		}
		case 'approval:request':
			return await call('POST', '/approval-requests', {});
		case 'publish:publishApproved':
			return await call('POST', '/publish', {});
		case 'notification:send': {
			const event = context.getNodeParameter('event', i) as string;
			const body: IDataObject = { event };
			if (event === 'needs_attention') {
				body.reason = context.getNodeParameter('notificationReason', i) as string;
			}
			return await call('POST', '/notifications', body);
		}
		default:
			throw inputRefusal(
				context.getNode(),
				'Unknown operation',
				`unknown operation ${resource}:${operation}`,
				[{ pointer: '/operation', message: 'unknown' }],
			);
	}
}

/**
 * The Publishing Gateway as one n8n node: every call goes through the gateway, which holds the
 * WordPress credentials, deduplicates by operation key, reconciles unknown outcomes and reads
 * drafts back. There is no approve operation: editors approve on the gateway's review page, and
 * Publish publishes only what they approved (so an AI Agent using the node as a tool cannot
 * publish on its own).
 *
 * Version 3 (the default): Publish Article takes the article as fields (title, content,
 * excerpt, SEO, featured image, categories and tags listed from the site through the
 * gateway) or as JSON (Article Input); Job: Get Many has Return All / Limit. Version 2: Site
 * and Task Version are node parameters the workflow's author sets, and an article JSON that
 * names them is refused (in tool mode the article is the model's); versions 2 and 3 keep that.
 * Version 1 reads them from the article JSON. Options → Retry For (every version) bounds how
 * long each gateway call is retried (GatewayClient.RETRY).
 *
 * A failed item: with Continue On Fail / Continue (using error output), an item
 * `{error: {type, title, status, detail, errors, retryable, retry_after, next_step, ...},
 * message}`, which n8n routes to the error output; otherwise a NodeApiError with the HTTP
 * status (a NodeOperationError for an item refused before any call). As an AI Agent's tool,
 * the `{error, message}` item is the tool's answer, so the model reads the refusal.
 */
export class PublishingGateway implements INodeType {
	description: INodeTypeDescription = {
		displayName: 'Publishing Gateway',
		name: 'publishingGateway',
		icon: {
			light: 'file:../../icons/gateway.svg',
			dark: 'file:../../icons/gateway.dark.svg',
		},
		group: ['output'],
		version: [1, 2, 3],
		defaultVersion: 3,
		subtitle: '={{ $parameter["operation"] + ": " + $parameter["resource"] }}',
		description:
			'Exactly-once WordPress drafts, media and approval-gated publishing through the Publishing Gateway',
		defaults: { name: 'Publishing Gateway' },
		usableAsTool: true,
		inputs: [NodeConnectionTypes.Main],
		outputs: [NodeConnectionTypes.Main],
		credentials: [{ name: 'publishingGatewayApi', required: true }],
		properties,
	};

	methods = { loadOptions };

	async execute(this: IExecuteFunctions): Promise<INodeExecutionData[][]> {
		const items = this.getInputData();
		const returned: INodeExecutionData[] = [];
		const asTool = this.getNode().type.endsWith('Tool');
		for (let i = 0; i < items.length; i++) {
			try {
				const options = this.getNodeParameter('options', i, {}) as IDataObject;
				setRetryWindow(this, Number(options.retrySeconds ?? RETRY.windowSeconds));
				const answer = await runOne(this, i);
				for (const json of Array.isArray(answer) ? answer : [answer]) {
					returned.push({ json, pairedItem: { item: i } });
				}
			} catch (error) {
				// exactly {error, message}: n8n routes it to the error output. As an AI Agent's
				// tool the node answers it too: the model reads why (n8n would hand it nothing)
				if (this.continueOnFail() || asTool) {
					returned.push({ json: errorItemJson(error), pairedItem: { item: i } });
					continue;
				}
				throw toNodeError(this, error, i);
			}
		}
		return [returned];
	}
}
