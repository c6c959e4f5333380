// The agent's announcements on one relay connection (ai.info, kind 0, relay list, DVMCP 31316 and
// 31317; relay-links.ts publishes them): all due once the connection is set up, each until the
// relay took it. While the agent announces nothing (its owner suspended or removed: agent-do.ts
// `announces`) they stay due and unsent, and go out on the connection already open once it
// announces again. A refusal for a passing reason — `rate-limited:`, `error:`, no answer in time, or
// a `created_at` the relay's clock refuses (a clock problem: each attempt signs anew, with a new
// created_at) — keeps that announcement due: it is sent again (re-signed) ANNOUNCE_RETRY_MS after the
// attempt, the wait doubling up to IDLE_WATCHDOG_MAX_MS, ANNOUNCE_ATTEMPTS attempts in all, then
// given up. Any other refusal (`invalid:`, `restricted:`, `blocked:`, `pow:`) would come again:
// it is not sent again. Each refusal is logged, once per attempt; given up or refused for good,
// the announcement waits for the next connection. Pure: the caller publishes, logs and wakes.

import { isClockRefusal, isRefusedForGood } from '../../src/shared/errors.js';
import type { EventTemplate } from '../../src/shared/relay-types.js';
import { IDLE_WATCHDOG_MAX_MS, WATCHDOG_MS } from './watchdog.js';

/** The wait before an announcement refused for a passing reason is sent again (the watchdog's period), doubled at each further attempt up to IDLE_WATCHDOG_MAX_MS. */
export const ANNOUNCE_RETRY_MS = WATCHDOG_MS;
/** Attempts to publish an announcement on one connection, the first included (the retries span about 35 minutes). */
export const ANNOUNCE_ATTEMPTS = 8;

/** One announcement (kind and `d`): what a relay keeps one of. */
export const announcementKey = (t: Pick<EventTemplate, 'kind' | 'tags'>): string => `${t.kind}:${t.tags.find((x) => x[0] === 'd')?.[1] ?? ''}`;

/** Whether a relay's refusal of an announcement would refuse it again: a final prefix, unless about its created_at (a clock problem). */
export function refusedForGood(message: string): boolean {
  return isRefusedForGood(message) && !isClockRefusal(message);
}

/** An announcement an attempt did not get taken, and the relay's answer. */
export interface Refused {
  template: Pick<EventTemplate, 'kind' | 'tags'>;
  message: string;
}

/** A line to log: its level and text. */
export type LogLine = ['warn' | 'error', string];

/** The announcements due on one connection (see the header). */
export class DueAnnouncements {
  /** Attempts made so far. */
  private attempts = 0;
  /** The keys still due; undefined: every announcement (none sent yet). */
  private still: Set<string> | undefined;
  /** When the next attempt may be made (ms, the agent's clock; Infinity: nothing is due any more). */
  private retryAt = -Infinity;
  /** An attempt is in progress (no second one meanwhile). */
  sending = false;

  /** Whether an attempt may start at `now`. */
  ready(now: number): boolean {
    return !this.sending && now >= this.retryAt;
  }

  /** When the next attempt is due after a refused one, if it is later than `now` (undefined when nothing is due any more). */
  nextAfter(now: number): number | undefined {
    return !this.sending && this.retryAt > now && this.retryAt !== Infinity ? this.retryAt : undefined;
  }

  /** Whether `t` is still to be sent. */
  wants(t: Pick<EventTemplate, 'kind' | 'tags'>): boolean {
    return this.still === undefined || this.still.has(announcementKey(t));
  }

  /**
   * The outcome of an attempt made at `now` by `agent` on `relay`: `refused`, what the relay did
   * not take, or `failed`, why none could be sent (not built or signed: all still due, a passing
   * reason). The lines to log, and whether anything is still due (then `nextAfter`).
   */
  settle(outcome: { refused: readonly Refused[] } | { failed: string }, now: number, agent: string, relay: string): { lines: LogLine[]; due: boolean } {
    this.attempts++;
    const lines: LogLine[] = [];
    const refused = 'refused' in outcome ? outcome.refused : [];
    for (const r of refused.filter((x) => refusedForGood(x.message))) {
      lines.push(['error', `agent ${agent}: ${relay} refused its kind ${r.template.kind} announcement (${r.message}); not sent again until the agent reconnects to it`]);
    }
    const passing = refused.filter((r) => !refusedForGood(r.message));
    const missing = 'failed' in outcome ? [`its announcements were not sent to ${relay} (${outcome.failed})`] : passing.map((r) => `${relay} did not take its kind ${r.template.kind} announcement (${r.message})`);
    if (this.attempts >= ANNOUNCE_ATTEMPTS) {
      for (const m of missing) lines.push(['error', `agent ${agent}: ${m}, ${ANNOUNCE_ATTEMPTS} attempts in all; not sent again until the agent reconnects to it`]);
      this.still = new Set();
      this.retryAt = Infinity;
      return { lines, due: false };
    }
    const wait = Math.min(ANNOUNCE_RETRY_MS * 2 ** (this.attempts - 1), IDLE_WATCHDOG_MAX_MS);
    for (const m of missing) lines.push(['warn', `agent ${agent}: ${m}; sent again in ${wait / 1000} s`]);
    if ('refused' in outcome) this.still = new Set(passing.map((r) => announcementKey(r.template)));
    const due = this.still === undefined || this.still.size > 0;
    this.retryAt = due ? now + wait : Infinity;
    return { lines, due };
  }
}
