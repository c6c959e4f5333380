// The admin API's notice of an owner's account to its shard (workers/api/admin.ts notifyOwner,
// RelayShard.setOwnerAccount, owner-plan.ts `set`). A DELETE whose notice failed (the shard or an
// agent unreachable after the registry removed the owner) answers 503 saying what was done and to
// send DELETE again; the DELETE of a key already removed re-sends the notice (204), so a shard that
// missed it stops storing the removed owner's events. Each notice carries the version the Accounts
// object gave the change, and the shard ignores a notice older than the one it holds (kept in its
// storage), so overlapping admin calls cannot leave it on a stale account (a removed owner's open
// sockets writing again).
import { env, runInDurableObject } from 'cloudflare:test';
import { describe, expect, it } from 'vitest';
import { accountsStub } from '../../workers/accounts/accounts-do.js';
import { shardStub } from '../../workers/common/shards.js';
import { OwnerPlan } from '../../workers/relay-do/owner-plan.js';
import type { RelayShard } from '../../workers/relay-do/shard.js';
import { api } from './api-helpers.js';
import { connect, keys, sign, type Keys, type TestSocket } from './helpers.js';
import { holdObject } from './hold-object.js';
import { TEST_ADMIN_SK } from './test-keys.js';

const admin = (method: string, path: string, body?: unknown) => api(TEST_ADMIN_SK, method, path, body);
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

const REMOVED = 'restricted: removed: this owner was removed from this deployment; its shard is read-only';
const SUSPENDED = 'restricted: suspended: this owner’s shard is read-only';

async function addOwner(): Promise<Keys> {
  const k = keys();
  expect(await admin('POST', '/api/admin/owners', { pubkey: k.pk })).toEqual({ status: 201, json: { pubkey: k.pk, plan: 'default', suspended: false } });
  return k;
}

/** A socket on the owner's shard authenticated as the owner. */
async function ownSocket(owner: Keys): Promise<TestSocket> {
  const s = await connect(`/r/${owner.pk}`);
  expect((await s.auth(owner)).slice(2)).toEqual([true, '']);
  return s;
}

/** The owner's note on `s`: whether it was stored, and the relay's message. */
async function note(s: TestSocket, owner: Keys): Promise<[boolean, string]> {
  const ok = await s.publish(sign(owner, { kind: 1, content: `note ${Math.random()}` }));
  return [ok[2], ok[3]];
}

/** The account the shard's primary holds in its storage (what a new instance reads; undefined: removed). */
const shardAccount = (owner: string) =>
  runInDurableObject(shardStub(env, owner) as DurableObjectStub<RelayShard>, (_i, state) => new OwnerPlan(state.storage.sql, env, () => owner, 4000).held().account);

/** Waits until the shard's primary holds what `done` accepts (the notice reached it; the agents are told next). */
async function shardTold(owner: string, done: (account: Awaited<ReturnType<typeof shardAccount>>) => boolean): Promise<void> {
  while (!done(await shardAccount(owner))) await sleep(20);
  await sleep(500);
}

/** A new agent of `owner`. */
async function createAgent(owner: Keys): Promise<string> {
  const created = await api(owner.sk, 'POST', '/api/agents', { name: 'held agent', provider: 'echo' });
  expect(created.status).toBe(201);
  return (created.json as { pubkey: string }).pubkey;
}

const agentStub = (agent: string) => env.AGENT.get(env.AGENT.idFromName(agent));

describe('DELETE /api/admin/owners/<pubkey> whose notice fails', () => {
  it('an agent unreachable: 503 saying the owner was removed and to send DELETE again; the retry is 204 and tells the shard and agents', async () => {
    const owner = await addOwner();
    const agent = await createAgent(owner);
    const own = await ownSocket(owner);
    expect(await note(own, owner)).toEqual([true, '']);

    const release = await holdObject(agentStub(agent));
    const first = admin('DELETE', `/api/admin/owners/${owner.pk}`);
    // The registry removed the owner and the shard was told; the agent's notice waits behind its held gate.
    await shardTold(owner.pk, (account) => account === undefined);
    await release(new Error('simulated agent reset'));
    expect(await first).toEqual({
      status: 503,
      json: { error: `removed from the registry; its shard/agents could not all be told (agent ${agent}: simulated agent reset); send DELETE again` },
    });

    expect(await admin('DELETE', `/api/admin/owners/${owner.pk}`)).toEqual({ status: 204, json: null });
    expect(await note(own, owner)).toEqual([false, REMOVED]);
    // The key stays removed: nothing to PATCH.
    expect(await admin('PATCH', `/api/admin/owners/${owner.pk}`, { suspended: true })).toEqual({ status: 404, json: { error: 'no such owner' } });
    own.close();
  });

  it('PATCH and POST whose notice fails: 503 saying what the registry did and how to tell them again; doing so answers as usual', async () => {
    const owner = await addOwner();
    const agent = await createAgent(owner);
    let release = await holdObject(agentStub(agent));
    const patch = admin('PATCH', `/api/admin/owners/${owner.pk}`, { suspended: true });
    await shardTold(owner.pk, (account) => account?.suspended === true);
    await release(new Error('simulated agent reset'));
    expect(await patch).toEqual({
      status: 503,
      json: { error: `changed in the registry; its shard/agents could not all be told (agent ${agent}: simulated agent reset); send PATCH again` },
    });
    expect(await admin('PATCH', `/api/admin/owners/${owner.pk}`, { suspended: true })).toMatchObject({ status: 200, json: { suspended: true } });

    expect(await admin('DELETE', `/api/admin/owners/${owner.pk}`)).toEqual({ status: 204, json: null });
    release = await holdObject(agentStub(agent));
    const post = admin('POST', '/api/admin/owners', { pubkey: owner.pk });
    await shardTold(owner.pk, (account) => account !== undefined);
    await release(new Error('simulated agent reset'));
    expect(await post).toEqual({
      status: 503,
      json: { error: `added to the registry; its shard/agents could not all be told (agent ${agent}: simulated agent reset); send PATCH /api/admin/owners/${owner.pk} {} to tell them again` },
    });
    expect(await admin('PATCH', `/api/admin/owners/${owner.pk}`, {})).toMatchObject({ status: 200, json: { pubkey: owner.pk, suspended: false } });
    const own = await ownSocket(owner);
    expect(await note(own, owner)).toEqual([true, '']);
    own.close();
  });

  it('the shard never told (the registry removed the owner, the notice did not arrive): DELETE again answers 204 and the shard stores nothing new from the owner, on open and new sockets', async () => {
    const owner = await addOwner();
    const own = await ownSocket(owner);
    expect(await note(own, owner)).toEqual([true, '']);
    // The DELETE's registry step, without its notice.
    expect(await accountsStub(env).remove(owner.pk)).toBe(true);
    expect(await note(own, owner)).toEqual([true, '']);

    expect(await admin('DELETE', `/api/admin/owners/${owner.pk}`)).toEqual({ status: 204, json: null });
    expect(await note(own, owner)).toEqual([false, REMOVED]);
    const fresh = await ownSocket(owner);
    expect(await note(fresh, owner)).toEqual([false, REMOVED]);
    // A key never added is still unknown.
    expect(await admin('DELETE', `/api/admin/owners/${keys().pk}`)).toEqual({ status: 404, json: { error: 'no such owner' } });
    own.close();
    fresh.close();
  });
});

describe('notices are versioned: a late one does not undo a newer change', () => {
  it('the Accounts object gives each change of an owner a higher version, and the removal one too', async () => {
    const accounts = accountsStub(env);
    const owner = await addOwner();
    const added = await accounts.standing(owner.pk);
    expect(added).toEqual({ account: { plan: 'default', suspended: false }, version: expect.any(Number) });
    expect(await admin('PATCH', `/api/admin/owners/${owner.pk}`, { suspended: true })).toMatchObject({ status: 200 });
    const patched = await accounts.standing(owner.pk);
    expect(patched?.account).toEqual({ plan: 'default', suspended: true });
    expect(patched!.version).toBeGreaterThan(added!.version);
    expect(await admin('DELETE', `/api/admin/owners/${owner.pk}`)).toEqual({ status: 204, json: null });
    const removed = await accounts.standing(owner.pk);
    expect(removed).toEqual({ account: undefined, version: patched!.version + 1 });
    expect(await admin('POST', '/api/admin/owners', { pubkey: owner.pk })).toMatchObject({ status: 201 });
    expect(await accounts.standing(owner.pk)).toEqual({ account: { plan: 'default', suspended: false }, version: removed!.version + 1 });
    expect(await accounts.standing(keys().pk)).toBeUndefined();
  });

  it('suspended at v2, then not suspended at v1: the owner’s writes are still refused as suspended', async () => {
    const owner = await addOwner();
    const own = await ownSocket(owner);
    const shard = shardStub(env, owner.pk);
    const { version } = (await accountsStub(env).standing(owner.pk))!;
    await shard.setOwnerAccount({ plan: 'default', suspended: true }, version + 2);
    await shard.setOwnerAccount({ plan: 'default', suspended: false }, version + 1);
    expect(await note(own, owner)).toEqual([false, SUSPENDED]);
    // Removed at v4, then an account at v3: still removed; an account at v5 lifts it.
    await shard.setOwnerAccount(undefined, version + 4);
    await shard.setOwnerAccount({ plan: 'default', suspended: false }, version + 3);
    expect(await note(own, owner)).toEqual([false, REMOVED]);
    // The version is kept in the shard's storage: a new instance ignores the older notice too.
    expect(await runInDurableObject(shard as DurableObjectStub<RelayShard>, (_i, state) => new OwnerPlan(state.storage.sql, env, () => owner.pk, 4000).set({ plan: 'default', suspended: false }, version + 3))).toBe(false);
    await shard.setOwnerAccount({ plan: 'default', suspended: false }, version + 5);
    expect(await note(own, owner)).toEqual([true, '']);
    own.close();
  });

  it('a PATCH’s notice read before a DELETE and arriving after it leaves the shard removed', async () => {
    const owner = await addOwner();
    const own = await ownSocket(owner);
    expect(await admin('PATCH', `/api/admin/owners/${owner.pk}`, { plan: 'default' })).toMatchObject({ status: 200 });
    // What the PATCH read from the registry; a DELETE runs before its notice arrives.
    const patched = (await accountsStub(env).standing(owner.pk))!;
    expect(await admin('DELETE', `/api/admin/owners/${owner.pk}`)).toEqual({ status: 204, json: null });
    await shardStub(env, owner.pk).setOwnerAccount(patched.account, patched.version);
    expect(await note(own, owner)).toEqual([false, REMOVED]);
    own.close();
  });
});
