// Helpers for the relay operations tests: NIP-98 calls with a raw body (JSONL) under an environment
// where the test's fresh owner is allowed, and events published on the owner's shard.
import type { NostrEvent } from '../../src/shared/event.js';
import { makeHttpAuthHeader } from '../../src/shared/nip98.js';
import { fetchWithEnv } from './app-env.js';
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
