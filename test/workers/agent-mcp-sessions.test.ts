// An agent's MCP upstream sessions are per sender (workers/agent/tools/mcp.ts `scope`,
// run-driver.ts): two senders' runs reach the server with two different Mcp-Session-Id values, so
// no per-session upstream state passes between their conversations; one sender's runs share one.
import { describe, expect, inject, it } from 'vitest';
import { NipXxClient, createTestAgent } from './agent-helpers.js';
import { keys } from './helpers.js';

async function ping(c: NipXxClient): Promise<unknown> {
  const p = c.prompt({ ver: 1, message: '/tool kept__ping {}' });
  await c.send(p);
  return (await c.collect(p.id)).terminal.payload['text'];
}

describe('agent MCP sessions', () => {
  it('two senders get two upstream sessions; one sender keeps its own across runs', async () => {
    const url = `${inject('toolsFixtureUrl')}/mcp-expire?bucket=agent-mcp-sessions&keep=1`;
    const agent = await createTestAgent({ mcp_servers: [{ id: 'kept', url }] });
    const alice = await NipXxClient.open(agent, keys());
    const bob = await NipXxClient.open(agent, keys());
    const a1 = await ping(alice);
    const b1 = await ping(bob);
    const a2 = await ping(alice);
    expect(a1).toMatch(/^pong from session-\d+$/);
    expect(b1).toMatch(/^pong from session-\d+$/);
    expect(b1).not.toBe(a1);
    expect(a2).toBe(a1);
  });
});
