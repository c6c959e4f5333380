// Hosted agents against real provider wire formats (the fake OpenAI / Anthropic server): streaming,
// multi-turn history, the tool loop, provider failures mapped to NIP-XX codes (an account out of
// credit refused, not rate limited), cancellation racing the response, and the owner watching the
// run live over NIP-AO and cancelling it with a control frame.
import { env, runInDurableObject } from 'cloudflare:test';
import { inject } from 'vitest';
import { afterEach, describe, expect, it } from 'vitest';
import type { RelayClient } from '../../src/shared/relay-client.js';
import { Observer, type ObservedFrame } from '../../src/shared/ao-observer.js';
import { MANY_TOOL_CALLS } from '../fake-provider/big-outputs.js';
import { QUOTA_MESSAGES } from '../fake-provider/quota.js';
import { NO_CREDIT } from '../../workers/agent/providers/http.js';
import { PROVIDER_MESSAGES } from '../../workers/agent/runtime.js';
import { NipXxClient, createTestAgent, ownerRelayClient, watchRunsEnded } from './agent-helpers.js';
import { keys } from './helpers.js';
import { TEST_OWNER_SK } from './test-keys.js';

const fake = inject('fakeProviderUrl');

async function recorded(marker: string): Promise<Array<{ body: { messages?: Array<{ role: string; content: unknown }> } }>> {
  const res = await fetch(`${fake}/_requests?contains=${encodeURIComponent(marker)}`);
  return (await res.json()) as Array<{ body: { messages?: Array<{ role: string; content: unknown }> } }>;
}

describe.each(['openai', 'anthropic'] as const)('agent with the %s provider', (provider) => {
  const model = provider === 'openai' ? 'gpt-test' : 'claude-test';
  const agentWith = (body: object = {}) => createTestAgent({ provider, models: [model, 'fake-429', 'fake-quota', 'fake-overloaded', 'fake-error', 'fake-truncated', 'fake-empty', 'fake-401', 'fake-slow'], ...body });

  it('streams a full run with usage', async () => {
    const c = await NipXxClient.open(await agentWith());
    const p = c.prompt({ ver: 1, message: 'scenario:text tell me' });
    await c.send(p);
    const run = await c.collect(p.id);
    expect(run.terminal.payload).toMatchObject({ text: 'Hello from the fake provider ✓' });
    const usage = run.terminal.payload['usage'] as { input_tokens: number; output_tokens: number };
    expect(usage.input_tokens).toBeGreaterThan(0);
    expect(usage.output_tokens).toBeGreaterThan(0);
    expect(run.deltas.map((d) => d.seq)).toEqual(run.deltas.map((_, i) => i));
    expect(run.deltas.map((d) => d.text).join('')).toBe('Hello from the fake provider ✓');
  });

  it('keeps a multi-turn session: the second request carries the first exchange', async () => {
    const c = await NipXxClient.open(await agentWith({ system_prompt: 'You are terse.' }));
    const marker = `m${Math.random().toString(36).slice(2)}`;
    const p1 = c.prompt({ ver: 1, message: `scenario:text first ${marker}` }, { session: `session:${marker}` });
    await c.send(p1);
    await c.collect(p1.id);
    const p2 = c.prompt({ ver: 1, message: `scenario:text second ${marker}` }, { session: `session:${marker}` });
    await c.send(p2);
    await c.collect(p2.id);
    const reqs = await recorded(`second ${marker}`);
    const text = JSON.stringify(reqs[0]!.body);
    expect(text).toContain(`first ${marker}`);
    expect(text).toContain('Hello from the fake provider');
    expect(text).toContain('You are terse.');
  });

  it('runs a tool loop: the model calls calculator, the result goes back, the answer uses it', async () => {
    const c = await NipXxClient.open(await agentWith({ tools: ['calculator'] }));
    const p = c.prompt({ ver: 1, message: 'scenario:tool compute' });
    await c.send(p);
    const run = await c.collect(p.id);
    expect(run.tools.map((t) => [t['name'], t['phase']])).toEqual([
      ['calculator', 'start'],
      ['calculator', 'result'],
    ]);
    expect(run.tools[0]!['arguments']).toEqual({ city: 'Paris' });
    // The fake model passes arguments the calculator does not take: the error is fed back to it.
    expect(run.tools[1]).toMatchObject({ success: false });
    expect(String(run.terminal.payload['text'])).toMatch(/Tool result: error: /);
  });

  it(`one response asking for ${MANY_TOOL_CALLS} tool calls: the first max_tool_calls_per_step (16) run, the others are not run and the model is told so; the run completes`, async () => {
    const c = await NipXxClient.open(await agentWith({ tools: ['calculator'] }));
    const p = c.prompt({ ver: 1, message: 'scenario:many-tools compute' });
    await c.send(p);
    const run = await c.collect(p.id, 20_000);
    expect(run.terminal.kind).toBe(25803);
    // 16 calls ran, in order (a start and a result each); the skipped ones have no 25804
    const starts = run.tools.filter((t) => t['phase'] === 'start');
    const results = run.tools.filter((t) => t['phase'] === 'result');
    expect(starts.map((t) => t['arguments'])).toEqual(Array.from({ length: 16 }, (_, i) => ({ expr: `${i} + 1` })));
    expect(results.map((t) => [t['name'], t['success']])).toEqual(Array(16).fill(['calculator', true]));
    // the status names the calls that run
    expect(run.status.find((st) => st['state'] === 'tool_use')?.['info']).toBe(Array(16).fill('calculator').join(', '));
    // the model got an answer for every call: 16 results, then 24 refusals
    const told = [...Array.from({ length: 16 }, (_, i) => String(i + 1)), ...Array(MANY_TOOL_CALLS - 16).fill('error: not run: at most 16 tool calls per step')];
    expect(String(run.terminal.payload['text']).replace(/^Let me check\./, '')).toBe(`Tool result: ${told.join(' | ')}`); // Anthropic's text before the calls
  });

  it.each([
    ['fake-429', { code: 'RATE_LIMIT', retry_after: 7 }],
    ['fake-overloaded', { code: 'MODEL_UNAVAILABLE' }],
    ['fake-error', { code: 'MODEL_UNAVAILABLE' }],
    ['fake-truncated', { code: 'MODEL_UNAVAILABLE', message: 'the model provider is unavailable; retry later' }],
    ['fake-401', { code: 'MODEL_UNAVAILABLE' }],
    ['fake-empty', { code: 'EMPTY_RESPONSE', message: 'the model produced no text' }],
  ])('%s → %o', async (m, expected) => {
    const c = await NipXxClient.open(await agentWith());
    const p = c.prompt({ ver: 1, message: 'hi', model: m });
    await c.send(p);
    const run = await c.collect(p.id);
    expect(run.terminal.kind).toBe(25805);
    expect(run.terminal.payload).toMatchObject(expected);
    expect(await c.noTerminal(p.id, 200)).toBe(true);
  });

  it('an account out of credit (OpenAI 429 insufficient_quota, Anthropic 400 credit balance too low): MODEL_UNAVAILABLE without retry_after, not RATE_LIMIT; the owner reads that it is billing', async () => {
    const agent = await agentWith();
    const watch = await watchRunsEnded([agent]);
    const c = await NipXxClient.open(agent);
    const p = c.prompt({ ver: 1, message: 'hi', model: 'fake-quota' });
    await c.send(p);
    const run = await c.collect(p.id);
    expect(run.terminal.kind).toBe(25805);
    expect(run.terminal.payload).toMatchObject({ code: 'MODEL_UNAVAILABLE', message: PROVIDER_MESSAGES.rejected });
    expect(run.terminal.payload['retry_after']).toBeUndefined();
    await watch.until(1);
    const resolved = watch.resolved[0];
    const status = provider === 'openai' ? 429 : 400;
    expect(resolved).toMatchObject({ run_id: p.id, outcome: 'MODEL_UNAVAILABLE' });
    expect(String(resolved?.['detail'])).toBe(`${NO_CREDIT}: HTTP ${status}: ${QUOTA_MESSAGES[provider]}`);
    watch.stop();
  });

  it('a cancel racing the response ends the run with exactly one CANCELLED', async () => {
    const c = await NipXxClient.open(await agentWith());
    const p = c.prompt({ ver: 1, message: 'long please', model: 'fake-slow' });
    await c.send(p);
    await c.sock.next((f) => f[0] === 'EVENT' && (f[2] as { kind: number }).kind === 25801, 5000);
    await c.send(c.cancel(p.id));
    await c.send(c.cancel(p.id)); // duplicates are idempotent
    const run = await c.collect(p.id);
    expect(run.terminal.payload).toMatchObject({ code: 'CANCELLED', message: 'run cancelled' });
    await c.send(c.cancel(p.id)); // a cancel for a finished run is ignored
    expect(await c.noTerminal(p.id, 500)).toBe(true);
  });
});

describe('a cancel from someone else, or for an unknown run', () => {
  it('is ignored', async () => {
    const agent = await createTestAgent({ provider: 'openai', models: ['fake-slow'] });
    const c = await NipXxClient.open(agent);
    const p = c.prompt({ ver: 1, message: 'long', model: 'fake-slow' });
    await c.send(p);
    await c.sock.next((f) => f[0] === 'EVENT' && (f[2] as { kind: number }).kind === 25801, 5000);
    const other = await NipXxClient.open(agent, keys());
    await other.send(other.cancel(p.id));
    await other.send(other.cancel('a'.repeat(64)));
    // The run goes on: more deltas arrive after the foreign cancel.
    await c.sock.next((f) => f[0] === 'EVENT' && (f[2] as { kind: number }).kind === 25801, 5000);
    await c.send(c.cancel(p.id));
    expect((await c.collect(p.id)).terminal.payload).toMatchObject({ code: 'CANCELLED' });
  });
});

describe('the owner watches a run live (NIP-AO) and cancels it with a control frame', () => {
  const clients: RelayClient[] = [];
  afterEach(() => {
    for (const c of clients.splice(0)) c.close();
  });

  it('sees turn_started, acp_write, acp_read; cancel_turn ends the run with CANCELLED', async () => {
    const agent = await createTestAgent({ provider: 'openai', models: ['fake-slow'] });
    const owner = ownerRelayClient();
    clients.push(owner);
    await owner.connect();
    await owner.authenticate();
    const frames: ObservedFrame[] = [];
    const rejected: string[] = [];
    const observer = new Observer({
      ownerSecretKey: TEST_OWNER_SK,
      agents: [agent],
      subscribe: (filters, opts) => owner.subscribe(filters, opts),
      publish: (e) => owner.publish(e),
      onFrame: (f) => frames.push(f),
      onRejected: (r) => rejected.push(r),
    });
    observer.start();
    await new Promise((r) => setTimeout(r, 100));

    const c = await NipXxClient.open(agent);
    const p = c.prompt({ ver: 1, message: 'watch me', model: 'fake-slow' });
    await c.send(p);
    const deadline = Date.now() + 6000;
    while (!frames.some((f) => f.frame.kind === 'acp_read') && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
    const kinds = frames.map((f) => f.frame.kind);
    expect(kinds[0]).toBe('turn_started');
    expect(kinds).toContain('acp_write');
    expect(kinds).toContain('acp_read');
    const write = frames.find((f) => f.frame.kind === 'acp_write')!;
    expect(write.frame).toMatchObject({ channelId: p.id, turnId: p.id, sessionId: `sender:${c.k.pk}` });
    expect(JSON.stringify(write.frame.payload)).toContain('watch me');
    expect(frames.every((f) => f.agent === agent)).toBe(true);

    const sent = await observer.cancelTurn(agent, p.id);
    expect(sent.ok).toBe(true);
    const run = await c.collect(p.id);
    expect(run.terminal.payload).toMatchObject({ code: 'CANCELLED' });
    while (!frames.some((f) => f.frame.kind === 'session_resolved') && Date.now() < deadline + 3000) await new Promise((r) => setTimeout(r, 50));
    expect(frames.find((f) => f.frame.kind === 'session_resolved')?.frame.payload).toMatchObject({ run_id: p.id, outcome: 'CANCELLED' });
    expect(rejected).toEqual([]);
    observer.stop();
  });
});

describe('an owner’s cancel_turn that arrives before its run', () => {
  it('is kept for the prompt (as a sender’s early cancel): the run ends CANCELLED when it comes', { timeout: 30_000 }, async () => {
    const agent = await createTestAgent({ provider: 'openai', models: ['fake-slow'] });
    const owner = ownerRelayClient();
    await owner.connect();
    await owner.authenticate();
    const observer = new Observer({
      ownerSecretKey: TEST_OWNER_SK,
      agents: [agent],
      subscribe: (filters, opts) => owner.subscribe(filters, opts),
      publish: (e) => owner.publish(e),
      onFrame: () => undefined,
    });
    observer.start();
    const c = await NipXxClient.open(agent);
    const p = c.prompt({ ver: 1, message: 'cancelled before it came', model: 'fake-slow' });
    // The owner cancels the turn (its id known, e.g. from another of its clients) before the prompt reaches the agent.
    // The prompt goes once the agent holds the cancel. A control frame is live only: one sent before the
    // new agent's subscription on the owner's shard is up is lost, so it is sent again until held.
    const held = () =>
      runInDurableObject(env.AGENT.get(env.AGENT.idFromName(agent)), (a) =>
        (a as unknown as { earlyCancels: { pending: { has(key: string): boolean } } }).earlyCancels.pending.has(`${p.id} *owner`),
      );
    for (let i = 0; i < 20 && !(await held()); i++) {
      expect((await observer.cancelTurn(agent, p.id)).ok).toBe(true);
      for (let j = 0; j < 5 && !(await held()); j++) await new Promise((r) => setTimeout(r, 100));
    }
    expect(await held()).toBe(true);
    await c.send(p);
    expect((await c.collect(p.id, 20_000)).terminal.payload).toMatchObject({ code: 'CANCELLED' });
    observer.stop();
    owner.close();
  });
});

describe('the prompt’s thinking level is capped by the owner’s', () => {
  type Sent = { body: { max_tokens?: number; thinking?: { budget_tokens: number }; reasoning_effort?: string } };
  /** The provider request of a prompt asking for `thinking`, to an agent created with `body`. */
  async function sent(body: object, thinking: string): Promise<Sent['body']> {
    const c = await NipXxClient.open(await createTestAgent(body));
    const marker = `t${Math.random().toString(36).slice(2)}`;
    const p = c.prompt({ ver: 1, message: `scenario:text ${marker}`, thinking });
    await c.send(p);
    expect((await c.collect(p.id)).terminal.kind).toBe(25803);
    const reqs = (await (await fetch(`${fake}/_requests?contains=${marker}`)).json()) as Sent[];
    expect(reqs).toHaveLength(1);
    return reqs[0]!.body;
  }
  const anthropic = { provider: 'anthropic', models: ['claude-test'] };
  const openai = { provider: 'openai', models: ['gpt-test'] };

  it('no thinking configured: a prompt asking for "max" gets none, and max_tokens stays the owner’s', async () => {
    const body = await sent({ ...anthropic, limits: { max_output_tokens: 512 } }, 'max');
    expect(body.max_tokens).toBeLessThanOrEqual(512);
    expect(body.thinking).toBeUndefined();
    expect((await sent(openai, 'max')).reasoning_effort).toBeUndefined();
  });

  it('"high" configured: a prompt asking for "max" gets "high", one asking for "low" gets "low"', async () => {
    const config = { ...anthropic, thinking: 'high', limits: { max_output_tokens: 512 } };
    expect(await sent(config, 'max')).toMatchObject({ thinking: { budget_tokens: 16384 }, max_tokens: 16384 + 512 });
    expect(await sent(config, 'low')).toMatchObject({ thinking: { budget_tokens: 1024 }, max_tokens: 1024 + 512 });
    expect((await sent({ ...openai, thinking: 'medium' }, 'high')).reasoning_effort).toBe('medium');
  });
});
