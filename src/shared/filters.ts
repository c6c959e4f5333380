// NIP-01 filters: the zod schema (with the relay's own limits applied by the caller), value
// dedupe and the per-filter value cap, and the matching rule used by live fan-out. Storage queries
// compile the same filter to SQL in the relay and are tested against this matcher.

import { z } from 'zod';
import type { NostrEvent } from './event.js';
import { MAX_KIND } from './kinds.js';
import { HEX64 } from './hex.js';
import { reject, type Rejection } from './errors.js';

const hex64 = z.string().regex(HEX64, 'ids and authors must be 64 lowercase hex characters');
const timestamp = (name: string) =>
  z.number({ error: `${name} must be a number` }).int(`${name} must be an integer`).min(0, `${name} must not be negative`);

const TAG_KEY = /^#[a-zA-Z]$/;

export const FilterSchema = z
  .record(z.string(), z.unknown(), { error: 'a filter must be an object' })
  .superRefine((raw, ctx) => {
    for (const key of Object.keys(raw)) {
      if (!['ids', 'authors', 'kinds', 'since', 'until', 'limit'].includes(key) && !TAG_KEY.test(key)) {
        ctx.addIssue({ code: 'custom', message: `unsupported filter field: ${key}` });
      }
    }
  })
  .pipe(
    z
      .object({
        ids: z.array(hex64, { error: 'ids must be an array' }).optional(),
        authors: z.array(hex64, { error: 'authors must be an array' }).optional(),
        kinds: z
          .array(
            z
              .number({ error: 'kinds must be numbers' })
              .int('kinds must be integers')
              .min(0, 'kinds must not be negative')
              .max(MAX_KIND, `kinds must be at most ${MAX_KIND}`),
            { error: 'kinds must be an array' },
          )
          .optional(),
        since: timestamp('since').optional(),
        until: timestamp('until').optional(),
        limit: timestamp('limit').optional(),
      })
      .catchall(z.array(z.string({ error: 'tag filter values must be strings' }), { error: 'tag filters must be arrays' })),
  );

export type Filter = {
  ids?: string[];
  authors?: string[];
  kinds?: number[];
  since?: number;
  until?: number;
  limit?: number;
  [tag: `#${string}`]: string[] | undefined;
};

/** The `#x` entries of a filter as [letter, values] pairs. */
export function tagFilters(f: Filter): Array<[string, string[]]> {
  const out: Array<[string, string[]]> = [];
  for (const key of Object.keys(f)) {
    if (TAG_KEY.test(key)) out.push([key.slice(1), f[key as `#${string}`]!]);
  }
  return out;
}

const unique = <T>(xs: readonly T[]): T[] => [...new Set(xs)];

/** The same filter with duplicate values removed from every list (same matches, less work). */
export function dedupeFilter(f: Filter): Filter {
  const out: Filter = { ...f };
  if (f.ids) out.ids = unique(f.ids);
  if (f.authors) out.authors = unique(f.authors);
  if (f.kinds) out.kinds = unique(f.kinds);
  for (const [letter, values] of tagFilters(f)) out[`#${letter}`] = unique(values);
  return out;
}

/** Values of a filter, counted over ids, authors, kinds and every #tag list (each list deduplicated). */
export function filterValueCount(f: Filter): number {
  const d = dedupeFilter(f);
  let n = (d.ids?.length ?? 0) + (d.authors?.length ?? 0) + (d.kinds?.length ?? 0);
  for (const [, values] of tagFilters(d)) n += values.length;
  return n;
}

/** The relay's cap on values per filter (`max_filter_values`): the first filter over it, as a rejection. */
export function checkFilterValues(filters: readonly Filter[], max: number): Rejection | undefined {
  for (const f of filters) {
    const n = filterValueCount(f);
    if (n > max) return reject('invalid', `filter has ${n} values (max ${max})`);
  }
  return undefined;
}

/** A filter's lists as sets, built once per filter object (a subscription's filters are matched against every live event). */
interface CompiledFilter {
  ids?: Set<string>;
  authors?: Set<string>;
  kinds?: Set<number>;
  tags: Array<[string, Set<string>]>;
}

const compiled = new WeakMap<Filter, CompiledFilter>();
const eventTagIndexes = new WeakMap<NostrEvent, Map<string, Set<string>>>();

function compile(f: Filter): CompiledFilter {
  let c = compiled.get(f);
  if (!c) {
    c = { tags: tagFilters(f).map(([letter, values]) => [letter, new Set(values)]) };
    if (f.ids) c.ids = new Set(f.ids);
    if (f.authors) c.authors = new Set(f.authors);
    if (f.kinds) c.kinds = new Set(f.kinds);
    compiled.set(f, c);
  }
  return c;
}

/** The first values of an event's tags by tag name, built once per event object. */
function tagIndex(e: NostrEvent): Map<string, Set<string>> {
  let index = eventTagIndexes.get(e);
  if (!index) {
    index = new Map();
    for (const t of e.tags) {
      const [name, value] = t;
      if (name === undefined || value === undefined) continue;
      let values = index.get(name);
      if (!values) index.set(name, (values = new Set()));
      values.add(value);
    }
    eventTagIndexes.set(e, index);
  }
  return index;
}

/** Whether two sets share a member, walking the smaller one. */
function intersects(a: ReadonlySet<string>, b: ReadonlySet<string>): boolean {
  const [small, large] = a.size <= b.size ? [a, b] : [b, a];
  for (const v of small) if (large.has(v)) return true;
  return false;
}

/**
 * NIP-01 matching. The work is bounded by the smaller side of each list (filter values or event
 * tags), never their product: an event with 2,000 tags against filters of 1,000 values each costs
 * set look-ups, not 2,000 × 1,000 comparisons.
 */
export function matchFilter(f: Filter, e: NostrEvent): boolean {
  const c = compile(f);
  if (c.ids && !c.ids.has(e.id)) return false;
  if (c.authors && !c.authors.has(e.pubkey)) return false;
  if (c.kinds && !c.kinds.has(e.kind)) return false;
  if (f.since !== undefined && e.created_at < f.since) return false;
  if (f.until !== undefined && e.created_at > f.until) return false;
  if (c.tags.length === 0) return true;
  const index = tagIndex(e);
  for (const [letter, values] of c.tags) {
    const have = index.get(letter);
    if (!have || !intersects(values, have)) return false;
  }
  return true;
}

export const matchFilters = (filters: readonly Filter[], e: NostrEvent): boolean => filters.some((f) => matchFilter(f, e));

/** NIP-01 order for query results: created_at descending, then id ascending. */
export const compareEvents = (a: Pick<NostrEvent, 'created_at' | 'id'>, b: Pick<NostrEvent, 'created_at' | 'id'>): number =>
  b.created_at - a.created_at || (a.id < b.id ? -1 : a.id > b.id ? 1 : 0);
