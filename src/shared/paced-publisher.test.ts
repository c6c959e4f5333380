// The shared paced publisher (src/shared/paced-publisher.ts) on its own, with an injected clock and
// timers: which answers are retried and after which delays, the attempt cap, the rate window, and
// the ordered queue (one delivery at a time, in order, a throwing delivery reported, idle()).
import { describe, expect, it } from 'vitest';
import type { NostrEvent } from './event.js';
import { DEFAULT_RETRY_BACKOFF, OrderedQueue, PacedPublisher, type EmitterTimers, type PublishOutcome, type Settle } from './paced-publisher.js';

const event = { id: 'e', pubkey: 'p', created_at: 0, kind: 24200, tags: [], content: '', sig: 's' } satisfies NostrEvent;

/** A manual clock whose sleep() advances it and records the delay. */
function clock() {
  let t = 1_000_000;
  const sleeps: number[] = [];
  const timers: EmitterTimers = {
    sleep: async (ms) => {
      sleeps.push(ms);
      t += Math.max(0, ms);
    },
    after: () => () => undefined,
  };
  return { now: () => t, timers, sleeps };
}

function publisher(answers: (PublishOutcome | Error)[], o: { maxPerSecond?: number; maxAttempts?: number; settle?: Settle } = {}) {
  const c = clock();
  const attemptsAt: number[] = [];
  const p = new PacedPublisher({
    publish: async () => {
      attemptsAt.push(c.now());
      const a = answers.shift() ?? { ok: true, message: '' };
      if (a instanceof Error) throw a;
      return a;
    },
    now: c.now,
    timers: c.timers,
    maxPerSecond: o.maxPerSecond ?? Infinity,
    marginMs: 50,
    maxAttempts: o.maxAttempts ?? 5,
    backoff: DEFAULT_RETRY_BACKOFF,
    ...(o.settle ? { settle: o.settle } : {}),
  });
  return { p, sleeps: c.sleeps, attemptsAt };
}

describe('PacedPublisher', () => {
  it('retries rate-limited:, error: and thrown publishes with exponential backoff, then succeeds', async () => {
    const { p, sleeps } = publisher([{ ok: false, message: 'rate-limited: slow down' }, { ok: false, message: 'error: timeout' }, new Error('socket closed')]);
    expect(await p.publish(event)).toEqual({ ok: true, message: '' });
    expect(sleeps).toEqual([250, 500, 1000]);
    expect(p.retries).toBe(3);
  });

  it('treats any other refusal as final at once', async () => {
    const { p, sleeps } = publisher([{ ok: false, message: 'invalid: bad tag' }]);
    expect(await p.publish(event)).toEqual({ ok: false, message: 'invalid: bad tag' });
    expect(sleeps).toEqual([]);
    expect(p.retries).toBe(0);
  });

  it('gives up after maxAttempts and says so; a thrown publish becomes an error: answer', async () => {
    const { p, sleeps } = publisher([new Error('down'), new Error('down'), new Error('down')], { maxAttempts: 3 });
    expect(await p.publish(event)).toEqual({ ok: false, message: 'error: publish failed: down (gave up after 3 attempts)' });
    expect(sleeps).toEqual([250, 500]);
  });

  it('follows a caller settle rule (the outbox: every refusal retried, duplicate: delivered)', async () => {
    const settle: Settle = (r) => (r.ok || r.message.startsWith('duplicate:') ? 'delivered' : 'retry');
    const a = publisher([{ ok: false, message: 'invalid: nope' }, { ok: false, message: 'duplicate: have it' }], { settle });
    expect(await a.p.publish(event)).toEqual({ ok: true, message: 'duplicate: have it' });
    expect(a.sleeps).toEqual([250]);
    const b = publisher([{ ok: false, message: 'invalid: nope' }], { settle, maxAttempts: 1 });
    expect(await b.p.publish(event)).toEqual({ ok: false, message: 'invalid: nope (gave up after 1 attempts)' });
  });

  it('keeps at most maxPerSecond attempts in any window of 1000 + margin ms', async () => {
    const { p, attemptsAt } = publisher([], { maxPerSecond: 2 });
    for (let i = 0; i < 5; i++) await p.publish(event);
    expect(attemptsAt.length).toBe(5);
    for (let i = 2; i < attemptsAt.length; i++) expect(attemptsAt[i]! - attemptsAt[i - 2]!).toBeGreaterThanOrEqual(1050);
  });
});

describe('OrderedQueue', () => {
  it('delivers one item at a time in order, reports a throwing delivery, and idle() waits for the end', async () => {
    const log: string[] = [];
    let active = 0;
    const q = new OrderedQueue<number>(
      async (n) => {
        active++;
        expect(active).toBe(1);
        await new Promise((r) => setTimeout(r, 1));
        active--;
        if (n === 2) throw new Error('boom');
        log.push(`sent ${n}`);
      },
      (n, e) => log.push(`failed ${n}: ${(e as Error).message}`),
    );
    q.add(1, 2);
    expect(q.length).toBe(2);
    q.run();
    q.add(3);
    q.run();
    await q.idle();
    expect(log).toEqual(['sent 1', 'failed 2: boom', 'sent 3']);
    expect(q.length).toBe(0);
  });

  it('does nothing until run()', async () => {
    const sent: number[] = [];
    const q = new OrderedQueue<number>(async (n) => void sent.push(n), () => undefined);
    q.add(1);
    await q.idle();
    expect(sent).toEqual([]);
    q.run();
    await q.idle();
    expect(sent).toEqual([1]);
  });
});
