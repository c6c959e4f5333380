// A shard object that holds nothing worth keeping deletes its storage (workers/relay-do/empty-shard.ts).
// Under EDGESTR_OPEN_SHARDS (this test configuration) every key has a shard: a NIP-11 fetch or an
// upgrade on /r/<fresh key> made a RelayShard whose schema (20 tables with their indexes and
// triggers, ~150 KB) and owner row stayed stored for good, so a stranger cycling fresh keys grew storage without
// bound. Now the object arms its alarm when its storage is made, and again when its last socket
// closes (a primary with K > 1 edges: when its last edge stops listening); the alarm deletes the
// whole storage when the object holds nothing worth keeping. The next request makes the schema
// again, and the shard works as before.
import { env, runDurableObjectAlarm, runInDurableObject, SELF } from 'cloudflare:test';
import { describe, expect, it, vi } from 'vitest';
import { shardStub } from '../../workers/common/shards.js';
import type { RelayShard } from '../../workers/relay-do/shard.js';
import { IDLE_DELAY_MS } from '../../workers/relay-do/edge-link.js';
import { api } from './api-helpers.js';
import { BASE, connect, edgesOf, keys, sign, socketObject, socketObjects, type Keys } from './helpers.js';
import { TEST_ADMIN_SK } from './test-keys.js';

/** What an object of a shard holds: its tables (not SQLite's nor the runtime's own), its database size, its alarm and sockets. */
async function held(stub: DurableObjectStub<RelayShard>): Promise<{ tables: string[]; size: number; alarm: number | null; sockets: number }> {
  return runInDurableObject(stub, async (_i, state) => ({
    tables: state.storage.sql
      .exec<{ name: string }>("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite%' AND substr(name, 1, 4) != '_cf_'")
      .toArray()
      .map((r) => r.name),
    size: state.storage.sql.databaseSize,
    alarm: await state.storage.getAlarm(),
    sockets: state.getWebSockets().length,
  }));
}

const nip11 = async (owner: string) => {
  const res = await SELF.fetch(`${BASE}/r/${owner}`, { headers: { Accept: 'application/nostr+json' } });
  return { status: res.status, json: (await res.json()) as Record<string, unknown> };
};

/** A socket on the shard of `owner`, authenticated as `owner`, with `e` published on it (answered OK true). */
async function publishAsOwner(owner: Keys, content: string) {
  const s = await connect(`/r/${owner.pk}`);
  expect((await s.auth(owner)).slice(2)).toEqual([true, '']);
  const e = sign(owner, { kind: 1, content });
  expect(await s.publish(e)).toEqual(['OK', e.id, true, '']);
  return { s, e };
}

/** Every object of the shard of `owner`: its primary, and its K edges when K > 1. */
const objectsOf = (owner: string): DurableObjectStub<RelayShard>[] => (edgesOf(owner) > 1 ? [shardStub(env, owner), ...socketObjects(owner)] : [shardStub(env, owner)]);

/** Waits until no object of the shard holds a socket (the closes reached them). */
async function noSockets(owner: string): Promise<void> {
  for (const stub of objectsOf(owner)) await vi.waitFor(async () => expect((await held(stub)).sockets).toBe(0));
}

describe('a shard that holds nothing worth keeping', () => {
  it('a NIP-11 fetch of a fresh key: the alarm it armed deletes everything the fetch made; the key works as before afterwards', async () => {
    const owner = keys();
    const first = await nip11(owner.pk);
    expect(first.status).toBe(200);
    const primary = shardStub(env, owner.pk);
    const made = await held(primary);
    // What one fetch made (measured: 20 tables with their indexes and triggers, the owner's row: 151,552 bytes).
    expect(made.tables.length).toBeGreaterThanOrEqual(20);
    expect(made.size).toBeGreaterThan(100_000);
    // Armed about a minute after the fetch.
    expect(made.alarm).toBeGreaterThan(Date.now() + 30_000);
    expect(made.alarm).toBeLessThanOrEqual(Date.now() + 60_000);

    expect(await runDurableObjectAlarm(primary)).toBe(true);
    const left = await held(primary);
    expect(left).toMatchObject({ tables: [], alarm: null });
    expect(left.size).toBeLessThan(made.size / 4);

    // The same key again: a write and a read as on any shard (at K > 1 the primary's first call is
    // its edge's batch, which names the shard), then the same document.
    const { s, e } = await publishAsOwner(owner, 'after the shard was emptied');
    expect((await s.req('again', { kinds: [1], authors: [owner.pk] })).events).toEqual([e]);
    s.close();
    expect(await nip11(owner.pk)).toEqual(first);
  });

  it('a shard with one stored event keeps everything: the alarms of all its objects run, the event is still served', async () => {
    const owner = keys();
    const { s, e } = await publishAsOwner(owner, 'kept');
    s.close();
    await noSockets(owner.pk);
    const primary = shardStub(env, owner.pk);
    const before = await held(primary);
    // The primary's alarm was armed when its storage was made (K = 1: by the upgrade; K > 1: by its edge's operations).
    expect(await runDurableObjectAlarm(primary)).toBe(true);
    for (const edge of objectsOf(owner.pk).slice(1)) await runDurableObjectAlarm(edge);
    const after = await held(primary);
    expect(after.tables).toEqual(before.tables);
    expect(after.tables).toContain('events');

    const reader = await connect(`/r/${owner.pk}`);
    expect((await reader.req('kept', { ids: [e.id] })).events).toEqual([e]);
    reader.close();
  });

  it('an open socket keeps the object; its close arms the alarm, which then deletes everything (at K > 1 the primary too, once the edge stops listening)', async () => {
    const owner = keys();
    const s = await connect(`/r/${owner.pk}`);
    expect(await s.req('nothing', { kinds: [1], authors: [owner.pk] })).toEqual({ events: [] });
    const holder = await socketObject(owner.pk);
    // The alarm armed when the object was made runs while the socket is open: nothing is deleted.
    expect(await runDurableObjectAlarm(holder)).toBe(true);
    expect((await held(holder)).tables).toContain('conn_subs');

    s.close();
    await noSockets(owner.pk);
    const closed = await held(holder);
    expect(closed.alarm).toBeGreaterThan(Date.now());
    expect(closed.alarm).toBeLessThanOrEqual(Date.now() + 60_000);
    expect(await runDurableObjectAlarm(holder)).toBe(true);
    expect(await held(holder)).toMatchObject({ tables: [], alarm: null, sockets: 0 });

    if (edgesOf(owner.pk) > 1) {
      // The primary listened to the edge while its subscription was open; the edge's idle (IDLE_DELAY_MS after it closed) leaves it nothing.
      const primary = shardStub(env, owner.pk);
      await vi.waitFor(
        async () => expect(await runInDurableObject(primary, (_i, state) => state.storage.sql.exec('SELECT 1 FROM edges_listening').toArray().length)).toBe(0),
        { timeout: IDLE_DELAY_MS + 5_000, interval: 200 },
      );
      expect(await runDurableObjectAlarm(primary)).toBe(true);
      expect(await held(primary)).toMatchObject({ tables: [], alarm: null });
    }
  });

  it('an owner added by an operator keeps its shard: the account pushed to it is worth keeping', async () => {
    const owner = keys();
    expect(await api(TEST_ADMIN_SK, 'POST', '/api/admin/owners', { pubkey: owner.pk, plan: 'small_shard' })).toEqual({
      status: 201,
      json: { pubkey: owner.pk, plan: 'small_shard', suspended: false },
    });
    expect((await nip11(owner.pk)).status).toBe(200);
    const primary = shardStub(env, owner.pk);
    const before = await held(primary);
    expect(before.tables).toContain('owner_account');
    await runDurableObjectAlarm(primary);
    expect((await held(primary)).tables).toEqual(before.tables);
    // The plan still applies: 1000 stored bytes.
    const s = await connect(`/r/${owner.pk}`);
    expect((await s.auth(owner)).slice(2)).toEqual([true, '']);
    const big = sign(owner, { kind: 1, content: 'x'.repeat(1200) });
    expect(await s.publish(big)).toEqual(['OK', big.id, false, 'restricted: storage quota: the owner’s plan allows 1000 stored bytes on this shard']);
    s.close();
  });
});
