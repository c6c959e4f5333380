// The plan check of a prompt (pure): the owner's totals against its plan's model tokens per UTC day
// and month and runs per UTC day (runs in progress included; senders other than the owner get
// OTHERS_PLAN_SHARE of each limit; the token limits must leave room for what the prompt's first
// model call will ask, as far as admission knows it), and of each model call of a run. A quota
// reached answers RATE_LIMIT with retry_after = seconds until the window resets, details.quota
// naming it and a message that names no figure (OWNER_LIMIT_REACHED); the figures (the limit, what
// is used, what the call asks) are in `detail`, which only the owner is told (workers/agent/told-to.ts):
// a stranger varying its prompt's size must not read the owner's spend across all its agents off
// the refusals. Totals of an earlier day or month count as 0. (The agent counts its finished runs
// on top of the totals until the aggregate has them: workers/agent/owner-copy.ts; Accounts checks
// each run an agent reserves with the same rule, its runs in progress being every agent's runs
// reserved: accounts-do.ts reserveRun.) A model call
// whose model the plan's `models` does not name (planAllowsModel: the plans changed since the
// agent was made) is refused first, with UNSUPPORTED_MODEL naming the model; the plan's list goes
// to the owner alone, in `detail`.

import type { ErrorCode } from '../../src/shared/nip-xx.js';
import type { OwnerTotals } from './accounts-do.js';
import { planAllowsModel, planModelsText, type Plan } from './plans.js';

const DAY_MS = 86_400_000;

/** A NIP-XX refusal of a prompt (the shape of workers/agent/admission.ts's Refusal). */
export interface QuotaRefusal {
  code: ErrorCode;
  /** What anyone may be told: the limit's window (retry_after: when it resets), no figure. */
  message: string;
  /** The figures, for the agent's owner alone (workers/agent/told-to.ts). */
  detail: string;
  /** When the limit resets; absent: not by itself (a model the plan does not allow). */
  retry_after?: number;
  details: { quota: string };
}

/** What a refusal by the owner's plan says to a sender other than the owner, by the quota's window. */
export const OWNER_LIMIT_REACHED = {
  day: 'the agent’s owner reached a usage limit for today (UTC)',
  month: 'the agent’s owner reached a usage limit for this month (UTC)',
} as const;

const secondsUntil = (t: number, now: number): number => Math.max(1, Math.ceil((t - now) / 1000));

/**
 * Senders other than the agent's owner may use this share of each plan limit (runs and model tokens
 * per day, tokens per month), rounded down; the rest is kept for the owner's own prompts, so a
 * stranger on an open agent cannot leave the owner's other agents answering RATE_LIMIT.
 */
export const OTHERS_PLAN_SHARE = 0.9;

/** Who is asking, and what the totals do not hold yet. */
export interface PlanAsk {
  /** The prompt's sender is not the agent's owner: OTHERS_PLAN_SHARE of each limit applies. */
  other?: boolean;
  /** Runs admitted and not yet added to the totals (in progress; at Accounts, every agent's reserved): counted against runs_per_day. */
  inFlight?: number;
  /** Model tokens the runs in progress have spent so far (not yet in the totals): counted against the token limits. */
  inFlightTokens?: number;
  /** The model call about to go out (planTokensRefusal), or at admission the prompt's first (promptAsk): refused when it would pass a token limit. */
  call?: ModelCallAsk;
}

/**
 * A model call about to go out: its estimated input, and the least room for output it needs
 * (MIN_ANSWER_TOKENS, workers/agent/run-driver.ts); it may use more, up to what the limits leave.
 * At a prompt's admission (`prompt`), the first call of its run as far as it is known before
 * decryption (workers/agent/admission.ts promptAsk).
 */
export interface ModelCallAsk {
  input: number;
  answer: number;
  prompt?: true;
  /** The provider and model the call goes to (a run's model calls; unknown at admission): refused unless the plan allows it. */
  model?: { provider: string; name: string };
}

/** How a refusal names the model call (or the prompt) it refuses. */
export const modelCallAsked = (c: ModelCallAsk): string =>
  `${c.prompt ? 'this prompt' : 'this model call'} (about ${c.input} input tokens${c.answer > 0 ? ` and at least ${c.answer} for its answer` : ''})`;

/** The limit that applies to `ask` (a share of `limit` for others). */
const limitFor = (limit: number | undefined, ask: PlanAsk): number | undefined => (limit === undefined || !ask.other ? limit : Math.floor(limit * OTHERS_PLAN_SHARE));

/** The refusal of a model call whose model `plan` does not allow (planAllowsModel), or undefined. */
export function planModelRefusal(plan: Plan, call: ModelCallAsk | undefined): QuotaRefusal | undefined {
  const model = call?.model;
  if (!model || planAllowsModel(plan, model.provider, model.name)) return undefined;
  return {
    code: 'UNSUPPORTED_MODEL',
    message: `the agent’s owner’s plan does not allow the model ${JSON.stringify(model.name)}`,
    detail: `${planModelsText(plan)}, not ${JSON.stringify(model.name)}: change the agent’s models (PATCH /api/agents/<its key>) or the owner’s plan`,
    details: { quota: 'models' },
  };
}

/** The refusal of a prompt at `now` (ms) by the owner's plan (its model first, when `ask.call` names it), or undefined when the plan leaves room. */
export function planRefusal(plan: Plan, totals: OwnerTotals, now: number, ask: PlanAsk = {}): QuotaRefusal | undefined {
  const model = planModelRefusal(plan, ask.call);
  if (model) return model;
  const today = new Date(now).toISOString().slice(0, 10);
  const sameDay = totals.day === today;
  const sameMonth = totals.day.slice(0, 7) === today.slice(0, 7);
  const dayEnd = (Math.floor(now / DAY_MS) + 1) * DAY_MS;
  const d = new Date(now);
  const monthEnd = Date.UTC(d.getUTCFullYear(), d.getUTCMonth() + 1, 1);
  const call = ask.call ?? { input: 0, answer: 0 };
  const over = (quota: string, used: number, planLimit: number | undefined, what: string, window: keyof typeof OWNER_LIMIT_REACHED, end: number, callTokens = 0): QuotaRefusal | undefined => {
    const limit = limitFor(planLimit, ask);
    // Room left: the limit is not used up, and this call (if any) fits in what is left.
    if (planLimit === undefined || limit === undefined || (used < limit && used + callTokens <= limit)) return undefined;
    const detail =
      used < limit
        ? `${modelCallAsked(call)} would exceed ${ask.other ? `the ${limit} others may use of the agent’s owner’s plan’s` : 'the agent’s owner’s plan’s'} ${planLimit} ${what}`
        : ask.other
          ? `others may use ${limit} of the agent’s owner’s plan’s ${planLimit} ${what}; the rest is kept for the owner`
          : `the agent’s owner used its plan’s ${planLimit} ${what}`;
    return { code: 'RATE_LIMIT', message: OWNER_LIMIT_REACHED[window], detail, retry_after: secondsUntil(end, now), details: { quota } };
  };
  const running = ask.inFlightTokens ?? 0;
  return (
    over('runs_per_day', (sameDay ? totals.runs_today : 0) + (ask.inFlight ?? 0), plan.runs_per_day, 'runs for today (UTC)', 'day', dayEnd) ??
    over('tokens_per_day', (sameDay ? totals.tokens_today : 0) + running, plan.tokens_per_day, 'model tokens for today (UTC)', 'day', dayEnd, call.input + call.answer) ??
    over('tokens_per_month', (sameMonth ? totals.tokens_month : 0) + running, plan.tokens_per_month, 'model tokens for this month (UTC)', 'month', monthEnd, call.input + call.answer)
  );
}

/**
 * The refusal of a model call inside a run already admitted: its model (`ask.call.model`), then the
 * plan's token limits only (the run is already counted among the day's runs), against the totals
 * plus what the runs in progress spent (and are sending) plus this call's estimated input (`ask.call`).
 */
export function planTokensRefusal(plan: Plan, totals: OwnerTotals, now: number, ask: PlanAsk): QuotaRefusal | undefined {
  return planRefusal({ ...plan, runs_per_day: undefined }, totals, now, { ...ask, inFlight: 0 });
}

/**
 * The model tokens the plan's token limits leave at `now` for `ask` (others: their share), counting
 * what the runs in progress spent and are sending (`ask.inFlightTokens`); undefined: no token limit.
 */
export function planTokensRoom(plan: Plan, totals: OwnerTotals, now: number, ask: PlanAsk): number | undefined {
  const today = new Date(now).toISOString().slice(0, 10);
  const running = ask.inFlightTokens ?? 0;
  const rooms: number[] = [];
  const day = limitFor(plan.tokens_per_day, ask);
  if (day !== undefined) rooms.push(day - (totals.day === today ? totals.tokens_today : 0) - running);
  const month = limitFor(plan.tokens_per_month, ask);
  if (month !== undefined) rooms.push(month - (totals.day.slice(0, 7) === today.slice(0, 7) ? totals.tokens_month : 0) - running);
  return rooms.length === 0 ? undefined : Math.min(...rooms);
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
