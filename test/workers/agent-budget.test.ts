// The per-agent caps (workers/agent/budget.ts) on an injected clock: windows per sender and per
// agent, concurrency, the daily token budget in SQLite, and the bound on refusal answers.
import { env, runInDurableObject } from 'cloudflare:test';
import { describe, expect, it } from 'vitest';
import { AgentBudget, utcDay } from '../../workers/agent/budget.js';
import { DEFAULT_LIMITS, type AgentLimits } from '../../workers/agent/config.js';

const T0 = Date.UTC(2026, 0, 10, 23, 59, 0);
const limits = (l: Partial<AgentLimits>): AgentLimits => ({ ...DEFAULT_LIMITS, ...l });
const withBudget = <T>(fn: (b: AgentBudget, sql: SqlStorage) => T) =>
  runInDurableObject(env.AGENT.get(env.AGENT.newUniqueId()), (_i, state) => fn(new AgentBudget(state.storage.sql), state.storage.sql));

describe('AgentBudget', () => {
  it('a sender’s window frees exactly 60 s after its first prompt; retry_after counts down', async () => {
    await withBudget((b) => {
      const l = limits({ prompts_per_minute: 2 });
      expect(b.admit('a', l, 0, T0)).toEqual({ ok: true });
      expect(b.admit('a', l, 0, T0 + 1000)).toEqual({ ok: true });
      expect(b.admit('a', l, 0, T0 + 15_500)).toEqual({ ok: false, answer: true, message: 'at most 2 prompts per minute per sender', retry_after: 45 });
      expect(b.admit('a', l, 0, T0 + 59_999)).toEqual({ ok: false, answer: false });
      expect(b.admit('a', l, 0, T0 + 60_000)).toEqual({ ok: true });
      expect(b.stats).toEqual({ answered: 1, dropped: 1 });
    });
  });

  it('the agent-wide window counts every sender; a refused prompt takes no slot', async () => {
    await withBudget((b) => {
      const l = limits({ agent_prompts_per_minute: 2 });
      expect(b.admit('a', l, 0, T0).ok).toBe(true);
      expect(b.admit('b', l, 0, T0).ok).toBe(true);
      expect(b.admit('c', l, 0, T0 + 30_000)).toMatchObject({ ok: false, answer: true, retry_after: 30 });
      expect(b.admit('d', l, 0, T0 + 60_000).ok).toBe(true);
    });
  });

  it('concurrency and the daily token budget (kept in SQLite, per UTC day)', async () => {
    await withBudget((b, sql) => {
      const l = limits({ max_concurrent_runs: 2, max_tokens_per_day: 100 });
      expect(b.admit('a', l, 2, T0)).toEqual({ ok: false, answer: true, message: 'this agent is already running its maximum of 2 concurrent runs', retry_after: 5 });
      b.spend(60, T0);
      b.spend(40, T0);
      expect(b.tokensToday(T0)).toBe(100);
      expect(new AgentBudget(sql).tokensToday(T0)).toBe(100);
      // The message names no figure (the budget, the spend: the owner's, in `detail`; told-to.ts).
      expect(b.admit('z', l, 0, T0)).toEqual({
        ok: false,
        answer: true,
        message: 'this agent reached its model budget for today (UTC)',
        detail: 'this agent used its model budget of 100 tokens for today (UTC)',
        retry_after: 60,
      });
      expect(b.dailyTokensRefusal({ max_tokens_per_day: 200 }, T0 - 1000, { input: 30, answer: 256, prompt: true })).toEqual({
        message: 'this agent reached its model budget for today (UTC)',
        detail: 'this prompt (about 30 input tokens and at least 256 for its answer) would exceed this agent’s model budget of 200 tokens for today (UTC)',
        retry_after: 61,
      });
      expect(utcDay(T0 + 60_000).day).toBe('2026-01-11');
      expect(b.admit('y', l, 0, T0 + 60_000).ok).toBe(true);
    });
  });

  it('refusal answers: once per sender per window, and at most agent_prompts_per_minute in all', async () => {
    await withBudget((b) => {
      const l = limits({ agent_prompts_per_minute: 3 });
      const told = ['a', 'b', 'c', 'd', 'e'].map((s) => b.shouldAnswer(s, l, T0, 60));
      expect(told).toEqual([true, true, true, false, false]);
      expect(b.shouldAnswer('a', l, T0 + 61_000, 60)).toBe(true);
      expect(b.stats).toEqual({ answered: 4, dropped: 2 });
    });
  });
});
