// The primary's side of live fan-out to its edge objects (docs/SCALING.md): which edges listen
// (stored, so it survives the primary's hibernation), and each accepted event sent once per
// listening edge, in order, batched: one `deliver` RPC in flight per edge, the events accepted
// meanwhile forming its next batch (within the bounds of edge-wire.ts). With no edge listening (K = 1) `publish` returns at once.

import type { NostrEvent } from '../../src/shared/event.js';
import { errorMessage } from '../../src/shared/errors.js';
import { MAX_BATCH_BYTES, MAX_DELIVERY_EVENTS, type Delivery, type Stamp } from './edge-wire.js';

/** What the fan-out needs of an edge object. */
export interface EdgeReceiver {
  deliver(items: Delivery[]): Promise<void>;
}

export class EdgeFanout {
  private readonly listening: Set<number>;
  private epoch: number | undefined;
  private seq = 0;
  private readonly queues = new Map<number, Delivery[]>();
  private readonly sending = new Set<number>();
  private scheduled = false;

  constructor(
    private readonly sql: SqlStorage,
    private readonly edge: (i: number) => EdgeReceiver,
  ) {
    sql.exec('CREATE TABLE IF NOT EXISTS edges_listening (edge INTEGER PRIMARY KEY) WITHOUT ROWID');
    this.listening = new Set(sql.exec<{ edge: number }>('SELECT edge FROM edges_listening').toArray().map((r) => r.edge));
  }

  listen(i: number): void {
    if (this.listening.has(i)) return;
    this.listening.add(i);
    this.sql.exec('INSERT OR IGNORE INTO edges_listening (edge) VALUES (?)', i);
  }

  idle(i: number): void {
    if (!this.listening.delete(i)) return;
    this.sql.exec('DELETE FROM edges_listening WHERE edge = ?', i);
  }

  /** Where the sequence of deliveries stands: every event published later has a later stamp. */
  stamp(): Stamp {
    return { epoch: this.currentEpoch(), seq: this.seq };
  }

  /** Sends an accepted event to every listening edge (after its OK; the edges check who may read it). */
  publish(event: NostrEvent, raw: string): void {
    if (this.listening.size === 0) return;
    this.seq += 1;
    const item: Delivery = { stamp: { epoch: this.currentEpoch(), seq: this.seq }, event, raw };
    for (const i of this.listening) {
      const queue = this.queues.get(i);
      if (queue) queue.push(item);
      else this.queues.set(i, [item]);
    }
    if (!this.scheduled) {
      this.scheduled = true;
      queueMicrotask(() => {
        this.scheduled = false;
        for (const i of this.queues.keys()) this.flush(i);
      });
    }
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

  private flush(i: number): void {
    if (this.sending.has(i)) return;
    const queue = this.queues.get(i);
    if (!queue || queue.length === 0) {
      this.queues.delete(i);
      return;
    }
    const batch = takeBatch(queue);
    this.sending.add(i);
    this.edge(i)
      .deliver(batch)
      .catch((e: unknown) => console.error(`relay shard: ${batch.length} live events not delivered to edge ${i}: ${errorMessage(e)}`))
      .finally(() => {
        this.sending.delete(i);
        this.flush(i);
      });
  }
}

/** Removes and returns the first deliveries of `queue` that fit in one deliver call (at least one). */
function takeBatch(queue: Delivery[]): Delivery[] {
  let bytes = 0;
  let n = 0;
  while (n < queue.length && n < MAX_DELIVERY_EVENTS) {
    bytes += queue[n]!.raw.length;
    if (n > 0 && bytes > MAX_BATCH_BYTES) break;
    n += 1;
  }
  return queue.splice(0, n);
}
