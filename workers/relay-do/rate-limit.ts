// Rate limiters of the shard on an injected clock: token buckets and exact sliding windows, and
// size-bounded maps of them keyed by pubkey or IP, so that a reconnect does not reset a client's budget.

import { LruMap } from '../../src/shared/lru.js';

/**
 * A token bucket on an injected clock: `now` is passed to every call (milliseconds), so tests drive
 * it exactly. Tokens are kept in thousandths: with integer millisecond times and integer rates the
 * refill (elapsed ms × rate per second) is an integer, so no rounding drift delays a token past
 * its boundary. A clock that steps back refills nothing.
 */
export class TokenBucket {
  private milliTokens: number;
  private last: number;

  constructor(
    private readonly ratePerSecond: number,
    private readonly burst: number,
    now: number,
  ) {
    this.milliTokens = burst * 1000;
    this.last = now;
  }

  /** Takes one token; false when the bucket is empty. `now` in milliseconds. */
  take(now: number): boolean {
    const elapsed = Math.max(0, now - this.last);
    this.milliTokens = Math.min(this.burst * 1000, this.milliTokens + elapsed * this.ratePerSecond);
    this.last = Math.max(this.last, now);
    if (this.milliTokens < 1000) return false;
    this.milliTokens -= 1000;
    return true;
  }
}

/** A limiter per key (created at its first use), forgetting the least recently used beyond `maxKeys`. */
class PerKey<L extends { take(now: number): boolean }> {
  private readonly limiters: LruMap<string, L>;

  constructor(
    private readonly create: (now: number) => L,
    maxKeys: number,
  ) {
    this.limiters = new LruMap(maxKeys);
  }

  /** Takes one hit for `key`; false when its limit is reached. `now` in milliseconds. */
  take(key: string, now: number): boolean {
    return this.limiters.getOrCreate(key, () => this.create(now)).take(now);
  }
}

/** Token buckets per key (pubkey, IP), for at most `maxKeys` keys. */
export class BucketMap extends PerKey<TokenBucket> {
  constructor(ratePerSecond: number, burst: number, maxKeys = 10_000) {
    super((now) => new TokenBucket(ratePerSecond, burst, now), maxKeys);
  }
}

/** At most `max` hits in any window of `windowMs` (exact, unlike a token bucket): the times of the last `max` hits. */
class SlidingWindow {
  private readonly times: number[] = [];

  constructor(
    private readonly max: number,
    private readonly windowMs: number,
  ) {}

  take(now: number): boolean {
    const times = this.times;
    while (times.length > 0 && times[0]! <= now - this.windowMs) times.shift();
    if (times.length >= this.max) return false;
    times.push(now);
    return true;
  }
}

/** At most `max` hits per key in any window of `windowMs`, for at most `maxKeys` keys. */
export class SlidingWindowLimiter extends PerKey<SlidingWindow> {
  constructor(max: number, windowMs: number, maxKeys = 10_000) {
    super(() => new SlidingWindow(max, windowMs), maxKeys);
  }
}

/**
 * Byte budgets per key (a client address): what a read returned is charged after it is served, and
 * may take a budget below zero; a key in debt waits until its budget refills at `bytesPerSecond`
 * (starting from `burst`). So one answer of any size is served, and its cost is paid afterwards.
 */
export class ByteBudgets {
  private readonly budgets: LruMap<string, { bytes: number; last: number }>;

  constructor(
    private readonly bytesPerSecond: number,
    private readonly burst: number,
    maxKeys = 10_000,
  ) {
    this.budgets = new LruMap(maxKeys);
  }

  private refilled(key: string, now: number): { bytes: number; last: number } {
    const b = this.budgets.getOrCreate(key, () => ({ bytes: this.burst, last: now }));
    const elapsed = Math.max(0, now - b.last);
    b.bytes = Math.min(this.burst, b.bytes + (elapsed * this.bytesPerSecond) / 1000);
    b.last = Math.max(b.last, now);
    return b;
  }

  /** Charges `bytes` read by `key`. `now` in milliseconds. */
  spend(key: string, bytes: number, now: number): void {
    this.refilled(key, now).bytes -= bytes;
  }

  /** What is left of `key`'s budget now (below zero: its debt). */
  left(key: string, now: number): number {
    return this.refilled(key, now).bytes;
  }

  /** Whole seconds until `key` may read again (its budget above zero), or 0 when it may now. */
  wait(key: string, now: number): number {
    return budgetWait(this.left(key, now), this.bytesPerSecond);
  }
}

/** Whole seconds until a budget with `left` refills above zero at `perSecond`, or 0 when it is above zero. */
export const budgetWait = (left: number, perSecond: number): number => (left > 0 ? 0 : Math.max(1, Math.ceil((1 - left) / perSecond)));

