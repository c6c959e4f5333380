// The agent's structured log (workers/agent/agent-log.ts): lifecycle lines and one `agent.run` line
// per run, read from console.log of this isolate (the Agent Durable Objects run in it), with the
// fields checked and no prompt text, system prompt, answer or key in any line.
import { afterEach, beforeEach, describe, expect, it, vi, type MockInstance } from 'vitest';
import { AgentLifecycleLogSchema, AgentRunLogSchema } from '../../workers/agent/agent-log.js';
import { api } from './api-helpers.js';
import { NipXxClient, createTestAgent } from './agent-helpers.js';
import { TEST_OWNER, TEST_OWNER_SK } from './test-keys.js';

const SECRET_WORDS = ['PROMPT-SENTINEL-7f3a', 'SYSTEM-SENTINEL-91c2', 'sk-test-fake', 'sk-ant-test-fake', 'Tool result', 'Paris'];

let spy: MockInstance<typeof console.log>;
beforeEach(() => {
  spy = vi.spyOn(console, 'log');
});
afterEach(() => {
  spy.mockRestore();
});

/** The JSON lines logged so far (other console.log output is skipped). */
const jsonLines = (): Array<Record<string, unknown>> =>
  spy.mock.calls.flatMap((args) => {
    if (args.length !== 1 || typeof args[0] !== 'string' || !args[0].startsWith('{')) return [];
    return [JSON.parse(args[0]) as Record<string, unknown>];
  });

async function waitForLine(match: (l: Record<string, unknown>) => boolean, timeoutMs = 8000): Promise<Record<string, unknown>> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const found = jsonLines().find(match);
    if (found) return found;
    if (Date.now() > deadline) throw new Error(`no such log line; logged: ${JSON.stringify(jsonLines())}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

describe('agent log lines', () => {
  it('each relay connection is set up once (one agent.connected line per relay, not one per caller)', async () => {
    const agent = await createTestAgent({});
    const c = await NipXxClient.open(agent);
    const p = c.prompt({ ver: 1, message: 'hello' });
    await c.send(p);
    expect((await c.collect(p.id)).terminal.kind).toBe(25803);
    await waitForLine((l) => l['msg'] === 'agent.connected' && l['agent'] === agent);
    await new Promise((r) => setTimeout(r, 500));
    const relays = jsonLines().filter((l) => l['msg'] === 'agent.connected' && l['agent'] === agent).map((l) => l['relay']);
    expect(relays.length).toBeGreaterThanOrEqual(1);
    expect(new Set(relays).size).toBe(relays.length);
  });

  it('a run with a tool call: one agent.run line with the counts and the outcome, nothing of the content', async () => {
    const agent = await createTestAgent({ provider: 'openai', models: ['fake-tool'], tools: ['calculator'], system_prompt: SECRET_WORDS[1] });
    expect(AgentLifecycleLogSchema.parse(await waitForLine((l) => l['msg'] === 'agent.created' && l['agent'] === agent))).toEqual({
      msg: 'agent.created',
      agent,
      owner: TEST_OWNER,
    });
    const c = await NipXxClient.open(agent);
    const connected = await waitForLine((l) => l['msg'] === 'agent.connected' && l['agent'] === agent);
    expect(AgentLifecycleLogSchema.parse(connected).relay).toMatch(/^ws:\/\/relay\.test\/(r\/[0-9a-f]{64})?$/);
    const p = c.prompt({ ver: 1, message: `${SECRET_WORDS[0]} what is 2+2?` });
    await c.send(p);
    const run = await c.collect(p.id);
    expect(run.terminal.kind).toBe(25803);
    const line = AgentRunLogSchema.parse(await waitForLine((l) => l['msg'] === 'agent.run' && l['run'] === p.id));
    expect(line).toEqual({
      msg: 'agent.run',
      agent,
      run: p.id,
      provider: 'openai',
      model: 'fake-tool',
      input_tokens: (run.terminal.payload['usage'] as { input_tokens: number }).input_tokens,
      output_tokens: (run.terminal.payload['usage'] as { output_tokens: number }).output_tokens,
      tool_calls: 1,
      duration_ms: expect.any(Number),
      outcome: 'response',
    });
    expect(line.input_tokens).toBeGreaterThan(0);
    expect(line.duration_ms).toBeGreaterThanOrEqual(0);
    expect(jsonLines().filter((l) => l['run'] === p.id)).toHaveLength(1);
    const everything = spy.mock.calls.map((a) => a.map(String).join(' ')).join('\n');
    for (const word of SECRET_WORDS) expect(everything).not.toContain(word);
    expect(everything).not.toMatch(/nsec1|"sk"|sealed/);
    c.sock.close();

    expect((await api(TEST_OWNER_SK, 'DELETE', `/api/agents/${agent}`)).status).toBe(204);
    expect(await waitForLine((l) => l['msg'] === 'agent.removed' && l['agent'] === agent)).toEqual({ msg: 'agent.removed', agent, owner: TEST_OWNER });
  });

  it('a failed run logs its NIP-XX error code as the outcome', async () => {
    const agent = await createTestAgent({ provider: 'openai', models: ['fake-400'] });
    const c = await NipXxClient.open(agent);
    const p = c.prompt({ ver: 1, message: SECRET_WORDS[0] });
    await c.send(p);
    const run = await c.collect(p.id);
    expect(run.terminal.kind).toBe(25805);
    const line = AgentRunLogSchema.parse(await waitForLine((l) => l['msg'] === 'agent.run' && l['run'] === p.id));
    expect(line).toMatchObject({ agent, provider: 'openai', model: 'fake-400', tool_calls: 0, outcome: run.terminal.payload['code'] });
    expect(line.outcome).not.toBe('response');
    c.sock.close();
  });
});
