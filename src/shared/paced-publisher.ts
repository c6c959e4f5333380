// Paced publishing with bounded retries: what a relay answered to a publish, the retry backoff, the
// injectable timers, and PacedPublisher, which publishes one signed event at a time under a rate
// limit and retries transient refusals. Pure: no Worker or Node APIs, no module-level state.
//
// * Pacing. At most `maxPerSecond` publish attempts happen in any window of 1000 + `marginMs` ms;
//   the margin absorbs network jitter between us and the relay. Infinity turns pacing off.
//
// * Retries. An OK=false answer `rate-limited:` or `error:` (a relay client's own timeouts and lost
//   connections use `error:`), or a publish that throws, is retried with the same signed event after
//   `initialMs · factor^(r-1)` ms capped at `maxMs`, for at most `maxAttempts` attempts in all. Any
//   other answer (`invalid:`, `restricted:`, `auth-required:`, …) is final at once. A caller can
//   pass its own `settle` rule instead (the agent's outbox retries every refusal and takes
//   `duplicate:` as delivered).
//
// * Order. OrderedQueue delivers queued items one at a time, in the order they were added.

import { errorMessage, isTransient } from './errors.js';
import type { NostrEvent } from './event.js';

/** What a relay answered to a publish (the relay client's `publish` fits). */
export interface PublishOutcome {
  ok: boolean;
  message: string;
}

export type PublishFn = (event: NostrEvent) => Promise<PublishOutcome>;

/** Timers, injectable for tests (defaults: the platform's setTimeout). */
export interface EmitterTimers {
  sleep(ms: number): Promise<void>;
  /** Runs `fn` after `ms`; returns a function that cancels it. */
  after(ms: number, fn: () => void): () => void;
}

export const defaultTimers: EmitterTimers = {
  sleep: (ms) => new Promise((resolve) => setTimeout(resolve, Math.max(0, ms))),
  after(ms, fn) {
    const t = setTimeout(fn, Math.max(0, ms));
    return () => clearTimeout(t);
  },
};

export interface BackoffPolicy {
  initialMs: number;
  factor: number;
  maxMs: number;
}

export const DEFAULT_RETRY_BACKOFF: BackoffPolicy = { initialMs: 250, factor: 2, maxMs: 4000 };

/** Delay before retry number `retry` (1-based). */
export const retryDelay = (retry: number, b: BackoffPolicy): number => Math.min(b.maxMs, b.initialMs * b.factor ** Math.max(0, retry - 1));

/** How an answer ends an attempt: delivered, worth another attempt, or final. */
export type Settle = (answer: PublishOutcome) => 'delivered' | 'retry' | 'final';

/** The default rule: OK delivers; `rate-limited:` and `error:` are retried; the rest is final. */
export const retryTransient: Settle = (answer) => {
  if (answer.ok) return 'delivered';
  return isTransient(answer.message) ? 'retry' : 'final';
};


export interface PacedPublisherOptions {
  publish: PublishFn;
  /** Milliseconds since the epoch. */
  now: () => number;
  timers: EmitterTimers;
  /** Publish attempts allowed per window (Infinity: no pacing). */
  maxPerSecond: number;
  /** Added to the 1000 ms window. */
  marginMs: number;
  /** Attempts per event, the first included (at least 1). */
  maxAttempts: number;
  backoff: BackoffPolicy;
  /** Which answers are retried (default retryTransient). */
  settle?: Settle;
}

export class PacedPublisher {
  readonly #publish: PublishFn;
  readonly #now: () => number;
  readonly #timers: EmitterTimers;
  readonly #rate: number;
  readonly #windowMs: number;
  readonly #maxAttempts: number;
  readonly #backoff: BackoffPolicy;
  readonly #settle: Settle;
  readonly #sendTimes: number[] = [];
  #retries = 0;

  constructor(o: PacedPublisherOptions) {
    this.#publish = o.publish;
    this.#now = o.now;
    this.#timers = o.timers;
    this.#rate = o.maxPerSecond;
    this.#windowMs = 1000 + o.marginMs;
    this.#maxAttempts = Math.max(1, o.maxAttempts);
    this.#backoff = o.backoff;
    this.#settle = o.settle ?? retryTransient;
  }

  /** Publish attempts beyond the first, over all events. */
  get retries(): number {
    return this.#retries;
  }

  /**
   * Publishes `event`, retrying what `settle` calls worth it; resolves with the last answer (`ok`
   * set when it counts as delivered, the message suffixed when the attempts ran out). Never throws.
   */
  async publish(event: NostrEvent): Promise<PublishOutcome> {
    let last: PublishOutcome = { ok: false, message: 'error: not sent' };
    for (let attempt = 1; attempt <= this.#maxAttempts; attempt++) {
      if (attempt > 1) {
        this.#retries++;
        await this.#timers.sleep(retryDelay(attempt - 1, this.#backoff));
      }
      await this.#pace();
      this.#sendTimes.push(this.#now());
      try {
        last = await this.#publish(event);
      } catch (e) {
        last = { ok: false, message: `error: publish failed: ${errorMessage(e)}` };
      }
      const verdict = this.#settle(last);
      if (verdict === 'delivered') return { ...last, ok: true };
      if (verdict === 'final') return last;
    }
    return { ok: false, message: `${last.message} (gave up after ${this.#maxAttempts} attempts)` };
  }

  /** Waits until one more attempt keeps ≤ rate attempts in any window of #windowMs. */
  async #pace(): Promise<void> {
    if (!Number.isFinite(this.#rate)) return;
    for (;;) {
      const now = this.#now();
      while (this.#sendTimes.length > 0 && this.#sendTimes[0]! <= now - this.#windowMs) this.#sendTimes.shift();
      if (this.#sendTimes.length < this.#rate) return;
      await this.#timers.sleep(this.#sendTimes[0]! + this.#windowMs - now);
    }
  }
}

/**
 * Runs `deliver` on queued items one at a time, in the order they were added; an item stays in the
 * queue (and in `length`) until its delivery settles. A delivery that throws goes to `onError`.
 */
export class OrderedQueue<T> {
  readonly #items: T[] = [];
  readonly #deliver: (item: T) => Promise<void>;
  readonly #onError: (item: T, e: unknown) => void;
  #draining: Promise<void> | undefined;

  constructor(deliver: (item: T) => Promise<void>, onError: (item: T, e: unknown) => void) {
    this.#deliver = deliver;
    this.#onError = onError;
  }

  /** Items waiting, the one being delivered included. */
  get length(): number {
    return this.#items.length;
  }

  /** Queues items; delivery starts on the next run(). */
  add(...items: T[]): void {
    this.#items.push(...items);
  }

  /** Starts delivering, unless a delivery is under way or nothing waits. */
  run(): void {
    if (this.#draining || this.#items.length === 0) return;
    this.#draining = this.#drain().finally(() => {
      this.#draining = undefined;
      this.run();
    });
  }

  /** Resolves once nothing is being delivered (call run() first to deliver what waits). */
  async idle(): Promise<void> {
    while (this.#draining) await this.#draining;
  }

  async #drain(): Promise<void> {
    while (this.#items.length > 0) {
      const item = this.#items[0]!;
      try {
        await this.#deliver(item);
      } catch (e) {
        this.#onError(item, e);
      }
      this.#items.shift();
    }
  }
}
