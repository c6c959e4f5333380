// The owner's plan on its shard (workers/accounts): the account the admin API pushes (plan and
// suspension; none pushed: the default plan), the shard's stored events and bytes, and the checks
// of a write against them — a suspended owner's shard stores nothing new (`restricted: suspended`;
// ephemeral events still pass, so a suspended agent can say so), a stored event over the plan's
// stored_bytes is `restricted: storage quota`, and more than events_per_second events from outside
// connections is `rate-limited`. Stored bytes are counted at load and every RECOUNT_WRITES writes,
// and added as events are stored in between (deletions free room at the next recount).

import { reject, type Rejection } from '../../src/shared/errors.js';
import { DEFAULT_PLAN, planLimits, type PlanEnv } from '../accounts/plans.js';
import type { OwnerState } from '../common/owners.js';
import { TokenBucket } from './rate-limit.js';

const RECOUNT_WRITES = 1000;

export type ShardStorage = {
  events: number;
  /** UTF-8 bytes of the stored events' JSON. */
  bytes: number;
};

export class OwnerPlan {
  private account: OwnerState | undefined;
  private stored: ShardStorage | undefined;
  private writes = 0;
  private bucket: { rate: number; bucket: TokenBucket } | undefined;

  constructor(
    private readonly sql: SqlStorage,
    private readonly env: PlanEnv,
  ) {
    this.sql.exec('CREATE TABLE IF NOT EXISTS owner_account (k INTEGER PRIMARY KEY CHECK (k = 1), plan TEXT NOT NULL, suspended INTEGER NOT NULL)');
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
    this.stored = this.sql.exec<ShardStorage>('SELECT count(*) AS events, coalesce(sum(length(CAST(raw AS BLOB))), 0) AS bytes FROM events').one();
    this.writes = 0;
    return this.stored;
  }

  /** Why the owner's plan refuses an event of `bytes` (stored or not) from an outside connection or not, at `nowMs`. */
  check(stored: boolean, bytes: number, internal: boolean, nowMs: number): Rejection | undefined {
    const plan = planLimits(this.env, this.account?.plan ?? DEFAULT_PLAN);
    if (stored && this.account?.suspended) return reject('restricted', 'suspended: this owner’s shard is read-only');
    if (!internal && plan.events_per_second !== undefined) {
      if (this.bucket?.rate !== plan.events_per_second) {
        this.bucket = { rate: plan.events_per_second, bucket: new TokenBucket(plan.events_per_second, plan.events_per_second, nowMs) };
      }
      if (!this.bucket.bucket.take(nowMs)) return reject('rate-limited', `the owner’s plan allows ${plan.events_per_second} events per second on this shard`);
    }
    if (stored && plan.stored_bytes !== undefined) {
      const now = this.stored && this.writes < RECOUNT_WRITES ? this.stored : this.storage();
      if (now.bytes + bytes > plan.stored_bytes) return reject('restricted', `storage quota: the owner’s plan allows ${plan.stored_bytes} stored bytes on this shard`);
    }
    return undefined;
  }

  /** An event of `bytes` was stored. */
  added(bytes: number): void {
    if (!this.stored) return;
    this.stored = { events: this.stored.events + 1, bytes: this.stored.bytes + bytes };
    this.writes++;
  }
}
