import { describe, expect, it } from 'vitest';
import type { NostrEvent } from '../../src/shared/event.js';
import type { Filter } from '../../src/shared/filters.js';
import { EdgeInterests, MAX_EDGE_INTEREST_MEMORY, MAX_INTEREST_MEMORY } from './edge-interest.js';
import { MAX_SUMMARY_BYTES } from './edge-wire.js';
import { BYTES_PER_VALUE } from './subscription-memory.js';

const hex = (c: string) => c.repeat(64);
const [ALICE, BOB, CAROL] = ['a', 'b', 'c'].map(hex) as [string, string, string];

const event = (over: Partial<NostrEvent> = {}): NostrEvent => ({
  id: hex('e'),
  pubkey: ALICE,
  created_at: 100,
  kind: 1,
  tags: [],
  content: '',
  sig: hex('0').slice(0, 128),
  ...over,
});

/** A filter whose estimated memory is about `bytes` (authors nobody publishes as). */
const heavy = (bytes: number): Filter => ({
  authors: Array.from({ length: Math.ceil(bytes / (67 + BYTES_PER_VALUE)) }, (_, n) => n.toString(16).padStart(64, '0')),
});

describe('EdgeInterests', () => {
  it('an edge that listed nothing gets every event; one that listed gets what its filters may match', () => {
    const interests = new EdgeInterests();
    expect(interests.needs(0, event())).toBe(true);
    interests.list(1, [['c1/feed', [{ authors: [BOB] }]], ['c2/inbox', [{ '#p': [CAROL], kinds: [4] }]]]);
    expect(interests.needs(1, event({ pubkey: BOB }))).toBe(true);
    expect(interests.needs(1, event({ tags: [['p', CAROL]] }))).toBe(true);
    expect(interests.needs(1, event())).toBe(false);
    interests.remove(1, 'c1/feed');
    expect(interests.needs(1, event({ pubkey: BOB }))).toBe(false);
    interests.add(1, 'c3/kinds', [{ kinds: [7] }]);
    expect(interests.needs(1, event({ kind: 7 }))).toBe(true);
    interests.add(1, 'c4/all', [{ '#t': ['x'] }]); // not indexable: every event may match
    expect(interests.needs(1, event())).toBe(true);
    interests.drop(1);
    expect(interests.needs(1, event())).toBe(true);
    expect(interests.bytes).toBe(0);
  });

  it('a listed subscription replaced under the same key counts once', () => {
    const interests = new EdgeInterests();
    interests.list(0, []);
    interests.add(0, 'c/s', [{ authors: [BOB] }]);
    const once = interests.bytes;
    interests.add(0, 'c/s', [{ authors: [BOB] }]);
    expect(interests.bytes).toBe(once);
    interests.remove(0, 'c/s');
    interests.remove(0, 'c/unknown');
    expect(interests.bytes).toBe(0);
  });

  it('counts what filed filters hold in memory, not their JSON: a listing of short values can hold far more', () => {
    const interests = new EdgeInterests();
    const kinds: Filter = { kinds: Array.from({ length: 1000 }, (_, k) => k) };
    const subs: Array<[string, Filter[]]> = Array.from({ length: Math.ceil(MAX_EDGE_INTEREST_MEMORY / (1000 * BYTES_PER_VALUE)) + 1 }, (_, n) => [`c/${n}`, [kinds]]);
    // Well within what one listing may carry on the wire, but over what an edge may have filed.
    expect(JSON.stringify(subs).length).toBeLessThan(MAX_SUMMARY_BYTES / 8);
    interests.list(0, subs);
    expect(interests.needs(0, event({ kind: 30_000 }))).toBe(true);
    expect(interests.bytes).toBe(0);
  });

  it('an edge past its share of filter bytes, or all edges past theirs, gets every event again and holds no memory', () => {
    const interests = new EdgeInterests();
    interests.list(0, [['c/s', [{ authors: [BOB] }]]]);
    interests.add(0, 'c/big', [heavy(MAX_EDGE_INTEREST_MEMORY)]);
    expect(interests.needs(0, event())).toBe(true);
    expect(interests.bytes).toBe(0);
    // Four edges just under their share fill the shard's; a fifth edge's first REQ goes past it.
    const share = MAX_INTEREST_MEMORY / 4 - 10_000;
    for (const i of [1, 2, 3, 4]) interests.list(i, [[`c${i}/s`, [heavy(share)]]]);
    expect(interests.needs(1, event())).toBe(false);
    interests.list(5, []);
    interests.add(5, 'c5/s', [heavy(60_000)]);
    expect(interests.needs(5, event())).toBe(true);
    expect(interests.bytes).toBeLessThanOrEqual(MAX_INTEREST_MEMORY);
    expect([1, 2, 3, 4].filter((i) => interests.needs(i, event()))).toEqual([]); // the others keep theirs
  });
});
