// The bounded LRU map shared by every cache and limiter, checked at its boundary: exactly `max`
// entries are kept, and which one goes depends on reads that refresh (get, getOrCreate, set) and
// reads that do not (peek, has, iteration); with a weight bound, the total weight too.
import { describe, expect, it } from 'vitest';
import { LruMap } from './lru.js';

const keys = <K, V extends {}>(m: LruMap<K, V>): K[] => [...m].map(([k]) => k);

describe('LruMap', () => {
  it('keeps exactly max entries and forgets the least recently used', () => {
    const m = new LruMap<string, number>(3);
    m.set('a', 1).set('b', 2).set('c', 3);
    expect(m.size).toBe(3);
    expect(keys(m)).toEqual(['a', 'b', 'c']);
    m.set('d', 4); // evicts a
    expect(m.size).toBe(3);
    expect(m.has('a')).toBe(false);
    expect(keys(m)).toEqual(['b', 'c', 'd']);
  });

  it('get, getOrCreate and set refresh a key; peek, has and iteration do not', () => {
    const m = new LruMap<string, number>(3);
    m.set('a', 1).set('b', 2).set('c', 3);
    expect(m.peek('a')).toBe(1);
    expect(m.has('a')).toBe(true);
    expect(keys(m)).toEqual(['a', 'b', 'c']);
    expect(m.get('a')).toBe(1);
    expect(keys(m)).toEqual(['b', 'c', 'a']);
    expect(m.getOrCreate('b', () => 99)).toBe(2);
    expect(keys(m)).toEqual(['c', 'a', 'b']);
    m.set('c', 30); // overwriting does not grow the map
    expect(keys(m)).toEqual(['a', 'b', 'c']);
    expect(m.size).toBe(3);
    m.set('d', 4);
    expect(keys(m)).toEqual(['b', 'c', 'd']);
    expect(m.get('a')).toBeUndefined();
    expect(m.peek('a')).toBeUndefined();
  });

  it('getOrCreate creates only on a miss, and the created value counts against the bound', () => {
    const m = new LruMap<string, number[]>(2);
    let created = 0;
    const make = (): number[] => (created++, []);
    const a = m.getOrCreate('a', make);
    expect(m.getOrCreate('a', make)).toBe(a);
    expect(created).toBe(1);
    m.getOrCreate('b', make);
    m.getOrCreate('c', make); // evicts a
    expect(created).toBe(3);
    expect(m.has('a')).toBe(false);
    expect(m.getOrCreate('a', make)).not.toBe(a);
  });

  it('a bound of one keeps only the last key', () => {
    const m = new LruMap<number, string>(1);
    m.set(1, 'x');
    m.set(2, 'y');
    expect(keys(m)).toEqual([2]);
  });

  it('delete and clear, including while iterating oldest first', () => {
    const m = new LruMap<string, number>(5);
    for (const [k, v] of [['a', 1], ['b', 2], ['c', 3]] as const) m.set(k, v);
    for (const [k, v] of m) {
      if (v >= 2) break;
      m.delete(k);
    }
    expect(keys(m)).toEqual(['b', 'c']);
    expect(m.delete('b')).toBe(true);
    expect(m.delete('b')).toBe(false);
    m.clear();
    expect(m.size).toBe(0);
  });

  it('with a weight bound, forgets the least recently used until the weights fit; a value heavier alone is not kept', () => {
    const m = new LruMap<string, string>(10, { of: (v) => v.length, max: 10 });
    m.set('a', 'xxxx').set('b', 'xxxx');
    expect(m.weight).toBe(8);
    m.get('a'); // b is now the least recently used
    m.set('c', 'xxx'); // 11: b goes
    expect(keys(m)).toEqual(['a', 'c']);
    expect(m.weight).toBe(7);
    m.set('a', 'x'); // replacing counts the new weight only
    expect(m.weight).toBe(4);
    m.set('d', 'x'.repeat(11)); // heavier than the bound alone: nothing else goes, it is not kept
    expect(keys(m)).toEqual(['c', 'a']);
    expect(m.weight).toBe(4);
    expect(m.delete('c')).toBe(true);
    expect(m.weight).toBe(1);
    m.clear();
    expect(m.weight).toBe(0);
    expect(() => new LruMap<string, string>(2, { of: (v) => v.length, max: -1 })).toThrow(RangeError);
  });

  it('refuses a bound that is not a positive integer', () => {
    for (const bad of [0, -1, 1.5, Number.NaN, Number.POSITIVE_INFINITY]) {
      expect(() => new LruMap(bad), String(bad)).toThrow(RangeError);
    }
    expect(new LruMap(7).max).toBe(7);
  });
});
