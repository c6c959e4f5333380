// The owner's plan at admission (workers/agent/agent-do.ts, workers/accounts/quota.ts): runs in
// progress count against runs_per_day (so concurrent prompts cannot overshoot it), and senders
// other than the owner may use only OTHERS_PLAN_SHARE of each plan limit, so a stranger on an open
// agent cannot leave the owner's own agents answering RATE_LIMIT. A run that ended counts until
// Accounts has it, whatever snapshot of the owner's account lands meanwhile (workers/agent/owner-copy.ts).
import { env, runInDurableObject } from 'cloudflare:test';
import { describe, expect, it } from 'vitest';
import type { Agent } from '../../workers/agent/agent-do.js';
import type { OwnerCopy } from '../../workers/agent/owner-copy.js';
import { accountsStub } from '../../workers/accounts/accounts-do.js';
import { api } from './api-helpers.js';
import { NipXxClient } from './agent-helpers.js';
import { keys, type Keys } from './helpers.js';
import { pauseObject } from './hold-object.js';
import { TEST_ADMIN_SK } from './test-keys.js';

async function addOwner(plan: string): Promise<Keys> {
  const k = keys();
  expect((await api(TEST_ADMIN_SK, 'POST', '/api/admin/owners', { pubkey: k.pk, plan })).status).toBe(201);
  return k;
}

async function createAgent(owner: Keys, body: object = {}): Promise<string> {
  const r = await api(owner.sk, 'POST', '/api/agents', { name: 'plan agent', provider: 'echo', ...body });
  expect(r.status).toBe(201);
  return (r.json as { pubkey: string }).pubkey;
}

async function ask(client: NipXxClient, message = 'hello there'): Promise<{ kind: number; payload: Record<string, unknown> }> {
  const p = client.prompt({ ver: 1, message });
  await client.send(p);
  const { terminal } = await client.collect(p.id);
  return { kind: terminal.kind, payload: terminal.payload };
}

describe('runs per day with runs in progress', () => {
  it('plan runs_per_day 2, concurrent slow prompts: exactly two runs — one of six strangers’ (the others’ share), one of the owner’s two', async () => {
    const owner = await addOwner('two_runs');
    const agent = await createAgent(owner, { provider: 'openai', models: ['fake-slow'], default_model: 'fake-slow', limits: { max_concurrent_runs: 8 } });
    const strangers = await Promise.all(Array.from({ length: 6 }, () => NipXxClient.open(agent, keys(), `/r/${owner.pk}`)));
    const prompts = strangers.map((c) => c.prompt({ ver: 1, message: 'scenario:slow go' }));
    await Promise.all(strangers.map((c, i) => c.send(prompts[i]!)));
    const terms = strangers.map((c, i) => c.collect(prompts[i]!.id, 40_000));
    // While the one admitted stranger's run is in progress (10 s), the owner sends two prompts (one collector per socket).
    const mes = await Promise.all([0, 1].map(() => NipXxClient.open(agent, owner, `/r/${owner.pk}`)));
    const mine = mes.map((me, i) => me.prompt({ ver: 1, message: `scenario:slow mine ${i}` }));
    await Promise.all(mes.map((me, i) => me.send(mine[i]!)));
    const myTerms = (await Promise.all(mes.map((me, i) => me.collect(mine[i]!.id, 40_000)))).map((t) => t.terminal).sort((x, y) => x.kind - y.kind);
    const strangerTerms = (await Promise.all(terms)).map((t) => t.terminal);
    expect(strangerTerms.filter((t) => t.kind === 25803)).toHaveLength(1);
    const refused = strangerTerms.filter((t) => t.kind === 25805);
    expect(refused).toHaveLength(5);
    for (const t of refused) {
      expect(t.payload).toMatchObject({ code: 'RATE_LIMIT', message: 'the agent’s owner reached a usage limit for today (UTC)', details: { quota: 'runs_per_day' } });
    }
    expect(myTerms.map((t) => t.kind)).toEqual([25803, 25805]);
    expect(myTerms[1]!.payload).toMatchObject({ code: 'RATE_LIMIT', message: 'the agent’s owner used its plan’s 2 runs for today (UTC)', details: { quota: 'runs_per_day' } });
    expect(await env.AGENT.get(env.AGENT.idFromName(agent)).usage()).toHaveLength(2);
  }, 90_000);
});

describe('runs per day across the owner’s agents', () => {
  it('plan runs_per_day 2 (others’ share 1), two public agents: strangers prompting both at once get exactly one run; the owner’s prompt afterwards runs', async () => {
    const owner = await addOwner('two_runs');
    const body = { provider: 'openai', models: ['fake-slow'], default_model: 'fake-slow' };
    const agents = [await createAgent(owner, body), await createAgent(owner, body)];
    const strangers = await Promise.all(agents.map((a) => NipXxClient.open(a, keys(), `/r/${owner.pk}`)));
    await new Promise((r) => setTimeout(r, 300));
    // Both copies are fresh and know no run: only Accounts sees the two admissions together.
    const prompts = strangers.map((s, i) => s.prompt({ ver: 1, message: `scenario:slow ${i}` }));
    await Promise.all(strangers.map((s, i) => s.send(prompts[i]!)));
    const terms = (await Promise.all(strangers.map((s, i) => s.collect(prompts[i]!.id, 40_000)))).map((t) => t.terminal).sort((x, y) => x.kind - y.kind);
    expect(terms.map((t) => t.kind)).toEqual([25803, 25805]);
    expect(terms[1]!.payload).toMatchObject({ code: 'RATE_LIMIT', message: 'the agent’s owner reached a usage limit for today (UTC)', details: { quota: 'runs_per_day' } });
    // Later (each copy fetched again, as the watchdog does): the owner's own prompt has its kept run.
    await new Promise((r) => setTimeout(r, 300));
    const later = Date.now() + 60_000;
    for (const a of agents) await runInDurableObject(env.AGENT.get(env.AGENT.idFromName(a)), (i) => void ((i as Agent).now = () => later));
    const me = await NipXxClient.open(agents[0]!, owner, `/r/${owner.pk}`);
    const mine = me.prompt({ ver: 1, message: 'scenario:slow mine' });
    await me.send(mine);
    expect((await me.collect(mine.id, 40_000)).terminal.kind).toBe(25803);
    const runs = await Promise.all(agents.map((a) => env.AGENT.get(env.AGENT.idFromName(a)).usage()));
    expect(runs.flat()).toHaveLength(2);
  }, 90_000);
});

describe('runs per day while the owner’s account is fetched', () => {
  it('plan runs_per_day 2: a run that ends while a snapshot of the account is queued at Accounts still counts when that snapshot (without it) lands: the owner’s third prompt is refused', async () => {
    const owner = await addOwner('two_runs');
    const agent = await createAgent(owner, { provider: 'openai', models: ['fake-slow', 'gpt-test'], default_model: 'gpt-test', limits: { max_concurrent_runs: 8 } });
    const stub = env.AGENT.get(env.AGENT.idFromName(agent));
    const me1 = await NipXxClient.open(agent, owner, `/r/${owner.pk}`);
    const me2 = await NipXxClient.open(agent, owner, `/r/${owner.pk}`);
    const me3 = await NipXxClient.open(agent, owner, `/r/${owner.pk}`);
    await new Promise((r) => setTimeout(r, 300));
    // The first run (about 10 s) starts with a fresh copy of the account.
    const p1 = me1.prompt({ ver: 1, message: 'scenario:slow one', model: 'fake-slow' });
    await me1.send(p1);
    const t1 = me1.collect(p1.id, 40_000);
    await new Promise((r) => setTimeout(r, 500));
    // The copy is stale for the next two prompts: their one snapshot is queued at Accounts (held),
    // then the first run ends and its report is queued behind it.
    const later = Date.now() + 60_000;
    const fetched = await runInDurableObject(stub, (i) => {
      (i as Agent).now = () => later;
      return (i as Agent).ownerSnapshots;
    });
    const resume = await pauseObject(accountsStub(env));
    const p2 = me2.prompt({ ver: 1, message: 'two' });
    const p3 = me3.prompt({ ver: 1, message: 'three' });
    await me2.send(p2);
    await me3.send(p3);
    for (let i = 0; i < 200 && (await runInDurableObject(stub, (a) => (a as Agent).ownerSnapshots)) === fetched; i++) await new Promise((r) => setTimeout(r, 10));
    expect((await t1).terminal.kind).toBe(25803);
    await new Promise((r) => setTimeout(r, 200));
    await resume();
    expect((await me2.collect(p2.id)).terminal.kind).toBe(25803);
    const third = (await me3.collect(p3.id)).terminal;
    expect(third.kind).toBe(25805);
    expect(third.payload).toMatchObject({ code: 'RATE_LIMIT', message: 'the agent’s owner used its plan’s 2 runs for today (UTC)', details: { quota: 'runs_per_day' } });
    expect(await stub.usage()).toHaveLength(2);
  }, 60_000);

  it('an answer of Accounts computed before a run’s report and delivered after that report’s answer does not erase the run: a stranger (others’ share: 1 of 2 runs) is refused', async () => {
    const owner = await addOwner('two_runs');
    const agent = await createAgent(owner);
    const stub = env.AGENT.get(env.AGENT.idFromName(agent));
    const me = await NipXxClient.open(agent, owner, `/r/${owner.pk}`);
    const stranger = await NipXxClient.open(agent, keys(), `/r/${owner.pk}`);
    const stale = await accountsStub(env).snapshot(owner.pk, Date.now());
    expect(stale.totals.runs_today).toBe(0);
    expect((await ask(me)).kind).toBe(25803);
    await new Promise((r) => setTimeout(r, 300));
    // The snapshot taken before the run's report reaches the agent late (as an RPC answer can).
    await runInDurableObject(stub, (i) => (i as unknown as { ownerCopy: OwnerCopy }).ownerCopy.answered(stale));
    const refused = await ask(stranger);
    expect(refused.kind).toBe(25805);
    expect(refused.payload).toMatchObject({ code: 'RATE_LIMIT', message: 'the agent’s owner reached a usage limit for today (UTC)', details: { quota: 'runs_per_day' } });
  }, 30_000);
});

describe('the owner’s share of its plan', () => {
  it('a stranger on open agent A uses up the share of others; the owner’s prompt to its private agent B is still answered', async () => {
    const owner = await addOwner('two_runs');
    const a = await createAgent(owner);
    const b = await createAgent(owner, { allow: [owner.pk] });
    const stranger = await NipXxClient.open(a, keys(), `/r/${owner.pk}`);
    expect((await ask(stranger)).kind).toBe(25803);
    // B learns A's run as its watchdog would (every 30 s).
    await new Promise((r) => setTimeout(r, 300));
    await env.AGENT.get(env.AGENT.idFromName(b)).ownerChanged();
    const me = await NipXxClient.open(b, owner, `/r/${owner.pk}`);
    expect((await ask(me)).kind).toBe(25803);
    const refused = await ask(stranger);
    expect(refused.kind).toBe(25805);
    // The stranger learns which quota and when it resets, not the owner's plan nor its runs (told-to.ts).
    expect(refused.payload).toMatchObject({ code: 'RATE_LIMIT', message: 'the agent’s owner reached a usage limit for today (UTC)', details: { quota: 'runs_per_day' } });
    expect(refused.payload.retry_after).toBeGreaterThan(0);
    // The owner's own limit is the whole plan: its third run of the day is refused as before.
    expect((await ask(me)).payload).toMatchObject({ code: 'RATE_LIMIT', message: 'the agent’s owner used its plan’s 2 runs for today (UTC)' });
  }, 60_000);
});
