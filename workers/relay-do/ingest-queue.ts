// Batched ingest of a shard: verified EVENTs wait here, in arrival order, until `max` are queued,
// `windowMs` has passed since the first of them, or the shard needs every write it accepted to be
// visible (before a REQ, COUNT, CLOSE or AUTH, and before an import); then the whole queue is handed
// to `run` at once (the shard stores it in one transaction and answers after the commit, shard.ts).
// `max` 1 or `windowMs` 0 hands over every item as it arrives (no batching).

export interface BatchSettings {
  /** Items that start a flush at once (1: every item on its own). */
  max: number;
  /** Milliseconds the first queued item may wait (0: no waiting). */
  windowMs: number;
}

export class IngestQueue<T> {
  private items: T[] = [];
  private timer: ReturnType<typeof setTimeout> | undefined;

  constructor(
    private readonly settings: BatchSettings,
    /** Handles one batch; its promise settles when the batch's work after the commit is done. */
    private readonly run: (batch: T[]) => Promise<void>,
    /** Where a batch flushed by the timer (no caller to hand it to) reports its failure. */
    private readonly report: (e: unknown) => void,
  ) {}

  /** Queues an item; the promise is that of the flush it started, if it started one. */
  push(item: T): Promise<void> | undefined {
    this.items.push(item);
    if (this.items.length >= this.settings.max || this.settings.windowMs <= 0) return this.flush();
    this.timer ??= setTimeout(() => void this.flush().catch(this.report), this.settings.windowMs);
    return undefined;
  }

  /** Hands every queued item to `run` now (nothing queued: resolved at once). */
  flush(): Promise<void> {
    if (this.timer !== undefined) clearTimeout(this.timer);
    this.timer = undefined;
    if (this.items.length === 0) return Promise.resolve();
    const batch = this.items;
    this.items = [];
    return this.run(batch);
  }

  get size(): number {
    return this.items.length;
  }
}
