// The Agent DO's `seen` table (workers/agent/run-store.ts) does not grow with what the agent never
// acts on: gift wraps that fail to open, from one client address at the rate its shard lets it
// send, add no persistent row (an in-memory bounded set dedupes them); a prompt that gets a run is
// claimed for good, and each such claim prunes two expired ids. Duplicates are still ignored.
import { env, runInDurableObject } from 'cloudflare:test';
import { describe, expect, it } from 'vitest';
import { createTestAgent, NipXxClient } from './agent-helpers.js';
import { connect, keys, sign } from './helpers.js';
import { TEST_OWNER } from './test-keys.js';

const stubOf = (agent: string) => env.AGENT.get(env.AGENT.idFromName(agent));
const seenRows = (agent: string) => runInDurableObject(stubOf(agent), (_i, s) => s.storage.sql.exec<{ n: number }>('SELECT count(*) AS n FROM seen').one().n);

describe('agent seen ids', () => {
  it('a flood of junk gift wraps from one address adds no persistent row; the prompt after them is claimed once; duplicates are ignored', async () => {
    const agent = await createTestAgent();
    const client = await NipXxClient.open(agent, keys());
    // The agent is subscribed once a first prompt is answered.
    const first = client.prompt({ ver: 1, message: 'warm up' });
    await client.send(first);
    expect((await client.collect(first.id)).terminal.kind).toBe(25803);
    const before = await seenRows(agent);

    const sock = await connect(`/r/${TEST_OWNER}`, { 'CF-Connecting-IP': '203.0.113.7' });
    /** Publishes `e`, waiting for the address's bucket to refill while the shard answers rate-limited. */
    const publish = async (e: Parameters<typeof sock.publish>[0]): Promise<boolean> => {
      for (;;) {
        const ok = await sock.publish(e);
        if (ok[2] || !String(ok[3]).startsWith('rate-limited')) return ok[2];
        await new Promise((r) => setTimeout(r, 50));
      }
    };
    const N = 150;
    for (let n = 0; n < N; n++) expect(await publish(sign(keys(), { kind: 21059, tags: [['p', agent]], content: `junk ${n}` }))).toBe(true);
    // A gift-wrapped prompt after the junk, on the same connection: once it is answered, the junk was handled.
    const { wrap, rumorId } = client.wrappedPrompt({ ver: 1, message: 'after the junk' });
    expect(await publish(wrap)).toBe(true);
    expect((await client.collect(rumorId, 15_000)).terminal.kind).toBe(25803);
    // Only the rumor that got a run is kept (the wrap's own id is not).
    expect((await seenRows(agent)) - before).toBe(1);

    // Duplicates: the same wrap and the same plain prompt again start nothing.
    expect(await publish(wrap)).toBe(true);
    await client.send(first);
    expect(await client.noTerminal(rumorId, 600)).toBe(true);
    expect(await client.noTerminal(first.id, 10)).toBe(true);
    expect(await runInDurableObject(stubOf(agent), (_i, s) => s.storage.sql.exec<{ n: number }>('SELECT count(*) AS n FROM runs').one().n)).toBe(2);
  }, 60_000);

  it('each persisted claim prunes two expired ids', async () => {
    const agent = await createTestAgent();
    const client = await NipXxClient.open(agent, keys());
    const warm = client.prompt({ ver: 1, message: 'warm up' });
    await client.send(warm);
    await client.collect(warm.id);
    await runInDurableObject(stubOf(agent), (_i, s) => {
      for (let i = 0; i < 10; i++) s.storage.sql.exec('INSERT INTO seen (id, at) VALUES (?, 0)', `expired-${i}`);
    });
    const before = await seenRows(agent);
    const p = client.prompt({ ver: 1, message: 'one more' });
    await client.send(p);
    expect((await client.collect(p.id)).terminal.kind).toBe(25803);
    // +1 for the prompt, -2 expired ones
    expect(await seenRows(agent)).toBe(before - 1);
  });
});
