// NIP-62 request to vanish: removes the author's events (deletions included) and gift wraps addressed
// to it, refuses them afterwards (blocked:), accepts newer events, cannot be deleted, must name this
// relay, and works on an owner shard for any key.
import { env, runInDurableObject } from 'cloudflare:test';
import { describe, expect, it } from 'vitest';
import { shardStub } from '../../workers/common/shards.js';
import { EventStore } from '../../workers/relay-do/store.js';
import { exportPage } from '../../workers/relay-do/export.js';
import { ALL_RELAYS, VANISH_BATCH, VanishList } from '../../workers/relay-do/vanish.js';
import { npubEncode } from 'nostr-tools/nip19';
import { connect, keys, now, sign, type Keys, type TestSocket } from './helpers.js';

const BLOCKED = 'blocked: this pubkey asked to vanish from this relay (NIP-62)';

const vanish = (k: Keys, relay: string, created_at = now()) => sign(k, { kind: 62, content: 'please forget me', tags: [['relay', relay]], created_at });

async function authed(path: string, k: Keys): Promise<TestSocket> {
  const ws = await connect(path);
  await ws.auth(k);
  return ws;
}

describe('NIP-62 on the public shard', () => {
  it('removes everything of the pubkey, refuses it again, confirms with OK', async () => {
    const x = keys();
    const y = keys();
    const bystander = keys();
    const t = now() - 60;
    const ws = await authed('/', x);
    const own = [sign(x, { content: 'a', created_at: t }), sign(x, { content: 'b', created_at: t + 1 })];
    const deletion = sign(x, { kind: 5, tags: [['e', 'f'.repeat(64)]], created_at: t + 2 });
    const wrap = sign(y, { kind: 1059, content: 'sealed', tags: [['p', x.pk]], created_at: t + 3 });
    const other = sign(bystander, { content: 'stays', created_at: t + 4 });
    for (const e of [...own, deletion, wrap, other]) expect((await ws.publish(e))[2]).toBe(true);

    const request = vanish(x, 'ws://relay.test/');
    expect(await ws.publish(request)).toEqual(['OK', request.id, true, '']);

    expect((await ws.req('mine', { authors: [x.pk] })).events).toEqual([request]);
    expect((await ws.req('wraps', { kinds: [1059], '#p': [x.pk] })).events).toEqual([]);
    expect((await ws.req('other', { authors: [bystander.pk] })).events).toEqual([other]);
    for (const e of [own[0]!, deletion, wrap]) expect(await ws.publish(e)).toEqual(['OK', e.id, false, BLOCKED]);

    const later = sign(x, { content: 'new life', created_at: request.created_at + 1 });
    expect(await ws.publish(later)).toEqual(['OK', later.id, true, '']);
    const undo = sign(x, { kind: 5, tags: [['e', request.id]], created_at: request.created_at + 2 });
    expect((await ws.publish(undo))[2]).toBe(true);
    expect((await ws.req('after', { authors: [x.pk], kinds: [62] })).events).toEqual([request]);
    ws.close();
  });

  it('keeps what the key deleted after its request: the deletion records of later deletions stay, with the deletions', async () => {
    const x = keys();
    const t = now() - 60;
    const ws = await authed('/', x);
    const early = sign(x, { content: 'deleted before the request', created_at: t });
    const earlyDeletion = sign(x, { kind: 5, tags: [['e', early.id]], created_at: t + 1 });
    const note = sign(x, { content: 'deleted after the request', created_at: t + 20 });
    const deletion = sign(x, { kind: 5, tags: [['e', note.id]], created_at: t + 21 });
    // The same later deletion named again by an earlier request: the row must stay for the later one.
    const again = sign(x, { kind: 5, tags: [['e', note.id]], created_at: t + 2 });
    for (const e of [early, earlyDeletion, note, deletion, again]) expect((await ws.publish(e))[2]).toBe(true);

    const request = vanish(x, ALL_RELAYS, t + 10);
    expect(await ws.publish(request)).toEqual(['OK', request.id, true, '']);

    expect((await ws.req('left', { authors: [x.pk] })).events.map((e) => e.id)).toEqual([deletion.id, request.id]);
    const rebroadcast = await connect('/');
    expect(await rebroadcast.publish(note)).toEqual(['OK', note.id, false, 'blocked: this event was deleted by its author']);
    expect(await rebroadcast.publish(early)).toEqual(['OK', early.id, false, BLOCKED]);
    rebroadcast.close();
    ws.close();
  });

  it(`removes what strangers piled up in batches of ${VANISH_BATCH}: the first before the OK, the rest by the alarm at once`, async () => {
    const x = keys();
    const bystander = keys();
    const t = now() - 600;
    // Wraps addressed to x from many strangers, and x's own notes: more than one batch in all.
    const piled = [
      ...Array.from({ length: 400 }, (_, n) => sign(keys(), { kind: 1059, content: `wrap ${n}`, tags: [['p', x.pk]], created_at: t + (n % 60) })),
      ...Array.from({ length: 250 }, (_, n) => sign(x, { content: `note ${n}`, created_at: t + (n % 60) })),
    ];
    const other = sign(bystander, { content: 'stays', created_at: t });
    const primary = shardStub(env, null);
    const count = () =>
      runInDurableObject(primary, (_i, state) =>
        state.storage.sql.exec<{ n: number }>('SELECT count(*) AS n FROM events WHERE id IN (SELECT value FROM json_each(?))', JSON.stringify(piled.map((e) => e.id))).one().n,
      );
    await runInDurableObject(primary, (_i, state) => {
      const store = new EventStore(state.storage.sql);
      for (const e of [...piled, other]) store.insert(e, JSON.stringify(e), state.storage);
    });
    expect(await count()).toBe(650);
    const ws = await connect('/');
    const request = vanish(x, 'ws://relay.test/');
    expect(await ws.publish(request)).toEqual(['OK', request.id, true, '']);
    // The first batch went before the OK; the alarm, due at once, removes the rest.
    expect(await count()).toBeLessThanOrEqual(650 - VANISH_BATCH);
    await expect.poll(count).toBe(0);
    expect((await ws.req('mine', { authors: [x.pk] })).events).toEqual([request]);
    expect((await ws.req('other', { authors: [bystander.pk] })).events).toEqual([other]);
    // Nothing is pending: the alarm does not come back for it.
    expect(await runInDurableObject(primary, (_i, state) => state.storage.sql.exec('SELECT pubkey FROM vanish_pending').toArray())).toEqual([]);
    ws.close();
  });

  it('while a removal is pending, REQ, COUNT and export show what they will show once it ends', async () => {
    const [x, y, b] = [keys(), keys(), keys()];
    const t = now() - 600;
    const request = vanish(x, 'ws://relay.test/', t + 50);
    const removed = [
      ...Array.from({ length: 5 }, (_, n) => sign(x, { content: `x ${n}`, created_at: t + n * 10 })),
      sign(x, { kind: 62, content: 'an older request', tags: [['relay', ALL_RELAYS]], created_at: t + 1 }),
      sign(y, { kind: 1059, content: 'to x', tags: [['p', b.pk], ['p', x.pk]], created_at: t + 3 }),
    ];
    const kept = [
      request,
      sign(x, { content: 'after the request', created_at: t + 60 }),
      sign(y, { kind: 1059, content: 'to x, later', tags: [['p', x.pk]], created_at: t + 70 }),
      sign(y, { kind: 1059, content: 'to b', tags: [['p', b.pk]], created_at: t + 3 }),
      sign(y, { content: 'x mentioned', tags: [['p', x.pk]], created_at: t + 4 }),
    ];
    const filters = [[{}], [{ authors: [x.pk] }, { kinds: [1059] }], [{ '#p': [x.pk] }], [{ kinds: [62] }]];
    const views = await runInDurableObject(env.RELAY_SHARD.get(env.RELAY_SHARD.newUniqueId()), (_i, state) => {
      const store = new EventStore(state.storage.sql);
      const list = new VanishList(state.storage.sql);
      for (const e of [...removed, ...kept]) store.insert(e, JSON.stringify(e), state.storage);
      list.record(x.pk, request.created_at);
      const view = (vanishing: boolean) => {
        const scope = { readers: [x.pk, b.pk], now: now(), vanishing };
        return filters.map((f) => ({
          ids: store.query(f, () => 500, scope, 1e9).map((r) => r.id),
          count: store.count(f, scope, 1_000).count,
          exported: exportPage(store, {}, scope).lines.map((l) => (JSON.parse(l) as { id: string }).id),
        }));
      };
      const pending = view(true);
      const unhidden = view(false);
      while (list.removeSome(store, 2));
      return { pending, unhidden, after: view(false) };
    });
    expect(views.pending).toEqual(views.after);
    // Without hiding, the pending events would show (the test sees a difference).
    expect(views.unhidden).not.toEqual(views.after);
    expect(new Set(views.after[0]!.ids)).toEqual(new Set(kept.map((e) => e.id)));
  });

  it('a REQ or COUNT on the shard hides a removal still pending', async () => {
    const x = keys();
    const t = now() - 600;
    const notes = Array.from({ length: 3 }, (_, n) => sign(x, { content: `x ${n}`, created_at: t + n }));
    const request = vanish(x, ALL_RELAYS, t + 10);
    const primary = shardStub(env, null);
    // Recorded as the request's write leaves it when strangers piled more than a batch: removal pending.
    await runInDurableObject(primary, (_i, state) => {
      const store = new EventStore(state.storage.sql);
      for (const e of [...notes, request]) store.insert(e, JSON.stringify(e), state.storage);
      new VanishList(state.storage.sql).record(x.pk, request.created_at);
    });
    const ws = await connect('/');
    expect((await ws.req('mine', { authors: [x.pk] })).events).toEqual([request]);
    ws.send(['COUNT', 'n', { authors: [x.pk] }]);
    expect(await ws.next((m) => m[0] === 'COUNT' && m[1] === 'n')).toEqual(['COUNT', 'n', { count: 1 }]);
    ws.close();
  });

  it('a removal pass takes at most its batch, over every pending request, and says whether any is left', async () => {
    const [x, y] = [keys(), keys()];
    const t = now() - 600;
    const events = [...Array.from({ length: 7 }, (_, n) => sign(x, { content: `x ${n}`, created_at: t + n })), ...Array.from({ length: 4 }, (_, n) => sign(y, { content: `y ${n}`, created_at: t + n }))];
    const stub = env.RELAY_SHARD.get(env.RELAY_SHARD.newUniqueId());
    const passes = await runInDurableObject(stub, (_i, state) => {
      const store = new EventStore(state.storage.sql);
      const list = new VanishList(state.storage.sql);
      for (const e of events) store.insert(e, JSON.stringify(e), state.storage);
      list.record(x.pk, t + 100);
      list.record(y.pk, t + 100);
      const left = () => state.storage.sql.exec<{ n: number }>('SELECT count(*) AS n FROM events').one().n;
      const out: Array<[boolean, number]> = [];
      for (let i = 0; i < 4; i++) out.push([list.removeSome(store, 4), left()]);
      return out;
    });
    // 11 events, 4 a pass: the third pass removes the last 3 and nothing is pending after it.
    expect(passes).toEqual([
      [true, 7],
      [true, 3],
      [false, 0],
      [false, 0],
    ]);
  });

  it.each([['ALL_RELAYS'], ['ws://RELAY.test']])('accepts a request naming %s', async (relay) => {
    const x = keys();
    const ws = await connect('/');
    const note = sign(x, { created_at: now() - 5 });
    await ws.publish(note);
    const request = vanish(x, relay);
    expect(await ws.publish(request)).toEqual(['OK', request.id, true, '']);
    expect((await ws.req('q', { ids: [note.id] })).events).toEqual([]);
    ws.close();
  });

  it('refuses a request that names another relay, and removes nothing', async () => {
    const x = keys();
    const ws = await connect('/');
    const note = sign(x, { created_at: now() - 5 });
    await ws.publish(note);
    const request = vanish(x, 'wss://elsewhere.example');
    expect(await ws.publish(request)).toEqual([
      'OK',
      request.id,
      false,
      'invalid: a request to vanish must name this relay (ws://relay.test/) or ALL_RELAYS in a relay tag',
    ]);
    expect((await ws.req('q', { ids: [note.id] })).events).toEqual([note]);
    ws.close();
  });
});

describe('NIP-62 on an owner shard', () => {
  it("any key may vanish from it; the owner's events stay", async () => {
    const owner = keys();
    const stranger = keys();
    const path = `/r/${owner.pk}`;
    const ownerWs = await authed(path, owner);
    const mine = sign(owner, { content: 'mine', created_at: now() - 10 });
    expect((await ownerWs.publish(mine))[2]).toBe(true);
    const ws = await connect(path);
    const toOwner = sign(stranger, { content: 'hi owner', tags: [['p', owner.pk]], created_at: now() - 10 });
    expect((await ws.publish(toOwner))[2]).toBe(true);
    const request = vanish(stranger, `ws://relay.test${path}`);
    expect(await ws.publish(request)).toEqual(['OK', request.id, true, '']);
    expect((await ownerWs.req('q', { kinds: [1] })).events).toEqual([mine]);
    expect(await ws.publish(toOwner)).toEqual(['OK', toOwner.id, false, BLOCKED]);
    ws.close();
    ownerWs.close();
  });

  it('names the shard in any of its URL forms (npub or hex, trailing slash); another owner’s shard is not this one', async () => {
    const owner = keys();
    const other = keys();
    const ws = await connect(`/r/${owner.pk}`);
    const elsewhere = vanish(keys(), `ws://relay.test/r/${other.pk}`);
    expect((await ws.publish(elsewhere)).slice(2)).toEqual([false, 'invalid: a request to vanish must name this relay (ws://relay.test/r/' + owner.pk + ') or ALL_RELAYS in a relay tag']);
    const publicShard = vanish(keys(), 'ws://relay.test/');
    expect((await ws.publish(publicShard))[2]).toBe(false);
    for (const form of [`ws://relay.test/r/${npubEncode(owner.pk)}`, `ws://RELAY.test/r/${owner.pk}/`]) {
      const stranger = keys();
      const note = sign(stranger, { content: 'hi', tags: [['p', owner.pk]], created_at: now() - 10 });
      expect((await ws.publish(note))[2]).toBe(true);
      expect(await ws.publish(vanish(stranger, form))).toEqual(['OK', expect.any(String), true, '']);
      expect(await ws.publish(note)).toEqual(['OK', note.id, false, BLOCKED]);
    }
    ws.close();
  });
});
