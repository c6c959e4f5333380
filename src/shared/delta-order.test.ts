// DeltaOrder (delta-order.ts): deltas handed on in seq order, each once; at most MAX_EARLY_DELTAS
// wait and at most MAX_RUN_OUTPUT_CHARS characters are taken in all.
import { describe, expect, it } from 'vitest';
import { ANSWER_CUT, DeltaOrder, MAX_EARLY_DELTAS } from './delta-order.js';
import { MAX_RUN_OUTPUT_CHARS } from './nip-xx.js';

const texts = (t: { ready: { text: string }[] }): string => t.ready.map((r) => r.text).join('');

describe('DeltaOrder', () => {
  it('hands deltas on in seq order, each once; one ahead waits for the one expected', () => {
    const o = new DeltaOrder();
    expect(texts(o.push(2, 'c'))).toBe('');
    expect(texts(o.push(1, 'b'))).toBe('');
    expect(o.waiting).toBe(2);
    expect(o.push(0, 'a')).toEqual({ ready: [{ seq: 0, text: 'a' }, { seq: 1, text: 'b' }, { seq: 2, text: 'c' }] });
    expect(o.push(1, 'b again')).toEqual({ ready: [] });
    expect(o.next).toBe(3);
  });

  it(`at most ${MAX_EARLY_DELTAS} wait: a later one is dropped with the reason`, () => {
    const o = new DeltaOrder();
    for (let seq = 1; seq <= MAX_EARLY_DELTAS; seq++) expect(o.push(seq, 'x')).toEqual({ ready: [] });
    expect(o.push(MAX_EARLY_DELTAS + 1, 'x')).toEqual({ ready: [], dropped: `delta ${MAX_EARLY_DELTAS + 1} dropped: ${MAX_EARLY_DELTAS} later deltas already wait for delta 0` });
    expect(o.push(0, 'x').ready).toHaveLength(MAX_EARLY_DELTAS + 1);
  });

  it(`the text stops at ${MAX_RUN_OUTPUT_CHARS} characters: the delta expected is cut, those waiting and all later ones dropped`, () => {
    const o = new DeltaOrder();
    const big = 'a'.repeat(MAX_RUN_OUTPUT_CHARS - 10);
    expect(texts(o.push(0, big))).toBe(big);
    expect(o.push(2, 'waits')).toEqual({ ready: [] });
    expect(o.push(1, 'b'.repeat(20))).toEqual({ ready: [{ seq: 1, text: 'b'.repeat(5) }], dropped: ANSWER_CUT });
    expect(o.full).toBe(true);
    expect(o.waiting).toBe(0);
    expect(o.push(2, 'c')).toEqual({ ready: [], dropped: ANSWER_CUT });
    expect(ANSWER_CUT).toBe('the agent sent over 2097152 characters; the rest of the answer is not shown');
  });

  it('a delta ahead that does not fit ends the stream without handing anything on', () => {
    const o = new DeltaOrder();
    expect(o.push(1, 'a'.repeat(MAX_RUN_OUTPUT_CHARS + 1))).toEqual({ ready: [], dropped: ANSWER_CUT });
    expect(o.push(0, 'b')).toEqual({ ready: [], dropped: ANSWER_CUT });
  });

  it('skip hands the waiting deltas on from the lowest seq; a delta before it is then ignored', () => {
    const o = new DeltaOrder();
    o.push(1_700_000_001, 'second');
    o.push(1_700_000_000, 'first');
    o.push(1_700_000_005, 'later');
    expect(o.skip()).toEqual({ ready: [{ seq: 1_700_000_000, text: 'first' }, { seq: 1_700_000_001, text: 'second' }] });
    expect(o.waiting).toBe(1);
    expect(o.push(3, 'late')).toEqual({ ready: [] });
    expect(new DeltaOrder().skip()).toEqual({ ready: [] });
  });
});
