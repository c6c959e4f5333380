// Open sign-up stays within what the deployment can carry (workers/accounts/signup-limits.ts,
// accounts-do.ts `signUp` / `states`, workers/api/signup.ts, admin.ts, workers/common/owners.ts):
// sign-ups stop at EDGESTR_SIGNUP_MAX_OWNERS owners and EDGESTR_SIGNUP_MAX_PER_DAY a UTC day (403
// naming the cap; an operator still adds owners); open sign-up with a default plan that leaves agents
// or tokens_per_day unlimited answers 503; the registry copy each isolate holds is at most
// REGISTRY_COPY_MAX owners (the others are looked up by key); GET /api/admin/owners is paged.
// The tests share one Accounts object, so each reads the registry's size first (the last one fills it).
// A refused sign-up leaves nothing stored for good: its key's ApiState (workers/api/api-state.ts)
// keeps the replay id while its event could be valid, then its alarm deletes the object's storage.
import { env, runDurableObjectAlarm, runInDurableObject } from 'cloudflare:test';
import { describe, expect, it, vi } from 'vitest';
import { accountsStub, REGISTRY_COPY_MAX } from '../../workers/accounts/accounts-do.js';
import { signupCaps } from '../../workers/accounts/signup-limits.js';
import { forgetOwnerState, NOT_AN_OWNER, OWNER_SUSPENDED } from '../../workers/common/owners.js';
import { makeHttpAuthHeader } from '../../src/shared/nip98.js';
import { apiStateStub } from '../../workers/api/api-state.js';
import { api } from './api-helpers.js';
import { fetchWithEnv, type EnvOverride } from './app-env.js';
import { BASE, keys, type Keys } from './helpers.js';
import { OPEN_SIGNUP, TEST_ADMIN_SK, TEST_OWNER, TEST_PLANS } from './test-keys.js';

const admin = (method: string, path: string, body?: unknown) => api(TEST_ADMIN_SK, method, path, body);

let addresses = 0;
/** `k` signs up (OPEN_SIGNUP with `over`; `authorization`: a NIP-98 header made before), each call from its own client address (SIGNUP_RATE_LIMIT is per address). */
/** A sign-up's answer: status, body, and its Retry-After (seconds) when it has one. */
async function signup(k: Keys, over: EnvOverride = {}, authorization?: string): Promise<{ status: number; json: unknown; retryAfter?: number }> {
  const url = `${BASE}/api/signup`;
  const headers = { Authorization: authorization ?? makeHttpAuthHeader(k.sk, url, 'POST'), 'CF-Connecting-IP': `192.0.2.${++addresses}` };
  const res = await fetchWithEnv({ ...OPEN_SIGNUP, ...over }, new Request(url, { method: 'POST', headers }));
  const retryAfter = res.headers.get('Retry-After');
  return { status: res.status, json: (await res.json()) as unknown, ...(retryAfter === null ? {} : { retryAfter: Number(retryAfter) }) };
}

const added = (k: Keys) => ({ status: 201, json: { pubkey: k.pk, plan: 'default', suspended: false } });
const registrySize = () => runInDurableObject(accountsStub(env), (_i, state) => state.storage.sql.exec<{ n: number }>('SELECT count(*) AS n FROM owners').one().n);
const today = () => new Date().toISOString().slice(0, 10);
/** The sign-ups the Accounts object counted on `day`. */
const signUpsOn = (day: string) =>
  runInDurableObject(accountsStub(env), (_i, state) => state.storage.sql.exec<{ n: number }>('SELECT coalesce(sum(n), 0) AS n FROM signup_days WHERE day = ?', day).one().n);

describe('a key that is not an owner', () => {
  it('is told how to become one: with sign-up open, to sign up (and after it, it lists its agents); with sign-up closed, to ask the operators (not that EDGESTR_OWNERS is the only way)', async () => {
    const k = keys();
    const url = `${BASE}/api/agents`;
    const list = (over: EnvOverride) => fetchWithEnv(over, new Request(url, { headers: { Authorization: makeHttpAuthHeader(k.sk, url, 'GET') } })).then(async (r) => ({ status: r.status, json: await r.json() }));
    expect(await list(OPEN_SIGNUP)).toEqual({ status: 403, json: { error: 'this pubkey is not an owner on this deployment; sign up first (edgestr signup, or POST /api/signup)' } });
    expect(await list({})).toEqual({ status: 403, json: { error: 'this pubkey is not an owner on this deployment; ask the operators to add it' } });
    expect(NOT_AN_OWNER).toBe('this pubkey is not an owner on this deployment; ask the operators to add it');
    expect(await signup(k)).toEqual(added(k));
    expect(await list(OPEN_SIGNUP)).toEqual({ status: 200, json: { agents: [] } });
  });
});

describe('sign-up caps', () => {
  it('EDGESTR_SIGNUP_MAX_OWNERS: two short of the cap, two sign-ups pass, the third is 403 naming the cap (nothing added); an operator still adds owners past it; an owner signing up again is 409', async () => {
    const cap = (await registrySize()) + 2;
    const over = { EDGESTR_SIGNUP_MAX_OWNERS: String(cap) };
    const [a, b, c] = [keys(), keys(), keys()];
    expect(await signup(a, over)).toEqual(added(a));
    expect(await signup(b, over)).toEqual(added(b));
    expect(await signup(c, over)).toEqual({ status: 403, json: { error: `sign-up is full on this deployment (${cap} owners); ask the operators` } });
    expect(await accountsStub(env).owner(c.pk)).toBeUndefined();
    expect(await admin('POST', '/api/admin/owners', { pubkey: c.pk })).toEqual(added(c));
    expect(await registrySize()).toBe(cap + 1);
    expect(await signup(a, over)).toEqual({ status: 409, json: { error: 'this key is already an owner on this deployment' } });
  });

  it('EDGESTR_SIGNUP_MAX_PER_DAY: two short of the day’s cap, two pass, the third is 403 until the UTC day ends (Retry-After); operators’ adds do not count; the next day signs up', async () => {
    const cap = (await signUpsOn(today())) + 2;
    const over = { EDGESTR_SIGNUP_MAX_PER_DAY: String(cap) };
    const [a, b, c] = [keys(), keys(), keys()];
    expect(await signup(a, over)).toEqual(added(a));
    expect(await admin('POST', '/api/admin/owners', { pubkey: keys().pk })).toMatchObject({ status: 201 });
    expect(await signup(b, over)).toEqual(added(b));
    const untilTomorrow = Math.ceil((Date.parse(`${today()}T00:00:00Z`) + 86_400_000 - Date.now()) / 1000);
    const refused = await signup(c, over);
    expect(refused).toEqual({
      status: 403,
      json: { error: `sign-up is full on this deployment today (${cap} sign-ups a day); try again tomorrow (UTC)` },
      retryAfter: expect.any(Number),
    });
    // Retry-After: the seconds until the UTC day ends (when the count starts again).
    expect(refused.retryAfter).toBeGreaterThanOrEqual(1);
    expect(refused.retryAfter).toBeLessThanOrEqual(untilTomorrow);
    expect(refused.retryAfter).toBeGreaterThanOrEqual(untilTomorrow - 60);
    expect(await accountsStub(env).owner(c.pk)).toBeUndefined();
    // The Accounts object's own rule, on the next UTC day: c signs up.
    const tomorrow = Date.parse(`${today()}T00:00:00Z`) + 86_400_000;
    expect(await accountsStub(env).signUp(c.pk, 'default', signupCaps(over), tomorrow)).toBe('added');
  });

  it('defaults: 10,000 owners and 1,000 sign-ups a day; a value that is not a whole number counts as the default, logged once', () => {
    expect(signupCaps({})).toEqual({ owners: 10_000, per_day: 1_000 });
    expect(signupCaps({ EDGESTR_SIGNUP_MAX_OWNERS: '0', EDGESTR_SIGNUP_MAX_PER_DAY: ' 25 ' })).toEqual({ owners: 0, per_day: 25 });
    const warn = vi.spyOn(console, 'warn').mockImplementation(() => {});
    try {
      expect(signupCaps({ EDGESTR_SIGNUP_MAX_OWNERS: '10k', EDGESTR_SIGNUP_MAX_PER_DAY: '-1' })).toEqual({ owners: 10_000, per_day: 1_000 });
      expect(signupCaps({ EDGESTR_SIGNUP_MAX_OWNERS: '10k', EDGESTR_SIGNUP_MAX_PER_DAY: '-1' })).toEqual({ owners: 10_000, per_day: 1_000 });
      expect(warn.mock.calls.map((c) => c.join(' '))).toEqual([
        'EDGESTR_SIGNUP_MAX_OWNERS is "10k": a whole number, 0 or more (default 10000); 10000 is used',
        'EDGESTR_SIGNUP_MAX_PER_DAY is "-1": a whole number, 0 or more (default 1000); 1000 is used',
      ]);
    } finally {
      warn.mockRestore();
    }
  });
});

describe('open sign-up needs a default plan that bounds agents and model tokens', () => {
  const UNAVAILABLE = 'sign-up is unavailable on this deployment: EDGESTR_SIGNUP=open needs a default plan that sets agents and tokens_per_day; ask the operators';

  it('with the default plan unlimited (no EDGESTR_PLANS, or one of the two unset) every sign-up is 503 with the reason, and nothing is stored', async () => {
    for (const plans of [undefined, TEST_PLANS, '{"default":{"agents":1}}', '{"default":{"tokens_per_day":1000}}']) {
      const k = keys();
      expect(await signup(k, { EDGESTR_PLANS: plans })).toEqual({ status: 503, json: { error: UNAVAILABLE } });
      expect(await accountsStub(env).owner(k.pk)).toBeUndefined();
    }
    const k = keys();
    expect(await signup(k, { EDGESTR_PLANS: '{"default":{"agents":1,"tokens_per_day":1000,"models":["gpt-4o-mini"]}}' })).toEqual(added(k));
  });

  it('with a paid provider (the tests’ OPENAI_API_KEY) and a default plan without models, every sign-up is 503 naming models (a Worker deployed without `npm run deploy`); without a paid provider it passes', async () => {
    const bounded = '{"default":{"agents":1,"tokens_per_day":1000}}';
    const k = keys();
    expect(await signup(k, { EDGESTR_PLANS: bounded })).toEqual({
      status: 503,
      json: {
        error:
          'sign-up is unavailable on this deployment: EDGESTR_SIGNUP=open with a paid model provider (OPENAI_API_KEY, ANTHROPIC_API_KEY or the AI binding) needs a default plan that sets models, since tokens_per_day counts a token of every model alike; ask the operators',
      },
    });
    expect(await accountsStub(env).owner(k.pk)).toBeUndefined();
    // A local OpenAI-compatible server (OPENAI_BASE_URL, no key: the tests' fake provider) is no paid provider.
    const local = keys();
    expect(await signup(local, { EDGESTR_PLANS: bounded, OPENAI_API_KEY: undefined, ANTHROPIC_API_KEY: undefined })).toEqual(added(local));
  });
});

type Listed = { pubkey: string; source: string };
type Page = { owners: Listed[]; next?: string };

describe('GET /api/admin/owners is paged', () => {
  it('limit and cursor: pages in key order, the EDGESTR_OWNERS ones on the first; `next` until the last; together every owner once; a bad limit or cursor is 422', async () => {
    for (let i = 0; i < 3; i++) expect((await admin('POST', '/api/admin/owners', { pubkey: keys().pk })).status).toBe(201);
    const registered = (await accountsStub(env).owners()).map((o) => o.pubkey).sort();
    const seen: Listed[] = [];
    let cursor: string | undefined;
    let pages = 0;
    do {
      const r = await admin('GET', `/api/admin/owners?limit=2${cursor ? `&cursor=${cursor}` : ''}`);
      expect(r.status).toBe(200);
      const page = r.json as Page;
      const fromRegistry = page.owners.filter((o) => o.source === 'registry');
      expect(fromRegistry.length).toBeLessThanOrEqual(2);
      expect(page.owners.some((o) => o.source === 'static')).toBe(pages === 0);
      seen.push(...page.owners);
      cursor = page.next;
      if (cursor !== undefined) expect(cursor).toBe(fromRegistry.at(-1)?.pubkey);
      pages++;
    } while (cursor !== undefined);
    expect(seen.filter((o) => o.source === 'static').map((o) => o.pubkey)).toEqual([TEST_OWNER]);
    expect(seen.filter((o) => o.source === 'registry').map((o) => o.pubkey)).toEqual(registered);
    expect(pages).toBe(Math.ceil(registered.length / 2));

    // The whole list fits the default page: the answer is as before, without `next`.
    const all = (await admin('GET', '/api/admin/owners')).json as Page;
    expect(all.next).toBeUndefined();
    expect(all.owners.length).toBe(registered.length + 1);

    for (const query of ['limit=0', 'limit=1001', 'limit=two', 'cursor=nope', `cursor=${'A'.repeat(64)}`]) {
      expect(await admin('GET', `/api/admin/owners?${query}`)).toMatchObject({ status: 422, json: { error: 'invalid query' } });
    }
  });
});

describe('the registry copy each isolate holds is bounded', () => {
  it('states() answers at most REGISTRY_COPY_MAX owners and says when there are more; an owner past the copy is known by key (suspension too), a stranger is not', async () => {
    expect(REGISTRY_COPY_MAX).toBe(10_000);
    const owner = keys();
    expect(await admin('POST', '/api/admin/owners', { pubkey: owner.pk })).toEqual(added(owner));
    expect(await accountsStub(env).states()).toMatchObject({ complete: true });
    // REGISTRY_COPY_MAX owners whose keys sort before any real one: the copy holds them, not `owner`.
    await runInDurableObject(accountsStub(env), (_i, state) => {
      state.storage.sql.exec(
        `WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?)
         INSERT INTO owners (pubkey, plan, suspended, created_at, vetted) SELECT printf('%064d', i), 'default', 0, 1, 1 FROM n`,
        REGISTRY_COPY_MAX,
      );
    });
    const copy = await accountsStub(env).states();
    expect(copy.complete).toBe(false);
    expect(copy.owners.length).toBe(REGISTRY_COPY_MAX);
    expect(copy.owners.some((o) => o.pubkey === owner.pk)).toBe(false);

    forgetOwnerState();
    expect(await api(owner.sk, 'GET', '/api/agents')).toEqual({ status: 200, json: { agents: [] } });
    expect(await api(keys().sk, 'GET', '/api/agents')).toEqual({ status: 403, json: { error: NOT_AN_OWNER } });
    expect(await admin('PATCH', `/api/admin/owners/${owner.pk}`, { suspended: true })).toMatchObject({ status: 200 });
    expect(await api(owner.sk, 'POST', '/api/agents', { name: 'x', provider: 'echo' })).toEqual({ status: 403, json: { error: OWNER_SUSPENDED } });

    // The operators' listing pages through them (the default page is 1,000 owners).
    const first = (await admin('GET', '/api/admin/owners')).json as Page;
    expect(first.owners.filter((o) => o.source === 'registry').length).toBe(1_000);
    expect(first.next).toBe('0'.repeat(60) + '1000');
  });
});

describe('a refused sign-up', () => {
  it('leaves nothing stored: its ApiState refuses a replay while the event could be valid, then its alarm deletes the object’s storage (rows and alarm)', async () => {
    const k = keys();
    const over = { EDGESTR_SIGNUP_MAX_OWNERS: '0' };
    const header = makeHttpAuthHeader(k.sk, `${BASE}/api/signup`, 'POST');
    expect(await signup(k, over, header)).toEqual({ status: 403, json: { error: 'sign-up is full on this deployment (0 owners); ask the operators' } });
    const stub = apiStateStub(env, k.pk);
    const held = () =>
      runInDurableObject(stub, async (_i, state) => ({
        tables: state.storage.sql.exec<{ name: string }>("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE '\\_cf\\_%' ESCAPE '\\'").toArray().map((r) => r.name),
        alarm: await state.storage.getAlarm(),
      }));
    const before = await held();
    expect(before.tables).toEqual(['http_auth_seen']);
    expect(before.alarm).toBeGreaterThan(Date.now());
    // An alarm that runs early keeps the id: a replay within the window is still refused.
    expect(await runDurableObjectAlarm(stub)).toBe(true);
    const replayed = { status: 401, json: { error: 'NIP-98: this authorization event was already used' } };
    expect(await signup(k, over, header)).toEqual(replayed);
    expect((await held()).alarm).toBe(before.alarm);
    // Past the window (its id dated as if the window had passed), the alarm leaves nothing.
    await runInDurableObject(stub, (_i, state) => {
      state.storage.sql.exec('UPDATE http_auth_seen SET expires_at = ?', Math.floor(Date.now() / 1000) - 1);
    });
    expect(await runDurableObjectAlarm(stub)).toBe(true);
    expect(await held()).toEqual({ tables: [], alarm: null });
  });
});
