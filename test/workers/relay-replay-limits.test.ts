// A stranger holding a victim's signed events cannot spend the victim's rate buckets by sending
// them again (khatru/strfry-style table): a replay of an event the shard stores, of an older
// version of a replaceable event, of a deleted or expired event is answered before any token is
// taken, and events that are new are charged to their signer's per-pubkey bucket only on a
// connection authenticated (NIP-42) as their signer; anyone else's sending them spends its own
// connection's and address's buckets. The clock is frozen (the shard runs in the test's isolate and
// reads the same Date), so no bucket refills during a test.
import { afterEach, describe, expect, it, vi } from 'vitest';
import { DEFAULT_LIMITS } from '../../workers/relay-do/limits.js';
import type { NostrEvent } from '../../src/shared/event.js';
import { connect, keys, now, randomHex, sign, type Keys, type TestSocket } from './helpers.js';

/** A client address (an IPv6 /64) no other test uses: the per-address buckets of a shard outlive a test. */
const address = (): string => `2001:db8:${randomHex(2)}:${randomHex(2)}::1`;

afterEach(() => vi.useRealTimers());

function freezeClock(): void {
  vi.useFakeTimers({ toFake: ['Date'] });
  vi.setSystemTime(Date.now());
}

type Answer = [string, string, boolean, string];

/** Sends events without waiting, then collects their OKs. */
async function flood(s: TestSocket, events: NostrEvent[]): Promise<Answer[]> {
  for (const e of events) s.send(['EVENT', e]);
  const answers: Answer[] = [];
  for (const e of events) answers.push((await s.next((f) => f[0] === 'OK' && f[1] === e.id)) as Answer);
  return answers;
}

/** The distinct answers (accepted flag and message) of a flood, and how many of each. */
function tally(answers: Answer[]): Record<string, number> {
  const out: Record<string, number> = {};
  for (const [, , accepted, message] of answers) {
    const key = `${accepted} ${message}`;
    out[key] = (out[key] ?? 0) + 1;
  }
  return out;
}

/** More replays than the per-pubkey burst: before the fix, enough to empty the victim's bucket. */
const REPLAYS = DEFAULT_LIMITS.events_burst_per_pubkey + 10;

/** A stranger sends `e` REPLAYS times, over three connections (each under its own burst) from two addresses. */
async function replay(path: string, e: NostrEvent): Promise<Answer[]> {
  const answers: Answer[] = [];
  const perConnection = Math.ceil(REPLAYS / 3);
  const [first, second] = [address(), address()];
  for (const [c, ip] of [first, first, second].entries()) {
    const s = await connect(path, { 'CF-Connecting-IP': ip });
    answers.push(...(await flood(s, Array.from({ length: Math.min(perConnection, REPLAYS - c * perConnection) }, () => e))));
    s.close();
  }
  return answers;
}

interface ReplayCase {
  name: string;
  /** Publishes what the shard must hold first (on the victim's authenticated socket) and returns the event the stranger replays. */
  prepare: (victim: Keys, publish: (e: NostrEvent) => Promise<Answer>) => Promise<NostrEvent>;
  /** What every replay is answered. */
  answer: [boolean, string];
}

const CASES: ReplayCase[] = [
  {
    name: 'a note the shard stores',
    prepare: async (victim, publish) => {
      const note = sign(victim, { content: 'stored' });
      expect(await publish(note)).toEqual(['OK', note.id, true, '']);
      return note;
    },
    answer: [true, 'duplicate: already have this event'],
  },
  {
    name: 'an ephemeral event (never stored: delivered again each time)',
    prepare: async (victim) => sign(victim, { kind: 20001, content: 'ephemeral' }),
    answer: [true, ''],
  },
  {
    name: 'an older version of a replaceable event',
    prepare: async (victim, publish) => {
      const older = sign(victim, { kind: 0, content: '{"name":"old"}', created_at: now() - 100 });
      const newer = sign(victim, { kind: 0, content: '{"name":"new"}', created_at: now() - 10 });
      expect(await publish(newer)).toEqual(['OK', newer.id, true, '']);
      return older;
    },
    answer: [false, 'duplicate: a newer version of this event is already stored'],
  },
  {
    name: 'a note its author deleted',
    prepare: async (victim, publish) => {
      const note = sign(victim, { content: 'to be deleted' });
      expect((await publish(note))[2]).toBe(true);
      const deletion = sign(victim, { kind: 5, tags: [['e', note.id]] });
      expect(await publish(deletion)).toEqual(['OK', deletion.id, true, '']);
      return note;
    },
    answer: [false, 'blocked: this event was deleted by its author'],
  },
  {
    name: 'an expired event (NIP-40)',
    prepare: async (victim) => sign(victim, { content: 'expired', tags: [['expiration', String(now() - 60)]] }),
    answer: [false, 'invalid: event has expired'],
  },
];

const SHARDS: Array<{ name: string; path: (victim: Keys) => string }> = [
  { name: 'the public shard', path: () => '/' },
  { name: "the victim's own shard", path: (victim) => `/r/${victim.pk}` },
];

describe("a stranger replaying a victim's events spends none of the victim's buckets", () => {
  for (const shard of SHARDS) {
    for (const c of CASES) {
      it(`${shard.name}: ${c.name}, sent ${REPLAYS} times by a stranger; the victim's next events are accepted`, async () => {
        freezeClock();
        const victim = keys();
        const path = shard.path(victim);
        const mine = await connect(path, { 'CF-Connecting-IP': address() });
        expect(await mine.auth(victim)).toEqual(['OK', expect.any(String), true, '']);
        const replayed = await c.prepare(victim, (e) => mine.publish(e));
        expect(tally(await replay(path, replayed))).toEqual({ [`${c.answer[0]} ${c.answer[1]}`]: REPLAYS });
        // The victim publishes on, authenticated (its CLI, its console) or not (most clients on `/`).
        const next = sign(victim, { content: 'still here' });
        expect(await mine.publish(next)).toEqual(['OK', next.id, true, '']);
        const plain = await connect(path, { 'CF-Connecting-IP': address() });
        const another = sign(victim, { content: 'from an unauthenticated client' });
        expect(await plain.publish(another)).toEqual(['OK', another.id, true, '']);
        mine.close();
        plain.close();
      }, 60_000);
    }
  }
});

describe("the per-pubkey bucket (events_*_per_pubkey) is the signer's own (relay-limits.test.ts: it bounds a key authenticated from several addresses)", () => {
  const message = 'rate-limited: slow down: too many events from this pubkey';

  it("is not spent by connections not authenticated as the signer: they spend their own connection's and address's buckets", async () => {
    freezeClock();
    const author = keys();
    const stranger = keys();
    // The author's events, new to the shard, carried by a stranger's connections (one of them authenticated as the stranger).
    const events = Array.from({ length: DEFAULT_LIMITS.events_burst_per_pubkey + 70 }, (_, i) => sign(author, { content: `carried ${i}` }));
    const answers: Answer[] = [];
    for (let c = 0; c * 90 < events.length; c++) {
      const s = await connect('/', { 'CF-Connecting-IP': address() });
      if (c === 0) await s.auth(stranger);
      answers.push(...(await flood(s, events.slice(c * 90, c * 90 + 90))));
      s.close();
    }
    expect(tally(answers)).toEqual({ 'true ': events.length });
    // Its own connection's bucket still bounds the carrier.
    const s = await connect('/', { 'CF-Connecting-IP': address() });
    const more = Array.from({ length: DEFAULT_LIMITS.events_burst_per_connection + 1 }, (_, i) => sign(author, { content: `more ${i}` }));
    expect(tally(await flood(s, more))).toEqual({ 'true ': DEFAULT_LIMITS.events_burst_per_connection, 'false rate-limited: slow down: too many events on this connection': 1 });
    // The author, authenticated, still has its whole burst, and no more.
    const perConnection = DEFAULT_LIMITS.events_burst_per_connection;
    const mine: Answer[] = [];
    for (let c = 0; c * perConnection <= DEFAULT_LIMITS.events_burst_per_pubkey; c++) {
      const own = await connect('/', { 'CF-Connecting-IP': address() });
      await own.auth(author);
      const n = Math.min(perConnection, DEFAULT_LIMITS.events_burst_per_pubkey + 1 - c * perConnection);
      mine.push(...(await flood(own, Array.from({ length: n }, (_, i) => sign(author, { content: `mine ${c}/${i}` })))));
      own.close();
    }
    expect(tally(mine)).toEqual({ 'true ': DEFAULT_LIMITS.events_burst_per_pubkey, [`false ${message}`]: 1 });
  });
});
