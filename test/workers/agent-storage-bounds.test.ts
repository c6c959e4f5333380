// A hosted agent's own storage is bounded (workers/agent/sessions.ts, run-store.ts). A public echo
// agent prompted by strangers with large prompts (no whitespace: echo counted whitespace tokens,
// so each run cost about one token; it now counts 4 bytes per token) kept each conversation (prompt and echoed answer) 30 days and
// each run's terminal event 7 days, without limit: ~9 GB a day filled the object's storage, after
// which every insert failed and the agent was dead until retention caught up. Now the history of
// all conversations is kept within a byte bound (least recently used conversations forgotten
// first, every stranger's before the owner's), and a run's terminal event is kept only while it
// may still be sent: cleared once a relay took it or refused it for good, or past the resend window.
import { env, runDurableObjectAlarm, runInDurableObject } from 'cloudflare:test';
import { describe, expect, it } from 'vitest';
import type { Agent } from '../../workers/agent/agent-do.js';
import { RESEND_WINDOW_MS } from '../../workers/agent/outbox.js';
import { createTestAgent, NipXxClient } from './agent-helpers.js';
import { keys, sign } from './helpers.js';
import { TEST_OWNER, TEST_OWNER_SK } from './test-keys.js';

const stubOf = (agent: string) => env.AGENT.get(env.AGENT.idFromName(agent));
/** A lowered history bound: three strangers' conversations of one large turn each fit, not four. */
const BOUND = 200_000;
/** A prompt near the default max_prompt_bytes (32,000): 7,500 tokens, which echo answers whole within max_output_tokens 8,000. */
const LARGE = 'x'.repeat(30_000);

/** What the agent keeps of its conversations: the history's message characters, and each sender's sessions. */
const historyOf = (agent: string) =>
  runInDurableObject(stubOf(agent), (_i, state) => {
    const sql = state.storage.sql;
    return {
      chars: sql.exec<{ n: number | null }>('SELECT sum(length(message)) AS n FROM history').one().n ?? 0,
      senders: sql.exec<{ sender: string }>('SELECT DISTINCT sender FROM history').toArray().map((r) => r.sender),
      owner: sql
        .exec<{ message: string }>("SELECT message FROM history WHERE sender = ? AND session = 'mine' ORDER BY idx", TEST_OWNER)
        .toArray()
        .map((r) => (JSON.parse(r.message) as { content: string }).content),
    };
  });

describe('conversation history is bounded per agent', () => {
  it('large prompts from fresh keys keep the history within the bound; the least recently used strangers’ conversations go first, the owner’s older one stays', { timeout: 60_000 }, async () => {
    const agent = await createTestAgent({ limits: { max_output_tokens: 8_000 } });
    await runInDurableObject(stubOf(agent), (i) => void ((i as Agent).maxHistoryBytes = BOUND));
    // The owner's conversation is the oldest: plain least-recently-used would forget it first.
    const owner = await NipXxClient.open(agent, { sk: TEST_OWNER_SK, pk: TEST_OWNER });
    const mine = owner.prompt({ ver: 1, message: 'my word is heron' }, { session: 'mine' });
    await owner.send(mine);
    expect((await owner.collect(mine.id)).terminal.payload['text']).toBe('echo: my word is heron');
    const strangers: string[] = [];
    for (let n = 0; n < 8; n++) {
      const c = await NipXxClient.open(agent, keys());
      const p = c.prompt({ ver: 1, message: LARGE });
      await c.send(p);
      const run = await c.collect(p.id, 15_000);
      expect(run.terminal.kind).toBe(25803);
      expect(run.terminal.payload['text']).toBe(`echo: ${LARGE}`);
      strangers.push(c.k.pk);
      c.sock.close();
    }
    const kept = await historyOf(agent);
    expect(kept.chars).toBeLessThanOrEqual(BOUND);
    expect(kept.owner).toEqual(['my word is heron', 'echo: my word is heron']);
    // The newest strangers' conversations are those kept (at least two of ~61 KB fit).
    const others = kept.senders.filter((s) => s !== TEST_OWNER);
    expect(others.length).toBeGreaterThanOrEqual(2);
    expect(new Set(others)).toEqual(new Set(strangers.slice(-others.length)));
    // The owner's conversation goes on with its context.
    const next = owner.prompt({ ver: 1, message: 'what was my word?' }, { session: 'mine' });
    await owner.send(next);
    expect((await owner.collect(next.id)).terminal.kind).toBe(25803);
    expect((await historyOf(agent)).owner).toEqual(['my word is heron', 'echo: my word is heron', 'what was my word?', 'echo: what was my word?']);
  });
});

describe('a run’s terminal event is kept only while it may still be sent', () => {
  it('cleared once a relay took it, once it is not to be sent again (expired unsent) and past the resend window; kept while it may be sent', { timeout: 30_000 }, async () => {
    const agent = await createTestAgent();
    const c = await NipXxClient.open(agent);
    const p = c.prompt({ ver: 1, message: LARGE });
    await c.send(p);
    expect((await c.collect(p.id)).terminal.kind).toBe(25803);
    const row = (id: string) =>
      runInDurableObject(stubOf(agent), (_i, state) =>
        state.storage.sql.exec<{ published: number; kept: number }>('SELECT published, terminal IS NOT NULL AS kept FROM runs WHERE id = ?', id).one(),
      );
    // The relay's OK may reach the agent just after the client got the event.
    for (let i = 0; i < 50 && (await row(p.id)).published === 0; i++) await new Promise((r) => setTimeout(r, 50));
    expect(await row(p.id)).toEqual({ published: 1, kept: 0 });
    // Runs whose terminal events were not taken (any valid event stands for one), on the relay the real run used.
    const writer = keys();
    const t = Date.now();
    const stub = stubOf(agent);
    const rows = () =>
      runInDurableObject(stub, (_i, state) =>
        state.storage.sql
          .exec<{ id: string; published: number; refused: string | null; kept: number }>(
            "SELECT id, published, refused, terminal IS NOT NULL AS kept FROM runs WHERE id LIKE 'unsent-%' ORDER BY id",
          )
          .toArray(),
      );
    await runInDurableObject(stub, (instance, state) => {
      const i = instance as Agent;
      const sql = state.storage.sql;
      i.now = () => t;
      const relay = sql.exec<{ relay: string }>('SELECT relay FROM runs WHERE id = ?', p.id).one().relay;
      const run = (id: string, finished: number, tags: string[][] = []) =>
        sql.exec(
          "INSERT INTO runs (id, client, session, wrapped, relay, state, terminal, published, started_at, finished_at) VALUES (?, ?, 's', 0, ?, 'done', ?, 0, ?, ?)",
          id,
          writer.pk,
          relay,
          JSON.stringify(sign(writer, { content: id, tags })),
          finished,
          finished,
        );
      run('unsent-recent', t - 1000);
      run('unsent-expired', t - 2000, [['expiration', String(Math.floor(t / 1000) - 10)]]);
      run('unsent-old', t - RESEND_WINDOW_MS - 1000);
      i.prune();
    });
    // Past the resend window it is never sent again (outbox.ts): retention clears it; the others may still be sent.
    expect(await rows()).toEqual([
      { id: 'unsent-expired', published: 0, refused: null, kept: 1 },
      { id: 'unsent-old', published: 0, refused: null, kept: 0 },
      { id: 'unsent-recent', published: 0, refused: null, kept: 1 },
    ]);
    // The watchdog sends the recent one again (the relay takes it) and records the expired one unsent: neither keeps its event.
    expect(await runDurableObjectAlarm(stub)).toBe(true);
    expect(await rows()).toEqual([
      { id: 'unsent-expired', published: 0, refused: 'expired: its NIP-40 expiration passed before a relay took it', kept: 0 },
      { id: 'unsent-old', published: 0, refused: null, kept: 0 },
      { id: 'unsent-recent', published: 1, refused: null, kept: 0 },
    ]);
  });
});
