// The plan check of a prompt (pure): the owner's totals against its plan's model tokens per UTC day
// and month and runs per UTC day. A quota reached answers RATE_LIMIT with retry_after = seconds
// until the window resets and details.quota naming it. Totals of an earlier day or month count as 0.
// Also the agent's local addition of a finished run to the totals (before the aggregate answers).

import type { ErrorCode } from '../../src/shared/nip-xx.js';
import type { OwnerTotals } from './accounts-do.js';
import type { Plan } from './plans.js';

const DAY_MS = 86_400_000;

/** A NIP-XX refusal of a prompt (the shape of workers/agent/admission.ts's Refusal). */
export interface QuotaRefusal {
  code: ErrorCode;
  message: string;
  retry_after: number;
  details: { quota: string };
}

/** The totals after one more run of `tokens` at `now` (ms): what an agent adds locally before the aggregate answers. */
export function addRun(totals: OwnerTotals, tokens: number, now: number): OwnerTotals {
  const day = new Date(now).toISOString().slice(0, 10);
  const sameDay = totals.day === day;
  const sameMonth = totals.day.slice(0, 7) === day.slice(0, 7);
  return {
    day,
    tokens_today: (sameDay ? totals.tokens_today : 0) + tokens,
    tokens_month: (sameMonth ? totals.tokens_month : 0) + tokens,
    runs_today: (sameDay ? totals.runs_today : 0) + 1,
  };
}

const secondsUntil = (t: number, now: number): number => Math.max(1, Math.ceil((t - now) / 1000));

/** The refusal of a prompt at `now` (ms) by the owner's plan, or undefined when the plan leaves room. */
export function planRefusal(plan: Plan, totals: OwnerTotals, now: number): QuotaRefusal | undefined {
  const today = new Date(now).toISOString().slice(0, 10);
  const sameDay = totals.day === today;
  const sameMonth = totals.day.slice(0, 7) === today.slice(0, 7);
  const dayEnd = (Math.floor(now / DAY_MS) + 1) * DAY_MS;
  const d = new Date(now);
  const monthEnd = Date.UTC(d.getUTCFullYear(), d.getUTCMonth() + 1, 1);
  const over = (quota: string, used: number, limit: number | undefined, what: string, end: number): QuotaRefusal | undefined =>
    limit !== undefined && used >= limit
      ? { code: 'RATE_LIMIT', message: `the agent’s owner used its plan’s ${limit} ${what}`, retry_after: secondsUntil(end, now), details: { quota } }
      : undefined;
  return (
    over('runs_per_day', sameDay ? totals.runs_today : 0, plan.runs_per_day, 'runs for today (UTC)', dayEnd) ??
    over('tokens_per_day', sameDay ? totals.tokens_today : 0, plan.tokens_per_day, 'model tokens for today (UTC)', dayEnd) ??
    over('tokens_per_month', sameMonth ? totals.tokens_month : 0, plan.tokens_per_month, 'model tokens for this month (UTC)', monthEnd)
  );
}

/** The owner's plan and where its totals stand against it: what the owner's NIP-AO telemetry shows after a run. */
export interface OwnerUsage {
  plan: string;
  day: string;
  runs_today: number;
  tokens_today: number;
  tokens_month: number;
  limits: Pick<Plan, 'runs_per_day' | 'tokens_per_day' | 'tokens_per_month'>;
}

/** The totals as of `now` (ms; an earlier day or month counts as 0) with the plan's run and token limits. */
export function ownerUsage(planName: string, plan: Plan, totals: OwnerTotals, now: number): OwnerUsage {
  const day = new Date(now).toISOString().slice(0, 10);
  const sameDay = totals.day === day;
  const sameMonth = totals.day.slice(0, 7) === day.slice(0, 7);
  const limits: OwnerUsage['limits'] = {};
  for (const k of ['runs_per_day', 'tokens_per_day', 'tokens_per_month'] as const) if (plan[k] !== undefined) limits[k] = plan[k];
  return {
    plan: planName,
    day,
    runs_today: sameDay ? totals.runs_today : 0,
    tokens_today: sameDay ? totals.tokens_today : 0,
    tokens_month: sameMonth ? totals.tokens_month : 0,
    limits,
  };
}
