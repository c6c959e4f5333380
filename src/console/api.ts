// The management API (/api) from the browser: every call signed with NIP-98 by the signed-in key
// (u, method, payload = sha256 of the body, and a random nonce so identical calls stay distinct).
// Answers are read as the shapes the client library reads them as (src/client/schemas.ts).

import { z } from 'zod';
import { agentProviderLabel, AgentViewSchema, ApiErrorSchema, type AgentView } from '../client/schemas.js';
import { errorMessage } from '../shared/errors.js';
import { base64Encode, bytesToHex } from '../shared/hex.js';
import { KIND } from '../shared/kinds.js';
import { sha256Hex } from '../shared/nip98.js';
import type { Signer } from './signer.js';

/** The agent's shape is the client library's (src/client/schemas.ts), for the console's modules too. */
export { agentProviderLabel, AgentViewSchema, type AgentView };

const utf8 = new TextEncoder();

export type ApiAnswer = { ok: true; status: number; json: unknown } | { ok: false; status: number; message: string };

const RevokedSchema = z.object({ revoked: z.string() });

/**
 * What the console says after DELETE /api/agents/<key> of the agent named `name` answered `a`
 * (ok): 204, the hosted agent deleted; 200 {revoked}, the key was not one of the owner's hosted
 * agents (deleted meanwhile, e.g. from another tab or the CLI), so only the owner's attestation of
 * it was revoked.
 */
export const deletedStatus = (name: string, a: { status: number; json: unknown }): string =>
  a.status === 200 && RevokedSchema.safeParse(a.json).success
    ? `${name} was no longer one of your hosted agents: your attestation of its key is revoked`
    : `${name} deleted`;

async function authHeader(signer: Signer, url: string, method: string, body: string | undefined): Promise<string> {
  const tags = [
    ['u', url],
    ['method', method],
  ];
  if (body !== undefined) tags.push(['payload', sha256Hex(utf8.encode(body))]);
  tags.push(['nonce', bytesToHex(crypto.getRandomValues(new Uint8Array(8)))]);
  const event = await signer.sign({ kind: KIND.HTTP_AUTH, created_at: Math.floor(Date.now() / 1000), tags, content: '' });
  return `Nostr ${base64Encode(utf8.encode(JSON.stringify(event)))}`;
}

/** One signed API call; a failure carries the API's error (and field issues) as one sentence. */
export async function api(signer: Signer, method: 'GET' | 'POST' | 'PATCH' | 'DELETE', path: string, body?: unknown): Promise<ApiAnswer> {
  const url = `${location.origin}${path}`;
  const text = body === undefined ? undefined : JSON.stringify(body);
  let res: Response;
  try {
    res = await fetch(url, {
      method,
      headers: { Authorization: await authHeader(signer, url, method, text), ...(text !== undefined ? { 'Content-Type': 'application/json' } : {}) },
      ...(text !== undefined ? { body: text } : {}),
    });
  } catch (e) {
    return { ok: false, status: 0, message: `${method} ${path} failed: ${errorMessage(e)}` };
  }
  const raw = await res.text();
  let json: unknown = null;
  try {
    json = raw ? JSON.parse(raw) : null;
  } catch {
    return { ok: false, status: res.status, message: `${method} ${path}: ${res.status} with a body that is not JSON` };
  }
  if (res.ok) return { ok: true, status: res.status, json };
  const e = ApiErrorSchema.safeParse(json);
  const issues = e.success ? (e.data.issues ?? []).map((i) => `${i.path || 'body'}: ${i.message}`).join('; ') : '';
  return { ok: false, status: res.status, message: `${e.success ? e.data.error : `HTTP ${res.status}`}${issues ? ` (${issues})` : ''}` };
}

/** The caller's agents (GET /api/agents); status 403 means the key may not own agents here. */
export async function listAgents(signer: Signer): Promise<{ ok: true; value: AgentView[] } | { ok: false; status: number; message: string }> {
  const r = await api(signer, 'GET', '/api/agents');
  if (!r.ok) return r;
  const parsed = z.object({ agents: z.array(AgentViewSchema) }).safeParse(r.json);
  return parsed.success ? { ok: true, value: parsed.data.agents } : { ok: false, status: r.status, message: 'GET /api/agents answered an unexpected shape' };
}
