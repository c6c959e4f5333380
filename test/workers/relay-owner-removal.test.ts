// An owner removed by an operator (DELETE /api/admin/owners/<pubkey>) leaves a shard that stores
// nothing new: the sockets still open on it (the owner's, a stranger's) are refused every stored
// write, as after a suspension, instead of the shard falling back to the default plan. Outside
// EDGESTR_OPEN_SHARDS (where the router no longer serves the shard) the shard also closes the
// sockets it holds, on whichever object holds them (its primary, or its K edge objects), and
// refuses new ones. Adding the owner again undoes both.
import { env, runInDurableObject, SELF } from 'cloudflare:test';
import { describe, expect, it } from 'vitest';
import { shardStub } from '../../workers/common/shards.js';
import type { RelayEnv } from '../../workers/relay-do/shard.js';
import { OwnerPlan } from '../../workers/relay-do/owner-plan.js';
import { api } from './api-helpers.js';
import { BASE, connect, keys, sign, socketObjects, type Keys, type TestSocket } from './helpers.js';
import { TEST_ADMIN_SK } from './test-keys.js';

const admin = (method: string, path: string, body?: unknown) => api(TEST_ADMIN_SK, method, path, body);

const REMOVED = 'restricted: removed: this owner was removed from this deployment; its shard is read-only';
const CLOSED = 'restricted: this owner was removed from this deployment; its shard is no longer served';

async function addOwner(): Promise<Keys> {
  const k = keys();
  expect(await admin('POST', '/api/admin/owners', { pubkey: k.pk })).toEqual({ status: 201, json: { pubkey: k.pk, plan: 'default', suspended: false } });
  return k;
}

/** A socket on the owner's shard authenticated as `k`. */
async function socketOf(owner: Keys, k: Keys): Promise<TestSocket> {
  const s = await connect(`/r/${owner.pk}`);
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
  for (const stub of [shardStub(env, owner.pk), ...socketObjects(owner.pk)]) {
    await runInDurableObject(stub, (instance) => {
      const shard = instance as unknown as { env: RelayEnv & { EDGESTR_OPEN_SHARDS?: string } };
      shard.env = { ...shard.env, EDGESTR_OPEN_SHARDS: closed ? undefined : 'true' };
    });
  }
}

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

    expect(await admin('DELETE', `/api/admin/owners/${owner.pk}`)).toEqual({ status: 204, json: null });
    expect(await note(own, owner, owner)).toEqual([false, REMOVED]);
    expect(await note(other, stranger, owner)).toEqual([false, REMOVED]);
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
});
