import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import type { NostrEvent } from '../../src/shared/event.js';
import { matchFilters, type Filter } from '../../src/shared/filters.js';
import { FanoutIndex, placement } from './fanout-index.js';

const hex = (c: string) => c.repeat(64);
const IDS = ['a', 'b', 'c'].map(hex);
const PUBKEYS = ['1', '2', '3'].map(hex);
const KINDS = [1, 7, 30023];

const event = (over: Partial<NostrEvent> = {}): NostrEvent => ({
  id: IDS[0]!,
  pubkey: PUBKEYS[0]!,
  created_at: 100,
  kind: 1,
  tags: [],
  content: '',
  sig: hex('0').slice(0, 128),
  ...over,
});

const filterArb: fc.Arbitrary<Filter> = fc.record(
  {
    ids: fc.subarray(IDS),
    authors: fc.subarray(PUBKEYS),
    kinds: fc.subarray(KINDS),
    '#p': fc.subarray(PUBKEYS),
    '#e': fc.subarray(IDS),
    '#t': fc.subarray(['x', 'y']),
    since: fc.integer({ min: 99, max: 101 }),
  },
  { requiredKeys: [] },
);

const eventArb: fc.Arbitrary<NostrEvent> = fc
  .record({
    id: fc.constantFrom(...IDS),
    pubkey: fc.constantFrom(...PUBKEYS),
    kind: fc.constantFrom(...KINDS),
    tags: fc.array(
      fc.oneof(
        fc.tuple(fc.constant('p'), fc.constantFrom(...PUBKEYS)),
        fc.tuple(fc.constant('e'), fc.constantFrom(...IDS)),
        fc.tuple(fc.constant('t'), fc.constantFrom('x', 'y')),
      ),
      { maxLength: 4 },
    ),
  })
  .map((r) => event({ ...r, tags: r.tags.map((t) => [...t]) }));

describe('FanoutIndex', () => {
  it('yields every subscription with a matching filter (random filters and events), each once', () => {
    fc.assert(
      fc.property(fc.array(fc.array(filterArb, { minLength: 1, maxLength: 3 }), { maxLength: 12 }), eventArb, (subs, e) => {
        const index = new FanoutIndex<number>();
        subs.forEach((filters, i) => index.set(`c${i % 3}`, i, `s${i}`, filters));
        const candidates = [...index.candidates(e)];
        const matching = subs.flatMap((filters, i) => (matchFilters(filters, e) ? [`s${i}`] : []));
        const found = candidates.map((s) => s.sid);
        expect(new Set(found).size).toBe(found.length);
        for (const sid of matching) expect(found).toContain(sid);
        expect(index.mayMatch(e)).toBe(candidates.length > 0);
      }),
      { seed: 7, numRuns: 500 },
    );
  });

  it('files a filter under its most selective condition', () => {
    expect(placement({ ids: [IDS[0]!], authors: [PUBKEYS[0]!] })).toEqual({ dimension: 'ids', values: [IDS[0]] });
    expect(placement({ authors: [PUBKEYS[0]!], kinds: [1] })).toEqual({ dimension: 'authors', values: [PUBKEYS[0]] });
    expect(placement({ '#p': PUBKEYS, '#e': [IDS[0]!], kinds: [1] })).toEqual({ dimension: 'e', values: [IDS[0]] });
    expect(placement({ '#p': [PUBKEYS[0]!], kinds: [1] })).toEqual({ dimension: 'p', values: [PUBKEYS[0]] });
    expect(placement({ kinds: [1, 7], '#t': ['x'] })).toEqual({ dimension: 'kinds', values: [1, 7] });
    expect(placement({ '#t': ['x'] })).toEqual({ dimension: 'any' });
  });

  it('does not yield subscriptions filed under other values', () => {
    const index = new FanoutIndex<string>();
    index.set('c', 'conn', 'by-author', [{ authors: [PUBKEYS[1]!] }]);
    index.set('c', 'conn', 'by-p', [{ '#p': [PUBKEYS[2]!] }]);
    index.set('c', 'conn', 'by-kind', [{ kinds: [7] }]);
    index.set('c', 'conn', 'empty-ids', [{ ids: [] }]);
    expect([...index.candidates(event())]).toEqual([]);
    const sids = (e: NostrEvent) => [...index.candidates(e)].map((s) => s.sid).sort();
    expect(sids(event({ pubkey: PUBKEYS[1]!, kind: 7, tags: [['p', PUBKEYS[2]!]] }))).toEqual(['by-author', 'by-kind', 'by-p']);
  });

  it('replaces a subscription with the same id, and forgets closed ones and dropped connections', () => {
    const index = new FanoutIndex<string>();
    expect(index.empty).toBe(true);
    index.set('c1', 'one', 's', [{ kinds: [1] }]);
    index.set('c1', 'one', 's', [{ kinds: [7] }]);
    index.set('c1', 'one', 't', [{}]);
    index.set('c2', 'two', 's', [{ kinds: [1] }]);
    expect(index.size).toBe(3);
    expect(index.empty).toBe(false);
    expect([...index.candidates(event({ kind: 1 }))].map((s) => `${s.key}/${s.sid}`).sort()).toEqual(['c1/t', 'c2/s']);
    index.delete('c1', 't');
    index.delete('c1', 'unknown');
    expect([...index.candidates(event({ kind: 7 }))].map((s) => `${s.key}/${s.sid}`)).toEqual(['c1/s']);
    index.deleteConnection('c1');
    expect(index.size).toBe(1);
    expect([...index.candidates(event({ kind: 7 }))]).toEqual([]);
    index.deleteConnection('c2');
    expect(index.size).toBe(0);
    expect(index.empty).toBe(true);
    expect([...index.candidates(event({ kind: 1 }))]).toEqual([]);
  });
});
