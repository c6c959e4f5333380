// Property-based check of the relay's query path (fast-check, inside workerd against a real
// EventStore): random stored events of every stored kind class (replaceable, addressable,
// NIP-XX durable, gift wraps, deletions by id and by address, NIP-40 expirations in the past and
// future) and random multi-filter REQs. A small reference model applies the insert rules of
// docs/PROTOCOL.md; the SQL answers must equal the in-memory matcher over that model: newest first,
// ties by lowest id, limit per filter, union without duplicates, visibility by reader, the byte
// budget as a prefix; and COUNT the size of the union. Each filter is also run under every plan the
// query compiler may choose (each candidate driving list forced in turn).
import { env, runInDurableObject } from 'cloudflare:test';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { expirationOf, type NostrEvent } from '../../src/shared/event.js';
import { compareEvents, matchFilter, type Filter } from '../../src/shared/filters.js';
import { KIND } from '../../src/shared/kinds.js';
import { coordinateD, EventStore, mayDelete, parseCoordinate, supersedes, type InsertOutcome } from '../../workers/relay-do/store.js';
import { canRead } from '../../workers/relay-do/read-policy.js';
import { compileFilter, type CompiledQuery, type Probe } from '../../workers/relay-do/query-sql.js';

const T0 = 1_700_000_000;
const NOW = T0 + 3;
const PEOPLE = ['1', '2', '3'].map((c) => c.repeat(64));
const KINDS = [1, 7, 0, 3, 10002, 30023, 31340, 25802, 25803, 1059, 1059, KIND.DELETION, KIND.DELETION];
const LETTERS = ['a', 'b', 'c', 'd', 'e'];
const VALUES = ['v0', 'v1', 'v2'];
const SIG = '0'.repeat(128);

/** What the generator draws for one event; turned into an event once the earlier ones exist. */
interface Draft {
  nonce: string;
  author: number;
  kind: number;
  at: number;
  tags: Array<[string, string]>;
  p: number[];
  d: string | undefined;
  expiration: 'none' | 'past' | 'future';
  targets: number[];
  addrTargets: number[];
}

const draftArb: fc.Arbitrary<Draft> = fc.record({
  nonce: fc.string({ unit: fc.constantFrom(...'0123456789abcdef'), minLength: 8, maxLength: 8 }),
  author: fc.nat({ max: PEOPLE.length - 1 }),
  kind: fc.constantFrom(...KINDS),
  at: fc.integer({ min: T0, max: T0 + 5 }),
  tags: fc.array(fc.tuple(fc.constantFrom(...LETTERS), fc.constantFrom(...VALUES)), { maxLength: 3 }),
  p: fc.array(fc.nat({ max: PEOPLE.length - 1 }), { maxLength: 2 }),
  d: fc.option(fc.constantFrom('', 'x', 'y'), { nil: undefined }),
  expiration: fc.constantFrom('none', 'none', 'none', 'past', 'future'),
  targets: fc.array(fc.nat(), { maxLength: 4 }),
  addrTargets: fc.array(fc.nat(), { maxLength: 2 }),
});

/** Events from drafts: unique ids; deletions name earlier events (and sometimes unknown ids). */
function build(drafts: Draft[]): NostrEvent[] {
  const out: NostrEvent[] = [];
  drafts.forEach((g, i) => {
    const pubkey = PEOPLE[g.author]!;
    const tags: string[][] = g.tags.map(([l, v]) => [l, v]);
    for (const p of g.p) tags.push(['p', PEOPLE[p]!]);
    if (g.d !== undefined) tags.push(['d', g.d]);
    if (g.expiration === 'past') tags.push(['expiration', String(NOW - 1)]);
    if (g.expiration === 'future') tags.push(['expiration', String(NOW + 100)]);
    if (g.kind === KIND.DELETION && out.length > 0) {
      for (const t of g.targets) tags.push(['e', t % 5 === 4 ? `${'f'.repeat(56)}${g.nonce}` : out[t % out.length]!.id]);
      // Often also every earlier gift wrap addressed to the deleter (the recipient may delete it).
      if (g.targets.length % 2 === 1) {
        for (const w of out) if (w.kind === KIND.GIFT_WRAP && w.tags.some((t) => t[0] === 'p' && t[1] === pubkey)) tags.push(['e', w.id]);
      }
      for (const t of g.addrTargets) {
        const target = out[t % out.length]!;
        const d = coordinateD(target);
        if (d !== null) tags.push(['a', `${target.kind}:${target.pubkey}:${d}`]);
      }
    }
    const id = `${g.nonce}${i.toString(16).padStart(56, '0')}`;
    out.push({ id, pubkey, created_at: g.at, kind: g.kind, tags, content: `c${i}`, sig: SIG });
  });
  return out;
}

/** The reference model of a shard's storage: the insert rules of docs/PROTOCOL.md, in memory. */
class Model {
  readonly stored = new Map<string, NostrEvent>();
  private readonly deletedIds = new Set<string>();
  private readonly deletedAddrs = new Map<string, number>();

  insert(e: NostrEvent): InsertOutcome['status'] {
    if (e.kind !== KIND.DELETION && PEOPLE.some((p) => this.deletedIds.has(`${e.id}/${p}`) && mayDelete(p, e))) {
      return this.stored.has(e.id) ? 'duplicate' : 'deleted';
    }
    const d = coordinateD(e);
    if (d !== null) {
      const until = this.deletedAddrs.get(`${e.pubkey}/${e.kind}/${d}`);
      if (until !== undefined && e.created_at <= until) return 'deleted';
      const same = [...this.stored.values()].filter((x) => x.pubkey === e.pubkey && x.kind === e.kind && coordinateD(x) === d);
      if (same.some((x) => x.id === e.id)) return 'duplicate';
      if (same.some((x) => !supersedes(e, x))) return 'stale';
      for (const x of same) this.stored.delete(x.id);
    }
    if (this.stored.has(e.id)) return 'duplicate';
    this.stored.set(e.id, e);
    if (e.kind === KIND.DELETION) this.applyDeletion(e);
    return 'stored';
  }

  private applyDeletion(del: NostrEvent): void {
    for (const t of del.tags) {
      if (t[0] === 'e' && t[1]) {
        const target = this.stored.get(t[1]);
        if (target && !mayDelete(del.pubkey, target)) continue;
        if (target) this.stored.delete(target.id);
        this.deletedIds.add(`${t[1]}/${del.pubkey}`);
      } else if (t[0] === 'a' && t[1]) {
        const c = parseCoordinate(t[1]);
        if (!c || c.pubkey !== del.pubkey) continue;
        for (const x of [...this.stored.values()]) {
          if (x.pubkey === c.pubkey && x.kind === c.kind && coordinateD(x) === c.d && x.created_at <= del.created_at) this.stored.delete(x.id);
        }
        const key = `${c.pubkey}/${c.kind}/${c.d}`;
        this.deletedAddrs.set(key, Math.max(this.deletedAddrs.get(key) ?? 0, del.created_at));
      }
    }
  }

  /** What a REQ must answer: per filter the newest `limit` visible matches, their union in order. */
  query(filters: readonly Filter[], limitOf: (f: Filter) => number, readers: ReadonlySet<string>): NostrEvent[] {
    const visible = [...this.stored.values()].filter((e) => isLive(e) && canRead(e, readers)).sort(compareEvents);
    const out = new Map<string, NostrEvent>();
    for (const f of filters) for (const e of visible.filter((x) => matchFilter(f, x)).slice(0, limitOf(f))) out.set(e.id, e);
    return [...out.values()].sort(compareEvents);
  }

  count(filters: readonly Filter[], readers: ReadonlySet<string>): number {
    return [...this.stored.values()].filter((e) => isLive(e) && canRead(e, readers) && filters.some((f) => matchFilter(f, e))).length;
  }
}

/** Deletions and requests to vanish are kept for good: a shard holds them without their expiration. */
const isLive = (e: NostrEvent) => {
  const exp = e.kind === KIND.DELETION || e.kind === KIND.VANISH ? null : expirationOf(e);
  return exp === null || exp > NOW;
};

/** Present in about one filter out of `1 + absent`: most filters constrain few fields, so most answers are not empty. */
const sometimes = <T>(arb: fc.Arbitrary<T>, absent = 3): fc.Arbitrary<T | undefined> =>
  fc.oneof({ arbitrary: fc.constant(undefined), weight: absent }, { arbitrary: arb, weight: 1 });

/** Random filters drawn over the generated events' ids and the small value alphabets. */
const filterArb = (ids: string[]): fc.Arbitrary<Filter> =>
  fc
    .record({
      ids: sometimes(fc.subarray([...ids, 'e'.repeat(64)], { minLength: 1, maxLength: Math.min(8, ids.length + 1) }), 6),
      authors: sometimes(fc.subarray(PEOPLE, { minLength: 1 })),
      kinds: sometimes(fc.subarray(KINDS, { minLength: 1 })),
      since: sometimes(fc.integer({ min: T0 - 1, max: T0 + 6 })),
      until: sometimes(fc.integer({ min: T0 - 1, max: T0 + 6 })),
      limit: sometimes(fc.integer({ min: 0, max: 6 }), 1),
      tag: sometimes(fc.tuple(fc.constantFrom(...LETTERS), fc.subarray(VALUES, { minLength: 1 }))),
      tag2: sometimes(fc.tuple(fc.constantFrom(...LETTERS), fc.array(fc.constantFrom(...VALUES), { minLength: 1, maxLength: 4 })), 6),
      p: sometimes(fc.subarray(PEOPLE, { minLength: 1 }), 5),
    })
    .map((r) => {
      const f: Filter = {};
      if (r.ids) f.ids = r.ids;
      if (r.authors) f.authors = r.authors;
      if (r.kinds) f.kinds = r.kinds;
      if (r.since !== undefined) f.since = r.since;
      if (r.until !== undefined) f.until = r.until;
      if (r.limit !== undefined) f.limit = r.limit;
      if (r.tag) f[`#${r.tag[0]}`] = r.tag[1];
      if (r.tag2) f[`#${r.tag2[0]}`] = r.tag2[1];
      if (r.p) f['#p'] = r.p;
      return f;
    });

/**
 * For the plans: events of kinds stored as they come (notes, reactions, gift wraps; some expired)
 * at one of two created_at values, tagged from a small alphabet, so that per tag value and per
 * author several events tie where a small limit cuts.
 */
const plainEventArb: fc.Arbitrary<NostrEvent> = fc
  .record({
    nonce: fc.string({ unit: fc.constantFrom(...'0123456789abcdef'), minLength: 8, maxLength: 8 }),
    author: fc.nat({ max: PEOPLE.length - 1 }),
    kind: fc.constantFrom(1, 7, KIND.GIFT_WRAP, 25802),
    at: fc.constantFrom(T0 + 2, T0 + 3),
    tags: fc.subarray(['a', 'b'].flatMap((l) => VALUES.map((v) => [l, v]))),
    p: fc.subarray(PEOPLE),
    expired: fc.constantFrom(false, false, false, true),
  })
  .map((g) => {
    const tags = [...g.tags, ...g.p.map((p) => ['p', p])];
    if (g.expired) tags.push(['expiration', String(NOW - 1)]);
    return { id: g.nonce.padEnd(64, '0'), pubkey: PEOPLE[g.author]!, created_at: g.at, kind: g.kind, tags, content: '', sig: SIG };
  });

/** Filters over plainEventArb's events: several candidate driving lists at once, always a small limit. */
const planFilterArb = (ids: string[]): fc.Arbitrary<Filter> =>
  fc
    .record({
      ids: sometimes(fc.subarray(ids, { minLength: 1, maxLength: Math.min(6, ids.length) }), 5),
      authors: sometimes(fc.subarray(PEOPLE, { minLength: 1 }), 1),
      // [25802] alone often: NIP-XX kinds without authors or #p are asked in two parts (query-sql.ts readersParts).
      kinds: sometimes(fc.oneof(fc.subarray([1, 7, KIND.GIFT_WRAP, 25802], { minLength: 1 }), fc.constant<number[]>([25802])), 1),
      a: sometimes(fc.subarray(VALUES, { minLength: 1 }), 1),
      b: sometimes(fc.subarray(VALUES, { minLength: 1 }), 2),
      p: sometimes(fc.subarray(PEOPLE, { minLength: 1 }), 2),
      since: sometimes(fc.constant(T0 + 3)),
      until: sometimes(fc.constant(T0 + 2)),
      limit: fc.integer({ min: 1, max: 3 }),
    })
    .map((r) => {
      const f: Filter = { limit: r.limit };
      if (r.ids) f.ids = r.ids;
      if (r.authors) f.authors = r.authors;
      if (r.kinds) f.kinds = r.kinds;
      if (r.a) f['#a'] = r.a;
      if (r.b) f['#b'] = r.b;
      if (r.p) f['#p'] = r.p;
      if (r.since !== undefined) f.since = r.since;
      if (r.until !== undefined) f.until = r.until;
      return f;
    });

const limitOf = (f: Filter) => Math.min(f.limit ?? 500, 500);
const bytesOf = (e: NostrEvent) => new TextEncoder().encode(JSON.stringify(e)).length;

/** Random stores from `drafts`, random requests: the SQL answers equal the model's (see the header). */
async function agreesWithModel(drafts: fc.Arbitrary<Draft>, maxEvents: number): Promise<void> {
  const stub = env.RELAY_SHARD.get(env.RELAY_SHARD.newUniqueId());
  await runInDurableObject(stub, (_i, state) => {
    const sql = state.storage.sql;
    const store = new EventStore(sql);
    const scenario = fc
      .array(drafts, { minLength: 1, maxLength: maxEvents })
      .map(build)
      .chain((events) =>
        fc.record({
          events: fc.constant(events),
          requests: fc.array(
            fc.record({
              filters: fc.array(filterArb(events.map((e) => e.id)), { minLength: 1, maxLength: 3 }),
              readers: fc.subarray(PEOPLE),
              // The byte budget: the size of a prefix of the answer, give or take one byte.
              prefix: fc.nat(),
              delta: fc.constantFrom(-1, 0, 1),
            }),
            { minLength: 1, maxLength: 5 },
          ),
        }),
      );
    fc.assert(
      fc.property(scenario, ({ events, requests }) => {
        for (const table of ['events', 'tags', 'deleted_ids', 'deleted_addrs']) sql.exec(`DELETE FROM ${table}`);
        const model = new Model();
        // Then a replay of every third event: duplicates, stale versions, deleted ids.
        for (const e of [...events, ...events.filter((_, i) => i % 3 === 0)]) {
          expect(store.insert(e, JSON.stringify(e), state.storage).status, e.id).toBe(model.insert(e));
        }
        const ids = sql.exec<{ id: string }>('SELECT id FROM events').toArray().map((r) => r.id);
        expect(ids.sort()).toEqual([...model.stored.keys()].sort());
        for (const { filters, readers, prefix, delta } of requests) {
          const who = new Set(readers);
          const want = model.query(filters, limitOf, who);
          const got = store.query(filters, limitOf, { readers, now: NOW, vanishing: false }, 1e9);
          expect(got.map((r) => r.id), JSON.stringify({ filters, readers })).toEqual(want.map((e) => e.id));
          expect(got.map((r) => r.raw)).toEqual(want.map((e) => JSON.stringify(e)));
          // The byte budget keeps the longest prefix that fits (at least one event).
          const budget = want.slice(0, prefix % (want.length + 1)).reduce((n, e) => n + bytesOf(e), 0) + delta;
          let fit = 0;
          for (let used = 0; fit < want.length && (fit === 0 || used + bytesOf(want[fit]!) <= budget); fit++) used += bytesOf(want[fit]!);
          expect(store.query(filters, limitOf, { readers, now: NOW, vanishing: false }, budget).map((r) => r.id)).toEqual(want.slice(0, fit).map((e) => e.id));
          const truth = model.count(filters, who);
          expect(store.count(filters, { readers, now: NOW, vanishing: false }, 1_000_000)).toEqual({ count: truth, approximate: false });
          // Counting stops at its bound (max_count): past it, a lower bound marked approximate; below it, exact.
          const cap = (prefix % 4) + 1;
          const capped = store.count(filters, { readers, now: NOW, vanishing: false }, cap);
          if (truth > cap) expect(capped.approximate).toBe(true);
          if (capped.approximate) expect(capped.count).toBeLessThanOrEqual(Math.min(cap, truth));
          else expect(capped.count).toBe(truth);
          if (filters.length === 1 && truth > cap) expect(capped).toEqual({ count: cap, approximate: true });
          // Every plan query-sql.ts may choose answers the same.
          for (const f of filters) everyPlanAgrees(sql, model, f, readers);
        }
      }),
      { numRuns: 80 },
    );
  });
}

/**
 * One filter under every plan query-sql.ts may choose (each candidate driving list in turn: the
 * probe runs, then reports no rows for that candidate and one for the others; a first pass with
 * one row for each learns how many candidates there are) answers what the model does, limited (in
 * order) and counted (each event once).
 */
function everyPlanAgrees(sql: SqlStorage, model: Model, f: Filter, readers: string[]): void {
  const who = new Set(readers);
  const want = model.query([f], limitOf, who).map((e) => e.id);
  const truth = model.count([f], who);
  const scope = { readers, now: NOW, vanishing: false };
  const rows = (q: CompiledQuery | undefined) => (q ? sql.exec<{ id: string }>(q.sql, ...q.params).toArray().map((r) => r.id) : []);
  for (let forced = -1, candidates = 0; forced < candidates; forced++) {
    const probe: Probe = (q) => {
      const [column] = Object.keys(sql.exec<Record<string, number>>(q.sql, ...q.params).one());
      const place = Number(column!.slice(1));
      candidates = Math.max(candidates, place + 1);
      return { [column!]: place === forced ? 0 : 1 };
    };
    const plan = JSON.stringify({ f, readers, forced });
    expect(rows(compileFilter(f, scope, limitOf(f), probe)), plan).toEqual(want);
    const counted = rows(compileFilter(f, scope, undefined, probe));
    expect(counted.length, plan).toBe(truth);
    expect(new Set(counted).size, plan).toBe(truth);
  }
}

describe('the SQL query path agrees with the in-memory matcher (property-based)', () => {
  it('REQ and COUNT over random stores and random multi-filter requests', () => agreesWithModel(draftArb, 30), 120_000);

  it('every plan answers the same over plain events that mostly tie on created_at, with small limits', async () => {
    const stub = env.RELAY_SHARD.get(env.RELAY_SHARD.newUniqueId());
    await runInDurableObject(stub, (_i, state) => {
      const sql = state.storage.sql;
      const store = new EventStore(sql);
      const scenario = fc
        .array(plainEventArb, { minLength: 10, maxLength: 60 })
        .map((drafts) => drafts.map((e, i) => ({ ...e, id: `${e.id.slice(0, 8)}${i.toString(16).padStart(56, '0')}` })))
        .chain((events) =>
          fc.record({
            events: fc.constant(events),
            requests: fc.array(fc.record({ filter: planFilterArb(events.map((e) => e.id)), readers: fc.subarray(PEOPLE) }), { minLength: 1, maxLength: 5 }),
          }),
        );
      fc.assert(
        fc.property(scenario, ({ events, requests }) => {
          for (const table of ['events', 'tags']) sql.exec(`DELETE FROM ${table}`);
          const model = new Model();
          for (const e of events) expect(store.insert(e, JSON.stringify(e), state.storage).status).toBe(model.insert(e));
          for (const { filter, readers } of requests) everyPlanAgrees(sql, model, filter, readers);
        }),
        { numRuns: 60 },
      );
    });
  }, 120_000);
});
