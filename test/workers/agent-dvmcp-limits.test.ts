// The agent's DVMCP server under the bridge's rules (workers/agent/dvmcp-server.ts over the common
// dispatcher): a private server (public: false) is reached only by a request naming it in `s`, and
// error answers are bounded (a bad request counts as one of the client's 30 requests a minute; a
// refusal is answered once until the retry time it gave; ErrorAnswers caps them all).
import { describe, expect, it } from 'vitest';
import { RPC } from '../../src/shared/dvmcp.js';
import { createTestAgent } from './agent-helpers.js';
import { announcements, DvmcpClient, expectErrorBudget, floodWithBadRequests } from './bridge-helpers.js';
import { TEST_OWNER } from './test-keys.js';

const OWNER_SHARD = `/r/${TEST_OWNER}`;
const INIT = { protocolVersion: '2025-03-26', capabilities: {}, clientInfo: { name: 't', version: '1' } };

/** An agent with its DVMCP server on (`settings`), listening; a stranger's client on the owner's shard. */
async function agentAndClient(settings: object): Promise<{ agent: string; c: DvmcpClient }> {
  const agent = await createTestAgent({ dvmcp: { enabled: true, ...settings } });
  const c = await DvmcpClient.open(agent, OWNER_SHARD);
  // The agent listens once it published its ai.info.
  await announcements(agent, [31340], (es) => es.length > 0, OWNER_SHARD);
  return { agent, c };
}

describe('the agent’s DVMCP server', () => {
  it('private (public: false): a request without s is answered as by a provider with no servers; with s it works', async () => {
    const { c } = await agentAndClient({ public: false, server_id: 'hidden' });
    const none = { ok: false, error: { code: RPC.INVALID_PARAMS, message: 'this provider runs no servers' } };
    const init = await c.call('initialize', INIT);
    expect(init.result).toEqual(none);
    expect(init.tags.some((t) => t[0] === 'd')).toBe(false);
    expect((await c.call('tools/list')).result).toEqual(none);
    expect((await c.call('tools/call', { name: 'ask', arguments: { message: 'hi' } })).result).toEqual(none);

    const named = await c.call('initialize', INIT, { s: 'hidden' });
    expect(named.tags).toContainEqual(['d', 'hidden']);
    expect((await c.call('tools/list', undefined, { s: 'hidden' })).result).toEqual({ ok: true, value: { tools: [expect.objectContaining({ name: 'ask' })] } });
    c.close();
  });

  it('a public server still answers requests without s', async () => {
    const { c } = await agentAndClient({});
    expect((await c.call('tools/list')).result).toEqual({ ok: true, value: { tools: [expect.objectContaining({ name: 'ask' })] } });
    c.close();
  });

  it('a flood of bad requests from one key: 30 error answers a minute, one rate-limited refusal, the rest unanswered', async () => {
    const { agent, c } = await agentAndClient({});
    expectErrorBudget(await floodWithBadRequests(c, agent));
    c.close();
  });
});
