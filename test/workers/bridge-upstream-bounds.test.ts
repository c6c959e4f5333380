// A hostile upstream MCP server, at the network boundary (the fixture server, test/mcp/fixture-server.ts),
// cannot silence a bridge's other servers, and nothing it sends vanishes without a word:
//   - notification budget: a server may use at most half of the bridge's NOTIFICATIONS_PER_MINUTE
//     (SERVER_NOTIFICATIONS_PER_MINUTE, notification-limits.ts); one server flooding its client with
//     resources/updated of ever new uris spends its own half, and another server's client still
//     gets its progress and list_changed. (The budget was one per bridge: the flood spent it all.)
//   - an upstream JSON-RPC error, an initialize result (answered, and announced in the 31316) and a
//     notification are measured as the events they become (answer-fit.ts): an error whose data is 1 MB
//     is cut to fit with the answers' note; an initialize result's instructions are cut likewise
//     (with _meta), one too large elsewhere (capabilities) is answered -32603; a notification that
//     cannot fit one event is dropped and logged, never sent for the relay to refuse. (Before, each
//     became an event the relay refused: the client waited for an answer that never came.)
import { env } from 'cloudflare:test';
import { afterEach, beforeEach, describe, expect, inject, it, vi, type MockInstance } from 'vitest';
import type { Form } from '../../src/shared/dvmcp-wrap.js';
import { MAX_TOOL_LIST_JSON_CHARS } from '../../workers/common/mcp-session-cache.js';
import { SERVER_NOTIFICATIONS_PER_MINUTE } from '../../workers/common/dvmcp-server/notification-limits.js';
import { announcements, bridgeReady, directBridge, DvmcpClient, received, told } from './bridge-helpers.js';
import { connect, randomHex } from './helpers.js';

const SHARE = SERVER_NOTIFICATIONS_PER_MINUTE;
const FLOOD = 3000;
const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));
const fixture = (path: string): string => `${inject('toolsFixtureUrl')}${path}`;
const utf8 = (s: string): number => new TextEncoder().encode(s).length;
const note = (shown: number, total: number): string => `\n\n[answer cut to fit one DVMCP message: the first ${shown} of ${total} bytes]`;
const INIT = { protocolVersion: '2025-03-26', capabilities: {}, clientInfo: { name: 't', version: '1' } };

/** Calls `tool` of flood server `s` and checks that its answer arrives. */
async function flood(client: DvmcpClient, s: string, tool: string, args: Record<string, unknown>, form: Form = 'plain'): Promise<string> {
  const id = await client.send(client.request('tools/call', { name: tool, arguments: args }, { s }), form);
  const answer = await client.answer(id, 30_000);
  expect(answer.result).toEqual({ ok: true, value: { content: [{ type: 'text', text: 'flooded' }] } });
  return id;
}

/** `text` split at the answers' note: the part shown, and the note. */
function split(text: string): { shown: string; note: string } {
  const at = text.lastIndexOf('\n\n[answer cut');
  expect(at).toBeGreaterThanOrEqual(0);
  return { shown: text.slice(0, at), note: text.slice(at) };
}

describe('bridge: one server flooding notifications does not silence the others', () => {
  it(`a server sending ${FLOOD} resources/updated of ${FLOOD} uris gets its share (${SHARE}) through; another server's client still gets its progress and list_changed`, async () => {
    const { provider } = await directBridge([
      { id: 'loud', url: fixture(`/mcp-flood?bucket=${randomHex(8)}`), public: false },
      { id: 'quiet', url: fixture(`/mcp-flood?bucket=${randomHex(8)}`), public: false },
    ]);
    await bridgeReady(provider);
    const attacker = await DvmcpClient.open(provider);
    const victim = await DvmcpClient.open(provider);
    try {
      await flood(attacker, 'loud', 'updated', { count: FLOOD, uris: FLOOD });
      await received(attacker, 'notifications/resources/updated', SHARE);

      const id = await flood(victim, 'quiet', 'progress', { count: 1 });
      await received(victim, 'notifications/progress', 1, 5_000);
      const progress = told(victim, 'notifications/progress');
      expect(progress[0]!.tags).toEqual(expect.arrayContaining([['e', id], ['s', 'quiet']]));
      expect(JSON.parse(progress[0]!.content)).toEqual({ method: 'notifications/progress', params: { id, progressToken: id, progress: 1, total: 1 } });
      await flood(victim, 'quiet', 'list_changed', { count: 1 });
      await received(victim, 'notifications/tools/list_changed', 1, 5_000);

      await sleep(1500);
      expect(told(attacker, 'notifications/resources/updated')).toHaveLength(SHARE);
    } finally {
      attacker.close();
      victim.close();
    }
  }, 90_000);
});

describe('bridge: upstream errors and initialize results are cut to fit one answer', () => {
  let client: DvmcpClient;
  const bucket = randomHex(8);

  it.each(['plain', 'wrapped'] as const)('%s: an upstream error with a 1 MB message and 1 MB of data reaches the client, its data cut with the note', async (form: Form) => {
    const { provider } = await directBridge([{ id: 'err', url: fixture(`/mcp-huge?bucket=${bucket}-err`), public: false }]);
    await bridgeReady(provider);
    client = await DvmcpClient.open(provider);
    try {
      const a = await client.call('tools/call', { name: 'error', arguments: { message: 1_000_000, data: 1_000_000 } }, { s: 'err', form, timeoutMs: 10_000 });
      expect(a.result.ok).toBe(false);
      const error = (a.result as { ok: false; error: { code: number; message: string; data?: unknown } }).error;
      expect(error.code).toBe(-32000);
      // the MCP client keeps 1,000 characters of a failure's message (workers/common/mcp-client.ts)
      expect(error.message).toBe(`${'m'.repeat(1000)}…`);
      expect(typeof error.data).toBe('string');
      const { shown, note: n } = split(error.data as string);
      expect(shown).toBe('d'.repeat(shown.length));
      expect(shown.length).toBeGreaterThan(form === 'plain' ? 100_000 : 30_000);
      const total = utf8(error.message) + 1_000_000;
      expect(n).toBe(note(utf8(error.message) + utf8(shown), total));
      if (form === 'plain') expect(utf8(a.content)).toBeLessThanOrEqual(120_000);
      else expect(a.event.kind).toBe(1059);
    } finally {
      client.close();
    }
  });

  it.each(['plain', 'wrapped'] as const)('%s: an initialize result with 400,000 bytes of instructions is answered with them cut, the note and _meta', async (form: Form) => {
    const { provider } = await directBridge([{ id: 'init', url: fixture(`/mcp-huge?bucket=${bucket}-init-${form}&instructions=400000`), public: false }]);
    await bridgeReady(provider);
    client = await DvmcpClient.open(provider);
    try {
      const a = await client.call('initialize', INIT, { s: 'init', form, timeoutMs: 10_000 });
      expect(a.tags).toEqual(expect.arrayContaining([['d', 'init'], ['support_encryption', 'true']]));
      expect(a.result.ok).toBe(true);
      const value = (a.result as { ok: true; value: Record<string, unknown> }).value;
      expect(value).toMatchObject({ capabilities: { tools: {} }, serverInfo: { name: 'huge', version: '1.0.0' }, _meta: { truncated: true, original_bytes: 400_000 } });
      const { shown, note: n } = split(value.instructions as string);
      expect(shown).toBe('i'.repeat(shown.length));
      expect(shown.length).toBeGreaterThan(form === 'plain' ? 100_000 : 30_000);
      expect(n).toBe(note(shown.length, 400_000));
    } finally {
      client.close();
    }
  });

  it('an initialize result too large elsewhere (400,000 bytes of capabilities) is answered -32603 with its server', async () => {
    const { provider } = await directBridge([{ id: 'caps', url: fixture(`/mcp-huge?bucket=${bucket}-caps&capabilities=400000`), public: false }]);
    await bridgeReady(provider);
    client = await DvmcpClient.open(provider);
    try {
      const a = await client.call('initialize', INIT, { s: 'caps', timeoutMs: 10_000 });
      expect(a.tags).toContainEqual(['d', 'caps']);
      expect(a.result).toEqual({
        ok: false,
        error: { code: -32603, message: expect.stringMatching(/^initialize result too large: \d+ bytes; a plain answer carries at most 120000, and only the instructions can be cut to fit$/) },
      });
    } finally {
      client.close();
    }
  });

  it("a public server's 31316 carries its initialize result with the instructions cut", async () => {
    const { provider } = await directBridge([{ id: 'announced', url: fixture(`/mcp-huge?bucket=${bucket}-announced&instructions=400000`), public: true }]);
    const [server] = await announcements(provider, [31316], (es) => es.length > 0);
    expect(server).toBeDefined();
    const content = JSON.parse(server!.content) as Record<string, unknown>;
    expect(content).toMatchObject({ serverInfo: { name: 'huge' }, _meta: { truncated: true, original_bytes: 400_000 } });
    const { shown, note: n } = split(content.instructions as string);
    expect(n).toBe(note(shown.length, 400_000));
    expect(utf8(server!.content)).toBeLessThanOrEqual(120_000);
  }, 30_000);
});

/**
 * Registers public server `id` at `url` and checks that its 31316 is published, that a list of it is
 * left out with one warning line `leftOut` accepts, and that no 31317 is (nor refused by the relay).
 */
async function listLeftOut(id: string, url: string, leftOut: (line: string) => boolean): Promise<void> {
  const warn = vi.spyOn(console, 'warn');
  try {
    const { provider } = await directBridge([{ id, url, public: true }]);
    const [server] = await announcements(provider, [31316], (es) => es.length > 0);
    expect(server).toBeDefined();
    const lines = (): string[] => warn.mock.calls.map((args) => args.map(String).join(' '));
    await vi.waitFor(() => expect(lines().filter(leftOut)).toHaveLength(1), { timeout: 10_000, interval: 100 });
    expect(lines().filter((l) => l.includes('refused 31317'))).toEqual([]);
    const relay = await connect('/');
    expect((await relay.req('lists', { kinds: [31317], authors: [provider] })).events).toEqual([]);
    relay.close();
  } finally {
    warn.mockRestore();
  }
}

describe('bridge: an announcement too large for one event', () => {
  it("a public server's tool list of 200,000 bytes is left out and logged; its 31316 is published", async () => {
    const leftOut = /^bridge: announcement of listed left out: tools\/list \(5 items\) is \d+ bytes; one announcement carries at most 120000$/;
    await listLeftOut('listed', fixture(`/mcp-huge?bucket=${randomHex(8)}&description=200000`), (l) => leftOut.test(l));
  }, 30_000);
});

describe('bridge: a list too large to hold', () => {
  it("a public server listing tools past 4194304 characters: the listing stops there (no later page asked), the list is left out and logged, its 31316 is published", async () => {
    const bucket = randomHex(8);
    // 20 pages of four tools with 262,144-character descriptions: about 1 MiB a page.
    const leftOut = `bridge: announcement of vast left out: tools/list: tools/list answered more than ${MAX_TOOL_LIST_JSON_CHARS} characters of items (their JSON, over all pages), the most one listing may hold`;
    await listLeftOut('vast', fixture(`/mcp-huge?bucket=${bucket}&pages=20&more=4&description=262144`), (l) => l === leftOut);
    const stats = (await (await fetch(fixture(`/mcp-huge/stats?bucket=${bucket}`))).json()) as { lists: number };
    expect(stats.lists).toBe(4);
  }, 30_000);
});

describe('bridge: an upstream notification too large for one event', () => {
  let spies: MockInstance<typeof console.log>[] = [];
  beforeEach(() => {
    spies = [vi.spyOn(console, 'log'), vi.spyOn(console, 'warn'), vi.spyOn(console, 'error')];
  });
  afterEach(() => {
    for (const s of spies) s.mockRestore();
  });
  /** The bridge's log lines so far (console.log, warn and error of this isolate, where the Bridge runs). */
  const lines = (): string[] => spies.flatMap((s) => s.mock.calls.map((args) => args.map(String).join(' ')));

  it.each([
    ['progress', 'plain', 300_000],
    ['progress', 'wrapped', 60_000],
    ['updated', 'plain', 300_000],
  ] as const)('%s (%s, %d bytes): dropped and logged, never published, the answer arrives', async (method, form: Form, bytes) => {
    const { provider } = await directBridge([{ id: 'big', url: fixture(`/mcp-flood?bucket=${randomHex(8)}`), public: false }]);
    await bridgeReady(provider);
    const client = await DvmcpClient.open(provider);
    try {
      const full = method === 'progress' ? 'notifications/progress' : 'notifications/resources/updated';
      const id = await flood(client, 'big', 'huge_note', { bytes, method }, form);
      const deadline = Date.now() + 5_000;
      const dropped = new RegExp(`^bridge: ${full} of server big dropped: \\d+ bytes, one event carries at most \\d+ \\(logged once a minute per server\\)$`);
      while (!lines().some((l) => dropped.test(l)) && Date.now() < deadline) await sleep(50);
      expect(lines().filter((l) => dropped.test(l))).toHaveLength(1);
      await sleep(500);
      expect(lines().filter((l) => l.includes('refused 21316') || l.includes('not delivered') || l.includes('notification budget'))).toEqual([]);
      expect(client.notifications(id)).toEqual([]);
      expect(told(client, full)).toEqual([]);
    } finally {
      client.close();
    }
  });
});

describe('bridge: removing one server', () => {
  it('closes only that server’s upstream sessions: a call in flight on another server gets its answer', async () => {
    const { owner, provider } = await directBridge([
      { id: 'gone', url: fixture('/mcp-paged'), public: false },
      { id: 'stays', url: fixture('/mcp-paged'), public: false },
    ]);
    await bridgeReady(provider);
    const client = await DvmcpClient.open(provider);
    try {
      const touched = await client.send(client.request('tools/list', {}, { s: 'gone' }));
      expect((await client.answer(touched, 10_000)).result.ok).toBe(true); // 'gone' has a session too
      const slow = await client.send(client.request('tools/call', { name: 'slow', arguments: { ms: 1500 } }, { s: 'stays' }));
      await sleep(300); // the call is in flight upstream
      expect(await env.BRIDGE.get(env.BRIDGE.idFromName(owner)).removeServer('gone')).toBe(true);
      expect((await client.answer(slow, 10_000)).result).toEqual({ ok: true, value: { content: [{ type: 'text', text: 'finally' }] } });
    } finally {
      client.close();
    }
  });
});
