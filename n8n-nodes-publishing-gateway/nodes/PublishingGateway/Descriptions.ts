import type { IDisplayOptions, INodeProperties } from 'n8n-workflow';

import { articleFieldProperties } from './ArticleFields';

function show(resource: string, operations?: string[]): IDisplayOptions {
	const shown: IDisplayOptions['show'] = { resource: [resource] };
	if (operations) {
		shown.operation = operations;
	}
	return { show: shown };
}

/** Every parameter of the node (resources, operations and their fields). */
export const properties: INodeProperties[] = [
	{
		displayName: 'Resource',
		name: 'resource',
		type: 'options',
		noDataExpression: true,
		options: [
			{ name: 'Approval', value: 'approval' },
			{ name: 'Article', value: 'article' },
			{ name: 'Block', value: 'block' },
			{ name: 'Draft', value: 'draft' },
			{ name: 'Job', value: 'job' },
			{ name: 'Media', value: 'media' },
			{ name: 'Notification', value: 'notification' },
			{ name: 'Publish', value: 'publish' },
		],
		default: 'article',
	},
	{
		displayName: 'Operation',
		name: 'operation',
		type: 'options',
		noDataExpression: true,
		displayOptions: show('article'),
		default: 'publishArticle',
		options: [
			{
				name: 'Publish Article',
				value: 'publishArticle',
				action: 'Publish an article up to approval',
				description:
					'Job, media, draft, verify, request approval and tell editors, for one item; a second run resumes where the first stopped',
			},
		],
	},
	{
		displayName: 'Operation',
		name: 'operation',
		type: 'options',
		noDataExpression: true,
		displayOptions: show('job'),
		default: 'put',
		options: [
			{
				name: 'Cancel',
				value: 'cancel',
				action: 'Cancel a job',
				description: 'Stop every further side effect of the job',
			},
			{
				name: 'Create or Bump',
				value: 'put',
				action: 'Create or bump a job',
				description: 'Create the job, return it unchanged, or bump its task version',
			},
			{
				name: 'Get',
				value: 'get',
				action: 'Get a job',
				description: 'The job with its ledger rows',
			},
			{
				name: 'Get Many',
				value: 'list',
				action: 'Get many jobs',
				description: "The tenant's jobs (one item each), by phase, status or unfinished",
			},
			{
				name: 'Recover',
				value: 'recover',
				action: 'Recover a job',
				description: 'Reconcile every operation whose outcome is unknown',
			},
			{
				name: 'Resume',
				value: 'resume',
				action: 'Resume a job',
				description: 'Start the job again from its saved resume point',
			},
		],
	},
	{
		displayName: 'Operation',
		name: 'operation',
		type: 'options',
		noDataExpression: true,
		displayOptions: show('media'),
		default: 'upload',
		options: [
			{
				name: 'Upload',
				value: 'upload',
				action: 'Upload an image',
				description: 'Upload one image of a slot exactly once',
			},
		],
	},
	{
		displayName: 'Operation',
		name: 'operation',
		type: 'options',
		noDataExpression: true,
		displayOptions: show('draft'),
		default: 'put',
		options: [
			{
				name: 'Put',
				value: 'put',
				action: 'Create the draft',
				description: "Create the job's draft once, read it back and verify it",
			},
			{
				name: 'Verify',
				value: 'verify',
				action: 'Verify the draft',
				description: 'Read the post back from WordPress and compare it field by field',
			},
		],
	},
	{
		displayName: 'Operation',
		name: 'operation',
		type: 'options',
		noDataExpression: true,
		displayOptions: show('block'),
		default: 'put',
		options: [
			{
				name: 'Put',
				value: 'put',
				action: 'Put a block',
				description: 'Insert or replace one named block of the post',
			},
		],
	},
	{
		displayName: 'Operation',
		name: 'operation',
		type: 'options',
		noDataExpression: true,
		displayOptions: show('approval'),
		default: 'request',
		options: [
			{
				name: 'Request',
				value: 'request',
				action: 'Request approval',
				description: 'Ask editors to approve the verified draft (they approve on the review page)',
			},
		],
	},
	{
		displayName: 'Operation',
		name: 'operation',
		type: 'options',
		noDataExpression: true,
		displayOptions: show('publish'),
		default: 'publishApproved',
		options: [
			{
				name: 'Publish Approved',
				value: 'publishApproved',
				action: 'Publish an approved draft',
				description: 'Publish only what an editor approved',
			},
		],
	},
	{
		displayName: 'Operation',
		name: 'operation',
		type: 'options',
		noDataExpression: true,
		displayOptions: show('notification'),
		default: 'send',
		options: [
			{
				name: 'Send',
				value: 'send',
				action: 'Notify editors',
				description: 'Decide a notification once and deliver it to the editors',
			},
		],
	},
	{
		displayName: 'Job ID',
		name: 'jobId',
		type: 'string',
		default: '={{ $json.job_id }}',
		required: true,
		displayOptions: { hide: { operation: ['list'] } },
		description:
			'From the item or the workflow (one job per item or per conversation), never from an AI model: it makes the operation keys',
	},
	// ----------------------------------------------------------------- article
	{
		displayName: 'Site',
		name: 'site',
		type: 'string',
		default: 'blog',
		required: true,
		displayOptions: { show: { '@version': [2, 3], resource: ['article'] } },
		description:
			"The job's site in the gateway (gateway sites add --name). Set by the workflow, never by the article or a model.",
	},
	{
		displayName: 'Task Version',
		name: 'taskVersion',
		type: 'number',
		default: 1,
		required: true,
		typeOptions: { minValue: 1 },
		displayOptions: { show: { '@version': [2, 3], resource: ['article'] } },
		description:
			"The job's version: a higher one bumps the job (new operation keys, the same post updated). Set by the workflow, never by the article or a model.",
	},
	{
		displayName: 'Article',
		name: 'article',
		type: 'json',
		default: '={{ { article: $json.article, images: $json.images } }}',
		displayOptions: { show: { '@version': [2], resource: ['article'] } },
		description:
			'The article as JSON: article (title, content, excerpt, seo, featured_slot, slug, categories, tags) and images (slot; one of content_base64, URL or binary_property; filename, alt_text, title, caption). It may not name site or task_version.',
	},
	{
		displayName: 'Article',
		name: 'article',
		type: 'json',
		default: '={{ $json }}',
		displayOptions: { show: { '@version': [1], resource: ['article'] } },
		description:
			'The article as JSON, shaped like the sample article of n8n_workflows/examples: task_version, site, article (title, content, excerpt, seo, featured_slot, ...) and images (slot; one of content_base64, URL or binary_property; filename, alt_text, title, caption)',
	},
	{
		displayName: 'Article',
		name: 'article',
		type: 'json',
		default: '={{ { article: $json.article, images: $json.images } }}',
		displayOptions: { show: { '@version': [3], resource: ['article'], articleInput: ['json'] } },
		description:
			'The article as JSON: article (title, content, excerpt, seo, featured_slot, slug, categories, tags) and images (slot; one of content_base64, URL or binary_property; filename, alt_text, title, caption). It may not name site or task_version.',
	},
	...articleFieldProperties,
	// ----------------------------------------------------------------- job
	{
		displayName: 'Return All',
		name: 'returnAll',
		type: 'boolean',
		default: false,
		displayOptions: { show: { '@version': [3], resource: ['job'], operation: ['list'] } },
		description: 'Whether to return all results or only up to a given limit',
	},
	{
		displayName: 'Limit',
		name: 'limit',
		type: 'number',
		typeOptions: { minValue: 1 },
		default: 50,
		displayOptions: {
			show: { '@version': [3], resource: ['job'], operation: ['list'], returnAll: [false] },
		},
		description: 'Max number of results to return',
	},
	{
		displayName: 'Phase',
		name: 'phase',
		type: 'string',
		default: 'approval_pending',
		displayOptions: show('job', ['list']),
		description: 'One phase (approval_pending, published, ...); empty: any',
	},
	{
		displayName: 'Unfinished Only',
		name: 'unfinished',
		type: 'boolean',
		default: false,
		displayOptions: show('job', ['list']),
		description:
			'Whether to list only the jobs a run still has work on (in progress, unknown, or verified without an approval request)',
	},
	{
		displayName: 'Statuses',
		name: 'statuses',
		type: 'string',
		default: '',
		placeholder: 'in_progress,unknown',
		displayOptions: show('job', ['list']),
		description: 'Comma-separated statuses; empty: any',
	},
	{
		displayName: 'Site',
		name: 'site',
		type: 'string',
		default: '={{ $json.site || "blog" }}',
		displayOptions: show('job', ['put']),
		description: "The site's name in the gateway (gateway sites add --name)",
	},
	{
		displayName: 'Task Version',
		name: 'taskVersion',
		type: 'number',
		default: 1,
		typeOptions: { minValue: 1 },
		displayOptions: show('job', ['put']),
		description: 'A new version makes new operation keys (a new draft)',
	},
	{
		displayName: 'Cancel Reason',
		name: 'reason',
		type: 'string',
		default: '',
		required: true,
		displayOptions: show('job', ['cancel']),
	},
	// ----------------------------------------------------------------- media
	{
		displayName: 'Slot',
		name: 'slot',
		type: 'string',
		default: '={{ $json.slot }}',
		required: true,
		displayOptions: show('media'),
		description: "The image's place in the article (hero, diagram, ...)",
	},
	{
		displayName: 'Image From',
		name: 'source',
		type: 'options',
		options: [
			{ name: 'Binary Property', value: 'binary' },
			{ name: 'URL', value: 'url' },
			{ name: 'Base64', value: 'base64' },
		],
		default: 'binary',
		displayOptions: show('media'),
	},
	{
		displayName: 'Input Binary Field',
		name: 'binaryPropertyName',
		type: 'string',
		default: 'data',
		displayOptions: { show: { resource: ['media'], source: ['binary'] } },
	},
	{
		displayName: 'Image URL',
		name: 'sourceUrl',
		type: 'string',
		default: '',
		displayOptions: { show: { resource: ['media'], source: ['url'] } },
		description: 'The gateway downloads it (http or https, public addresses only)',
	},
	{
		displayName: 'Base64 Content',
		name: 'contentBase64',
		type: 'string',
		default: '',
		displayOptions: { show: { resource: ['media'], source: ['base64'] } },
	},
	{
		displayName: 'Additional Fields',
		name: 'mediaFields',
		type: 'collection',
		placeholder: 'Add Field',
		default: {},
		displayOptions: show('media'),
		options: [
			{
				displayName: 'Alt Text',
				name: 'alt_text',
				type: 'string',
				default: '',
			},
			{ displayName: 'Caption', name: 'caption', type: 'string', default: '' },
			{
				displayName: 'File Name',
				name: 'filename',
				type: 'string',
				default: '',
			},
			{ displayName: 'Title', name: 'title', type: 'string', default: '' },
		],
	},
	// ----------------------------------------------------------------- draft
	{
		displayName: 'Draft',
		name: 'draft',
		type: 'json',
		default: '={{ $json.draft }}',
		displayOptions: show('draft', ['put']),
		description:
			'{title, content, excerpt, slug, featured_media: {slot}, body_media: [slot], categories, tags, seo} (docs/api.md, PUT /v1/jobs/{job_id}/draft)',
	},
	// ----------------------------------------------------------------- block
	{
		displayName: 'Block Name',
		name: 'blockName',
		type: 'string',
		default: '',
		required: true,
		displayOptions: show('block'),
	},
	{
		displayName: 'HTML',
		name: 'html',
		type: 'string',
		typeOptions: { rows: 4 },
		default: '',
		required: true,
		displayOptions: show('block'),
	},
	// ----------------------------------------------------------------- notification
	{
		displayName: 'Event',
		name: 'event',
		type: 'options',
		options: [
			{ name: 'Needs Attention', value: 'needs_attention' },
			{ name: 'Published', value: 'published' },
			{ name: 'Ready for Approval', value: 'ready_for_approval' },
		],
		default: 'ready_for_approval',
		displayOptions: show('notification'),
	},
	{
		displayName: 'Reason',
		name: 'notificationReason',
		type: 'string',
		default: '',
		displayOptions: {
			show: { resource: ['notification'], event: ['needs_attention'] },
		},
		description: 'What is wrong, in words (required for Needs Attention)',
	},
	// ----------------------------------------------------------------- every operation
	{
		displayName: 'Options',
		name: 'options',
		type: 'collection',
		placeholder: 'Add Option',
		default: {},
		options: [
			{
				displayName: 'Retry For (Seconds)',
				name: 'retrySeconds',
				type: 'number',
				typeOptions: { minValue: 0 },
				default: 120, // RETRY.windowSeconds (the linter wants a literal)
				description:
					'How long each gateway call is retried while the gateway cannot be reached or answers a retryable problem (429, 503, retryable: true), counted from its first attempt. The default outlasts a gateway restart; 0 sends each call once.',
			},
		],
	},
];
