// What a hosted agent's run does with its tools' results, and what its owner alone is told of them.
// - A result nesting deeper than 64 levels (json-depth.ts MAX_JSON_DEPTH; 100,000 levels of [[…]]
//   are 200 KB) from an MCP server (the fixture's /mcp-huge?deep=2 tool `deep` {levels, where}) or a
//   DVMCP server (the test responder's `deep` {levels}, no content and a deep structuredContent, sent
//   in public: 50,000 levels are 100 KB) is a failed tool call, "<MCP|DVMCP> <tool>: the tool's
//   result nests deeper than 64 levels", and the run goes on (the echo model answers with it); no
//   NIP-AO frame to the owner carries a value deeper than 64 levels.
// - What the owner alone is told is bounded as its 25805 is (workers/agent/told-to.ts ownerDetail,
//   OWNER_MESSAGE_MAX_BYTES: 4,096 bytes of JSON string, then `…[cut: the first N of M bytes]`):
//   the tool set's problems in turn_started (`tool_problems`, as one text cut when together they
//   pass it) and a run's `detail` in session_resolved. The MCP fixture /mcp-huge?more=300 lists 305
//   tools, so 177 are skipped over the limit of 128, each a problem of about 60 bytes (10 KB in all).
import { SELF } from 'cloudflare:test';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import '../mcp/provided.js';
import { jsonStringBytes, utf8Bytes } from '../../src/shared/json-cut.js';
import { nestsWithin } from '../../src/shared/json-depth.js';
import type { SocketFactory } from '../../src/shared/relay-client.js';
import { NipXxClient, createTestAgent, watchRunsEnded, type RunEvents } from './agent-helpers.js';
import { DEEP_TOOL, DvmcpResponder, RESPONDER_TOOLS } from './dvmcp-client-responder.js';
import { randomHex, type Keys } from './helpers.js';
import { TEST_OWNER, TEST_OWNER_SK } from './test-keys.js';
import type { ObservedFrame } from '../../src/shared/ao-observer.js';

const FIXTURE = inject('toolsFixtureUrl');
const OWNER: Keys = { sk: TEST_OWNER_SK, pk: TEST_OWNER };

/** The problems of an agent whose server `big` is /mcp-huge?more=300: its tools past the 128th (huge, small, repeat, structured, error, more0…more122 taken). */
const SKIPPED = Array.from({ length: 177 }, (_, i) => `MCP server big: skipped more${123 + i} (over the tool limit of 128)`);
const CUT = /…\[cut: the first (\d+) of (\d+) bytes\]$/;

/** `text` is `whole` cut to at most 4,096 bytes of JSON string, marked with how much of it is shown. */
function expectCut(text: unknown, whole: string): void {
  expect(typeof text).toBe('string');
  const s = text as string;
  const [, shown, total] = CUT.exec(s) ?? [];
  expect(Number(total)).toBe(utf8Bytes(whole));
  expect(s.slice(0, s.length - CUT.exec(s)![0].length)).toBe(whole.slice(0, Number(shown)));
  expect(jsonStringBytes(s)).toBeLessThanOrEqual(4096);
  expect(jsonStringBytes(s)).toBeGreaterThan(4000);
}

describe('what the owner alone is told of a run’s tools is at most 4,096 bytes', () => {
  it('turn_started: 10 KB of tool problems are one text cut; an unknown tool’s detail (session_resolved, the owner’s 25805) is cut the same', async () => {
    const agent = await createTestAgent({ mcp_servers: [{ id: 'big', url: `${FIXTURE}/mcp-huge?more=300` }] });
    const watch = await watchRunsEnded([agent]);
    const c = await NipXxClient.open(agent, OWNER);
    try {
      const p = c.prompt({ ver: 1, message: '/tool other__echo {}' });
      await c.send(p);
      const run = await c.collect(p.id);
      await watch.until(1);
      const problems = SKIPPED.join('; ');
      expect(utf8Bytes(problems)).toBeGreaterThan(10_000);
      const started = watch.frames.filter((f) => f.frame.kind === 'turn_started').map((f) => f.frame.payload);
      expect(started).toHaveLength(1);
      const toolProblems = started[0]?.['tool_problems'];
      expect(Array.isArray(toolProblems) && toolProblems.length).toBe(1);
      expectCut((toolProblems as unknown[])[0], problems);
      const detail = `unknown tool "other__echo"; the agent's tool problems: ${problems}`;
      expect(watch.resolved).toHaveLength(1);
      expectCut(watch.resolved[0]?.['detail'], detail);
      // The owner's own 25805: the same text, by the same rule.
      expect(run.terminal.kind).toBe(25805);
      expect(run.terminal.payload['message']).toBe(watch.resolved[0]?.['detail']);
    } finally {
      c.sock.close();
      watch.stop();
    }
  });

  it('a few problems stay a list, each whole', async () => {
    const agent = await createTestAgent({ mcp_servers: [{ id: 'big', url: `${FIXTURE}/mcp-huge?more=125` }] });
    const watch = await watchRunsEnded([agent]);
    const c = await NipXxClient.open(agent, OWNER);
    try {
      const p = c.prompt({ ver: 1, message: 'hello' });
      await c.send(p);
      await c.collect(p.id);
      await watch.until(1);
      const started = watch.frames.filter((f) => f.frame.kind === 'turn_started').map((f) => f.frame.payload['tool_problems']);
      expect(started).toEqual([SKIPPED.slice(0, 2)]);
    } finally {
      c.sock.close();
      watch.stop();
    }
  });
});

const socket: SocketFactory = async (u) => {
  const res = await SELF.fetch(u.replace(/^ws/, 'http'), { headers: { Upgrade: 'websocket' } });
  const ws = res.webSocket!;
  ws.accept();
  return ws;
};

const server = `agent-deep-${randomHex(3)}`;
let responder: DvmcpResponder;
beforeAll(async () => {
  responder = new DvmcpResponder('ws://relay.test/', socket, server, true, { tools: [...RESPONDER_TOOLS, DEEP_TOOL] });
  await responder.start();
});
afterAll(() => responder.close());

/** A run of `agent` (a stranger's) that calls `tool` with `args`: its events, and the owner's frames of it. */
async function toolRun(agent: string, tool: string, args: object): Promise<{ run: RunEvents; frames: ObservedFrame[] }> {
  const watch = await watchRunsEnded([agent]);
  const c = await NipXxClient.open(agent);
  try {
    const p = c.prompt({ ver: 1, message: `/tool ${tool} ${JSON.stringify(args)}` });
    await c.send(p);
    const run = await c.collect(p.id, 20_000);
    await watch.until(1);
    return { run, frames: [...watch.frames] };
  } finally {
    c.sock.close();
    watch.stop();
  }
}

/** The run's tool call failed with `error`, the run went on to the model's answer, and the owner's frames hold nothing deeper than 64 levels. */
function expectFailedAndGoneOn({ run, frames }: { run: RunEvents; frames: ObservedFrame[] }, tool: string, error: string): void {
  expect(run.tools.find((t) => t['phase'] === 'result')).toMatchObject({ name: tool, success: false, output: { stdout: '', stderr: error, exit_code: 1 } });
  expect(run.terminal.kind).toBe(25803);
  expect(run.terminal.payload['text']).toBe(`error: ${error}`);
  expect(frames.map((f) => f.frame.kind)).toEqual(expect.arrayContaining(['turn_started', 'acp_write', 'session_resolved']));
  expect(frames.filter((f) => !nestsWithin(f.frame.payload))).toEqual([]);
  expect(frames.find((f) => f.frame.kind === 'session_resolved')?.frame.payload).toMatchObject({ outcome: 'response' });
}

const DEEP = (label: string, tool: string): string => `${label} ${tool}: the tool's result nests deeper than 64 levels`;

describe('a tool result nesting deeper than 64 levels is a failed tool call; the run goes on', () => {
  const mcp = `${FIXTURE}/hostile/deep`;

  it('MCP: 100,000 levels (a structuredContent beside a text)', async () => {
    const agent = await createTestAgent({ mcp_servers: [{ id: 'big', url: mcp }] });
    expectFailedAndGoneOn(await toolRun(agent, 'big__deep', { levels: 100_000 }), 'big__deep', DEEP('MCP', 'big__deep'));
  });

  it('MCP: 65 levels, and 100,000 in a content item’s _meta; 64 levels are a result', async () => {
    const agent = await createTestAgent({ mcp_servers: [{ id: 'big', url: mcp }] });
    expectFailedAndGoneOn(await toolRun(agent, 'big__deep', { levels: 65 }), 'big__deep', DEEP('MCP', 'big__deep'));
    expectFailedAndGoneOn(await toolRun(agent, 'big__deep', { levels: 100_000, where: 'content' }), 'big__deep', DEEP('MCP', 'big__deep'));
    const { run } = await toolRun(agent, 'big__deep', { levels: 64 });
    expect(run.tools.find((t) => t['phase'] === 'result')).toMatchObject({ name: 'big__deep', success: true, output: { stdout: 'see structuredContent', exit_code: 0 } });
  });

  it('MCP: a JSON-RPC error whose data nests 100,000 levels fails with its message', async () => {
    const agent = await createTestAgent({ mcp_servers: [{ id: 'big', url: mcp }] });
    expectFailedAndGoneOn(await toolRun(agent, 'big__deep', { levels: 100_000, where: 'error' }), 'big__deep', 'MCP big__deep: deep');
  });

  it('DVMCP: 50,000 levels of structuredContent without content (in public); 64 levels are a result', async () => {
    const agent = await createTestAgent({ dvmcp_servers: [{ provider: responder.provider, server, encrypt: false }] });
    const tool = `${server}__deep`;
    expectFailedAndGoneOn(await toolRun(agent, tool, { levels: 50_000 }), tool, DEEP('DVMCP', tool));
    const { run } = await toolRun(agent, tool, { levels: 64 });
    expect(run.tools.find((t) => t['phase'] === 'result')).toMatchObject({ name: tool, success: true, output: { stdout: `{"nest":${'['.repeat(62)}${']'.repeat(62)}}`, exit_code: 0 } });
  });
});
