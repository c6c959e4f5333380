// NIP-59 gift wrap: round trip, kinds, and every way an unwrap must fail.
import { describe, expect, it } from 'vitest';
import { finalizeEvent } from 'nostr-tools/pure';
import { ConversationKeyCache, encrypt, MAX_PLAINTEXT_BYTES, payloadLength } from './nip44.js';
import { KIND } from './kinds.js';
import { giftWrap, makeRumor, rumorContentRoom, unwrap, wrapRoom } from './nip59.js';
import { nobleVerifier } from './verify.js';
import type { EventSigner, NostrEvent } from './event.js';
import { keys, now } from '../../test/support/nostr.js';

const cache = new ConversationKeyCache(64);
const plain = (e: NostrEvent): NostrEvent => ({ id: e.id, pubkey: e.pubkey, created_at: e.created_at, kind: e.kind, tags: e.tags, content: e.content, sig: e.sig });

describe('NIP-59', () => {
  const alice = keys();
  const bob = keys();
  const rumor = makeRumor({ pubkey: alice.pk, kind: 25802, created_at: now(), tags: [['p', bob.pk]], content: 'inner' });

  it('round-trips, hides the author behind a one-time key, and keeps durable NIP-XX kinds in 1059', () => {
    const wrap = giftWrap(rumor, alice.sk, bob.pk, cache);
    expect(wrap.kind).toBe(KIND.GIFT_WRAP);
    expect(wrap.pubkey).not.toBe(alice.pk);
    expect(wrap.tags).toEqual([['p', bob.pk]]);
    expect(unwrap(wrap, bob.sk, cache, nobleVerifier)).toEqual({ ok: true, value: { rumor, author: alice.pk } });
  });

  it('wrapRoom: the largest plaintext whose ciphertext, as the rumor content, still wraps (one byte more does not)', () => {
    for (const n of [1, 300, 5000, MAX_PLAINTEXT_BYTES]) expect(payloadLength(n)).toBe(encrypt('x'.repeat(n), cache.get(alice.sk, bob.pk)).length);
    for (const session of ['sender:' + alice.pk, 's'.repeat(5000)]) {
      const fields = { kind: 25803, created_at: now(), tags: [['p', bob.pk], ['e', alice.pk, '', 'root'], ['s', session], ['encryption', 'nip44']] };
      const room = wrapRoom(fields);
      expect(room).toBeGreaterThan(20_000);
      const wrapOf = (n: number) => giftWrap(makeRumor({ ...fields, pubkey: alice.pk, content: encrypt('x'.repeat(n), cache.get(alice.sk, bob.pk)) }), alice.sk, bob.pk, cache);
      expect(unwrap(wrapOf(room), bob.sk, cache, nobleVerifier).ok).toBe(true);
      expect(() => wrapOf(room + 1)).toThrow(RangeError);
    }
    expect(wrapRoom({ kind: 25803, created_at: now(), tags: [['s', 's'.repeat(60_000)]] })).toBe(0);
  });

  it('rumorContentRoom: the largest content, escapes counted, that still wraps (one byte more does not)', () => {
    const fields = { kind: 26910, created_at: now(), tags: [['e', alice.pk], ['p', bob.pk]] };
    const room = rumorContentRoom(fields);
    expect(room).toBeGreaterThan(30_000);
    const wrapOf = (content: string) => giftWrap(makeRumor({ ...fields, pubkey: alice.pk, content }), alice.sk, bob.pk, cache);
    // a quote takes two bytes in the rumor's JSON
    for (const content of ['x'.repeat(room), '"'.repeat(room / 2), 'é'.repeat(room / 2)]) expect(unwrap(wrapOf(content), bob.sk, cache, nobleVerifier).ok).toBe(true);
    expect(() => wrapOf('x'.repeat(room + 1))).toThrow(RangeError);
    expect(() => wrapOf('"'.repeat(room / 2 + 1))).toThrow(RangeError);
  });

  it('does not put the one-time wrap keys of unwrapped gift wraps into the shared cache', () => {
    const shared = new ConversationKeyCache(8);
    shared.get(bob.sk, alice.pk); // the real peer, as the agent would have it
    for (let i = 0; i < 20; i++) expect(unwrap(giftWrap(rumor, alice.sk, bob.pk, cache), bob.sk, shared, nobleVerifier).ok).toBe(true);
    // Only (bob, alice) for the seal layer: twenty one-time wrapper keys would have evicted it.
    expect(shared.size).toBe(1);
    expect(shared.stats.misses).toBe(1);
  });

  it('does not put the one-time keys of the wraps it makes into the shared cache either', () => {
    const shared = new ConversationKeyCache(8);
    for (let i = 0; i < 20; i++) giftWrap(rumor, alice.sk, bob.pk, shared);
    // Only (alice, bob) for the seal layer: twenty one-time wrap keys would fill the cache.
    expect(shared.size).toBe(1);
    expect(shared.stats.misses).toBe(1);
  });

  it('signs the seal and the wrap with the signer it is given', () => {
    const signed: number[] = [];
    const sign: EventSigner = (t, sk) => {
      signed.push(t.kind);
      const { id, pubkey, created_at, kind, tags, content, sig } = finalizeEvent(t, sk);
      return { id, pubkey, created_at, kind, tags, content, sig };
    };
    const wrap = giftWrap(rumor, alice.sk, bob.pk, cache, now(), { sign });
    expect(signed).toEqual([13, 1059]);
    expect(unwrap(wrap, bob.sk, cache, nobleVerifier)).toEqual({ ok: true, value: { rumor, author: alice.pk } });
  });

  it('refuses a wrap whose signer is not a point on the curve, as a value', () => {
    const wrap = { ...giftWrap(rumor, alice.sk, bob.pk, cache), pubkey: 'f'.repeat(64) };
    const r = unwrap(wrap, bob.sk, cache, nobleVerifier);
    expect(r.ok).toBe(false);
    if (!r.ok) expect(r.error).toMatch(/^cannot decrypt gift wrap: /);
  });

  it('uses 21059 (with the real time) for ephemeral rumors', () => {
    const eph = makeRumor({ pubkey: alice.pk, kind: 25801, created_at: now(), tags: [], content: 'delta' });
    const wrap = giftWrap(eph, alice.sk, bob.pk, cache);
    expect(wrap.kind).toBe(KIND.EPHEMERAL_GIFT_WRAP);
    expect(Math.abs(wrap.created_at - now())).toBeLessThanOrEqual(2);
  });

  it('refuses a wrap for someone else, a non-wrap kind, and a wrap it cannot decrypt', () => {
    const wrap = giftWrap(rumor, alice.sk, bob.pk, cache);
    expect(unwrap(wrap, keys().sk, cache, nobleVerifier)).toEqual({ ok: false, error: 'gift wrap is not addressed to this key' });
    expect(unwrap({ ...wrap, kind: 1 }, bob.sk, cache, nobleVerifier)).toEqual({ ok: false, error: 'not a gift wrap (kind 1)' });
    const garbage = plain(finalizeEvent({ kind: KIND.GIFT_WRAP, created_at: now(), tags: [['p', bob.pk]], content: 'not nip44' }, keys().sk));
    const r = unwrap(garbage, bob.sk, cache, nobleVerifier);
    expect(r.ok).toBe(false);
    expect(!r.ok && r.error).toMatch(/^cannot decrypt gift wrap: /);
  });

  it('refuses a seal whose signer is not the rumor author (impersonation)', () => {
    const mallory = keys();
    // Mallory seals a rumor that claims Alice as author.
    const seal = plain(finalizeEvent({ kind: 13, created_at: now(), tags: [], content: encrypt(JSON.stringify(rumor), cache.get(mallory.sk, bob.pk)) }, mallory.sk));
    const oneTime = keys();
    const wrap = plain(finalizeEvent({ kind: KIND.GIFT_WRAP, created_at: now(), tags: [['p', bob.pk]], content: encrypt(JSON.stringify(seal), cache.get(oneTime.sk, bob.pk)) }, oneTime.sk));
    expect(unwrap(wrap, bob.sk, cache, nobleVerifier)).toEqual({ ok: false, error: 'seal signer is not the rumor author' });
  });

  it('refuses a seal with a bad signature and a rumor whose id does not match', () => {
    const seal = plain(finalizeEvent({ kind: 13, created_at: now(), tags: [], content: encrypt(JSON.stringify(rumor), cache.get(alice.sk, bob.pk)) }, alice.sk));
    const badSeal = { ...seal, sig: seal.sig.replace(/.$/, (c) => (c === '0' ? '1' : '0')) };
    const wrapOf = (inner: unknown) => {
      const k = keys();
      return plain(finalizeEvent({ kind: KIND.GIFT_WRAP, created_at: now(), tags: [['p', bob.pk]], content: encrypt(JSON.stringify(inner), cache.get(k.sk, bob.pk)) }, k.sk));
    };
    expect(unwrap(wrapOf(badSeal), bob.sk, cache, nobleVerifier)).toEqual({ ok: false, error: 'invalid seal: signature verification failed' });
    const forged = { ...rumor, content: 'changed' };
    const seal2 = plain(finalizeEvent({ kind: 13, created_at: now(), tags: [], content: encrypt(JSON.stringify(forged), cache.get(alice.sk, bob.pk)) }, alice.sk));
    expect(unwrap(wrapOf(seal2), bob.sk, cache, nobleVerifier)).toEqual({ ok: false, error: 'invalid rumor: id does not match' });
    const notSeal = plain(finalizeEvent({ kind: 1, created_at: now(), tags: [], content: 'x' }, alice.sk));
    expect(unwrap(wrapOf(notSeal), bob.sk, cache, nobleVerifier)).toEqual({ ok: false, error: 'invalid seal: kind 1, expected 13' });
  });
});
