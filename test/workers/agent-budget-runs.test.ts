// What a run costs is counted whatever its output or its end: a tool result larger than one NIP-44
// message (web_fetch returns up to 256 KiB) no longer crashes the run before its tokens are counted;
// the 25804 event carries a cut and marked copy (the model reads the whole result), a response text
// that does not fit one message is cut and marked in the 25803 (the deltas carry all of it), and
// the tokens of every model call reach the agent's daily budget and the owner's meter (run_usage),
// also for a run that fails after a model call.
import { env, runInDurableObject } from 'cloudflare:test';
import { describe, expect, inject, it } from 'vitest';
import { MAX_PLAINTEXT_BYTES } from '../../src/shared/nip44.js';
import { TOOL_OUTPUT_MAX_BYTES } from '../../workers/agent/event-fit.js';
import { NipXxClient, createTestAgent, type RunEvents } from './agent-helpers.js';

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

async function bigFetchAgent(): Promise<string> {
  return createTestAgent({ tools: ['web_fetch'], web_fetch_hosts: ['127.0.0.1'] });
}
const bigFetch = () => ({ ver: 1, message: `/tool web_fetch {"url":"${inject('toolsFixtureUrl')}/big?n=${BIG}"}` });

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

describe('tokens of a run that fails', () => {
  it('a model call that fails mid-stream after reporting its input tokens is counted', async () => {
    // The fake Anthropic stream: message_start (21 input, 1 output token), two deltas, an error event.
    const agent = await createTestAgent({ provider: 'anthropic', models: ['fake-error'] });
    const c = await NipXxClient.open(agent);
    const p = c.prompt({ ver: 1, message: 'this call fails half way' });
    await c.send(p);
    expect((await c.collect(p.id)).terminal.payload).toMatchObject({ code: 'MODEL_UNAVAILABLE' });
    expect(await tokensToday(agent)).toBe(22);
    expect(await meterOf(agent, p.id)).toMatchObject({ outcome: 'MODEL_UNAVAILABLE', input_tokens: 21, output_tokens: 1 });
  });
});
