// Session history: per (sender, s), appended per turn, trimmed by whole oldest turns to max_context_tokens; all conversations within maxBytes.
import { env, runInDurableObject } from 'cloudflare:test';
import { describe, expect, it } from 'vitest';
import { estimateTokens, SessionStore } from '../../workers/agent/sessions.js';
import type { ChatMessage } from '../../workers/agent/providers/types.js';

const A = { sender: 'a'.repeat(64), session: 'a' };
const B = { sender: 'a'.repeat(64), session: 'b' };
const T = { sender: 'a'.repeat(64), session: 't' };
const OWNER = 'o'.repeat(64);

const turn = (n: number, size = 40): ChatMessage[] => [
  { role: 'user', content: `question ${n} `.padEnd(size, '.') },
  { role: 'assistant', content: `answer ${n} `.padEnd(size, '.') },
];

describe('estimateTokens', () => {
  it('counts 4 bytes of UTF-8 per token (plus 4 per message): CJK text counts about a token per character, not a quarter', () => {
    expect(estimateTokens({ role: 'user', content: 'a'.repeat(400) })).toBe(104);
    expect(estimateTokens({ role: 'user', content: '語'.repeat(400) })).toBe(304);
    expect(estimateTokens({ role: 'assistant', content: '', tool_calls: [{ id: 'c', name: 'x', arguments: '"é"' }] })).toBe(
      Math.ceil(new TextEncoder().encode(JSON.stringify([{ id: 'c', name: 'x', arguments: '"é"' }])).length / 4) + 4,
    );
  });
});

describe('SessionStore', () => {
  it('keeps sessions apart, trims whole oldest turns, and never exceeds the budget', async () => {
    const stub = env.AGENT.get(env.AGENT.newUniqueId());
    await runInDurableObject(stub, (_i, state) => {
      const s = new SessionStore(state.storage.sql);
      const perTurn = turn(0).reduce((n, m) => n + estimateTokens(m), 0);
      const budget = perTurn * 3;
      for (let n = 0; n < 5; n++) s.append(A, `run${n}`, turn(n), { maxTokens: budget, owner: OWNER });
      s.append(B, 'other', turn(99), { maxTokens: budget, owner: OWNER });
      const a = s.load(A).map((m) => m.content.split(' ').slice(0, 2).join(' '));
      expect(a).toEqual(['question 2', 'answer 2', 'question 3', 'answer 3', 'question 4', 'answer 4']);
      expect(s.tokens(A)).toBeLessThanOrEqual(budget);
      expect(s.load(B)).toHaveLength(2);
      // A turn larger than the whole budget leaves nothing of the older turns, nor itself.
      s.append(A, 'huge', turn(5, perTurn * 20), { maxTokens: budget, owner: OWNER });
      expect(s.load(A)).toEqual([]);
    });
  });

  it('keeps tool calls and tool results of a turn together', async () => {
    const stub = env.AGENT.get(env.AGENT.newUniqueId());
    await runInDurableObject(stub, (_i, state) => {
      const s = new SessionStore(state.storage.sql);
      const toolTurn: ChatMessage[] = [
        { role: 'user', content: 'what is 2+2' },
        { role: 'assistant', content: '', tool_calls: [{ id: 'c1', name: 'calculator', arguments: '{"expr":"2+2"}' }] },
        { role: 'tool', tool_call_id: 'c1', name: 'calculator', content: '4' },
        { role: 'assistant', content: 'four' },
      ];
      s.append(T, 'r1', toolTurn, { maxTokens: 10_000, owner: OWNER });
      expect(s.load(T)).toEqual(toolTurn);
    });
  });
});

describe('SessionStore keys conversations by (sender, s)', () => {
  it('the same s of two senders are two conversations, with their own turn counts', async () => {
    const stub = env.AGENT.get(env.AGENT.newUniqueId());
    await runInDurableObject(stub, (_i, state) => {
      const s = new SessionStore(state.storage.sql);
      const victim = { sender: 'v'.repeat(64), session: `sender:${'v'.repeat(64)}` };
      const attacker = { sender: 'x'.repeat(64), session: victim.session };
      s.append(victim, 'r1', turn(1), { maxTokens: 10_000, owner: OWNER });
      expect(s.load(attacker)).toEqual([]);
      expect(s.turns(attacker)).toBe(0);
      s.append(attacker, 'r2', turn(2), { maxTokens: 10_000, owner: OWNER });
      expect(s.load(victim).map((m) => m.content.split(' ')[1])).toEqual(['1', '1']);
      expect(s.turns(victim)).toBe(1);
    });
  });

  it('migrates history keyed by s alone to the sender of the run that wrote each turn', async () => {
    const stub = env.AGENT.get(env.AGENT.newUniqueId());
    await runInDurableObject(stub, (_i, state) => {
      const sql = state.storage.sql;
      sql.exec('DROP TABLE IF EXISTS history');
      sql.exec('DROP TABLE IF EXISTS conversations');
      sql.exec('CREATE TABLE history (session TEXT NOT NULL, idx INTEGER NOT NULL, turn TEXT NOT NULL, message TEXT NOT NULL, tokens INTEGER NOT NULL, PRIMARY KEY (session, idx)) WITHOUT ROWID');
      sql.exec("INSERT INTO history VALUES ('s1', 0, 'run1', '{\"role\":\"user\",\"content\":\"kept\"}', 3), ('s1', 1, 'orphan', '{\"role\":\"user\",\"content\":\"dropped\"}', 3)");
      sql.exec(
        "INSERT INTO runs (id, client, session, wrapped, relay, state, outcome, started_at) VALUES ('run1', ?, 's1', 0, 'ws://x/', 'done', 'response', 1)",
        'c'.repeat(64),
      );
      const s = new SessionStore(sql);
      expect(s.load({ sender: 'c'.repeat(64), session: 's1' })).toEqual([{ role: 'user', content: 'kept' }]);
      expect(s.turns({ sender: 'c'.repeat(64), session: 's1' })).toBe(1);
      expect(sql.exec("SELECT count(*) AS n FROM sqlite_master WHERE name = 'history_v1'").one()['n']).toBe(0);
    });
  });
});

describe('SessionStore keeps all conversations within maxBytes', () => {
  /** What the rows hold, counted again from them (as when the total was not kept yet): the kept total must equal it. */
  const recount = (sql: SqlStorage): number => {
    sql.exec('DELETE FROM history_size');
    return new SessionStore(sql).bytes();
  };
  const key = (who: string, session: string) => ({ sender: who.repeat(64), session });
  const firstWords = (s: SessionStore, k: { sender: string; session: string }) => s.load(k).map((m) => m.content.split(' ').slice(0, 2).join(' '));

  it('forgets the least recently used conversation, every stranger’s before the owner’s; the one just answered loses its oldest turns last', async () => {
    const stub = env.AGENT.get(env.AGENT.newUniqueId());
    await runInDurableObject(stub, (_i, state) => {
      const s = new SessionStore(state.storage.sql);
      const bounds = { maxTokens: 100_000, owner: 'o'.repeat(64) };
      const [o1, o2, s1, s2, s3] = [key('o', 'c1'), key('o', 'c2'), key('s', 'c1'), key('t', 'c1'), key('u', 'c1')];
      // Four conversations of one turn each, all of one size: they fill the bound.
      s.append(o1, 'r1', turn(1, 1000), bounds, 1);
      s.append(s1, 'r2', turn(2, 1000), bounds, 2);
      s.append(s2, 'r3', turn(3, 1000), bounds, 3);
      s.append(o2, 'r4', turn(4, 1000), bounds, 4);
      s.maxBytes = s.bytes();
      // A fifth: the least recently used stranger's goes (s1), not the owner's older one (o1).
      s.append(s3, 'r5', turn(5, 1000), bounds, 5);
      expect(s.load(s1)).toEqual([]);
      expect(s.turns(s1)).toBe(0);
      // The owner's second turn of o1: the next stranger's goes (s2).
      s.append(o1, 'r6', turn(6, 1000), bounds, 6);
      expect(s.load(s2)).toEqual([]);
      // s3's second turn: no other stranger is left, so s3 itself loses its oldest turn, no owner's conversation.
      s.append(s3, 'r7', turn(7, 1000), bounds, 7);
      expect(firstWords(s, s3)).toEqual(['question 7', 'answer 7']);
      expect(s.turns(s3)).toBe(2);
      // The owner's newest turn: the stranger's conversation goes, though more recently used than o1 and o2.
      s.append(o2, 'r8', turn(8, 1000), bounds, 8);
      expect(s.load(s3)).toEqual([]);
      expect(firstWords(s, o1)).toEqual(['question 1', 'answer 1', 'question 6', 'answer 6']);
      expect(firstWords(s, o2)).toEqual(['question 4', 'answer 4', 'question 8', 'answer 8']);
      // Only the owner's left: its least recently used conversation goes.
      s.maxBytes = s.bytes() - 1;
      s.append(o2, 'r9', turn(9, 10), bounds, 9);
      expect(s.load(o1)).toEqual([]);
      expect(firstWords(s, o2)).toEqual(['question 4', 'answer 4', 'question 8', 'answer 8', 'question 9', 'answer 9']);
      expect(s.bytes()).toBeLessThanOrEqual(s.maxBytes);
      const kept = s.bytes();
      expect(recount(state.storage.sql)).toBe(kept);
    });
  });

  it('counts every row that comes and goes (turns trimmed, conversations pruned), and forgets a conversation stored with a lone surrogate', async () => {
    const stub = env.AGENT.get(env.AGENT.newUniqueId());
    await runInDurableObject(stub, (_i, state) => {
      const sql = state.storage.sql;
      const s = new SessionStore(sql);
      const bounds = { maxTokens: 100, owner: 'o'.repeat(64) };
      // Stored before such sessions were refused: it reads back as U+FFFD and matches no row by the key read.
      sql.exec('INSERT INTO conversations (sender, session, turns, touched_at) VALUES (?, ?, 1, 3)', 'z'.repeat(64), 'chat\ud800');
      sql.exec("INSERT INTO history (sender, session, idx, turn, message, tokens) VALUES (?, ?, 0, 'r0', '{}', 1)", 'z'.repeat(64), 'chat\ud800');
      expect(sql.exec<{ session: string }>('SELECT session FROM conversations WHERE sender = ?', 'z'.repeat(64)).one().session).toBe('chat\ufffd\ufffd\ufffd');
      s.append(key('p', 'x'), 'r0', turn(0, 100), bounds, 1);
      for (let n = 1; n <= 5; n++) s.append(key('a', 'x'), `r${n}`, turn(n, 100), bounds, 3 + n);
      s.append(key('b', 'x'), 'r6', turn(6, 100), bounds, 9);
      expect(recount(sql)).toBe(s.bytes());
      s.prune(2, 10);
      expect(s.load(key('p', 'x'))).toEqual([]);
      expect(recount(sql)).toBe(s.bytes());
      s.maxBytes = s.bytes();
      s.append(key('c', 'x'), 'r7', turn(7, 100), bounds, 10);
      expect(sql.exec<{ n: number }>('SELECT count(*) AS n FROM conversations WHERE sender = ?', 'z'.repeat(64)).one().n).toBe(0);
      expect(s.bytes()).toBeLessThanOrEqual(s.maxBytes);
      expect(recount(sql)).toBe(s.bytes());
    });
  });
});
