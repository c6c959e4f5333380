// DueAnnouncements (workers/agent/announcements.ts) without an Agent: what an attempt's refusals
// leave due on one connection, the back-off between attempts (30 s doubling up to 10 minutes), the
// bound on attempts, refusals that would come again (not sent again, logged once), and a relay's
// clock refusing a created_at (sent again: the next attempt signs anew).
import { describe, expect, it } from 'vitest';
import { ANNOUNCE_ATTEMPTS, ANNOUNCE_RETRY_MS, DueAnnouncements, refusedForGood } from './announcements.js';

const AGENT = 'a'.repeat(64);
const RELAY = 'wss://relay.example/';
const INFO = { kind: 31340, tags: [['d', 'agent-info']] };
const PROFILE = { kind: 0, tags: [] };
const LIST = { kind: 10002, tags: [['r', RELAY]] };
const SERVER = { kind: 31316, tags: [['d', 'srv']] };
const T = 1_000_000;

describe('an agent’s announcements due on one connection', () => {
  it('the bounds', () => {
    expect([ANNOUNCE_RETRY_MS, ANNOUNCE_ATTEMPTS]).toEqual([30_000, 8]);
  });

  it('all are due at first, at once; taken: nothing is due', () => {
    const due = new DueAnnouncements();
    expect(due.ready(T)).toBe(true);
    expect([INFO, PROFILE, LIST, SERVER].map((t) => due.wants(t))).toEqual([true, true, true, true]);
    expect(due.settle({ refused: [] }, T, AGENT, RELAY)).toEqual({ lines: [], due: false });
    expect(due.nextAfter(T)).toBeUndefined();
  });

  it('a passing refusal keeps only that announcement due, sent again after 30 s, 60 s, … up to 10 minutes, 8 attempts in all, then given up', () => {
    const due = new DueAnnouncements();
    const waits: number[] = [];
    let now = T;
    for (let attempt = 1; attempt < ANNOUNCE_ATTEMPTS; attempt++) {
      const settled = due.settle({ refused: [{ template: INFO, message: 'rate-limited: slow down' }] }, now, AGENT, RELAY);
      const next = due.nextAfter(now)!;
      waits.push(next - now);
      expect(settled).toEqual({ lines: [['warn', `agent ${AGENT}: ${RELAY} did not take its kind 31340 announcement (rate-limited: slow down); sent again in ${(next - now) / 1000} s`]], due: true });
      expect(due.ready(next - 1)).toBe(false);
      expect(due.ready(next)).toBe(true);
      expect([INFO, PROFILE, LIST].map((t) => due.wants(t))).toEqual([true, false, false]);
      now = next;
    }
    expect(waits).toEqual([30, 60, 120, 240, 480, 600, 600].map((s) => s * 1000));
    expect(due.settle({ refused: [{ template: INFO, message: 'error: timed out' }] }, now, AGENT, RELAY)).toEqual({
      lines: [['error', `agent ${AGENT}: ${RELAY} did not take its kind 31340 announcement (error: timed out), 8 attempts in all; not sent again until the agent reconnects to it`]],
      due: false,
    });
    expect(due.nextAfter(now)).toBeUndefined();
    expect(due.wants(INFO)).toBe(false);
  });

  it('a refusal that would come again is logged once and not sent again; the others of the attempt are', () => {
    const due = new DueAnnouncements();
    const settled = due.settle(
      {
        refused: [
          { template: SERVER, message: 'invalid: content is longer than 131072 characters' },
          { template: PROFILE, message: 'restricted: storage quota: this shard has no room for more events from others for now' },
          { template: LIST, message: 'error: the relay is overloaded' },
        ],
      },
      T,
      AGENT,
      RELAY,
    );
    expect(settled).toEqual({
      lines: [
        ['error', `agent ${AGENT}: ${RELAY} refused its kind 31316 announcement (invalid: content is longer than 131072 characters); not sent again until the agent reconnects to it`],
        ['error', `agent ${AGENT}: ${RELAY} refused its kind 0 announcement (restricted: storage quota: this shard has no room for more events from others for now); not sent again until the agent reconnects to it`],
        ['warn', `agent ${AGENT}: ${RELAY} did not take its kind 10002 announcement (error: the relay is overloaded); sent again in 30 s`],
      ],
      due: true,
    });
    expect([INFO, PROFILE, LIST, SERVER].map((t) => due.wants(t))).toEqual([false, false, true, false]);
    // Only final refusals: nothing is due any more.
    const final = new DueAnnouncements();
    expect(final.settle({ refused: [{ template: INFO, message: 'blocked: this pubkey asked to vanish from this relay (NIP-62)' }] }, T, AGENT, RELAY).due).toBe(false);
  });

  it('a created_at the relay’s clock refuses is a passing refusal (the next attempt is signed anew); a failure to build leaves everything due', () => {
    expect(refusedForGood('invalid: created_at is too far in the future')).toBe(false);
    expect(refusedForGood('invalid: created_at is too far in the past')).toBe(false);
    expect(refusedForGood('invalid: too many tags (max 2000)')).toBe(true);
    expect(refusedForGood('rate-limited: slow down')).toBe(false);
    expect(refusedForGood('duplicate: already have it')).toBe(false);
    const due = new DueAnnouncements();
    expect(due.settle({ failed: 'the MCP server srv did not answer' }, T, AGENT, RELAY)).toEqual({
      lines: [['warn', `agent ${AGENT}: its announcements were not sent to ${RELAY} (the MCP server srv did not answer); sent again in 30 s`]],
      due: true,
    });
    expect([INFO, PROFILE, LIST, SERVER].map((t) => due.wants(t))).toEqual([true, true, true, true]);
  });

  it('no second attempt while one is in progress', () => {
    const due = new DueAnnouncements();
    due.sending = true;
    expect(due.ready(T)).toBe(false);
    due.sending = false;
    expect(due.ready(T)).toBe(true);
  });
});
