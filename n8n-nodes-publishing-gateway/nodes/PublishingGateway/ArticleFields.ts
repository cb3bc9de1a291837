import type {
	IDataObject,
	IExecuteFunctions,
	ILoadOptionsFunctions,
	INodeProperties,
	INodePropertyOptions,
} from 'n8n-workflow';
import { NodeOperationError } from 'n8n-workflow';

import { gatewayRequest, setRetryWindow } from './GatewayClient';

/**
 * Node version 3's Publish Article: the article as fields, as n8n's own WordPress node has
 * them (title, content, excerpt, SEO, featured image, categories and tags listed from the
 * site), or as raw JSON (Article Input: JSON, version 2's shape). The categories and tags
 * come from the gateway's read-only listing (docs/api.md, `GET
 * /v1/sites/{site}/terms/{taxonomy}`): n8n never holds a WordPress credential.
 */

const FIELDS = { show: { '@version': [3], resource: ['article'], articleInput: ['fields'] } };
const fields = (extra: IDataObject = {}) => ({
	show: { ...FIELDS.show, ...extra } as Record<string, Array<string | number | boolean>>,
});

/** How long a list in the editor waits for the gateway (seconds): a form, not a run. */
const LIST_RETRY_SECONDS = 10;

export const articleFieldProperties: INodeProperties[] = [
	{
		displayName: 'Article Input',
		name: 'articleInput',
		type: 'options',
		noDataExpression: true,
		options: [
			{
				name: 'Fields',
				value: 'fields',
				description: 'Title, content, SEO, featured image, categories and tags as fields',
			},
			{
				name: 'JSON',
				value: 'json',
				description: 'The whole article as JSON: {article, images}, as in node version 2',
			},
		],
		default: 'fields',
		displayOptions: { show: { '@version': [3], resource: ['article'] } },
	},
	{
		displayName: 'Title',
		name: 'title',
		type: 'string',
		default: '',
		required: true,
		displayOptions: FIELDS,
	},
	{
		displayName: 'Content',
		name: 'content',
		type: 'string',
		typeOptions: { rows: 8 },
		default: '',
		required: true,
		displayOptions: FIELDS,
		description:
			'HTML. {{media:SLOT}} places an image of the article, the featured one included ({{media:hero}} with the Featured Image Slot hero).',
	},
	{
		displayName: 'Excerpt',
		name: 'excerpt',
		type: 'string',
		typeOptions: { rows: 2 },
		default: '',
		displayOptions: FIELDS,
	},
	{
		displayName: 'SEO Title',
		name: 'seoTitle',
		type: 'string',
		default: '',
		displayOptions: FIELDS,
		description: "The post's SEO title (Rank Math)",
	},
	{
		displayName: 'SEO Description',
		name: 'seoDescription',
		type: 'string',
		default: '',
		displayOptions: FIELDS,
		description: "The post's meta description (Rank Math)",
	},
	{
		displayName: 'Focus Keyword',
		name: 'focusKeyword',
		type: 'string',
		default: '',
		displayOptions: FIELDS,
		description: "The post's focus keyword (Rank Math)",
	},
	{
		displayName: 'Category Names or IDs',
		name: 'categories',
		type: 'multiOptions',
		typeOptions: { loadOptionsMethod: 'getCategories', loadOptionsDependsOn: ['site'] },
		default: [],
		displayOptions: FIELDS,
		description:
			'Listed from the Site through the gateway. Choose from the list, or specify IDs using an <a href="https://docs.n8n.io/code/expressions/">expression</a>.',
	},
	{
		displayName: 'Tag Names or IDs',
		name: 'tags',
		type: 'multiOptions',
		typeOptions: { loadOptionsMethod: 'getTags', loadOptionsDependsOn: ['site'] },
		default: [],
		displayOptions: FIELDS,
		description:
			'Listed from the Site through the gateway; an expression may also give new tag names (created once). Choose from the list, or specify IDs using an <a href="https://docs.n8n.io/code/expressions/">expression</a>.',
	},
	{
		displayName: 'Featured Image',
		name: 'featuredImage',
		type: 'options',
		options: [
			{ name: 'None', value: 'none' },
			{ name: 'From Binary Property', value: 'binary' },
			{ name: 'From URL', value: 'url' },
		],
		default: 'none',
		displayOptions: FIELDS,
	},
	{
		displayName: 'Featured Image URL',
		name: 'featuredImageUrl',
		type: 'string',
		default: '',
		required: true,
		displayOptions: fields({ featuredImage: ['url'] }),
		description: 'The gateway downloads it (http or https, public addresses only)',
	},
	{
		displayName: 'Featured Image Binary Field',
		name: 'featuredImageBinary',
		type: 'string',
		default: 'data',
		required: true,
		displayOptions: fields({ featuredImage: ['binary'] }),
	},
	{
		displayName: 'Featured Image Slot',
		name: 'featuredSlot',
		type: 'string',
		default: 'hero',
		displayOptions: fields({ featuredImage: ['binary', 'url'] }),
		description: "The image's slot: {{media:hero}} in the content places it in the body too",
	},
	{
		displayName: 'Featured Image Alt Text',
		name: 'featuredAlt',
		type: 'string',
		default: '',
		displayOptions: fields({ featuredImage: ['binary', 'url'] }),
	},
	{
		displayName: 'Additional Fields',
		name: 'articleFields',
		type: 'collection',
		placeholder: 'Add Field',
		default: {},
		displayOptions: FIELDS,
		options: [
			{
				displayName: 'More Images (JSON)',
				name: 'images',
				type: 'json',
				default: '[]',
				description:
					"Images placed by {{media:SLOT}}, shaped like the Article JSON's images: each a slot, one source (its URL, content_base64 or binary_property), and alt_text, caption, title, filename",
			},
			{
				displayName: 'Slug',
				name: 'slug',
				type: 'string',
				default: '',
			},
		],
	},
];

function text(context: IExecuteFunctions, name: string, i: number): string {
	return String(context.getNodeParameter(name, i, '') ?? '');
}

function moreImages(context: IExecuteFunctions, i: number, value: unknown): IDataObject[] {
	const parsed = typeof value === 'string' ? (JSON.parse(value || '[]') as unknown) : value;
	if (!Array.isArray(parsed)) {
		throw new NodeOperationError(context.getNode(), 'More Images must be a JSON array', {
			itemIndex: i,
		});
	}
	return parsed as IDataObject[];
}

/** The Publish Article input `{article, images}` (version 2's JSON shape) from the fields of
 * item `i`: the featured image first (its slot the article's `featured_slot`), then More
 * Images; empty SEO fields are sent empty, an empty slug not at all. */
export function articleFromFields(context: IExecuteFunctions, i: number): IDataObject {
	const extra = context.getNodeParameter('articleFields', i, {}) as IDataObject;
	const article: IDataObject = {
		title: text(context, 'title', i),
		content: text(context, 'content', i),
		excerpt: text(context, 'excerpt', i),
		seo: {
			title: text(context, 'seoTitle', i),
			description: text(context, 'seoDescription', i),
			focus_keyword: text(context, 'focusKeyword', i),
		},
	};
	for (const name of ['categories', 'tags']) {
		const chosen = context.getNodeParameter(name, i, []) as Array<string | number>;
		if (chosen.length > 0) {
			// ids stay numbers (the gateway reads a string as a name)
			article[name] = chosen.map((v) => (/^\d+$/.test(String(v)) ? Number(v) : v));
		}
	}
	if (extra.slug) {
		article.slug = extra.slug;
	}
	const images: IDataObject[] = [];
	const source = context.getNodeParameter('featuredImage', i, 'none') as string;
	if (source !== 'none') {
		const slot = text(context, 'featuredSlot', i) || 'hero';
		const image: IDataObject = { slot };
		if (source === 'url') {
			image.url = text(context, 'featuredImageUrl', i);
		} else {
			image.binary_property = text(context, 'featuredImageBinary', i);
		}
		const alt = text(context, 'featuredAlt', i);
		if (alt) {
			image.alt_text = alt;
		}
		images.push(image);
		article.featured_slot = slot;
	}
	images.push(...moreImages(context, i, extra.images ?? '[]'));
	return { article, images };
}

async function listTerms(
	context: ILoadOptionsFunctions,
	taxonomy: 'categories' | 'tags',
): Promise<INodePropertyOptions[]> {
	const site = String(context.getCurrentNodeParameter('site') ?? '').trim();
	if (site === '' || site.startsWith('=')) {
		throw new NodeOperationError(
			context.getNode(),
			`Set Site to a fixed site name to list its ${taxonomy} (an expression is known only when the workflow runs)`,
		);
	}
	setRetryWindow(context, LIST_RETRY_SECONDS);
	const path = `/v1/sites/${encodeURIComponent(site)}/terms/${taxonomy}`;
	const answer = await gatewayRequest(context, 'GET', path);
	const terms = (answer.terms ?? []) as Array<{ id: number; name: string; parent: number }>;
	const names = new Map(terms.map((t) => [t.id, t.name]));
	return terms
		.map((t) => ({
			name: t.parent && names.has(t.parent) ? `${names.get(t.parent)} › ${t.name}` : t.name,
			value: t.id,
			description: `ID ${t.id}`,
		}))
		.sort((a, b) => a.name.localeCompare(b.name));
}

/** The node's `methods.loadOptions`: the site's categories and tags through the gateway. */
export const loadOptions = {
	async getCategories(this: ILoadOptionsFunctions): Promise<INodePropertyOptions[]> {
		return await listTerms(this, 'categories');
	},
	async getTags(this: ILoadOptionsFunctions): Promise<INodePropertyOptions[]> {
		return await listTerms(this, 'tags');
	},
};
