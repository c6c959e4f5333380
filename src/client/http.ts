// HTTP to an edgestr deployment: NIP-98 signed requests (a fresh nonce on each, so identical calls
// in the same second both succeed), /health and the NIP-11 document. Failures are values with the
// HTTP status (0 when the deployment could not be reached).
import { err, ok, type Result } from '../shared/errors.js';
import { makeHttpAuthHeader } from '../shared/nip98.js';
import type { KeyPair } from './keys.js';

export interface HttpError {
  /** HTTP status, or 0 when the deployment could not be reached. */
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

async function send(url: string, init: RequestInit): Promise<Result<Response, HttpError>> {
  try {
    return ok(await fetch(url, init));
  } catch (e) {
    const cause = (e as { cause?: { code?: string; message?: string } }).cause;
    return err({ status: 0, message: `cannot reach ${new URL(url).origin}: ${cause?.code ?? cause?.message ?? (e as Error).message}` });
  }
}

async function readJson(res: Response): Promise<unknown> {
  const text = await res.text();
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

/** A JSON request; signed with NIP-98 when `key` is given. */
export async function requestJson(
  base: string,
  method: string,
  path: string,
  opts: { key?: KeyPair; body?: unknown; accept?: string } = {},
): Promise<Result<unknown, HttpError>> {
  const url = `${httpBase(base)}${path}`;
  const body = opts.body === undefined ? undefined : JSON.stringify(opts.body);
  const headers: Record<string, string> = { Accept: opts.accept ?? 'application/json' };
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  if (opts.key) headers.Authorization = nip98Header(opts.key, url, method, body);
  const res = await send(url, { method, headers, ...(body !== undefined ? { body } : {}) });
  if (!res.ok) return res;
  const json = await readJson(res.value);
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
