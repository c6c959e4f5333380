// The coalescing windows and the per-minute budget of notification events (notification-limits.ts),
// under fake timers and an injected clock.
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { Coalescer, NotificationBudget } from './notification-limits.js';

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
  it('allows perMinute a minute, logs the first refusal of a window once, and starts afresh a minute later', () => {
    const logs: string[] = [];
    const b = new NotificationBudget(3, (l) => logs.push(l));
    let t = 1_000_000;
    b.now = () => t;
    expect([b.take(), b.take(), b.take(), b.take(), b.take()]).toEqual([true, true, true, false, false]);
    expect(logs).toEqual(['notification budget spent (3 a minute): notifications are dropped for 60 s']);
    t += 59_999;
    expect(b.take()).toBe(false);
    t += 1;
    expect(b.take()).toBe(true);
    expect(logs).toHaveLength(1);
  });
});
