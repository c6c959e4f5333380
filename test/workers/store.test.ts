// The storage query compiler against the one filter matcher: random filters over random events must
// select exactly what matchFilter selects; long lists stay under the 100-parameter limit.
import { env, runInDurableObject } from 'cloudflare:test';
import { describe, expect, it } from 'vitest';
import type { NostrEvent } from '../../src/shared/event.js';
import { compareEvents, matchFilter, type Filter } from '../../src/shared/filters.js';
import { EventStore } from '../../workers/relay-do/store.js';
import { MAX_BOUND_PARAMS } from '../../workers/relay-do/query-sql.js';
import { canRead } from '../../workers/relay-do/read-policy.js';
import { connect, freshOwner, keys, randomHex, sign } from './helpers.js';

/** A small deterministic PRNG so failures reproduce. */
function rng(seed: number) {
  return () => {
    seed = (seed * 1103515245 + 12345) & 0x7fffffff;
    return seed / 0x7fffffff;
  };
}

describe('SQL queries agree with matchFilter', () => {
  it('over random events and filters (including private kinds and readers)', async () => {
    const rand = rng(42);
    const pick = <T>(xs: readonly T[]) => xs[Math.floor(rand() * xs.length)]!;
    const people = Array.from({ length: 4 }, keys);
    const kinds = [1, 7, 30023, 25802, 1059, 25803]; // no plain replaceables: every event survives
    const tagValues = ['a', 'b', 'c'];
    const events: NostrEvent[] = [];
    for (let i = 0; i < 60; i++) {
      const author = pick(people);
      const tags: string[][] = [];
      if (rand() < 0.6) tags.push(['p', pick(people).pk]);
      if (rand() < 0.5) tags.push(['t', pick(tagValues)]);
      if (rand() < 0.3) tags.push(['t', pick(tagValues)]);
      const kind = pick(kinds);
      if (kind === 30023) tags.push(['d', `d${i}`]);
      events.push(sign(author, { kind, tags, created_at: 1_700_000_000 + Math.floor(rand() * 20), content: String(i) }));
    }
    const filters: Filter[] = [];
    for (let i = 0; i < 80; i++) {
      const f: Filter = {};
      if (rand() < 0.4) f.authors = [pick(people).pk, pick(people).pk];
      if (rand() < 0.4) f.kinds = [pick(kinds), pick(kinds)];
      if (rand() < 0.4) f['#p'] = [pick(people).pk];
      if (rand() < 0.4) f['#t'] = [pick(tagValues), pick(tagValues)];
      if (rand() < 0.3) f.since = 1_700_000_000 + Math.floor(rand() * 20);
      if (rand() < 0.3) f.until = 1_700_000_000 + Math.floor(rand() * 20);
      if (rand() < 0.2) f.ids = [pick(events).id, pick(events).id];
      if (rand() < 0.3) f.limit = 1 + Math.floor(rand() * 10);
      filters.push(f);
    }
    const stub = env.RELAY_SHARD.get(env.RELAY_SHARD.newUniqueId());
    await runInDurableObject(stub, (_i, state) => {
      const store = new EventStore(state.storage.sql);
      for (const e of events) store.insert(e, JSON.stringify(e), state.storage);
      for (const f of filters) {
        for (const readers of [[], [people[0]!.pk], [people[1]!.pk, people[2]!.pk]]) {
          const got = store.query([f], (x) => x.limit ?? 500, { readers, now: 1_800_000_000, vanishing: false }, 1e9).map((r) => r.id);
          const want = events
            .filter((e) => matchFilter(f, e) && canRead(e, new Set(readers)))
            .sort(compareEvents)
            .slice(0, f.limit ?? 500)
            .map((e) => e.id);
          expect(got, JSON.stringify({ f, readers })).toEqual(want);
        }
      }
    });
  });
});

describe('long lists over the wire', () => {
  it(`a REQ with 300 ids and 150 #t values answers correctly (statements bind ≤ ${MAX_BOUND_PARAMS} parameters)`, async () => {
    const owner = freshOwner();
    const s = await connect(`/r/${owner.pk}`);
    const stored = Array.from({ length: 30 }, (_, i) => sign(owner, { content: `n${i}`, tags: [['t', `tag${i}`]] }));
    for (const e of stored) expect((await s.publish(e))[2]).toBe(true);
    const ids = [...stored.map((e) => e.id), ...Array.from({ length: 270 }, () => randomHex())];
    const byIds = await s.req('ids', { ids });
    expect(byIds.events.map((e) => e.id).sort()).toEqual(stored.map((e) => e.id).sort());
    const tags = Array.from({ length: 150 }, (_, i) => `tag${i}`);
    const byTags = await s.req('tags', { '#t': tags, authors: Array.from({ length: 120 }, (_, i) => (i === 7 ? owner.pk : randomHex())) });
    expect(byTags.events.length).toBe(30);
    s.send(['COUNT', 'n', { ids }]);
    expect(await s.next((f) => f[0] === 'COUNT')).toEqual(['COUNT', 'n', { count: 30 }]);
  });
});

describe('expired events (NIP-40) are purged in batches', () => {
  it('one purge removes at most its batch and says to come back at once while more are due; the last one names the next expiry', async () => {
    const author = keys();
    const at = 1_800_000_000;
    // Five events already expired (as many as a stranger could have timed to one second), one later.
    const due = Array.from({ length: 5 }, (_, n) => sign(author, { tags: [['expiration', String(at - n)]], created_at: at - 100, content: `due ${n}` }));
    const later = sign(author, { tags: [['expiration', String(at + 60)]], created_at: at - 100, content: 'later' });
    const stub = env.RELAY_SHARD.get(env.RELAY_SHARD.newUniqueId());
    await runInDurableObject(stub, (_i, state) => {
      const store = new EventStore(state.storage.sql);
      for (const e of [...due, later]) store.insert(e, JSON.stringify(e), state.storage);
      const left = () => state.storage.sql.exec<{ n: number }>('SELECT count(*) AS n FROM events').one().n;
      const first = store.purgeExpired(at, 2);
      expect(left()).toBe(4);
      expect(first).toBeLessThanOrEqual(at); // more are due: the alarm comes back at once
      expect(store.purgeExpired(at, 2)).toBeLessThanOrEqual(at);
      expect(store.purgeExpired(at, 2)).toBe(at + 60);
      expect(left()).toBe(1);
    });
  });
});
