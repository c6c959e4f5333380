// What a hosted agent lets strangers spend of its owner's money: prompts per minute per sender and
// across all senders, concurrent runs, and model tokens per UTC day (counted from the provider's
// usage, persisted in the Agent DO's SQLite so a restart does not reset it, plus what the runs in
// progress have spent so far and what their model calls in flight hold: estimated input plus the
// output they may produce; checked when a prompt is admitted with what its first model call will
// ask as far as that is known before decryption (admission.ts promptAsk), and again before each
// model call of a run with that call's estimated input and room for its answer, so a run stops
// before a call that would pass the day's budget, and a call's output is limited to what is left:
// dailyTokensRoom, run-driver.ts). A refused prompt costs
// O(1) (no run row, no decryption), and the refusals are bounded too: at most one answer per sender
// per window, and no more answers per minute in all than agent_prompts_per_minute (fresh keys cannot
// make the agent publish unbounded errors); the other refusals are dropped and counted. A refusal by
// the day's budget names no figure (AGENT_BUDGET_REACHED): the budget and what is spent are in its
// `detail`, for the owner alone (told-to.ts). Time comes from an injected clock (milliseconds).

import { LruMap } from '../../src/shared/lru.js';
import { modelCallAsked, type ModelCallAsk } from '../accounts/quota.js';
import type { AgentLimits } from './config.js';

/** A refusal the client is told about (NIP-XX RATE_LIMIT; `detail`: for the owner alone), or one that is dropped silently. */
export type Admission =
  | { ok: true }
  | { ok: false; answer: true; message: string; detail?: string; retry_after: number }
  | { ok: false; answer: false };

/** A refusal of the budget's: `detail` (the figures) for the owner alone. */
export interface BudgetRefusal {
  message: string;
  detail?: string;
  retry_after: number;
}

/** What a refusal by the day's token budget says (to anyone but the owner: told-to.ts). */
export const AGENT_BUDGET_REACHED = 'this agent reached its model budget for today (UTC)';

/** Retry hint when the concurrency cap is reached (runs have no fixed end). */
const CONCURRENCY_RETRY_SECONDS = 5;
const MINUTE_MS = 60_000;
const DAY_MS = 86_400_000;

/** A fixed window of `windowMs` that starts at its first hit. */
interface Window {
  start: number;
  count: number;
}

const secondsUntil = (t: number, now: number): number => Math.max(1, Math.ceil((t - now) / 1000));

/** The UTC day of `now` (YYYY-MM-DD) and the milliseconds at which it ends. */
export function utcDay(now: number): { day: string; end: number } {
  const start = Math.floor(now / DAY_MS) * DAY_MS;
  return { day: new Date(start).toISOString().slice(0, 10), end: start + DAY_MS };
}

export interface BudgetStats {
  /** Refusals answered with RATE_LIMIT. */
  answered: number;
  /** Refusals dropped: the sender was already told in its window, or the agent answered its refusals quota for the minute. */
  dropped: number;
}

/** The model tokens a run has spent so far (its Usage, added to as each model call ends). */
interface RunTokens {
  input_tokens: number;
  output_tokens: number;
}

/** A run in progress: its tokens so far, and the estimated input of its model call in flight (0 between calls). */
interface Running {
  tokens: RunTokens;
  calling: number;
}

export class AgentBudget {
  private readonly senders = new LruMap<string, Window>(10_000);
  /** The runs in progress, by id: their tokens so far and their call in flight count against the day's budget before they end. */
  private readonly running = new Map<string, Running>();
  private agentWindow: Window | undefined;
  /** Refusal answers of the current minute, all senders together. */
  private answerWindow: Window | undefined;
  /** Per sender: until when further refusals are dropped silently. */
  private readonly toldUntil = new LruMap<string, number>(10_000);
  readonly stats: BudgetStats = { answered: 0, dropped: 0 };

  constructor(private readonly sql: SqlStorage) {
    this.migrate();
  }

  private migrate(): void {
    this.sql.exec('CREATE TABLE IF NOT EXISTS token_usage (day TEXT PRIMARY KEY, tokens INTEGER NOT NULL) WITHOUT ROWID');
  }

  /** Model tokens (input + output) used on the UTC day of `now`. */
  tokensToday(now: number): number {
    return this.sql.exec<{ tokens: number }>('SELECT tokens FROM token_usage WHERE day = ?', utcDay(now).day).toArray()[0]?.tokens ?? 0;
  }

  /** Model tokens counted against the day of `now`: the persisted total and what the runs in progress have spent or are sending. */
  tokensCounted(now: number): number {
    return this.tokensToday(now) + this.inProgressTokens();
  }

  /**
   * Model tokens the runs in progress have spent so far, with the estimated input of their calls in
   * flight (whose tokens are known only when they end): concurrent runs each see the others' calls.
   */
  inProgressTokens(): number {
    let n = 0;
    for (const r of this.running.values()) n += r.tokens.input_tokens + r.tokens.output_tokens + r.calling;
    return n;
  }

  /** Run `runId` is in progress: `tokens` (its usage, added to as it goes) counts from now on. */
  track(runId: string, tokens: RunTokens): void {
    this.running.set(runId, { tokens, calling: 0 });
  }

  /** Whether run `runId` is in progress in this instance (tracked, not settled yet). */
  isRunning(runId: string): boolean {
    return this.running.has(runId);
  }

  /** Run `runId` sends a model call of `estimatedInput` tokens: counted until the call ends (callEnded) and its tokens are in the run's. */
  calling(runId: string, estimatedInput: number): void {
    const r = this.running.get(runId);
    if (r) r.calling = estimatedInput;
  }

  /** Run `runId`'s model call ended: its tokens are in the run's usage now. */
  callEnded(runId: string): void {
    const r = this.running.get(runId);
    if (r) r.calling = 0;
  }

  /** Run `runId` ended having spent `tokens`: they are added to the day's total in place of its running count. */
  settle(runId: string, tokens: number, now: number): void {
    this.running.delete(runId);
    this.spend(tokens, now);
  }

  /**
   * The refusal of a prompt, or of a model call of `call.input` tokens (estimated) that needs room
   * for at least `call.answer` output tokens, at `now`: once the day's budget is used
   * (tokensCounted), or when the call would pass it; else undefined.
   */
  dailyTokensRefusal(limits: Pick<AgentLimits, 'max_tokens_per_day'>, now: number, call: ModelCallAsk = { input: 0, answer: 0 }): Required<BudgetRefusal> | undefined {
    const counted = this.tokensCounted(now);
    const budget = limits.max_tokens_per_day;
    const refusal = (detail: string): Required<BudgetRefusal> => ({ message: AGENT_BUDGET_REACHED, detail, retry_after: secondsUntil(utcDay(now).end, now) });
    if (counted >= budget) return refusal(`this agent used its model budget of ${budget} tokens for today (UTC)`);
    if (counted + call.input + call.answer <= budget) return undefined;
    return refusal(`${modelCallAsked(call)} would exceed this agent’s model budget of ${budget} tokens for today (UTC)`);
  }

  /** The tokens left of the day's budget at `now` (negative: passed). */
  dailyTokensRoom(limits: Pick<AgentLimits, 'max_tokens_per_day'>, now: number): number {
    return limits.max_tokens_per_day - this.tokensCounted(now);
  }

  /** Adds a run's provider usage to the day's total (and forgets earlier days). */
  spend(tokens: number, now: number): void {
    if (tokens <= 0) return;
    const { day } = utcDay(now);
    this.sql.exec(
      'INSERT INTO token_usage (day, tokens) VALUES (?, ?) ON CONFLICT (day) DO UPDATE SET tokens = tokens + excluded.tokens',
      day,
      tokens,
    );
    this.sql.exec('DELETE FROM token_usage WHERE day < ?', day);
  }

  /**
   * Admits a prompt of `sender` (taking one slot of its window and of the agent's) or refuses it;
   * a refusal is answered once per sender per window, then dropped. `call`: what the prompt's first
   * model call will ask of the token budget, as far as known (none: the budget must not be used up).
   */
  admit(sender: string, limits: AgentLimits, activeRuns: number, now: number, call?: ModelCallAsk): Admission {
    const refusal = this.check(sender, limits, activeRuns, now, call);
    if (!refusal) {
      this.hit(sender, now);
      return { ok: true };
    }
    return this.shouldAnswer(sender, limits, now, refusal.retry_after) ? { ok: false, answer: true, ...refusal } : { ok: false, answer: false };
  }

  /**
   * Whether a refusal of `sender` is answered: the first in a window of `windowSeconds` is, later
   * ones in that window are dropped (and counted); so are all refusals once the agent answered
   * `agent_prompts_per_minute` refusals in the current minute.
   */
  shouldAnswer(sender: string, limits: AgentLimits, now: number, windowSeconds: number): boolean {
    const told = this.toldUntil.get(sender);
    const answers = this.live(this.answerWindow, now) ?? { start: now, count: 0 };
    if ((told !== undefined && told > now) || answers.count >= limits.agent_prompts_per_minute) {
      this.stats.dropped++;
      return false;
    }
    answers.count++;
    this.answerWindow = answers;
    this.toldUntil.set(sender, now + windowSeconds * 1000);
    this.stats.answered++;
    return true;
  }

  private live(w: Window | undefined, now: number): Window | undefined {
    return w && now < w.start + MINUTE_MS ? w : undefined;
  }

  private check(sender: string, limits: AgentLimits, activeRuns: number, now: number, call: ModelCallAsk | undefined): BudgetRefusal | undefined {
    const own = this.live(this.senders.get(sender), now);
    if (own && own.count >= limits.prompts_per_minute) {
      return { message: `at most ${limits.prompts_per_minute} prompts per minute per sender`, retry_after: secondsUntil(own.start + MINUTE_MS, now) };
    }
    const all = this.live(this.agentWindow, now);
    if (all && all.count >= limits.agent_prompts_per_minute) {
      return {
        message: `this agent accepts at most ${limits.agent_prompts_per_minute} prompts per minute across all senders`,
        retry_after: secondsUntil(all.start + MINUTE_MS, now),
      };
    }
    if (activeRuns >= limits.max_concurrent_runs) {
      return { message: `this agent is already running its maximum of ${limits.max_concurrent_runs} concurrent runs`, retry_after: CONCURRENCY_RETRY_SECONDS };
    }
    return this.dailyTokensRefusal(limits, now, call);
  }

  private hit(sender: string, now: number): void {
    const own = this.live(this.senders.get(sender), now) ?? { start: now, count: 0 };
    own.count++;
    this.senders.set(sender, own);
    const all = this.live(this.agentWindow, now) ?? { start: now, count: 0 };
    all.count++;
    this.agentWindow = all;
  }
}
