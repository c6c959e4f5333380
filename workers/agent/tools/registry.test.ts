// The registry's answer for a tool it does not have (registry.ts): a name of a configured MCP or
// DVMCP server that could not be reached, or was skipped, is a failed tool call naming the
// server's problem (the run goes on, the model reads why); any other name is unknown, with the
// registry's problems as the owner's detail. In plain Node: an MCP server on a 127.0.0.1 port
// nothing listens on (the development policy: loopback and plain http allowed), and DVMCP servers
// with no relay connection to reach them.
import { createServer } from 'node:net';
import { describe, expect, it } from 'vitest';
import { outboundPolicy } from '../../../src/shared/outbound-url.js';
import { buildToolRunner } from './registry.js';
import { mcpToolName } from './remote-tools.js';
import { fail } from './result.js';

const LOCAL = outboundPolicy({ EDGESTR_ENV: 'development' });
const never = (): AbortSignal => new AbortController().signal;
const PROVIDER = 'b'.repeat(64);

/** A 127.0.0.1 port nothing listens on (one that was free a moment ago). */
async function closedPort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const address = server.address();
  await new Promise<void>((resolve) => server.close(() => resolve()));
  if (address === null || typeof address === 'string') throw new Error('no port');
  return address.port;
}

/** The end of the failed call's text for a tool of servers that could not be used. */
const UNUSED = "could not be used for this run (the agent's owner can see why)";

describe('Registry.run of a tool it does not have', () => {
  it('a tool of an MCP server that could not be reached: a failed call naming the server, not its problem (the owner reads that)', async () => {
    const url = `http://127.0.0.1:${await closedPort()}/mcp`;
    const registry = await buildToolRunner({ tools: ['calculator'], mcp_servers: [{ id: 'srv', url }] }, { mcp: { policy: LOCAL } });
    try {
      expect(registry.problems).toEqual(['MCP server srv: unreachable: fetch failed']);
      expect(await registry.run('srv__echo', { message: 'hi' }, never())).toEqual(fail("tool srv__echo is unavailable: its server srv could not be used for this run (the agent's owner can see why)"));
      // Names of other servers, or not of the <server>__ form, are unknown.
      for (const name of ['srvx__echo', 'srv_echo', 'sr__echo', 'echo']) {
        expect(await registry.run(name, {}, never())).toEqual({
          ok: false,
          unknown: true,
          error: `unknown tool "${name}"`,
          detail: `unknown tool "${name}"; the agent's tool problems: MCP server srv: unreachable: fetch failed`,
        });
      }
      expect(await registry.run('calculator', { expr: '1+1' }, never())).toEqual({ ok: true, output: { stdout: '2', stderr: '', exit_code: 0 } });
    } finally {
      await registry.close();
    }
  });

  it('a tool of a DVMCP server skipped (no relay connection), its name cut as the naming rule cuts it', async () => {
    const long = 'd'.repeat(64);
    const registry = await buildToolRunner({ dvmcp_servers: [{ provider: PROVIDER, server: 'dv' }, { provider: PROVIDER, server: long }] });
    const skipped = 'DVMCP servers skipped: no relay connection for DVMCP here';
    expect(registry.problems).toEqual([skipped]);
    expect(await registry.run('dv__lookup', {}, never())).toEqual(fail(`tool dv__lookup is unavailable: its server dv ${UNUSED}`));
    const cut = mcpToolName(long, 'lookup');
    expect(cut).not.toContain(`${long}__`);
    expect(await registry.run(cut, {}, never())).toEqual(fail(`tool ${cut} is unavailable: its server ${long} ${UNUSED}`));
    // A server id with '.' (allowed for DVMCP) names its tools with '_' there.
    const dotted = await buildToolRunner({ dvmcp_servers: [{ provider: PROVIDER, server: 'weather.v2' }] });
    expect(await dotted.run(mcpToolName('weather.v2', 'forecast'), {}, never())).toEqual(fail(`tool weather_v2__forecast is unavailable: its server weather.v2 ${UNUSED}`));
  });

  it('a name of two unavailable servers names both; a 200 KiB name is shown cut', async () => {
    const port = await closedPort();
    const registry = await buildToolRunner({ mcp_servers: [{ id: 'a', url: `http://127.0.0.1:${port}/a` }, { id: 'a__b', url: `http://127.0.0.1:${port}/b` }] }, { mcp: { policy: LOCAL } });
    try {
      const problem = (id: string) => `MCP server ${id}: unreachable: fetch failed`;
      expect(registry.problems).toEqual([problem('a'), problem('a__b')]);
      expect(await registry.run('a__b__x', {}, never())).toEqual(fail(`tool a__b__x is unavailable: its servers a, a__b ${UNUSED}`));
      const huge = `a__${'x'.repeat(200 * 1024)}`;
      const answer = await registry.run(huge, {}, never());
      expect(answer.ok).toBe(false);
      expect(!answer.ok && answer.error).toBe(`tool a__${'x'.repeat(201)}…[tool name cut: the first 204 of 204803 bytes] is unavailable: its server a ${UNUSED}`);
    } finally {
      await registry.close();
    }
  });

  it('an unknown name without problems has no detail', async () => {
    const registry = await buildToolRunner({ tools: ['calculator'] });
    expect(await registry.run('srv__echo', {}, never())).toEqual({ ok: false, unknown: true, error: 'unknown tool "srv__echo"' });
  });
});
