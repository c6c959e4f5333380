// NIP-42 AUTH, private kinds (NIP-XX durable, gift wraps), NIP-70 protected events, NIP-40 expiry.
import { describe, expect, it } from 'vitest';
import { connect, eventFrame, freshOwner, keys, now, Sentinel, sign } from './helpers.js';

describe('NIP-42 AUTH', () => {
  it('accepts a valid AUTH, with or without a trailing slash on the relay URL', async () => {
    const owner = freshOwner();
    const s = await connect(`/r/${owner.pk}`);
    expect((await s.auth(owner))[2]).toBe(true);
    const s2 = await connect(`/r/${owner.pk}`);
    expect((await s2.auth(owner, { relay: `ws://relay.test/r/${owner.pk}/` }))[2]).toBe(true);
  });

  it.each([
    ['wrong challenge', { challenge: 'nope' }, 'auth-required: challenge does not match'],
    ['other relay', { relay: 'wss://elsewhere.example/' }, /^auth-required: relay tag does not match this relay \(ws:\/\/relay\.test\/r\/[0-9a-f]{64}\)$/],
    ['11 minutes old', { created_at: now() - 660 }, 'invalid: AUTH event is more than 10 minutes from now'],
    ['11 minutes ahead', { created_at: now() + 660 }, 'invalid: AUTH event is more than 10 minutes from now'],
  ])('rejects %s', async (_name, overrides, message) => {
    const owner = freshOwner();
    const s = await connect(`/r/${owner.pk}`);
    const ok = await s.auth(owner, overrides);
    expect(ok[2]).toBe(false);
    if (typeof message === 'string') expect(ok[3]).toBe(message);
    else expect(ok[3]).toMatch(message);
  });

  it('accepts 9 minutes of clock skew', async () => {
    const owner = freshOwner();
    const s = await connect(`/r/${owner.pk}`);
    expect((await s.auth(owner, { created_at: now() - 540 }))[2]).toBe(true);
  });

  it('rejects an AUTH with a bad signature and a wrong kind', async () => {
    const owner = freshOwner();
    const s = await connect(`/r/${owner.pk}`);
    const e = sign(owner, { kind: 1, tags: [['relay', s.url], ['challenge', s.challenge]] });
    s.send(['AUTH', e]);
    const ok = await s.next((f) => f[0] === 'OK');
    expect(ok[2]).toBe(false);
    expect(ok[3]).toMatch(/^invalid: /);
    const good = sign(owner, { kind: 22242, tags: [['relay', s.url], ['challenge', s.challenge]] });
    s.send(['AUTH', { ...good, sig: good.sig.replace(/.$/, (c) => (c === '0' ? '1' : '0')) }]);
    expect(await s.next((f) => f[0] === 'OK')).toEqual(['OK', good.id, false, 'invalid: signature verification failed']);
  });

  it('AUTH events are never stored or broadcast', async () => {
    const owner = freshOwner();
    const watcher = await connect(`/r/${owner.pk}`);
    await watcher.req('w', { kinds: [22242] });
    const s = await connect(`/r/${owner.pk}`);
    const authEvent = sign(owner, { kind: 22242, content: '', tags: [['relay', s.url], ['challenge', s.challenge]] });
    s.send(['AUTH', authEvent]);
    expect(await s.next((f) => f[0] === 'OK' && f[1] === authEvent.id)).toEqual(['OK', authEvent.id, true, '']);
    expect(await watcher.silence(eventFrame(authEvent.id), await Sentinel.arm(watcher, s, owner))).toBe(true);
    expect((await watcher.req('q', { kinds: [22242] })).events).toEqual([]);
  });
});

describe('private kinds', () => {
  it('NIP-XX durable kinds are served only to the authenticated author or p-tagged recipient', async () => {
    const owner = freshOwner();
    const client = keys();
    const stranger = keys();
    const pub = await connect(`/r/${owner.pk}`);
    const prompt = sign(client, { kind: 25802, tags: [['p', owner.pk], ['encryption', 'nip44']], content: 'ciphertext' });
    expect((await pub.publish(prompt))[2]).toBe(true);

    const anon = await connect(`/r/${owner.pk}`);
    expect(await anon.req('a', { kinds: [25802] })).toEqual({
      events: [],
      closed: 'auth-required: these kinds are only served to their authenticated author or recipient',
    });
    expect((await anon.req('b', { authors: [client.pk] })).events).toEqual([]);

    for (const [who, visible] of [
      [client, true],
      [owner, true],
      [stranger, false],
    ] as const) {
      const s = await connect(`/r/${owner.pk}`);
      await s.auth(who);
      expect((await s.req('c', { kinds: [25802] })).events.length).toBe(visible ? 1 : 0);
    }
  });

  it('live fan-out of private kinds follows the same rule', async () => {
    const owner = freshOwner();
    const client = keys();
    const anon = await connect(`/r/${owner.pk}`);
    await anon.req('all', { kinds: [1, 25803] });
    const recipient = await connect(`/r/${owner.pk}`);
    await recipient.auth(client);
    await recipient.req('mine', { kinds: [25803] });
    const resp = sign(owner, { kind: 25803, tags: [['p', client.pk], ['encryption', 'nip44']], content: 'x' });
    const pub = await connect(`/r/${owner.pk}`);
    await pub.publish(resp);
    expect(await recipient.next((f) => f[0] === 'EVENT')).toEqual(['EVENT', 'mine', resp]);
    expect(await anon.silence(eventFrame(resp.id), await Sentinel.arm(anon, pub, owner))).toBe(true);
  });

  it('gift wraps are served to the recipient only, not to their author', async () => {
    const owner = freshOwner();
    const sender = keys();
    const pub = await connect(`/r/${owner.pk}`);
    const wrap = sign(sender, { kind: 1059, tags: [['p', owner.pk]], content: 'wrapped' });
    expect((await pub.publish(wrap))[2]).toBe(true);
    const asSender = await connect(`/r/${owner.pk}`);
    await asSender.auth(sender);
    expect((await asSender.req('s', { kinds: [1059] })).events).toEqual([]);
    const asOwner = await connect(`/r/${owner.pk}`);
    await asOwner.auth(owner);
    expect((await asOwner.req('o', { kinds: [1059], '#p': [owner.pk] })).events).toEqual([wrap]);
  });

  it('a connection may authenticate as several pubkeys', async () => {
    const owner = freshOwner();
    const a = keys();
    const b = keys();
    const pub = await connect(`/r/${owner.pk}`);
    const wa = sign(owner, { kind: 1059, tags: [['p', owner.pk]], content: '1' });
    const wb = sign(a, { kind: 25803, tags: [['p', b.pk]], content: '2' });
    await pub.publish(wa);
    await pub.publish(sign(owner, { content: 'let a post', tags: [['p', a.pk]] }));
    const s = await connect(`/r/${owner.pk}`);
    await s.auth(owner);
    await s.auth(b);
    // wb is authored by a (not the owner's agent) and p-tags b: not admitted by the owner shard.
    expect((await pub.publish(wb))[3]).toMatch(/^restricted: /);
    expect((await s.req('x', { kinds: [1059, 25803] })).events).toEqual([wa]);
  });
});

describe('NIP-70 protected events', () => {
  it('needs the author to be authenticated', async () => {
    const owner = freshOwner();
    const s = await connect(`/r/${owner.pk}`);
    const e = sign(owner, { tags: [['-']] });
    expect(await s.publish(e)).toEqual(['OK', e.id, false, 'auth-required: this event is protected: authenticate as its author to publish it']);
    await s.auth(keys());
    expect(await s.publish(e)).toEqual(['OK', e.id, false, 'restricted: this event is protected: only its author may publish it']);
    await s.auth(owner);
    expect(await s.publish(e)).toEqual(['OK', e.id, true, '']);
  });
});

describe('NIP-40 expiration', () => {
  it('rejects expired events and stops serving events once they expire', async () => {
    const owner = freshOwner();
    const s = await connect(`/r/${owner.pk}`);
    const expired = sign(owner, { tags: [['expiration', String(now() - 1)]] });
    expect(await s.publish(expired)).toEqual(['OK', expired.id, false, 'invalid: event has expired']);
    const soon = sign(owner, { tags: [['expiration', String(now() + 2)]] });
    expect((await s.publish(soon))[2]).toBe(true);
    expect((await s.req('a', { ids: [soon.id] })).events).toEqual([soon]);
    await new Promise((r) => setTimeout(r, 3100));
    expect((await s.req('b', { ids: [soon.id] })).events).toEqual([]);
  });
});
