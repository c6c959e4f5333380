// Token buckets for the shard's rate limits, and a size-bounded map of them keyed by pubkey or IP
// so that a reconnect does not reset a client's budget.

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

/** Buckets per key, forgetting the least recently used beyond `maxKeys`. */
export class BucketMap {
  private readonly buckets: LruMap<string, TokenBucket>;

  constructor(
    private readonly ratePerSecond: number,
    private readonly burst: number,
    maxKeys = 10_000,
  ) {
    this.buckets = new LruMap(maxKeys);
  }

  take(key: string, now: number): boolean {
    const b = this.buckets.getOrCreate(key, () => new TokenBucket(this.ratePerSecond, this.burst, now));
    return b.take(now);
  }
}

/**
 * At most `max` hits per key in any window of `windowMs` (exact, unlike a token bucket): keeps the
 * times of the last `max` hits per key, for at most `maxKeys` keys.
 */
export class SlidingWindowLimiter {
  private readonly hits: LruMap<string, number[]>;

  constructor(
    private readonly max: number,
    private readonly windowMs: number,
    maxKeys = 10_000,
  ) {
    this.hits = new LruMap(maxKeys);
  }

  take(key: string, now: number): boolean {
    const times = this.hits.getOrCreate(key, (): number[] => []);
    while (times.length > 0 && times[0]! <= now - this.windowMs) times.shift();
    if (times.length >= this.max) return false;
    times.push(now);
    return true;
  }
}
