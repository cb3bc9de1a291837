import { createHmac, timingSafeEqual } from 'node:crypto';

/** How far a delivery's `webhook-timestamp` may be from n8n's clock (seconds), either way:
 * Standard Webhooks' recommended tolerance (a replayed delivery older than this is refused). */
export const TOLERANCE_SECONDS = 5 * 60;

const SECRET_PREFIX = 'whsec_';

/** A delivery's headers, lower-case names as Node.js gives them (`webhook-id`,
 * `webhook-timestamp` and `webhook-signature` are read). */
export type DeliveryHeaders = Record<string, string | string[] | undefined>;

function single(value: string | string[] | undefined): string {
	return Array.isArray(value) ? (value[0] ?? '') : (value ?? '');
}

/**
 * Why a delivery's signature does not hold, or null when it does.
 *
 * Follows Standard Webhooks 1.0, "Verifying webhook authenticity": the key is the base64
 * decoding of the endpoint's secret after its `whsec_` prefix; the signed content is
 * `${webhook-id}.${webhook-timestamp}.${raw body}` (the body's bytes as received, never a
 * re-serialised JSON); `webhook-signature` holds one or more space-separated `v1,<base64
 * HMAC-SHA256>` (two while a rotated secret's overlap lasts): any one that equals the
 * expected one, compared in constant time, verifies; `webhook-timestamp` (unix seconds) must
 * be within {@link TOLERANCE_SECONDS} of `nowSeconds`.
 *
 * `secret`: the endpoint's `whsec_...` secret; `rawBody`: the request's body bytes (n8n's
 * `req.rawBody`); `nowSeconds`: the receiver's clock, unix seconds. Never throws.
 */
export function signatureProblem(
	secret: string,
	headers: DeliveryHeaders,
	rawBody: Buffer | undefined,
	nowSeconds: number,
): string | null {
	const id = single(headers['webhook-id']);
	const timestamp = single(headers['webhook-timestamp']);
	const signatures = single(headers['webhook-signature']);
	if (!id || !timestamp || !signatures) {
		return 'missing webhook-id, webhook-timestamp or webhook-signature';
	}
	if (!/^\d{1,12}$/.test(timestamp)) {
		return 'webhook-timestamp is not unix seconds';
	}
	if (Math.abs(nowSeconds - Number(timestamp)) > TOLERANCE_SECONDS) {
		return `webhook-timestamp is more than ${TOLERANCE_SECONDS} s away from now`;
	}
	if (!secret.startsWith(SECRET_PREFIX) || rawBody === undefined) {
		return 'no secret or no raw body to verify against';
	}
	const key = Buffer.from(secret.slice(SECRET_PREFIX.length), 'base64');
	const expected = createHmac('sha256', key)
		.update(Buffer.concat([Buffer.from(`${id}.${timestamp}.`, 'utf8'), rawBody]))
		.digest();
	for (const candidate of signatures.split(' ')) {
		const [version, value] = candidate.split(',', 2);
		if (version !== 'v1' || !value) {
			continue;
		}
		const given = Buffer.from(value, 'base64');
		if (given.length === expected.length && timingSafeEqual(given, expected)) {
			return null;
		}
	}
	return 'no v1 signature matches';
}
