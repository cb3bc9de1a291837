import type { IDataObject, IExecuteFunctions } from 'n8n-workflow';
import { NodeOperationError } from 'n8n-workflow';

import { gatewayRequest, jobPath } from './GatewayClient';

/** One image of the article input (n8n_workflows/examples/article.json, "images"). */
interface ImageInput extends IDataObject {
	slot: string;
	content_base64?: string;
	url?: string;
	binary_property?: string;
	filename?: string;
	alt_text?: string;
	caption?: string;
	title?: string;
}

const JOB_ID = /^[A-Za-z0-9._:-]{1,128}$/;
const SLOT = /^[A-Za-z0-9_-]{1,64}$/;
const AFTER_DRAFT = new Set(['draft_confirmed', 'verified']);
const AFTER_APPROVAL_REQUEST = new Set(['approval_pending', 'scheduled', 'published']);

/** The input's problems before any call, each as "pointer: message" (empty: valid). The gateway
 * checks again; this only keeps a malformed item from creating a job. */
export function inputProblems(jobId: string, input: IDataObject): string[] {
	const problems: string[] = [];
	if (!JOB_ID.test(jobId) || jobId === 'undefined' || jobId === 'null') {
		problems.push(
			`/job_id: 1 to 128 letters, digits, ".", "_", ":" or "-", got ${JSON.stringify(jobId)}`,
		);
	}
	const article = input.article as IDataObject | undefined;
	if (!article || typeof article !== 'object' || Array.isArray(article)) {
		problems.push('/article: an object with title and content is required');
	} else {
		for (const field of ['title', 'content']) {
			if (typeof article[field] !== 'string' || String(article[field]).trim() === '') {
				problems.push(`/article/${field}: a non-empty string is required`);
			}
		}
	}
	const images = (input.images ?? []) as ImageInput[];
	if (!Array.isArray(images)) {
		problems.push('/images: an array is required');
		return problems;
	}
	images.forEach((image, i) => {
		if (!image || typeof image.slot !== 'string' || !SLOT.test(image.slot)) {
			problems.push(`/images/${i}/slot: 1 to 64 letters, digits, "_" or "-" is required`);
		}
		const sources = ['content_base64', 'url', 'binary_property'].filter((k) => image?.[k]);
		if (sources.length !== 1) {
			problems.push(`/images/${i}: exactly one of content_base64, url and binary_property`);
		}
	});
	return problems;
}

/** The draft body (PUT /v1/jobs/{job_id}/draft) for the article and its image slots, as the
 * HTTP Request version of the pipeline builds it. */
export function draftBody(article: IDataObject, slots: string[]): IDataObject {
	const featured = (article.featured_slot as string | undefined) ?? slots[0];
	const body: IDataObject = {
		title: article.title,
		content: article.content,
		excerpt: article.excerpt ?? '',
		body_media: slots.filter((slot) => slot !== featured),
	};
	if (featured) {
		body.featured_media = { slot: featured };
	}
	for (const key of ['slug', 'categories', 'tags', 'seo']) {
		if (article[key] !== undefined && article[key] !== null) {
			body[key] = article[key];
		}
	}
	return body;
}

async function imageBody(
	context: IExecuteFunctions,
	itemIndex: number,
	image: ImageInput,
): Promise<IDataObject> {
	const body: IDataObject = {};
	for (const key of ['filename', 'alt_text', 'caption', 'title']) {
		if (image[key]) {
			body[key] = image[key];
		}
	}
	if (image.url) {
		body.source_url = image.url;
	} else if (image.binary_property) {
		const binary = context.helpers.assertBinaryData(itemIndex, image.binary_property);
		const buffer = await context.helpers.getBinaryDataBuffer(itemIndex, image.binary_property);
		body.content_base64 = buffer.toString('base64');
		body.filename = body.filename ?? binary.fileName;
	} else {
		body.content_base64 = image.content_base64;
	}
	return body;
}

function confirmedSlots(job: IDataObject): Set<string> {
	const rows = (job.operations ?? []) as IDataObject[];
	return new Set(
		rows
			.filter(
				(r) =>
					r.action === 'media' && r.state === 'CONFIRMED' && r.task_version === job.task_version,
			)
			.map((r) => String(r.slot)),
	);
}

/**
 * The combined operation for one item: PUT job → PUT media per slot → PUT draft → GET
 * verification (one repair when it does not verify) → POST approval-requests → POST
 * notifications (ready_for_approval). Each call carries its operation key on the gateway, so a
 * second run of the same item replays (200, nothing sent to WordPress) and a run after a
 * crash resumes: steps the job's phase and confirmed ledger rows show as done are skipped.
 *
 * Returns `{job_id, phase, post_id, link, resumed_from, steps: [{step, http_status}]}`.
 * Throws NodeOperationError for an invalid item (no call made) or a draft that does not verify
 * after one repair (editors are told "needs attention"), and NodeApiError for a refusal.
 */
export async function publishArticle(
	context: IExecuteFunctions,
	itemIndex: number,
	jobId: string,
	input: IDataObject,
): Promise<IDataObject> {
	const problems = inputProblems(jobId, input);
	if (problems.length > 0) {
		throw new NodeOperationError(context.getNode(), `invalid article: ${problems.join('; ')}`, {
			itemIndex,
		});
	}
	const article = input.article as IDataObject;
	const images = (input.images ?? []) as ImageInput[];
	const steps: IDataObject[] = [];
	const step = async (name: string, call: Promise<IDataObject>) => {
		const answer = await call;
		steps.push({ step: name, http_status: answer.http_status });
		return answer;
	};
	const job = await step(
		'job',
		gatewayRequest(context, 'PUT', jobPath(jobId), {
			site: (input.site as string) || 'blog',
			task_version: Number(input.task_version ?? 1),
		}),
	);
	const phase = String(job.phase ?? '');
	const resumedFrom = AFTER_APPROVAL_REQUEST.has(phase) || AFTER_DRAFT.has(phase) ? phase : null;
	let draft: IDataObject = { post_id: job.post_id };
	if (!AFTER_DRAFT.has(phase) && !AFTER_APPROVAL_REQUEST.has(phase)) {
		const done = confirmedSlots(job);
		for (const image of images) {
			if (done.has(image.slot)) {
				steps.push({ step: `media/${image.slot}`, http_status: 'done' });
				continue;
			}
			const body = await imageBody(context, itemIndex, image);
			await step(
				`media/${image.slot}`,
				gatewayRequest(
					context,
					'PUT',
					jobPath(jobId, `/media/${encodeURIComponent(image.slot)}`),
					body,
				),
			);
		}
		const slots = images.map((image) => image.slot);
		draft = await step(
			'draft',
			gatewayRequest(context, 'PUT', jobPath(jobId, '/draft'), draftBody(article, slots)),
		);
	}
	if (!AFTER_APPROVAL_REQUEST.has(phase)) {
		let verification = await step(
			'verify',
			gatewayRequest(context, 'GET', jobPath(jobId, '/verification')),
		);
		if (verification.ok !== true) {
			await step('repair', gatewayRequest(context, 'POST', jobPath(jobId, '/repair'), {}));
			verification = await step(
				'verify',
				gatewayRequest(context, 'GET', jobPath(jobId, '/verification')),
			);
		}
		if (verification.ok !== true) {
			const failed = Object.keys((verification.fields ?? {}) as IDataObject).join(', ');
			const reason = `the draft of job ${jobId} does not verify after one repair (${failed})`;
			await step(
				'notify/needs_attention',
				gatewayRequest(context, 'POST', jobPath(jobId, '/notifications'), {
					event: 'needs_attention',
					reason,
				}),
			);
			throw new NodeOperationError(context.getNode(), reason, { itemIndex });
		}
		await step(
			'approval_request',
			gatewayRequest(context, 'POST', jobPath(jobId, '/approval-requests'), {}),
		);
	}
	await step(
		'notify/ready_for_approval',
		gatewayRequest(context, 'POST', jobPath(jobId, '/notifications'), {
			event: 'ready_for_approval',
		}),
	);
	const final = await gatewayRequest(context, 'GET', jobPath(jobId));
	return {
		job_id: jobId,
		phase: final.phase,
		status: final.status,
		post_id: final.post_id ?? draft.post_id ?? null,
		link: draft.link ?? null,
		resumed_from: resumedFrom,
		steps,
	};
}
