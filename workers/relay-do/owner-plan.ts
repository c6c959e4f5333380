// The owner's plan on its shard (workers/accounts): the account the admin API pushes (plan and
// suspension; none pushed: the default plan), the shard's stored events and bytes, and the checks
// of a write against them — a suspended owner's shard stores nothing new (`restricted: suspended`;
// ephemeral events still pass, so a suspended agent can say so), a stored event over the plan's
// stored_bytes is `restricted: storage quota`, and more than events_per_second events from outside
// connections is `rate-limited`. Stored bytes are counted at load and every RECOUNT_WRITES writes,
// and added as events are stored in between (deletions free room at the next recount).
//
// Strangers may write to the shard too (its inbox: events addressed to the owner or its agents), so
// that they cannot spend the owner's plan: events from others may hold at most INBOX_SHARE of
// stored_bytes, and their events per second are counted in a bucket of their own. What counts as
// the owner's own data is one rule (`ownersData`, a SQL expression) asked of each stored event at
// write time and of every stored event at a recount, so the two always agree: signed by the owner,
// or by a key recorded as the owner's agent (or bridge) and addressed (`p`) to nobody but the owner
// and those keys. Everything else is the inbox's: strangers' events, and the agents' answers to other
// keys (which strangers cause: a prompt from a fresh key gets one, refusals included). A gift wrap
// is signed by a one-time key, so nothing stored tells who sent it: one published on a connection
// authenticated as the owner or one of its agents is judged as if that key had signed it, and, when
// it is the owner's, its id is recorded (`owner_wraps`) for the recount; every other wrap is the
// inbox's. So strangers filling the inbox share with wraps cannot block the owner's wrapped prompts
// to its agents, nor the agents' wrapped answers to the owner.

import { reject, type Rejection } from '../../src/shared/errors.js';
import { DEFAULT_PLAN, planLimits, type PlanEnv } from '../accounts/plans.js';
import type { OwnerState } from '../common/owners.js';
import { TokenBucket } from './rate-limit.js';
import type { NostrEvent } from '../../src/shared/event.js';

const RECOUNT_WRITES = 1000;

/** The part of the plan's stored_bytes that events from others (the inbox) may hold. */
export const INBOX_SHARE = 0.25;

/**
 * A write as the plan sees it: stored or not, its bytes, from edgestr's own agent connection, from
 * a connection outside the owner's side (its events-per-second bucket), and whether it is stored
 * in the inbox share (`OwnerPlan.isInbox`).
 */
export interface PlanWrite {
  stored: boolean;
  bytes: number;
  internal: boolean;
  fromOthers: boolean;
  inbox: boolean;
}

/**
 * The one rule of what a stored event counts as (SQL, ?1 = the owner): the owner's own data when
 * signed by the owner, or signed by a key recorded as the owner's agent and p-tagging nobody but the
 * owner and such keys; otherwise the inbox's. `pubkey` is the event's author and `pValues` a table
 * of its `p` tag values (column `value`): the event's parameters at write time, its stored tag rows
 * at a recount. Agent keys are the shard's records for the owner, whatever their conditions.
 */
const AGENTS_OF_OWNER = 'SELECT agent FROM agent_owners WHERE owner = ?1';
const ownersData = (pubkey: string, pValues: string): string =>
  `(${pubkey} = ?1 OR (${pubkey} IN (${AGENTS_OF_OWNER}) AND NOT EXISTS (SELECT 1 FROM ${pValues} WHERE value != ?1 AND value NOT IN (${AGENTS_OF_OWNER}))))`;
const OWNERS_DATA_AT_WRITE = `SELECT ${ownersData('?2', 'json_each(?3)')} AS own`;
const OWNERS_DATA_STORED = `(${ownersData('events.pubkey', "(SELECT value FROM tags WHERE tags.rid = events.rid AND tags.name = 'p')")} OR events.id IN (SELECT id FROM owner_wraps))`;

/** Stored bytes, and those of events from others. */
type Counted = ShardStorage & { inbox: number };

export type ShardStorage = {
  events: number;
  /** UTF-8 bytes of the stored events' JSON. */
  bytes: number;
};

export class OwnerPlan {
  private account: OwnerState | undefined;
  private stored: Counted | undefined;
  private writes = 0;
  /** The plan's events per second, for the owner's side and for others. */
  private readonly buckets = new Map<boolean, { rate: number; bucket: TokenBucket }>();

  constructor(
    private readonly sql: SqlStorage,
    private readonly env: PlanEnv,
    /** The shard's owner. */
    private readonly owner: () => string | null,
  ) {
    this.sql.exec('CREATE TABLE IF NOT EXISTS owner_account (k INTEGER PRIMARY KEY CHECK (k = 1), plan TEXT NOT NULL, suspended INTEGER NOT NULL)');
    this.sql.exec('CREATE TABLE IF NOT EXISTS owner_wraps (id TEXT PRIMARY KEY) WITHOUT ROWID');
    const row = this.sql.exec<{ plan: string; suspended: number }>('SELECT plan, suspended FROM owner_account').toArray()[0];
    this.account = row ? { plan: row.plan, suspended: row.suspended === 1 } : undefined;
  }

  /** The owner's account as the admin API pushed it (undefined: back to the default plan). */
  set(account: OwnerState | undefined): void {
    this.account = account;
    this.sql.exec('DELETE FROM owner_account');
    if (account) this.sql.exec('INSERT INTO owner_account (k, plan, suspended) VALUES (1, ?, ?)', account.plan, account.suspended ? 1 : 0);
  }

  /** The shard's stored events and their bytes (recounted when asked). */
  storage(): ShardStorage {
    const { events, bytes } = this.recount();
    return { events, bytes };
  }

  private recount(): Counted {
    this.sql.exec('DELETE FROM owner_wraps WHERE id NOT IN (SELECT id FROM events)'); // wraps deleted since (expired, vanished, retention)
    this.stored = this.sql
      .exec<Counted>(
        `SELECT count(*) AS events, coalesce(sum(length(CAST(raw AS BLOB))), 0) AS bytes,
           coalesce(sum(CASE WHEN ${OWNERS_DATA_STORED} THEN 0 ELSE length(CAST(raw AS BLOB)) END), 0) AS inbox
         FROM events`,
        this.owner() ?? '',
      )
      .one();
    this.writes = 0;
    return this.stored;
  }

  /**
   * Whether a stored event of this shard counts against the inbox share (the rule recount() applies
   * to what is stored); a gift wrap is judged with `pubkey` the owner's-side key its connection is
   * authenticated as (write-rules.ts `ownerSideConnection`; see the header).
   */
  isInbox(e: Pick<NostrEvent, 'pubkey' | 'tags'>): boolean {
    const pValues = e.tags.filter((t) => t[0] === 'p' && t[1] !== undefined).map((t) => t[1]);
    return this.sql.exec<{ own: number }>(OWNERS_DATA_AT_WRITE, this.owner() ?? '', e.pubkey, JSON.stringify(pValues)).one().own !== 1;
  }

  /** Why the owner's plan refuses a write at `nowMs`. */
  check(write: PlanWrite, nowMs: number): Rejection | undefined {
    const plan = planLimits(this.env, this.account?.plan ?? DEFAULT_PLAN);
    if (write.stored && this.account?.suspended) return reject('restricted', 'suspended: this owner’s shard is read-only');
    if (!write.internal && plan.events_per_second !== undefined) {
      let b = this.buckets.get(write.fromOthers);
      if (b?.rate !== plan.events_per_second) {
        b = { rate: plan.events_per_second, bucket: new TokenBucket(plan.events_per_second, plan.events_per_second, nowMs) };
        this.buckets.set(write.fromOthers, b);
      }
      if (!b.bucket.take(nowMs)) {
        const from = write.fromOthers ? ' from others' : '';
        return reject('rate-limited', `the owner’s plan allows ${plan.events_per_second} events per second${from} on this shard`);
      }
    }
    if (write.stored && plan.stored_bytes !== undefined) {
      const now = this.stored && this.writes < RECOUNT_WRITES ? this.stored : this.recount();
      if (now.bytes + write.bytes > plan.stored_bytes) return reject('restricted', `storage quota: the owner’s plan allows ${plan.stored_bytes} stored bytes on this shard`);
      const inbox = Math.floor(plan.stored_bytes * INBOX_SHARE);
      if (write.inbox && now.inbox + write.bytes > inbox) {
        return reject('restricted', `storage quota: events from others may hold ${inbox} of the ${plan.stored_bytes} stored bytes the owner’s plan allows on this shard`);
      }
    }
    return undefined;
  }

  /** An event of `bytes` was stored (in the inbox share or not); `ownWrap`: it is a gift wrap that is the owner's data. */
  added(e: Pick<NostrEvent, 'id'>, bytes: number, inbox: boolean, ownWrap: boolean): void {
    if (ownWrap) this.sql.exec('INSERT OR IGNORE INTO owner_wraps (id) VALUES (?)', e.id);
    if (!this.stored) return;
    this.stored = { events: this.stored.events + 1, bytes: this.stored.bytes + bytes, inbox: this.stored.inbox + (inbox ? bytes : 0) };
    this.writes++;
  }
}
