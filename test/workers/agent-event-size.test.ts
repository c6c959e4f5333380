// What a model produces reaches the client whatever its size. Every event of a run fits one NIP-44
// message (less inside a gift wrap) and every DVMCP answer of the agent fits its form: a model
// output that does not fit (an answer, tool-call arguments, a tool name) is cut and marked
// (workers/agent/event-fit.ts), where it made the run end INTERNAL_ERROR or left the client without
// an answer. The fake provider (test/fake-provider) streams the oversized outputs of
// test/fake-provider/big-outputs.ts.
import { describe, expect, it } from 'vitest';
import type { NostrEvent } from '../../src/shared/event.js';
import { MAX_PLAINTEXT_BYTES } from '../../src/shared/nip44.js';
import { TOOL_ARGUMENTS_MAX_BYTES, TOOL_NAME_MAX_BYTES } from '../../workers/agent/event-fit.js';
import { HUGE_ARGUMENT, HUGE_ARGUMENTS, HUGE_TOOL_NAME, LONG_TEXT } from '../fake-provider/big-outputs.js';
import { NipXxClient, createTestAgent, type RunEvents } from './agent-helpers.js';
import { announcements, DvmcpClient } from './bridge-helpers.js';
import { TEST_OWNER } from './test-keys.js';

const OWNER_SHARD = `/r/${TEST_OWNER}`;
const utf8 = (s: string) => new TextEncoder().encode(s).length;
/** About what a gift-wrapped run event's payload may take (the seal and the wrap encrypt it twice more). */
const WRAPPED_ROOM = 28 * 1024;

/** An agent on the fake OpenAI-compatible provider; its DVMCP server on, and a client once it listens. */
async function dvmcpAgent(): Promise<{ agent: string; c: DvmcpClient }> {
  const agent = await createTestAgent({ provider: 'openai', models: ['gpt-test'], dvmcp: { enabled: true } });
  const c = await DvmcpClient.open(agent, OWNER_SHARD);
  await announcements(agent, [31316], (es) => es.length > 0, OWNER_SHARD);
  return { agent, c };
}

/** The text and _meta of an MCP tool result. */
function answerOf(result: { ok: boolean; value?: unknown; error?: unknown }): { text: string; meta: unknown; isError: unknown } {
  expect(result.error).toBeUndefined();
  const value = result.value as { content: Array<{ type: string; text: string }>; _meta?: unknown; isError?: unknown };
  expect(value.content).toHaveLength(1);
  return { text: value.content[0]!.text, meta: value._meta, isError: value.isError };
}

/** A NIP-XX run of `agent` for `message`, plain or gift-wrapped, collected to its terminal event. */
async function runOf(agent: string, message: string, wrapped: boolean): Promise<RunEvents> {
  const c = await NipXxClient.open(agent);
  let id: string;
  let event: NostrEvent;
  if (wrapped) {
    const w = c.wrappedPrompt({ ver: 1, message });
    [id, event] = [w.rumorId, w.wrap];
  } else {
    event = c.prompt({ ver: 1, message });
    id = event.id;
  }
  await c.send(event);
  return c.collect(id, 20_000);
}

/** The name `cut` is the first part of `whole` followed by the cut note with the exact sizes. */
function expectCutName(cut: string, whole: string): void {
  const m = /^([\s\S]*)…\[tool name cut: the first (\d+) of (\d+) bytes\]$/.exec(cut);
  expect(m).not.toBeNull();
  const [, shown, n, total] = m!;
  expect(whole.startsWith(shown!)).toBe(true);
  expect(shown!.length).toBeGreaterThan(100);
  expect([Number(n), Number(total)]).toEqual([utf8(shown!), utf8(whole)]);
  expect(utf8(JSON.stringify(cut)) - 2).toBeLessThanOrEqual(TOOL_NAME_MAX_BYTES);
}

describe('a DVMCP ask whose answer does not fit one message', () => {
  for (const [form, least] of [
    ['wrapped', 30_000],
    ['plain', 100_000],
  ] as const) {
    it(`${form}: the first part of the answer that fits, a note, and _meta {truncated, original_bytes}`, async () => {
      const { c } = await dvmcpAgent();
      const a = await c.call('tools/call', { name: 'ask', arguments: { message: 'scenario:long-text' } }, { form, timeoutMs: 20_000 });
      const { text, meta, isError } = answerOf(a.result);
      expect(isError).toBeUndefined();
      const at = text.lastIndexOf('\n\n[answer cut');
      const shown = text.slice(0, at);
      expect(LONG_TEXT.startsWith(shown)).toBe(true);
      expect(text.slice(at)).toBe(`\n\n[answer cut to fit one DVMCP message: the first ${utf8(shown)} of ${utf8(LONG_TEXT)} bytes]`);
      expect(utf8(shown)).toBeGreaterThan(least);
      expect(meta).toEqual({ truncated: true, original_bytes: utf8(LONG_TEXT) });
      c.close();
    });
  }

  it('gift-wrapped, a tool name of 200 KiB: the isError answer names its first part', async () => {
    const { c } = await dvmcpAgent();
    const id = await c.send(c.request('tools/call', { name: 'ask', arguments: { message: 'scenario:huge-name' } }), 'wrapped');
    const { text, isError } = answerOf((await c.answer(id, 20_000)).result);
    expect(isError).toBe(true);
    const prefix = 'UNSUPPORTED_FEATURE: unknown tool ';
    expect(text.startsWith(prefix)).toBe(true);
    expectCutName(JSON.parse(text.slice(prefix.length)) as string, HUGE_TOOL_NAME);
    c.close();
  });
});

describe('model output in the events of a NIP-XX run', () => {
  for (const wrapped of [false, true]) {
    it(`${wrapped ? 'gift-wrapped' : 'plain'}: tool-call arguments of 200 KiB: the 25804 start carries their first part, marked; the run answers`, async () => {
      const agent = await createTestAgent({ provider: 'openai', models: ['fake-huge-args'], tools: ['calculator'] });
      const run = await runOf(agent, 'use the calculator', wrapped);
      // The calculator refused the arguments (no expr); the model read that and answered.
      expect(run.terminal.kind).toBe(25803);
      const start = run.tools.find((t) => t['phase'] === 'start')!;
      expect(start).toMatchObject({ name: 'calculator', phase: 'start', truncated: true, original_bytes: { arguments: utf8(HUGE_ARGUMENTS) } });
      const args = start['arguments'] as { city: string };
      expect(Object.keys(args)).toEqual(['city']);
      expect(HUGE_ARGUMENT.startsWith(args.city)).toBe(true);
      expect(utf8(args.city)).toBeGreaterThan(wrapped ? 15_000 : 25_000);
      expect(utf8(JSON.stringify(args))).toBeLessThanOrEqual(TOOL_ARGUMENTS_MAX_BYTES);
      expect(utf8(JSON.stringify(start))).toBeLessThanOrEqual(wrapped ? WRAPPED_ROOM : MAX_PLAINTEXT_BYTES);
      expect(run.tools.find((t) => t['phase'] === 'result')).toMatchObject({ name: 'calculator', success: false });
    });

    it(`${wrapped ? 'gift-wrapped' : 'plain'}: a tool name of 200 KiB: UNSUPPORTED_FEATURE; the status, the 25804s and the error name its first part`, async () => {
      const agent = await createTestAgent({ provider: 'openai', models: ['fake-huge-name'], tools: ['calculator'] });
      const run = await runOf(agent, 'use a tool', wrapped);
      expect(run.terminal.kind).toBe(25805);
      expect(run.terminal.payload).toMatchObject({ code: 'UNSUPPORTED_FEATURE' });
      const message = run.terminal.payload['message'] as string;
      expect(message.startsWith('unknown tool "')).toBe(true);
      const name = JSON.parse(message.slice('unknown tool '.length)) as string;
      expectCutName(name, HUGE_TOOL_NAME);
      expect(run.status.find((s) => s['state'] === 'tool_use')).toMatchObject({ info: name });
      expect(run.tools.map((t) => [t['phase'], t['name']])).toEqual([
        ['start', name],
        ['result', name],
      ]);
    });
  }
});
