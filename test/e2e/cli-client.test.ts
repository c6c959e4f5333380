// edgestr/client from a program (the sources the package's `exports` build), end to end against
// the e2e `wrangler dev` instances: NIP-98 management calls with a nonce (identical calls in the
// same second both accepted), a gift-wrapped run cancelled through the library, deltas in order.
import { afterEach, describe, expect, inject, it } from 'vitest';
import { ManagementClient } from '../../src/client/api.js';
import { findAgent } from '../../src/client/agents.js';
import { keyPair, newKeyPair } from '../../src/client/keys.js';
import { AgentConversation } from '../../src/client/run.js';
import { E2E_OWNER_SK } from './e2e-keys.js';

const devUrl = inject('httpUrl');
const agentUrl = inject('agentHttpUrl');
const opened: AgentConversation[] = [];
afterEach(() => {
  for (const c of opened.splice(0)) c.close();
});

async function conversation(url: string, agent: string): Promise<AgentConversation> {
  const target = await findAgent(url, agent);
  if (!target.ok) throw new Error(target.error.message);
  const c = await AgentConversation.open(target.value.relay, target.value.pubkey, newKeyPair());
  if (!c.ok) throw new Error(c.error);
  opened.push(c.value);
  return c.value;
}

describe('edgestr/client', () => {
  it('identical management calls in the same second both succeed (NIP-98 nonce)', async () => {
    const api = new ManagementClient(agentUrl, keyPair(E2E_OWNER_SK));
    const results = await Promise.all([api.listAgents(), api.listAgents(), api.listAgents()]);
    expect(results.map((r) => r.ok)).toEqual([true, true, true]);
  });

  it('management errors are values with the status: unreachable (0), not allowed (403), unknown (404), invalid (422)', async () => {
    expect(await new ManagementClient('http://127.0.0.1:9', newKeyPair()).listAgents()).toMatchObject({ ok: false, error: { status: 0 } });
    expect(await new ManagementClient(agentUrl, newKeyPair()).listAgents()).toMatchObject({ ok: false, error: { status: 403 } });
    const owner = new ManagementClient(agentUrl, keyPair(E2E_OWNER_SK));
    expect(await owner.getAgent('ab'.repeat(32))).toMatchObject({ ok: false, error: { status: 404 } });
    expect(await owner.createAgent({ name: '' })).toMatchObject({ ok: false, error: { status: 422, message: expect.stringContaining('name') } });
  });

  it('a plain run: deltas in seq order, then the response, on the demo agent', async () => {
    const c = await conversation(devUrl, 'demo');
    const seqs: number[] = [];
    let text = '';
    const run = await c.prompt('one two three four five six', { onDelta: (t, seq) => (seqs.push(seq), (text += t)) });
    expect(run.ok).toBe(true);
    const outcome = run.ok ? await run.value.done : undefined;
    expect(outcome).toMatchObject({ kind: 'response', text: 'echo: one two three four five six', usage: { output_tokens: expect.any(Number) } });
    expect(text).toBe('echo: one two three four five six');
    expect(seqs).toEqual(seqs.map((_, i) => i));
    expect(c.problems).toEqual([]);
  });

  it('a gift-wrapped run, cancelled through the handle, ends with CANCELLED', async () => {
    const api = new ManagementClient(agentUrl, keyPair(E2E_OWNER_SK));
    const created = await api.createAgent({ name: 'client lib agent', provider: 'openai', models: ['gpt-e2e', 'fake-slow'] });
    if (!created.ok) throw new Error(created.error.message);
    try {
      const c = await conversation(agentUrl, created.value.pubkey);
      let deltas = 0;
      const run = await c.prompt('slowly, privately', { model: 'fake-slow', wrap: true, onDelta: () => deltas++ });
      if (!run.ok) throw new Error(run.error);
      while (deltas === 0) await new Promise((r) => setTimeout(r, 20));
      expect(await run.value.cancel()).toMatchObject({ ok: true });
      expect(await run.value.done).toEqual({ kind: 'error', code: 'CANCELLED', message: 'run cancelled' });
      expect(c.problems).toEqual([]);
    } finally {
      await api.deleteAgent(created.value.pubkey);
    }
  }, 30_000);

  it('an agent error and a timeout are outcomes, not exceptions', async () => {
    const c = await conversation(devUrl, 'demo');
    const bad = await c.prompt('hi', { model: 'no-such-model' });
    expect(bad.ok && (await bad.value.done)).toMatchObject({ kind: 'error', code: 'UNSUPPORTED_MODEL' });
    const quick = await c.prompt('hi', { timeoutMs: 1 });
    expect(quick.ok && (await quick.value.done)).toEqual({ kind: 'timeout' });
  });
});
