// Session history: per (sender, s), appended per turn, trimmed by whole oldest turns to max_context_tokens.
import { env, runInDurableObject } from 'cloudflare:test';
import { describe, expect, it } from 'vitest';
import { estimateTokens, SessionStore } from '../../workers/agent/sessions.js';
import type { ChatMessage } from '../../workers/agent/providers/types.js';

const A = { sender: 'a'.repeat(64), session: 'a' };
const B = { sender: 'a'.repeat(64), session: 'b' };
const T = { sender: 'a'.repeat(64), session: 't' };

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
      for (let n = 0; n < 5; n++) s.append(A, `run${n}`, turn(n), budget);
      s.append(B, 'other', turn(99), budget);
      const a = s.load(A).map((m) => m.content.split(' ').slice(0, 2).join(' '));
      expect(a).toEqual(['question 2', 'answer 2', 'question 3', 'answer 3', 'question 4', 'answer 4']);
      expect(s.tokens(A)).toBeLessThanOrEqual(budget);
      expect(s.load(B)).toHaveLength(2);
      // A turn larger than the whole budget leaves nothing of the older turns, nor itself.
      s.append(A, 'huge', turn(5, perTurn * 20), budget);
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
      s.append(T, 'r1', toolTurn, 10_000);
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
      s.append(victim, 'r1', turn(1), 10_000);
      expect(s.load(attacker)).toEqual([]);
      expect(s.turns(attacker)).toBe(0);
      s.append(attacker, 'r2', turn(2), 10_000);
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
