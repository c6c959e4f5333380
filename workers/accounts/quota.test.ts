import { describe, expect, it } from 'vitest';
import { addRun, ownerUsage, planRefusal } from './quota.js';

const NOON = Date.parse('2026-12-01T12:00:00Z');

describe('ownerUsage', () => {
  it('reports the totals of today and this month with the plan’s run and token limits only', () => {
    const totals = addRun({ day: '2026-12-01', tokens_today: 100, tokens_month: 900, runs_today: 2 }, 50, NOON);
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
