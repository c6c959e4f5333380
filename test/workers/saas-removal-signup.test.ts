// Removal by an operator is not undone by open sign-up (workers/accounts/accounts-do.ts `removed_owners`,
// workers/api/signup.ts): an owner removed (suspended first or not) that signs up again is refused
// (403) and stays no owner; an operator's POST /api/admin/owners adds it back and clears the record;
// a key never seen still signs up.
import { env, runInDurableObject } from 'cloudflare:test';
import { describe, expect, it } from 'vitest';
import { accountsStub } from '../../workers/accounts/accounts-do.js';
import { NOT_AN_OWNER } from '../../workers/common/owners.js';
import { api } from './api-helpers.js';
import { fetchWithEnv } from './app-env.js';
import { BASE, keys, type Keys } from './helpers.js';
import { makeHttpAuthHeader } from '../../src/shared/nip98.js';
import { OPEN_SIGNUP, TEST_ADMIN_SK } from './test-keys.js';

const admin = (method: string, path: string, body?: unknown) => api(TEST_ADMIN_SK, method, path, body);

const REMOVED = 'this key was removed by the operators of this deployment; ask them to add it again';
const ALREADY = 'this key is already an owner on this deployment';

let addresses = 0;
/** `k` signs up with EDGESTR_SIGNUP=open (OPEN_SIGNUP), each call from its own client address (SIGNUP_RATE_LIMIT is per address). */
async function signup(k: Keys): Promise<{ status: number; json: unknown }> {
  const url = `${BASE}/api/signup`;
  const headers = { Authorization: makeHttpAuthHeader(k.sk, url, 'POST'), 'CF-Connecting-IP': `198.51.100.${++addresses}` };
  const res = await fetchWithEnv(OPEN_SIGNUP, new Request(url, { method: 'POST', headers }));
  return { status: res.status, json: (await res.json()) as unknown };
}

/** The registry's row of `pubkey`, if any. */
const registered = (pubkey: string) => accountsStub(env).owner(pubkey);

/** The removal records of `pubkey` in the Accounts object. */
const removalsOf = (pubkey: string) =>
  runInDurableObject(accountsStub(env), (_i, state) => state.storage.sql.exec('SELECT pubkey FROM removed_owners WHERE pubkey = ?', pubkey).toArray().length);

async function addOwner(): Promise<Keys> {
  const k = keys();
  expect(await admin('POST', '/api/admin/owners', { pubkey: k.pk })).toEqual({ status: 201, json: { pubkey: k.pk, plan: 'default', suspended: false } });
  return k;
}

describe('sign-up after removal', () => {
  it('an owner an operator removed cannot sign up again: 403, and it stays no owner', async () => {
    const k = await addOwner();
    expect(await admin('DELETE', `/api/admin/owners/${k.pk}`)).toEqual({ status: 204, json: null });
    expect(await signup(k)).toEqual({ status: 403, json: { error: REMOVED } });
    expect(await registered(k.pk)).toBeUndefined();
    expect(await api(k.sk, 'GET', '/api/agents')).toEqual({ status: 403, json: { error: NOT_AN_OWNER } });
  });

  it('an owner that signed up, was suspended, then removed cannot sign up again either', async () => {
    const k = keys();
    expect(await signup(k)).toEqual({ status: 201, json: { pubkey: k.pk, plan: 'default', suspended: false } });
    expect(await admin('PATCH', `/api/admin/owners/${k.pk}`, { suspended: true })).toMatchObject({ status: 200, json: { suspended: true } });
    expect(await admin('DELETE', `/api/admin/owners/${k.pk}`)).toEqual({ status: 204, json: null });
    expect(await signup(k)).toEqual({ status: 403, json: { error: REMOVED } });
    expect(await registered(k.pk)).toBeUndefined();
    const owners = ((await admin('GET', '/api/admin/owners')).json as { owners: Array<{ pubkey: string }> }).owners;
    expect(owners.map((o) => o.pubkey)).not.toContain(k.pk);
  });

  it('an operator adds a removed key back (201): its removal record is gone, and its sign-up is then 409', async () => {
    const k = await addOwner();
    expect(await admin('DELETE', `/api/admin/owners/${k.pk}`)).toEqual({ status: 204, json: null });
    expect(await removalsOf(k.pk)).toBe(1);
    expect(await admin('POST', '/api/admin/owners', { pubkey: k.pk })).toEqual({ status: 201, json: { pubkey: k.pk, plan: 'default', suspended: false } });
    expect(await removalsOf(k.pk)).toBe(0);
    expect(await signup(k)).toEqual({ status: 409, json: { error: ALREADY } });
    expect(await api(k.sk, 'GET', '/api/agents')).toEqual({ status: 200, json: { agents: [] } });
    // Removed once more: refused again.
    expect(await admin('DELETE', `/api/admin/owners/${k.pk}`)).toEqual({ status: 204, json: null });
    expect(await signup(k)).toEqual({ status: 403, json: { error: REMOVED } });
  });

  it('a key never seen still signs up (201), also after a DELETE of it that found no owner (404)', async () => {
    const k = keys();
    expect(await admin('DELETE', `/api/admin/owners/${k.pk}`)).toEqual({ status: 404, json: { error: 'no such owner' } });
    expect(await signup(k)).toEqual({ status: 201, json: { pubkey: k.pk, plan: 'default', suspended: false } });
    expect(await registered(k.pk)).toMatchObject({ pubkey: k.pk, plan: 'default', suspended: false });
  });
});
