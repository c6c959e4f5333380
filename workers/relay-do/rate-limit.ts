// Token buckets for the shard's rate limits, and a size-bounded map of them keyed by pubkey or IP
// so that a reconnect does not reset a client's budget.

export class TokenBucket {
  private tokens: number;
  private last: number;

  constructor(
    private readonly ratePerSecond: number,
    private readonly burst: number,
    now: number,
  ) {
    this.tokens = burst;
    this.last = now;
  }

  /** Takes one token; false when the bucket is empty. `now` in milliseconds. */
  take(now: number): boolean {
    this.tokens = Math.min(this.burst, this.tokens + ((now - this.last) / 1000) * this.ratePerSecond);
    this.last = now;
    if (this.tokens < 1) return false;
    this.tokens -= 1;
    return true;
  }
}

/** Buckets per key, forgetting the least recently used beyond `maxKeys`. */
export class BucketMap {
  private readonly buckets = new Map<string, TokenBucket>();

  constructor(
    private readonly ratePerSecond: number,
    private readonly burst: number,
    private readonly maxKeys = 10_000,
  ) {}

  take(key: string, now: number): boolean {
    let b = this.buckets.get(key);
    if (b) {
      this.buckets.delete(key);
    } else {
      b = new TokenBucket(this.ratePerSecond, this.burst, now);
      if (this.buckets.size >= this.maxKeys) {
        const oldest = this.buckets.keys().next().value;
        if (oldest !== undefined) this.buckets.delete(oldest);
      }
    }
    this.buckets.set(key, b);
    return b.take(now);
  }
}

/**
 * At most `max` hits per key in any window of `windowMs` (exact, unlike a token bucket): keeps the
 * times of the last `max` hits per key, for at most `maxKeys` keys.
 */
export class SlidingWindowLimiter {
  private readonly hits = new Map<string, number[]>();

  constructor(
    private readonly max: number,
    private readonly windowMs: number,
    private readonly maxKeys = 10_000,
  ) {}

  take(key: string, now: number): boolean {
    let times = this.hits.get(key);
    if (times) {
      this.hits.delete(key);
    } else {
      times = [];
      if (this.hits.size >= this.maxKeys) {
        const oldest = this.hits.keys().next().value;
        if (oldest !== undefined) this.hits.delete(oldest);
      }
    }
    this.hits.set(key, times);
    while (times.length > 0 && times[0]! <= now - this.windowMs) times.shift();
    if (times.length >= this.max) return false;
    times.push(now);
    return true;
  }
}
