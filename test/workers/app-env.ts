// Calls the Worker's default export with a modified environment (e.g. EDGESTR_OWNERS without an
// owner, closed shards, development mode), so that configuration-dependent rules can be tested
// inside workerd against the real Durable Objects of the test run.
import { createExecutionContext, env, waitOnExecutionContext } from 'cloudflare:test';
import app from '../../workers/index.js';
import { makeHttpAuthHeader } from '../../src/shared/nip98.js';
import { BASE } from './helpers.js';

export type EnvOverride = Partial<Record<keyof Cloudflare.Env, string | undefined>>;

/** The Worker's answer to `request` under `env` with `override` applied. */
export async function fetchWithEnv(override: EnvOverride, request: Request): Promise<Response> {
  const ctx = createExecutionContext();
  const response = await app.fetch(request, { ...env, ...override }, ctx);
  await waitOnExecutionContext(ctx);
  return response;
}

/** A NIP-98 signed management call under a modified environment; `base` defaults to the tests' BASE. */
export async function apiWithEnv(
  override: EnvOverride,
  sk: Uint8Array,
  method: string,
  path: string,
  body?: unknown,
  base: string = BASE,
): Promise<{ status: number; json: unknown }> {
  const url = `${base}${path}`;
  const text = body === undefined ? undefined : JSON.stringify(body);
  const request = new Request(url, {
    method,
    headers: { Authorization: makeHttpAuthHeader(sk, url, method, text), ...(text !== undefined ? { 'Content-Type': 'application/json' } : {}) },
    ...(text !== undefined ? { body: text } : {}),
  });
  const res = await fetchWithEnv(override, request);
  const raw = await res.text();
  return { status: res.status, json: raw ? (JSON.parse(raw) as unknown) : null };
}
