import type { IDataObject, IExecuteFunctions } from 'n8n-workflow';
import {
	GatewayFailure,
	gatewayRequest,
	inputRefusal,
	jobPath,
	PROBLEM_BASE,
	toNodeError,
} from './GatewayClient';

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
	/** set by the gateway's resume input: the slot's upload is in the ledger (no source) */
	uploaded?: boolean;
}

/** An image a resumed run only references: the gateway's resume input says its upload is in
 * the ledger (`uploaded: true`, its `content_sha256`) and gives no source. */
function uploadedOnly(image: ImageInput): boolean {
	return image.uploaded === true && !image.content_base64 && !image.url && !image.binary_property;
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
		if (sources.length !== 1 && !(image && uploadedOnly(image))) {
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
): Promise<IDataObject | null> {
	if (uploadedOnly(image)) {
		return null;
	}
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

/**
 * `PUT /v1/jobs/{job_id}/resume-point`: what a resume of this version needs (the article, each
 * image's URL or only its slot, never bytes), so that `recover_job` can run the job again
 * after a stop. Not the article itself: a refusal (e.g. 413 past the gateway's 256 KiB) is
 * recorded in `steps` and the run goes on.
 */
async function saveResumePoint(
	context: IExecuteFunctions,
	jobId: string,
	article: IDataObject,
	images: ImageInput[],
	steps: IDataObject[],
): Promise<void> {
	const kept = images.map((image) => {
		const entry: IDataObject = { slot: image.slot };
		for (const key of ['url', 'filename', 'alt_text', 'title', 'caption']) {
			if (image[key]) {
				entry[key] = image[key];
			}
		}
		return entry;
	});
	try {
		const answer = await gatewayRequest(context, 'PUT', jobPath(jobId, '/resume-point'), {
			article,
			images: kept,
		});
		steps.push({ step: 'resume_point', http_status: answer.http_status });
	} catch (error) {
		if (!(error instanceof GatewayFailure) || error.report.retryable === true) {
			throw toNodeError(context, error);
		}
		steps.push({ step: 'resume_point', http_status: error.status, problem: error.report.type });
	}
}

/** The job's identity: its site and task version. In node version 2 the workflow's author
 * sets them (node parameters); in version 1 they come from the article JSON. */
export interface JobIdentity {
	site: string;
	taskVersion: number;
}

/** Members an article JSON may not carry in node version 2: the job's identity is the
 * workflow's (a model filling the article in tool mode proposes content only). */
const IDENTITY_MEMBERS = ['site', 'task_version'];

function refuseIdentityInArticle(
	context: IExecuteFunctions,
	jobId: string,
	input: IDataObject,
): void {
	const errors = IDENTITY_MEMBERS.filter((key) => input[key] !== undefined).map((key) => ({
		pointer: `/${key}`,
		message: `set by the workflow (the node's ${key === 'site' ? 'Site' : 'Task Version'} parameter), never by the article`,
	}));
	if (input.job_id !== undefined && input.job_id !== null && String(input.job_id) !== jobId) {
		errors.push({
			pointer: '/job_id',
			message: `the node's Job ID is ${JSON.stringify(jobId)}: the article may not name another job`,
		});
	}
	if (errors.length > 0) {
		throw inputRefusal(
			context.getNode(),
			"The article names the job's identity",
			`the article JSON carries ${errors.map((e) => e.pointer.slice(1)).join(' and ')}, which only the workflow sets (the node's Site and Task Version; a version bump is the workflow's Task Version, never the article's); nothing was sent`,
			errors,
			'n8n-identity-in-article',
			"remove site and task_version from the article JSON; the node's Site and Task Version parameters set them",
		);
	}
}

/**
 * The combined operation for one item: POST articles/validate (the whole article checked,
 * nothing written: the draft, category and tag names looked up read-only in the site, each
 * image decoded or its URL probed) → PUT job → PUT media per slot → PUT draft → GET verification (one repair
 * when it does not verify) → POST approval-requests → POST notifications
 * (ready_for_approval). Every step's request is sent on every run and the gateway decides: a
 * replay (200, nothing sent to WordPress), a resume after a crash, or a refusal such as 422
 * `operation-key-reused` when the same job version comes with changed content. Only the
 * verification and the approval request are skipped, when the draft was answered from its
 * stored receipt (the same request, so the same digest) and the job already awaits approval.
 *
 * Returns `{job_id, task_version, phase, status, post_id, link, resumed_from, steps: [{step,
 * http_status}]}`. Throws {@link GatewayFailure} for an invalid item (no call made), a
 * refusal, or a draft that does not verify after one repair (editors are told "needs
 * attention").
 */
export async function publishArticle(
	context: IExecuteFunctions,
	itemIndex: number,
	jobId: string,
	input: IDataObject,
	identity: JobIdentity | null,
): Promise<IDataObject> {
	if (identity !== null) {
		refuseIdentityInArticle(context, jobId, input);
	}
	const problems = inputProblems(jobId, input);
	if (problems.length > 0) {
		throw inputRefusal(
			context.getNode(),
			'The article is invalid',
			problems.join('; '),
			problems.map((problem) => {
				const [pointer, ...rest] = problem.split(': ');
				return { pointer, message: rest.join(': ') };
			}),
		);
	}
	const site = identity?.site ?? ((input.site as string) || 'blog');
	const taskVersion = identity?.taskVersion ?? Number(input.task_version ?? 1);
	const article = input.article as IDataObject;
	const images = (input.images ?? []) as ImageInput[];
	const slots = images.map((image) => image.slot);
	const bodies: Array<IDataObject | null> = [];
	for (const image of images) {
		bodies.push(await imageBody(context, itemIndex, image));
	}
	const draftRequest = draftBody(article, slots);
	const steps: IDataObject[] = [];
	const step = async (name: string, call: Promise<IDataObject>) => {
		const answer = await call;
		steps.push({ step: name, http_status: answer.http_status });
		return answer;
	};
	await step(
		'validate',
		gatewayRequest(context, 'POST', '/v1/articles/validate', {
			site,
			draft: draftRequest,
			// base64 decoded and sniffed, source_url probed (a first read), as the media route
			media: images.map((image, i) => ({ slot: image.slot, ...(bodies[i] ?? {}) })),
		}),
	);
	const job = await step(
		'job',
		gatewayRequest(context, 'PUT', jobPath(jobId), { site, task_version: taskVersion }),
	);
	const phase = String(job.phase ?? '');
	const resumedFrom = AFTER_APPROVAL_REQUEST.has(phase) || AFTER_DRAFT.has(phase) ? phase : null;
	await saveResumePoint(context, jobId, article, images, steps);
	for (const [i, image] of images.entries()) {
		const body = bodies[i];
		if (body === null) {
			steps.push({ step: `media/${image.slot}`, http_status: 'in the ledger (resumed)' });
			continue;
		}
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
	const draft = await step(
		'draft',
		gatewayRequest(context, 'PUT', jobPath(jobId, '/draft'), draftRequest),
	);
	const sameDraft = draft.replayed === true || draft.http_status === 200;
	if (!(sameDraft && AFTER_APPROVAL_REQUEST.has(phase))) {
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
			const failed = Object.keys((verification.fields ?? {}) as IDataObject);
			const reason = `the draft of job ${jobId} does not verify after one repair (${failed.join(', ')})`;
			await step(
				'notify/needs_attention',
				gatewayRequest(context, 'POST', jobPath(jobId, '/notifications'), {
					event: 'needs_attention',
					reason,
				}),
			);
			throw new GatewayFailure(context.getNode(), {
				type: `${PROBLEM_BASE}verification-failed`,
				title: 'The post does not verify; repair it first',
				status: 409,
				detail: reason,
				errors: [],
				retryable: false,
				retry_after: null,
				next_step: 'editors were told (needs attention): a person looks at the post',
				failed_fields: failed,
				attempts: 1,
				message: reason,
			});
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
		task_version: final.task_version ?? taskVersion,
		phase: final.phase,
		status: final.status,
		post_id: final.post_id ?? draft.post_id ?? null,
		link: draft.link ?? null,
		resumed_from: resumedFrom,
		steps,
	};
}
