// An owner removed by an operator (DELETE /api/admin/owners/<pubkey>) leaves a shard that stores
// nothing new: the sockets still open on it (the owner's, a stranger's) are refused every stored
// write, as after a suspension, instead of the shard falling back to the default plan. Outside
// EDGESTR_OPEN_SHARDS (where the router no longer serves the shard) the shard also closes the
// sockets it holds, on whichever object holds them (its primary, or its K edge objects), and
// refuses new ones. Adding the owner again undoes both, and so does listing it in EDGESTR_OWNERS
// (where the admin API no longer reaches it: a listed owner is never suspended nor removed). With
// K > 1, an edge that missed being told (the primary tells each edge once) is held by its primary
// all the same and learns the change from it.
import { env, runInDurableObject, SELF } from 'cloudflare:test';
import { describe, expect, it } from 'vitest';
import { accountsStub } from '../../workers/accounts/accounts-do.js';
import { shardStub } from '../../workers/common/shards.js';
import type { RelayEnv } from '../../workers/relay-do/shard.js';
import { OwnerPlan } from '../../workers/relay-do/owner-plan.js';
import { api } from './api-helpers.js';
import type { RelayShard } from '../../workers/relay-do/shard.js';
import { BASE, connect, edgesOf, keys, sign, socketObject, socketObjects, type Keys, type TestSocket } from './helpers.js';
import { TEST_ADMIN_SK, TEST_OWNER } from './test-keys.js';

const admin = (method: string, path: string, body?: unknown) => api(TEST_ADMIN_SK, method, path, body);

const REMOVED = 'restricted: removed: this owner was removed from this deployment; its shard is read-only';
const CLOSED = 'restricted: this owner was removed from this deployment; its shard is no longer served';
/** What a connection not on the owner's side is told instead (owner-plan.ts: the owner's standing is not its business). */
const READ_ONLY = 'restricted: this shard stores nothing new for now; retry later';

async function addOwner(): Promise<Keys> {
  const k = keys();
  expect(await admin('POST', '/api/admin/owners', { pubkey: k.pk })).toEqual({ status: 201, json: { pubkey: k.pk, plan: 'default', suspended: false } });
  return k;
}

/** A socket on the owner's shard authenticated as `k` (`headers`: the client's, e.g. its address). */
async function socketOf(owner: Keys, k: Keys, headers: Record<string, string> = {}): Promise<TestSocket> {
  const s = await connect(`/r/${owner.pk}`, headers);
  expect((await s.auth(k)).slice(2)).toEqual([true, '']);
  return s;
}

/** A note by `k` (p-tagging the owner: a stranger's lands in the owner's inbox), and the relay's answer. */
async function note(s: TestSocket, k: Keys, owner: Keys): Promise<[boolean, string]> {
  const e = sign(k, { kind: 1, content: `note ${Math.random()}`, tags: [['p', owner.pk]] });
  const ok = await s.publish(e);
  return [ok[2], ok[3]];
}

/** Waits until the relay closed `s`; its close code and reason. */
async function closeOf(s: TestSocket, timeoutMs = 5000): Promise<{ code: number; reason: string }> {
  const deadline = Date.now() + timeoutMs;
  while (!s.closed && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
  if (!s.closed) throw new Error('the relay did not close the socket');
  return s.closed;
}

/**
 * Runs the objects of `owner`'s shard (its primary and, with K > 1, its edges) as a deployment
 * with closed shards (EDGESTR_OPEN_SHARDS unset), as the test configuration cannot: the objects'
 * environment is the Worker's.
 */
async function closedShards(owner: Keys, closed: boolean): Promise<void> {
  await shardEnv(owner, { EDGESTR_OPEN_SHARDS: closed ? undefined : 'true' });
}

/** Runs every object of `owner`'s shard with `vars` changed in its environment (see closedShards). */
async function shardEnv(owner: Keys, vars: Pick<RelayEnv, 'EDGESTR_OPEN_SHARDS' | 'EDGESTR_OWNERS'>): Promise<void> {
  for (const stub of [shardStub(env, owner.pk), ...socketObjects(owner.pk)]) {
    await runInDurableObject(stub, (instance) => {
      const shard = instance as unknown as { env: RelayEnv };
      shard.env = { ...shard.env, ...vars };
    });
  }
}

/**
 * Makes the next change of the owner's account told to `edge` fail there, as when its primary's
 * call to it (setOwnerAccount) does not get through: the edge keeps what it had.
 */
async function missNextAccountChange(edge: DurableObjectStub<RelayShard>): Promise<void> {
  await runInDurableObject(edge, (instance) => {
    const shard = instance as unknown as { takeAccount?: (account: unknown) => void };
    shard.takeAccount = () => {
      delete shard.takeAccount; // the next change gets through
      throw new Error('the edge was not reached (test)');
    };
  });
}

/** Whether the object `stub` holds the owner's removal in its storage. */
const holdsRemoval = (stub: DurableObjectStub<RelayShard>, owner: string) =>
  runInDurableObject(stub, (_i, state) => new OwnerPlan(state.storage.sql, env, () => owner, 4000).removed());

/** Whether owner shards have edge objects in this test project (K = 4: vitest.edges.config.ts). */
const withEdges = edgesOf(keys().pk) > 1;

describe('an owner removed from the deployment', () => {
  it('after a suspension: the sockets still open (the owner’s, a stranger’s) store nothing new; adding it again lets the owner write', async () => {
    const owner = await addOwner();
    const stranger = keys();
    const own = await socketOf(owner, owner);
    const other = await socketOf(owner, stranger);
    expect(await note(own, owner, owner)).toEqual([true, '']);
    expect(await note(other, stranger, owner)).toEqual([true, '']);

    expect(await admin('PATCH', `/api/admin/owners/${owner.pk}`, { suspended: true })).toMatchObject({ status: 200, json: { suspended: true } });
    expect(await note(own, owner, owner)).toEqual([false, 'restricted: suspended: this owner’s shard is read-only']);
    expect(await note(other, stranger, owner)).toEqual([false, READ_ONLY]);

    expect(await admin('DELETE', `/api/admin/owners/${owner.pk}`)).toEqual({ status: 204, json: null });
    expect(await note(own, owner, owner)).toEqual([false, REMOVED]);
    expect(await note(other, stranger, owner)).toEqual([false, READ_ONLY]);
    // Ephemeral events are not stored: they still pass, as on a suspended owner's shard.
    const ephemeral = sign(owner, { kind: 20001, content: 'still here' });
    expect((await own.publish(ephemeral)).slice(2)).toEqual([true, '']);
    // EDGESTR_OPEN_SHARDS (the test configuration): the router still serves the shard, its sockets stay open.
    expect([own.closed, other.closed]).toEqual([undefined, undefined]);

    expect(await admin('POST', '/api/admin/owners', { pubkey: owner.pk })).toEqual({ status: 201, json: { pubkey: owner.pk, plan: 'default', suspended: false } });
    expect(await note(own, owner, owner)).toEqual([true, '']);
    expect(await note(other, stranger, owner)).toEqual([true, '']);
    own.close();
    other.close();
  });

  it('removed without a suspension: the same refusal, kept in the shard’s storage (a restart does not forget it)', async () => {
    const owner = await addOwner();
    const own = await socketOf(owner, owner);
    expect(await admin('DELETE', `/api/admin/owners/${owner.pk}`)).toEqual({ status: 204, json: null });
    expect(await note(own, owner, owner)).toEqual([false, REMOVED]);
    // What a new instance of the shard reads from storage.
    const removed = (pk: string) => runInDurableObject(shardStub(env, pk), (_i, state) => new OwnerPlan(state.storage.sql, env, () => pk, 4000).removed());
    expect(await removed(owner.pk)).toBe(true);
    expect(await admin('POST', '/api/admin/owners', { pubkey: owner.pk })).toMatchObject({ status: 201 });
    expect(await removed(owner.pk)).toBe(false);
    own.close();
  });

  it('outside EDGESTR_OPEN_SHARDS: the shard closes the sockets it holds (wherever they are) and refuses new ones until the owner is added again', async () => {
    const owner = await addOwner();
    const stranger = keys();
    const own = await socketOf(owner, owner);
    const other = await socketOf(owner, stranger);
    await closedShards(owner, true);
    try {
      expect(await admin('DELETE', `/api/admin/owners/${owner.pk}`)).toEqual({ status: 204, json: null });
      expect(await closeOf(own)).toEqual({ code: 1008, reason: CLOSED });
      expect(await closeOf(other)).toEqual({ code: 1008, reason: CLOSED });
      // A router that has not learnt of the removal yet (its cached registry, or a hosted agent
      // reaching its own shard without the router) still lands a new socket on the shard: refused there.
      const late = await SELF.fetch(`${BASE}/r/${owner.pk}`, { headers: { Upgrade: 'websocket' } });
      expect([late.status, await late.text()]).toEqual([404, 'this owner was removed from this deployment; its shard is no longer served']);

      expect(await admin('POST', '/api/admin/owners', { pubkey: owner.pk })).toMatchObject({ status: 201 });
      const again = await socketOf(owner, owner);
      expect(await note(again, owner, owner)).toEqual([true, '']);
      again.close();
    } finally {
      await closedShards(owner, false);
    }
  });

  it('removed through the registry, then listed in EDGESTR_OWNERS: the shard serves it again (upgrade and writes), outside EDGESTR_OPEN_SHARDS and under it', async () => {
    const owner = await addOwner();
    const first = await socketOf(owner, owner);
    await closedShards(owner, true);
    try {
      expect(await admin('DELETE', `/api/admin/owners/${owner.pk}`)).toEqual({ status: 204, json: null });
      expect(await closeOf(first)).toEqual({ code: 1008, reason: CLOSED });
      // The operator lists the key statically (the admin API now answers 409 for it: nothing pushes an account to the shard).
      await shardEnv(owner, { EDGESTR_OWNERS: `${TEST_OWNER},${owner.pk}` });
      const upgrade = await SELF.fetch(`${BASE}/r/${owner.pk}`, { headers: { Upgrade: 'websocket' } });
      expect(upgrade.status).toBe(101);
      upgrade.webSocket?.accept();
      upgrade.webSocket?.close();
      const again = await socketOf(owner, owner);
      expect(await note(again, owner, owner)).toEqual([true, '']);
      await closedShards(owner, false);
      expect(await note(again, owner, owner)).toEqual([true, '']);
      again.close();
    } finally {
      await shardEnv(owner, { EDGESTR_OPEN_SHARDS: 'true', EDGESTR_OWNERS: TEST_OWNER });
    }
  });

  it('suspended through the registry, then listed in EDGESTR_OWNERS (never suspended): the shard takes the owner’s writes', async () => {
    const owner = await addOwner();
    const own = await socketOf(owner, owner);
    expect(await admin('PATCH', `/api/admin/owners/${owner.pk}`, { suspended: true })).toMatchObject({ status: 200, json: { suspended: true } });
    expect(await note(own, owner, owner)).toEqual([false, 'restricted: suspended: this owner’s shard is read-only']);
    await shardEnv(owner, { EDGESTR_OWNERS: `${TEST_OWNER},${owner.pk}` });
    try {
      expect(await note(own, owner, owner)).toEqual([true, '']);
    } finally {
      await shardEnv(owner, { EDGESTR_OWNERS: TEST_OWNER });
    }
    expect(await note(own, owner, owner)).toEqual([false, 'restricted: suspended: this owner’s shard is read-only']);
    own.close();
  });

  it.runIf(withEdges)('K > 1, outside EDGESTR_OPEN_SHARDS: an edge that missed the removal is refused by its primary and closes its sockets', async () => {
    const owner = await addOwner();
    const address = { 'CF-Connecting-IP': '192.0.2.71' }; // every connection of an address lands on one edge
    const own = await connect(`/r/${owner.pk}`, address);
    expect((await own.auth(owner)).slice(2)).toEqual([true, '']);
    const other = await connect(`/r/${owner.pk}`, address);
    expect(await note(own, owner, owner)).toEqual([true, '']);
    const edge = await socketObject(owner.pk);
    await closedShards(owner, true);
    try {
      await missNextAccountChange(edge);
      expect(await admin('DELETE', `/api/admin/owners/${owner.pk}`)).toEqual({ status: 204, json: null });
      expect(await holdsRemoval(edge, owner.pk)).toBe(false);
      // Whatever an edge sends for a shard not served is refused at the primary: history, COUNT, an ephemeral event.
      const ephemeral = sign(owner, { kind: 20001, content: 'still here?' });
      const batch = await shardStub(env, owner.pk).edgeBatch(owner.pk, [
        { op: 'query', filters: [{ kinds: [1] }], readers: [owner.pk] },
        { op: 'count', filters: [{ kinds: [1] }], readers: [owner.pk] },
        { op: 'event', event: ephemeral, origin: { authed: [owner.pk], internal: false, relayUrl: `ws://relay.test/r/${owner.pk}` } },
      ]);
      expect(batch).toEqual([0, 1, 2].map(() => ({ op: 'error', message: CLOSED, notServed: true })));
      // The edge's next REQ gets the primary's refusal, and the edge takes the removal from its answer: its sockets close.
      own.send(['REQ', 'feed', { kinds: [1] }]);
      expect(await own.next((f) => f[1] === 'feed')).toEqual(['CLOSED', 'feed', CLOSED]);
      expect(await closeOf(own)).toEqual({ code: 1008, reason: CLOSED });
      expect(await closeOf(other)).toEqual({ code: 1008, reason: CLOSED });
      expect(await holdsRemoval(edge, owner.pk)).toBe(true);
    } finally {
      await closedShards(owner, false);
    }
  });

  it.runIf(withEdges)('K > 1, outside EDGESTR_OPEN_SHARDS: an edge that missed the re-adding asks its primary before refusing an upgrade, and serves it', async () => {
    const owner = await addOwner();
    const address = { 'CF-Connecting-IP': '192.0.2.72' };
    const first = await socketOf(owner, owner, address);
    const edge = await socketObject(owner.pk);
    await closedShards(owner, true);
    try {
      expect(await admin('DELETE', `/api/admin/owners/${owner.pk}`)).toEqual({ status: 204, json: null });
      expect(await closeOf(first)).toEqual({ code: 1008, reason: CLOSED });
      await missNextAccountChange(edge);
      expect(await admin('POST', '/api/admin/owners', { pubkey: owner.pk })).toMatchObject({ status: 201 });
      expect(await holdsRemoval(edge, owner.pk)).toBe(true);
      const again = await socketOf(owner, owner, address);
      expect(await note(again, owner, owner)).toEqual([true, '']);
      expect(await holdsRemoval(edge, owner.pk)).toBe(false);
      again.close();
    } finally {
      await closedShards(owner, false);
    }
  });

  it.runIf(withEdges)('K > 1, outside EDGESTR_OPEN_SHARDS: an edge told the re-adding, then late the removal before it, keeps serving (its primary’s notices carry their version)', async () => {
    const owner = await addOwner();
    const address = { 'CF-Connecting-IP': '192.0.2.73' };
    const own = await socketOf(owner, owner, address);
    const edge = await socketObject(owner.pk);
    await closedShards(owner, true);
    try {
      const { version } = (await accountsStub(env).standing(owner.pk))!;
      // The re-adding at the owner's current version, then the removal before it.
      await edge.edgeOwnerAccount({ plan: 'default', suspended: false }, version);
      await edge.edgeOwnerAccount(undefined, version - 1);
      expect(await holdsRemoval(edge, owner.pk)).toBe(false);
      expect(own.closed).toBeUndefined();
      expect(await note(own, owner, owner)).toEqual([true, '']);
      // The version an edge holds is its primary's: a removal the primary tells afterwards still applies.
      expect(await admin('DELETE', `/api/admin/owners/${owner.pk}`)).toEqual({ status: 204, json: null });
      expect(await closeOf(own)).toEqual({ code: 1008, reason: CLOSED });
      expect(await holdsRemoval(edge, owner.pk)).toBe(true);
    } finally {
      await closedShards(owner, false);
    }
  });
});
