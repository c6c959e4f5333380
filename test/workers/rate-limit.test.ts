// The shard's limiters on their own: token buckets, the exact sliding window, and the bounded key maps.
import { describe, expect, it } from 'vitest';
import { BucketMap, SlidingWindowLimiter, TokenBucket } from '../../workers/relay-do/rate-limit.js';

describe('limiters', () => {
  it('a token bucket allows its burst, then refills at its rate', () => {
    const b = new TokenBucket(10, 3, 0);
    expect([b.take(0), b.take(0), b.take(0), b.take(0)]).toEqual([true, true, true, false]);
    expect(b.take(99)).toBe(false); // 0.99 tokens regained
    expect(b.take(100)).toBe(true);
  });

  it('the sliding window allows exactly max hits in any window', () => {
    const w = new SlidingWindowLimiter(100, 1000);
    for (let i = 0; i < 100; i++) expect(w.take('a', i)).toBe(true);
    expect(w.take('a', 999)).toBe(false);
    expect(w.take('b', 999)).toBe(true); // per key
    expect(w.take('a', 1000)).toBe(true); // the hit at 0 left the window
    expect(w.take('a', 1000)).toBe(false);
  });

  it('key maps forget the least recently used key beyond maxKeys', () => {
    const m = new BucketMap(0.001, 1, 2);
    expect(m.take('a', 0)).toBe(true);
    expect(m.take('b', 0)).toBe(true);
    expect(m.take('a', 0)).toBe(false); // a is now most recently used, and empty
    expect(m.take('c', 0)).toBe(true); // evicts b
    expect(m.take('b', 0)).toBe(true); // b came back with a full bucket (evicting a)
    expect(m.take('c', 0)).toBe(false);
  });
});
