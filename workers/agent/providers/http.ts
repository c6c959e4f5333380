// The wire helpers shared by the fetch-based providers: the POST with abort and network-failure
// mapping, HTTP status → ProviderError kind, Retry-After parsing, and the SSE record stream that
// turns an abort, a reset connection or a missing terminal marker into ProviderError values.
//
// Status mapping: an account out of credit → rejected, whatever its status (OpenAI's 429
// insufficient_quota, Anthropic's 400 "credit balance is too low" and billing_error, any 402:
// retrying does not help until the operator pays); else 429 → rate_limit; every 5xx (500/502/503/
// 504/529 and the rest) → unavailable; any other non-2xx → rejected. retryAfterSeconds comes from
// Retry-After (seconds or HTTP-date), else retry-after-ms, on a 429 and also on a 5xx that sends one.
// Messages: "HTTP <status>: <the provider's error message, truncated>", the out-of-credit one
// prefixed with NO_CREDIT (the owner reads it, runtime.ts detail), "network error: …",
// "truncated stream", "a stream event over N characters", "aborted". Unknown JSON values are read with the small guards below.

import { ProviderError, type WireObserver } from './types.js';
import { readSse, type SseItem, type SseRecord } from './sse.js';
import { errorMessage } from '../../../src/shared/errors.js';

/** Longest provider error text kept in a ProviderError message. */
export const MAX_ERROR_TEXT = 300;
/** Bytes of an error body read before giving up on the rest. */
const MAX_ERROR_BODY_BYTES = 16_384;

export type JsonObject = Record<string, unknown>;

export const isObject = (v: unknown): v is JsonObject => typeof v === 'object' && v !== null && !Array.isArray(v);
export const str = (v: unknown): string | undefined => (typeof v === 'string' ? v : undefined);
export const num = (v: unknown): number | undefined => (typeof v === 'number' && Number.isFinite(v) ? v : undefined);
/**
 * A token count a provider reports: a whole number from 0 to 2^53 − 1, else nothing (a negative one
 * would refund tokens to the budgets, 1e308 would sum to Infinity and exhaust the owner's plan).
 */
export const tokenCount = (v: unknown): number | undefined => (typeof v === 'number' && Number.isSafeInteger(v) && v >= 0 ? v : undefined);

export function truncate(text: string, max = MAX_ERROR_TEXT): string {
  const t = text.trim();
  return t.length <= max ? t : `${t.slice(0, max - 1)}…`;
}

/** Parses JSON text; undefined when it is not JSON. */
export function parseJson(text: string): unknown {
  try {
    return JSON.parse(text) as unknown;
  } catch {
    return undefined;
  }
}

export const abortedError = (provider: string): ProviderError => new ProviderError('aborted', 'aborted', { provider });

export const truncatedError = (provider: string): ProviderError =>
  new ProviderError('unavailable', 'truncated stream', { provider });

/**
 * Seconds to wait from a Retry-After value: delta-seconds (decimals rounded up) or an HTTP-date
 * (seconds from `nowMs`, at least 0). Undefined when absent or unparsable.
 */
export function parseRetryAfter(value: string | null | undefined, nowMs = Date.now()): number | undefined {
  if (value === null || value === undefined) return undefined;
  const v = value.trim();
  if (v === '') return undefined;
  if (/^\d+(\.\d+)?$/.test(v)) return Math.ceil(Number(v));
  const at = Date.parse(v);
  if (Number.isNaN(at)) return undefined;
  return Math.max(0, Math.ceil((at - nowMs) / 1000));
}

/** Retry-After (seconds or HTTP-date), else the OpenAI-style retry-after-ms header. */
export function retryAfterFromHeaders(headers: Headers, nowMs = Date.now()): number | undefined {
  const fromRetryAfter = parseRetryAfter(headers.get('retry-after'), nowMs);
  if (fromRetryAfter !== undefined) return fromRetryAfter;
  const ms = headers.get('retry-after-ms');
  if (ms !== null && /^\d+(\.\d+)?$/.test(ms.trim())) return Math.ceil(Number(ms.trim()) / 1000);
  return undefined;
}

/**
 * The human message of an error body: `error.message` (OpenAI and Anthropic), a string `error`,
 * a top-level `message`, or else the raw text.
 */
export function errorBodyMessage(text: string): string {
  const body = parseJson(text);
  if (isObject(body)) {
    const e = body.error;
    if (isObject(e) && typeof e.message === 'string') return e.message;
    if (typeof e === 'string') return e;
    if (typeof body.message === 'string') return body.message;
  }
  return text;
}

/** What the owner is told first when the provider's account has run out of credit. */
export const NO_CREDIT = 'the provider account has no credit left (add credit at the provider)';

/** Error types or codes that say the account cannot pay: OpenAI's insufficient_quota, Anthropic's billing_error. */
const NO_CREDIT_NAMES = new Set(['insufficient_quota', 'billing_error']);
/** Anthropic answers a workspace out of credit with a 400 invalid_request_error saying so. */
const NO_CREDIT_TEXT = /credit balance is too low/i;

/**
 * Whether an error answer says the provider account has no credit left (a 402 Payment Required,
 * `error.type` or `error.code` in NO_CREDIT_NAMES, or Anthropic's "credit balance is too low").
 */
export function isNoCredit(status: number, text: string): boolean {
  if (status === 402) return true;
  const body = parseJson(text);
  const e = isObject(body) ? body.error : undefined;
  if (!isObject(e)) return false;
  return NO_CREDIT_NAMES.has(str(e.type) ?? '') || NO_CREDIT_NAMES.has(str(e.code) ?? '') || NO_CREDIT_TEXT.test(str(e.message) ?? '');
}

/** The ProviderError kind of an HTTP status that is not 2xx (an answer out of credit aside: isNoCredit). */
export function kindForStatus(status: number): 'rate_limit' | 'unavailable' | 'rejected' {
  if (status === 429) return 'rate_limit';
  if (status >= 500) return 'unavailable';
  return 'rejected';
}

async function readCapped(res: Response, maxBytes: number): Promise<string> {
  if (!res.body) return '';
  const reader = res.body.getReader();
  const decoder = new TextDecoder();
  let text = '';
  let bytes = 0;
  try {
    while (bytes < maxBytes) {
      const { done, value } = await reader.read();
      if (done) break;
      bytes += value.byteLength;
      text += decoder.decode(value, { stream: true });
    }
    return text + decoder.decode();
  } finally {
    reader.cancel().catch(() => undefined);
  }
}

/** Builds the ProviderError of a non-2xx response (reads at most 16 KiB of its body). */
export async function httpError(provider: string, res: Response, signal?: AbortSignal): Promise<ProviderError> {
  let text = '';
  try {
    text = await readCapped(res, MAX_ERROR_BODY_BYTES);
  } catch {
    if (signal?.aborted) return abortedError(provider);
  }
  const message = truncate(errorBodyMessage(text));
  const noCredit = isNoCredit(res.status, text);
  const kind = noCredit ? 'rejected' : kindForStatus(res.status);
  const details: ConstructorParameters<typeof ProviderError>[2] = { provider, status: res.status };
  if (kind !== 'rejected') {
    const retryAfter = retryAfterFromHeaders(res.headers);
    if (retryAfter !== undefined) details.retryAfterSeconds = retryAfter;
  }
  const said = message ? `HTTP ${res.status}: ${message}` : `HTTP ${res.status}`;
  return new ProviderError(kind, noCredit ? `${NO_CREDIT}: ${said}` : said, details);
}


export interface PostStreamOptions {
  provider: string;
  url: string;
  headers: Record<string, string>;
  body: unknown;
  signal: AbortSignal;
  observe?: WireObserver;
}

/**
 * POSTs a JSON body and returns the 2xx response whose body is to be streamed. Throws ProviderError:
 * aborted (the signal, before or during the call), unavailable (network failure), rejected for a
 * redirect (never followed), or the status mapping for another non-2xx answer. The signal is passed to fetch, so an abort cancels the request.
 */
export async function postStream(o: PostStreamOptions): Promise<Response> {
  if (o.signal.aborted) throw abortedError(o.provider);
  o.observe?.request(o.body);
  let res: Response;
  try {
    res = await fetch(o.url, {
      method: 'POST',
      headers: { 'content-type': 'application/json', accept: 'text/event-stream', ...o.headers },
      body: JSON.stringify(o.body),
      signal: o.signal,
      // A redirect would re-send the prompt and the API key headers wherever it points.
      redirect: 'manual',
    });
  } catch (e) {
    if (o.signal.aborted) throw abortedError(o.provider);
    throw new ProviderError('unavailable', truncate(`network error: ${errorMessage(e)}`), { provider: o.provider });
  }
  if (res.status >= 300 && res.status < 400) {
    await res.body?.cancel();
    throw new ProviderError('rejected', `HTTP ${res.status}: ${REDIRECT_REFUSED}`, { provider: o.provider, status: res.status });
  }
  if (!res.ok) throw await httpError(o.provider, res, o.signal);
  return res;
}

/** Why a provider's redirect is not followed (the prompt and the API key headers would go wherever it points). */
export const REDIRECT_REFUSED = 'the provider answered with a redirect, which is not followed; set its base URL to the final address';

export interface SseStreamOptions {
  provider: string;
  signal: AbortSignal;
  isTerminal: (record: SseRecord) => boolean;
  observe?: WireObserver;
}

/**
 * The SSE records of a response body, each passed to observe.response() first. Ends after the
 * terminal record. Throws ProviderError: aborted when the signal fired, 'truncated stream'
 * (unavailable) when the body ended early or its connection failed mid-stream, 'a stream event
 * over N characters' (unavailable) when an event or a line is over the SSE reader's limit.
 */
export async function* sseRecords(
  body: ReadableStream<Uint8Array> | null,
  o: SseStreamOptions,
): AsyncGenerator<SseRecord> {
  if (o.signal.aborted) throw abortedError(o.provider);
  if (!body) throw truncatedError(o.provider);
  const items = readSse(body, { isTerminal: o.isTerminal, signal: o.signal });
  try {
    for (;;) {
      let next: IteratorResult<SseItem, void>;
      try {
        next = await items.next();
      } catch {
        if (o.signal.aborted) throw abortedError(o.provider);
        throw truncatedError(o.provider);
      }
      if (o.signal.aborted) throw abortedError(o.provider);
      if (next.done) return;
      const item = next.value;
      if (item.type === 'truncated') throw truncatedError(o.provider);
      if (item.type === 'oversized') throw new ProviderError('unavailable', `a stream event over ${item.maxChars} characters`, { provider: o.provider });
      o.observe?.response(item.record.data);
      yield item.record;
    }
  } finally {
    // Releases the body (cancels it) when the consumer stops early or an error is thrown.
    await items.return(undefined);
  }
}
