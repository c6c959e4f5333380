// The mark a shard leaves in the BACKUPS bucket while it holds something its last backup lacks, so
// that the backup cron (backup.ts) wakes only the shards written since their backup: one empty
// object, DIRTY_PREFIX + the shard's name (`state/dirty/owner:<hex>`, `state/dirty/public`).
// The shard's primary calls `changed` at each change of what a backup holds (a stored event, a
// revocation, a provisioning record), in the same synchronous step as the change, so that the
// change and the shard's record of it (meta 'backup_mark': 'pending') are stored together; the
// mark is then put (after the write's answer) and recorded as 'marked', so later changes cost
// nothing. A put that failed, or that a crash cut off, is tried again at the next change, at the
// next wake, and by the alarm (MARK_RETRY_MS later): a change is never left unmarked. A mark
// recorded in an earlier life of the object is looked for (one HEAD) at the first change of this
// one, and put again if the bucket lost it.
// A backup tells the shard when it begins (`begin`: what changes from then on may not be in it)
// and, once it is written, `done`: the mark is deleted (and the record with it) unless the shard
// changed since that `begin` (then it stays, for the next run). The record goes before the delete,
// and puts and deletes run one after another (a chain): a change during `done`'s delete records
// 'pending' with its own commit and marks the shard again after the delete, even when the object
// is reset before `done` ends (the next life puts a 'pending' mark). Changes are
// counted in memory under an epoch of this object's life: a `done` for a `begin` of an earlier life
// (the object was evicted meanwhile) deletes nothing. No bucket, or an object that is no shard's
// primary (an edge, a test's unnamed object): nothing is marked.

import { errorMessage } from '../../src/shared/errors.js';
import { ownerOfShardName, shardName } from '../common/shards.js';

/** The bucket's prefix of the marks (outside shards/, which the lifecycle rule on backups expires). */
export const DIRTY_PREFIX = 'state/dirty/';

/** The mark of `owner`'s shard (null: the public shard). */
export const dirtyKey = (owner: string | null): string => `${DIRTY_PREFIX}${shardName(owner)}`;

/** A failed put of the mark is tried again by the shard's alarm this much later (ms), if no change or wake comes first. */
export const MARK_RETRY_MS = 60_000;

/** What a backup's `begin` answers, for its `done`: the changes counted by then, in this object's life. */
export type BackupSince = string;

/** The shard's record of its mark: a change not yet marked, or the mark put. */
type MarkState = 'pending' | 'marked';

const EMPTY = new Uint8Array(0);

export class BackupMarker {
  private readonly key: string | undefined;
  private readonly epoch = crypto.randomUUID();
  private changes = 0;
  private recorded: MarkState | null | undefined;
  /** The mark is in the bucket, as far as this life of the object knows. */
  private present = false;
  private chain: Promise<void> = Promise.resolve();

  /**
   * `name`: the Durable Object's name (a shard's primary: its shard name); `retryAt`: asks the
   * shard's alarm for a time (ms) at which to call `resume`.
   */
  constructor(
    private readonly sql: SqlStorage,
    private readonly bucket: R2Bucket | undefined,
    name: string | undefined,
    private readonly retryAt: (ms: number) => Promise<void>,
  ) {
    const owner = name === undefined ? undefined : ownerOfShardName(name);
    this.key = owner === undefined || !bucket ? undefined : dirtyKey(owner);
    if (this.state() === 'pending') void this.mark();
  }

  /** The shard changed: call in the synchronous step of the change; the promise ends when the mark is put (or failed, logged). */
  changed(): Promise<void> {
    if (this.key === undefined) return Promise.resolve();
    this.changes++;
    if (this.state() === null) this.setState('pending');
    return this.mark();
  }

  /** A change not yet marked is marked now (the alarm, after a failed put). */
  resume(): Promise<void> {
    return this.state() === 'pending' ? this.mark() : Promise.resolve();
  }

  /** A backup begins: what it answers is handed to `done`. */
  begin(): BackupSince {
    return `${this.epoch}:${this.changes}`;
  }

  /** The backup begun at `since` was written: the mark goes unless the shard changed since. */
  done(since: BackupSince): Promise<void> {
    return this.then('delete', async (bucket, key) => {
      if (since !== this.begin()) return;
      // The record goes before the delete: a change while it runs records 'pending' again with its
      // own commit, and the mark it queues is put after the delete (even in a later life).
      this.present = false;
      if (this.state() !== null) this.setState(null);
      await bucket.delete(key);
    });
  }

  private mark(): Promise<void> {
    return this.then('put', async (bucket, key) => {
      const state = this.state();
      if (this.present || state === null) return;
      if (state === 'pending' || !(await bucket.head(key))) await bucket.put(key, EMPTY);
      if (state === 'pending') this.setState('marked');
      this.present = true;
    });
  }

  private then(what: 'put' | 'delete', step: (bucket: R2Bucket, key: string) => Promise<void>): Promise<void> {
    const { bucket, key } = this;
    if (!bucket || key === undefined) return Promise.resolve();
    this.chain = this.chain.then(async () => {
      try {
        await step(bucket, key);
      } catch (e) {
        if (what === 'delete') return console.error(`backups: the delete of ${key} failed (${errorMessage(e)}); the shard is backed up again`);
        console.error(`backups: the put of ${key} failed (${errorMessage(e)}); tried again at the next change, or in ${MARK_RETRY_MS / 1000} s`);
        await this.retryAt(Date.now() + MARK_RETRY_MS).catch((a: unknown) => console.error(`backups: no retry of ${key} could be set (${errorMessage(a)})`));
      }
    });
    return this.chain;
  }

  private state(): MarkState | null {
    if (this.key === undefined) return null;
    if (this.recorded === undefined) {
      const value = this.sql.exec<{ value: string }>("SELECT value FROM meta WHERE key = 'backup_mark'").toArray()[0]?.value;
      this.recorded = value === 'pending' || value === 'marked' ? value : null;
    }
    return this.recorded;
  }

  private setState(state: MarkState | null): void {
    if (state === null) this.sql.exec("DELETE FROM meta WHERE key = 'backup_mark'");
    else this.sql.exec("INSERT OR REPLACE INTO meta (key, value) VALUES ('backup_mark', ?)", state);
    this.recorded = state;
  }
}
