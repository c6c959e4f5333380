// What a hosted agent's owner is told of its runs' failures (workers/agent/outbox.ts terminalPayload,
// told-to.ts, run-driver.ts): the owner's own run gets the failure's `detail` (a provider's text)
// as its 25805's message, while a stranger's stays generic; and the owner's NIP-AO turn_started
// names the problems of the run's tool set (workers/agent/tools/registry.ts `problems`: here an
// MCP server the agent cannot connect to, on 127.0.0.1:80 where nothing listens), which no client
// is told.
import { describe, expect, it } from 'vitest';
import { Observer, type ObservedFrame } from '../../src/shared/ao-observer.js';
import { NipXxClient, createTestAgent, ownerRelayClient } from './agent-helpers.js';
import { keys, type Keys } from './helpers.js';
import { TEST_OWNER, TEST_OWNER_SK } from './test-keys.js';

const OWNER: Keys = { sk: TEST_OWNER_SK, pk: TEST_OWNER };

/** The terminal event's payload of a prompt `k` sends `agent`. */
async function told(agent: string, k: Keys, prompt: object): Promise<{ kind: number; payload: Record<string, unknown>; run: string }> {
  const c = await NipXxClient.open(agent, k);
  const p = c.prompt(prompt);
  await c.send(p);
  const run = await c.collect(p.id);
  c.sock.close();
  return { kind: run.terminal.kind, payload: run.terminal.payload, run: p.id };
}

/** The owner's NIP-AO frames of `agents` from now on, until stop(). */
async function watchFrames(agents: string[]): Promise<{ frames: ObservedFrame[]; until(ok: () => boolean): Promise<void>; stop(): void }> {
  const relay = ownerRelayClient();
  await relay.connect();
  await relay.authenticate();
  const frames: ObservedFrame[] = [];
  const observer = new Observer({
    ownerSecretKey: TEST_OWNER_SK,
    agents,
    subscribe: (filters, opts) => relay.subscribe(filters, opts),
    publish: (e) => relay.publish(e),
    onFrame: (f) => frames.push(f),
  });
  observer.start();
  await new Promise((r) => setTimeout(r, 100));
  return {
    frames,
    until: async (ok) => {
      for (let i = 0; i < 100 && !ok(); i++) await new Promise((r) => setTimeout(r, 50));
    },
    stop: () => {
      observer.stop();
      relay.close();
    },
  };
}

describe.each(['openai', 'anthropic'] as const)('a %s provider refusing the request (HTTP 401, a bad key)', (provider) => {
  const upstream = provider === 'openai' ? 'HTTP 401: Incorrect API key provided: sk-fake***1234.' : 'HTTP 401: invalid x-api-key';

  it('the owner’s own 25805 carries the provider’s text; a stranger’s stays generic', async () => {
    const agent = await createTestAgent({ provider, models: ['fake-401'] });
    const prompt = { ver: 1, message: 'hi', model: 'fake-401' };
    expect(await told(agent, OWNER, prompt)).toMatchObject({ kind: 25805, payload: { ver: 1, code: 'MODEL_UNAVAILABLE', message: upstream, details: { provider, status: 401 } } });
    const stranger = await told(agent, keys(), prompt);
    expect(stranger).toMatchObject({ kind: 25805 });
    expect(stranger.payload).toEqual({ ver: 1, code: 'MODEL_UNAVAILABLE', message: 'the model provider refused the request; the agent owner can see why', details: { provider, status: 401 } });
  });
});

describe('the tool problems of a run’s tool set', () => {
  it('are in the owner’s turn_started (tool_problems), and absent when there are none', async () => {
    const agent = await createTestAgent({ tools: ['calculator'], mcp_servers: [{ id: 'srv', url: 'http://127.0.0.1/mcp' }] });
    const plain = await createTestAgent({ tools: ['calculator'] });
    const watch = await watchFrames([agent, plain]);
    try {
      const run = await told(agent, keys(), { ver: 1, message: 'hello' });
      expect(run).toMatchObject({ kind: 25803, payload: { text: 'echo: hello' } });
      expect(JSON.stringify(run.payload)).not.toContain('srv');
      const clean = await told(plain, keys(), { ver: 1, message: 'hello' });
      const started = (id: string) => watch.frames.find((f) => f.frame.kind === 'turn_started' && f.frame.channelId === id)?.frame.payload;
      await watch.until(() => started(run.run) !== undefined && started(clean.run) !== undefined);
      expect(started(run.run)).toEqual({ run_id: run.run, model: 'echo', client: expect.any(String), tool_problems: ['MCP server srv: unreachable: Network connection lost.'] });
      expect(started(clean.run)).toEqual({ run_id: clean.run, model: 'echo', client: expect.any(String) });
      // still the run's first frame, its session_resolved the last
      await watch.until(() => watch.frames.some((f) => f.frame.kind === 'session_resolved' && f.frame.channelId === run.run));
      const kinds = watch.frames.filter((f) => f.frame.channelId === run.run).map((f) => f.frame.kind);
      expect([kinds[0], kinds.at(-1)]).toEqual(['turn_started', 'session_resolved']);
    } finally {
      watch.stop();
    }
  });
});
