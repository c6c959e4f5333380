// Accounts and plans (workers/accounts, workers/api/{admin,usage,signup}.ts): operators manage
// owners (admin-only), sign-up open or closed, suspend / resume / remove, each plan limit at its
// boundary (one under passes, one over refused with the exact answer), the figures of /api/usage
// against the runs that happened, its CSV, and a bad EDGESTR_PLANS failing loudly. A refusal tells
// the figures (the limit, the owner's spend) and the owner's standing to the owner alone (and its
// owner-side connections on the shard); a stranger gets the code, retry_after, the quota's name and
// a message naming no figure.
import { createExecutionContext, env, runInDurableObject, waitOnExecutionContext } from 'cloudflare:test';
import { describe, expect, it } from 'vitest';
import type { Agent } from '../../workers/agent/agent-do.js';
import { OWNER_NOT_ALLOWED, OWNER_SUSPENDED } from '../../workers/agent/admission.js';
import { NOT_AN_ADMIN } from '../../workers/api/admin.js';
import { SIGNUP_CLOSED, SIGNUP_RATE_LIMITED } from '../../workers/api/signup.js';
import type { Accounts } from '../../workers/accounts/accounts-do.js';
import app from '../../workers/index.js';
import { NOT_AN_OWNER, OWNER_SUSPENDED as API_SUSPENDED } from '../../workers/common/owners.js';
import { api } from './api-helpers.js';
import { apiWithEnv } from './app-env.js';
import { NipXxClient, watchRunsEnded } from './agent-helpers.js';
import { BASE, connect, keys, sign, type Keys } from './helpers.js';
import { makeHttpAuthHeader } from '../../src/shared/nip98.js';
import { SELF } from 'cloudflare:test';
import { bridgeReady, DvmcpClient, everythingUrl } from './bridge-helpers.js';
import { RPC } from '../../src/shared/dvmcp.js';
import { bridgeServerCap, DEFAULT_BRIDGE_SERVERS, planLimits } from '../../workers/accounts/plans.js';
import { backupShards, listBackups, readBackupLines } from '../../workers/relay-do/backup.js';
import { OPEN_SIGNUP, TEST_ADMIN_SK, TEST_OWNER, TEST_OWNER_SK } from './test-keys.js';

const admin = (method: string, path: string, body?: unknown) => api(TEST_ADMIN_SK, method, path, body);

/** A new owner added by the operator on `plan`. */
async function addOwner(plan?: string): Promise<Keys> {
  const k = keys();
  const r = await admin('POST', '/api/admin/owners', { pubkey: k.pk, ...(plan ? { plan } : {}) });
  expect(r).toEqual({ status: 201, json: { pubkey: k.pk, plan: plan ?? 'default', suspended: false } });
  return k;
}

async function createAgent(owner: Keys, limits: Record<string, number> = {}): Promise<string> {
  const r = await api(owner.sk, 'POST', '/api/agents', { name: 'saas agent', provider: 'echo', limits });
  expect(r.status).toBe(201);
  return (r.json as { pubkey: string }).pubkey;
}

const stubOf = (agent: string) => env.AGENT.get(env.AGENT.idFromName(agent));
/** Freezes the agent's clock at `t` (ms). */
const freeze = (agent: string, t: number) => runInDurableObject(stubOf(agent), (i) => void ((i as Agent).now = () => t));

/** One prompt from `client` to `agent`, answered: the terminal's kind and payload. */
async function ask(client: NipXxClient, message = 'hello there'): Promise<{ kind: number; payload: Record<string, unknown> }> {
  const p = client.prompt({ ver: 1, message });
  await client.send(p);
  const { terminal } = await client.collect(p.id);
  return { kind: terminal.kind, payload: terminal.payload };
}

const T0 = Date.UTC(2026, 0, 10, 23, 59, 0);

describe('operators manage owners', () => {
  it('only EDGESTR_ADMINS may: 403 for an owner and for a stranger, before anything is touched', async () => {
    for (const sk of [TEST_OWNER_SK, keys().sk]) {
      expect(await api(sk, 'GET', '/api/admin/owners')).toEqual({ status: 403, json: { error: NOT_AN_ADMIN } });
      expect(await api(sk, 'POST', '/api/admin/owners', { pubkey: keys().pk })).toEqual({ status: 403, json: { error: NOT_AN_ADMIN } });
    }
  });

  it('add, list with plan and usage, refuse duplicates, bad keys, unknown plans and static owners', async () => {
    const k = await addOwner('two_runs');
    expect(await admin('POST', '/api/admin/owners', { pubkey: k.pk })).toEqual({ status: 409, json: { error: 'this owner already exists' } });
    expect(await admin('POST', '/api/admin/owners', { pubkey: 'nope' })).toEqual({
      status: 422,
      json: { error: 'invalid owner', issues: [{ path: 'pubkey', message: 'a 64-hex pubkey or an npub' }] },
    });
    const bad = await admin('POST', '/api/admin/owners', { pubkey: keys().pk, plan: 'gold' });
    expect(bad.status).toBe(422);
    expect((bad.json as { issues: Array<{ path: string; message: string }> }).issues[0]).toEqual({
      path: 'plan',
      message: 'no plan "gold" in EDGESTR_PLANS (plans: default, one_agent, two_runs, few_tokens, some_tokens, few_tokens_month, small_shard, inbox_shard, answers_shard, slow_shard, three_bridge_calls, five_bridge_calls, two_bridge_servers)',
    });
    // A name Object.prototype answers is no plan either.
    const proto = await admin('POST', '/api/admin/owners', { pubkey: keys().pk, plan: 'constructor' });
    expect(proto.status).toBe(422);
    expect((proto.json as { issues: Array<{ path: string; message: string }> }).issues[0]!.message).toMatch(/^no plan "constructor" in EDGESTR_PLANS/);
    expect(await admin('POST', '/api/admin/owners', { pubkey: TEST_OWNER })).toEqual({ status: 409, json: { error: 'this owner is listed in EDGESTR_OWNERS: change that variable instead' } });
    const list = await admin('GET', '/api/admin/owners');
    expect(list.status).toBe(200);
    const owners = (list.json as { owners: Array<{ pubkey: string; plan: string; suspended: boolean; source: string; usage: { runs_today: number } }> }).owners;
    expect(owners.find((o) => o.pubkey === TEST_OWNER)).toMatchObject({ plan: 'default', suspended: false, source: 'static' });
    expect(owners.find((o) => o.pubkey === k.pk)).toMatchObject({ plan: 'two_runs', suspended: false, source: 'registry', usage: { runs_today: 0 } });
  });

  it('a key is an owner only once added: 403 before, 201 after; PATCH and DELETE of unknown owners: 404', async () => {
    const k = keys();
    expect(await api(k.sk, 'POST', '/api/agents', { name: 'x', provider: 'echo' })).toEqual({ status: 403, json: { error: NOT_AN_OWNER } });
    expect(await admin('PATCH', `/api/admin/owners/${k.pk}`, { plan: 'default' })).toEqual({ status: 404, json: { error: 'no such owner' } });
    expect(await admin('DELETE', `/api/admin/owners/${k.pk}`)).toEqual({ status: 404, json: { error: 'no such owner' } });
    await admin('POST', '/api/admin/owners', { pubkey: k.pk });
    await createAgent(k);
  });

  it('suspend: the owner’s shard refuses prompts, the agent answers UNAUTHORIZED elsewhere, no new agent (403); resume undoes all', async () => {
    const owner = await addOwner();
    const agent = await createAgent(owner);
    const client = await NipXxClient.open(agent, keys(), `/r/${owner.pk}`);
    expect((await ask(client)).kind).toBe(25803);

    expect(await admin('PATCH', `/api/admin/owners/${owner.pk}`, { suspended: true })).toMatchObject({ status: 200, json: { pubkey: owner.pk, suspended: true } });
    // A stranger is told the shard and the agent cannot serve it, not that the owner is suspended.
    const refused = client.prompt({ ver: 1, message: 'hello' });
    expect(await client.sock.publish(refused)).toEqual(['OK', refused.id, false, 'restricted: this shard stores nothing new for now; retry later']);
    const onPublic = await NipXxClient.open(agent, keys(), '/');
    expect(await ask(onPublic)).toEqual({ kind: 25805, payload: { ver: 1, code: 'UNAUTHORIZED', message: 'this agent is unavailable on this deployment; retry later or use another agent' } });
    // The owner is told why.
    const ownerOnPublic = await NipXxClient.open(agent, owner, '/');
    expect(await ask(ownerOnPublic)).toEqual({ kind: 25805, payload: { ver: 1, code: 'UNAUTHORIZED', message: OWNER_SUSPENDED } });
    expect(await api(owner.sk, 'POST', '/api/agents', { name: 'x', provider: 'echo' })).toEqual({ status: 403, json: { error: API_SUSPENDED } });

    expect(await admin('PATCH', `/api/admin/owners/${owner.pk}`, { suspended: false })).toMatchObject({ status: 200, json: { suspended: false } });
    const other = await NipXxClient.open(agent, keys(), `/r/${owner.pk}`);
    expect((await ask(other)).kind).toBe(25803);
    await createAgent(owner);
  });

  it('remove: the shard is backed up first and read-only, the agent answers that its owner is no longer allowed, the API refuses the key', async () => {
    const owner = await addOwner();
    const agent = await createAgent(owner);
    const sock = await connect(`/r/${owner.pk}`);
    await sock.auth(owner);
    const kept = sign(owner, { kind: 1, content: 'keep me', tags: [] });
    expect((await sock.publish(kept))[2]).toBe(true);
    sock.close();
    expect(await admin('DELETE', `/api/admin/owners/${owner.pk}`)).toEqual({ status: 204, json: null });
    const backups = await listBackups(env.BACKUPS!, owner.pk);
    expect(backups).toHaveLength(1);
    const lines = await readBackupLines(env.BACKUPS!, owner.pk, backups[0]!.name, 100);
    const ids: string[] = [];
    for await (const batch of lines!) ids.push(...batch.map((l) => (JSON.parse(l) as { id: string }).id));
    expect(ids).toContain(kept.id);
    // The removed owner's shard stores nothing new (relay-owner-removal.test.ts); elsewhere the agent answers.
    const onShard = await NipXxClient.open(agent, keys(), `/r/${owner.pk}`);
    const refused = onShard.prompt({ ver: 1, message: 'hello' });
    expect(await onShard.sock.publish(refused)).toEqual(['OK', refused.id, false, 'restricted: this shard stores nothing new for now; retry later']);
    const client = await NipXxClient.open(agent, keys(), '/');
    expect(await ask(client)).toEqual({ kind: 25805, payload: { ver: 1, code: 'UNAUTHORIZED', message: 'this agent is unavailable on this deployment; retry later or use another agent' } });
    const own = await NipXxClient.open(agent, owner, '/');
    expect(await ask(own)).toEqual({ kind: 25805, payload: { ver: 1, code: 'UNAUTHORIZED', message: OWNER_NOT_ALLOWED } });
    expect(await api(owner.sk, 'GET', '/api/agents')).toEqual({ status: 403, json: { error: NOT_AN_OWNER } });
  });
});

describe('backups', () => {
  it('the nightly run covers the registered owners’ shards beside the static ones (each once)', () => {
    const [a, b] = [keys().pk, keys().pk];
    expect(backupShards({ EDGESTR_OWNERS: a }, [b, a])).toEqual([...[a, b].sort(), null]);
  });
});

describe('sign-up', () => {
  it('closed by default: 403; open: the signer becomes an owner on the default plan (201), once (409)', async () => {
    const k = keys();
    expect(await api(k.sk, 'POST', '/api/signup')).toEqual({ status: 403, json: { error: SIGNUP_CLOSED } });
    const open = OPEN_SIGNUP;
    expect(await apiWithEnv(open, k.sk, 'POST', '/api/signup')).toEqual({ status: 201, json: { pubkey: k.pk, plan: 'default', suspended: false } });
    expect(await apiWithEnv(open, k.sk, 'POST', '/api/signup')).toEqual({ status: 409, json: { error: 'this key is already an owner on this deployment' } });
    await createAgent(k);
  });

  /** A NIP-98 call by `k` from client address `ip` with sign-up open (and `accounts` as the Accounts namespace). */
  async function call(k: Keys, method: string, path: string, ip: string, accounts = env.ACCOUNTS) {
    const url = `${BASE}${path}`;
    const request = new Request(url, { method, headers: { Authorization: makeHttpAuthHeader(k.sk, url, method), 'CF-Connecting-IP': ip } });
    const ctx = createExecutionContext();
    const res = await app.fetch(request, { ...env, ...OPEN_SIGNUP, ACCOUNTS: accounts }, ctx);
    await waitOnExecutionContext(ctx);
    return { status: res.status, retryAfter: res.headers.get('Retry-After'), json: (await res.json()) as unknown };
  }
  const address = () => `203.0.113.${Math.floor(Math.random() * 250) + 1}`;

  it('at most 5 sign-ups a minute per client address: the 6th is 429 with Retry-After before any work; another address still signs up', async () => {
    const ip = address();
    for (let i = 0; i < 5; i++) expect((await call(keys(), 'POST', '/api/signup', ip)).status).toBe(201);
    const refused = keys();
    expect(await call(refused, 'POST', '/api/signup', ip)).toEqual({ status: 429, retryAfter: '60', json: { error: SIGNUP_RATE_LIMITED } });
    expect(await runInDurableObject(env.ACCOUNTS.get(env.ACCOUNTS.idFromName('accounts')), (i) => (i as Accounts).owner(refused.pk))).toBeUndefined();
    let other = address();
    while (other === ip) other = address();
    expect((await call(keys(), 'POST', '/api/signup', other)).status).toBe(201);
  });

  it('a sign-up does not make the isolate fetch the whole registry again: the new owner is known at once, no states() asked', async () => {
    let registryFetches = 0;
    // The real Accounts object, with the registry fetches (states()) counted.
    const counted = new Proxy(env.ACCOUNTS, {
      get(target, p) {
        if (p === 'get') {
          return (id: DurableObjectId) =>
            new Proxy(target.get(id), {
              get(stub, q) {
                if (q === 'states') registryFetches++;
                const v: unknown = Reflect.get(stub, q);
                // An RPC method's own `bind` would be a remote call: apply it instead.
                return typeof v === 'function' ? (...args: unknown[]) => Reflect.apply(v, stub, args) : v;
              },
            });
        }
        const v: unknown = Reflect.get(target, p);
        return typeof v === 'function' ? (...args: unknown[]) => Reflect.apply(v, target, args) : v;
      },
    });
    // This isolate holds the registry (a stranger's call loads it if it is not held yet).
    expect((await call(keys(), 'GET', '/api/agents', address(), counted)).status).toBe(403);
    registryFetches = 0;
    for (let i = 0; i < 3; i++) {
      const k = keys();
      expect((await call(k, 'POST', '/api/signup', address(), counted)).status).toBe(201);
      expect(await call(k, 'GET', '/api/agents', address(), counted)).toMatchObject({ status: 200, json: { agents: [] } });
    }
    expect(registryFetches).toBe(0);
  });
});

describe('plan limits at their boundary', () => {
  it('agents per owner: the first is created, the second refused (409)', async () => {
    const owner = await addOwner('one_agent');
    await createAgent(owner);
    expect(await api(owner.sk, 'POST', '/api/agents', { name: 'second', provider: 'echo' })).toEqual({
      status: 409,
      json: { error: 'the owner’s plan allows at most 1 agent; delete one first' },
    });
  });

  it('runs per day: two runs of the owner pass, the third is RATE_LIMIT until the UTC day ends; the next day passes', async () => {
    const owner = await addOwner('two_runs');
    const agent = await createAgent(owner);
    await freeze(agent, T0);
    // The owner itself: others get OTHERS_PLAN_SHARE of the plan (test/workers/saas-plan-admission.test.ts).
    const client = await NipXxClient.open(agent, owner, `/r/${owner.pk}`);
    expect((await ask(client)).kind).toBe(25803);
    expect((await ask(client)).kind).toBe(25803);
    expect(await ask(client)).toMatchObject({
      kind: 25805,
      payload: { code: 'RATE_LIMIT', message: 'the agent’s owner used its plan’s 2 runs for today (UTC)', retry_after: 60, details: { quota: 'runs_per_day' } },
    });
    await freeze(agent, T0 + 60_000);
    const tomorrow = await NipXxClient.open(agent, keys(), `/r/${owner.pk}`);
    expect((await ask(tomorrow)).kind).toBe(25803);
  });

  it('model tokens per day: a run under the budget passes (overshooting it), the next is refused', async () => {
    const owner = await addOwner('few_tokens');
    const agent = await createAgent(owner, { max_output_tokens: 64 });
    await freeze(agent, T0);
    const client = await NipXxClient.open(agent, keys(), `/r/${owner.pk}`);
    // 150 one-letter words: 79 tokens by estimate, with 64 of answer within the 180 others may use;
    // 214 as echo counts (150 in, 64 out).
    expect((await ask(client, Array.from({ length: 150 }, () => 'a').join(' '))).kind).toBe(25803);
    expect(await ask(client)).toMatchObject({
      kind: 25805,
      payload: { code: 'RATE_LIMIT', retry_after: 60, details: { quota: 'tokens_per_day' } },
    });
  });

  it('model tokens per day: a prompt whose estimate would pass the plan is refused at admission (no run, nothing recorded)', async () => {
    const owner = await addOwner('few_tokens');
    const agent = await createAgent(owner);
    await freeze(agent, T0);
    const client = await NipXxClient.open(agent, keys(), `/r/${owner.pk}`);
    // 800 characters: 1,284 characters of NIP-44 payload, 241 tokens by the admission's estimate,
    // over the 180 of 200 others may use; nothing spent yet.
    // The stranger learns which quota and when to retry, neither the limit nor the owner's spend.
    const p = client.prompt({ ver: 1, message: 'x'.repeat(800) });
    await client.send(p);
    const told = (await client.collect(p.id)).terminal.payload;
    expect(told).toEqual({
      ver: 1,
      code: 'RATE_LIMIT',
      message: 'the agent’s owner reached a usage limit for today (UTC)',
      retry_after: 60,
      details: { quota: 'tokens_per_day' },
    });
    expect(JSON.stringify(told)).not.toMatch(/180|200|241/);
    // The owner, the same prompt: the figures.
    const mine = await NipXxClient.open(agent, owner, `/r/${owner.pk}`);
    const q = mine.prompt({ ver: 1, message: 'x'.repeat(800) });
    await mine.send(q);
    expect((await mine.collect(q.id)).terminal.payload).toEqual({
      ver: 1,
      code: 'RATE_LIMIT',
      message: 'this prompt (about 241 input tokens and at least 256 for its answer) would exceed the agent’s owner’s plan’s 200 model tokens for today (UTC)',
      retry_after: 60,
      details: { quota: 'tokens_per_day' },
    });
    expect(await stubOf(agent).usage()).toEqual([]);
    expect(await runInDurableObject(stubOf(agent), (_i, s) => s.storage.sql.exec<{ n: number }>('SELECT count(*) AS n FROM runs').one().n)).toBe(0);
  });

  it('model tokens per day are checked before each model call of a run too: a run that crossed the budget stops before its next call', async () => {
    const owner = await addOwner('few_tokens');
    const r = await api(owner.sk, 'POST', '/api/agents', { name: 'saas tools', provider: 'echo', tools: ['calculator'], limits: { max_output_tokens: 8 } });
    expect(r.status).toBe(201);
    const agent = (r.json as { pubkey: string }).pubkey;
    await freeze(agent, T0);
    // The owner's NIP-AO telemetry: the run's end, with the figures the stranger is not told.
    const watch = await watchRunsEnded([agent], owner);
    const resolved = watch.resolved;
    const client = await NipXxClient.open(agent, keys(), `/r/${owner.pk}`);
    // The first call's input is about 170 tokens by estimate (the message and the calculator's
    // definition), with its 8 of answer within the 180 others may use; echo counts whitespace
    // tokens: it costs 243 (its tool call ignores the output limit, as a model's count can pass an estimate).
    const expr = Array.from({ length: 60 }, () => '1').join(' + ');
    const p = client.prompt({ ver: 1, message: `/tool calculator {"expr": "${expr}"}` });
    await client.send(p);
    const run = await client.collect(p.id);
    expect(run.tools.filter((t) => t['phase'] === 'result')).toHaveLength(1);
    expect(run.terminal.payload).toEqual({
      ver: 1,
      code: 'RATE_LIMIT',
      message: 'the agent’s owner reached a usage limit for today (UTC)',
      retry_after: 60,
      details: { quota: 'tokens_per_day' },
    });
    await watch.until(1);
    expect(resolved).toEqual([
      expect.objectContaining({
        run_id: p.id,
        outcome: 'RATE_LIMIT',
        detail: 'others may use 180 of the agent’s owner’s plan’s 200 model tokens for today (UTC); the rest is kept for the owner',
      }),
    ]);
    watch.stop();
  });

  it('model tokens per month: refused until the month ends (retry_after counts to the 1st, 00:00 UTC)', async () => {
    const owner = await addOwner('few_tokens_month');
    const agent = await createAgent(owner, { max_output_tokens: 1 });
    await freeze(agent, T0);
    const client = await NipXxClient.open(agent, keys(), `/r/${owner.pk}`);
    // 89 one-letter words: 74 tokens by the admission's estimate (its payload) with 1 of answer, 50 at
    // the model call, within the 90 others may use; 90 as echo counts (89 in, 1 out).
    expect((await ask(client, Array.from({ length: 89 }, () => 'a').join(' '))).kind).toBe(25803);
    const refused = await ask(client);
    expect(refused).toMatchObject({ kind: 25805, payload: { code: 'RATE_LIMIT', details: { quota: 'tokens_per_month' } } });
    expect(refused.payload.retry_after).toBe((Date.UTC(2026, 1, 1) - T0) / 1000);
  });
});

describe('usage', () => {
  it('the figures are the runs that happened (by agent, sender, model, day); CSV; operators see every owner', async () => {
    const owner = await addOwner();
    const a1 = await createAgent(owner);
    const a2 = await createAgent(owner);
    const c1 = await NipXxClient.open(a1, keys(), `/r/${owner.pk}`);
    const c2 = await NipXxClient.open(a2, keys(), `/r/${owner.pk}`);
    await ask(c1, 'a b c');
    await ask(c1, 'd e');
    await ask(c2, 'f');
    const local = async (agent: string) => stubOf(agent).usage();
    const runs1 = await local(a1);
    const runs2 = await local(a2);
    expect(runs1.map((r) => r.outcome)).toEqual(['response', 'response']);
    const sum = (rs: typeof runs1, k: 'input_tokens' | 'output_tokens') => rs.reduce((n, r) => n + r[k], 0);

    // The agents report each run to the aggregate as its terminal goes out: wait for the third.
    let byAgent = await api(owner.sk, 'GET', '/api/usage?by=agent');
    for (let i = 0; i < 20 && (byAgent.json as { rows: Array<{ runs: number }> }).rows.reduce((n, r) => n + r.runs, 0) < 3; i++) {
      await new Promise((r) => setTimeout(r, 50));
      byAgent = await api(owner.sk, 'GET', '/api/usage?by=agent');
    }
    expect(byAgent.status).toBe(200);
    const rows = (byAgent.json as { rows: unknown[] }).rows;
    const want = (key: string, rs: typeof runs1) => ({ key, runs: rs.length, input_tokens: sum(rs, 'input_tokens'), output_tokens: sum(rs, 'output_tokens'), tool_calls: 0, errors: 0 });
    expect(rows).toEqual([want(a1, runs1), want(a2, runs2)].sort((x, y) => x.key.localeCompare(y.key)));

    const bySender = (await api(owner.sk, 'GET', '/api/usage?by=sender')).json as { rows: Array<{ key: string; runs: number }> };
    expect(bySender.rows.map((r) => [r.key, r.runs]).sort()).toEqual([[c1.k.pk, 2], [c2.k.pk, 1]].sort());
    const byModel = (await api(owner.sk, 'GET', '/api/usage?by=model')).json as { rows: Array<{ key: string; runs: number }> };
    expect(byModel.rows).toMatchObject([{ key: 'echo', runs: 3 }]);

    const url = `${BASE}/api/usage?by=agent`;
    const csv = await SELF.fetch(url, { headers: { Authorization: makeHttpAuthHeader(owner.sk, url, 'GET'), Accept: 'text/csv' } });
    expect(csv.headers.get('Content-Type')).toBe('text/csv; charset=utf-8');
    const line = (r: ReturnType<typeof want>) => `${r.key},${r.runs},${r.input_tokens},${r.output_tokens},${r.tool_calls},${r.errors}\r\n`;
    const sorted = [want(a1, runs1), want(a2, runs2)].sort((x, y) => x.key.localeCompare(y.key));
    expect(await csv.text()).toBe(`key,runs,input_tokens,output_tokens,tool_calls,errors\r\n${sorted.map(line).join('')}`);

    const all = (await admin('GET', '/api/usage?by=agent')).json as { rows: Array<{ key: string }> };
    expect(all.rows.map((r) => r.key)).toEqual(expect.arrayContaining([a1, a2]));
    const one = (await admin('GET', `/api/usage?by=agent&owner=${owner.pk}`)).json as { rows: Array<{ key: string }> };
    expect(one.rows.map((r) => r.key).sort()).toEqual([a1, a2].sort());
    expect(await api(owner.sk, 'GET', `/api/usage?owner=${TEST_OWNER}`)).toEqual({ status: 403, json: { error: 'only operators may see other owners’ usage' } });
  });

  it('the owner’s NIP-AO telemetry carries each run’s usage and the owner’s totals against its plan', async () => {
    const owner = await addOwner('two_runs');
    const agent = await createAgent(owner);
    const watch = await watchRunsEnded([agent], owner);
    const resolved = watch.resolved;
    const client = await NipXxClient.open(agent, owner, `/r/${owner.pk}`);
    await ask(client, 'one two');
    await ask(client, 'three');
    await watch.until(2);
    const runs = (await stubOf(agent).usage()).reverse();
    expect(resolved).toHaveLength(2);
    resolved.forEach((payload, i) => {
      const r = runs[i]!;
      expect(payload).toMatchObject({
        run_id: r.run_id,
        outcome: 'response',
        usage: { provider: 'echo', model: 'echo', input_tokens: r.input_tokens, output_tokens: r.output_tokens, tool_calls: 0, duration_ms: r.duration_ms },
        owner_usage: { plan: 'two_runs', runs_today: i + 1, limits: { runs_per_day: 2 } },
      });
    });
    const tokens = runs.reduce((n, r) => n + r.input_tokens + r.output_tokens, 0);
    expect(resolved[1]).toMatchObject({ owner_usage: { tokens_today: tokens, tokens_month: tokens } });
    watch.stop();
  });

  it('bad queries: 422 naming the field; strangers: 403', async () => {
    expect(await api(TEST_OWNER_SK, 'GET', '/api/usage?by=week')).toMatchObject({ status: 422, json: { error: 'invalid query', issues: [{ path: 'by' }] } });
    expect(await api(TEST_OWNER_SK, 'GET', '/api/usage?from=2026-02-01&to=2026-01-01')).toEqual({
      status: 422,
      json: { error: 'invalid query', issues: [{ path: 'from', message: 'from is after to' }] },
    });
    expect(await api(TEST_OWNER_SK, 'GET', '/api/usage?from=2024-01-01&to=2026-01-01')).toEqual({
      status: 422,
      json: { error: 'invalid query', issues: [{ path: 'from', message: 'at most 366 days' }] },
    });
    expect(await api(keys().sk, 'GET', '/api/usage')).toEqual({ status: 403, json: { error: NOT_AN_OWNER } });
  });

  it('a bad EDGESTR_PLANS fails every API call with a 500 naming the field', async () => {
    const r = await apiWithEnv({ EDGESTR_PLANS: '{"default":{"agents":-1}}' }, TEST_OWNER_SK, 'GET', '/api/agents');
    expect(r).toEqual({ status: 500, json: { error: 'EDGESTR_PLANS.default.agents: Too small: expected number to be >=0' } });
    const missing = await apiWithEnv({ EDGESTR_PLANS: '{"pro":{}}' }, TEST_OWNER_SK, 'GET', '/api/agents');
    expect(missing).toEqual({ status: 500, json: { error: 'EDGESTR_PLANS.default: a plan named "default" is required' } });
  });
});

describe('the owner’s shard under its plan', () => {
  const shard = (owner: string) => env.RELAY_SHARD.get(env.RELAY_SHARD.idFromName(`owner:${owner}`));
  const note = (k: Keys, size: number) => sign(k, { kind: 1, content: 'x'.repeat(size), tags: [] });
  const bytesOf = (e: object) => new TextEncoder().encode(JSON.stringify(e)).length;

  it('stored bytes: an event that fits is stored, the one over the quota is refused; the shard meters its storage', async () => {
    const owner = await addOwner('small_shard');
    const sock = await connect(`/r/${owner.pk}`);
    await sock.auth(owner);
    const e1 = note(owner, 300);
    const e2 = note(owner, 1000 - bytesOf(e1) - bytesOf(note(owner, 0)));
    expect(bytesOf(e1) + bytesOf(e2)).toBe(1000);
    expect((await sock.publish(e1))[2]).toBe(true);
    expect((await sock.publish(e2))[2]).toBe(true);
    expect(await sock.publish(note(owner, 0))).toEqual(['OK', expect.any(String), false, 'restricted: storage quota: the owner’s plan allows 1000 stored bytes on this shard']);
    expect(await shard(owner.pk).storedUsage()).toEqual({ events: 2, bytes: 1000 });
    const storage = { status: 200, json: { events: 2, bytes: 1000, plan: 'small_shard', limit_bytes: 1000 } };
    expect(await api(owner.sk, 'GET', '/api/usage/storage')).toEqual(storage);
    expect(await admin('GET', `/api/usage/storage?owner=${owner.pk}`)).toEqual(storage);
    sock.close();
  });

  it('GET /api/usage/storage: an owner sees its own shard only; operators name the owner; unknown fields 422', async () => {
    const owner = await addOwner();
    // A plan without stored_bytes is held to the relay's max_stored_bytes (RELAY_LIMITS, default 2 GiB): that is its limit.
    expect(await api(owner.sk, 'GET', '/api/usage/storage')).toEqual({ status: 200, json: { events: 0, bytes: 0, plan: 'default', limit_bytes: 2_147_483_648 } });
    expect(await api(owner.sk, 'GET', `/api/usage/storage?owner=${TEST_OWNER}`)).toEqual({ status: 403, json: { error: 'only operators may see other owners’ usage' } });
    expect(await api(keys().sk, 'GET', '/api/usage/storage')).toEqual({ status: 403, json: { error: NOT_AN_OWNER } });
    expect(await admin('GET', '/api/usage/storage')).toEqual({
      status: 422,
      json: { error: 'invalid query', issues: [{ path: 'owner', message: 'operators name the owner (owner=<pubkey>)' }] },
    });
    expect(await admin('GET', '/api/usage/storage?owner=nope')).toEqual({
      status: 422,
      json: { error: 'invalid query', issues: [{ path: 'owner', message: 'a 64-hex pubkey or an npub' }] },
    });
    expect((await api(owner.sk, 'GET', '/api/usage/storage?by=day')).status).toBe(422);
  });

  it('suspended: nothing new is stored (restricted: suspended, to the owner’s side; others are not told why); resumed: stored again', async () => {
    const owner = await addOwner();
    const sock = await connect(`/r/${owner.pk}`);
    await sock.auth(owner);
    const stranger = await connect(`/r/${owner.pk}`);
    await admin('PATCH', `/api/admin/owners/${owner.pk}`, { suspended: true });
    const refused = note(owner, 10);
    expect(await sock.publish(refused)).toEqual(['OK', refused.id, false, 'restricted: suspended: this owner’s shard is read-only']);
    const letter = sign(keys(), { kind: 1, content: 'hi', tags: [['p', owner.pk]] });
    expect(await stranger.publish(letter)).toEqual(['OK', letter.id, false, 'restricted: this shard stores nothing new for now; retry later']);
    stranger.close();
    await admin('PATCH', `/api/admin/owners/${owner.pk}`, { suspended: false });
    expect((await sock.publish(note(owner, 10)))[2]).toBe(true);
    sock.close();
  });

  it('events per second: two pass, the third in the same second is rate-limited', async () => {
    const owner = await addOwner('slow_shard');
    const sock = await connect(`/r/${owner.pk}`);
    await sock.auth(owner);
    const frozen = Date.now();
    await runInDurableObject(shard(owner.pk), (i) => void ((i as unknown as { clock: () => number }).clock = () => frozen));
    expect((await sock.publish(note(owner, 1)))[2]).toBe(true);
    expect((await sock.publish(note(owner, 2)))[2]).toBe(true);
    expect((await sock.publish(note(owner, 3)))[3]).toBe('rate-limited: the owner’s plan allows 2 events per second on this shard');
    sock.close();
  });
});

describe('the owner’s bridge under its plan', () => {
  it('bridge servers: two registered, the third POST is 409 with the exact error; removing one makes room', async () => {
    const owner = await addOwner('two_bridge_servers');
    const add = (id: string) => api(owner.sk, 'POST', '/api/bridge/servers', { id, url: 'http://127.0.0.1:1/mcp', public: false });
    expect((await add('a')).status).toBe(201);
    expect((await add('b')).status).toBe(201);
    expect(await add('c')).toEqual({ status: 409, json: { error: 'the owner’s plan allows at most 2 bridge servers; delete one first' } });
    expect(((await api(owner.sk, 'GET', '/api/bridge/servers')).json as { servers: Array<{ id: string }> }).servers.map((s) => s.id).sort()).toEqual(['a', 'b']);
    expect((await api(owner.sk, 'DELETE', '/api/bridge/servers/a')).status).toBe(204);
    expect((await add('c')).status).toBe(201);
    // Without bridge_servers in the plan: at most DEFAULT_BRIDGE_SERVERS.
    expect(bridgeServerCap(planLimits(env, 'default'))).toBe(DEFAULT_BRIDGE_SERVERS);
    expect(DEFAULT_BRIDGE_SERVERS).toBe(100);
  });

  it('bridge calls per day: three pass (pings are free), the fourth is -32029 naming the quota; others may use 90 % of them; each call is metered', async () => {
    const owner = await addOwner('three_bridge_calls');
    const stub = env.BRIDGE.get(env.BRIDGE.idFromName(owner.pk));
    const provider = await stub.ensureProvider(owner.pk, BASE);
    await env.RELAY_SHARD.get(env.RELAY_SHARD.idFromName(`owner:${owner.pk}`)).provisionAgent(provider, owner.pk, 'bridge');
    const added = await stub.addServer({ id: 'q', url: everythingUrl(), public: false });
    expect(added.ok).toBe(true);
    await bridgeReady(provider);
    // A stranger gets 2 of the 3 (90 %, rounded down); the owner's own key the rest.
    const c = await DvmcpClient.open(provider);
    for (let i = 0; i < 2; i++) expect((await c.call('tools/list', { i }, { s: 'q' })).result.ok).toBe(true);
    const past = await c.call('tools/list', { i: 2 }, { s: 'q' });
    expect(!past.result.ok && past.result.error.code).toBe(RPC.RATE_LIMITED);
    // The stranger is told the quota's name and when to retry, neither the limit nor the owner's calls.
    const told = !past.result.ok ? past.result.error : undefined;
    expect(told?.message).toMatch(/^rate-limited: the bridge’s owner reached a usage limit for today \(UTC\) \(quota bridge_calls_per_day\); retry in \d+ s$/);
    expect(told?.message.replace(/retry in \d+ s$/, '')).not.toMatch(/\d/);
    expect(told?.data).toEqual({ quota: 'bridge_calls_per_day', retry_after: expect.any(Number) });
    const mine = await DvmcpClient.open(provider, '/', owner);
    expect((await mine.call('tools/list', { i: 2 }, { s: 'q' })).result.ok).toBe(true);
    const refused = await mine.call('tools/list', { i: 3 }, { s: 'q' });
    expect(!refused.result.ok && refused.result.error.code).toBe(RPC.RATE_LIMITED);
    expect(!refused.result.ok && refused.result.error.message).toMatch(/^rate-limited: the owner’s plan allows 3 bridge calls per day \(quota bridge_calls_per_day\); retry in \d+ s$/);
    const day = new Date().toISOString().slice(0, 10);
    expect(await stub.usage(day, day)).toEqual([{ day, server: 'q', method: 'tools/list', calls: 3, duration_ms: expect.any(Number) }]);
    const byServer = await api(owner.sk, 'GET', '/api/usage/bridge?by=server');
    expect(byServer).toEqual({ status: 200, json: { rows: [{ key: 'q', calls: 3, duration_ms: expect.any(Number) }] } });
    expect(await admin('GET', `/api/usage/bridge?by=method&owner=${owner.pk}`)).toEqual({ status: 200, json: { rows: [{ key: 'tools/list', calls: 3, duration_ms: expect.any(Number) }] } });
    expect(await api(owner.sk, 'GET', `/api/usage/bridge?from=${day}&to=${day}`)).toMatchObject({ status: 200, json: { rows: [{ key: day, calls: 3 }] } });
    expect(await api(owner.sk, 'GET', '/api/usage/bridge?from=2020-01-01&to=2020-01-02')).toEqual({ status: 200, json: { rows: [] } });
    const url = `${BASE}/api/usage/bridge?by=server`;
    const csv = await SELF.fetch(url, { headers: { Authorization: makeHttpAuthHeader(owner.sk, url, 'GET'), Accept: 'text/csv' } });
    const { duration_ms } = (byServer.json as { rows: Array<{ duration_ms: number }> }).rows[0]!;
    expect(await csv.text()).toBe(`key,calls,duration_ms\r\nq,3,${duration_ms}\r\n`);
    expect((await api(owner.sk, 'GET', '/api/usage/bridge?by=agent')).status).toBe(422);
    expect((await admin('GET', '/api/usage/bridge')).status).toBe(422);
    c.close();
  });
});
