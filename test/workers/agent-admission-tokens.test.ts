// A prompt is admitted only when the day's token budget leaves room for what its first model call
// will ask, as far as that is known before decryption (admission.ts promptAsk: the system prompt,
// the encrypted content at 3 bytes per 4 base64 characters and 4 bytes per token, and 256 tokens of
// answer). Before, admission checked only that the budget was not used up: a prompt too large for
// what was left got a run row, was decrypted, recorded (metering, the owner's plan) and refused at
// its first model call having spent nothing, 60 such runs a minute from strangers.
import { env, runInDurableObject } from 'cloudflare:test';
import { describe, expect, it } from 'vitest';
import { ConversationKeyCache, encrypt } from '../../src/shared/nip44.js';
import type { Agent } from '../../workers/agent/agent-do.js';
import { promptAsk } from '../../workers/agent/admission.js';
import { DEFAULT_LIMITS } from '../../workers/agent/config.js';
import { estimateTokens } from '../../workers/agent/sessions.js';
import { createTestAgent, NipXxClient } from './agent-helpers.js';
import { keys } from './helpers.js';
import { TEST_OWNER, TEST_OWNER_SK } from './test-keys.js';

const stubOf = (agent: string) => env.AGENT.get(env.AGENT.idFromName(agent));
const T0 = Date.UTC(2026, 0, 10, 12, 0, 0);
/** Freezes the agent's clock (the token day) at `t` (ms). */
const freeze = (agent: string, t: number) => runInDurableObject(stubOf(agent), (i) => void ((i as Agent).now = () => t));
/** The agent has spent `tokens` on the day of T0. */
const spent = (agent: string, tokens: number) =>
  runInDurableObject(stubOf(agent), (_i, s) => void s.storage.sql.exec('INSERT INTO token_usage (day, tokens) VALUES (?, ?)', '2026-01-10', tokens));
const runRows = (agent: string, id: string) => runInDurableObject(stubOf(agent), (_i, s) => s.storage.sql.exec<{ n: number }>('SELECT count(*) AS n FROM runs WHERE id = ?', id).one().n);

describe('token budget at admission', () => {
  it('a prompt whose estimate and answer room pass what the day leaves is refused at admission: no run, no metering; a small prompt still runs', async () => {
    const agent = await createTestAgent({ limits: { max_tokens_per_day: 2000 } });
    await freeze(agent, T0);
    await spent(agent, 1000);
    const c = await NipXxClient.open(agent);
    const big = c.prompt({ ver: 1, message: 'x'.repeat(4000) });
    // 4,000 bytes of message: 5,552 characters of NIP-44 payload, 1,041 tokens; with 256 of answer over the 1,000 left.
    const estimate = Math.ceil((big.content.length * 3) / 16);
    expect(estimate).toBe(1041);
    await c.send(big);
    // A stranger is told no figure; the owner, sending the same, the estimate and the budget (told-to.ts).
    expect((await c.collect(big.id)).terminal.payload).toEqual({ ver: 1, code: 'RATE_LIMIT', message: 'this agent reached its model budget for today (UTC)', retry_after: 12 * 3600 });
    const owner = await NipXxClient.open(agent, { sk: TEST_OWNER_SK, pk: TEST_OWNER });
    const same = owner.prompt({ ver: 1, message: 'x'.repeat(4000) });
    expect(Math.ceil((same.content.length * 3) / 16)).toBe(estimate);
    await owner.send(same);
    expect((await owner.collect(same.id)).terminal.payload).toEqual({
      ver: 1,
      code: 'RATE_LIMIT',
      message: `this prompt (about ${estimate} input tokens and at least 256 for its answer) would exceed this agent’s model budget of 2000 tokens for today (UTC)`,
      retry_after: 12 * 3600,
    });
    expect(await runRows(agent, same.id)).toBe(0);
    expect(await runRows(agent, big.id)).toBe(0);
    expect(await stubOf(agent).usage()).toEqual([]);

    const d = await NipXxClient.open(agent);
    const p = d.prompt({ ver: 1, message: 'hi' });
    await d.send(p);
    expect((await d.collect(p.id)).terminal.kind).toBe(25803);
    expect((await stubOf(agent).usage()).map((r) => r.run_id)).toEqual([p.id]);
  });

  it('the estimate is never below the first call’s estimate of the message (a large prompt cannot pass as small); above it by the padding, about 25 tokens and the JSON escapes', () => {
    const [a, b] = [keys(), keys()];
    const key = new ConversationKeyCache(2).get(a.sk, b.pk);
    const c = { system_prompt: 'You are terse.', limits: { ...DEFAULT_LIMITS, max_output_tokens: 100 } };
    const system = estimateTokens({ role: 'system', content: c.system_prompt });
    const asked = (message: string) => promptAsk(c, encrypt(JSON.stringify({ ver: 1, message }), key).length);
    for (const message of ['x', 'x'.repeat(31), 'x'.repeat(257), 'é'.repeat(3000), '語'.repeat(10_000), 'w '.repeat(16_000)]) {
      const ask = asked(message);
      const own = estimateTokens({ role: 'user', content: message });
      expect(ask).toMatchObject({ answer: 100, prompt: true });
      expect(ask.input - system).toBeGreaterThanOrEqual(own);
      expect(ask.input - system).toBeLessThanOrEqual(1.25 * own + 25);
    }
    // Escaped characters take two bytes of JSON for one of message: about twice the message's estimate.
    const escaped = '"\n'.repeat(2000);
    expect(asked(escaped).input - system).toBe(2065);
    expect(estimateTokens({ role: 'user', content: escaped })).toBe(1004);
    expect(promptAsk({ limits: DEFAULT_LIMITS }, 0)).toEqual({ input: 0, answer: 256, prompt: true });
  });
});
