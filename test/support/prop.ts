// Shared settings and mutation arbitraries for the property tests (*.prop.test.ts beside the source,
// test/workers/prop-*.test.ts in workerd). Runs are deterministic (a fixed seed: the same cases on
// every run and machine). On failure fast-check prints the seed, the path and the shrunk
// counterexample; to replay it or explore other cases, set VITE_PROP_SEED (read through
// import.meta.env, which both the Node and the workerd runs fill from VITE_-prefixed variables).

import fc from 'fast-check';

const seedVar = Number((import.meta as unknown as { env: Record<string, string | undefined> }).env.VITE_PROP_SEED);
export const PROP_SEED = Number.isInteger(seedVar) ? seedVar : 7;

export const PROP: fc.Parameters<unknown> = { seed: PROP_SEED, numRuns: 150 };

/** Replaces the character at `i` (mod length) with `c` (a different one when `c` is the same). */
export function replaceChar(s: string, i: number, c: string): string {
  if (s.length === 0) return c;
  const at = i % s.length;
  const ch = c === s[at] ? (c === 'a' ? 'b' : 'a') : c;
  return s.slice(0, at) + ch + s.slice(at + 1);
}

/** A string mutation: flip one character, cut, extend, or replace entirely. */
export const stringMutation: fc.Arbitrary<(s: string) => string> = fc.oneof(
  fc.tuple(fc.nat(), fc.string({ minLength: 1, maxLength: 1, unit: 'grapheme' })).map(([i, c]) => (s: string) => replaceChar(s, i, c)),
  fc.nat().map((i) => (s: string) => s.slice(0, s.length === 0 ? 0 : i % s.length)),
  fc.string({ minLength: 1, maxLength: 8 }).map((x) => (s: string) => s + x),
  fc.string({ maxLength: 40 }).map((x) => (_s: string) => x),
);

/** Any JSON-ish value, including the awkward ones (huge numbers, -0, deep nesting, long strings). */
export const weirdValue: fc.Arbitrary<unknown> = fc.oneof(
  fc.anything({ maxDepth: 3 }),
  fc.constantFrom(0, -0, -1, 1.5, 2 ** 32, 2 ** 53, Number.MAX_VALUE, 1e308, Infinity, NaN, '', null, [], {}, true),
  fc.string({ maxLength: 300 }),
);
