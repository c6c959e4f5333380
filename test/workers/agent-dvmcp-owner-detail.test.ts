// What the agent's own owner is told of its DVMCP asks (workers/agent/dvmcp-server.ts, told-to.ts):
// a failed run is isError content "<NIP-XX code>: <message>", where the owner's own ask gets the
// failure's `detail` as the message (a provider's text; at most OWNER_MESSAGE_MAX_BYTES), as its
// NIP-XX prompts do in their 25805 (agent-owner-errors.test.ts), and a stranger's ask the generic
// message. Before, every ask got the generic message, the owner's too. A refusal at admission (a
// JSON-RPC error) is told so too (admission.ts toldTo): the owner's -32029 names the figures. Only
// in an answer encrypted to the owner (a wrapped request): a plain answer (kind 26910) is readable
// by anyone on the relay, so a plain ask of the owner gets what a stranger gets (before, the detail
// went out in the clear).
import { describe, expect, it } from 'vitest';
import { createTestAgent } from './agent-helpers.js';
import { announcements, DvmcpClient } from './bridge-helpers.js';
import { keys, type Keys } from './helpers.js';
import type { Form } from '../../src/shared/dvmcp-wrap.js';
import { TEST_OWNER, TEST_OWNER_SK } from './test-keys.js';

const OWNER: Keys = { sk: TEST_OWNER_SK, pk: TEST_OWNER };
const OWNER_SHARD = `/r/${TEST_OWNER}`;

/** The answer to an ask `k` sends the agent over DVMCP, wrapped (encrypted to the agent, answered so) unless `form` says otherwise. */
async function ask(agent: string, k: Keys, message: string, form: Form = 'wrapped'): Promise<unknown> {
  const c = await DvmcpClient.open(agent, OWNER_SHARD, k);
  try {
    return (await c.call('tools/call', { name: 'ask', arguments: { message } }, { timeoutMs: 15_000, form })).result;
  } finally {
    c.close();
  }
}

/** An agent with its DVMCP server on, once it listens (its announcement is on the owner's shard). */
async function dvmcpAgent(body: object): Promise<string> {
  const agent = await createTestAgent({ dvmcp: { enabled: true }, ...body });
  await announcements(agent, [31316], (es) => es.length > 0, OWNER_SHARD);
  return agent;
}

const failed = (text: string) => ({ ok: true, value: { content: [{ type: 'text', text }], isError: true } });

describe.each(['openai', 'anthropic'] as const)('a %s provider refusing the ask’s model call (HTTP 401, a bad key)', (provider) => {
  const upstream = provider === 'openai' ? 'HTTP 401: Incorrect API key provided: sk-fake***1234.' : 'HTTP 401: invalid x-api-key';

  it('the owner’s own ask is told the provider’s text; a stranger’s stays generic, and so does the owner’s plain ask (its answer is public)', async () => {
    const agent = await dvmcpAgent({ provider, models: ['fake-401'] });
    const generic = failed('MODEL_UNAVAILABLE: the model provider refused the request; the agent owner can see why');
    expect(await ask(agent, OWNER, 'hi')).toEqual(failed(`MODEL_UNAVAILABLE: ${upstream}`));
    expect(await ask(agent, keys(), 'hi')).toEqual(generic);
    expect(await ask(agent, OWNER, 'hi in the clear', 'plain')).toEqual(generic); // another text: the same one would be the wrapped ask's rumor again (one id)
  });
});

describe('a refusal at admission (the agent’s daily token budget)', () => {
  it('the owner’s -32029 names the figures; a stranger’s names none, nor does the owner’s plain ask’s', async () => {
    const agent = await dvmcpAgent({ limits: { max_tokens_per_day: 10 } });
    expect(await ask(agent, OWNER, 'hi')).toEqual({
      ok: false,
      error: { code: -32029, message: expect.stringMatching(/^rate-limited: this prompt \(about \d+ input tokens and at least \d+ for its answer\) would exceed this agent’s model budget of 10 tokens for today \(UTC\); retry in \d+ s$/) },
    });
    const generic = { ok: false, error: { code: -32029, message: expect.stringMatching(/^rate-limited: this agent reached its model budget for today \(UTC\); retry in \d+ s$/) } };
    expect(await ask(agent, keys(), 'hi')).toEqual(generic);
    // A refusal is answered once per sender per window: the owner's plain ask goes to another such agent.
    const other = await dvmcpAgent({ limits: { max_tokens_per_day: 10 } });
    expect(await ask(other, OWNER, 'hi', 'plain')).toEqual(generic);
  });
});
