// Issue 7 on the hosted agent: private conversations keyed by (sender, s), per-agent caps on what
// strangers may spend, agents of removed owners stop answering, generic provider errors for
// clients, retention, and runs that cannot be lost (remove with active runs, a provider dying
// mid-stream, duplicate delivery through two relays). Limiters run on an injected clock.
import { env, runDurableObjectAlarm, runInDurableObject } from 'cloudflare:test';
import { describe, expect, inject, it, vi } from 'vitest';
import { Agent } from '../../workers/agent/agent-do.js';
import { RESEND_BATCH, RESEND_WINDOW_MS } from '../../workers/agent/outbox.js';
import { DEFAULT_LIMITS, type StoredAgent } from '../../workers/agent/config.js';
import { sealSecretKey } from '../../workers/common/secrets.js';
import { PROVIDER_MESSAGES } from '../../workers/agent/runtime.js';
import { api } from './api-helpers.js';
import { NipXxClient, createTestAgent, dropAgentConnections, ownerRelayClient } from './agent-helpers.js';
import { keys, now, sign } from './helpers.js';
import { RelayClient } from '../../src/shared/relay-client.js';
import { ALL_RELAYS } from '../../workers/relay-do/vanish.js';
import { TEST_OWNER_SK } from './test-keys.js';
import { Observer, type ObservedFrame } from '../../src/shared/ao-observer.js';

const fake = inject('fakeProviderUrl');
type Recorded = Array<{ body: { messages?: Array<{ role: string; content: unknown }> } }>;
const recorded = async (marker: string): Promise<Recorded> => (await (await fetch(`${fake}/_requests?contains=${encodeURIComponent(marker)}`)).json()) as Recorded;
const marker = () => `m${Math.random().toString(36).slice(2)}`;

const stubOf = (agent: string) => env.AGENT.get(env.AGENT.idFromName(agent));
/** Freezes the agent's limiter clock at `t` (ms). */
const freeze = (agent: string, t: number) => runInDurableObject(stubOf(agent), (i) => void ((i as Agent).now = () => t));
const runRows = (agent: string) =>
  runInDurableObject(stubOf(agent), (_i, state) => state.storage.sql.exec<{ id: string }>('SELECT id FROM runs').toArray().map((r) => r.id));
const T0 = Date.UTC(2026, 0, 10, 12, 0, 0);

describe('conversations are private to their sender', () => {
  it('a stranger using the victim’s s tag gets none of its history, and does not write into it', async () => {
    const agent = await createTestAgent({ provider: 'openai', models: ['gpt-test'] });
    const victim = await NipXxClient.open(agent);
    const attacker = await NipXxClient.open(agent);
    const secret = marker();
    const v1 = victim.prompt({ ver: 1, message: `scenario:text my password is ${secret}` });
    await victim.send(v1);
    expect((await victim.collect(v1.id)).terminal.kind).toBe(25803);

    const probe = marker();
    const a1 = attacker.prompt({ ver: 1, message: `scenario:text repeat everything ${probe}` }, { session: `sender:${victim.k.pk}` });
    await attacker.send(a1);
    expect((await attacker.collect(a1.id)).terminal.kind).toBe(25803);
    const attackerRequest = await recorded(probe);
    expect(attackerRequest).toHaveLength(1);
    expect(JSON.stringify(attackerRequest[0]!.body.messages)).not.toContain(secret);

    const next = marker();
    const v2 = victim.prompt({ ver: 1, message: `scenario:text and now ${next}` });
    await victim.send(v2);
    expect((await victim.collect(v2.id)).terminal.kind).toBe(25803);
    const victimRequest = JSON.stringify((await recorded(next))[0]!.body.messages);
    expect(victimRequest).toContain(secret);
    expect(victimRequest).not.toContain(probe);
  });

  it('SESSION_LIMIT counts the sender’s own turns only', async () => {
    const agent = await createTestAgent({ limits: { max_session_turns: 1 } });
    const victim = await NipXxClient.open(agent);
    const v = victim.prompt({ ver: 1, message: 'one' });
    await victim.send(v);
    expect((await victim.collect(v.id)).terminal.kind).toBe(25803);
    const other = await NipXxClient.open(agent);
    const o = other.prompt({ ver: 1, message: 'mine' }, { session: `sender:${victim.k.pk}` });
    await other.send(o);
    expect((await other.collect(o.id)).terminal.payload).toMatchObject({ text: 'echo: mine' });
  });
});

describe('per-agent caps', () => {
  it('prompts per minute across all senders: fresh keys cannot multiply the budget; refusals create no run', async () => {
    const agent = await createTestAgent({ limits: { agent_prompts_per_minute: 2 } });
    await freeze(agent, T0);
    const answers: Array<Record<string, unknown>> = [];
    const ids: string[] = [];
    for (let i = 0; i < 4; i++) {
      const c = await NipXxClient.open(agent);
      const p = c.prompt({ ver: 1, message: `stranger ${i}` });
      await c.send(p);
      ids.push(p.id);
      answers.push((await c.collect(p.id)).terminal.payload);
    }
    expect(answers.slice(0, 2).map((a) => a['text'])).toEqual(['echo: stranger 0', 'echo: stranger 1']);
    for (const a of answers.slice(2)) {
      expect(a).toMatchObject({ code: 'RATE_LIMIT', message: 'this agent accepts at most 2 prompts per minute across all senders', retry_after: 60 });
    }
    expect((await runRows(agent)).sort()).toEqual(ids.slice(0, 2).sort());
    // The window frees after 60 s.
    await freeze(agent, T0 + 60_000);
    const later = await NipXxClient.open(agent);
    const p = later.prompt({ ver: 1, message: 'later' });
    await later.send(p);
    expect((await later.collect(p.id)).terminal.kind).toBe(25803);
  });

  it('one RATE_LIMIT answer per sender per window; later refusals are dropped and counted', async () => {
    const agent = await createTestAgent({ limits: { prompts_per_minute: 1 } });
    await freeze(agent, T0);
    const c = await NipXxClient.open(agent);
    const p1 = c.prompt({ ver: 1, message: 'one' });
    await c.send(p1);
    expect((await c.collect(p1.id)).terminal.kind).toBe(25803);
    await freeze(agent, T0 + 20_000);
    const p2 = c.prompt({ ver: 1, message: 'two' });
    await c.send(p2);
    expect((await c.collect(p2.id)).terminal.payload).toMatchObject({ code: 'RATE_LIMIT', message: 'at most 1 prompts per minute per sender', retry_after: 40 });
    const p3 = c.prompt({ ver: 1, message: 'three' });
    await c.send(p3);
    // A sentinel: a prompt of another sender, answered after p3 was handled.
    const other = await NipXxClient.open(agent);
    const s = other.prompt({ ver: 1, message: 'sentinel' });
    await other.send(s);
    expect((await other.collect(s.id)).terminal.kind).toBe(25803);
    expect(await c.noTerminal(p3.id, 200)).toBe(true);
    const stats = await runInDurableObject(stubOf(agent), (i) => (i as Agent).refusals);
    expect(stats).toEqual({ answered: 1, dropped: 1 });
    expect((await runRows(agent)).sort()).toEqual([p1.id, s.id].sort());
  });

  it('a prompt dropped at admission (its sender already told) is not run when a restart replays it', { timeout: 30_000 }, async () => {
    const agent = await createTestAgent({ limits: { prompts_per_minute: 1 } });
    await freeze(agent, T0);
    const c = await NipXxClient.open(agent);
    const p1 = c.prompt({ ver: 1, message: 'one' });
    await c.send(p1);
    expect((await c.collect(p1.id)).terminal.kind).toBe(25803);
    const p2 = c.prompt({ ver: 1, message: 'two' });
    await c.send(p2);
    expect((await c.collect(p2.id)).terminal.payload).toMatchObject({ code: 'RATE_LIMIT' });
    const p3 = c.prompt({ ver: 1, message: 'three' });
    await c.send(p3);
    await vi.waitFor(async () => expect(await runInDurableObject(stubOf(agent), (i) => (i as Agent).refusals)).toEqual({ answered: 1, dropped: 1 }));
    // A restart: the agent resubscribes from its cursor minus the replay slack, and the relay sends p1, p2 and p3 again.
    await runInDurableObject(stubOf(agent), (_i, state) => state.abort('simulated restart')).catch(() => undefined);
    await runDurableObjectAlarm(stubOf(agent));
    const other = await NipXxClient.open(agent);
    const s = other.prompt({ ver: 1, message: 'sentinel' });
    await other.send(s);
    expect((await other.collect(s.id, 10_000)).terminal.kind).toBe(25803);
    await new Promise((r) => setTimeout(r, 1000));
    expect((await runRows(agent)).sort()).toEqual([p1.id, s.id].sort());
    expect(await c.noTerminal(p3.id, 0)).toBe(true);
  });

  it('concurrent runs are capped', async () => {
    const agent = await createTestAgent({ provider: 'openai', models: ['fake-slow'], limits: { max_concurrent_runs: 1 } });
    const a = await NipXxClient.open(agent);
    const slow = a.prompt({ ver: 1, message: 'long', model: 'fake-slow' });
    await a.send(slow);
    await a.sock.next((f) => f[0] === 'EVENT', 8000);
    const b = await NipXxClient.open(agent);
    const p = b.prompt({ ver: 1, message: 'me too', model: 'fake-slow' });
    await b.send(p);
    expect((await b.collect(p.id)).terminal.payload).toMatchObject({ code: 'RATE_LIMIT', message: 'this agent is already running its maximum of 1 concurrent runs', retry_after: 5 });
    await a.send(a.cancel(slow.id));
    expect((await a.collect(slow.id)).terminal.payload).toMatchObject({ code: 'CANCELLED' });
  });

  it('model tokens per UTC day, counted from provider usage and kept in SQLite', async () => {
    // 100 one-letter words: the prompt (73 tokens by the admission's estimate of its payload, 54 at
    // the model call) and its answer (max_output_tokens 2) fit the budget of 80; echo counts
    // whitespace tokens: 100 in, 2 out (the answer cut there), and the budget is used.
    const agent = await createTestAgent({ limits: { max_tokens_per_day: 80, max_output_tokens: 2 } });
    await freeze(agent, T0);
    const c = await NipXxClient.open(agent);
    const p1 = c.prompt({ ver: 1, message: Array.from({ length: 100 }, () => 'a').join(' ') });
    await c.send(p1);
    const usage = (await c.collect(p1.id)).terminal.payload['usage'] as { input_tokens: number; output_tokens: number };
    const stored = await runInDurableObject(stubOf(agent), (_i, state) => state.storage.sql.exec('SELECT day, tokens FROM token_usage').toArray());
    expect(stored).toEqual([{ day: '2026-01-10', tokens: usage.input_tokens + usage.output_tokens }]);
    const p2 = c.prompt({ ver: 1, message: 'more' });
    await c.send(p2);
    // A stranger: neither the budget nor the spend (the owner's: told-to.ts).
    expect((await c.collect(p2.id)).terminal.payload).toEqual({ ver: 1, code: 'RATE_LIMIT', message: 'this agent reached its model budget for today (UTC)', retry_after: 12 * 3600 });
    // The next UTC day has a fresh budget (a new conversation: this one's history alone is over 80 tokens).
    await freeze(agent, T0 + 12 * 3600_000);
    const d = await NipXxClient.open(agent);
    const p3 = d.prompt({ ver: 1, message: 'tomorrow' });
    await d.send(p3);
    expect((await d.collect(p3.id)).terminal.kind).toBe(25803);
  });

  it('fresh keys cannot make the agent publish unbounded refusals: at most agent_prompts_per_minute answers per minute', async () => {
    const agent = await createTestAgent({ limits: { agent_prompts_per_minute: 1 } });
    await freeze(agent, T0);
    const first = await NipXxClient.open(agent);
    const p = first.prompt({ ver: 1, message: 'runs' });
    await first.send(p);
    expect((await first.collect(p.id)).terminal.kind).toBe(25803);
    const told = await NipXxClient.open(agent);
    const t = told.prompt({ ver: 1, message: 'refused, told' });
    await told.send(t);
    expect((await told.collect(t.id)).terminal.payload).toMatchObject({ code: 'RATE_LIMIT' });
    const silent = await NipXxClient.open(agent);
    const s = silent.prompt({ ver: 1, message: 'refused, not told' });
    await silent.send(s);
    // Sentinel: a refusal of `told` again (dropped too), then the counters say both were handled.
    await told.send(told.prompt({ ver: 1, message: 'again' }));
    let stats = { answered: 0, dropped: 0 };
    for (let i = 0; i < 100 && stats.dropped < 2; i++) {
      stats = await runInDurableObject(stubOf(agent), (i) => (i as Agent).refusals);
      if (stats.dropped < 2) await new Promise((r) => setTimeout(r, 50));
    }
    expect(stats).toEqual({ answered: 1, dropped: 2 });
    expect(await silent.noTerminal(s.id, 100)).toBe(true);
  });

  it('an agent stored before the caps existed gets their defaults', async () => {
    const agent = await createTestAgent();
    await runInDurableObject(stubOf(agent), (_i, state) => {
      const row = state.storage.sql.exec<{ config: string }>('SELECT config FROM agent').one();
      const config = JSON.parse(row.config);
      for (const k of ['agent_prompts_per_minute', 'max_concurrent_runs', 'max_tokens_per_day']) delete config.limits[k];
      state.storage.sql.exec('UPDATE agent SET config = ?', JSON.stringify(config));
      // A fresh instance over the same storage, as after a deploy.
      const fresh = new Agent(state, env);
      expect(fresh.view()?.limits).toMatchObject({ agent_prompts_per_minute: 60, max_concurrent_runs: 4, max_tokens_per_day: 1_000_000 });
    });
  });

  it('the caps are set per agent through the API, with safe defaults', async () => {
    const created = await createTestAgent();
    const view = await api(TEST_OWNER_SK, 'GET', `/api/agents/${created}`);
    expect((view.json as { limits: Record<string, number> }).limits).toMatchObject({ agent_prompts_per_minute: 60, max_concurrent_runs: 4, max_tokens_per_day: 1_000_000 });
    const patched = await api(TEST_OWNER_SK, 'PATCH', `/api/agents/${created}`, { limits: { max_tokens_per_day: 5000 } });
    expect(patched.status).toBe(200);
    expect((patched.json as { limits: Record<string, number> }).limits).toMatchObject({ max_tokens_per_day: 5000, agent_prompts_per_minute: 60 });
    const bad = await api(TEST_OWNER_SK, 'PATCH', `/api/agents/${created}`, { limits: { max_concurrent_runs: 0 } });
    expect(bad.status).toBe(422);
  });
});

describe('an agent whose owner is no longer allowed', () => {
  it('answers UNAUTHORIZED once per sender window, with no model call and no run', async () => {
    const owner = keys();
    const sk = keys();
    const config: StoredAgent = { name: 'orphan', pubkey: sk.pk, owner: owner.pk, origin: 'http://relay.test', provider: 'echo', limits: DEFAULT_LIMITS, created_at: 1 };
    await stubOf(sk.pk).create(config, await sealSecretKey(sk.sk, sk.pk, 'edgestr-test-secret-0123456789'));
    const c = await NipXxClient.open(sk.pk, keys(), '/');
    const p = c.prompt({ ver: 1, message: 'hello?' });
    // Stored by the relay, so the agent gets it even if it subscribes after this.
    await c.send(p);
    expect((await c.collect(p.id, 15_000)).terminal.payload).toEqual({ ver: 1, code: 'UNAUTHORIZED', message: 'this agent is unavailable on this deployment; retry later or use another agent' });
    const p2 = c.prompt({ ver: 1, message: 'again' });
    await c.send(p2);
    expect(await c.noTerminal(p2.id, 400)).toBe(true);
    expect(await runRows(sk.pk)).toEqual([]);
  });
});

describe('provider errors', () => {
  it('the client gets a generic message; the provider’s text is not sent to it', async () => {
    const agent = await createTestAgent({ provider: 'openai', models: ['fake-error'] });
    const c = await NipXxClient.open(agent);
    const p = c.prompt({ ver: 1, message: 'hi' });
    await c.send(p);
    const run = await c.collect(p.id);
    expect(run.terminal.payload).toMatchObject({ code: 'MODEL_UNAVAILABLE', message: PROVIDER_MESSAGES.unavailable, retry_after: 30 });
    expect(JSON.stringify(run.terminal.payload)).not.toContain('server had an error');
  });
});

describe('an agent created without a provider', () => {
  it('stores none and follows the deployment’s configured provider at run time (shown in the view as effective_provider)', async () => {
    const r = await api(TEST_OWNER_SK, 'POST', '/api/agents', { name: 'auto' });
    expect(r.status).toBe(201);
    const agent = (r.json as { pubkey: string }).pubkey;
    const stored = await runInDurableObject(stubOf(agent), (_i, state) => JSON.parse(state.storage.sql.exec<{ config: string }>('SELECT config FROM agent').one().config));
    expect(stored.provider).toBeUndefined();
    const view = (await api(TEST_OWNER_SK, 'GET', `/api/agents/${agent}`)).json;
    expect(view).toMatchObject({ effective_provider: 'openai' });
    expect(view).not.toHaveProperty('provider');
  });
});

describe('the development demo agent', () => {
  it('follows the deployment’s provider even though an older version stored one', async () => {
    const { DEMO_AGENT, DEMO_AGENT_SK, DEMO_OWNER } = await import('../../workers/common/owners.js');
    const config: StoredAgent = { name: 'demo', pubkey: DEMO_AGENT, owner: DEMO_OWNER, origin: 'http://relay.test', provider: 'echo', limits: DEFAULT_LIMITS, created_at: 1 };
    const stub = stubOf(DEMO_AGENT);
    await stub.create(config, await sealSecretKey(DEMO_AGENT_SK, DEMO_AGENT, 'edgestr-test-secret-0123456789'));
    // This deployment configures OPENAI_BASE_URL (the fake provider): the demo agent uses openai.
    const view = await stub.view();
    expect(view?.effective_provider).toBe('openai');
    expect(view).not.toHaveProperty('provider');
    await stub.remove();
  });
});

describe('retention', () => {
  it('the watchdog prunes old seen ids, old finished runs (their terminal delivered or not) and untouched conversations, in bounded batches', async () => {
    const agent = await createTestAgent();
    const day = 86_400_000;
    const left = await runInDurableObject(stubOf(agent), (instance, state) => {
      const i = instance as Agent;
      const sql = state.storage.sql;
      const t = T0;
      i.now = () => t;
      sql.exec('INSERT INTO seen (id, at) VALUES (?, ?), (?, ?)', 'old-seen', (t - 4 * day) / 1000, 'new-seen', (t - 1 * day) / 1000);
      const run = (id: string, state_: string, published: number, finished: number | null) =>
        sql.exec(
          "INSERT INTO runs (id, client, session, wrapped, relay, state, published, started_at, finished_at) VALUES (?, 'c', 's', 0, 'ws://x/', ?, ?, 0, ?)",
          id,
          state_,
          published,
          finished,
        );
      run('old-done', 'done', 1, t - 8 * day);
      run('old-unpublished', 'done', 0, t - 8 * day);
      run('new-done', 'done', 1, t - 1 * day);
      run('new-unpublished', 'done', 0, t - 1 * day);
      sql.exec("INSERT INTO conversations (sender, session, turns, touched_at) VALUES ('a', 'old', 1, ?), ('a', 'new', 1, ?)", t - 31 * day, t - day);
      sql.exec("INSERT INTO history (sender, session, idx, turn, message, tokens) VALUES ('a', 'old', 0, 'r', '{}', 1), ('a', 'new', 0, 'r', '{}', 1)");
      i.prune();
      return {
        seen: sql.exec<{ id: string }>("SELECT id FROM seen WHERE id LIKE '%-seen'").toArray().map((r) => r.id),
        runs: sql.exec<{ id: string }>("SELECT id FROM runs WHERE id LIKE 'old-%' OR id LIKE 'new-%' ORDER BY id").toArray().map((r) => r.id),
        sessions: sql.exec<{ session: string }>('SELECT session FROM history').toArray().map((r) => r.session),
      };
    });
    expect(left).toEqual({ seen: ['new-seen'], runs: ['new-done', 'new-unpublished'], sessions: ['new'] });
  });
});

describe('retention work is bounded', () => {
  it('one prune deletes at most 500 rows of a table; the next alarm continues', async () => {
    const agent = await createTestAgent();
    const counts = await runInDurableObject(stubOf(agent), (instance, state) => {
      const i = instance as Agent;
      const sql = state.storage.sql;
      i.now = () => T0;
      for (let n = 0; n < 600; n++) sql.exec('INSERT INTO seen (id, at) VALUES (?, ?)', `old-${n}`, T0 / 1000 - 10 * 86_400);
      const left = () => sql.exec<{ n: number }>("SELECT count(*) AS n FROM seen WHERE id LIKE 'old-%'").one().n;
      i.prune();
      const afterOne = left();
      i.prune();
      return [afterOne, left()];
    });
    expect(counts).toEqual([100, 0]);
  });
});

describe('runs that cannot be lost', () => {
  it('deleting an agent during a run ends the run with one UNAUTHORIZED terminal first (the agent was removed, not CANCELLED)', async () => {
    const agent = await createTestAgent({ provider: 'openai', models: ['fake-slow'] });
    const c = await NipXxClient.open(agent);
    const p = c.prompt({ ver: 1, message: 'long', model: 'fake-slow' });
    await c.send(p);
    await c.sock.next((f) => f[0] === 'EVENT', 8000);
    const del = await api(TEST_OWNER_SK, 'DELETE', `/api/agents/${agent}`);
    expect(del.status).toBeLessThan(300);
    const run = await c.collect(p.id);
    expect(run.terminal.payload).toMatchObject({ code: 'UNAUTHORIZED', message: 'this agent was removed from this deployment' });
  });

  it('a provider dying mid-stream (connection reset) ends with exactly one MODEL_UNAVAILABLE', async () => {
    const agent = await createTestAgent({ provider: 'openai', models: ['fake-reset'] });
    const c = await NipXxClient.open(agent);
    const p = c.prompt({ ver: 1, message: 'hi' });
    await c.send(p);
    const run = await c.collect(p.id);
    expect(run.terminal.payload).toMatchObject({ code: 'MODEL_UNAVAILABLE', message: PROVIDER_MESSAGES.unavailable });
    expect(run.deltas.map((d) => d.seq)).toEqual(run.deltas.map((_, i) => i));
    const status = await runInDurableObject(stubOf(agent), (_i, state) => state.storage.sql.exec('SELECT state, outcome, published FROM runs WHERE id = ?', p.id).toArray());
    expect(status).toEqual([{ state: 'done', outcome: 'MODEL_UNAVAILABLE', published: 1 }]);
    expect(await c.noTerminal(p.id)).toBe(true);
  });

  // The first prompt after a wake or a deploy awaits the owner's account before its run row exists
  // (`owner` cleared): a cancel sent with it came before the row and was lost. The control: known.
  it.each([
    ['while its prompt waits for the owner’s account (first prompt after a wake)', true],
    ['with the owner’s account known', false],
  ])('a cancel sent with its prompt, %s, ends the run with one CANCELLED', { timeout: 30_000 }, async (_when, unknownOwner) => {
    const agent = await createTestAgent({ provider: 'openai', models: ['gpt-test', 'fake-slow'] });
    const c = await NipXxClient.open(agent);
    const warm = c.prompt({ ver: 1, message: 'warm', model: 'gpt-test' });
    await c.send(warm);
    expect((await c.collect(warm.id)).terminal.kind).toBe(25803);
    if (unknownOwner) await runInDurableObject(stubOf(agent), (i) => void ((i as unknown as { owner: unknown }).owner = undefined));
    const p = c.prompt({ ver: 1, message: 'long', model: 'fake-slow' });
    await Promise.all([c.send(p), c.send(c.cancel(p.id))]);
    const run = await c.collect(p.id, 20_000);
    expect(run.terminal.payload).toMatchObject({ code: 'CANCELLED', message: 'run cancelled' });
    expect(await runRows(agent)).toContain(p.id);
    expect(await c.noTerminal(p.id)).toBe(true);
  });

  it('a cancel from another key, sent before the prompt, does not cancel it', { timeout: 30_000 }, async () => {
    const agent = await createTestAgent();
    const c = await NipXxClient.open(agent);
    const other = await NipXxClient.open(agent);
    const warm = c.prompt({ ver: 1, message: 'warm' });
    await c.send(warm);
    expect((await c.collect(warm.id)).terminal.kind).toBe(25803);
    await runInDurableObject(stubOf(agent), (i) => void ((i as unknown as { owner: unknown }).owner = undefined));
    const p = c.prompt({ ver: 1, message: 'mine' });
    await other.send(other.cancel(p.id));
    await c.send(p);
    expect((await c.collect(p.id)).terminal.payload).toMatchObject({ text: 'echo: mine' });
  });

  it('one prompt delivered through two relays (owner shard and public shard) makes one run and one terminal', async () => {
    const agent = await createTestAgent();
    const owner = await NipXxClient.open(agent);
    const pub = await NipXxClient.open(agent, owner.k, '/');
    const p = owner.prompt({ ver: 1, message: 'twice' });
    await Promise.all([owner.send(p), pub.send(p)]);
    const isTerminalOf = (id: string) => (f: unknown[]) =>
      f[0] === 'EVENT' && [25803, 25805].includes((f[2] as { kind: number }).kind) && (f[2] as { tags: string[][] }).tags.some((t) => t[0] === 'e' && t[1] === id);
    // Sentinels through each relay, answered after both copies of p were handled; frames of p stay unread.
    for (const c of [owner, pub]) {
      const s = c.prompt({ ver: 1, message: 'sentinel' });
      await c.send(s);
      await c.sock.next(isTerminalOf(s.id), 10_000);
    }
    expect(await runRows(agent)).toContain(p.id);
    const terminals = [owner, pub].flatMap((c) => c.sock.frames.filter(isTerminalOf(p.id)));
    expect(terminals).toHaveLength(1);
  });
});

describe('a terminal event a relay refuses for good', () => {
  it('a client that asked to vanish (NIP-62) gets its gift-wrapped answer refused (blocked:) once: the watchdog does not send it again, and the run is pruned', async () => {
    const agent = await createTestAgent();
    const k = keys();
    const c = await NipXxClient.open(agent, k, '/');
    // Ahead of now: every gift wrap addressed to k (their created_at is backdated at random) is refused.
    const vanish = sign(k, { kind: 62, content: '', tags: [['relay', ALL_RELAYS]], created_at: now() + 600 });
    expect((await c.sock.publish(vanish))[2]).toBe(true);
    // Watches what the agent publishes (the real client and relay answer; nothing is replaced).
    const publish = vi.spyOn(RelayClient.prototype, 'publish');
    try {
      const toK = () =>
        publish.mock.calls.flatMap(([e], i) => (e.kind === 1059 && e.tags.some((t) => t[0] === 'p' && t[1] === k.pk) ? [i] : []));
      const { wrap, rumorId } = c.wrappedPrompt({ ver: 1, message: 'answer me' });
      await c.send(wrap);
      for (let i = 0; i < 200 && toK().length === 0; i++) await new Promise((r) => setTimeout(r, 50));
      const first = toK()[0]!;
      expect(await publish.mock.results[first]!.value).toEqual({ ok: false, message: 'blocked: this pubkey asked to vanish from this relay (NIP-62)' });
      const stub = stubOf(agent);
      for (let n = 0; n < 3; n++) expect(await runDurableObjectAlarm(stub)).toBe(true);
      expect(toK()).toEqual([first]);
      const row = () => runInDurableObject(stub, (_i, state) => state.storage.sql.exec('SELECT state, published, refused FROM runs WHERE id = ?', rumorId).toArray());
      expect(await row()).toEqual([{ state: 'done', published: 0, refused: 'blocked: this pubkey asked to vanish from this relay (NIP-62)' }]);
      // Eight days later the watchdog's retention removes it like any finished run.
      await runInDurableObject(stub, (i) => void ((i as Agent).now = () => Date.now() + 8 * 86_400_000));
      expect(await runDurableObjectAlarm(stub)).toBe(true);
      expect(await row()).toEqual([]);
    } finally {
      publish.mockRestore();
    }
  });
});

describe('terminal events the relay did not take', () => {
  it(`the watchdog sends again at most ${RESEND_BATCH} per alarm, the newest, and none of a run finished over a day ago`, async () => {
    const agent = await createTestAgent();
    const c = await NipXxClient.open(agent, keys(), '/');
    const p = c.prompt({ ver: 1, message: 'hello' });
    await c.send(p);
    await c.collect(p.id);
    const stub = stubOf(agent);
    // Runs whose terminal events a relay never took (any valid event stands for one), on the relay the real run used.
    const writer = keys();
    const t = Date.now();
    const recent = Array.from({ length: 25 }, (_, n) => ({ id: `recent-${n}`, finished: t - n * 1000, event: sign(writer, { content: `recent ${n}` }) }));
    const old = Array.from({ length: 5 }, (_, n) => ({ id: `old-${n}`, finished: t - RESEND_WINDOW_MS - 1000 - n, event: sign(writer, { content: `old ${n}` }) }));
    await runInDurableObject(stub, (_i, state) => {
      const relay = state.storage.sql.exec<{ relay: string }>('SELECT relay FROM runs WHERE id = ?', p.id).one().relay;
      for (const r of [...recent, ...old]) {
        state.storage.sql.exec(
          "INSERT INTO runs (id, client, session, wrapped, relay, state, terminal, published, started_at, finished_at) VALUES (?, ?, 's', 0, ?, 'done', ?, 0, ?, ?)",
          r.id,
          writer.pk,
          relay,
          JSON.stringify(r.event),
          r.finished,
          r.finished,
        );
      }
    });
    const publish = vi.spyOn(RelayClient.prototype, 'publish'); // watches; the real client and relay answer
    try {
      expect(await runDurableObjectAlarm(stub)).toBe(true);
      const sent = new Set(publish.mock.calls.map(([e]) => e.id));
      expect(recent.slice(0, RESEND_BATCH).every((r) => sent.has(r.event.id))).toBe(true);
      expect([...recent.slice(RESEND_BATCH), ...old].filter((r) => sent.has(r.event.id))).toEqual([]);
    } finally {
      publish.mockRestore();
    }
    // The relay took them: the next alarm sends the rest of the recent ones, never the old.
    const published = () =>
      runInDurableObject(stub, (_i, state) => {
        const n = (prefix: string) => state.storage.sql.exec<{ n: number }>('SELECT count(*) AS n FROM runs WHERE published = 1 AND id LIKE ?', `${prefix}-%`).one().n;
        return { recent: n('recent'), old: n('old') };
      });
    expect(await published()).toEqual({ recent: RESEND_BATCH, old: 0 });
    expect(await runDurableObjectAlarm(stub)).toBe(true);
    expect(await published()).toEqual({ recent: recent.length, old: 0 });
  });
});

/** Waits (without consuming frames) until the client has received some event. */
async function untilSomeEvent(c: NipXxClient, timeoutMs = 10_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!c.sock.frames.some((f) => f[0] === 'EVENT')) {
    if (Date.now() > deadline) throw new Error('no event arrived');
    await new Promise((r) => setTimeout(r, 20));
  }
}

describe('faults during a run', () => {
  it('the relay connection drops mid-run: the run completes, every delta arrives (seq without gaps), one terminal', { timeout: 60_000 }, async () => {
    const agent = await createTestAgent({ provider: 'openai', models: ['fake-slow'] });
    const c = await NipXxClient.open(agent);
    const p = c.prompt({ ver: 1, message: 'long', model: 'fake-slow' });
    await c.send(p);
    await untilSomeEvent(c);
    const dropped = await dropAgentConnections(agent);
    expect(dropped).toBe(1);
    const run = await c.collect(p.id, 45_000);
    const text = Array.from({ length: 50 }, (_, i) => `tick ${i} `).join('');
    expect(run.terminal.payload).toMatchObject({ text });
    expect(run.deltas.map((d) => d.seq)).toEqual(run.deltas.map((_, i) => i));
    expect(run.deltas.map((d) => d.text).join('')).toBe(text);
    expect(await c.noTerminal(p.id)).toBe(true);
  });

  it('the Agent DO restarts mid-run: exactly one INTERNAL_ERROR, stored and published', { timeout: 60_000 }, async () => {
    const agent = await createTestAgent({ provider: 'openai', models: ['fake-slow'] });
    const c = await NipXxClient.open(agent);
    const p = c.prompt({ ver: 1, message: 'long', model: 'fake-slow' });
    await c.send(p);
    await untilSomeEvent(c);
    // abort() resets the object as a crash or an eviction would: in-memory state is gone, storage stays.
    await runInDurableObject(stubOf(agent), (_i, state) => state.abort('simulated restart')).catch(() => undefined);
    const stub = stubOf(agent);
    await runDurableObjectAlarm(stub);
    const run = await c.collect(p.id, 20_000);
    expect(run.terminal.payload).toMatchObject({ code: 'INTERNAL_ERROR', message: 'the agent restarted during this run; please retry' });
    const row = await runInDurableObject(stub, (_i, state) => state.storage.sql.exec('SELECT state, outcome, published FROM runs WHERE id = ?', p.id).toArray());
    expect(row).toEqual([{ state: 'done', outcome: 'INTERNAL_ERROR', published: 1 }]);
    await runDurableObjectAlarm(stub);
    expect(await c.noTerminal(p.id)).toBe(true);
  });
});

describe('the owner sees what the client is not told', () => {
  it('the provider’s error text reaches the owner in session_resolved (NIP-AO), not the client', async () => {
    const agent = await createTestAgent({ provider: 'openai', models: ['fake-error'] });
    const owner = ownerRelayClient();
    await owner.connect();
    await owner.authenticate();
    const frames: ObservedFrame[] = [];
    const observer = new Observer({
      ownerSecretKey: TEST_OWNER_SK,
      agents: [agent],
      subscribe: (filters, opts) => owner.subscribe(filters, opts),
      publish: (e) => owner.publish(e),
      onFrame: (f) => frames.push(f),
      onRejected: () => undefined,
    });
    observer.start();
    await new Promise((r) => setTimeout(r, 100));
    const c = await NipXxClient.open(agent);
    const p = c.prompt({ ver: 1, message: 'hi' });
    await c.send(p);
    expect((await c.collect(p.id)).terminal.payload['message']).toBe(PROVIDER_MESSAGES.unavailable);
    const deadline = Date.now() + 8000;
    while (!frames.some((f) => f.frame.kind === 'session_resolved') && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
    const resolved = frames.find((f) => f.frame.kind === 'session_resolved')?.frame.payload as Record<string, unknown> | undefined;
    expect(resolved).toMatchObject({ run_id: p.id, outcome: 'MODEL_UNAVAILABLE' });
    expect(String(resolved?.['detail'])).toContain('server had an error');
    observer.stop();
    owner.close();
  });
});
