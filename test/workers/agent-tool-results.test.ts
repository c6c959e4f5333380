// What a hosted agent's owner alone is told of its runs' tools is bounded as its 25805 is
// (workers/agent/told-to.ts ownerDetail, OWNER_MESSAGE_MAX_BYTES: 4,096 bytes of JSON string, then
// `…[cut: the first N of M bytes]`): the tool set's problems in turn_started (`tool_problems`, as
// one text cut when together they pass it) and a run's `detail` in session_resolved. The MCP
// fixture /mcp-huge?more=300 lists 305 tools, so 177 are skipped over the limit of 128, each a
// problem of about 60 bytes (10 KB in all).
import { describe, expect, inject, it } from 'vitest';
import '../mcp/provided.js';
import { jsonStringBytes, utf8Bytes } from '../../src/shared/json-cut.js';
import { NipXxClient, createTestAgent, watchRunsEnded } from './agent-helpers.js';
import type { Keys } from './helpers.js';
import { TEST_OWNER, TEST_OWNER_SK } from './test-keys.js';

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
