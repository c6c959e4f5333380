// Properties of the protocol helpers that read untrusted input: NIP-44 (round trip; random and
// mutated payloads give an error value), NIP-59 unwrap (mutated wraps and seals are refused),
// NIP-OA (conditions parsing, mutated attestations) and NIP-98 (mutated headers give a 401 reason).
// None of them may throw on input from the network.
import { describe, expect, it } from 'vitest';
import fc from 'fast-check';
import { finalizeEvent } from 'nostr-tools/pure';
import { ConversationKeyCache, decrypt, encrypt, getConversationKey, MAX_PLAINTEXT_BYTES } from './nip44.js';
import { KIND } from './kinds.js';
import { giftWrap, makeRumor, unwrap } from './nip59.js';
import { parseConditions, signAttestation, verifyAttestation, verifyAuthTag } from './nip-oa.js';
import { makeHttpAuthHeader, MemoryReplayGuard, verifyHttpAuth } from './nip98.js';
import { charactersOver } from './messages.js';
import { base64Decode, base64Encode } from './hex.js';
import { nobleVerifier } from './verify.js';
import type { NostrEvent } from './event.js';
import vectors from '../../test/vectors/nip44.vectors.json';
import { keys, now, sign } from '../../test/support/nostr.js';
import { PROP, stringMutation, weirdValue } from '../../test/support/prop.js';

const alice = keys();
const bob = keys();
const ck = getConversationKey(alice.sk, bob.pk);
const utf8 = new TextEncoder();

describe('NIP-44 (property)', () => {
  it('random plaintexts (1..65535 UTF-8 bytes) round-trip', () => {
    fc.assert(
      fc.property(fc.string({ minLength: 1, maxLength: 2000, unit: 'grapheme' }), (text) => {
        fc.pre(utf8.encode(text).length <= MAX_PLAINTEXT_BYTES);
        expect(decrypt(encrypt(text, ck), ck)).toEqual({ ok: true, value: text });
      }),
      PROP,
    );
  });

  it('random strings are refused with an error value', () => {
    fc.assert(
      fc.property(fc.oneof(fc.string({ maxLength: 400 }), fc.base64String({ minLength: 132, maxLength: 600 })), (payload) => {
        const r = decrypt(payload, ck);
        expect(r.ok).toBe(false);
      }),
      PROP,
    );
  });

  it('every mutation of an official vector payload is refused (or decodes to the same bytes)', () => {
    const valid = vectors.v2.valid.encrypt_decrypt;
    fc.assert(
      fc.property(fc.nat(valid.length - 1), stringMutation, (i, mutate) => {
        const v = valid[i]!;
        const key = Uint8Array.from(Buffer.from(v.conversation_key, 'hex'));
        const payload = mutate(v.payload);
        const r = decrypt(payload, key);
        if (r.ok) {
          expect(r.value).toBe(v.plaintext);
          expect(base64Decode(payload)).toEqual(base64Decode(v.payload));
        }
      }),
      PROP,
    );
  });

  it('a flipped byte anywhere in a payload is refused', () => {
    const payload = encrypt('a message long enough to have several blocks of ciphertext', ck);
    const bytes = base64Decode(payload)!;
    fc.assert(
      fc.property(fc.nat(bytes.length - 1), fc.integer({ min: 1, max: 255 }), (at, x) => {
        const copy = bytes.slice();
        copy[at]! ^= x;
        const r = decrypt(base64Encode(copy), ck);
        expect(r.ok).toBe(false);
      }),
      PROP,
    );
  });
});

describe('NIP-59 unwrap (property)', () => {
  const cache = new ConversationKeyCache(16);
  const rumor = makeRumor({ pubkey: alice.pk, kind: 25802, created_at: now(), tags: [['p', bob.pk]], content: 'inner' });
  const wrap = giftWrap(rumor, alice.sk, bob.pk, cache);

  it('the wrap unwraps', () => {
    expect(unwrap(wrap, bob.sk, cache, nobleVerifier)).toEqual({ ok: true, value: { rumor, author: alice.pk } });
  });

  it('a mutated wrap (content, tags or kind) is refused, never a throw', () => {
    const mutations = fc.oneof(
      stringMutation.map((m) => (w: NostrEvent): NostrEvent => ({ ...w, content: m(w.content) })),
      fc.array(fc.array(fc.string({ maxLength: 70 }), { minLength: 1, maxLength: 3 }), { maxLength: 3 }).map((tags) => (w: NostrEvent): NostrEvent => ({ ...w, tags })),
      fc.integer({ min: 0, max: 65535 }).filter((k) => k !== 1059 && k !== 21059).map((kind) => (w: NostrEvent): NostrEvent => ({ ...w, kind })),
      // Another wrapper key: a valid one, or 64 hex characters that are not a point on the curve.
      fc.constant((w: NostrEvent): NostrEvent => ({ ...w, pubkey: keys().pk })),
      fc.constant((w: NostrEvent): NostrEvent => ({ ...w, pubkey: 'f'.repeat(64) })),
    );
    fc.assert(
      fc.property(mutations, (mutate) => {
        const m = mutate(wrap);
        const r = unwrap(m, bob.sk, cache, nobleVerifier);
        // Only mutations that leave the addressing and ciphertext intact may still unwrap.
        if (r.ok) expect(m.content === wrap.content && m.pubkey === wrap.pubkey && m.tags.some((t) => t[0] === 'p' && t[1] === bob.pk)).toBe(true);
        else expect(r.error.length).toBeGreaterThan(0);
      }),
      PROP,
    );
  });

  it('a well-encrypted wrap around a forged or malformed seal is refused', () => {
    const sealMutations = fc.oneof(
      // Arbitrary JSON or text as the seal.
      fc.oneof(weirdValue.map((v) => JSON.stringify(v) ?? 'undefined'), fc.string({ minLength: 1, maxLength: 200 })),
      // A seal signed by someone else than the rumor's author, or of another kind.
      fc.constantFrom(
        () => JSON.stringify(sign(keys(), { kind: KIND.SEAL, content: encrypt(JSON.stringify(rumor), getConversationKey(keys().sk, bob.pk)) })),
        () => JSON.stringify(sign(alice, { kind: 1, content: encrypt(JSON.stringify(rumor), getConversationKey(alice.sk, bob.pk)) })),
      ).map((make) => make()),
      // A real seal with one field mutated after signing.
      fc.tuple(fc.constantFrom('id', 'sig', 'content', 'created_at'), stringMutation).map(([field, m]) => {
        const seal = sign(alice, { kind: KIND.SEAL, content: encrypt(JSON.stringify(rumor), getConversationKey(alice.sk, bob.pk)) });
        const v = seal[field as keyof NostrEvent];
        return JSON.stringify({ ...seal, [field]: typeof v === 'number' ? v + 1 : m(v as string) });
      }),
      // A seal whose rumor is not the author's, or not an event.
      fc.oneof(weirdValue.map((v) => JSON.stringify(v) ?? '0'), fc.constant(JSON.stringify({ ...rumor, pubkey: bob.pk }))).map((inner) =>
        JSON.stringify(sign(alice, { kind: KIND.SEAL, content: encrypt(inner, getConversationKey(alice.sk, bob.pk)) })),
      ),
    );
    fc.assert(
      fc.property(sealMutations, (sealText) => {
        const wrapper = keys();
        const forged = finalizeEvent({ kind: 1059, created_at: now(), tags: [['p', bob.pk]], content: encrypt(sealText, getConversationKey(wrapper.sk, bob.pk)) }, wrapper.sk);
        const r = unwrap(forged, bob.sk, cache, nobleVerifier);
        expect(r.ok).toBe(false);
      }),
      { ...PROP, numRuns: 60 },
    );
  });
});

describe('NIP-OA (property)', () => {
  const owner = keys();
  const agent = keys();

  it('parseConditions never throws, and what it accepts round-trips through signing', () => {
    const clause = fc.oneof(
      fc.integer({ min: -5, max: 70000 }).map((n) => `kind=${n}`),
      fc.integer({ min: -5, max: 2 ** 33 }).map((n) => `created_at<${n}`),
      fc.integer({ min: -5, max: 2 ** 33 }).map((n) => `created_at>${n}`),
      fc.string({ maxLength: 12 }),
    );
    fc.assert(
      fc.property(fc.array(clause, { maxLength: 4 }).map((cs) => cs.join('&')), (conditions) => {
        const r = parseConditions(conditions);
        if (r.ok) expect(() => signAttestation(owner.sk, agent.pk, conditions)).not.toThrow();
        else expect(r.error.length).toBeGreaterThan(0);
      }),
      PROP,
    );
  });

  it('a mutated auth tag never verifies, and never throws', () => {
    const tag = signAttestation(owner.sk, agent.pk, 'kind=0');
    const carrier = { kind: 0, created_at: now() };
    expect(verifyAuthTag(tag, agent.pk, carrier, nobleVerifier).ok).toBe(true);
    fc.assert(
      fc.property(
        fc.oneof(
          fc.tuple(fc.integer({ min: 1, max: 3 }), stringMutation).map(([i, m]) => tag.map((x, j) => (j === i ? m(x) : x))),
          fc.array(fc.string({ maxLength: 130 }), { maxLength: 6 }),
          fc.nat(3).map((n) => tag.slice(0, n)),
          fc.string({ maxLength: 4 }).map((x) => [...tag, x]),
        ),
        (mutated) => {
          const r = verifyAuthTag(mutated, agent.pk, carrier, nobleVerifier);
          if (r.ok) expect(mutated).toEqual(tag);
          const e = sign(agent, { kind: 0, content: '{}', tags: [mutated.length ? mutated : ['auth']] });
          const onEvent = verifyAttestation(e, nobleVerifier);
          if (onEvent.ok) expect(mutated).toEqual(tag);
        },
      ),
      PROP,
    );
  });
});

describe('NIP-98 (property)', () => {
  const url = 'http://relay.test/api/agents';
  const owner = keys();
  const check = (authorization: string | null, body?: string, method = 'POST') =>
    verifyHttpAuth({ authorization, url, method, body }, { verifier: nobleVerifier, now: now(), replay: new MemoryReplayGuard() });

  it('a valid header passes', () => {
    expect(check(makeHttpAuthHeader(owner.sk, url, 'POST', '{"a":1}'), '{"a":1}').ok).toBe(true);
  });

  it('a mutated header is refused with a 401 reason, never a throw', () => {
    const header = makeHttpAuthHeader(owner.sk, url, 'POST', '{"a":1}');
    const token = header.slice('Nostr '.length);
    const event = JSON.parse(new TextDecoder().decode(base64Decode(token)!)) as NostrEvent;
    const reencode = (e: unknown) => `Nostr ${base64Encode(utf8.encode(JSON.stringify(e)))}`;
    fc.assert(
      fc.property(
        fc.oneof(
          stringMutation.map((m) => m(header)),
          stringMutation.map((m) => `Nostr ${m(token)}`),
          fc.tuple(fc.constantFrom('id', 'pubkey', 'sig', 'content', 'created_at', 'kind', 'tags'), weirdValue).map(([f, v]) => reencode({ ...event, [f]: v })),
          fc.tuple(fc.nat(), fc.nat(), stringMutation).map(([t, i, m]) => {
            const tags = event.tags.map((x) => [...x]);
            const tag = tags[t % tags.length]!;
            tag[i % tag.length] = m(tag[i % tag.length]!);
            return reencode({ ...event, tags });
          }),
          fc.string({ maxLength: 200 }),
        ),
        (mutated) => {
          const r = check(mutated, '{"a":1}');
          if (r.ok) {
            // Only a change the verifier must ignore (spacing or case of the scheme) may pass.
            expect(mutated.trim().replace(/^nostr[ \t]+/i, 'Nostr ')).toBe(header);
          } else {
            expect(r.error.status).toBe(401);
            expect(r.error.reason.length).toBeGreaterThan(0);
          }
        },
      ),
      PROP,
    );
  });

  it('a valid header for another body, method or URL is refused', () => {
    fc.assert(
      fc.property(fc.string({ minLength: 1, maxLength: 100 }), fc.constantFrom('GET', 'PATCH', 'DELETE', 'PUT'), (body, method) => {
        fc.pre(body !== '{"a":1}');
        const header = makeHttpAuthHeader(owner.sk, url, 'POST', '{"a":1}');
        expect(check(header, body).ok).toBe(false);
        expect(check(header, '{"a":1}', method).ok).toBe(false);
      }),
      { ...PROP, numRuns: 40 },
    );
  });
});

describe('charactersOver (NIP-11 max_content_length counts characters)', () => {
  it('agrees with counting code points, lone surrogates and pairs included', () => {
    const unit = fc.oneof(fc.constantFrom('a', 'é', '語', '😀', '\ud800', '\udc00'), fc.string({ maxLength: 2 }));
    fc.assert(
      fc.property(fc.array(unit, { maxLength: 40 }), fc.nat(60), (parts, max) => {
        const s = parts.join('');
        expect(charactersOver(s, max)).toBe([...s].length > max);
      }),
      PROP,
    );
  });
});
