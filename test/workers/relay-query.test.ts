// Bounded queries, deletions and canonical events (issue 7 items 1, 5, 12): the work of one
// REQ/COUNT is linear in its message (never a product of its lists), no statement binds more than
// 100 parameters, one answer is bounded in bytes, a deletion decides authorship from the index,
// and the shard serves a canonical serialization of what it validated.
import { env, runInDurableObject } from 'cloudflare:test';
import { verifyEvent } from 'nostr-tools/pure';
import { describe, expect, it } from 'vitest';
import type { NostrEvent } from '../../src/shared/event.js';
import { compareEvents, matchFilter, type Filter } from '../../src/shared/filters.js';
import { DEFAULT_LIMITS } from '../../workers/relay-do/limits.js';
import { EventStore } from '../../workers/relay-do/store.js';
import { RelayShard } from '../../workers/relay-do/shard.js';
import { shardStub } from '../../workers/common/shards.js';
import { relayMessage } from '../../src/shared/messages.js';
import { connect, freshOwner, keys, now, randomHex, sign } from './helpers.js';

/** Every SQL statement an EventStore runs, through the real storage; refuses to run more than `max`. */
function recordingSql(sql: SqlStorage, max = 2_000) {
  const log: Array<{ query: string; params: number }> = [];
  const exec = (query: string, ...params: SqlStorageValue[]) => {
    log.push({ query, params: params.length });
    if (log.length > max) throw new Error(`more than ${max} SQL statements`);
    return sql.exec(query, ...params);
  };
  return { sql: { exec } as unknown as SqlStorage, log };
}

const range = (prefix: string, n: number) => Array.from({ length: n }, (_, i) => `${prefix}${i}`);
const utf8Length = (s: string) => new TextEncoder().encode(s).length;
const NOW = 1_800_000_000;

/** Fresh storage of a Durable Object, for EventStore unit tests. */
async function withStorage(fn: (state: DurableObjectState) => void | Promise<void>): Promise<void> {
  const stub = env.RELAY_SHARD.get(env.RELAY_SHARD.newUniqueId());
  await runInDurableObject(stub, (_i, state) => fn(state));
}

describe('one REQ/COUNT costs work linear in its size', () => {
  const bigFilter: Filter = { '#a': range('a', 300), '#b': range('b', 300), '#c': range('c', 300) };

  it('a filter with three 300-value tag lists runs a constant number of statements, each binding ≤ 100 parameters', async () => {
    const author = keys();
    const events: NostrEvent[] = [];
    for (let i = 0; i < 40; i++) {
      const tags = [['a', `a${i * 7}`], ['b', `b${i * 5}`]];
      if (i % 2 === 0) tags.push(['c', `c${i}`]);
      events.push(sign(author, { tags, created_at: NOW - 100 + (i % 9), content: `n${i}` }));
    }
    await withStorage((state) => {
      const rec = recordingSql(state.storage.sql);
      const store = new EventStore(rec.sql);
      for (const e of events) store.insert(e, JSON.stringify(e), state.storage);
      rec.log.length = 0;
      const got = store.query([bigFilter], () => 500, { readers: [], now: NOW, vanishing: false }, DEFAULT_LIMITS.max_query_bytes).map((r) => r.id);
      const want = events.filter((e) => matchFilter(bigFilter, e)).sort(compareEvents).map((e) => e.id);
      expect(want.length).toBeGreaterThan(5);
      expect(got).toEqual(want);
      // The probe choosing the driving list (query-sql.ts: one statement per candidate list, here
      // three), the candidates, the chosen events' JSON: never one per value.
      expect(rec.log.length).toBeLessThanOrEqual(5);
      for (const s of rec.log) expect(s.params).toBeLessThanOrEqual(100);
      rec.log.length = 0;
      expect(store.count([bigFilter, { '#a': range('a', 300) }], { readers: [], now: NOW, vanishing: false }, DEFAULT_LIMITS.max_count)).toEqual({
        count: events.filter((e) => matchFilter({ '#a': range('a', 300) }, e)).length,
        approximate: false,
      });
      // The probe of the first filter (one statement per tag list: three), then one statement per filter.
      expect(rec.log.length).toBeLessThanOrEqual(5);
      for (const s of rec.log) expect(s.params).toBeLessThanOrEqual(100);
    });
  });

  it('the 3×300 REQ and COUNT answer correctly on a shard, and a bystander on the same shard gets its EOSE', async () => {
    const owner = freshOwner();
    const path = `/r/${owner.pk}`;
    const s = await connect(path);
    const matching: NostrEvent[] = [];
    for (let i = 0; i < 12; i++) {
      const full = i % 3 !== 0;
      const tags = [['a', `a${i * 20}`], ['b', `b${299 - i}`]];
      if (full) tags.push(['c', `c${i}`]);
      const e = sign(owner, { tags, content: `e${i}`, created_at: now() - i });
      expect((await s.publish(e))[2]).toBe(true);
      if (full) matching.push(e);
    }
    const bystander = await connect(path);
    s.send(['REQ', 'big', bigFilter]);
    s.send(['COUNT', 'big-count', bigFilter]);
    const seen = await bystander.req('small', { authors: [owner.pk], limit: 1 });
    expect(seen.events).toHaveLength(1);
    const events: NostrEvent[] = [];
    for (;;) {
      const f = await s.next((x) => x[1] === 'big', 60_000);
      if (f[0] !== 'EVENT') {
        expect(f[0]).toBe('EOSE');
        break;
      }
      events.push(f[2] as NostrEvent);
    }
    expect(events.map((e) => e.id)).toEqual(matching.sort(compareEvents).map((e) => e.id));
    expect(await s.next((x) => x[1] === 'big-count', 60_000)).toEqual(['COUNT', 'big-count', { count: matching.length }]);
  }, 120_000);

  it('a filter naming every tag letter, ids, authors and 16 authenticated readers binds ≤ 100 parameters per statement', async () => {
    const author = keys();
    const letters = [...'abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ'];
    const e = sign(author, { tags: letters.map((l) => [l, `${l}1`]), created_at: NOW - 5 });
    const filter: Filter = { ids: [e.id, randomHex()], authors: [author.pk, randomHex()], kinds: [1, 25802], since: NOW - 10, until: NOW };
    for (const l of letters) filter[`#${l}`] = [`${l}1`, `${l}2`, `${l}3`];
    const readers = Array.from({ length: 16 }, () => randomHex());
    await withStorage((state) => {
      const rec = recordingSql(state.storage.sql);
      const store = new EventStore(rec.sql);
      store.insert(e, JSON.stringify(e), state.storage);
      rec.log.length = 0;
      expect(store.query([filter], () => 10, { readers, now: NOW, vanishing: false }, DEFAULT_LIMITS.max_query_bytes).map((r) => r.id)).toEqual([e.id]);
      expect(store.count([filter], { readers, now: NOW, vanishing: false }, DEFAULT_LIMITS.max_count)).toEqual({ count: 1, approximate: false });
      for (const s of rec.log) expect(s.params).toBeLessThanOrEqual(100);
    });
  });
});

describe('one COUNT counts at most max_count events', () => {
  it('past the bound the answer is a lower bound marked approximate (NIP-45), one filter or several; below it, exact', async () => {
    const owner = freshOwner();
    const publisher = await connect(`/r/${owner.pk}`);
    const events = Array.from({ length: 5 }, (_, n) => sign(owner, { content: `counted ${n}` }));
    for (const e of events) expect((await publisher.publish(e))[2]).toBe(true);
    const mine = { kinds: [1], authors: [owner.pk] };
    const cases: Array<[string, Filter[], number]> = [
      ['one filter past the bound', [mine], 3],
      ['two filters past the bound', [mine, { ids: events.slice(0, 2).map((e) => e.id) }], 3],
      ['one filter within the bound', [mine], 5],
      ['two overlapping filters within the bound', [mine, { ids: [events[0]!.id] }], 6],
    ];
    const answers = await runInDurableObject(shardStub(env, owner.pk), (_i, state) =>
      Promise.all(
        cases.map(([, filters, max]) => {
          // The shard's primary as a deployment with a small bound runs it (as an edge's COUNT reaches it).
          const primary = new RelayShard(state, { ...env, RELAY_LIMITS: JSON.stringify({ max_count: max }) });
          return primary.edgeBatch(owner.pk, [{ op: 'count', filters, readers: [] }]);
        }),
      ),
    );
    // (`scanned`: the rows SQLite read for it, which the edge charges to the client's address.)
    expect(answers.map(([a]) => a)).toEqual([
      { op: 'count', count: 3, approximate: true, scanned: expect.any(Number) },
      { op: 'count', count: 3, approximate: true, scanned: expect.any(Number) },
      { op: 'count', count: 5, approximate: false, scanned: expect.any(Number) },
      { op: 'count', count: 5, approximate: false, scanned: expect.any(Number) },
    ]);
    expect(answers.every(([a]) => a!.op === 'count' && a!.scanned >= 3)).toBe(true);
    // On the wire: `approximate` only when true.
    expect(relayMessage.count('c', { count: 3, approximate: true })).toBe('["COUNT","c",{"count":3,"approximate":true}]');
    expect(relayMessage.count('c', { count: 5, approximate: false })).toBe('["COUNT","c",{"count":5}]');
    publisher.send(['COUNT', 'all', mine]);
    expect(await publisher.next((f) => f[0] === 'COUNT')).toEqual(['COUNT', 'all', { count: 5 }]);
  });
});

describe('values per filter are capped (max_filter_values) after dedupe', () => {
  const max = DEFAULT_LIMITS.max_filter_values;

  it(`refuses a REQ and a COUNT whose filter has more than ${max} values, with the exact count`, async () => {
    const s = await connect(`/r/${freshOwner().pk}`);
    const tooMany: Filter = {
      ids: Array.from({ length: 400 }, () => randomHex()),
      authors: Array.from({ length: 400 }, () => randomHex()),
      kinds: Array.from({ length: 100 }, (_, i) => i),
      '#t': range('t', max - 900 + 1),
    };
    const reason = `invalid: filter has ${max + 1} values (max ${max})`;
    expect(await s.req('r', { kinds: [1] }, tooMany)).toEqual({ events: [], closed: reason });
    s.send(['COUNT', 'c', tooMany]);
    expect(await s.next((f) => f[1] === 'c')).toEqual(['CLOSED', 'c', reason]);
  });

  it('counts duplicates once: a filter with repeated values within the cap is answered', async () => {
    const owner = freshOwner();
    const s = await connect(`/r/${owner.pk}`);
    const e = sign(owner, { tags: [['t', 't3']] });
    expect((await s.publish(e))[2]).toBe(true);
    const values = range('t', max - 1);
    const r = await s.req('dup', { '#t': [...values, ...values] });
    expect(r).toEqual({ events: [e] });
    s.send(['COUNT', 'dupc', { '#t': [...values, ...values], kinds: [1, 1, 1] }]);
    expect(await s.next((f) => f[1] === 'dupc')).toEqual(['COUNT', 'dupc', { count: 1 }]);
  });
});

describe('one answer is bounded in bytes (max_query_bytes)', () => {
  it('EventStore.query stops before the event that would pass the byte budget (the first event always goes)', async () => {
    const author = keys();
    const events = Array.from({ length: 10 }, (_, i) => sign(author, { content: 'x'.repeat(1000), created_at: NOW - i }));
    const size = utf8Length(JSON.stringify(events[0]));
    await withStorage((state) => {
      const store = new EventStore(state.storage.sql);
      for (const e of events) store.insert(e, JSON.stringify(e), state.storage);
      const q = (bytes: number, filters: Filter[] = [{ authors: [author.pk] }]) =>
        store.query(filters, (f) => f.limit ?? 500, { readers: [], now: NOW, vanishing: false }, bytes).map((r) => r.id);
      expect(q(size * 3 + size - 1)).toEqual(events.slice(0, 3).map((e) => e.id));
      expect(q(size * 3)).toEqual(events.slice(0, 3).map((e) => e.id));
      expect(q(10)).toEqual([events[0]!.id]);
      expect(q(size * 100)).toEqual(events.map((e) => e.id));
      // Several filters: the budget applies to the merged, ordered answer.
      expect(q(size * 4, [{ ids: [events[5]!.id, events[1]!.id] }, { authors: [author.pk], limit: 2 }, { ids: [events[9]!.id] }])).toEqual(
        [0, 1, 5, 9].map((i) => events[i]!.id),
      );
      expect(q(size * 3, [{ ids: [events[5]!.id, events[1]!.id] }, { authors: [author.pk], limit: 2 }, { ids: [events[9]!.id] }])).toEqual(
        [0, 1, 5].map((i) => events[i]!.id),
      );
    });
  });

  it(`a shard answers a REQ over ~100 KB events with at most ${DEFAULT_LIMITS.max_query_bytes} bytes of events, then EOSE`, async () => {
    const owner = freshOwner();
    const s = await connect(`/r/${owner.pk}`);
    const t0 = now();
    const stored: NostrEvent[] = [];
    for (let i = 0; i < 48; i++) {
      const e = sign(owner, { content: `${i}`.padEnd(100_000, 'z'), created_at: t0 - i });
      expect((await s.publish(e))[2]).toBe(true);
      stored.push(e);
    }
    let budget = DEFAULT_LIMITS.max_query_bytes;
    let expected = 0;
    for (const e of stored) {
      const n = utf8Length(JSON.stringify(e));
      if (n > budget) break;
      budget -= n;
      expected++;
    }
    expect(expected).toBeLessThan(stored.length);
    const r = await s.req('big', { authors: [owner.pk] });
    expect(r.closed).toBeUndefined();
    expect(r.events.map((e) => e.id)).toEqual(stored.slice(0, expected).map((e) => e.id));
    // Paging on with `until` reaches the rest.
    const rest = await s.req('rest', { authors: [owner.pk], until: r.events.at(-1)!.created_at - 1 });
    expect(rest.events.map((e) => e.id)).toEqual(stored.slice(expected).map((e) => e.id));
  }, 120_000);
});

describe('deletions (NIP-09) decide from the index', () => {
  it('a stranger naming 300 of my events deletes none and the store never reads their JSON', async () => {
    const victim = keys();
    const stranger = keys();
    const targets = Array.from({ length: 300 }, (_, i) => sign(victim, { content: `v${i}`, created_at: NOW - 50 }));
    await withStorage((state) => {
      const rec = recordingSql(state.storage.sql);
      const store = new EventStore(rec.sql);
      for (const e of targets) store.insert(e, JSON.stringify(e), state.storage);
      rec.log.length = 0;
      const del = sign(stranger, { kind: 5, tags: targets.map((e) => ['e', e.id]), created_at: NOW - 10 });
      expect(store.insert(del, JSON.stringify(del), state.storage)).toEqual({ status: 'stored' });
      expect(store.size()).toBe(301);
      expect(rec.log.filter((s) => /select[^;]*\braw\b/i.test(s.query))).toEqual([]);
      expect(rec.log.length).toBeLessThan(20);
      // The author deletes them all, with work linear in the targets.
      rec.log.length = 0;
      const own = sign(victim, { kind: 5, tags: targets.map((e) => ['e', e.id]), created_at: NOW - 10 });
      expect(store.insert(own, JSON.stringify(own), state.storage)).toEqual({ status: 'stored' });
      expect(store.size()).toBe(2);
      expect(rec.log.filter((s) => /select[^;]*\braw\b/i.test(s.query))).toEqual([]);
      expect(rec.log.length).toBeLessThan(20 + 2 * targets.length);
      // Deleted ids stay deleted; the stranger's deletion changed nothing it may not.
      expect(store.insert(targets[0]!, JSON.stringify(targets[0]), state.storage)).toEqual({ status: 'deleted' });
    });
  });

  it('the recipient of a gift wrap may delete it, its author key may not, a third key may not', async () => {
    const recipient = keys();
    const wrapper = keys();
    const other = keys();
    const wrap = sign(wrapper, { kind: 1059, tags: [['p', recipient.pk]], created_at: NOW - 40 });
    const wrap2 = sign(wrapper, { kind: 1059, tags: [['p', recipient.pk]], created_at: NOW - 41 });
    await withStorage((state) => {
      const store = new EventStore(state.storage.sql);
      store.insert(wrap, JSON.stringify(wrap), state.storage);
      store.insert(wrap2, JSON.stringify(wrap2), state.storage);
      const byOther = sign(other, { kind: 5, tags: [['e', wrap.id]], created_at: NOW - 5 });
      store.insert(byOther, JSON.stringify(byOther), state.storage);
      expect(store.query([{ kinds: [1059] }], () => 10, { readers: [recipient.pk], now: NOW, vanishing: false }, 1e9).map((r) => r.id)).toEqual([wrap.id, wrap2.id]);
      const byRecipient = sign(recipient, { kind: 5, tags: [['e', wrap.id]], created_at: NOW - 4 });
      store.insert(byRecipient, JSON.stringify(byRecipient), state.storage);
      expect(store.query([{ kinds: [1059] }], () => 10, { readers: [recipient.pk], now: NOW, vanishing: false }, 1e9).map((r) => r.id)).toEqual([wrap2.id]);
    });
  });

  it(`refuses a deletion naming more than ${DEFAULT_LIMITS.max_deletion_targets} events`, async () => {
    const owner = freshOwner();
    const s = await connect(`/r/${owner.pk}`);
    const n = DEFAULT_LIMITS.max_deletion_targets;
    const tooMany = sign(owner, {
      kind: 5,
      tags: [...Array.from({ length: n }, () => ['e', randomHex()]), ['a', `30023:${owner.pk}:x`]],
    });
    expect(await s.publish(tooMany)).toEqual(['OK', tooMany.id, false, `invalid: a deletion may name at most ${n} events`]);
    const atCap = sign(owner, { kind: 5, tags: Array.from({ length: n }, () => ['e', randomHex()]) });
    expect(await s.publish(atCap)).toEqual(['OK', atCap.id, true, '']);
  });
});

describe('canonical serialization (served JSON is what was validated)', () => {
  it('an event sent with a duplicate key is stored and served with exactly one of each key, and verifies', async () => {
    const owner = freshOwner();
    const path = `/r/${owner.pk}`;
    const s = await connect(path);
    const e = sign(owner, { content: 'the signed content', tags: [['t', 'dup']] });
    const live = await connect(path);
    live.send(['REQ', 'live', { '#t': ['dup'] }]);
    await live.next((f) => f[0] === 'EOSE');
    const liveRaw: string[] = [];
    live.ws.addEventListener('message', (m) => void liveRaw.push(m.data as string));
    // A duplicate `content` key ahead of the real one (JSON.parse keeps the last value).
    const json = JSON.stringify(e).replace('{', '{"content":"something else",');
    s.send(`["EVENT",${json}]`);
    expect(await s.next((f) => f[0] === 'OK')).toEqual(['OK', e.id, true, '']);
    const stored: string[] = [];
    s.ws.addEventListener('message', (m) => void stored.push(m.data as string));
    await s.req('read', { ids: [e.id] });
    await live.next((f) => f[0] === 'EVENT');
    for (const frame of [stored.find((f) => f.startsWith('["EVENT"')), liveRaw.find((f) => f.startsWith('["EVENT"'))]) {
      expect(frame).toBeDefined();
      expect(frame!.match(/"content":/g)).toHaveLength(1);
      const served = (JSON.parse(frame!) as [string, string, NostrEvent])[2];
      expect(served).toEqual(e);
      expect(JSON.stringify(served)).toBe(JSON.stringify(e));
      expect(verifyEvent({ ...served })).toBe(true);
    }
  });
});
