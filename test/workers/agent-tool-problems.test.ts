// What a hosted agent's run does with a tool its tool set lacks (workers/agent/tools/registry.ts,
// runtime.ts): a tool of a configured MCP server the agent could not connect to (the fixture's
// /mcp-paged?bearer-sha256= answers 401 without the bearer token, and the agent has none) is a
// failed tool call naming the server's problem, so the run goes on and the model (echo: it
// answers with the tool result) can say why; any other name ends the run UNSUPPORTED_FEATURE, the
// client told only the name, the owner (NIP-AO session_resolved `detail`) the tool problems.
import { sha256 } from '@noble/hashes/sha2.js';
import { describe, expect, inject, it } from 'vitest';
import { bytesToHex } from '../../src/shared/hex.js';
import { NipXxClient, createTestAgent, watchRunsEnded } from './agent-helpers.js';

/** The fixture endpoint that answers 401 without `Authorization: Bearer <a token the agent does not have>`. */
const LOCKED = `${inject('toolsFixtureUrl')}/mcp-paged?bearer-sha256=${bytesToHex(sha256(new TextEncoder().encode('a token the agent does not have')))}`;
/** The problem of connecting to it, as the registry records it. */
const PROBLEM = 'MCP server srv: Streamable HTTP error (HTTP 401): Error POSTing to endpoint: ';

describe('a tool of an MCP server the agent could not connect to', () => {
  it('is a failed tool call naming the server, not its problem; the run goes on to a 25803 response', async () => {
    const agent = await createTestAgent({ mcp_servers: [{ id: 'srv', url: LOCKED }] });
    const c = await NipXxClient.open(agent);
    const p = c.prompt({ ver: 1, message: '/tool srv__echo {"message":"hi"}' });
    await c.send(p);
    const run = await c.collect(p.id);
    c.sock.close();
    // The client (and the model) read the server's id, not its problem (the owner's to read).
    const unavailable = "tool srv__echo is unavailable: its server srv could not be used for this run (the agent's owner can see why)";
    expect(run.tools).toEqual([
      { ver: 1, timestamp: expect.any(Number), name: 'srv__echo', phase: 'start', arguments: { message: 'hi' } },
      { ver: 1, timestamp: expect.any(Number), name: 'srv__echo', phase: 'result', success: false, duration_ms: expect.any(Number), output: { stdout: '', stderr: unavailable, exit_code: 1 } },
    ]);
    expect(run.terminal.kind).toBe(25803);
    expect(run.terminal.payload['text']).toBe(`error: ${unavailable}`);
  });

  it('a name of no server ends the run UNSUPPORTED_FEATURE; the owner’s detail lists the tool problems', async () => {
    const agent = await createTestAgent({ mcp_servers: [{ id: 'srv', url: LOCKED }] });
    const watch = await watchRunsEnded([agent]);
    try {
      const c = await NipXxClient.open(agent);
      const p = c.prompt({ ver: 1, message: '/tool other__echo {}' });
      await c.send(p);
      const run = await c.collect(p.id);
      c.sock.close();
      expect(run.terminal.kind).toBe(25805);
      expect(run.terminal.payload).toEqual({ ver: 1, code: 'UNSUPPORTED_FEATURE', message: 'unknown tool "other__echo"' });
      await watch.until(1);
      expect(watch.resolved).toHaveLength(1);
      expect(watch.resolved[0]).toMatchObject({ run_id: p.id, detail: `unknown tool "other__echo"; the agent's tool problems: ${PROBLEM}` });
    } finally {
      watch.stop();
    }
  });
});
