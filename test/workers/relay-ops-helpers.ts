// Helpers for the relay operations tests: NIP-98 calls with a raw body (JSONL) under an environment
// where the test's fresh owner is allowed, and events published on the owner's shard.
import { env } from 'cloudflare:test';
import { backendSigner, type NostrEvent } from '../../src/shared/event.js';
import { makeHttpAuthHeader } from '../../src/shared/nip98.js';
import { relayVerifier } from '../../workers/common/verifier.js';
import { shardStub } from '../../workers/common/shards.js';
import { shardUrl } from '../../workers/api/relay.js';
import { fetchWithEnv } from './app-env.js';
import type { ImportReport } from '../../workers/relay-do/import.js';
import type { RelayShard } from '../../workers/relay-do/shard.js';
import { BASE, connect, sign, type Keys } from './helpers.js';

/** A signed management call by `k`, with `k` (and `also`) in EDGESTR_OWNERS; the raw Response. */
export async function opsCall(k: Keys, method: string, path: string, body?: string, also: readonly string[] = []): Promise<Response> {
  const url = `${BASE}${path}`;
  const request = new Request(url, {
    method,
    headers: { Authorization: makeHttpAuthHeader(k.sk, url, method, body) },
    ...(body !== undefined ? { body } : {}),
  });
  return fetchWithEnv({ EDGESTR_OWNERS: [k.pk, ...also].join(',') }, request);
}

export const jsonl = (events: readonly NostrEvent[]): string => events.map((e) => `${JSON.stringify(e)}\n`).join('');

export async function exportOf(k: Keys, query = ''): Promise<NostrEvent[]> {
  const res = await opsCall(k, 'GET', `/api/relay/export${query}`);
  if (res.status !== 200) throw new Error(`export: ${res.status} ${await res.text()}`);
  return new TextDecoder()
    .decode(await res.arrayBuffer())
    .split('\n')
    .filter((l) => l !== '')
    .map((l) => JSON.parse(l) as NostrEvent);
}

export async function importInto(k: Keys, body: string): Promise<{ status: number; json: unknown }> {
  const res = await opsCall(k, 'POST', '/api/relay/import', body);
  return { status: res.status, json: await res.json() };
}

/** Publishes `events` on `owner`'s shard from a connection authenticated as the owner; returns their OK frames. */
export async function publishAsOwner(owner: Keys, events: readonly NostrEvent[]): Promise<Array<[string, string, boolean, string]>> {
  const ws = await connect(`/r/${owner.pk}`);
  await ws.auth(owner);
  const oks = [];
  for (const e of events) oks.push(await ws.publish(e));
  ws.close();
  return oks;
}

/** Everything a connection authenticated as `reader` gets from `owner`'s shard for `filter`. */
export async function queryShard(owner: Keys, reader: Keys, filter: object = {}): Promise<NostrEvent[]> {
  const ws = await connect(`/r/${owner.pk}`);
  await ws.auth(reader);
  const { events } = await ws.req('q', filter);
  ws.close();
  return events;
}

export const notes = (k: Keys, n: number, createdAt: (i: number) => number, kind = 1): NostrEvent[] =>
  Array.from({ length: n }, (_, i) => sign(k, { kind, content: `note ${i}`, created_at: createdAt(i) }));

/**
 * `n` events of `k` at one `createdAt`, each about 250 KB of JSON (130,000 characters of content,
 * within max_content_length, and a 120,000-character `alt` tag), near max_message_length: the
 * largest events a stranger can publish. Signed with the relay's Wasm backend (the JS hash takes
 * seconds for this many bytes).
 */
export async function bigNotes(k: Keys, n: number, createdAt: number): Promise<NostrEvent[]> {
  const signer = backendSigner(await relayVerifier());
  return Array.from({ length: n }, (_, i) =>
    signer({ kind: 1, content: `${i} ${'x'.repeat(130_000)}`, tags: [['alt', 'y'.repeat(120_000)]], created_at: createdAt }, k.sk),
  );
}

/**
 * `lines` through `shard`'s import RPC as `job` (the path of POST /api/relay/import and the restores),
 * under the shard's bulk lease, in one call; the shard's report (throws when the lease is refused).
 */
export async function importRpc(shard: DurableObjectStub<RelayShard>, owner: string | null, lines: string[], relayUrl: string, job: 'import' | 'restore' = 'import'): Promise<ImportReport> {
  const lease = await shard.beginBulk(job);
  if (!lease.ok) throw new Error(lease.error);
  try {
    const done = await shard.importEvents(owner, lines, relayUrl, lease.value, job);
    if (!done.ok) throw new Error(done.error);
    return done.value;
  } finally {
    await shard.endBulk(lease.value);
  }
}

/**
 * Stores `events` in `owner`'s shard through its import RPC (the path of POST /api/relay/import,
 * without hashing 8 MiB bodies for NIP-98), 30 at a time; throws when one is refused.
 */
export async function importAllOf(owner: Keys, events: readonly NostrEvent[]): Promise<void> {
  const shard = shardStub(env, owner.pk);
  for (let i = 0; i < events.length; i += 30) {
    const report = await importRpc(shard, owner.pk, events.slice(i, i + 30).map((e) => JSON.stringify(e)), shardUrl(env, BASE, owner.pk));
    if (report.accepted + report.duplicate !== Math.min(30, events.length - i)) throw new Error(`import: ${JSON.stringify(report)}`);
  }
}

/** Bytes of UTF-8 in `lines`. */
export const bytesOf = (lines: readonly string[]): number => lines.reduce((n, l) => n + new TextEncoder().encode(l).byteLength, 0);
