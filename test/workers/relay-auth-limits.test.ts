// NIP-42 AUTH limits: a per-connection token bucket (`auths_per_second_per_connection`,
// `auths_burst_per_connection`) refuses AUTH frames before their signature is verified, and a
// connection may authenticate as at most `max_auth_pubkeys_per_connection` distinct pubkeys.
// The shard's clock is frozen (and advanced by hand) so the bucket cannot refill behind the test.
import { runInDurableObject } from 'cloudflare:test';
import { describe, expect, it } from 'vitest';
import { DEFAULT_LIMITS } from '../../workers/relay-do/limits.js';
import { RelayShard } from '../../workers/relay-do/shard.js';
import { connect, freshOwner, keys, sign, socketObject, type Keys, type TestSocket } from './helpers.js';
import type { NostrEvent } from '../../src/shared/event.js';

const BURST = DEFAULT_LIMITS.auths_burst_per_connection;
const RATE = DEFAULT_LIMITS.auths_per_second_per_connection;
const MAX_KEYS = DEFAULT_LIMITS.max_auth_pubkeys_per_connection;
const RATE_LIMITED = 'rate-limited: slow down: too many AUTH messages on this connection';
const TOO_MANY_KEYS = `restricted: this connection is already authenticated as ${MAX_KEYS} pubkeys (max ${MAX_KEYS})`;

/** Freezes the clock of the object holding the shard's socket at `ms` (unix milliseconds); returns a function that sets it again. */
async function freezeClock(owner: string, ms: number): Promise<(ms: number) => Promise<void>> {
  const holder = await socketObject(owner);
  const set = (at: number) =>
    runInDurableObject(holder, (instance: RelayShard) => {
      instance.clock = () => at;
    });
  await set(ms);
  return set;
}

function authEvent(s: TestSocket, k: Keys, atMs: number): NostrEvent {
  return sign(k, { kind: 22242, content: '', created_at: Math.floor(atMs / 1000), tags: [['relay', s.url], ['challenge', s.challenge]] });
}

/** Sends all AUTH events at once and returns their OK frames, by event. */
async function authAll(s: TestSocket, events: NostrEvent[]): Promise<unknown[][]> {
  for (const e of events) s.send(['AUTH', e]);
  const answers = [];
  for (const e of events) answers.push(await s.next((f) => f[0] === 'OK' && f[1] === e.id));
  return answers;
}

/** How many answers accepted, and the distinct messages of the refusals. */
const tally = (answers: unknown[][]) => ({
  accepted: answers.filter((a) => a[2] === true).length,
  refusals: [...new Set(answers.filter((a) => a[2] !== true).map((a) => a[3]))],
});

describe('AUTH rate limit', () => {
  it(`accepts a burst of ${BURST}, refuses the rest with rate-limited before verifying, and refills at ${RATE}/s`, async () => {
    const owner = freshOwner();
    const s = await connect(`/r/${owner.pk}`);
    const t0 = Date.now();
    const setClock = await freezeClock(owner.pk, t0);
    const burst = Array.from({ length: BURST + 5 }, () => authEvent(s, owner, t0));
    // The clock is frozen: exactly BURST are accepted, whatever order the frames are taken in.
    expect(tally(await authAll(s, burst))).toEqual({ accepted: BURST, refusals: [RATE_LIMITED] });

    // Refused before verification: a forged signature gets the rate limit, not "invalid: signature…".
    const good = authEvent(s, owner, t0);
    const forged = { ...good, sig: good.sig.replace(/.$/, (c) => (c === '0' ? '1' : '0')) };
    expect(await authAll(s, [forged])).toEqual([['OK', forged.id, false, RATE_LIMITED]]);

    // One second later the bucket holds RATE tokens again.
    await setClock(t0 + 1000);
    const later = Array.from({ length: RATE + 1 }, () => authEvent(s, owner, t0));
    expect(tally(await authAll(s, later))).toEqual({ accepted: RATE, refusals: [RATE_LIMITED] });
    // With tokens, the forged one is verified and refused as such.
    await setClock(t0 + 2000);
    expect(await authAll(s, [forged])).toEqual([['OK', forged.id, false, 'invalid: signature verification failed']]);
  });

  it('the bucket is per connection: another connection may still authenticate', async () => {
    const owner = freshOwner();
    const a = await connect(`/r/${owner.pk}`);
    const t0 = Date.now();
    await freezeClock(owner.pk, t0);
    const flood = Array.from({ length: BURST + 1 }, () => authEvent(a, owner, t0));
    expect(tally(await authAll(a, flood))).toEqual({ accepted: BURST, refusals: [RATE_LIMITED] });
    const b = await connect(`/r/${owner.pk}`);
    expect((await b.auth(owner))[2]).toBe(true);
  });
});

describe('AUTH pubkeys per connection', () => {
  it(`allows ${MAX_KEYS} distinct pubkeys, refuses the next new one with restricted, and REQ/COUNT still answer`, async () => {
    const owner = freshOwner();
    const s = await connect(`/r/${owner.pk}`);
    const t0 = Date.now();
    await freezeClock(owner.pk, t0);
    const ks = Array.from({ length: MAX_KEYS }, () => keys());
    // A response to each key, stored on the owner's shard (the owner writes it).
    const pub = await connect(`/r/${owner.pk}`);
    const prompts = ks.map((k) => sign(owner, { kind: 25803, tags: [['p', k.pk]], content: 'x', created_at: Math.floor(t0 / 1000) }));
    for (const e of prompts) expect((await pub.publish(e))[2]).toBe(true);

    for (const k of ks) {
      const e = authEvent(s, k, t0);
      expect(await authAll(s, [e])).toEqual([['OK', e.id, true, '']]);
    }
    const extra = authEvent(s, keys(), t0);
    expect(await authAll(s, [extra])).toEqual([['OK', extra.id, false, TOO_MANY_KEYS]]);
    // Authenticating again as a key the connection already has is fine.
    const again = authEvent(s, ks[0]!, t0);
    expect(await authAll(s, [again])).toEqual([['OK', again.id, true, '']]);

    // At the cap, queries still answer (the read clause does not grow with the number of keys),
    // also with a filter near the statement's parameter budget.
    const manyAuthors = [owner.pk, ...Array.from({ length: 89 }, () => keys().pk)];
    const res = await s.req('mine', { kinds: [25803], authors: manyAuthors });
    expect(res.closed).toBeUndefined();
    expect(new Set(res.events.map((e) => e.id))).toEqual(new Set(prompts.map((e) => e.id)));
    s.send(['COUNT', 'n', { kinds: [25803], authors: manyAuthors }]);
    expect(await s.next((f) => f[1] === 'n')).toEqual(['COUNT', 'n', { count: MAX_KEYS }]);
  });
});
