// HTTP to an edgestr deployment: NIP-98 signed requests (a fresh nonce on each, so identical calls
// in the same second both succeed), /health and the NIP-11 document. Failures are values with the
// HTTP status (0 when the deployment could not be reached or its answer could not be read). An
// answer is read up to MAX_RESPONSE_BYTES and within a timeout (HTTP_TIMEOUT_MS by default) for the
// whole of it, body included: a server that sends without end, or never finishes, fails the call.
// Whatever answers at a URL may be something else (a captive portal's page, a proxy, another
// service): an answer is taken only as JSON of the shape asked for (schemas.ts), else it fails with
// status 0 saying what came instead; an error page is quoted only as a short escaped excerpt.
// A deployment URL is http(s) or ws(s) with a host (deploymentUrl), checked before anything is sent.
import type { z } from 'zod';
import { err, errorMessage, ok, type Result } from '../shared/errors.js';
import { makeHttpAuthHeader } from '../shared/nip98.js';
import { visibleControls } from '../shared/visible-controls.js';
import type { KeyPair } from './keys.js';
import { ApiErrorSchema, HealthSchema, RelayInfoSchema, type Health } from './schemas.js';

/**
 * The most bytes of one answer the client reads: 32 MiB. The management API's largest answers (an
 * owner's list of agents, each configuration at most a few hundred kB) stay far below.
 */
export const MAX_RESPONSE_BYTES = 32 * 1024 * 1024;
/** The longest wait for one whole answer, body included, by default: 60 s. */
export const HTTP_TIMEOUT_MS = 60_000;

export interface HttpError {
  /**
   * HTTP status, or 0 when the deployment could not be reached or its answer could not be read (too
   * large, too slow, not JSON of the shape asked for: not the edgestr API's), or the URL is not one.
   */
  status: number;
  message: string;
  body?: unknown;
}

/** The `Authorization` header for one request (NIP-98 with a random nonce tag). */
export const nip98Header = (key: KeyPair, url: string, method: string, body?: string): string =>
  makeHttpAuthHeader(key.sk, url, method, body);

/** Why a URL is refused as a deployment's (the CLI's --url, $EDGESTR_URL; requestJson's `base`). */
export const NOT_A_DEPLOYMENT_URL = 'is not a deployment URL: use https://host or wss://host';
/** Why a URL is refused as a relay's (relayInfo, `edgestr relay info <url>`). */
export const NOT_A_RELAY_URL = 'is not a relay URL: use wss://host or https://host';

/**
 * `raw` as the URL of a deployment or a relay: http, https, ws or wss, with a host, without
 * credentials, a query or a fragment (none of which a deployment's paths take); undefined when it
 * is not one (`edgestr.example.com` and `localhost:8787` have no scheme a deployment is reached by).
 */
export function deploymentUrl(raw: string): URL | undefined {
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    return undefined;
  }
  if (!['http:', 'https:', 'ws:', 'wss:'].includes(url.protocol) || !url.hostname) return undefined;
  if (url.username || url.password || url.search || url.hash) return undefined;
  return url;
}

/** The deployment's base URL without a trailing slash, as http(s). */
export const httpBase = (url: string): string => url.replace(/^ws(s?):/, 'http$1:').replace(/\/+$/, '');
/** The WebSocket URL of a path of the deployment. */
export const wsUrl = (base: string, path: string): string => `${httpBase(base).replace(/^http(s?):/, 'ws$1:')}${path}`;

interface Answer {
  status: number;
  ok: boolean;
  /** The media type of the answer (Content-Type without parameters, lower case, at most 100 characters), or 'no Content-Type'. */
  type: string;
  text: string;
}

/** The answer to `init` at `url`, its body read as text within MAX_RESPONSE_BYTES and `timeoutMs` (see the header). */
async function send(url: string, init: RequestInit, timeoutMs: number): Promise<Result<Answer, HttpError>> {
  const { origin, pathname } = new URL(url);
  const what = `${origin} to ${init.method ?? 'GET'} ${pathname}`;
  const abort = new AbortController();
  const timer = setTimeout(() => abort.abort(), timeoutMs);
  let res: Response;
  try {
    res = await fetch(url, { ...init, signal: abort.signal });
  } catch (e) {
    clearTimeout(timer);
    if (abort.signal.aborted) return err({ status: 0, message: `no whole answer from ${what} within ${timeoutMs / 1000} s` });
    const cause = (e as { cause?: { code?: string; message?: string } }).cause;
    return err({ status: 0, message: `cannot reach ${origin}: ${cause?.code ?? cause?.message ?? errorMessage(e)}` });
  }
  try {
    const text = await readText(res);
    if (text === undefined) return err({ status: 0, message: `the answer of ${what} is over ${MAX_RESPONSE_BYTES} bytes, this client's limit` });
    return ok({ status: res.status, ok: res.ok, type: mediaType(res.headers.get('Content-Type')), text });
  } catch (e) {
    if (abort.signal.aborted) return err({ status: 0, message: `no whole answer from ${what} within ${timeoutMs / 1000} s` });
    return err({ status: 0, message: `the answer of ${what} broke off: ${errorMessage(e)}` });
  } finally {
    clearTimeout(timer);
  }
}

/** The body as text, or undefined (and the body dropped) when it is over MAX_RESPONSE_BYTES. */
async function readText(res: Response): Promise<string | undefined> {
  if (Number(res.headers.get('Content-Length') ?? 0) > MAX_RESPONSE_BYTES) {
    await res.body?.cancel();
    return undefined;
  }
  if (!res.body) return '';
  const reader = res.body.getReader();
  const decoder = new TextDecoder();
  let text = '';
  let bytes = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) return text + decoder.decode();
    bytes += value.byteLength;
    if (bytes > MAX_RESPONSE_BYTES) {
      await reader.cancel();
      return undefined;
    }
    text += decoder.decode(value, { stream: true });
  }
}

const mediaType = (header: string | null): string => header?.split(';')[0]!.trim().toLowerCase().slice(0, 100) || 'no Content-Type';

/** The body as JSON, or undefined when it is not JSON (an empty body is null: a 204). */
function jsonOf(text: string): unknown {
  if (!text) return null;
  try {
    return JSON.parse(text) as unknown;
  } catch {
    return undefined;
  }
}

/** Characters of an answer that is not JSON quoted in its error: a page's title, not the page. */
export const EXCERPT_CHARS = 120;
/** Characters of an API error message (with its issues) kept: the API's own are far shorter. */
const MAX_ERROR_CHARS = 2000;

/** The first EXCERPT_CHARS characters of `text`, white space runs as one space, on one line, control characters escaped. */
function excerpt(text: string): string {
  const chars = Array.from(text.replace(/\s+/g, ' ').trim());
  return visibleControls(chars.slice(0, EXCERPT_CHARS).join('') + (chars.length > EXCERPT_CHARS ? '…' : ''), { singleLine: true });
}

/** The API's error sentence of a JSON error answer: its `error` with the field issues, else the status. */
function describe(status: number, body: unknown): string {
  const e = ApiErrorSchema.safeParse(body);
  if (!e.success) return `HTTP ${status}`;
  const issues = (e.data.issues ?? []).map((i) => `${i.path ? `${i.path}: ` : ''}${i.message}`).join('; ');
  const text = issues ? `${e.data.error} (${issues})` : e.data.error;
  return text.length > MAX_ERROR_CHARS ? `${text.slice(0, MAX_ERROR_CHARS)}… (${text.length - MAX_ERROR_CHARS} characters more)` : text;
}

/** The first issue of a shape that does not fit, as `path: message`. */
function firstIssue(error: z.ZodError): string {
  const issue = error.issues[0];
  if (!issue) return 'no issue';
  return `${issue.path.length ? `${issue.path.join('.')}: ` : ''}${issue.message}`;
}

/** What requestJson expects at a URL, said when something else answers. */
const EDGESTR_API = 'the edgestr API: is --url right?';

/**
 * A JSON request; signed with NIP-98 when `key` is given; the whole answer within `timeoutMs`
 * (default HTTP_TIMEOUT_MS). A successful answer is its JSON read as `shape` (any JSON without one;
 * an empty body is null); one that is not JSON, or not of that shape, fails with status 0:
 * `<origin> answered GET /api/agents with text/html, not the edgestr API: is --url right?` (`expected`
 * names what was expected instead of the API). An error answer carries the API's error; one that is
 * not JSON fails with status 0 too, quoting its beginning (EXCERPT_CHARS, escaped).
 */
export async function requestJson<T = unknown>(
  base: string,
  method: string,
  path: string,
  opts: { key?: KeyPair; body?: unknown; accept?: string; timeoutMs?: number; shape?: z.ZodType<T>; expected?: string } = {},
): Promise<Result<T, HttpError>> {
  if (!deploymentUrl(base)) return err({ status: 0, message: `${base} ${NOT_A_DEPLOYMENT_URL}` });
  const url = `${httpBase(base)}${path}`;
  const body = opts.body === undefined ? undefined : JSON.stringify(opts.body);
  const headers: Record<string, string> = { Accept: opts.accept ?? 'application/json' };
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  if (opts.key) headers.Authorization = nip98Header(opts.key, url, method, body);
  const res = await send(url, { method, headers, ...(body !== undefined ? { body } : {}) }, opts.timeoutMs ?? HTTP_TIMEOUT_MS);
  if (!res.ok) return res;
  const { status, type, text } = res.value;
  const { origin, pathname } = new URL(url);
  const answered = `${origin} answered ${method} ${pathname}`;
  const expected = opts.expected ?? EDGESTR_API;
  const json = jsonOf(text);
  if (json === undefined) {
    const said = res.value.ok ? '' : ` It said: "${excerpt(text)}"`;
    return err({ status: 0, message: `${answered} with ${res.value.ok ? '' : `HTTP ${status} `}${type}, not ${expected}${said}` });
  }
  if (!res.value.ok) return err({ status, message: describe(status, json), body: json });
  if (!opts.shape) return ok(json as T);
  const parsed = opts.shape.safeParse(json);
  if (parsed.success) return ok(parsed.data);
  const got = text === '' ? 'an empty answer' : `JSON of another shape (${firstIssue(parsed.error)})`;
  return err({ status: 0, message: `${answered} with ${got}, not ${expected}` });
}

export type { Health };

export const health = (base: string): Promise<Result<Health, HttpError>> => requestJson(base, 'GET', '/health', { shape: HealthSchema });

/** The NIP-11 document of a relay URL (ws(s) or http(s)): a JSON object. */
export const relayInfo = async (url: string): Promise<Result<Record<string, unknown>, HttpError>> => {
  const u = deploymentUrl(url);
  if (!u) return err({ status: 0, message: `${url} ${NOT_A_RELAY_URL}` });
  const http = new URL(httpBase(u.href));
  return requestJson(http.origin, 'GET', http.pathname, { accept: 'application/nostr+json', shape: RelayInfoSchema, expected: 'a NIP-11 document' });
};
