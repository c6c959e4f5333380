// errors.ts: the NIP-01 prefixes read back from OK and CLOSED messages, and which of them are passing.
import { describe, expect, it } from 'vitest';
import { CREATED_AT_TOO_NEW, CREATED_AT_TOO_OLD, formatRejection, isClockRefusal, isRefusedForGood, isTransient, parseRejection, reject } from './errors.js';

describe('parseRejection', () => {
  it('reads back what formatRejection wrote', () => {
    expect(parseRejection(formatRejection(reject('rate-limited', 'slow down')))).toEqual({ prefix: 'rate-limited', reason: 'slow down' });
  });

  it('gives nothing for a message without a known prefix', () => {
    expect(parseRejection('no colon here')).toBeUndefined();
    expect(parseRejection('oops: not a NIP-01 prefix')).toBeUndefined();
  });
});

describe('isTransient', () => {
  it('error: and rate-limited: are passing; every other prefix, and no prefix, is final', () => {
    expect(isTransient('error: live events were lost on the way to this connection (the relay is overloaded); subscribe again')).toBe(true);
    expect(isTransient('rate-limited: slow down')).toBe(true);
    for (const final of ['restricted: no', 'invalid: bad', 'blocked: go away', 'auth-required: who are you', 'duplicate: have it', 'pow: more', 'something else']) {
      expect(isTransient(final)).toBe(false);
    }
  });
});

describe('isRefusedForGood', () => {
  it('blocked:, invalid:, pow: and restricted: are final refusals; duplicate:, passing and unknown answers are not', () => {
    for (const final of ['blocked: this pubkey asked to vanish from this relay (NIP-62)', 'invalid: bad', 'pow: more', 'restricted: no']) expect(isRefusedForGood(final)).toBe(true);
    for (const other of ['duplicate: have it', 'rate-limited: slow down', 'error: no OK from the relay within 10000 ms', 'auth-required: who are you', 'something else', '']) {
      expect(isRefusedForGood(other)).toBe(false);
    }
  });
});

describe('isClockRefusal', () => {
  it('a refusal whose reason is about created_at (this relay\'s words or another relay\'s) is a clock problem; other reasons are not', () => {
    for (const clock of [`invalid: ${CREATED_AT_TOO_NEW}`, `invalid: ${CREATED_AT_TOO_OLD}`, 'invalid: event creation date is too far off from the current time (created_at)']) expect(isClockRefusal(clock)).toBe(true);
    for (const other of ['invalid: bad signature', 'created_at is too far in the future (no prefix)', 'blocked: no', '']) expect(isClockRefusal(other)).toBe(false);
  });
});
