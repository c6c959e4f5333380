// EarlyCancels (workers/agent/early-cancels.ts) without an Agent: a cancel waits for its prompt
// EARLY_CANCEL_TTL_MS, only for the key that sent it, once; oversized contents and the oldest
// beyond EARLY_CANCELS are not kept.
import { describe, expect, it } from 'vitest';
import { EARLY_CANCELS, EARLY_CANCEL_MAX_CONTENT, EARLY_CANCEL_TTL_MS, EarlyCancels } from './early-cancels.js';

const T = 1_000_000;

describe('early cancels', () => {
  it('the bounds', () => {
    expect([EARLY_CANCEL_TTL_MS, EARLY_CANCELS, EARLY_CANCEL_MAX_CONTENT]).toEqual([120_000, 1024, 1024]);
  });

  it('is taken once, by the key that sent it, within the TTL', () => {
    const e = new EarlyCancels();
    e.note('run', 'alice', 'c1', T);
    expect(e.take('run', 'mallory', T + 1)).toBeUndefined();
    expect(e.take('run', 'alice', T + EARLY_CANCEL_TTL_MS)).toBe('c1');
    expect(e.take('run', 'alice', T + EARLY_CANCEL_TTL_MS)).toBeUndefined();
    e.note('late', 'alice', 'c2', T);
    expect(e.take('late', 'alice', T + EARLY_CANCEL_TTL_MS + 1)).toBeUndefined();
  });

  it('the owner’s cancel_turn is taken once, within the TTL, and is not a sender’s cancel', () => {
    const e = new EarlyCancels();
    e.noteOwner('run', T);
    expect(e.take('run', 'owner', T)).toBeUndefined();
    expect(e.takeOwner('other', T)).toBe(false);
    expect(e.takeOwner('run', T + EARLY_CANCEL_TTL_MS)).toBe(true);
    expect(e.takeOwner('run', T + EARLY_CANCEL_TTL_MS)).toBe(false);
    e.noteOwner('late', T);
    expect(e.takeOwner('late', T + EARLY_CANCEL_TTL_MS + 1)).toBe(false);
  });

  it('another key’s cancel of the same run does not displace the sender’s', () => {
    const e = new EarlyCancels();
    e.note('run', 'alice', 'mine', T);
    e.note('run', 'mallory', 'theirs', T);
    expect(e.take('run', 'alice', T)).toBe('mine');
  });

  it('keeps no content over the bound, and the newest EARLY_CANCELS', () => {
    const e = new EarlyCancels();
    e.note('big', 'alice', 'x'.repeat(EARLY_CANCEL_MAX_CONTENT + 1), T);
    expect(e.take('big', 'alice', T)).toBeUndefined();
    for (let i = 0; i <= EARLY_CANCELS; i++) e.note(`r${i}`, 'alice', 'c', T);
    expect(e.take('r0', 'alice', T)).toBeUndefined();
    expect(e.take('r1', 'alice', T)).toBe('c');
  });
});
