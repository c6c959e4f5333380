// Live matching (src/shared/filters.ts) against the plain NIP-01 reading of a filter: the set-based
// matcher must agree with it on random filters and events, whatever the order of calls.

import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { matchFilter, tagFilters, type Filter } from './filters.js';
import type { NostrEvent } from './event.js';

const hex = (c: string) => c.repeat(64);
const ids = ['a', 'b', 'c'].map(hex);
const keys = ['1', '2', '3'].map(hex);
const letters = ['e', 'p', 't'];
const values = ['x', 'y', 'z', 'w'];

/** NIP-01 as written: every present condition holds; a #x list matches the first value of any x tag. */
function naive(f: Filter, e: NostrEvent): boolean {
  if (f.ids && !f.ids.includes(e.id)) return false;
  if (f.authors && !f.authors.includes(e.pubkey)) return false;
  if (f.kinds && !f.kinds.includes(e.kind)) return false;
  if (f.since !== undefined && e.created_at < f.since) return false;
  if (f.until !== undefined && e.created_at > f.until) return false;
  return tagFilters(f).every(([l, vs]) => e.tags.some((t) => t[0] === l && t[1] !== undefined && vs.includes(t[1])));
}

const event = fc.record({
  id: fc.constantFrom(...ids),
  pubkey: fc.constantFrom(...keys),
  kind: fc.integer({ min: 0, max: 3 }),
  created_at: fc.integer({ min: 0, max: 5 }),
  tags: fc.array(
    fc.oneof(
      fc.tuple(fc.constantFrom(...letters, 'long'), fc.constantFrom(...values)).map((t) => [...t]),
      fc.constantFrom<string[][]>(['e'], ['p', 'x', 'extra']),
    ),
    { maxLength: 6 },
  ),
  content: fc.constant(''),
  sig: fc.constant(hex('0').slice(0, 64) + hex('0')),
});

const filter: fc.Arbitrary<Filter> = fc
  .record(
    {
      ids: fc.array(fc.constantFrom(...ids), { maxLength: 3 }),
      authors: fc.array(fc.constantFrom(...keys), { maxLength: 3 }),
      kinds: fc.array(fc.integer({ min: 0, max: 3 }), { maxLength: 3 }),
      since: fc.integer({ min: 0, max: 5 }),
      until: fc.integer({ min: 0, max: 5 }),
      '#e': fc.array(fc.constantFrom(...values), { maxLength: 3 }),
      '#p': fc.array(fc.constantFrom(...values), { maxLength: 3 }),
      '#t': fc.array(fc.constantFrom(...values), { maxLength: 3 }),
    },
    { requiredKeys: [] },
  )
  .map((f) => f as Filter);

describe('live filter matching', () => {
  it('agrees with the plain NIP-01 reading on random filters and events (each filter reused across events)', () => {
    fc.assert(
      fc.property(fc.array(filter, { minLength: 1, maxLength: 4 }), fc.array(event, { minLength: 1, maxLength: 6 }), (filters, events) => {
        for (const e of events) for (const f of filters) expect(matchFilter(f, e)).toBe(naive(f, e));
      }),
      { numRuns: 300, seed: 20261201 },
    );
  });

  it('an empty list matches nothing, a missing list matches everything', () => {
    const e: NostrEvent = { id: ids[0]!, pubkey: keys[0]!, kind: 1, created_at: 1, tags: [['e', 'x']], content: '', sig: hex('0') };
    expect(matchFilter({ '#e': [] }, e)).toBe(false);
    expect(matchFilter({ kinds: [] }, e)).toBe(false);
    expect(matchFilter({}, e)).toBe(true);
  });

  it('an event with 2,000 tags against 16 filters of 1,000 tag values each is matched by set look-ups', () => {
    const e: NostrEvent = {
      id: ids[0]!, pubkey: keys[0]!, kind: 1, created_at: 1, content: '', sig: hex('0'),
      tags: Array.from({ length: 2000 }, (_, i) => ['e', `v${i}`]),
    };
    const filters: Filter[] = Array.from({ length: 16 }, (_, j) => ({ '#e': Array.from({ length: 1000 }, (_, i) => `w${j}-${i}`) }));
    // A product-cost matcher does 32 million string comparisons here; this one ~16,000 set probes.
    expect(filters.some((f) => matchFilter(f, e))).toBe(false);
    filters.push({ '#e': ['v1999'] });
    expect(filters.some((f) => matchFilter(f, e))).toBe(true);
  });
});
