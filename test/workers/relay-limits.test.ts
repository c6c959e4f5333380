// Enforced limits: subscriptions per connection, and rate limits per connection, per pubkey and
// per IP (which a reconnect does not reset).
import { describe, expect, it } from 'vitest';
import { DEFAULT_LIMITS } from '../../workers/relay-do/limits.js';
import type { NostrEvent } from '../../src/shared/event.js';
import { connect, freshOwner, keys, sign, type TestSocket } from './helpers.js';

describe('limits', () => {
  it(`allows ${DEFAULT_LIMITS.max_subscriptions} subscriptions per connection, refuses one more, and accepts replacing one`, async () => {
    const s = await connect(`/r/${freshOwner().pk}`);
    for (let i = 0; i < DEFAULT_LIMITS.max_subscriptions; i++) expect((await s.req(`s${i}`, { kinds: [1] })).closed).toBeUndefined();
    expect((await s.req('one-more', { kinds: [1] })).closed).toBe(
      `rate-limited: too many open subscriptions (max ${DEFAULT_LIMITS.max_subscriptions}); close one first`,
    );
    expect((await s.req('s0', { kinds: [2] })).closed).toBeUndefined();
    s.send(['CLOSE', 's1']);
    expect((await s.req('now-fits', { kinds: [1] })).closed).toBeUndefined();
  });

  it('clamps limit to max_limit', async () => {
    // Only checks the clamp is applied, on an empty shard: a REQ with a huge limit still answers EOSE.
    const s = await connect(`/r/${freshOwner().pk}`);
    expect(await s.req('big', { kinds: [1], limit: 1_000_000 })).toEqual({ events: [] });
  });

  /** Sends events without waiting, then collects their OKs in order. */
  async function flood(s: TestSocket, events: NostrEvent[]) {
    for (const e of events) s.send(['EVENT', e]);
    const answers = [];
    for (const e of events) answers.push(await s.next((f) => f[0] === 'OK' && f[1] === e.id));
    return answers as Array<[string, string, boolean, string]>;
  }

  /** Tokens a bucket may have regained during `ms` (plus one for rounding). */
  const refill = (perSecond: number, ms: number) => Math.ceil((perSecond * ms) / 1000) + 1;

  /**
   * Every refusal carries `message`; and when the bucket cannot have refilled enough to take all
   * `sent` (a slow machine may take long enough for that), at least one event was refused.
   */
  function expectRefusals(answers: Array<[string, string, boolean, string]>, message: string, burst: number, perSecond: number, elapsed: number) {
    const refused = answers.filter((a) => !a[2]);
    for (const r of refused) expect(r[3]).toBe(message);
    if (burst + refill(perSecond, elapsed) < answers.length) expect(refused.length).toBeGreaterThan(0);
  }

  it('rate-limits events per connection after the burst', async () => {
    const owner = freshOwner();
    // The internal marker of edgestr's own agents is stripped by the router: no exemption from outside.
    const s = await connect(`/r/${owner.pk}`, { 'CF-Connecting-IP': '203.0.113.1', 'x-edgestr-internal': 'agent' });
    const burst = DEFAULT_LIMITS.events_burst_per_connection;
    // Ephemeral events from several authors, so only the connection's bucket can trip.
    const authors = Array.from({ length: 5 }, keys);
    const events = Array.from({ length: burst + 40 }, (_, i) => sign(authors[i % 5]!, { kind: 20000, tags: [['p', owner.pk]], content: String(i) }));
    const started = Date.now();
    const answers = await flood(s, events);
    const elapsed = Date.now() - started;
    const accepted = answers.filter((a) => a[2]).length;
    // Counted, not by position: under load the shard may take queued messages in another order.
    expect(accepted).toBeGreaterThanOrEqual(burst);
    expect(accepted).toBeLessThanOrEqual(burst + refill(DEFAULT_LIMITS.events_per_second_per_connection, elapsed));
    expectRefusals(answers, 'rate-limited: slow down: too many events on this connection', burst, DEFAULT_LIMITS.events_per_second_per_connection, elapsed);
    expect(s.closed).toBeUndefined();
  });

  it('rate-limits one pubkey across connections (a reconnect does not reset it)', async () => {
    const owner = freshOwner();
    const burst = DEFAULT_LIMITS.events_burst_per_pubkey;
    const started = Date.now();
    const answers = [];
    for (let c = 0; c < 3; c++) {
      const s = await connect(`/r/${owner.pk}`, { 'CF-Connecting-IP': `198.51.100.${c}` });
      answers.push(...(await flood(s, Array.from({ length: 90 }, (_, i) => sign(owner, { kind: 20000, content: `${c}/${i}` })))));
      s.close();
    }
    const elapsed = Date.now() - started;
    const accepted = answers.filter((a) => a[2]).length;
    expect(accepted).toBeGreaterThanOrEqual(burst);
    expect(accepted).toBeLessThanOrEqual(burst + refill(DEFAULT_LIMITS.events_per_second_per_pubkey, elapsed));
    expectRefusals(answers, 'rate-limited: slow down: too many events from this pubkey', burst, DEFAULT_LIMITS.events_per_second_per_pubkey, elapsed);
  });

  it('rate-limits one IP address across reconnects', async () => {
    const owner = freshOwner();
    const burst = DEFAULT_LIMITS.events_burst_per_ip;
    const authors = Array.from({ length: 20 }, keys);
    const events = Array.from({ length: burst + 100 }, (_, i) => sign(authors[i % 20]!, { kind: 20000, tags: [['p', owner.pk]], content: String(i) }));
    const started = Date.now();
    const answers = [];
    for (let i = 0; i < events.length; i += 80) {
      const s = await connect(`/r/${owner.pk}`, { 'CF-Connecting-IP': '192.0.2.77' });
      answers.push(...(await flood(s, events.slice(i, i + 80))));
      s.close();
    }
    const elapsed = Date.now() - started;
    const accepted = answers.filter((a) => a[2]).length;
    expect(accepted).toBeGreaterThanOrEqual(burst);
    expect(accepted).toBeLessThanOrEqual(burst + refill(DEFAULT_LIMITS.events_per_second_per_ip, elapsed));
    expectRefusals(answers, 'rate-limited: slow down: too many events from this address', burst, DEFAULT_LIMITS.events_per_second_per_ip, elapsed);
  });
});
