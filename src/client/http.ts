// HTTP to an edgestr deployment: NIP-98 signed requests (a fresh nonce on each, so identical calls
// in the same second both succeed), /health and the NIP-11 document. Failures are values with the
// HTTP status (0 when the deployment could not be reached or its answer could not be read). An
// answer is read up to MAX_RESPONSE_BYTES and within a timeout (HTTP_TIMEOUT_MS by default) for the
// whole of it, body included: a server that sends without end, or never finishes, fails the call.
import { err, errorMessage, ok, type Result } from '../shared/errors.js';
import { makeHttpAuthHeader } from '../shared/nip98.js';
import type { KeyPair } from './keys.js';

/**
 * The most bytes of one answer the client reads: 32 MiB. The management API's largest answers (an
 * owner's list of agents, each configuration at most a few hundred kB) stay far below.
 */
export const MAX_RESPONSE_BYTES = 32 * 1024 * 1024;
/** The longest wait for one whole answer, body included, by default: 60 s. */
export const HTTP_TIMEOUT_MS = 60_000;

export interface HttpError {
  /** HTTP status, or 0 when the deployment could not be reached or its answer could not be read (too large, too slow). */
  status: number;
  message: string;
  body?: unknown;
}

/** The `Authorization` header for one request (NIP-98 with a random nonce tag). */
export const nip98Header = (key: KeyPair, url: string, method: string, body?: string): string =>
  makeHttpAuthHeader(key.sk, url, method, body);

/** The deployment's base URL without a trailing slash, as http(s). */
export const httpBase = (url: string): string => url.replace(/^ws(s?):/, 'http$1:').replace(/\/+$/, '');
/** The WebSocket URL of a path of the deployment. */
export const wsUrl = (base: string, path: string): string => `${httpBase(base).replace(/^http(s?):/, 'ws$1:')}${path}`;

interface Answer {
  status: number;
  ok: boolean;
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
    return ok({ status: res.status, ok: res.ok, text });
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

function jsonOf(text: string): unknown {
  if (!text) return null;
  try {
    return JSON.parse(text) as unknown;
  } catch {
    return text;
  }
}

function describe(status: number, body: unknown): string {
  const b = body as { error?: unknown; issues?: Array<{ path?: string; message?: string }> } | null;
  const base = typeof b?.error === 'string' ? b.error : typeof body === 'string' && body ? body : `HTTP ${status}`;
  const issues = Array.isArray(b?.issues) ? b.issues.map((i) => `${i.path ? `${i.path}: ` : ''}${i.message ?? ''}`).join('; ') : '';
  return issues ? `${base} (${issues})` : base;
}

/** A JSON request; signed with NIP-98 when `key` is given; the whole answer within `timeoutMs` (default HTTP_TIMEOUT_MS). */
export async function requestJson(
  base: string,
  method: string,
  path: string,
  opts: { key?: KeyPair; body?: unknown; accept?: string; timeoutMs?: number } = {},
): Promise<Result<unknown, HttpError>> {
  const url = `${httpBase(base)}${path}`;
  const body = opts.body === undefined ? undefined : JSON.stringify(opts.body);
  const headers: Record<string, string> = { Accept: opts.accept ?? 'application/json' };
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  if (opts.key) headers.Authorization = nip98Header(opts.key, url, method, body);
  const res = await send(url, { method, headers, ...(body !== undefined ? { body } : {}) }, opts.timeoutMs ?? HTTP_TIMEOUT_MS);
  if (!res.ok) return res;
  const json = jsonOf(res.value.text);
  if (!res.value.ok) return err({ status: res.value.status, message: describe(res.value.status, json), body: json });
  return ok(json);
}

export interface Health {
  ok: boolean;
  version?: string;
  demo?: { owner: string; agent: string; relay: string };
}

export const health = async (base: string): Promise<Result<Health, HttpError>> =>
  (await requestJson(base, 'GET', '/health')) as Result<Health, HttpError>;

/** The NIP-11 document of a relay URL (ws(s) or http(s)). */
export const relayInfo = async (url: string): Promise<Result<Record<string, unknown>, HttpError>> => {
  const u = new URL(httpBase(url));
  return (await requestJson(u.origin, 'GET', u.pathname === '/' ? '/' : u.pathname, { accept: 'application/nostr+json' })) as Result<
    Record<string, unknown>,
    HttpError
  >;
};
