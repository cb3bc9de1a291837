import type {
	IDataObject,
	IExecuteFunctions,
	IHookFunctions,
	IHttpRequestMethods,
	ILoadOptionsFunctions,
	INode,
	IPollFunctions,
	JsonObject,
} from 'n8n-workflow';
import { NodeApiError, NodeOperationError, sleep } from 'n8n-workflow';

/** The gateway's RFC 9457 problem (docs/api.md, "Problems"), as far as this node reads it. */
export interface Problem extends IDataObject {
	type?: string;
	title?: string;
	status?: number;
	detail?: string;
	retryable?: boolean;
	errors?: Array<{ pointer?: string; message?: string }>;
}

/**
 * Bounds of the built-in retry: how long a call is retried (seconds from its first attempt:
 * two minutes outlast a gateway restart, which took 11-21 s on a loaded machine; a node's
 * Options → Retry For changes it, 0 turns the retry off), the backoff's base (seconds,
 * doubled per attempt, each wait drawn between half and all of it), the longest backoff wait
 * and each call's timeout. A wait (backoff or `Retry-After`) that would end past the window
 * ends the retrying at once.
 */
export const RETRY = {
	windowSeconds: 120,
	baseSeconds: 2,
	maxWaitSeconds: 30,
	timeoutSeconds: 300,
};

/** The retry window a node's execution set (Options → Retry For), by its context. */
const WINDOWS = new WeakMap<object, number>();

/**
 * Set the retry window (seconds, ≥ 0) of every gateway call made with `context` from now on:
 * the node's Options → Retry For of the item being run. Not set: {@link RETRY.windowSeconds}.
 */
export function setRetryWindow(context: object, seconds: number): void {
	WINDOWS.set(context, Number.isFinite(seconds) && seconds >= 0 ? seconds : RETRY.windowSeconds);
}

function retryWindow(context: object): number {
	return WINDOWS.get(context) ?? RETRY.windowSeconds;
}

export const PROBLEM_BASE = 'https://publishing-gateway.dev/problems/';

/** Connection failures where nothing reached the gateway: sending again is always safe. */
const NOT_SENT = ['ECONNREFUSED', 'ENOTFOUND', 'EAI_AGAIN', 'EHOSTUNREACH', 'ENETUNREACH'];
/** Connection failures after the request may have been received: an unknown outcome. */
const MAYBE_SENT = ['ECONNRESET', 'ETIMEDOUT', 'ESOCKETTIMEDOUT', 'ECONNABORTED', 'EPIPE'];
/** What n8n puts in place of the code (n8n-workflow's NodeError COMMON_ERRORS, axios). */
const N8N_TEXTS: Array<[RegExp, string]> = [
	[/refused the connection/i, 'ECONNREFUSED'],
	[/closed unexpectedly|socket hang up/i, 'ECONNRESET'],
	[/timeout of \d+ms exceeded|connection timed out/i, 'ETIMEDOUT'],
	[/connection was aborted/i, 'ECONNABORTED'],
];

type Context = IExecuteFunctions | IPollFunctions | ILoadOptionsFunctions | IHookFunctions;

/** A gateway answer that is no success: the problem, its HTTP status and `Retry-After`. */
export interface Refusal {
	status: number;
	problem: Problem;
	retryAfter: number | null;
}

type Outcome = { ok: true; answer: IDataObject } | { ok: false; refusal: Refusal };

/** The lines of an error's description: the problem type, whether it was retried, the
 * `Retry-After` and the next step. */
function describeReport(report: IDataObject): string {
	return [
		report.type ? `problem type: ${String(report.type)}` : '',
		report.detail ? String(report.detail) : '',
		report.attempts === 0
			? 'refused by the node before any call: nothing was sent'
			: report.retryable === true
				? `retryable: the node tried ${String(report.attempts ?? 1)} time(s) in ${String(report.retried_seconds ?? 0)} s and gave up (its Retry For window)`
				: 'a definite refusal: sending the same request again gives the same answer',
		report.retry_after !== null && report.retry_after !== undefined
			? `Retry-After: ${String(report.retry_after)} s`
			: '',
		report.next_step ? `next step: ${String(report.next_step)}` : '',
	]
		.filter((line) => line !== '')
		.join('\n');
}

/**
 * A gateway call that failed for good: refused, or retried until the attempts or the
 * `Retry-After` bound ended it. A NodeApiError with the HTTP status; `report` is what the
 * node's error item carries (the problem with `status`, `retryable`, `retry_after`,
 * `next_step`, `attempts`).
 */
export class GatewayFailure extends NodeApiError {
	readonly report: IDataObject;

	constructor(node: INode, report: IDataObject) {
		super(node, { ...report } as JsonObject, {
			message: String(report.message ?? report.title),
			description: describeReport(report),
			httpCode: String(report.status),
		});
		this.report = report;
		this.name = 'NodeApiError'; // what n8n checks (WorkflowExecute, telemetry)
	}

	get status(): number {
		return Number(this.report.status);
	}
}

/** An item the node refused before any call (invalid input, identity in the article): a
 * NodeOperationError; `report` as for {@link GatewayFailure} (`status` 422, `attempts` 0). */
export class ItemRefusal extends NodeOperationError {
	readonly report: IDataObject;

	constructor(node: INode, report: IDataObject) {
		super(node, String(report.message ?? report.title), { description: describeReport(report) });
		this.report = report;
		this.name = 'NodeOperationError';
	}
}

/** "title: detail (pointer: message; ...)": a problem+json answer in one readable line. */
export function describeProblem(status: number, problem: Problem): string {
	const title = problem.title ?? `HTTP ${status}`;
	const pointers = (Array.isArray(problem.errors) ? problem.errors : [])
		.map((e) => `${e.pointer ?? ''}: ${e.message ?? ''}`.trim())
		.filter((line) => line !== ':');
	let text = problem.detail && problem.detail !== title ? `${title}: ${problem.detail}` : title;
	if (pointers.length > 0) {
		text += ` (${pointers.join('; ')})`;
	}
	return text;
}

function retryAfterSeconds(headers: IDataObject): number | null {
	const header = headers['retry-after'];
	const seconds = Number(Array.isArray(header) ? header[0] : header);
	return header !== undefined && Number.isFinite(seconds) && seconds >= 0 ? seconds : null;
}

function slug(problem: Problem): string {
	return String(problem.type ?? '').replace(PROBLEM_BASE, '');
}

/**
 * Whether a refusal may be sent again: a `retryable: true` problem (503, 429, 409 in flight,
 * 502 `media-download-failed`, ...) and any 5xx but the gateway's definite ones (a 5xx problem
 * that says `retryable: false`, e.g. 502 `wordpress-refused`; its 500 for a bug is retried).
 */
export function shouldRetry(refusal: Refusal): boolean {
	const { problem, status } = refusal;
	if (problem.retryable === true) {
		return true;
	}
	if (status < 500) {
		return false;
	}
	return (
		problem.retryable !== false ||
		['internal-server-error', 'internal-error'].includes(slug(problem))
	);
}

/**
 * The connection failure behind an error of n8n's request helper, or null. n8n wraps every
 * failure in a NodeApiError whose `cause` it drops (ExecutionBaseError keeps no Error cause),
 * so the code is read from what the wrapper keeps: `httpCode` (the axios code), `messages`
 * (the original message), `message` (n8n's text for common codes) and `description`.
 * `sent`: false when nothing can have reached the gateway (refused, name not resolved).
 */
export function connectionFailure(error: unknown): { code: string; sent: boolean } | null {
	if (!error || error instanceof GatewayFailure || error instanceof ItemRefusal) {
		return null;
	}
	const e = error as IDataObject & { cause?: IDataObject; errorResponse?: IDataObject };
	const texts = [
		e.code,
		e.httpCode,
		e.cause?.code,
		e.errorResponse?.code,
		e.message,
		e.description,
		...(Array.isArray(e.messages) ? e.messages : []),
	].filter((t): t is string => typeof t === 'string' && t !== '');
	for (const code of [...NOT_SENT, ...MAYBE_SENT]) {
		if (texts.some((text) => text.toUpperCase().includes(code))) {
			return { code, sent: !NOT_SENT.includes(code) };
		}
	}
	for (const [pattern, code] of N8N_TEXTS) {
		if (texts.some((text) => pattern.test(text))) {
			return { code, sent: !NOT_SENT.includes(code) };
		}
	}
	return null;
}

/** The wait before attempt `attempt + 1`: exponential backoff with jitter, in seconds. */
export function backoffSeconds(attempt: number): number {
	const full = Math.min(RETRY.maxWaitSeconds, RETRY.baseSeconds * 2 ** (attempt - 1));
	return full * (0.5 + Math.random() * 0.5);
}

async function once(
	context: Context,
	method: IHttpRequestMethods,
	path: string,
	body?: IDataObject,
	qs?: IDataObject,
): Promise<Outcome> {
	const credentials = await context.getCredentials('publishingGatewayApi');
	const baseUrl = String(credentials.baseUrl).replace(/\/+$/, '');
	const response = await context.helpers.httpRequestWithAuthentication.call(
		context,
		'publishingGatewayApi',
		{
			method,
			url: `${baseUrl}${path}`,
			body: body === undefined ? undefined : body,
			qs,
			json: true,
			returnFullResponse: true,
			ignoreHttpStatusErrors: true,
			timeout: RETRY.timeoutSeconds * 1000,
		},
	);
	const status = Number(response.statusCode);
	const raw = response.body as IDataObject | string | undefined;
	let answer: IDataObject = {};
	if (typeof raw === 'string') {
		try {
			answer = (raw === '' ? {} : JSON.parse(raw)) as IDataObject;
		} catch {
			answer = { title: `HTTP ${status}`, detail: raw.slice(0, 500) };
		}
	} else if (raw && typeof raw === 'object' && !Array.isArray(raw)) {
		answer = raw;
	}
	if (status >= 200 && status < 300) {
		return { ok: true, answer: { ...answer, http_status: status } };
	}
	const refusal = {
		status,
		problem: answer as Problem,
		retryAfter: retryAfterSeconds(response.headers as IDataObject),
	};
	return { ok: false, refusal };
}

/** What to do next about a refusal, in words (the error item's `next_step`). */
export function nextStep(status: number, problem: Problem, retryAfter: number | null): string {
	switch (slug(problem)) {
		case 'operation-key-reused':
			return "this job version already holds different content: send the changed article with a higher task version (the version bump is the workflow author's Task Version)";
		case 'unauthenticated':
			return 'check the token of the Publishing Gateway API credential (gateway tokens create --role workflow)';
		case 'forbidden':
			return "the token's role may not make this call: use a workflow token";
		case 'approval-required':
		case 'approval-expired':
		case 'approval-revoked':
			return 'an editor approves the draft on the review page; publishing runs again later';
		case 'notification-not-due':
			return 'nothing to do now: the job has not reached the phase this notification announces';
		case 'needs-review':
			return 'an editor resolves the review item on the review page before any further write';
		case 'stale-task-version':
			return 'the job already has a higher task version: send that version or a higher one';
		case 'job-cancelled':
			return 'the job was cancelled: use another job id';
		case 'site-not-found':
			return "set the node's Site to a site configured in the gateway (gateway sites add)";
		default:
	}
	if (retryAfter !== null && retryAfter > RETRY.windowSeconds) {
		return `try again after ${retryAfter} s: sending the same item again is safe (operation keys)`;
	}
	if (shouldRetry({ status, problem, retryAfter })) {
		return 'run the item again later: sending it again is safe (operation keys), the gateway replays what was done';
	}
	if (status === 422 || status === 400 || status === 413 || status === 415) {
		return 'correct the article and send it again (nothing the gateway refused was written)';
	}
	return 'read the detail: sending the same request again gives the same answer';
}

function refusalReport(
	refusal: Refusal,
	request: string,
	attempts: number,
	seconds: number,
): IDataObject {
	const { status, problem, retryAfter } = refusal;
	return {
		...problem,
		type: problem.type ?? `${PROBLEM_BASE}http-${status}`,
		title: problem.title ?? `HTTP ${status}`,
		status,
		detail: problem.detail ?? null,
		errors: Array.isArray(problem.errors) ? problem.errors : [],
		retryable: shouldRetry(refusal),
		retry_after: retryAfter,
		next_step: nextStep(status, problem, retryAfter),
		request,
		attempts,
		retried_seconds: seconds,
		message: describeProblem(status, problem),
	};
}

function unreachableReport(
	code: string,
	sent: boolean,
	request: string,
	attempts: number,
	seconds: number,
): IDataObject {
	const what = sent
		? 'the connection failed after the request was sent (an unknown outcome: the node asked the gateway to recover the job, then sent the same request again)'
		: 'the connection was refused before anything was sent';
	return {
		type: `${PROBLEM_BASE}n8n-gateway-unreachable`,
		title: 'The gateway could not be reached',
		status: 503,
		detail: `${request}: ${what}; gave up after ${attempts} attempt(s) in ${seconds} s (${code})`,
		errors: [],
		retryable: true,
		retry_after: null,
		next_step:
			'run the item again when the gateway is back: sending it again is safe (operation keys)',
		code,
		request,
		attempts,
		retried_seconds: seconds,
		message: `the gateway could not be reached after ${attempts} attempt(s) in ${seconds} s: ${request}`,
	};
}

/** `POST /v1/jobs/{job_id}/recover` for a write on a job (`/v1/jobs/{job_id}...`), else null. */
function recoverPath(method: IHttpRequestMethods, path: string): string | null {
	if (method === 'GET') {
		return null;
	}
	const match = /^(\/v1\/jobs\/[^/?]+)(\/[^?]*)?$/.exec(path);
	if (!match || match[2] === '/recover') {
		return null;
	}
	return `${match[1]}/recover`;
}

/**
 * One gateway call, retried as the gateway's contract says (docs/api.md, "Problems",
 * "Headers"): a refusal the gateway marks `retryable: true` (and any 5xx but its definite
 * ones) is sent again after its `Retry-After` (else exponential backoff with jitter), a
 * connection refused before anything was sent is sent again after backoff, and a connection
 * that failed after sending (reset, timeout: an unknown outcome) first has the job recovered
 * (`POST /v1/jobs/{job_id}/recover`) and then the same call sent again, never a changed one.
 * Retried for at most the node's retry window (seconds from the first attempt,
 * {@link RETRY.windowSeconds} unless Options → Retry For says otherwise): a wait that would
 * end past it ends the retrying at once. Every call carries its operation key on the
 * gateway, so sending it again never makes a second WordPress object.
 *
 * Returns the answer's JSON with `http_status` (201 first execution, 200 replay or existing).
 * Throws {@link GatewayFailure} (the problem as the node's error item carries it, with
 * `attempts` and `retried_seconds`), or the error of n8n's request helper when it is no
 * connection failure (e.g. no credential).
 */
export async function gatewayRequest(
	context: Context,
	method: IHttpRequestMethods,
	path: string,
	body?: IDataObject,
	qs?: IDataObject,
): Promise<IDataObject> {
	const request = `${method} ${path}`;
	const recover = recoverPath(method, path);
	const window = retryWindow(context);
	const started = Date.now();
	const spent = () => Math.round((Date.now() - started) / 100) / 10;
	let recoverFirst = false;
	for (let attempt = 1; ; attempt++) {
		let outcome: Outcome | null = null;
		let transportError: unknown = null;
		try {
			if (recoverFirst && recover) {
				const recovered = await once(context, 'POST', recover, {});
				// a definite answer (e.g. 404: the job was never created) leaves the call to the
				// gateway; a retryable one waits like the call itself
				if (!recovered.ok && shouldRetry(recovered.refusal)) {
					outcome = recovered;
				} else {
					recoverFirst = false;
				}
			}
			outcome = outcome ?? (await once(context, method, path, body, qs));
		} catch (error) {
			transportError = error;
		}
		if (outcome?.ok) {
			return outcome.answer;
		}
		const beyond = (wait: number) => spent() + wait > window;
		let wait: number;
		let why: string;
		if (outcome) {
			const refusal = outcome.refusal;
			const retryAfter = refusal.retryAfter;
			wait =
				retryAfter !== null
					? retryAfter + Math.random() * Math.min(1, 0.1 + retryAfter * 0.25)
					: backoffSeconds(attempt);
			if (!shouldRetry(refusal) || beyond(wait)) {
				throw new GatewayFailure(
					context.getNode(),
					refusalReport(refusal, request, attempt, spent()),
				);
			}
			why = `answered ${refusal.status} (${slug(refusal.problem) || 'no problem type'}), retryable`;
		} else {
			const failure = connectionFailure(transportError);
			if (failure === null) {
				// not a connection failure (e.g. no credential): n8n's own error, as it is
				throw new NodeApiError(context.getNode(), transportError as JsonObject);
			}
			if (failure.sent && recover) {
				recoverFirst = true;
			}
			wait = backoffSeconds(attempt);
			if (beyond(wait)) {
				throw new GatewayFailure(
					context.getNode(),
					unreachableReport(failure.code, failure.sent || recoverFirst, request, attempt, spent()),
				);
			}
			why = `failed with ${failure.code} (${failure.sent ? 'an unknown outcome: recover the job, then the same call' : 'nothing was sent'})`;
		}
		context.logger.warn(
			`Publishing Gateway: ${request} ${why}: attempt ${attempt + 1} in ${wait.toFixed(1)} s (retrying for up to ${window} s, ${spent()} s spent)`,
		);
		await sleep(1000 * wait);
	}
}

/** The report of any error the node met for one item (the error item's `error`). */
export function errorReport(error: unknown): IDataObject {
	if (error instanceof GatewayFailure || error instanceof ItemRefusal) {
		return error.report;
	}
	const failure = connectionFailure(error);
	if (failure) {
		return unreachableReport(failure.code, failure.sent, 'a gateway call', 1, 0);
	}
	const message = (error as Error)?.message ?? String(error);
	const description = (error as { description?: string | null })?.description ?? null;
	return {
		type: `${PROBLEM_BASE}n8n-node-error`,
		title: 'The node could not run',
		status: null,
		detail: description ? `${message}: ${description}` : message,
		errors: [],
		retryable: false,
		retry_after: null,
		next_step: 'read the detail and correct the node or its input',
		message,
	};
}

/** The item n8n routes to the error output (Continue (using error output)) or passes on
 * (Continue On Fail): exactly `{error, message}`, what n8n-core's error-output routing
 * (WorkflowExecute.handleNodeErrorOutput) recognises as an error item. */
export function errorItemJson(error: unknown): IDataObject {
	const { message, ...rest } = errorReport(error);
	return { error: rest, message: String(message ?? rest.title) };
}

/** The error n8n shows for a failed item: a NodeApiError with the HTTP status for a gateway
 * call (the problem's title, detail and pointers as its message), a NodeOperationError for
 * an item refused before any call; any other error wrapped as a NodeApiError. */
export function toNodeError(
	context: Context,
	error: unknown,
	itemIndex?: number,
): NodeApiError | NodeOperationError {
	if (error instanceof NodeApiError || error instanceof NodeOperationError) {
		if (itemIndex !== undefined && error.context.itemIndex === undefined) {
			error.context.itemIndex = itemIndex;
		}
		return error;
	}
	const message = (error as Error)?.message ?? String(error);
	return new NodeApiError(context.getNode(), { message } as JsonObject, { message, itemIndex });
}

/** An item refused by the node itself before any call (`status` 422 unless given). */
export function inputRefusal(
	node: INode,
	title: string,
	detail: string,
	errors: Array<{ pointer: string; message: string }>,
	slugName = 'n8n-invalid-input',
	nextStepText = 'correct the item and send it again: nothing was sent to the gateway',
): ItemRefusal {
	return new ItemRefusal(node, {
		type: `${PROBLEM_BASE}${slugName}`,
		title,
		status: 422,
		detail,
		errors,
		retryable: false,
		retry_after: null,
		next_step: nextStepText,
		attempts: 0,
		message: `${title}: ${detail}`,
	});
}

/** `/v1/jobs/{job_id}` with the job id percent-encoded. */
export function jobPath(jobId: string, rest = ''): string {
	return `/v1/jobs/${encodeURIComponent(jobId)}${rest}`;
}
