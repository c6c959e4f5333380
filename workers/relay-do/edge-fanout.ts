// The primary's side of live fan-out to its edge objects (docs/SCALING.md): which edges listen
// (stored, so it survives the primary's hibernation), and each accepted event sent once per
// listening edge, in order, batched: one `deliver` RPC in flight per edge, the events accepted
// meanwhile forming its next batch (within the bounds of edge-wire.ts). With no edge listening
// (K = 1) `publish` returns at once.
//
// Which events an edge needs: each `listen` lists the edge's live subscriptions (when they fit in
// one operation), each REQ's `query` adds one and `forget` removes one, in the edge's order; the
// primary files them per edge (edge-interest.ts, bounded) and sends an edge only the events one of
// its filters may match (the edge still checks each subscription, with the read policy). They live
// in memory: after a restart of the primary every listening edge gets every event until it lists
// its subscriptions again (it does when it sees the new epoch in a delivery, or its first delivery
// after a wake). An edge's REQ, and its periodic check (once a minute while it has subscriptions
// and got no delivery), also make the primary listen to it if it did not, and the edge is told, so
// the two cannot stay apart on whether the edge listens for longer than that (`ensure`).
//
// What an edge has not taken yet is bounded (`edge_delivery_queue_bytes`): past it, and when a
// deliver call fails, the events are dropped and the edge is told the stamp of the last one lost
// on its next deliver call (retried with backoff when nothing else is to be sent), so that it can
// close the subscriptions that missed them instead of leaving gaps nobody sees.
//
// A reset of the primary loses what it held in memory. So that this too is told, the primary
// records the stamp of the last event of each write batch that stored one (in that batch's
// transaction, before any OK or delivery of it leaves) and, per listening edge, the stamp its
// deliver calls were answered up to (at most once a second per edge, the latest written a second
// later); on its next start, each edge it owes events gets that last published stamp as `lost`. A
// restart with nothing owed (the usual wake after hibernation) tells no one anything. Ephemeral
// events lost in a reset are not told, as on any relay that restarts.

import type { NostrEvent } from '../../src/shared/event.js';
import type { Filter } from '../../src/shared/filters.js';
import { EdgeInterests } from './edge-interest.js';
import { errorMessage } from '../../src/shared/errors.js';
import { isAfter, later, MAX_BATCH_BYTES, MAX_DELIVERY_EVENTS, type Delivery, type Lost, type Stamp, type SubSummary } from './edge-wire.js';

/** What the fan-out needs of an edge object. */
export interface EdgeReceiver {
  deliver(items: Delivery[], lost: Lost): Promise<void>;
}

/** What is waiting for one edge: events in order, their bytes, and the last stamp dropped since its last deliver call. */
interface EdgeQueue {
  items: Delivery[];
  bytes: number;
  lost: Lost;
  /** Consecutive failed deliver calls. */
  failures: number;
  /** The last event the edge did not need while earlier ones were still on their way to it. */
  skipped: Lost;
}

/** After a failed deliver call the next one waits 250 ms, 500 ms, … up to 8 s, while the edge listens. */
const RETRY_MS = 250;
const MAX_RETRY_MS = 8_000;
/** An edge's delivery record is written at most this often (a row write each; see the header). */
const RECORD_MS = 1_000;

export class EdgeFanout {
  private readonly listening: Set<number>;
  private epoch: number | undefined;
  private seq = 0;
  private readonly queues = new Map<number, EdgeQueue>();
  private readonly sending = new Set<number>();
  private scheduled = false;
  /** Per edge: when its delivery record was last written, and the stamp waiting to be written. */
  private readonly recordedAt = new Map<number, number>();
  private readonly unrecorded = new Map<number, Stamp>();
  private recordTimer: ReturnType<typeof setTimeout> | undefined;
  /** The listening edges' subscriptions, for those that listed them (the others get every event). */
  private readonly interest = new EdgeInterests();

  constructor(
    private readonly sql: SqlStorage,
    private readonly edge: (i: number) => EdgeReceiver,
    /** RelayLimits.edge_delivery_queue_bytes. */
    private readonly maxQueuedBytes: number,
  ) {
    sql.exec(`
      CREATE TABLE IF NOT EXISTS edges_listening (edge INTEGER PRIMARY KEY) WITHOUT ROWID;
      CREATE TABLE IF NOT EXISTS edges_delivered (edge INTEGER PRIMARY KEY, epoch INTEGER NOT NULL, seq INTEGER NOT NULL) WITHOUT ROWID;
    `);
    this.listening = new Set(sql.exec<{ edge: number }>('SELECT edge FROM edges_listening').toArray().map((r) => r.edge));
    this.tellOwed();
  }

  /**
   * After a start: each listening edge whose last answered deliver call is older than the last
   * event published (or unknown) missed what the previous run of this object still held for it.
   */
  private tellOwed(): void {
    if (this.listening.size === 0) return; // K = 1: nothing to read
    const row = this.sql.exec<{ value: string }>("SELECT value FROM meta WHERE key = 'edge_published'").toArray()[0];
    if (!row) return;
    const [epoch, seq] = row.value.split(':').map(Number);
    const published: Stamp = { epoch: epoch!, seq: seq! };
    const delivered = new Map(
      this.sql
        .exec<{ edge: number; epoch: number; seq: number }>('SELECT edge, epoch, seq FROM edges_delivered')
        .toArray()
        .map((r) => [r.edge, { epoch: r.epoch, seq: r.seq }]),
    );
    for (const i of this.listening) {
      const upTo = delivered.get(i);
      if (upTo && !isAfter(published, upTo)) continue;
      console.error(`relay shard: edge ${i} was owed live events up to ${row.value} when this primary restarted; its subscriptions are told`);
      this.queues.set(i, { items: [], bytes: 0, lost: published, failures: 0, skipped: undefined });
    }
    if (this.queues.size > 0) this.schedule();
  }

  /** Edge `i` has subscriptions: `subs`, all of them, or undefined when it did not list them (every event goes). */
  listen(i: number, subs: SubSummary[] | undefined): void {
    this.interest.list(i, subs);
    this.start(i);
  }

  private start(i: number): void {
    if (this.listening.has(i)) return;
    this.listening.add(i);
    this.sql.exec('INSERT OR IGNORE INTO edges_listening (edge) VALUES (?)', i);
    // Nothing published before now is owed to it: recorded at most once a second, as deliveries are
    // (an edge that goes idle and listens again within a second writes its record once); a restart
    // before the record finds none, and tells the edge of a loss, which may close what missed nothing.
    this.delivered(i, this.stamp());
  }

  /**
   * A REQ at edge `i` opened (or replaced) subscription `key`: its events go there from now on.
   * True when the edge was not listening here (see `ensure`).
   */
  subscribed(i: number, key: string, filters: readonly Filter[]): boolean {
    if (this.ensure(i)) return true;
    this.interest.add(i, key, filters);
    return false;
  }

  /**
   * Edge `i` has subscriptions (a REQ, or its periodic check): listens to it if it did not, with
   * every event (its subscriptions are not known here), and says so (true) so that the edge closes
   * the subscriptions that missed events meanwhile and lists them again. Whatever made the edge and
   * this primary disagree on whether it listens, this brings them together again.
   */
  ensure(i: number): boolean {
    if (this.listening.has(i)) return false;
    console.error(`relay shard: edge ${i} has subscriptions this primary was not sending events to; it is listened to again`);
    // Events published while no edge listened took no stamp: one more marks the gap, so every
    // subscription the edge answered before now is older than the stamp the edge is told.
    this.seq += 1;
    this.interest.drop(i);
    this.start(i);
    return true;
  }

  /** Subscription `key` of edge `i` is gone. */
  forget(i: number, key: string): void {
    this.interest.remove(i, key);
  }

  idle(i: number): void {
    if (!this.listening.delete(i)) return;
    this.sql.exec('DELETE FROM edges_listening WHERE edge = ?', i);
    this.sql.exec('DELETE FROM edges_delivered WHERE edge = ?', i);
    this.unrecorded.delete(i);
    this.interest.drop(i);
    // Nothing held for it matters any more: it has no subscriptions.
    const queue = this.queues.get(i);
    if (queue) Object.assign(queue, { items: [], bytes: 0, lost: undefined });
  }

  /** Where the sequence of deliveries stands: every event published later has a later stamp. */
  stamp(): Stamp {
    return { epoch: this.currentEpoch(), seq: this.seq };
  }

  /**
   * In the transaction of a write batch that will publish `n` events and stored some: records the
   * stamp the last of them will get, so that a restart knows what listening edges were owed (see
   * the header). A batch of ephemeral events alone writes nothing.
   */
  reserve(n: number, stored: boolean): void {
    if (this.listening.size === 0 || n === 0 || !stored) return;
    this.sql.exec(
      "INSERT INTO meta (key, value) VALUES ('edge_published', ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
      `${this.currentEpoch()}:${this.seq + n}`,
    );
  }

  /**
   * Sends an accepted event to every listening edge that may need it (after its OK; the edges check
   * who may read it).
   */
  publish(event: NostrEvent, raw: string): void {
    if (this.listening.size === 0) return;
    this.seq += 1;
    const item: Delivery = { stamp: { epoch: this.currentEpoch(), seq: this.seq }, event, raw };
    for (const i of this.listening) {
      let queue = this.queues.get(i);
      if (!this.interest.needs(i, event)) {
        this.skip(i, queue, item.stamp);
        continue;
      }
      if (!queue) this.queues.set(i, (queue = { items: [], bytes: 0, lost: undefined, failures: 0, skipped: undefined }));
      if (queue.items.length > 0 && queue.bytes + raw.length > this.maxQueuedBytes) {
        console.error(`relay shard: edge ${i} is behind by ${queue.items.length} live events (${queue.bytes} bytes); they are dropped and its subscriptions told`);
        this.drop(queue, queue.items);
      }
      queue.items.push(item);
      queue.bytes += raw.length;
    }
    this.schedule();
  }

  /** Edge `i` does not need the event at `stamp`: once nothing is on its way to it, it is told everything up to there. */
  private skip(i: number, queue: EdgeQueue | undefined, stamp: Stamp): void {
    if (!queue && !this.sending.has(i)) this.delivered(i, stamp);
    else if (queue) queue.skipped = stamp;
  }

  /** Flushes every queue once the current turn's events are published. */
  private schedule(): void {
    if (this.scheduled) return;
    this.scheduled = true;
    queueMicrotask(() => {
      this.scheduled = false;
      for (const i of this.queues.keys()) this.flush(i);
    });
  }

  /** Edge `i` was told everything up to `stamp`: recorded now, or within RECORD_MS of the last record. */
  private delivered(i: number, stamp: Lost): void {
    if (!stamp || !this.listening.has(i)) return;
    if (Date.now() - (this.recordedAt.get(i) ?? 0) >= RECORD_MS) return this.record(i, stamp);
    this.unrecorded.set(i, stamp);
    this.recordTimer ??= setTimeout(() => {
      this.recordTimer = undefined;
      const due = [...this.unrecorded];
      this.unrecorded.clear();
      for (const [j, s] of due) this.record(j, s);
    }, RECORD_MS);
  }

  /** Writes the delivery record of edge `i` (while it listens). */
  private record(i: number, stamp: Stamp): void {
    if (!this.listening.has(i)) return;
    this.recordedAt.set(i, Date.now());
    this.unrecorded.delete(i);
    this.sql.exec(
      'INSERT INTO edges_delivered (edge, epoch, seq) VALUES (?, ?, ?) ON CONFLICT (edge) DO UPDATE SET epoch = excluded.epoch, seq = excluded.seq',
      i,
      stamp.epoch,
      stamp.seq,
    );
  }

  /** One epoch per start of the primary object, counted in storage, so stamps of a new start come after every older one. */
  private currentEpoch(): number {
    if (this.epoch === undefined) {
      const row = this.sql
        .exec<{ value: string }>(
          "INSERT INTO meta (key, value) VALUES ('edge_epoch', '1') ON CONFLICT (key) DO UPDATE SET value = CAST(value AS INTEGER) + 1 RETURNING value",
        )
        .one();
      this.epoch = Number(row.value);
    }
    return this.epoch;
  }

  /** Drops `batch` (taken from `queue`, or its whole content): the edge learns of it on its next deliver call. */
  private drop(queue: EdgeQueue, batch: Delivery[]): void {
    queue.lost = later(queue.lost, batch.at(-1)?.stamp);
    if (batch === queue.items) {
      queue.items = [];
      queue.bytes = 0;
    }
  }

  private flush(i: number): void {
    if (this.sending.has(i)) return;
    const queue = this.queues.get(i);
    if (!queue || (queue.items.length === 0 && !queue.lost)) {
      this.queues.delete(i);
      return;
    }
    const batch = takeBatch(queue);
    const lost = queue.lost;
    queue.lost = undefined;
    this.sending.add(i);
    let retryIn = 0;
    this.edge(i)
      .deliver(batch, lost)
      .then(
        () => {
          queue.failures = 0;
          const skipped = queue.items.length === 0 ? queue.skipped : undefined;
          if (skipped) queue.skipped = undefined;
          this.delivered(i, later(later(batch.at(-1)?.stamp, lost), skipped));
        },
        (e: unknown) => {
          queue.failures += 1;
          queue.lost = later(lost, queue.lost);
          this.drop(queue, batch);
          console.error(`relay shard: ${batch.length} live events not delivered to edge ${i} (attempt ${queue.failures}): ${errorMessage(e)}`);
          retryIn = Math.min(MAX_RETRY_MS, RETRY_MS * 2 ** (queue.failures - 1));
        },
      )
      .finally(() => {
        const next = () => {
          this.sending.delete(i);
          this.flush(i);
        };
        if (retryIn > 0) setTimeout(next, retryIn);
        else next();
      });
  }
}

/** Removes and returns the first deliveries of `queue` that fit in one deliver call (none when it is empty). */
function takeBatch(queue: EdgeQueue): Delivery[] {
  let bytes = 0;
  let n = 0;
  while (n < queue.items.length && n < MAX_DELIVERY_EVENTS) {
    const size = queue.items[n]!.raw.length;
    if (n > 0 && bytes + size > MAX_BATCH_BYTES) break;
    bytes += size;
    n += 1;
  }
  queue.bytes -= bytes;
  return queue.items.splice(0, n);
}
