// The shard's deletion tables (NIP-09 `deleted_ids`, `deleted_addrs`; NIP-62 `vanished`) under
// strangers' load: a request to vanish reads only its own key's rows, however many rows others
// made; an event many strangers "deleted" is published with one point lookup, and its author's
// deletion still blocks it; a shard made before the records were dated dates them from its stored
// deletions when it wakes (once, reading each deletion's tags once), so a request to vanish dated
// before a deletion keeps its record; and the rows of a request never outlive it (deletion requests
// and requests to vanish are kept for good: no `expiration`, no retention rule).
import { env, runInDurableObject, SELF } from 'cloudflare:test';
import { describe, expect, it } from 'vitest';
import { eventJson, type NostrEvent } from '../../src/shared/event.js';
import { shardStub } from '../../workers/common/shards.js';
import { EventStore } from '../../workers/relay-do/store.js';
import { BASE, connect, keys, now, randomHex, sign, type Keys } from './helpers.js';
import { opsCall, publishAsOwner } from './relay-ops-helpers.js';
import { meteredSql } from './metered-sql.js';

const DELETED = 'blocked: this event was deleted by its author';
const DAY = 86_400;

/** A kind 5 of `k` naming `ids` (`e`) and `coords` (`a`). */
const deletion = (k: Keys, ids: readonly string[], coords: readonly string[] = [], created_at = now()): NostrEvent =>
  sign(k, { kind: 5, tags: [...ids.map((id) => ['e', id]), ...coords.map((a) => ['a', a])], created_at });

describe('a request to vanish among many deletion rows', () => {
  it("reads its own key's rows, not the others' (deleted_ids by pubkey is an index search)", async () => {
    // Strangers' deletions of random ids and of long addresses: 6,000 rows that are not the key's.
    const strangers = Array.from({ length: 12 }, (_, i) =>
      i % 2 === 0
        ? deletion(keys(), Array.from({ length: 500 }, () => randomHex()))
        : ((k: Keys) => deletion(k, [], Array.from({ length: 500 }, (_, n) => `30023:${k.pk}:${'d'.repeat(200)}${n}`)))(keys()),
    );
    const x = keys();
    const own = deletion(x, Array.from({ length: 3 }, () => randomHex()), [`30023:${x.pk}:mine`], now() - 10);
    const stub = env.RELAY_SHARD.get(env.RELAY_SHARD.newUniqueId());
    const { read, plans } = await runInDurableObject(stub, (_i, state) => {
      const meter = meteredSql(state.storage.sql);
      const store = new EventStore(meter.sql);
      for (const e of [...strangers, own]) expect(store.insert(e, eventJson(e), state.storage)).toEqual({ status: 'stored' });
      meter.read();
      store.removeAuthor(x.pk, now(), 500);
      const rows = (table: string) => state.storage.sql.exec<{ n: number }>(`SELECT count(*) AS n FROM ${table} WHERE pubkey = ?`, x.pk).one().n;
      expect([rows('deleted_ids'), rows('deleted_addrs')]).toEqual([0, 0]);
      const plan = (q: string) => state.storage.sql.exec<{ detail: string }>(`EXPLAIN QUERY PLAN ${q}`, x.pk).toArray().map((r) => r.detail);
      return {
        read: meter.read(),
        plans: [plan('SELECT id FROM deleted_ids WHERE pubkey = ?'), plan('SELECT d FROM deleted_addrs WHERE pubkey = ?'), plan('SELECT 1 FROM vanished WHERE pubkey = ?')],
      };
    });
    // Before: `DELETE FROM deleted_ids WHERE pubkey = ?` scanned the table (3,000+ rows read).
    expect(read).toBeLessThan(100);
    for (const p of plans) expect(p.join(' ')).toMatch(/^SEARCH /);
  });

  it('removes a key with more deletion rows than a batch over several passes, counting rows in the batch', async () => {
    const x = keys();
    const t = now() - 10;
    const dels = [deletion(x, Array.from({ length: 400 }, () => randomHex()), [], t), deletion(x, Array.from({ length: 300 }, () => randomHex()), [], t)];
    const stub = env.RELAY_SHARD.get(env.RELAY_SHARD.newUniqueId());
    const passes = await runInDurableObject(stub, (_i, state) => {
      const store = new EventStore(state.storage.sql);
      for (const e of dels) store.insert(e, eventJson(e), state.storage);
      const left = () => state.storage.sql.exec<{ n: number }>('SELECT count(*) AS n FROM deleted_ids WHERE pubkey = ?', x.pk).one().n;
      const out: Array<[number, number]> = [];
      for (let i = 0; i < 3; i++) out.push([store.removeAuthor(x.pk, now(), 500), left()]);
      return out;
    });
    // 2 events and 498 rows, then the last 202 rows (fewer than the batch: done), then nothing.
    expect(passes).toEqual([
      [500, 202],
      [202, 0],
      [0, 0],
    ]);
  });
});

describe('an event many strangers "deleted"', () => {
  it('is published with a point lookup of the keys that may delete it; its author\'s deletion still blocks', async () => {
    const owner = keys();
    const [x, blocked, probe] = [sign(owner, { content: 'x' }), sign(owner, { content: 'deleted by me' }), sign(owner, { content: 'probe' })];
    // 2,000 fresh keys each "delete" x and probe: rows that must not matter to them.
    const strangers = Array.from({ length: 2000 }, () => deletion(keys(), [x.id, probe.id]));
    const read = await runInDurableObject(shardStub(env, owner.pk), (_i, state) => {
      const meter = meteredSql(state.storage.sql);
      const store = new EventStore(meter.sql);
      for (const e of strangers) store.insert(e, eventJson(e), state.storage);
      meter.read();
      expect(store.insert(probe, eventJson(probe), state.storage)).toEqual({ status: 'stored' });
      return meter.read();
    });
    // Before: every row naming the id was read into JS (2,000).
    expect(read).toBeLessThan(50);
    const oks = await publishAsOwner(owner, [x, deletion(owner, [blocked.id]), blocked]);
    expect(oks[0]).toEqual(['OK', x.id, true, '']);
    expect(oks[2]).toEqual(['OK', blocked.id, false, DELETED]);
  });

  it('a gift wrap stays deletable by its recipient, not by a stranger', async () => {
    const recipient = keys();
    const stranger = keys();
    const wrapOf = (content: string) => sign(keys(), { kind: 1059, content, tags: [['p', recipient.pk]] });
    const [byRecipient, byStranger] = [wrapOf('a'), wrapOf('b')];
    const ws = await connect('/');
    for (const d of [deletion(recipient, [byRecipient.id]), deletion(stranger, [byStranger.id])]) expect((await ws.publish(d))[2]).toBe(true);
    expect(await ws.publish(byRecipient)).toEqual(['OK', byRecipient.id, false, DELETED]);
    expect(await ws.publish(byStranger)).toEqual(['OK', byStranger.id, true, '']);
    ws.close();
  });
});

describe('deletion records are dated, so a request to vanish removes only those up to it', () => {
  /** A shard made before the date column: deleted_ids as (id, pubkey) indexed by pubkey, its rows kept, not dated yet. */
  const beforeTheColumn = (sql: SqlStorage): void => {
    sql.exec('CREATE TABLE deleted_ids_old (id TEXT NOT NULL, pubkey TEXT NOT NULL, PRIMARY KEY (id, pubkey)) WITHOUT ROWID');
    sql.exec('INSERT INTO deleted_ids_old (id, pubkey) SELECT id, pubkey FROM deleted_ids');
    sql.exec('DROP TABLE deleted_ids');
    sql.exec('ALTER TABLE deleted_ids_old RENAME TO deleted_ids');
    sql.exec('CREATE INDEX deleted_ids_by_pubkey ON deleted_ids(pubkey)');
    sql.exec('DROP TABLE IF EXISTS deleted_ids_dated');
  };
  /** A shard whose earlier wake added the column (5aa0cbf) and left its older rows dated 0. */
  const undated = (sql: SqlStorage): void => {
    sql.exec('UPDATE deleted_ids SET at = 0');
    sql.exec('DROP TABLE IF EXISTS deleted_ids_dated');
  };

  it.each([
    ['made before the date column', beforeTheColumn],
    ['whose date column an earlier wake added (rows dated 0)', undated],
  ])(
    'a shard %s dates its records from its stored deletions when it wakes: a request to vanish dated before a deletion keeps its record, one dated after removes it',
    async (_n, olderShard) => {
      const owner = keys();
      const t = now() - 600;
      const note = sign(owner, { content: 'deleted before the upgrade', created_at: t + 20 });
      const del = deletion(owner, [note.id], [], t + 21);
      const earlier = deletion(owner, [note.id], [], t + 5); // an older deletion naming it too: the newest dates the record
      const stub = shardStub(env, owner.pk);
      let ws = await connect(`/r/${owner.pk}`);
      await ws.auth(owner);
      for (const e of [note, del, earlier]) expect((await ws.publish(e))[2]).toBe(true);
      ws.close();
      const dated = await runInDurableObject(stub, (_i, state) => {
        const sql = state.storage.sql;
        olderShard(sql);
        new EventStore(sql); // what the shard's constructor does when it wakes
        return sql.exec<{ at: number }>('SELECT at FROM deleted_ids WHERE pubkey = ?', owner.pk).toArray();
      });
      expect(dated).toEqual([{ at: t + 21 }]);

      ws = await connect(`/r/${owner.pk}`);
      await ws.auth(owner);
      const before = sign(owner, { kind: 62, tags: [['relay', 'ALL_RELAYS']], created_at: t + 10 });
      expect(await ws.publish(before)).toEqual(['OK', before.id, true, '']);
      // Before: the record read as dated 0 and went with the request; the note was accepted again.
      expect(await ws.publish(note)).toEqual(['OK', note.id, false, DELETED]);
      const after = sign(owner, { kind: 62, tags: [['relay', 'ALL_RELAYS']], created_at: t + 30 });
      expect(await ws.publish(after)).toEqual(['OK', after.id, true, '']);
      expect(await ws.publish(note)).toEqual(['OK', note.id, false, 'blocked: this pubkey asked to vanish from this relay (NIP-62)']);
      ws.close();
      const left = await runInDurableObject(stub, (_i, state) => state.storage.sql.exec('SELECT at FROM deleted_ids WHERE pubkey = ?', owner.pk).toArray());
      expect(left).toEqual([]);
    },
  );

  it('a record whose deletion is no longer stored (expired or removed before deletions were kept for good) stays dated 0: any request to vanish removes it', async () => {
    const k = keys();
    const stub = env.RELAY_SHARD.get(env.RELAY_SHARD.newUniqueId());
    const rows = await runInDurableObject(stub, (_i, state) => {
      const sql = state.storage.sql;
      sql.exec('INSERT INTO deleted_ids (id, pubkey) VALUES (?, ?)', 'a'.repeat(64), k.pk);
      beforeTheColumn(sql);
      const store = new EventStore(sql);
      const dated = sql.exec<{ at: number }>('SELECT at FROM deleted_ids').toArray();
      const removed = store.removeAuthor(k.pk, now() - DAY, 500);
      return { dated, removed, left: sql.exec('SELECT 1 FROM deleted_ids').toArray().length };
    });
    expect(rows).toEqual({ dated: [{ at: 0 }], removed: 1, left: 0 });
  });

  it('dating them reads each stored deletion\'s tags once, whatever else names the ids, and happens once', async () => {
    // 40 keys' deletions of 500 ids each (20,000 records), and 2,000 strangers' notes naming 20 of those ids each (40,000 more `e` rows).
    const dels = Array.from({ length: 40 }, (_, i) => deletion(keys(), Array.from({ length: 500 }, () => randomHex()), [], now() - 1000 + i));
    const replied = dels[0]!.tags.slice(0, 20).map((tag) => tag[1]!);
    const replies = Array.from({ length: 2000 }, () => sign(keys(), { content: 'reply', tags: replied.map((id) => ['e', id]), created_at: now() - 2000 }));
    const stub = env.RELAY_SHARD.get(env.RELAY_SHARD.newUniqueId());
    const out = await runInDurableObject(stub, (_i, state) => {
      const sql = state.storage.sql;
      const store = new EventStore(sql);
      for (const e of [...dels, ...replies]) store.insert(e, eventJson(e), state.storage);
      undated(sql);
      const meter = meteredSql(sql);
      const started = performance.now();
      new EventStore(meter.sql);
      const ms = performance.now() - started;
      const read = meter.read();
      new EventStore(meter.sql); // the next wake: done already
      const again = meter.read();
      const wrong = sql
        .exec<{ n: number }>('SELECT count(*) AS n FROM deleted_ids d WHERE d.at <> (SELECT created_at FROM events WHERE kind = 5 AND pubkey = d.pubkey)')
        .one().n;
      return { rows: sql.exec<{ n: number }>('SELECT count(*) AS n FROM deleted_ids').one().n, read, again, wrong, ms };
    });
    console.log(`dating ${out.rows} deletion records: ${out.ms.toFixed(0)} ms, ${out.read} rows read`);
    expect(out.rows).toBe(20_000);
    expect(out.wrong).toBe(0);
    // About 5 rows a record (its tag row, the sort, the record and its index entry; 100,086 here), none
    // of the replies' 40,000 `e` rows: driven by those, it read 200,006.
    expect(out.read).toBeLessThan(6 * out.rows);
    expect(out.again).toBeLessThan(100);
  });
});

describe('requests are kept for good, so their rows never outlive them', () => {
  it.each([
    ['a deletion request', (k: Keys, exp: string) => sign(k, { kind: 5, tags: [['e', randomHex()], ['expiration', exp]] }), 'a deletion request (NIP-09)'],
    ['a request to vanish', (k: Keys, exp: string) => sign(k, { kind: 62, tags: [['relay', 'ALL_RELAYS'], ['expiration', exp]] }), 'a request to vanish (NIP-62)'],
  ])('%s with an expiration is refused (its rows would stay when it expires)', async (_n, make, what) => {
    const k = keys();
    // An hour ahead: one a second ahead expired before a loaded machine delivered it (answered 'expired' instead).
    const e = make(k, String(now() + 3600));
    const ws = await connect('/');
    expect(await ws.publish(e)).toEqual(['OK', e.id, false, `invalid: ${what} is kept for good: publish it without an expiration tag`]);
    ws.close();
  });

  it.each([
    [5, 'rules.0.kinds.1', 'kind 5 (a deletion request, NIP-09) is kept for good: leave it out of retention rules'],
    [62, 'rules.0.kinds.1', 'kind 62 (a request to vanish, NIP-62) is kept for good: leave it out of retention rules'],
  ])('a retention rule naming kind %i is refused (422)', async (kind, path, message) => {
    const owner = keys();
    const res = await opsCall(owner, 'PATCH', '/api/relay/retention', JSON.stringify({ rules: [{ kinds: [1, kind], days: 3 }] }));
    expect(res.status).toBe(422);
    expect(await res.json()).toEqual({ error: 'invalid retention', issues: [{ path, message }] });
  });

  it('a deletion request stored with an expiration before that rule does not expire: the purge keeps it (and its rows) for good', async () => {
    const owner = keys();
    const t = now();
    const target = sign(owner, { content: 'deleted note', created_at: t - 100 });
    const del = sign(owner, { kind: 5, tags: [['e', target.id], ['expiration', String(t + 5)]], created_at: t - 50 });
    const stub = shardStub(env, owner.pk);
    const left = await runInDurableObject(stub, (_i, state) => {
      // Stored as an older shard stored it, before the hook refused the expiration.
      const store = new EventStore(state.storage.sql);
      expect(store.insert(del, eventJson(del), state.storage)).toEqual({ status: 'stored' });
      expect(store.purgeExpired(t + 10)).toBeUndefined();
      return state.storage.sql.exec<{ expires_at: number | null }>('SELECT expires_at FROM events WHERE id = ?', del.id).toArray();
    });
    expect(left).toEqual([{ expires_at: null }]);
    const ws = await connect(`/r/${owner.pk}`);
    await ws.auth(owner);
    expect(await ws.publish(target)).toEqual(['OK', target.id, false, DELETED]);
    expect((await ws.req('kept', { ids: [del.id] })).events.map((e) => e.id)).toEqual([del.id]);
    ws.close();
  });

  it('rules stored before naming kinds 5 and 62 leave them out: the alarm keeps old requests and their rows, NIP-11 does not list them', async () => {
    const owner = keys();
    const t = now();
    const target = sign(owner, { kind: 7, content: '+', created_at: t - 3 * DAY }); // no rule names kind 7
    const old = [sign(owner, { content: 'old note', created_at: t - 3 * DAY }), deletion(owner, [target.id], [], t - 2 * DAY)];
    const oks = await publishAsOwner(owner, old);
    expect(oks.map((o) => o[2])).toEqual([true, true]);
    const stub = shardStub(env, owner.pk);
    const inForce = await runInDurableObject(stub, async (shard) => {
      const rules = await shard.setRetentionRules([{ kinds: [1, 5, 62], days: 1 }]);
      shard.clock = () => (t + 10) * 1000;
      await shard.alarm();
      return rules;
    });
    expect(inForce).toEqual([{ kinds: [1], days: 1 }]);
    const ws = await connect(`/r/${owner.pk}`);
    await ws.auth(owner);
    expect((await ws.req('left', { authors: [owner.pk] })).events.map((e) => e.id)).toEqual([old[1]!.id]);
    expect(await ws.publish(target)).toEqual(['OK', target.id, false, DELETED]);
    const late = deletion(owner, [randomHex()], [], t - 2 * DAY);
    expect(await ws.publish(late)).toEqual(['OK', late.id, true, '']);
    ws.close();
    const nip11 = (await (await SELF.fetch(`${BASE}/r/${owner.pk}`, { headers: { Accept: 'application/nostr+json' } })).json()) as { retention?: unknown };
    expect(nip11.retention).toEqual([{ kinds: [1], time: DAY }]);
  });
});
