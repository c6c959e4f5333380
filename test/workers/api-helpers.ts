// Management API calls signed with NIP-98, for in-runtime tests.
import { SELF } from 'cloudflare:test';
import { makeHttpAuthHeader } from '../../src/shared/nip98.js';
import { BASE } from './helpers.js';

export interface ApiResponse {
  status: number;
  json: unknown;
}

export async function api(sk: Uint8Array, method: string, path: string, body?: unknown, headerOverride?: string): Promise<ApiResponse> {
  const url = `${BASE}${path}`;
  const text = body === undefined ? undefined : typeof body === 'string' ? body : JSON.stringify(body);
  const authorization = headerOverride ?? makeHttpAuthHeader(sk, url, method, text);
  const res = await SELF.fetch(url, {
    method,
    headers: { Authorization: authorization, ...(text !== undefined ? { 'Content-Type': 'application/json' } : {}) },
    ...(text !== undefined ? { body: text } : {}),
  });
  const raw = await res.text();
  return { status: res.status, json: raw ? (JSON.parse(raw) as unknown) : null };
}
