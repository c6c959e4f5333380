// Session history: appended per turn, trimmed by whole oldest turns to max_context_tokens.
import { env, runInDurableObject } from 'cloudflare:test';
import { describe, expect, it } from 'vitest';
import { estimateTokens, SessionStore } from '../../workers/agent/sessions.js';
import type { ChatMessage } from '../../workers/agent/providers/types.js';

const turn = (n: number, size = 40): ChatMessage[] => [
  { role: 'user', content: `question ${n} `.padEnd(size, '.') },
  { role: 'assistant', content: `answer ${n} `.padEnd(size, '.') },
];

describe('SessionStore', () => {
  it('keeps sessions apart, trims whole oldest turns, and never exceeds the budget', async () => {
    const stub = env.AGENT.get(env.AGENT.newUniqueId());
    await runInDurableObject(stub, (_i, state) => {
      const s = new SessionStore(state.storage.sql);
      const perTurn = turn(0).reduce((n, m) => n + estimateTokens(m), 0);
      const budget = perTurn * 3;
      for (let n = 0; n < 5; n++) s.append('a', `run${n}`, turn(n), budget);
      s.append('b', 'other', turn(99), budget);
      const a = s.load('a').map((m) => m.content.split(' ').slice(0, 2).join(' '));
      expect(a).toEqual(['question 2', 'answer 2', 'question 3', 'answer 3', 'question 4', 'answer 4']);
      expect(s.tokens('a')).toBeLessThanOrEqual(budget);
      expect(s.load('b')).toHaveLength(2);
      // A turn larger than the whole budget leaves nothing of the older turns, nor itself.
      s.append('a', 'huge', turn(5, perTurn * 20), budget);
      expect(s.load('a')).toEqual([]);
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
      s.append('t', 'r1', toolTurn, 10_000);
      expect(s.load('t')).toEqual(toolTurn);
    });
  });
});
