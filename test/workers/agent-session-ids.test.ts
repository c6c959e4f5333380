// Session ids the hosted agent keeps in SQLite (workers/agent/sessions.ts, run-store.ts): a prompt's
// `s` tag and a DVMCP ask's `session` argument. Text with a lone surrogate (`"chat\ud800"`) has no
// UTF-8 form: SQLite stores its WTF-8 bytes and gives them back as U+FFFD each ("chat\ufffd\ufffd\ufffd"
// for "chat\ud800" and "chat\ud801" alike), so a key read back matches no row (retention's DELETE
// by the key it read removed nothing, and such rows filled every prune batch for ever) and the run's
// events carried an `s` tag the client did not send. Such a session is refused before any run, with
// the error the agent answers a malformed prompt (INVALID_SCHEMA; -32602 for an ask), and no
// conversation is kept under it; those stored before are pruned like any other.
import { env, runInDurableObject } from 'cloudflare:test';
import { describe, expect, it } from 'vitest';
import type { Agent } from '../../workers/agent/agent-do.js';
import { createTestAgent, NipXxClient } from './agent-helpers.js';
import { announcements, DvmcpClient } from './bridge-helpers.js';
import { keys } from './helpers.js';
import { TEST_OWNER } from './test-keys.js';

const OWNER_SHARD = `/r/${TEST_OWNER}`;
const stubOf = (agent: string) => env.AGENT.get(env.AGENT.idFromName(agent));

/** The conversations the agent keeps for `sender`: session and turns. */
const conversationsOf = (agent: string, sender: string) =>
  runInDurableObject(stubOf(agent), (_i, state) =>
    state.storage.sql.exec<{ session: string; turns: number }>('SELECT session, turns FROM conversations WHERE sender = ? ORDER BY session', sender).toArray(),
  );

describe('a prompt’s s tag with a lone surrogate', () => {
  it('is answered INVALID_SCHEMA "the session id (s tag) must be valid Unicode…" without a run, under the default session; no conversation is kept', async () => {
    const agent = await createTestAgent();
    const client = await NipXxClient.open(agent);
    const p = client.prompt({ ver: 1, message: 'my word is heron' }, { session: 'chat\ud800' });
    await client.send(p);
    const run = await client.collect(p.id);
    expect(run.terminal.kind).toBe(25805);
    expect(run.terminal.payload).toEqual({ ver: 1, code: 'INVALID_SCHEMA', message: 'the session id (s tag) must be valid Unicode (it has a lone surrogate)' });
    expect(run.deltas).toEqual([]);
    expect(run.terminal.event.tags.find((t) => t[0] === 's')?.[1]).toBe(`sender:${client.k.pk}`);
    expect(await conversationsOf(agent, client.k.pk)).toEqual([]);
    // A valid session of the same sender still runs (the refusal was about the tag, not the sender).
    const q = client.prompt({ ver: 1, message: 'hello' }, { session: 'chat' });
    await client.send(q);
    expect((await client.collect(q.id)).terminal).toMatchObject({ kind: 25803, payload: { text: 'echo: hello' } });
    expect(await conversationsOf(agent, client.k.pk)).toEqual([{ session: 'chat', turns: 1 }]);
  });
});

describe('a DVMCP ask’s session with a lone surrogate', () => {
  it('is answered -32602 "Invalid arguments for ask: session: session must be valid Unicode…"; no conversation is kept', async () => {
    const agent = await createTestAgent({ dvmcp: { enabled: true } });
    const c = await DvmcpClient.open(agent, OWNER_SHARD, keys());
    await announcements(agent, [31316], (es) => es.length > 0, OWNER_SHARD);
    const answer = await c.call('tools/call', { name: 'ask', arguments: { message: 'my word is heron', session: 'chat\udc01' } });
    expect(answer.result).toEqual({ ok: false, error: { code: -32602, message: 'Invalid arguments for ask: session: session must be valid Unicode (it has a lone surrogate)' } });
    expect(await conversationsOf(agent, c.k.pk)).toEqual([]);
    c.close();
  });
});

describe('conversations stored with a lone surrogate before it was refused', () => {
  it('are pruned like any other: 501 of them do not keep the watchdog from the stale conversation after them', async () => {
    const agent = await createTestAgent();
    const day = 86_400_000;
    const left = await runInDurableObject(stubOf(agent), (instance, state) => {
      const i = instance as Agent;
      const sql = state.storage.sql;
      const t = Date.UTC(2026, 0, 10, 12, 0, 0);
      i.now = () => t;
      // More than one prune batch (500) of them, older than (and sorted before) a plain stale one.
      for (let n = 0; n < 501; n++) {
        const session = `chat${String.fromCharCode(0xd800 + n)}`;
        sql.exec('INSERT INTO conversations (sender, session, turns, touched_at) VALUES (?, ?, 1, ?)', 'a', session, t - 40 * day);
        sql.exec("INSERT INTO history (sender, session, idx, turn, message, tokens) VALUES ('a', ?, 0, 'r', '{}', 1)", session);
      }
      sql.exec("INSERT INTO conversations (sender, session, turns, touched_at) VALUES ('b', 'plain', 1, ?), ('b', 'recent', 1, ?)", t - 31 * day, t - day);
      sql.exec("INSERT INTO history (sender, session, idx, turn, message, tokens) VALUES ('b', 'plain', 0, 'r', '{}', 1), ('b', 'recent', 0, 'r', '{}', 1)");
      i.prune();
      i.prune();
      const rows = (table: string) => ({
        surrogates: sql.exec<{ n: number }>(`SELECT count(*) AS n FROM ${table} WHERE sender = 'a'`).one().n,
        plain: sql.exec<{ session: string }>(`SELECT session FROM ${table} WHERE sender = 'b' ORDER BY session`).toArray().map((r) => r.session),
      });
      return { conversations: rows('conversations'), history: rows('history') };
    });
    expect(left).toEqual({ conversations: { surrogates: 0, plain: ['recent'] }, history: { surrogates: 0, plain: ['recent'] } });
  });
});
