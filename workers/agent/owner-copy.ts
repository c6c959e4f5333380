// The agent's copy of its owner's account (workers/accounts): the registry state and the owner's
// totals as Accounts last answered them (a snapshot, or a run report's answer), when, and the fetch
// in flight (joined, never doubled). The copy is fetched only when needed and older than a bound
// (OWNER_COPY_MAX_AGE_MS; an idle watchdog pass, OWNER_COPY_IDLE_MAX_AGE_MS: watchdog.ts says
// when). Every admission — a NIP-XX prompt, a DVMCP request (an ask or any other) — waits for that
// fetch before it decides (forAdmission), so an agent idle for an hour does not admit on an hour-old
// copy; only the checks inside a run (before each model call) read the copy as it is. A fetch
// that fails is not made again for REGISTRY_RETRY_MS (the owners registry's own back-off,
// workers/common/owners.ts) whatever asks meanwhile — strangers' prompts and DVMCP asks
// included — and is logged once; until a first answer the owner's standing is unknown (admission
// answers that the registry could not be read yet, not that the owner is gone).
// The totals admission reads are the answer's plus this agent's runs recorded and not yet reported
// (their rows, metering.ts): a run counts from its end until Accounts has it whatever answer lands
// meanwhile (one computed before its report included), at worst twice for a moment (the safe side).
// Accounts only adds to a day's runs and tokens, so an answer of the same day with less is older than
// the copy: the copy keeps the larger of each figure (a late answer cannot erase a run another answer
// counted); the registry state is the last answer's. An answer of an earlier UTC day than the agent's
// now (computed before midnight, delivered after) gives way to a copy of today, which may have been
// computed before the run it answers was reported: so a run report answered so (ofToday false)
// leaves its row unreported, counted on top of the copy, and the watchdog sends it again
// (workers/agent/agent-do.ts report; Accounts counts a run once).
// Each fetch tells Accounts what this agent's runs in progress hold (its `fetch` sends it), and each
// answer says what the owner's other agents' runs in progress hold (`in_flight`, as they last told
// Accounts: workers/accounts/in-flight.ts): othersInFlight, the last answer's figure (not the
// larger: it falls as runs end), counted while it is not older than IN_FLIGHT_MAX_AGE_MS, on top of
// this agent's own runs in progress by the plan checks (agent-do.ts). It is kept apart from the
// totals, which only grow in a day.

import { errorMessage } from '../../src/shared/errors.js';
import type { OwnerSnapshot, OwnerTotals } from '../accounts/accounts-do.js';
import type { OwnerState } from '../common/owners.js';
import { IN_FLIGHT_MAX_AGE_MS } from '../accounts/in-flight.js';
import { REGISTRY_RETRY_MS } from '../common/owners.js';

/** How old the copy may be when an admission or a run in flight reads it. */
export const OWNER_COPY_MAX_AGE_MS = 30_000;
/** An idle agent's watchdog fetches the copy once it is this old (a lost ownerChanged notice is still learnt). */
export const OWNER_COPY_IDLE_MAX_AGE_MS = 3600_000;
/** The totals of an owner not fetched yet (a static owner while Accounts does not answer): nothing spent, so the plan's limits still bound each run. */
const NOTHING_SPENT: OwnerTotals = { day: '', tokens_today: 0, tokens_month: 0, runs_today: 0 };

export interface OwnerCopyDeps {
  /** Asks Accounts for the owner's snapshot, telling it what this agent's runs in progress hold (throws when it fails); undefined: the agent is gone, nothing asked. */
  fetch(): Promise<OwnerSnapshot | undefined>;
  /** This agent's runs recorded and not yet reported at `now` (ms), as totals of that day (metering.ts unreportedTotals). */
  unreported(now: number): OwnerTotals;
  now(): number;
  /** A fetch failed (at most once per REGISTRY_RETRY_MS, but for refresh()). */
  failed(error: string): void;
}

export class OwnerCopy {
  private snapshot: OwnerSnapshot | undefined;
  private fetchedAt = -Infinity;
  /** No fetch for a stale copy before this (ms): the last one failed. */
  private retryAt = -Infinity;
  private inFlight: Promise<void> | undefined;
  /** Snapshot RPCs made so far. */
  fetches = 0;

  constructor(private readonly deps: OwnerCopyDeps) {}

  /** Whether Accounts answered at least once (else the owner's standing is unknown). */
  get known(): boolean {
    return this.snapshot !== undefined;
  }

  /** The owner's registry state as last answered (undefined: not registered, or not known yet: see `known`). */
  get state(): OwnerState | undefined {
    return this.snapshot?.state;
  }

  /** The owner's totals at `now` (ms): the copy's, plus this agent's runs not reported yet. */
  totals(now: number): OwnerTotals {
    return plus(this.snapshot?.totals ?? NOTHING_SPENT, this.deps.unreported(now));
  }

  /** The model tokens the owner's other agents' runs in progress hold at `now` (ms), as the last answer said (0 once it is older than IN_FLIGHT_MAX_AGE_MS). */
  othersInFlight(now: number): number {
    return this.snapshot && now - this.fetchedAt <= IN_FLIGHT_MAX_AGE_MS ? this.snapshot.in_flight : 0;
  }

  /** An answer of Accounts (a snapshot, or a run report's): its state and others' runs in progress, the larger figures of the day (see the header). */
  answered(s: OwnerSnapshot): void {
    const kept = this.snapshot?.totals;
    this.snapshot = { state: s.state, totals: kept ? newest(kept, s.totals, dayOf(this.deps.now())) : s.totals, in_flight: s.in_flight };
    this.fetchedAt = this.deps.now();
    this.retryAt = -Infinity;
  }

  /** Whether answer `s` is of the agent's UTC day (or later), not one computed before a midnight that has passed since (see the header). */
  ofToday(s: OwnerSnapshot): boolean {
    return s.totals.day >= dayOf(this.deps.now());
  }

  /** What every admission waits for before it decides (a prompt, a DVMCP request): the copy fetched again when older than OWNER_COPY_MAX_AGE_MS (refreshIfStale). */
  forAdmission(): Promise<void> {
    return this.refreshIfStale();
  }

  /** Fetches the copy again when it is older than `maxAge` ms and no fetch failed in the last REGISTRY_RETRY_MS, joining a fetch in flight. */
  async refreshIfStale(maxAge = OWNER_COPY_MAX_AGE_MS): Promise<void> {
    const now = this.deps.now();
    if (now - this.fetchedAt <= maxAge || now < this.retryAt) return;
    this.inFlight ??= this.refresh().finally(() => (this.inFlight = undefined));
    await this.inFlight;
  }

  /** Fetches the copy now (the account changed: a fetch in flight may predate the change). */
  async refresh(): Promise<void> {
    this.fetches++;
    try {
      const s = await this.deps.fetch();
      if (s) this.answered(s);
    } catch (e) {
      this.retryAt = this.deps.now() + REGISTRY_RETRY_MS;
      this.deps.failed(`${errorMessage(e)}; asked again in ${REGISTRY_RETRY_MS / 1000} s at the earliest`);
    }
  }
}

const dayOf = (now: number): string => new Date(now).toISOString().slice(0, 10);

/**
 * The newer of two answers' totals: of the same day, the larger of each figure (Accounts only adds);
 * `kept` when `incoming` is of an earlier day (computed before midnight, delivered after), unless
 * `kept` is of a day past `today` (the clock was set back); else `incoming`.
 */
function newest(kept: OwnerTotals, incoming: OwnerTotals, today: string): OwnerTotals {
  if (incoming.day === kept.day) {
    return { day: kept.day, runs_today: Math.max(kept.runs_today, incoming.runs_today), tokens_today: Math.max(kept.tokens_today, incoming.tokens_today), tokens_month: Math.max(kept.tokens_month, incoming.tokens_month) };
  }
  return incoming.day < kept.day && kept.day <= today ? kept : incoming;
}

/** `t` plus `u`, totals of a day not before `t`'s (the day's figures add up on the same day, the month's in the same month); `t` as is when it is of a later day. */
function plus(t: OwnerTotals, u: OwnerTotals): OwnerTotals {
  if (t.day > u.day) return t;
  const sameDay = t.day === u.day;
  const sameMonth = t.day.slice(0, 7) === u.day.slice(0, 7);
  return {
    day: u.day,
    runs_today: (sameDay ? t.runs_today : 0) + u.runs_today,
    tokens_today: (sameDay ? t.tokens_today : 0) + u.tokens_today,
    tokens_month: (sameMonth ? t.tokens_month : 0) + u.tokens_month,
  };
}
