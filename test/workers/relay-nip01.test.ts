// NIP-01 behaviour of a shard over a real WebSocket: publish, query, order, limits, live events.
import { SELF } from 'cloudflare:test';
import { describe, expect, it } from 'vitest';
import { BASE, connect, eventFrame, freshOwner, keys, now, Sentinel, sign, TestSocket } from './helpers.js';

/** A connection exactly as a client gets it (the `connect` helper asks for the challenge at once). */
async function rawConnect(path: string): Promise<TestSocket> {
  const res = await SELF.fetch(`${BASE}${path}`, { headers: { Upgrade: 'websocket' } });
  const ws = res.webSocket;
  if (!ws) throw new Error(`no websocket: ${res.status}`);
  ws.accept();
  return new TestSocket(ws, `ws://relay.test${path}`);
}

describe('NIP-01 on a shard', () => {
  it('sends no AUTH challenge on connect, and the same challenge each time a bare ["AUTH"] asks', async () => {
    const s = await rawConnect('/');
    s.send(['REQ', 'sentinel', { ids: ['0'.repeat(64)] }]);
    await s.next((f) => f[0] === 'EOSE');
    expect(s.frames).toEqual([]);
    s.send(['AUTH']);
    const [, challenge] = await s.next((f) => f[0] === 'AUTH');
    expect(challenge).toMatch(/^[0-9a-f]{32}$/);
    s.send(['AUTH']);
    expect(await s.next((f) => f[0] === 'AUTH')).toEqual(['AUTH', challenge]);
  });

  it('sends the challenge right before every auth-required answer (CLOSED and OK), and it authenticates', async () => {
    const owner = freshOwner();
    const s = await rawConnect(`/r/${owner.pk}`);
    const order: string[] = [];
    s.ws.addEventListener('message', (m) => void order.push((JSON.parse(m.data as string) as string[])[0]!));
    expect(await s.req('wraps', { kinds: [1059], '#p': [owner.pk] })).toEqual({
      events: [],
      closed: 'auth-required: these kinds are only served to their authenticated author or recipient',
    });
    const [, challenge] = await s.next((f) => f[0] === 'AUTH');
    expect(challenge).toMatch(/^[0-9a-f]{32}$/);
    const guarded = sign(owner, { tags: [['-']] });
    expect(await s.publish(guarded)).toEqual(['OK', guarded.id, false, 'auth-required: this event is protected: authenticate as its author to publish it']);
    expect(await s.next((f) => f[0] === 'AUTH')).toEqual(['AUTH', challenge]);
    expect(order).toEqual(['AUTH', 'CLOSED', 'AUTH', 'OK']);
    expect((await s.auth(owner))[2]).toBe(true);
    expect(await s.req('wraps', { kinds: [1059], '#p': [owner.pk] })).toEqual({ events: [] });
    expect(await s.publish(guarded)).toEqual(['OK', guarded.id, true, '']);
    expect(order.filter((t) => t === 'AUTH')).toHaveLength(2);
  });

  it('a subscription id that spells auth-required: brings no challenge', async () => {
    const s = await rawConnect('/');
    const subId = 'x","auth-required: y';
    s.send(['REQ', subId, { kinds: ['one'] }]);
    const closed = await s.next((f) => f[0] === 'CLOSED');
    expect(closed[1]).toBe(subId);
    expect(closed[2]).toMatch(/^invalid: /);
    s.send(['REQ', 'sentinel', { ids: ['0'.repeat(64)] }]);
    await s.next((f) => f[0] === 'EOSE');
    expect(s.frames).toEqual([]);
  });

  it('answers ["PING"] with nothing: the next frame is the answer to a sentinel REQ', async () => {
    const s = await connect('/');
    s.frames.splice(0); // the challenge the helper asked for
    s.send(['PING']);
    s.send(['REQ', 'sentinel', { ids: ['0'.repeat(64)] }]);
    await s.next((f) => f[0] === 'EOSE' && f[1] === 'sentinel');
    expect(s.frames).toEqual([]);
  });

  it('stores an event, answers OK, serves its canonical JSON, and says duplicate the second time', async () => {
    const owner = freshOwner();
    const s = await connect(`/r/${owner.pk}`);
    const e = sign(owner, { content: 'unicode ✓ "quotes" \\ and \n newline', tags: [['t', 'x'], ['z', 'a', 'b']] });
    // Send with unusual (but valid) formatting and key order: the relay serves the canonical JSON
    // (the seven fields once each, compact, in NIP-01 order) of what it validated.
    const { sig, ...rest } = e;
    s.send(`["EVENT",${JSON.stringify({ sig, ...rest }, null, 1)}]`);
    expect(await s.next((f) => f[0] === 'OK')).toEqual(['OK', e.id, true, '']);
    expect(await s.publish(e)).toEqual(['OK', e.id, true, 'duplicate: already have this event']);
    const reader = await connect(`/r/${owner.pk}`);
    const got: string[] = [];
    reader.ws.addEventListener('message', (m) => void got.push(m.data as string));
    const { events } = await reader.req('a', { ids: [e.id] });
    expect(events).toEqual([e]);
    expect(got.find((m) => m.startsWith('["EVENT"'))).toBe(`["EVENT","a",${JSON.stringify(e)}]`);
  });

  it('orders by created_at descending then id ascending, applies limit, since/until inclusive', async () => {
    const owner = freshOwner();
    const s = await connect(`/r/${owner.pk}`);
    const t = now() - 100;
    const evs = [
      sign(owner, { created_at: t, content: 'a' }),
      sign(owner, { created_at: t, content: 'b' }),
      sign(owner, { created_at: t + 1, content: 'c' }),
      sign(owner, { created_at: t + 2, content: 'd' }),
      sign(owner, { created_at: t - 1, content: 'e' }),
    ];
    for (const e of evs) expect((await s.publish(e))[2]).toBe(true);
    const expected = [...evs].sort((a, b) => b.created_at - a.created_at || (a.id < b.id ? -1 : 1)).map((e) => e.id);
    expect((await s.req('all', { authors: [owner.pk] })).events.map((e) => e.id)).toEqual(expected);
    expect((await s.req('lim', { authors: [owner.pk], limit: 2 })).events.map((e) => e.id)).toEqual(expected.slice(0, 2));
    const window = (await s.req('win', { authors: [owner.pk], since: t, until: t + 1 })).events;
    expect(window.map((e) => e.created_at).sort()).toEqual([t, t, t + 1]);
  });

  it('matches ids, authors, kinds, #tags, and unions several filters', async () => {
    const owner = freshOwner();
    const other = keys();
    const s = await connect(`/r/${owner.pk}`);
    const a = sign(owner, { kind: 1, tags: [['t', 'nostr']] });
    const b = sign(owner, { kind: 7, tags: [['e', a.id], ['p', other.pk]] });
    const c = sign(other, { kind: 1, tags: [['p', owner.pk], ['t', 'other']] });
    for (const e of [a, b, c]) expect((await s.publish(e))[2]).toBe(true);
    const ids = async (...filters: object[]) =>
      (await s.req(Math.random().toString(36).slice(2), ...filters)).events.map((e) => e.id).sort();
    expect(await ids({ kinds: [7] })).toEqual([b.id]);
    expect(await ids({ '#t': ['nostr', 'nope'] })).toEqual([a.id]);
    expect(await ids({ '#p': [owner.pk] })).toEqual([c.id]);
    expect(await ids({ authors: [owner.pk], kinds: [1] })).toEqual([a.id]);
    expect(await ids({ '#e': [a.id], '#p': [other.pk] })).toEqual([b.id]);
    expect(await ids({ '#e': [a.id], '#p': [owner.pk] })).toEqual([]);
    expect(await ids({ ids: [a.id] }, { kinds: [7] })).toEqual([a.id, b.id].sort());
    expect(await ids({ '#t': [] })).toEqual([]);
  });

  it('delivers live events after EOSE, replaces a subscription with the same id, and stops after CLOSE', async () => {
    const owner = freshOwner();
    const sub = await connect(`/r/${owner.pk}`);
    const pub = await connect(`/r/${owner.pk}`);
    expect((await sub.req('s', { kinds: [1] })).events).toEqual([]);
    const e1 = sign(owner, { kind: 1 });
    await pub.publish(e1);
    expect(await sub.next((f) => f[0] === 'EVENT')).toEqual(['EVENT', 's', e1]);
    // Same sub id, new filter: kind 1 no longer delivered, kind 2 is.
    await sub.req('s', { kinds: [2] });
    await pub.publish(sign(owner, { kind: 1, content: 'x' }));
    const e2 = sign(owner, { kind: 2 });
    await pub.publish(e2);
    expect(await sub.next((f) => f[0] === 'EVENT')).toEqual(['EVENT', 's', e2]);
    sub.send(['CLOSE', 's']);
    // The sentinel's REQ travels on `sub` after the CLOSE, so the shard has closed 's' by its EOSE.
    const sentinel = await Sentinel.arm(sub, pub, owner);
    const afterClose = sign(owner, { kind: 2, content: 'after close' });
    await pub.publish(afterClose);
    expect(await sub.silence(eventFrame(afterClose.id), sentinel)).toBe(true);
  });

  // NIP-01: a REQ replaces the subscription of its id, and CLOSED says the relay ended it (nostr-tools
  // then forgets it and never sends CLOSE): a refused replacement leaves no subscription of that id.
  for (const [refusal, replacement, closed] of [
    ['a malformed filter', { kinds: ['x'] }, 'invalid: kinds.0: kinds must be numbers'],
    ['authentication', { kinds: [1059], '#p': ['f'.repeat(64)] }, 'auth-required: these kinds are only served to their authenticated author or recipient'],
  ] as const) {
    it(`a REQ refused for ${refusal} ends the subscription of its id: CLOSED, and no live event for it after`, async () => {
      const owner = freshOwner();
      const sub = await connect(`/r/${owner.pk}`);
      const pub = await connect(`/r/${owner.pk}`);
      expect(await sub.req('feed', { kinds: [1], authors: [owner.pk] })).toEqual({ events: [] });
      expect(await sub.req('feed', replacement)).toEqual({ events: [], closed });
      // The sentinel's REQ travels on `sub` after the refused one, so the shard has handled it by its EOSE.
      const sentinel = await Sentinel.arm(sub, pub, owner);
      const after = sign(owner, { kind: 1, content: 'after the refused REQ' });
      expect((await pub.publish(after))[2]).toBe(true);
      expect(await sub.silence((f) => f[0] === 'EVENT' && f[1] === 'feed', sentinel)).toBe(true);
    });
  }

  it('limit 0 gives EOSE at once and keeps the subscription open', async () => {
    const owner = freshOwner();
    const s = await connect(`/r/${owner.pk}`);
    await s.publish(sign(owner));
    expect((await s.req('z', { authors: [owner.pk], limit: 0 })).events).toEqual([]);
    const e = sign(owner, { content: 'live' });
    await s.publish(e);
    expect(await s.next((f) => f[0] === 'EVENT')).toEqual(['EVENT', 'z', e]);
  });

  it('counts with NIP-45 COUNT', async () => {
    const owner = freshOwner();
    const s = await connect(`/r/${owner.pk}`);
    for (let i = 0; i < 3; i++) await s.publish(sign(owner, { content: `n${i}`, tags: [['t', 'c']] }));
    await s.publish(sign(owner, { kind: 7 }));
    s.send(['COUNT', 'c1', { authors: [owner.pk], kinds: [1] }, { '#t': ['c'] }]);
    expect(await s.next((f) => f[0] === 'COUNT')).toEqual(['COUNT', 'c1', { count: 3 }]);
    s.send(['COUNT', 'c2', { authors: [owner.pk] }]);
    expect(await s.next((f) => f[0] === 'COUNT')).toEqual(['COUNT', 'c2', { count: 4 }]);
  });
});
