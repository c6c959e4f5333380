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

  it('allows perMinute a minute in all, logs the first refusal of a window once, and starts afresh a minute later', () => {
    const logs: string[] = [];
    const b = new NotificationBudget(3, 3, (l) => logs.push(l));
    let t = 1_000_000;
    b.now = () => t;
    const admit = (server: string): boolean => b.admit(server, progress(), 'plain');
    expect([admit('a'), admit('b'), admit('c'), admit('a'), admit('d')]).toEqual([true, true, true, false, false]);
    expect(logs).toEqual(['notification budget spent (3 a minute): notifications are dropped for 60 s']);
    t += 59_999;
    expect(admit('a')).toBe(false);
    t += 1;
    expect(admit('a')).toBe(true);
    expect(logs).toHaveLength(1);
  });

  it('one server gets perServer a minute: its refusals leave the others the rest, each server logged once', () => {
    const logs: string[] = [];
    const b = new NotificationBudget(10, 4, (l) => logs.push(l));
    b.now = () => 1_000_000;
    const admit = (server: string): boolean => b.admit(server, progress(), 'plain');
    expect(Array.from({ length: 8 }, () => admit('loud'))).toEqual([true, true, true, true, false, false, false, false]);
    expect(Array.from({ length: 4 }, () => admit('quiet'))).toEqual([true, true, true, true]);
    expect(admit('third')).toBe(true);
    expect(admit('third')).toBe(true);
    expect(admit('third')).toBe(false); // the bridge's 10 are spent
    expect(logs).toEqual([
      'server loud spent its notification share (4 a minute): its notifications are dropped for 60 s',
      'notification budget spent (10 a minute): notifications are dropped for 60 s',
    ]);
    expect(SERVER_NOTIFICATIONS_PER_MINUTE).toBe(NOTIFICATIONS_PER_MINUTE / 2);
  });

  it('a notification that does not fit one event in its form is dropped without taking any budget, logged once a minute per server', () => {
    const logs: string[] = [];
    const b = new NotificationBudget(2, 2, (l) => logs.push(l));
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
