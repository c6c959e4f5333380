import { describe, expect, it } from 'vitest';
import { OTHERS_PLAN_SHARE, ownerUsage, planRefusal, planTokensRefusal, planTokensRoom } from './quota.js';

const NOON = Date.parse('2026-12-01T12:00:00Z');

describe('ownerUsage', () => {
  it('reports the totals of today and this month with the plan’s run and token limits only', () => {
    const totals = { day: '2026-12-01', tokens_today: 150, tokens_month: 950, runs_today: 3 };
    expect(ownerUsage('pro', { runs_per_day: 10, tokens_per_month: 5000, agents: 3, stored_bytes: 1 }, totals, NOON)).toEqual({
      plan: 'pro',
      day: '2026-12-01',
      runs_today: 3,
      tokens_today: 150,
      tokens_month: 950,
      limits: { runs_per_day: 10, tokens_per_month: 5000 },
    });
  });

  it('counts totals of an earlier day as 0 today, and of an earlier month as 0 this month', () => {
    const yesterday = { day: '2026-11-30', tokens_today: 100, tokens_month: 900, runs_today: 2 };
    expect(ownerUsage('default', {}, yesterday, NOON)).toMatchObject({ day: '2026-12-01', runs_today: 0, tokens_today: 0, tokens_month: 0, limits: {} });
    const earlierToday = { day: '2026-12-01', tokens_today: 10, tokens_month: 910, runs_today: 1 };
    expect(ownerUsage('default', {}, earlierToday, NOON)).toMatchObject({ tokens_month: 910 });
  });

  it('agrees with the quota check: at the limit the next prompt is refused', () => {
    const totals = { day: '2026-12-01', tokens_today: 0, tokens_month: 0, runs_today: 4 };
    const plan = { runs_per_day: 4 };
    expect(ownerUsage('small', plan, totals, NOON).runs_today).toBe(plan.runs_per_day);
    expect(planRefusal(plan, totals, NOON)?.details.quota).toBe('runs_per_day');
  });
});

describe('planRefusal', () => {
  const totals = { day: '2026-12-01', tokens_today: 0, tokens_month: 0, runs_today: 1 };

  it('counts runs in progress against runs_per_day', () => {
    expect(planRefusal({ runs_per_day: 3 }, totals, NOON, { inFlight: 1 })).toBeUndefined();
    expect(planRefusal({ runs_per_day: 3 }, totals, NOON, { inFlight: 2 })).toMatchObject({
      message: 'the agent’s owner reached a usage limit for today (UTC)',
      detail: 'the agent’s owner used its plan’s 3 runs for today (UTC)',
      retry_after: 43_200,
    });
    // yesterday's runs do not count, today's in flight do
    expect(planRefusal({ runs_per_day: 1 }, { ...totals, day: '2026-11-30' }, NOON, { inFlight: 1 })?.details.quota).toBe('runs_per_day');
  });

  it('gives senders other than the owner OTHERS_PLAN_SHARE of each limit, rounded down', () => {
    expect(OTHERS_PLAN_SHARE).toBe(0.9);
    const plan = { runs_per_day: 10, tokens_per_day: 1000 };
    const used = { ...totals, runs_today: 9, tokens_today: 899 };
    expect(planRefusal(plan, used, NOON)).toBeUndefined();
    expect(planRefusal(plan, used, NOON, { other: true })).toMatchObject({
      message: 'the agent’s owner reached a usage limit for today (UTC)',
      detail: 'others may use 9 of the agent’s owner’s plan’s 10 runs for today (UTC); the rest is kept for the owner',
      details: { quota: 'runs_per_day' },
    });
    expect(planRefusal(plan, { ...used, runs_today: 8, tokens_today: 900 }, NOON, { other: true })).toMatchObject({
      detail: 'others may use 900 of the agent’s owner’s plan’s 1000 model tokens for today (UTC); the rest is kept for the owner',
      details: { quota: 'tokens_per_day' },
    });
  });
});

describe('what a refusal tells (the figures are the owner’s: workers/agent/told-to.ts)', () => {
  const totals = { day: '2026-12-01', tokens_today: 200, tokens_month: 200, runs_today: 7 };
  const asks = [{}, { other: true }, { call: { input: 77, answer: 33, prompt: true as const } }, { other: true, call: { input: 77, answer: 33, prompt: true as const } }];
  it('the message names no limit and no usage, only the window and when to retry; the figures are in `detail`', () => {
    const refusals = [
      ...asks.map((ask) => planRefusal({ runs_per_day: 7 }, totals, NOON, ask)),
      ...asks.map((ask) => planRefusal({ tokens_per_day: 200 }, totals, NOON, ask)),
      ...asks.map((ask) => planRefusal({ tokens_per_month: 200 }, totals, NOON, ask)),
    ];
    for (const r of refusals) {
      expect(r?.message).toMatch(/^the agent’s owner reached a usage limit for (today|this month) \(UTC\)$/);
      expect(r?.message).not.toMatch(/\d/);
      expect(r?.detail).toMatch(/\d/);
    }
    expect(planRefusal({ tokens_per_month: 200 }, totals, NOON, { other: true })).toEqual({
      code: 'RATE_LIMIT',
      message: 'the agent’s owner reached a usage limit for this month (UTC)',
      detail: 'others may use 180 of the agent’s owner’s plan’s 200 model tokens for this month (UTC); the rest is kept for the owner',
      retry_after: 30 * 86_400 + 43_200,
      details: { quota: 'tokens_per_month' },
    });
  });
});

describe('planTokensRefusal (a model call inside an admitted run)', () => {
  const totals = { day: '2026-12-01', tokens_today: 60, tokens_month: 60, runs_today: 4 };
  it('ignores runs_per_day (the run is already counted) and counts the tokens of the runs in progress', () => {
    const plan = { runs_per_day: 4, tokens_per_day: 100 };
    expect(planRefusal(plan, totals, NOON)?.details.quota).toBe('runs_per_day');
    expect(planTokensRefusal(plan, totals, NOON, { inFlightTokens: 39 })).toBeUndefined();
    expect(planTokensRefusal(plan, totals, NOON, { inFlightTokens: 40 })).toMatchObject({ code: 'RATE_LIMIT', details: { quota: 'tokens_per_day' } });
  });
  it('gives others their share, and counts the month as well', () => {
    expect(planTokensRefusal({ tokens_per_day: 100 }, totals, NOON, { other: true, inFlightTokens: 30 })?.detail).toBe(
      `others may use ${Math.floor(100 * OTHERS_PLAN_SHARE)} of the agent’s owner’s plan’s 100 model tokens for today (UTC); the rest is kept for the owner`,
    );
    expect(planTokensRefusal({ tokens_per_month: 70 }, totals, NOON, { inFlightTokens: 10 })?.details.quota).toBe('tokens_per_month');
  });
  it('refuses a call whose estimated input would pass a token limit, before the limit is used', () => {
    const plan = { tokens_per_day: 100, tokens_per_month: 1000 };
    expect(planTokensRefusal(plan, totals, NOON, { inFlightTokens: 10, call: { input: 30, answer: 0 } })).toBeUndefined();
    expect(planTokensRefusal(plan, totals, NOON, { inFlightTokens: 10, call: { input: 31, answer: 0 } })).toMatchObject({
      code: 'RATE_LIMIT',
      message: 'the agent’s owner reached a usage limit for today (UTC)',
      detail: 'this model call (about 31 input tokens) would exceed the agent’s owner’s plan’s 100 model tokens for today (UTC)',
      retry_after: 43_200,
      details: { quota: 'tokens_per_day' },
    });
    expect(planTokensRefusal(plan, totals, NOON, { other: true, call: { input: 31, answer: 0 } })?.detail).toBe(
      'this model call (about 31 input tokens) would exceed the 90 others may use of the agent’s owner’s plan’s 100 model tokens for today (UTC)',
    );
    expect(planTokensRefusal({ tokens_per_month: 100 }, totals, NOON, { call: { input: 41, answer: 0 } })?.details.quota).toBe('tokens_per_month');
    // the room the call needs for its answer counts too, and is named
    expect(planTokensRefusal(plan, totals, NOON, { inFlightTokens: 10, call: { input: 20, answer: 10 } })).toBeUndefined();
    expect(planTokensRefusal(plan, totals, NOON, { inFlightTokens: 10, call: { input: 20, answer: 11 } })?.detail).toBe(
      'this model call (about 20 input tokens and at least 11 for its answer) would exceed the agent’s owner’s plan’s 100 model tokens for today (UTC)',
    );
    // once the limit is used, the refusal says so, whatever the call
    expect(planTokensRefusal(plan, totals, NOON, { inFlightTokens: 40, call: { input: 1, answer: 0 } })?.detail).toBe('the agent’s owner used its plan’s 100 model tokens for today (UTC)');
  });
  it('planTokensRoom: the tokens the day and month limits leave (the smaller), others their share, earlier days and months as 0', () => {
    expect(planTokensRoom({}, totals, NOON, {})).toBeUndefined();
    expect(planTokensRoom({ tokens_per_day: 100, tokens_per_month: 1000 }, totals, NOON, { inFlightTokens: 10 })).toBe(100 - totals.tokens_today - 10);
    expect(planTokensRoom({ tokens_per_day: 100 }, totals, NOON, { other: true })).toBe(90 - totals.tokens_today);
    expect(planTokensRoom({ tokens_per_month: totals.tokens_month + 5 }, totals, NOON, {})).toBe(5);
    expect(planTokensRoom({ tokens_per_day: 100 }, { ...totals, day: '2026-11-30' }, NOON, {})).toBe(100);
    expect(planTokensRoom({ tokens_per_month: 100 }, { ...totals, day: '2026-11-30' }, NOON, {})).toBe(100);
    expect(planTokensRoom({ tokens_per_month: 100 }, totals, Date.parse('2026-12-02T12:00:00Z'), {})).toBe(100 - totals.tokens_month);
  });
});

describe('a plan’s models', () => {
  const totals = { day: '2026-12-01', tokens_today: 0, tokens_month: 0, runs_today: 0 };
  const call = (provider: string, name: string) => ({ input: 10, answer: 0, model: { provider, name } });
  it('refuses a model call whose model the plan does not name, before its token limits: the model to anyone, the list to the owner', () => {
    const plan = { tokens_per_day: 5, models: ['gpt-4o-mini', 'claude-haiku'] };
    expect(planTokensRefusal(plan, totals, NOON, { call: call('openai', 'o1') })).toEqual({
      code: 'UNSUPPORTED_MODEL',
      message: 'the agent’s owner’s plan does not allow the model "o1"',
      detail: 'the owner’s plan allows the models gpt-4o-mini, claude-haiku, not "o1": change the agent’s models (PATCH /api/agents/<its key>) or the owner’s plan',
      details: { quota: 'models' },
    });
    expect(planTokensRefusal({ models: [] }, totals, NOON, { call: call('anthropic', 'claude-haiku') })?.detail).toBe(
      'the owner’s plan allows no model (only the echo provider), not "claude-haiku": change the agent’s models (PATCH /api/agents/<its key>) or the owner’s plan',
    );
    // An allowed model meets the token limits as before.
    expect(planTokensRefusal(plan, totals, NOON, { call: call('openai', 'gpt-4o-mini') })?.details.quota).toBe('tokens_per_day');
  });
  it('allows echo whatever the list, any model with "*" or no list, and checks nothing at admission (the model is not known yet)', () => {
    expect(planTokensRefusal({ models: [] }, totals, NOON, { call: call('echo', 'o1') })).toBeUndefined();
    expect(planTokensRefusal({ models: ['*'] }, totals, NOON, { call: call('openai', 'o1') })).toBeUndefined();
    expect(planTokensRefusal({}, totals, NOON, { call: call('workers-ai', '@cf/meta/llama') })).toBeUndefined();
    expect(planRefusal({ models: ['gpt-4o-mini'] }, totals, NOON, { call: { input: 10, answer: 0, prompt: true } })).toBeUndefined();
  });
});
