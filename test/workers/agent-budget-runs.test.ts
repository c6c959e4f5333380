// What a run costs is counted whatever its output or its end: a tool result larger than one NIP-44
// message (web_fetch returns up to 256 KiB) no longer crashes the run before its tokens are counted;
// the 25804 event carries a cut and marked copy (the model reads the whole result), a response text
// that does not fit one message is cut and marked in the 25803 (the deltas carry all of it), and
// the tokens of every model call reach the agent's daily budget and the owner's meter (run_usage),
// also for a run that fails after a model call; a call whose stream ends without its usage report
// (cut mid-way, cancelled, or a server that sends none) is counted by estimate, marked estimated: a
// call cut off at least the output allowance it held and what it received (tool calls the provider
// kept unemitted too). The echo model counts as the runtime estimates (4 bytes per token), a page it
// echoes too. A model call whose input (tool results included) would pass the budget is not made,
// and a restart of the agent during a run loses none of what it spent.
import { env, runDurableObjectAlarm, runInDurableObject } from 'cloudflare:test';
import { describe, expect, inject, it } from 'vitest';
import { MAX_PLAINTEXT_BYTES } from '../../src/shared/nip44.js';
import { TOOL_OUTPUT_MAX_BYTES } from '../../workers/agent/event-fit.js';
import { HANGING_ARGUMENTS } from '../fake-provider/big-outputs.js';
import { NipXxClient, createTestAgent, watchRunsEnded, type RunEvents } from './agent-helpers.js';
import { TEST_OWNER, TEST_OWNER_SK } from './test-keys.js';

const stubOf = (agent: string) => env.AGENT.get(env.AGENT.idFromName(agent));
/** The agent's model tokens of today (its max_tokens_per_day budget). */
const tokensToday = (agent: string) =>
  runInDurableObject(stubOf(agent), (_i, state) => state.storage.sql.exec<{ tokens: number }>('SELECT tokens FROM token_usage').toArray()[0]?.tokens ?? 0);
/** The run's metering row (what is reported to the owner's plan). */
const meterOf = async (agent: string, runId: string) => (await stubOf(agent).usage()).find((r) => r.run_id === runId);

/** 64 printable ASCII bytes, as the fixture's /big repeats them. */
const PATTERN = '0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ+/';
const BIG = 100_000;
const body = PATTERN.repeat(Math.ceil(BIG / PATTERN.length)).slice(0, BIG);
const utf8 = (s: string) => new TextEncoder().encode(s).length;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
/** The fake provider's records of the requests whose body holds `marker`. */
const sentTo = async (marker: string) => (await (await fetch(`${inject('fakeProviderUrl')}/_requests?contains=${marker}`)).json()) as Array<{ hangingAt?: number }>;
/** The agents' owner: a refusal at admission tells it the figures (the budget, what a prompt asks), a stranger none (told-to.ts). */
const OWNER = { sk: TEST_OWNER_SK, pk: TEST_OWNER };
const MESSAGE = 'this agent reached its model budget for today (UTC)';

/**
 * The owner's NIP-AO `session_resolved` frames of `agent`'s runs while `fn` runs: where a run ended
 * by a limit tells the figures (its `detail`), whoever the client.
 */
async function resolvedFrames(agent: string, fn: () => Promise<void>): Promise<Array<Record<string, unknown>>> {
  const watch = await watchRunsEnded([agent]);
  await fn();
  await watch.until(1);
  watch.stop();
  return watch.resolved;
}

/** An echo agent that fetches and answers with the whole page: its ~25,000 tokens fit max_output_tokens. */
async function bigFetchAgent(): Promise<string> {
  return createTestAgent({ tools: ['web_fetch'], web_fetch_hosts: ['127.0.0.1'], limits: { max_output_tokens: 30_000 } });
}
const bigFetch = () => ({ ver: 1, message: `/tool web_fetch {"url":"${inject('toolsFixtureUrl')}/big?n=${BIG}"}` });
/** What echo's tool call for `/tool <name> <args>` costs: its name and arguments at 4 bytes per token. */
const toolCallTokens = (message: string) => {
  const [, name, args] = /^\/tool (\S+) (.*)$/.exec(message)!;
  return Math.ceil(utf8(name! + args!) / 4);
};

function expectCutRun(run: RunEvents, toolRoom: number): void {
  expect(run.terminal.kind).toBe(25803);
  const result = run.tools.find((t) => t['phase'] === 'result')!;
  expect(result).toMatchObject({ name: 'web_fetch', phase: 'result', success: true, truncated: true, original_bytes: { stdout: BIG } });
  const output = result['output'] as { stdout: string; stderr: string; exit_code: number };
  expect(output).toMatchObject({ stderr: 'HTTP 200', exit_code: 0 });
  expect(body.startsWith(output.stdout)).toBe(true);
  expect(output.stdout.length).toBeGreaterThan(toolRoom / 2);
  expect(utf8(JSON.stringify(output))).toBeLessThanOrEqual(toolRoom);
  // The model read the whole result (echo answers with it), streamed whole in the deltas; the
  // response is cut to fit one NIP-44 message, and says so.
  const full = `${body}\nstderr: HTTP 200`;
  expect(run.deltas.map((d) => d.text).join('')).toBe(full);
  expect(run.deltas.map((d) => d.seq)).toEqual(run.deltas.map((_, i) => i));
  const payload = run.terminal.payload;
  expect(payload).toMatchObject({ truncated: true, original_bytes: utf8(full) });
  const text = payload['text'] as string;
  const [shown, note] = text.split('\n\n[');
  expect(body.startsWith(shown!)).toBe(true);
  expect(shown!.length).toBeGreaterThan(20_000);
  expect(note).toMatch(/^response cut to fit one NIP-44 message: the first \d+ of \d+ bytes; the deltas carried all of it\]$/);
  expect(utf8(JSON.stringify(payload))).toBeLessThanOrEqual(MAX_PLAINTEXT_BYTES);
}

describe('a tool result larger than one NIP-44 message', () => {
  it('ends with a response; the 25804 result is cut to 32 KiB and marked; the day’s tokens are counted', async () => {
    const agent = await bigFetchAgent();
    const c = await NipXxClient.open(agent);
    const p = c.prompt(bigFetch());
    await c.send(p);
    const run = await c.collect(p.id, 15_000);
    expectCutRun(run, TOOL_OUTPUT_MAX_BYTES);
    const usage = run.terminal.payload['usage'] as { input_tokens: number; output_tokens: number };
    const spent = usage.input_tokens + usage.output_tokens;
    expect(spent).toBeGreaterThan(0);
    expect(await tokensToday(agent)).toBe(spent);
    expect(await meterOf(agent, p.id)).toMatchObject({ outcome: 'response', input_tokens: usage.input_tokens, output_tokens: usage.output_tokens, tool_calls: 1 });
  });

  it('gift-wrapped, each event is cut to what fits inside the seal and the wrap', async () => {
    const agent = await bigFetchAgent();
    const c = await NipXxClient.open(agent);
    const { wrap, rumorId } = c.wrappedPrompt(bigFetch());
    await c.send(wrap);
    const run = await c.collect(rumorId, 15_000);
    // The rumor's ciphertext is encrypted twice more (seal, wrap): about 28 KiB of payload fit.
    expectCutRun(run, 28 * 1024);
    expect(await tokensToday(agent)).toBeGreaterThan(0);
  });
});


describe('tokens of a model call whose stream ends without its usage report', () => {
  // What the agent meters when the provider never says: the prompt at 4 characters per token plus 4
  // per message (here one message of 24 characters: 6 + 4), the output streamed at 4 characters per
  // token, both rounded up (docs/AGENTS.md, "A run").
  const message = 'this call fails half way';
  const ESTIMATED_INPUT = 10;

  async function runOn(provider: 'openai' | 'anthropic', model: string) {
    const agent = await createTestAgent({ provider, models: [model] });
    const c = await NipXxClient.open(agent);
    const p = c.prompt({ ver: 1, message });
    await c.send(p);
    return { agent, c, p };
  }

  // The fake OpenAI stream sends two deltas ('Hello', ' from': 10 characters, 3 tokens), then the
  // connection drops (reset) or an error payload comes (error): OpenAI reports usage only in the
  // last chunk, so the provider never said what the call cost. A call cut off counts the output
  // allowance it held (max_output_tokens, 4,096: the day leaves more), as the provider bills what
  // it generated, streamed or not.
  const ALLOWANCE = 4096;
  for (const scenario of ['reset', 'error']) {
    it(`OpenAI, ${scenario} after two deltas: the estimate is counted and marked estimated`, async () => {
      const { agent, c, p } = await runOn('openai', `fake-${scenario}`);
      expect((await c.collect(p.id)).terminal.payload).toMatchObject({ code: 'MODEL_UNAVAILABLE' });
      expect(await meterOf(agent, p.id)).toMatchObject({ outcome: 'MODEL_UNAVAILABLE', input_tokens: ESTIMATED_INPUT, output_tokens: ALLOWANCE, estimated: true });
      expect(await tokensToday(agent)).toBe(ESTIMATED_INPUT + ALLOWANCE);
    });
  }

  it('Anthropic, failing after two deltas: the input message_start reported, the output estimated (it reported 1)', async () => {
    const { agent, c, p } = await runOn('anthropic', 'fake-error');
    expect((await c.collect(p.id)).terminal.payload).toMatchObject({ code: 'MODEL_UNAVAILABLE' });
    expect(await meterOf(agent, p.id)).toMatchObject({ outcome: 'MODEL_UNAVAILABLE', input_tokens: 21, output_tokens: ALLOWANCE, estimated: true });
    expect(await tokensToday(agent)).toBe(21 + ALLOWANCE);
  });

  it('OpenAI, cancelled by the client mid-stream: the output allowance the call held is counted (more than it streamed)', async () => {
    const { agent, c, p } = await runOn('openai', 'fake-slow');
    await c.sock.next((f) => f[0] === 'EVENT' && (f[2] as { kind: number }).kind === 25801, 5000);
    await c.send(c.cancel(p.id));
    expect((await c.collect(p.id)).terminal.payload).toMatchObject({ code: 'CANCELLED' });
    expect(await meterOf(agent, p.id)).toMatchObject({ outcome: 'CANCELLED', input_tokens: ESTIMATED_INPUT, output_tokens: ALLOWANCE, estimated: true });
    expect(await tokensToday(agent)).toBe(ESTIMATED_INPUT + ALLOWANCE);
  });

  // A model that reasons without streaming it (OpenAI's o-series, gpt-5), or writes a long tool
  // call (its arguments are kept until the call ends), is billed for output the agent never saw
  // when the call is cut off: args-hang streams one call's 40,000 characters of arguments without
  // a finish_reason, then hangs until the client cancels.
  const allowanceCases = [
    { held: 16_000, counted: 16_000, why: 'the output allowance it held (more than it received)' },
    { held: 1_000, counted: Math.ceil((utf8('get_weather') + utf8(HANGING_ARGUMENTS)) / 4), why: 'the tool call’s name and arguments it received, kept but never emitted (more than its allowance)' },
  ];
  for (const { held, counted, why } of allowanceCases) {
    it(`OpenAI, cancelled while the model writes a tool call (max_output_tokens ${held}): it counts ${why}, marked estimated`, { timeout: 30_000 }, async () => {
      const agent = await createTestAgent({ provider: 'openai', models: ['fake-args-hang'], limits: { max_output_tokens: held } });
      const c = await NipXxClient.open(agent);
      const marker = `hang${Math.random().toString(36).slice(2, 10)}`;
      const text = `think very hard ${marker}`;
      const p = c.prompt({ ver: 1, message: text });
      const resolved = await resolvedFrames(agent, async () => {
        await c.send(p);
        // the fake wrote all the fragments; the agent reads them in well under a second
        for (let i = 0; i < 100 && (await sentTo(marker))[0]?.hangingAt === undefined; i++) await sleep(100);
        expect((await sentTo(marker))[0]?.hangingAt).toBeDefined();
        await sleep(1500);
        await c.send(c.cancel(p.id));
        expect((await c.collect(p.id, 15_000)).terminal.payload).toMatchObject({ code: 'CANCELLED' });
      });
      const input = Math.ceil(utf8(text) / 4) + 4;
      expect(counted).toBeGreaterThanOrEqual(held);
      expect(await meterOf(agent, p.id)).toMatchObject({ outcome: 'CANCELLED', input_tokens: input, output_tokens: counted, estimated: true });
      expect(resolved[0]?.['usage']).toMatchObject({ input_tokens: input, output_tokens: counted, estimated: true });
      expect(await tokensToday(agent)).toBe(input + counted);
    });
  }

  it('a complete stream without usage (a server that ignores include_usage): the response’s usage is the estimate, marked', async () => {
    const { agent, c, p } = await runOn('openai', 'fake-no-usage');
    const run = await c.collect(p.id);
    // 'Hello from the fake provider ✓': 30 characters, 8 tokens
    expect(run.terminal.payload['usage']).toEqual({ input_tokens: ESTIMATED_INPUT, output_tokens: 8, estimated: true });
    expect(await meterOf(agent, p.id)).toMatchObject({ outcome: 'response', input_tokens: ESTIMATED_INPUT, output_tokens: 8, estimated: true });
  });

  it('a complete stream with its usage is counted as reported, not estimated', async () => {
    const { agent, c, p } = await runOn('openai', 'gpt-test');
    const run = await c.collect(p.id);
    expect(run.terminal.payload['usage']).toEqual({ input_tokens: 21, output_tokens: 9 });
    expect(await meterOf(agent, p.id)).toMatchObject({ outcome: 'response', input_tokens: 21, output_tokens: 9, estimated: false });
  });
});

describe('the echo model', () => {
  it('counts its input and output at 4 bytes of UTF-8 per token, the tool result it echoes too: a 100,000-byte page without spaces is about 25,000 tokens each way', { timeout: 30_000 }, async () => {
    const agent = await createTestAgent({ tools: ['web_fetch'], web_fetch_hosts: ['127.0.0.1'], limits: { max_output_tokens: 30_000 } });
    const c = await NipXxClient.open(agent);
    const p = c.prompt(bigFetch());
    await c.send(p);
    const run = await c.collect(p.id, 15_000);
    expect(run.terminal.kind).toBe(25803);
    const usage = run.terminal.payload['usage'] as { input_tokens: number; output_tokens: number };
    // the answer is the page and the web_fetch status line; the second call sent the page back
    expect(usage.output_tokens).toBeGreaterThanOrEqual(Math.ceil(utf8(`${body}\nstderr: HTTP 200`) / 4));
    expect(usage.input_tokens).toBeGreaterThanOrEqual(BIG / 4);
    expect(await tokensToday(agent)).toBe(usage.input_tokens + usage.output_tokens);
    expect(await meterOf(agent, p.id)).toMatchObject({ outcome: 'response', input_tokens: usage.input_tokens, output_tokens: usage.output_tokens, estimated: false });
  });
});

describe('the daily token budget inside a run', () => {
  it('is checked before every model call: a run that used the budget up stops with RATE_LIMIT before its next call, and only what was spent is counted', async () => {
    // The first call's input is 163 tokens by estimate (the message at 4 bytes per token plus 4, and
    // the calculator's definition): with its answer's room (max_output_tokens 16) it fits the
    // budget of 200. echo reports that estimate and its tool call's name and arguments (259 bytes):
    // 163 in and 65 out (echo's tool call ignores the output limit, as a real model's token count
    // can pass an estimate), the budget is then used.
    const agent = await createTestAgent({ tools: ['calculator'], limits: { max_tokens_per_day: 200, max_output_tokens: 16 } });
    const c = await NipXxClient.open(agent);
    const expr = Array.from({ length: 60 }, () => '1').join(' + ');
    const p = c.prompt({ ver: 1, message: `/tool calculator {"expr": "${expr}"}` });
    await c.send(p);
    const run = await c.collect(p.id);
    expect(run.tools.filter((t) => t['phase'] === 'result')).toHaveLength(1); // the call the first answer asked for ran
    // A stranger's run: the budget and its spend are not told (the owner's NIP-AO `detail` has them).
    expect(run.terminal.payload).toMatchObject({ code: 'RATE_LIMIT', message: MESSAGE });
    expect(run.terminal.payload['retry_after']).toBeGreaterThan(0);
    expect(await tokensToday(agent)).toBe(228);
    expect(await meterOf(agent, p.id)).toMatchObject({ outcome: 'RATE_LIMIT', input_tokens: 163, output_tokens: 65, tool_calls: 1 });
  });

  it('counts the input a model call is about to send: a call whose tool results would pass the budget is not made', async () => {
    // The first call (echo: its estimated input in, its tool call's name and arguments out) asks for a
    // 100,000-character page; the second call would send it (about 25,000 tokens at 4 characters per
    // token), over the 20,000 of the day.
    const agent = await createTestAgent({ tools: ['web_fetch'], web_fetch_hosts: ['127.0.0.1'], limits: { max_tokens_per_day: 20_000 } });
    const c = await NipXxClient.open(agent);
    const p = c.prompt(bigFetch());
    let run: RunEvents | undefined;
    const resolved = await resolvedFrames(agent, async () => {
      await c.send(p);
      run = await c.collect(p.id, 15_000);
    });
    expect(run!.tools.filter((t) => t['phase'] === 'result')).toHaveLength(1);
    expect(run!.terminal.kind).toBe(25805);
    const payload = run!.terminal.payload;
    // The client is told no figure; the owner's telemetry has them: the call's estimate and the budget.
    expect(payload).toEqual({ ver: 1, code: 'RATE_LIMIT', message: MESSAGE, retry_after: expect.any(Number) });
    expect(resolved).toEqual([expect.objectContaining({ run_id: p.id, outcome: 'RATE_LIMIT' })]);
    const about = /^this model call \(about (\d+) input tokens and at least 256 for its answer\) would exceed this agent’s model budget of 20000 tokens for today \(UTC\)$/.exec(resolved[0]!['detail'] as string);
    expect(about).not.toBeNull();
    expect(Number(about![1])).toBeGreaterThan(BIG / 4);
    expect(payload['retry_after']).toBeGreaterThan(0);
    // Only the first call went out: the second would have answered with the page (a 25803).
    const row = await meterOf(agent, p.id);
    expect(row).toMatchObject({ outcome: 'RATE_LIMIT', output_tokens: toolCallTokens(bigFetch().message), tool_calls: 1 });
    expect(row!.input_tokens).toBeLessThan(500);
    expect(await tokensToday(agent)).toBe(row!.input_tokens + row!.output_tokens);
  });

  it('max_context_tokens bounds the stored history, not a run’s context: a tool result past it is sent (the budget bounds its cost)', async () => {
    // 4,000 characters of page: about 1,000 tokens, past the 256 of max_context_tokens.
    const agent = await createTestAgent({ tools: ['web_fetch'], web_fetch_hosts: ['127.0.0.1'], limits: { max_context_tokens: 256 } });
    const c = await NipXxClient.open(agent);
    const p = c.prompt({ ver: 1, message: `/tool web_fetch {"url":"${inject('toolsFixtureUrl')}/big?n=4000"}` });
    await c.send(p);
    const run = await c.collect(p.id, 15_000);
    expect(run.terminal.kind).toBe(25803);
    expect(run.terminal.payload['text']).toBe(`${body.slice(0, 4000)}\nstderr: HTTP 200`);
  });

  it('counts the model calls in flight: a concurrent prompt whose first call would pass the budget with theirs gets no run', { timeout: 40_000 }, async () => {
    // Each prompt is about 7,500 tokens by estimate (about 8,200 by the admission's estimate of its
    // payload); the budget of 12,000 holds one call (with the 4,096 tokens of output it may
    // produce), not two: the second prompt is refused at admission.
    const agent = await createTestAgent({ provider: 'openai', models: ['fake-slow'], limits: { max_tokens_per_day: 12_000, max_prompt_bytes: 64_000 } });
    const message = 'word '.repeat(6000);
    const first = await NipXxClient.open(agent);
    const a = first.prompt({ ver: 1, message });
    await first.send(a);
    // the first run's call is streaming (fake-slow: one delta every 200 ms for 10 s)
    await first.sock.next((f) => f[0] === 'EVENT' && (f[2] as { kind: number }).kind === 25801, 10_000);
    const second = await NipXxClient.open(agent, OWNER);
    const b = second.prompt({ ver: 1, message });
    await second.send(b);
    const refused = await second.collect(b.id, 15_000);
    expect(refused.terminal.payload).toMatchObject({
      code: 'RATE_LIMIT',
      message: `this prompt (about ${Math.ceil((b.content.length * 3) / 16)} input tokens and at least 256 for its answer) would exceed this agent’s model budget of 12000 tokens for today (UTC)`,
    });
    expect(await meterOf(agent, b.id)).toBeUndefined();
    await first.send(first.cancel(a.id));
    expect((await first.collect(a.id, 15_000)).terminal.payload).toMatchObject({ code: 'CANCELLED' });
  });
});

describe('the output of a model call is bounded by what the budget leaves', () => {
  type Sent = { body: { max_tokens?: number; thinking?: { budget_tokens: number } } };
  const sentFor = async (marker: string): Promise<Sent['body'][]> =>
    ((await (await fetch(`${inject('fakeProviderUrl')}/_requests?contains=${marker}`)).json()) as Sent[]).map((r) => r.body);

  it('a call in flight holds its input and the output it may produce: a concurrent call gets only what is left for its answer', { timeout: 40_000 }, async () => {
    // Each prompt is about 5,000 tokens by estimate. The first call may produce 4,096 (max_output_tokens):
    // it holds about 9,100 of the 16,000; the second has room for about 1,900 of output, not 4,096
    // (both answering in full would spend about 18,200).
    const agent = await createTestAgent({ provider: 'openai', models: ['fake-slow'], limits: { max_tokens_per_day: 16_000, max_prompt_bytes: 64_000 } });
    const words = 'word '.repeat(4000);
    const first = await NipXxClient.open(agent);
    const markerA = `mA${Math.random().toString(36).slice(2, 10)}`;
    const a = first.prompt({ ver: 1, message: `${words} ${markerA}` });
    await first.send(a);
    await first.sock.next((f) => f[0] === 'EVENT' && (f[2] as { kind: number }).kind === 25801, 10_000);
    const second = await NipXxClient.open(agent);
    const markerB = `mB${Math.random().toString(36).slice(2, 10)}`;
    const b = second.prompt({ ver: 1, message: `${words} ${markerB}` });
    await second.send(b);
    await second.sock.next((f) => f[0] === 'EVENT' && (f[2] as { kind: number }).kind === 25801, 10_000);
    const [sentB] = await sentFor(markerB);
    expect(sentB!.max_tokens).toBeGreaterThan(1_500);
    expect(sentB!.max_tokens).toBeLessThanOrEqual(16_000 - 4_096 - 2 * 5_000);
    const [sentA] = await sentFor(markerA);
    expect(sentA!.max_tokens).toBe(4_096);
    for (const [c, p] of [[first, a], [second, b]] as const) {
      await c.send(c.cancel(p.id));
      expect((await c.collect(p.id, 15_000)).terminal.payload).toMatchObject({ code: 'CANCELLED' });
    }
  });

  it('Anthropic with thinking: max_tokens is lowered to the budget’s room, taken from the thinking budget', async () => {
    // "high" thinking (16,384) plus 512 of answer would be 16,896 output tokens; the day holds 10,000.
    const agent = await createTestAgent({ provider: 'anthropic', models: ['claude-test'], thinking: 'high', limits: { max_output_tokens: 512, max_tokens_per_day: 10_000 } });
    const c = await NipXxClient.open(agent);
    const marker = `t${Math.random().toString(36).slice(2)}`;
    const p = c.prompt({ ver: 1, message: `scenario:text ${marker}`, thinking: 'high' });
    await c.send(p);
    expect((await c.collect(p.id)).terminal.kind).toBe(25803);
    const [sent] = await sentFor(marker);
    expect(sent!.max_tokens).toBeGreaterThan(9_900);
    expect(sent!.max_tokens).toBeLessThan(10_000);
    expect(sent!.thinking).toEqual({ type: 'enabled', budget_tokens: sent!.max_tokens! - 512 });
    expect(await tokensToday(agent)).toBeLessThanOrEqual(10_000);
  });

  it('a call the budget leaves less than 256 tokens of answer for is not made', async () => {
    // The prompt (33 tokens by the admission's estimate of its payload) and 256 of answer fit the
    // 300; its first call also sends the calculator's definition (about 100 tokens), and does not.
    const agent = await createTestAgent({ tools: ['calculator'], limits: { max_tokens_per_day: 300 } });
    // The owner's own prompt: its run's 25805 carries the figures (told-to.ts), as its telemetry does.
    const c = await NipXxClient.open(agent, OWNER);
    const p = c.prompt({ ver: 1, message: 'hello there' });
    let run: RunEvents | undefined;
    const resolved = await resolvedFrames(agent, async () => {
      await c.send(p);
      run = await c.collect(p.id);
    });
    const figures = /^this model call \(about \d+ input tokens and at least 256 for its answer\) would exceed this agent’s model budget of 300 tokens for today \(UTC\)$/;
    expect(run!.terminal.payload).toMatchObject({ code: 'RATE_LIMIT', message: expect.stringMatching(figures) });
    expect(resolved[0]?.['detail']).toBe(run!.terminal.payload['message']);
    expect(await tokensToday(agent)).toBe(0);
  });
});

describe('tokens of a run the agent restarted during', () => {
  it('are counted when the watchdog finishes the orphaned run, once: the day’s budget and the run’s metering row hold the model calls made before the restart', { timeout: 60_000 }, async () => {
    const agent = await createTestAgent({ tools: ['web_fetch'], web_fetch_hosts: ['127.0.0.1'] });
    const c = await NipXxClient.open(agent);
    const message = `/tool web_fetch {"url":"${inject('toolsFixtureUrl')}/slow-headers?ms=8000"}`;
    const p = c.prompt({ ver: 1, message });
    await c.send(p);
    // The first model call ended (echo: its estimated input in, its tool call out) and asked for the page, which takes 8 s.
    await c.sock.next((f) => f[0] === 'EVENT' && (f[2] as { kind: number }).kind === 25804, 10_000);
    // abort() resets the object as a deploy, a crash or an eviction would: memory is gone, storage stays.
    await runInDurableObject(stubOf(agent), (_i, state) => state.abort('simulated restart')).catch(() => undefined);
    await runDurableObjectAlarm(stubOf(agent));
    expect((await c.collect(p.id, 20_000)).terminal.payload).toMatchObject({ code: 'INTERNAL_ERROR', message: 'the agent restarted during this run; please retry' });
    const row = await meterOf(agent, p.id);
    expect(row).toMatchObject({ outcome: 'INTERNAL_ERROR', output_tokens: toolCallTokens(message), tool_calls: 1 });
    const spent = row!.input_tokens + row!.output_tokens;
    expect(row!.input_tokens).toBeGreaterThan(0);
    expect(await tokensToday(agent)).toBe(spent);
    await runDurableObjectAlarm(stubOf(agent));
    expect(await tokensToday(agent)).toBe(spent);
  });

  it('a model call in flight at the restart counts its input by estimate', { timeout: 60_000 }, async () => {
    const agent = await createTestAgent({ provider: 'openai', models: ['fake-slow'] });
    const c = await NipXxClient.open(agent);
    const p = c.prompt({ ver: 1, message: 'a long answer please' });
    await c.send(p);
    await c.sock.next((f) => f[0] === 'EVENT' && (f[2] as { kind: number }).kind === 25801, 10_000);
    await runInDurableObject(stubOf(agent), (_i, state) => state.abort('simulated restart')).catch(() => undefined);
    await runDurableObjectAlarm(stubOf(agent));
    expect((await c.collect(p.id, 20_000)).terminal.payload).toMatchObject({ code: 'INTERNAL_ERROR' });
    // 20 characters: 5 tokens, plus 4 for the message; what it streamed before the restart is not known
    expect(await meterOf(agent, p.id)).toMatchObject({ outcome: 'INTERNAL_ERROR', input_tokens: 9, output_tokens: 0, estimated: true });
    expect(await tokensToday(agent)).toBe(9);
  });

  it('a run that ended is not counted again by the watchdog', async () => {
    const agent = await createTestAgent();
    const c = await NipXxClient.open(agent);
    const p = c.prompt({ ver: 1, message: 'once only' });
    await c.send(p);
    const usage = (await c.collect(p.id)).terminal.payload['usage'] as { input_tokens: number; output_tokens: number };
    await runDurableObjectAlarm(stubOf(agent));
    expect(await tokensToday(agent)).toBe(usage.input_tokens + usage.output_tokens);
    expect((await stubOf(agent).usage()).filter((r) => r.run_id === p.id)).toHaveLength(1);
  });
});
