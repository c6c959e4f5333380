// The coalescing windows and the per-minute budgets of notification events, the bridge's and each
// server's, and the drop of one too large for an event (notification-limits.ts), under fake timers
// and an injected clock.
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { notificationTemplate } from '../../../src/shared/dvmcp.js';
import type { EventTemplate } from '../../../src/shared/relay-types.js';
import { messageSize, PLAIN_MESSAGE_MAX_BYTES } from '../../../src/shared/dvmcp-size.js';
import { Coalescer, NOTIFICATIONS_PER_MINUTE, NotificationBudget, SERVER_NOTIFICATIONS_PER_MINUTE } from './notification-limits.js';

describe('Coalescer', () => {
  beforeEach(() => vi.useFakeTimers());
  afterEach(() => vi.useRealTimers());

  it('emits the first value at once, the last of a window at its end, then closes an idle window', () => {
    const out: string[] = [];
    const c = new Coalescer<string, string>(1000, (k, v) => out.push(`${k}=${v}`));
    for (let i = 0; i < 100; i++) c.offer('a', `v${i}`);
    c.offer('b', 'only');
    expect(out).toEqual(['a=v0', 'b=only']);
    vi.advanceTimersByTime(1000);
    expect(out).toEqual(['a=v0', 'b=only', 'a=v99']); // b had nothing held: its window closed
    expect(c.size).toBe(1); // a's trailing value opened a window
    vi.advanceTimersByTime(1000);
    expect(c.size).toBe(0);
    c.offer('a', 'later');
    expect(out.at(-1)).toBe('a=later');
  });

  it('a cancelled key drops its held value; past maxKeys open windows a new key is dropped', () => {
    const out: string[] = [];
    const c = new Coalescer<string, string>(1000, (k, v) => out.push(`${k}=${v}`), 2);
    c.offer('a', '1');
    c.offer('a', '2');
    c.cancel('a');
    vi.advanceTimersByTime(5000);
    expect(out).toEqual(['a=1']);
    expect(c.offer('x', '1')).toBe(true);
    expect(c.offer('y', '1')).toBe(true);
    expect(c.offer('z', '1')).toBe(false);
    expect(out).toEqual(['a=1', 'x=1', 'y=1']);
  });
});

describe('NotificationBudget', () => {
  const client = 'c'.repeat(64);
  const progress = (message = ''): EventTemplate => notificationTemplate(client, 'notifications/progress', { progressToken: 'r', progress: 1, message }, { requestId: 'r', serverId: 's' });

  it('never sends more than perMinute a minute in all, logs a server\'s first refusal of a window once, and starts afresh a minute later', () => {
    const logs: string[] = [];
    const b = new NotificationBudget(4, 4, (l) => logs.push(l));
    let t = 1_000_000;
    b.now = () => t;
    const admit = (server: string): boolean => b.admit(server, progress(), 'plain');
    // a: half of 4; b: half of the 2 a left; c: half of the 1 left is none.
    expect([admit('a'), admit('a'), admit('a'), admit('b'), admit('b'), admit('c'), admit('a')]).toEqual([true, true, false, true, false, false, false]);
    expect(logs).toEqual([
      'server a spent its notification share (2 a minute: half of what the other servers left, at most 4): its notifications are dropped for 60 s',
      'server b spent its notification share (1 a minute: half of what the other servers left, at most 4): its notifications are dropped for 60 s',
      'server c spent its notification share (0 a minute: half of what the other servers left, at most 4): its notifications are dropped for 60 s',
    ]);
    t += 59_999;
    expect(admit('a')).toBe(false);
    t += 1;
    expect(admit('a')).toBe(true);
    expect(logs).toHaveLength(3);
  });

  it('one server gets at most perServer a minute, however much the others left', () => {
    const logs: string[] = [];
    const b = new NotificationBudget(100, 4, (l) => logs.push(l));
    b.now = () => 1_000_000;
    const admit = (server: string): boolean => b.admit(server, progress(), 'plain');
    expect(Array.from({ length: 8 }, () => admit('loud'))).toEqual([true, true, true, true, false, false, false, false]);
    expect(Array.from({ length: 5 }, () => admit('quiet'))).toEqual([true, true, true, true, false]);
    expect(logs).toEqual([
      'server loud spent its notification share (4 a minute: half of what the other servers left, at most 4): its notifications are dropped for 60 s',
      'server quiet spent its notification share (4 a minute: half of what the other servers left, at most 4): its notifications are dropped for 60 s',
    ]);
    expect(SERVER_NOTIFICATIONS_PER_MINUTE).toBe(NOTIFICATIONS_PER_MINUTE / 2);
  });

  it('a server gets at most half of what the other servers left: two (or ten) flooding servers still leave the quiet ones some', () => {
    const logs: string[] = [];
    const b = new NotificationBudget(1200, 600, (l) => logs.push(l));
    b.now = () => 1_000_000;
    const flood = (server: string): number => {
      let n = 0;
      while (b.admit(server, progress(), 'plain')) n += 1;
      return n;
    };
    expect(flood('first')).toBe(600);
    expect(flood('second')).toBe(300);
    expect(flood('third')).toBe(150);
    for (let i = 0; i < 7; i += 1) flood(`more-${i}`);
    expect(flood('quiet')).toBeGreaterThan(0);
    expect(logs.slice(0, 3)).toEqual([
      'server first spent its notification share (600 a minute: half of what the other servers left, at most 600): its notifications are dropped for 60 s',
      'server second spent its notification share (300 a minute: half of what the other servers left, at most 600): its notifications are dropped for 60 s',
      'server third spent its notification share (150 a minute: half of what the other servers left, at most 600): its notifications are dropped for 60 s',
    ]);
  });

  it('servers flooding at the same time split what is left evenly and leave a third of the budget', () => {
    const b = new NotificationBudget(1200, 600, () => undefined);
    b.now = () => 1_000_000;
    const got = { a: 0, b: 0 };
    for (let i = 0; i < 2000; i += 1) for (const s of ['a', 'b'] as const) if (b.admit(s, progress(), 'plain')) got[s] += 1;
    expect(got).toEqual({ a: 400, b: 400 });
    expect(Array.from({ length: 200 }, () => b.admit('late', progress(), 'plain')).filter(Boolean)).toHaveLength(200);
  });

  it('a notification that does not fit one event in its form is dropped without taking any budget, logged once a minute per server', () => {
    const logs: string[] = [];
    const b = new NotificationBudget(4, 2, (l) => logs.push(l));
    let t = 1_000_000;
    b.now = () => t;
    const plain = progress('m'.repeat(PLAIN_MESSAGE_MAX_BYTES));
    const wrapped = progress('語'.repeat(20_000)); // 60,000 bytes: fits plain, not a gift wrap
    expect(b.admit('s', plain, 'plain')).toBe(false);
    expect(b.admit('s', wrapped, 'wrapped')).toBe(false);
    expect(b.admit('s', wrapped, 'plain')).toBe(true);
    expect(b.admit('s', progress(), 'wrapped')).toBe(true);
    expect(logs).toEqual([`notifications/progress of server s dropped: ${messageSize(plain, 'plain').size} bytes, one event carries at most ${PLAIN_MESSAGE_MAX_BYTES} (logged once a minute per server)`]);
    t += 60_000;
    expect(b.admit('s', wrapped, 'wrapped-dm')).toBe(false);
    expect(logs[1]).toBe(`notifications/progress of server s dropped: ${messageSize(wrapped, 'wrapped-dm').size} bytes, one event carries at most ${messageSize(wrapped, 'wrapped-dm').room} (logged once a minute per server)`);
  });
});
