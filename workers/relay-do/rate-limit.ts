// Token buckets for the shard's rate limits, and a size-bounded map of them keyed by pubkey or IP
// so that a reconnect does not reset a client's budget.

/** The entry for `key`, created when missing, moved to most recently used; the least recently used beyond `maxKeys` is dropped. */
function lruEntry<V>(map: Map<string, V>, key: string, maxKeys: number, create: () => V): V {
  let v = map.get(key);
  if (v === undefined) {
    v = create();
    if (map.size >= maxKeys) {
      const oldest = map.keys().next().value;
      if (oldest !== undefined) map.delete(oldest);
    }
  } else {
    map.delete(key);
  }
  map.set(key, v);
  return v;
}

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
  private readonly buckets = new Map<string, TokenBucket>();

  constructor(
    private readonly ratePerSecond: number,
    private readonly burst: number,
    private readonly maxKeys = 10_000,
  ) {}

  take(key: string, now: number): boolean {
    const b = lruEntry(this.buckets, key, this.maxKeys, () => new TokenBucket(this.ratePerSecond, this.burst, now));
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
    const times = lruEntry(this.hits, key, this.maxKeys, (): number[] => []);
    while (times.length > 0 && times[0]! <= now - this.windowMs) times.shift();
    if (times.length >= this.max) return false;
    times.push(now);
    return true;
  }
}
