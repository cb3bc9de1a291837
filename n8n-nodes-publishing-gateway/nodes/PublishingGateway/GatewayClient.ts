import type {
	IDataObject,
	IExecuteFunctions,
	IHttpRequestMethods,
	IPollFunctions,
	JsonObject,
} from 'n8n-workflow';
import { NodeApiError, sleep } from 'n8n-workflow';

/** The gateway's RFC 9457 problem (docs/api.md, "Problems"), as far as this node reads it. */
export interface Problem extends IDataObject {
	type?: string;
	title?: string;
	status?: number;
	detail?: string;
	retryable?: boolean;
	errors?: Array<{ pointer?: string; message?: string }>;
}

/** Bounds of the built-in retry: attempts in all, and the longest wait honoured (seconds). */
export const RETRY = {
	attempts: 4,
	maxWaitSeconds: 30,
	connectionWaitSeconds: 2,
};

const CONNECTION_CODES = new Set(['ECONNREFUSED', 'ECONNRESET', 'ETIMEDOUT', 'EPIPE', 'EAI_AGAIN']);

type Context = IExecuteFunctions | IPollFunctions;

/** A gateway answer that is no success: the problem, its HTTP status and, when retryable,
 * the seconds to wait (from `Retry-After`, else 2). */
export class GatewayRefusal extends Error {
	constructor(
		readonly status: number,
		readonly problem: Problem,
		readonly retryAfter: number | null,
	) {
		super(describeProblem(status, problem));
	}
}

/** "title: detail (pointer: message; ...)": a problem+json answer in one readable line. */
export function describeProblem(status: number, problem: Problem): string {
	const title = problem.title ?? `HTTP ${status}`;
	const pointers = (problem.errors ?? [])
		.map((e) => `${e.pointer ?? ''}: ${e.message ?? ''}`.trim())
		.filter((line) => line !== ':');
	let text = problem.detail ? `${title}: ${problem.detail}` : title;
	if (pointers.length > 0) {
		text += ` (${pointers.join('; ')})`;
	}
	return text;
}

function retryAfterSeconds(headers: IDataObject, problem: Problem): number | null {
	const header = headers['retry-after'];
	const seconds = Number(Array.isArray(header) ? header[0] : header);
	if (Number.isFinite(seconds) && seconds >= 0) {
		return seconds;
	}
	return problem.retryable === true ? RETRY.connectionWaitSeconds : null;
}

/** Whether a refusal may be sent again: only `retryable: true` problems (503, 429 with
 * `Retry-After`); definite refusals (4xx, 502) never are. */
export function shouldRetry(refusal: GatewayRefusal): boolean {
	return refusal.problem.retryable === true;
}

function connectionError(error: unknown): boolean {
	const code =
		(error as { code?: string; cause?: { code?: string } })?.code ??
		(error as { cause?: { code?: string } })?.cause?.code;
	return typeof code === 'string' && CONNECTION_CODES.has(code);
}

async function once(
	context: Context,
	method: IHttpRequestMethods,
	path: string,
	body?: IDataObject,
	qs?: IDataObject,
): Promise<IDataObject> {
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
	} else if (raw) {
		answer = raw;
	}
	if (status >= 200 && status < 300) {
		return { ...answer, http_status: status };
	}
	const problem = answer as Problem;
	throw new GatewayRefusal(
		status,
		problem,
		retryAfterSeconds(response.headers as IDataObject, problem),
	);
}

/**
 * One gateway call with the built-in error handling: a retryable problem (`retryable: true`,
 * waiting `Retry-After` seconds, at most {@link RETRY.maxWaitSeconds}) and a connection that
 * failed (the gateway restarting) are sent again, at most {@link RETRY.attempts} times in all;
 * a definite refusal is thrown at once. Every call the node makes carries the same operation key
 * server-side, so sending it again never makes a second WordPress object.
 *
 * Returns the answer's JSON with `http_status` (201 first execution, 200 replay or existing).
 * Throws NodeApiError ({@link toNodeError}): a problem+json answer's title, detail and pointers,
 * or the connection error after the last attempt. Follows docs/api.md, "Problems" and "Headers" (`Retry-After`).
 */
export async function gatewayRequest(
	context: Context,
	method: IHttpRequestMethods,
	path: string,
	body?: IDataObject,
	qs?: IDataObject,
): Promise<IDataObject> {
	for (let attempt = 1; ; attempt++) {
		try {
			return await once(context, method, path, body, qs);
		} catch (error) {
			const last = attempt >= RETRY.attempts;
			const again =
				!last && (error instanceof GatewayRefusal ? shouldRetry(error) : connectionError(error));
			if (!again) {
				throw toNodeError(context, error);
			}
			const seconds =
				error instanceof GatewayRefusal
					? Math.min(error.retryAfter ?? 2, RETRY.maxWaitSeconds)
					: RETRY.connectionWaitSeconds * attempt;
			await sleep(1000 * seconds);
		}
	}
}

/** The error n8n shows for a failed call: the problem's title, detail and pointers as the
 * message, the problem itself in the error's details. */
export function toNodeError(context: Context, error: unknown, itemIndex?: number): NodeApiError {
	if (error instanceof GatewayRefusal) {
		const problem = error.problem;
		return new NodeApiError(context.getNode(), problem as JsonObject, {
			message: error.message,
			description: [
				problem.type ? `problem type: ${problem.type}` : '',
				problem.retryable === true
					? 'retryable: the gateway asked to try again later; the node did, and gave up'
					: 'a definite refusal: sending the same request again gives the same answer',
			]
				.filter((line) => line !== '')
				.join('\n'),
			httpCode: String(error.status),
			itemIndex,
		});
	}
	const message = (error as Error)?.message ?? String(error);
	return new NodeApiError(context.getNode(), { message } as JsonObject, {
		message: `the gateway could not be reached: ${message}`,
		description:
			'run the node again when the gateway is back: every call is idempotent (operation keys)',
		itemIndex,
	});
}

/** `/v1/jobs/{job_id}` with the job id percent-encoded. */
export function jobPath(jobId: string, rest = ''): string {
	return `/v1/jobs/${encodeURIComponent(jobId)}${rest}`;
}
