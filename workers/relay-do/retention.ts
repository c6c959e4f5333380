// Retention rules of a shard, set by its owner (PATCH /api/relay/retention): events of the listed
// kinds older than `days` are removed by the shard's alarm, at most RETENTION_BATCH events per
// alarm run (the alarm comes back at once while more remain, else every RETENTION_INTERVAL).
// A kind in several rules keeps the shortest. A write already past its rule is refused (`invalid:`,
// a `rejectEvent` hook), so nothing is accepted only to be removed. Seals and gift wraps (13, 1059,
// 21059), which NIP-59 dates up to two days in the past, are past their rule only
// WRAP_LOOKBACK_SECONDS later (both in the write check and the alarm's removal): a rule of a day on
// wraps refused about half of them before. Kinds the shard keeps for good
// (deletion requests and requests to vanish, store.ts `KEPT_FOR_GOOD`) may not be named: rules
// stored before that was refused are read without them. Stored in the shard's `meta` table (and
// cached in memory), none included once set (`{"rules": []}`: the owner cleared them); advertised
// in NIP-11 as `retention` ([{kinds, time}], time in seconds).
// A backup carries the rules in force (export.ts, a ["RETENTION", rules] line) and a restore puts
// them back (`restore`) only into a shard on which no rules were ever set (a shard made again after
// a wipe): a shard whose owner or operator set its own, none included, keeps them, so an owner who
// cleared a rule to restore what it removed gets those events back. An import never sets them.

import { z } from 'zod';
import { KIND, MAX_KIND } from '../../src/shared/kinds.js';
import { WRAP_LOOKBACK_SECONDS } from '../../src/shared/nip59.js';
import { reject } from '../../src/shared/errors.js';
import type { RejectEventHook } from './policy.js';
import type { RestoredRecord } from './ownership.js';
import { KEPT_FOR_GOOD, type EventStore } from './store.js';

export const RETENTION_BATCH = 500;
export const RETENTION_INTERVAL_SECONDS = 3600;
const DAY = 86_400;

/**
 * How much older than its rule an event of `kind` may be: the kinds NIP-59 dates up to two days
 * back (seals, gift wraps, and the ephemeral wraps some clients date so too) get
 * WRAP_LOOKBACK_SECONDS, so a rule of `days` keeps every wrap sent within `days`; others none.
 */
const slackOf = (kind: number): number => (kind === KIND.SEAL || kind === KIND.GIFT_WRAP || kind === KIND.EPHEMERAL_GIFT_WRAP ? WRAP_LOOKBACK_SECONDS : 0);
const SLACKS = [0, WRAP_LOOKBACK_SECONDS] as const;

const Kind = z.number().int().min(0).max(MAX_KIND);

const rulesOf = (kind: z.ZodType<number>) =>
  z.strictObject({
    rules: z
      .array(
        z.strictObject({
          kinds: z.array(kind).min(1).max(100),
          days: z.number().int().min(1).max(36_500),
        }),
      )
      .max(32),
  });

/** Rules as an owner sets them: a kind kept for good is refused. */
export const RetentionSchema = rulesOf(
  Kind.superRefine((kind, ctx) => {
    const kept = KEPT_FOR_GOOD.get(kind);
    if (kept) ctx.addIssue({ code: 'custom', message: `kind ${kind} (${kept.what}, ${kept.nip}) is kept for good: leave it out of retention rules` });
  }),
);
/** The rules of a backup's RETENTION line (export.ts): the owner's, as set. */
export const RetentionRulesSchema = RetentionSchema.shape.rules;
/** Rules as stored, possibly from before kinds kept for good were refused (`get` leaves them out). */
const StoredRetentionSchema = rulesOf(Kind);
export type Retention = z.infer<typeof RetentionSchema>;
export type RetentionRule = Retention['rules'][number];

/** The NIP-11 `retention` field of these rules. */
export const nip11Retention = (rules: readonly RetentionRule[]) => rules.map((r) => ({ kinds: [...r.kinds], time: r.days * DAY }));

/** Why a restore leaves a shard's rules as they are. */
const KEEPS_ITS_OWN = reject('restricted', "this shard has retention rules of its own (PATCH /api/relay/retention): the backup's are not restored over them");

export class RetentionRules {
  private cached: RetentionRule[] | undefined;

  constructor(private readonly sql: SqlStorage) {}

  /** The rules in force: those stored, without the kinds kept for good (a rule left with none is dropped). */
  get(): RetentionRule[] {
    if (!this.cached) {
      const row = this.sql.exec<{ value: string }>("SELECT value FROM meta WHERE key = 'retention'").toArray()[0];
      const stored = row ? StoredRetentionSchema.parse(JSON.parse(row.value)).rules : [];
      this.cached = stored.map((r) => ({ ...r, kinds: r.kinds.filter((k) => !KEPT_FOR_GOOD.has(k)) })).filter((r) => r.kinds.length > 0);
    }
    return this.cached;
  }

  /** Sets the rules (none included: the shard then keeps them against a restore, see the header). */
  set(rules: RetentionRule[]): void {
    this.sql.exec("INSERT OR REPLACE INTO meta (key, value) VALUES ('retention', ?)", JSON.stringify({ rules }));
    this.cached = undefined;
  }

  /**
   * A backup's rules in a restore (see the header): set when no rules were ever set on this shard,
   * 'known' when they are the rules in force, else refused (the shard keeps its own).
   */
  restore(rules: RetentionRule[]): RestoredRecord {
    if (this.sql.exec("SELECT 1 FROM meta WHERE key = 'retention'").toArray().length === 0) {
      this.set(rules);
      return 'restored';
    }
    return JSON.stringify(this.get()) === JSON.stringify(rules) ? 'known' : KEEPS_ITS_OWN;
  }

  /** The days events of `kind` are kept (the shortest rule naming it), or undefined when no rule does. */
  daysFor(kind: number): number | undefined {
    const days = this.get().filter((r) => r.kinds.includes(kind)).map((r) => r.days);
    return days.length > 0 ? Math.min(...days) : undefined;
  }

  /**
   * Removes at most `batch` events past their rule at `now` (unix seconds); returns the unix second
   * the alarm should come back at, or undefined when there are no rules.
   */
  apply(store: EventStore, now: number, batch = RETENTION_BATCH): number | undefined {
    const rules = this.get();
    if (rules.length === 0) return undefined;
    let left = batch;
    for (const rule of rules) {
      for (const slack of SLACKS) {
        const kinds = rule.kinds.filter((k) => slackOf(k) === slack);
        if (kinds.length > 0 && left > 0) left -= store.purgeOlder(kinds, now - rule.days * DAY - slack, left);
      }
    }
    return left === 0 ? now + 1 : now + RETENTION_INTERVAL_SECONDS;
  }
}

/** Refuses an event already older than its kind's rule (it would be removed by the next alarm). */
export const withinRetention =
  (rules: RetentionRules): RejectEventHook =>
  (e, { now }) => {
    const days = rules.daysFor(e.kind);
    if (days === undefined) return undefined;
    const slack = slackOf(e.kind);
    if (e.created_at >= now - days * DAY - slack) return undefined;
    const more = slack > 0 ? `, plus ${slack} s as NIP-59 dates it up to two days back` : '';
    return reject('invalid', `this shard keeps kind ${e.kind} for ${days} days (NIP-11 retention)${more}`);
  };
