// nestsWithin and shownJson (json-depth.ts): depth counted as JSON nests, measured without recursion
// at depths where JSON.stringify throws; the shown form compact, cut (cutChars), or a note.
import { describe, expect, it } from 'vitest';
import { MAX_JSON_DEPTH, cutChars, nestsWithin, shownJson } from './json-depth.js';

/** `[` n times, then `]` as often, parsed. */
const nested = (n: number): unknown => JSON.parse(`${'['.repeat(n)}${']'.repeat(n)}`);

describe('nestsWithin', () => {
  it('counts arrays and objects: a scalar 0, [] 1, {"a":[1]} 2, [1,{"b":{"c":{}}}] 4', () => {
    expect(nestsWithin('x', 0)).toBe(true);
    expect(nestsWithin(null, 0)).toBe(true);
    expect(nestsWithin([], 0)).toBe(false);
    expect(nestsWithin([], 1)).toBe(true);
    expect(nestsWithin({ a: [1] }, 1)).toBe(false);
    expect(nestsWithin({ a: [1] }, 2)).toBe(true);
    expect(nestsWithin([1, { b: { c: {} } }, []], 4)).toBe(true);
    expect(nestsWithin([1, { b: { c: {} } }, []], 3)).toBe(false);
  });

  it(`takes ${MAX_JSON_DEPTH} levels by default, not one more`, () => {
    expect(nestsWithin(nested(MAX_JSON_DEPTH))).toBe(true);
    expect(nestsWithin(nested(MAX_JSON_DEPTH + 1))).toBe(false);
    expect(nestsWithin({ a: nested(MAX_JSON_DEPTH) })).toBe(false);
  });

  it('measures 1,000,000 levels (JSON.stringify throws past a few thousand) without overflowing the stack', () => {
    const deep = nested(1_000_000);
    expect(() => JSON.stringify(deep)).toThrow(RangeError);
    expect(nestsWithin(deep)).toBe(false);
    expect(nestsWithin(deep, 2_000_000)).toBe(true);
  });

  it('ends on a cycle', () => {
    const a: unknown[] = [];
    a.push(a);
    expect(nestsWithin(a)).toBe(false);
  });
});

describe('cutChars', () => {
  it('keeps text within maxChars, else its first maxChars characters and the whole length', () => {
    expect(cutChars('abc', 3)).toBe('abc');
    expect(cutChars('abcd', 3)).toBe('abc… (4 characters in all)');
  });
});

describe('shownJson', () => {
  it('compact JSON; past maxChars cut with the whole length; too deep: a note', () => {
    expect(shownJson({ a: [1, 'x'] }, 100)).toBe('{"a":[1,"x"]}');
    expect(shownJson({ a: 'x'.repeat(20) }, 10)).toBe('{"a":"xxxx… (28 characters in all)');
    expect(shownJson(nested(6000), 100)).toBe('(nests deeper than 64 levels: not shown)');
  });

  it('does not cut between the halves of a surrogate pair', () => {
    expect(shownJson('a😀b', 2)).toBe('"a… (6 characters in all)');
    expect(shownJson('a😀b', 4)).toBe('"a😀… (6 characters in all)');
  });
});
