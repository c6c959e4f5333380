// Which bridges are "this deployment's" (docs/BRIDGE.md "Announcements"): the provider keys the
// public shard records as 'bridge' feed its NIP-11 `bridge_providers`, the /mcp gateway's
// preference and the clients' "this deployment's bridge" label. Only owners the operators vetted
// (listed in EDGESTR_OWNERS, added through /api/admin/owners, or marked `vetted` there) get that
// record, and only once a server was actually added: a key that signed itself up (EDGESTR_SIGNUP=
// open) still registers servers, its key recorded on the public shard as 'provisioned' only.
// Owners registered before `vetted` existed are vetted by the upgrade only when sign-up is not open
// then (with it open, EDGESTR_OUTBOUND_ALLOW and the bridge record are not theirs until vetted).
import { env, runDurableObjectAlarm, runInDurableObject, SELF } from 'cloudflare:test';
import { describe, expect, inject, it, vi } from 'vitest';
import '../mcp/provided.js';
import { Accounts, accountsStub } from '../../workers/accounts/accounts-do.js';
import { bridgeStub } from '../../workers/api/bridge.js';
import { forgetOwnerState } from '../../workers/common/owners.js';
import { shardStub } from '../../workers/common/shards.js';
import { makeHttpAuthHeader } from '../../src/shared/nip98.js';
import { checkOutboundUrl, outboundPolicy } from '../../src/shared/outbound-url.js';
import { api } from './api-helpers.js';
import { apiWithEnv, fetchWithEnv } from './app-env.js';
import { BASE, keys, type Keys } from './helpers.js';
import { DEFAULT_SIGNUP_CAPS } from '../../workers/accounts/signup-limits.js';
import { OPEN_SIGNUP, TEST_ADMIN_SK } from './test-keys.js';

const admin = (method: string, path: string, body?: unknown) => api(TEST_ADMIN_SK, method, path, body);
/**
 * A server nobody answers at (registration does not need upstream; `.invalid` never resolves),
 * private: no announcement. Public and https: an owner that signed itself up may not register the
 * hosts of EDGESTR_OUTBOUND_ALLOW (127.0.0.1 in the tests), which only vetted owners get.
 */
const server = (id: string) => ({ id, url: 'https://nobody.invalid/mcp', public: false });

let addresses = 0;
/** `k` signs itself up (EDGESTR_SIGNUP=open), from its own client address (SIGNUP_RATE_LIMIT is per address). */
async function signUp(): Promise<Keys> {
  const k = keys();
  const url = `${BASE}/api/signup`;
  const headers = { Authorization: makeHttpAuthHeader(k.sk, url, 'POST'), 'CF-Connecting-IP': `192.0.2.${++addresses}` };
  expect((await fetchWithEnv(OPEN_SIGNUP, new Request(url, { method: 'POST', headers }))).status).toBe(201);
  return k;
}

async function addOwner(): Promise<Keys> {
  const k = keys();
  expect((await admin('POST', '/api/admin/owners', { pubkey: k.pk })).status).toBe(201);
  return k;
}

/** The public shard's ownership records of `owner`: [agent, source]. */
const publicRecords = (owner: string) =>
  runInDurableObject(shardStub(env, null), (_i, state) =>
    state.storage.sql.exec<{ agent: string; source: string }>('SELECT agent, source FROM agent_owners WHERE owner = ? ORDER BY source', owner).toArray().map((r) => [r.agent, r.source]),
  );

async function nip11Providers(): Promise<string[]> {
  const res = await SELF.fetch(`${BASE}/`, { headers: { Accept: 'application/nostr+json' } });
  return ((await res.json()) as { bridge_providers: string[] }).bridge_providers;
}

/** Waits until server `id` of `owner`'s bridge was contacted once (its first refresh ran; polled, at most ~5 s). */
async function refreshed(owner: Keys, id: string): Promise<void> {
  for (let i = 0; i < 100; i++) {
    if (typeof (await bridgeStub(env, owner.pk).view(id))?.health.checked_at === 'number') return;
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error(`server ${id} was never refreshed`);
}

async function register(owner: Keys, id: string): Promise<string> {
  const r = await api(owner.sk, 'POST', '/api/bridge/servers', server(id));
  expect(r.status).toBe(201);
  return (r.json as { provider: string }).provider;
}

describe("this deployment's bridges", () => {
  it('a key that signed itself up registers servers, but its bridge is not one of this deployment’s: not in bridge_providers, recorded on the public shard as provisioned only', async () => {
    const k = await signUp();
    const provider = await register(k, 'self-made');
    expect(await shardStub(env, null).bridgeProviders()).not.toContain(provider);
    expect(await nip11Providers()).not.toContain(provider);
    expect(await publicRecords(k.pk)).toEqual([[provider, 'provisioned']]);
    // Its own shard still knows the key as its bridge (the write policy there).
    expect(await shardStub(env, k.pk).isAgentOwner(provider, k.pk)).toBe(true);
    expect(await accountsStub(env).owner(k.pk)).toMatchObject({ pubkey: k.pk, vetted: false });
  });

  it('an owner an operator added is: its key is recorded as a bridge and named in bridge_providers', async () => {
    const k = await addOwner();
    const provider = await register(k, 'vetted');
    expect(await shardStub(env, null).bridgeProviders()).toContain(provider);
    expect(await nip11Providers()).toContain(provider);
    expect(await publicRecords(k.pk)).toEqual([[provider, 'bridge']]);
  });

  it('a registration the plan refuses records nothing on the public shard', async () => {
    const plans = { EDGESTR_PLANS: JSON.stringify({ default: {}, no_bridge: { bridge_servers: 0 } }) };
    const k = keys();
    expect((await apiWithEnv(plans, TEST_ADMIN_SK, 'POST', '/api/admin/owners', { pubkey: k.pk, plan: 'no_bridge' })).status).toBe(201);
    expect(await apiWithEnv(plans, k.sk, 'POST', '/api/bridge/servers', server('refused'))).toEqual({
      status: 409,
      json: { error: 'the owner’s plan allows at most 0 bridge servers; delete one first' },
    });
    expect(await publicRecords(k.pk)).toEqual([]);
  });

  it('an operator vets a signed-up owner (PATCH {vetted: true}): its bridge becomes one of this deployment’s; {vetted: false} takes that back', async () => {
    const k = await signUp();
    const provider = await register(k, 'later-vetted');
    const listed = async () => ((await admin('GET', '/api/admin/owners')).json as { owners: Array<{ pubkey: string; vetted: boolean }> }).owners.find((o) => o.pubkey === k.pk);
    expect(await listed()).toMatchObject({ vetted: false });

    const vetted = await admin('PATCH', `/api/admin/owners/${k.pk}`, { vetted: true });
    expect(vetted).toMatchObject({ status: 200, json: { pubkey: k.pk, plan: 'default', suspended: false, vetted: true } });
    expect(await listed()).toMatchObject({ vetted: true });
    expect(await shardStub(env, null).bridgeProviders()).toContain(provider);
    expect(await publicRecords(k.pk)).toEqual([[provider, 'bridge']]);

    expect((await admin('PATCH', `/api/admin/owners/${k.pk}`, { vetted: false })).status).toBe(200);
    expect(await shardStub(env, null).bridgeProviders()).not.toContain(provider);
    expect(await publicRecords(k.pk)).toEqual([[provider, 'provisioned']]);
    // A later registration keeps it so.
    await register(k, 'later-vetted-2');
    expect(await publicRecords(k.pk)).toEqual([[provider, 'provisioned']]);
    expect(await admin('PATCH', `/api/admin/owners/${k.pk}`, { vetted: 'yes' })).toEqual({
      status: 422,
      json: { error: 'invalid owner', issues: [{ path: 'vetted', message: 'Invalid input: expected boolean, received string' }] },
    });
  });

  it('a bridge recorded as the deployment’s before its owner was known to have signed itself up loses that record at its next registration', async () => {
    const k = await signUp();
    const provider = await register(k, 'legacy-1');
    // As the record was made before this rule (every owner's key was recorded as a bridge).
    await shardStub(env, null).provisionAgent(provider, k.pk, 'bridge');
    expect(await shardStub(env, null).bridgeProviders()).toContain(provider);
    await register(k, 'legacy-2');
    expect(await shardStub(env, null).bridgeProviders()).not.toContain(provider);
    expect(await publicRecords(k.pk)).toEqual([[provider, 'provisioned']]);
  });

  it('a bridge reinstated after its owner was added again follows the same rule: an owner marked not vetted meanwhile is not listed again', async () => {
    const k = await addOwner();
    const provider = await register(k, 'reinstated');
    await refreshed(k, 'reinstated'); // the registration's own alarm has run (the next alarm below is the watchdog's)
    expect(await admin('DELETE', `/api/admin/owners/${k.pk}`)).toEqual({ status: 204, json: null });
    expect(await runDurableObjectAlarm(bridgeStub(env, k.pk))).toBe(true); // withdrawn: no longer a bridge of the deployment
    expect(await shardStub(env, null).bridgeProviders()).not.toContain(provider);
    expect((await admin('POST', '/api/admin/owners', { pubkey: k.pk })).status).toBe(201);
    expect((await admin('PATCH', `/api/admin/owners/${k.pk}`, { vetted: false })).status).toBe(200);
    expect(await runDurableObjectAlarm(bridgeStub(env, k.pk))).toBe(true); // reinstated
    expect(await runInDurableObject(bridgeStub(env, k.pk), (_i, state) => state.storage.sql.exec('SELECT 1 FROM withdrawn').toArray().length)).toBe(0);
    expect(await shardStub(env, null).bridgeProviders()).not.toContain(provider);
    expect(await publicRecords(k.pk)).toEqual([[provider, 'provisioned']]);
    expect(await shardStub(env, k.pk).isAgentOwner(provider, k.pk)).toBe(true);
  });

  /**
   * Builds the owners table as it was before the `vetted` column, with `pk` in it, on the Accounts
   * object `name`, and wakes this version's Accounts on it with `bindings` (the upgrade): `pk`'s row
   * and a sign-up made after it, and the warnings it logged.
   */
  async function upgraded(name: string, pk: string, bindings: { EDGESTR_SIGNUP?: string }) {
    const warned = vi.spyOn(console, 'warn');
    try {
      return await runInDurableObject(env.ACCOUNTS.get(env.ACCOUNTS.idFromName(name)), (_i, state) => {
        state.storage.sql.exec('DROP TABLE owners');
        state.storage.sql.exec('CREATE TABLE owners (pubkey TEXT PRIMARY KEY, plan TEXT NOT NULL, suspended INTEGER NOT NULL DEFAULT 0, created_at INTEGER NOT NULL) WITHOUT ROWID');
        state.storage.sql.exec("INSERT INTO owners (pubkey, plan, created_at) VALUES (?, 'default', 1)", pk);
        const migrated = new Accounts(state, { ...env, ...bindings });
        migrated.signUp(keys().pk, 'default', DEFAULT_SIGNUP_CAPS);
        // Woken again (the column is there now): nothing changes, nothing is logged again.
        const again = new Accounts(state, { ...env, ...bindings });
        // `all`: every row's vetted (listed in key order, so sorted here: false first).
        return { old: again.owner(pk)?.vetted, all: again.owners().map((o) => o.vetted).sort(), warnings: warned.mock.calls.map((c) => c.join(' ')) };
      });
    } finally {
      warned.mockRestore();
    }
  }

  it('owners registered before sign-ups were told apart, on a deployment with sign-up closed at the upgrade, count as vetted (the operators added them)', async () => {
    const pk = keys().pk;
    expect(await upgraded('accounts-before-vetting', pk, {})).toEqual({
      old: true,
      all: [false, true],
      warnings: [
        'accounts upgrade: owners registered before sign-ups were told apart: 1; EDGESTR_SIGNUP is not open, so they count as vetted. If sign-up was open on this deployment before, review GET /api/admin/owners and mark those that signed themselves up with PATCH /api/admin/owners/<pubkey> {"vetted":false}',
      ],
    });
  });

  it('with EDGESTR_SIGNUP=open at the upgrade they are not vetted (any of them may have signed itself up), and the upgrade says so once, with the PATCH that vets one', async () => {
    const pk = keys().pk;
    expect(await upgraded('accounts-before-vetting-open', pk, { EDGESTR_SIGNUP: 'open' })).toEqual({
      old: false,
      all: [false, false],
      warnings: [
        "accounts upgrade: owners registered before sign-ups were told apart: 1; EDGESTR_SIGNUP=open, so none of them is vetted (any may have signed itself up): EDGESTR_OUTBOUND_ALLOW does not apply to their dials and their bridges are not this deployment's. Review GET /api/admin/owners and vet those the operators added with PATCH /api/admin/owners/<pubkey> {\"vetted\":true}",
      ],
    });
  });

  it('an owner from before the column on an open deployment, upgraded: EDGESTR_OUTBOUND_ALLOW does not apply to it (its agent’s MCP server on a listed host is 422), nor is its bridge the deployment’s', async () => {
    const k = keys();
    // The deployment's own Accounts object, as an earlier version left it: k signed itself up.
    await runInDurableObject(accountsStub(env), (_i, state) => {
      state.storage.sql.exec('DROP TABLE owners');
      state.storage.sql.exec('CREATE TABLE owners (pubkey TEXT PRIMARY KEY, plan TEXT NOT NULL, suspended INTEGER NOT NULL DEFAULT 0, created_at INTEGER NOT NULL) WITHOUT ROWID');
      state.storage.sql.exec("INSERT INTO owners (pubkey, plan, created_at) VALUES (?, 'default', 1)", k.pk);
      new Accounts(state, { ...env, EDGESTR_SIGNUP: 'open' });
    });
    forgetOwnerState(); // the deploy's new isolates start with no copy of the registry
    expect(await accountsStub(env).owner(k.pk)).toMatchObject({ pubkey: k.pk, vetted: false });
    const listed = inject('mcpEverythingUrl'); // on 127.0.0.1, listed in the tests' EDGESTR_OUTBOUND_ALLOW
    // What the policy answers for an owner the operators did not vet (its wording is the policy's).
    const checked = checkOutboundUrl(listed, 'http', outboundPolicy(env, { vetted: false }));
    const refusal = checked.ok ? undefined : checked.error;
    expect(refusal).toMatch(/^refused: /);
    expect(await api(k.sk, 'POST', '/api/agents', { name: 'x', provider: 'echo', mcp_servers: [{ id: 'm', url: listed }] })).toEqual({
      status: 422,
      json: { error: 'invalid agent', issues: [{ path: 'mcp_servers.0.url', message: refusal }] },
    });
    const provider = await register(k, 'upgraded');
    expect(await shardStub(env, null).bridgeProviders()).not.toContain(provider);
    expect(await publicRecords(k.pk)).toEqual([[provider, 'provisioned']]);
  });
});
