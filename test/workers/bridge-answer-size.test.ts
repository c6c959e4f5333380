// Upstream answers are read up to a byte cap (MAX_UPSTREAM_ANSWER_BYTES, workers/common/mcp-client.ts):
// a fixture upstream (test/mcp/fixture-server.ts /mcp-huge) answers tools/call `huge` with 32 MiB,
// as JSON or as one SSE event, through a real bridge. The bridge stops reading past the cap (the
// fixture sees its connection closed before the body went out in full), answers the exact error,
// and answers the next call.
// A result read in full that does not fit one DVMCP answer in the request's form (plain: 120,000
// bytes of content; gift-wrapped: what the seal and the wrap carry) is cut to one that does, with
// a note and _meta (workers/common/dvmcp-server/answer-fit.ts), when its text can be cut; else it
// is answered -32603. Before, a plain CJK result under 120,000 characters made an event over the
// relay's 256 KiB message limit, and a wrapped one under 40,000 characters a wrap that could not be
// made: the client got nothing.
import { beforeAll, describe, expect, inject, it } from 'vitest';
import type { Form } from '../../src/shared/dvmcp-wrap.js';
import { MAX_UPSTREAM_ANSWER_BYTES } from '../../workers/common/mcp-client.js';
import { bridgeReady, directBridge, DvmcpClient } from './bridge-helpers.js';
import { randomHex } from './helpers.js';

const HUGE = 32 * 1024 * 1024;
const bucket = randomHex(8);
const fixture = (path: string): string => `${inject('toolsFixtureUrl')}${path}`;
let client: DvmcpClient;

beforeAll(async () => {
  const { provider } = await directBridge([
    { id: 'json', url: fixture(`/mcp-huge?bucket=${bucket}-json`), public: false },
    { id: 'sse', url: fixture(`/mcp-huge?bucket=${bucket}-sse&sse=1`), public: false },
    { id: 'fit', url: fixture(`/mcp-huge?bucket=${bucket}-fit`), public: false },
  ]);
  await bridgeReady(provider);
  client = await DvmcpClient.open(provider);
});

type Stats = { begun: number; finished: number; cut: number; written: number };
const stats = async (b: string): Promise<Stats> => (await (await fetch(fixture(`/mcp-huge/stats?bucket=${b}`))).json()) as Stats;

/** The fixture's stats once its huge answer ended (cut or finished), polled for at most ~5 s. */
async function ended(b: string): Promise<Stats> {
  let s = await stats(b);
  for (let i = 0; i < 50 && s.cut + s.finished < s.begun; i++) {
    await new Promise((r) => setTimeout(r, 100));
    s = await stats(b);
  }
  return s;
}

describe('bridge: upstream answers are read up to a byte cap', () => {
  it.each(['json', 'sse'])('a 32 MiB %s answer is cut at the cap, answered with the error, and the next call works', async (server) => {
    expect(MAX_UPSTREAM_ANSWER_BYTES).toBe(4 * 1024 * 1024);
    const started = Date.now();
    const huge = await client.call('tools/call', { name: 'huge', arguments: {} }, { s: server, timeoutMs: 20_000 });
    expect(huge.result).toEqual({ ok: false, error: { code: -32603, message: `upstream ${server} sent an answer over ${MAX_UPSTREAM_ANSWER_BYTES} bytes` } });
    expect(Date.now() - started).toBeLessThan(15_000);
    const s = await ended(`${bucket}-${server}`);
    expect(s).toMatchObject({ begun: 1, finished: 0, cut: 1 });
    expect(s.written).toBeLessThan(HUGE);

    const small = await client.call('tools/call', { name: 'small', arguments: {} }, { s: server });
    expect(small.result.ok && small.result.value.content).toEqual([{ type: 'text', text: 'small' }]);
  });
});

const utf8 = (s: string): number => new TextEncoder().encode(s).length;

describe('bridge: an upstream result that does not fit one answer', () => {
  // plain: '語' × 100,000 is 100,000 characters (under the old 120,000-character cap) but 300,000
  // bytes, an event over the relay's 262,144-byte messages; wrapped: 30,000 characters (under the
  // old 40,000) but 90,000 bytes, more than a gift wrap carries.
  it.each([
    ['plain', 100_000, 100_000],
    ['wrapped', 30_000, 30_000],
    ['wrapped-dm', 30_000, 30_000],
  ] as const)('%s: the client gets the first part of the text that fits, a note, and _meta {truncated, original_bytes}', async (form: Form, count, least) => {
    const whole = '語'.repeat(count);
    const a = await client.call('tools/call', { name: 'repeat', arguments: { unit: '語', count } }, { s: 'fit', form, timeoutMs: 10_000 });
    expect(a.result.ok).toBe(true);
    const value = (a.result as unknown as { value: { content: Array<{ type: string; text: string }>; _meta?: unknown } }).value;
    expect(value._meta).toEqual({ truncated: true, original_bytes: utf8(whole) });
    expect(value.content).toHaveLength(1);
    const text = value.content[0]!.text;
    const at = text.lastIndexOf('\n\n[answer cut');
    const shown = text.slice(0, at);
    expect(whole.startsWith(shown)).toBe(true);
    expect(text.slice(at)).toBe(`\n\n[answer cut to fit one DVMCP message: the first ${utf8(shown)} of ${utf8(whole)} bytes]`);
    expect(utf8(shown)).toBeGreaterThan(least);
    if (form === 'plain') expect(utf8(a.content)).toBeLessThanOrEqual(120_000);
    else expect(a.event.kind).toBe(1059);
  });

  it.each(['plain', 'wrapped'] as const)('%s: a result whose size is not in its text (a huge structuredContent) is answered -32603 result too large', async (form: Form) => {
    // (a count of its own per form: the same request in the same second would have the plain one's id, and be ignored as a replay)
    const count = form === 'plain' ? 200_000 : 200_001;
    const a = await client.call('tools/call', { name: 'structured', arguments: { count } }, { s: 'fit', form, timeoutMs: 10_000 });
    const kind = form === 'plain' ? 'a plain answer carries at most 120000' : 'a gift-wrapped answer carries at most \\d+';
    expect(a.result).toEqual({
      ok: false,
      error: { code: -32603, message: expect.stringMatching(new RegExp(`^result too large: \\d+ bytes; ${kind}, and only the text content of a tool result can be cut to fit$`)) },
    });
  });

  it('a result that fits is answered whole, without _meta', async () => {
    const a = await client.call('tools/call', { name: 'repeat', arguments: { unit: 'é', count: 1000, items: 2 } }, { s: 'fit', form: 'wrapped', timeoutMs: 10_000 });
    expect(a.result.ok && a.result.value).toEqual({ content: [{ type: 'text', text: 'é'.repeat(1000) }, { type: 'text', text: 'é'.repeat(1000) }] });
  });
});
