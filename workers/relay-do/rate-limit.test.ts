// The shard's limiters on their own, with an injected clock (every `take` gets `now` in ms): token
// buckets, the exact sliding window, and the bounded key maps, checked exactly at their boundaries.
import { describe, expect, it } from 'vitest';
import { BucketMap, SlidingWindowLimiter, TokenBucket } from './rate-limit.js';

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

  it('a token bucket never holds more than its burst, however long it idles', () => {
    const b = new TokenBucket(10, 3, 0);
    for (let i = 0; i < 3; i++) expect(b.take(0)).toBe(true);
    const later = 3_600_000;
    expect([b.take(later), b.take(later), b.take(later), b.take(later)]).toEqual([true, true, true, false]);
  });

  it('refused takes cost nothing: the next token comes exactly 1/rate after the last one was taken', () => {
    const b = new TokenBucket(10, 1, 0);
    expect(b.take(0)).toBe(true);
    for (let t = 0; t < 100; t += 10) expect(b.take(t)).toBe(false);
    expect(b.take(100)).toBe(true);
    expect(b.take(100)).toBe(false);
    expect(b.take(199)).toBe(false);
    expect(b.take(200)).toBe(true);
  });

  it('a clock that steps back takes no tokens away', () => {
    const b = new TokenBucket(10, 2, 1000);
    expect(b.take(1000)).toBe(true);
    expect(b.take(500)).toBe(true);
    expect(b.take(500)).toBe(false);
    expect(b.take(1099)).toBe(false);
    expect(b.take(1100)).toBe(true);
  });

  it('a bucket of a key map starts full at first use and keys do not share tokens', () => {
    const m = new BucketMap(10, 2);
    expect([m.take('a', 5000), m.take('a', 5000), m.take('a', 5000)]).toEqual([true, true, false]);
    expect([m.take('b', 5000), m.take('b', 5000), m.take('b', 5000)]).toEqual([true, true, false]);
    expect(m.take('a', 5099)).toBe(false);
    expect(m.take('a', 5100)).toBe(true);
  });

  it('the sliding window counts only allowed hits, and frees each slot exactly one window after its hit', () => {
    const w = new SlidingWindowLimiter(2, 1000);
    expect([w.take('k', 0), w.take('k', 500)]).toEqual([true, true]);
    for (let t = 501; t < 1000; t += 100) expect(w.take('k', t)).toBe(false); // refusals are not recorded
    expect(w.take('k', 999)).toBe(false);
    expect(w.take('k', 1000)).toBe(true); // the hit at 0 left
    expect(w.take('k', 1499)).toBe(false);
    expect(w.take('k', 1500)).toBe(true); // the hit at 500 left
  });
});
