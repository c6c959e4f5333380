import { describe, expect, it } from 'vitest';
import { chacha20 } from '@noble/ciphers/chacha.js';
import { hmac } from '@noble/hashes/hmac.js';
import { sha256 } from '@noble/hashes/sha2.js';
import { getPublicKey } from 'nostr-tools/pure';
import { base64Decode, base64Encode, bytesToHex, hexToBytes } from './hex.js';
import {
  ConversationKeyCache,
  calcPaddedLen,
  decrypt,
  encrypt,
  getConversationKey,
  getMessageKeys,
  looksLikeNip44v2,
} from './nip44.js';
import vectors from '../../test/vectors/nip44.vectors.json';

const v2 = vectors.v2;
const utf8 = new TextEncoder();
const sha256hex = (s: string) => bytesToHex(sha256(utf8.encode(s)));

describe('NIP-44 v2 official vectors — valid', () => {
  it(`get_conversation_key (${v2.valid.get_conversation_key.length} vectors)`, () => {
    expect(v2.valid.get_conversation_key.length).toBeGreaterThan(0);
    for (const v of v2.valid.get_conversation_key) {
      expect(bytesToHex(getConversationKey(v.sec1, v.pub2)), v.sec1).toBe(v.conversation_key);
      expect(bytesToHex(getConversationKey(hexToBytes(v.sec1), v.pub2))).toBe(v.conversation_key);
    }
  });

  it(`get_message_keys (${v2.valid.get_message_keys.keys.length} vectors)`, () => {
    const ck = hexToBytes(v2.valid.get_message_keys.conversation_key);
    expect(v2.valid.get_message_keys.keys.length).toBeGreaterThan(0);
    for (const v of v2.valid.get_message_keys.keys) {
      const k = getMessageKeys(ck, hexToBytes(v.nonce));
      expect(bytesToHex(k.chachaKey)).toBe(v.chacha_key);
      expect(bytesToHex(k.chachaNonce)).toBe(v.chacha_nonce);
      expect(bytesToHex(k.hmacKey)).toBe(v.hmac_key);
    }
  });

  it(`calc_padded_len (${v2.valid.calc_padded_len.length} vectors)`, () => {
    for (const [len, padded] of v2.valid.calc_padded_len) {
      expect(calcPaddedLen(len!), `len ${len}`).toBe(padded);
    }
    expect(() => calcPaddedLen(0)).toThrow(RangeError);
  });

  it(`encrypt_decrypt (${v2.valid.encrypt_decrypt.length} vectors)`, () => {
    for (const v of v2.valid.encrypt_decrypt) {
      const ck = getConversationKey(v.sec1, getPublicKey(hexToBytes(v.sec2)));
      expect(bytesToHex(ck)).toBe(v.conversation_key);
      // Symmetric: the other side derives the same key.
      expect(bytesToHex(getConversationKey(v.sec2, getPublicKey(hexToBytes(v.sec1))))).toBe(v.conversation_key);
      expect(encrypt(v.plaintext, ck, hexToBytes(v.nonce))).toBe(v.payload);
      expect(decrypt(v.payload, ck)).toEqual({ ok: true, value: v.plaintext });
    }
  });

  it(`encrypt_decrypt_long_msg (${v2.valid.encrypt_decrypt_long_msg.length} vectors)`, () => {
    for (const v of v2.valid.encrypt_decrypt_long_msg) {
      const plaintext = v.pattern.repeat(v.repeat);
      expect(sha256hex(plaintext)).toBe(v.plaintext_sha256);
      const ck = hexToBytes(v.conversation_key);
      const payload = encrypt(plaintext, ck, hexToBytes(v.nonce));
      expect(sha256hex(payload)).toBe(v.payload_sha256);
      const back = decrypt(payload, ck);
      expect(back.ok).toBe(true);
      if (back.ok) expect(sha256hex(back.value)).toBe(v.plaintext_sha256);
      expect(looksLikeNip44v2(payload)).toBe(true);
    }
  });
});

describe('NIP-44 v2 official vectors — invalid', () => {
  it(`encrypt_msg_lengths (${v2.invalid.encrypt_msg_lengths.length} vectors)`, () => {
    const ck = new Uint8Array(32).fill(1);
    for (const len of v2.invalid.encrypt_msg_lengths) {
      expect(() => encrypt('a'.repeat(len), ck), `length ${len}`).toThrow(RangeError);
    }
  });

  it(`get_conversation_key (${v2.invalid.get_conversation_key.length} vectors)`, () => {
    for (const v of v2.invalid.get_conversation_key) {
      expect(() => getConversationKey(v.sec1, v.pub2), v.note).toThrow(/nip44: invalid/);
    }
  });

  it(`decrypt (${v2.invalid.decrypt.length} vectors)`, () => {
    for (const v of v2.invalid.decrypt) {
      const r = decrypt(v.payload, hexToBytes(v.conversation_key));
      expect(r.ok, v.note).toBe(false);
      if (!r.ok) expect(v.note.startsWith(r.error), `${v.note} vs ${r.error}`).toBe(true);
    }
  });
});

describe('payload helpers', () => {
  it('base64 round-trips and is strict', () => {
    for (let n = 0; n < 8; n++) {
      const bytes = Uint8Array.from({ length: n }, (_, i) => (i * 37 + 200) & 255);
      const s = base64Encode(bytes);
      expect(s).toBe(btoa(String.fromCharCode(...bytes)));
      expect(base64Decode(s)).toEqual(bytes);
    }
    expect(base64Decode('QQ')).toBeUndefined(); // missing padding
    expect(base64Decode('QR==')).toBeUndefined(); // non-zero bits under padding
    expect(base64Decode('Q Q=')).toBeUndefined();
    expect(base64Decode('=QQ=')).toBeUndefined();
    expect(base64Decode('QQ==QQ==')).toBeUndefined();
  });

  it('looksLikeNip44v2 accepts real payloads and rejects other shapes', () => {
    const ck = new Uint8Array(32).fill(7);
    const payload = encrypt('hello', ck);
    expect(looksLikeNip44v2(payload)).toBe(true);
    expect(looksLikeNip44v2('hello world')).toBe(false);
    expect(looksLikeNip44v2('#' + payload.slice(1))).toBe(false);
    expect(looksLikeNip44v2('B' + payload.slice(1))).toBe(false); // version byte ≠ 2
    expect(looksLikeNip44v2(payload.slice(0, 128))).toBe(false); // too short
    expect(looksLikeNip44v2(payload.slice(0, 100) + 'ф' + payload.slice(101))).toBe(false);
    for (const v of v2.invalid.decrypt) {
      if (v.note.startsWith('unknown encryption version') || v.note.startsWith('invalid payload length') || v.note === 'invalid base64') {
        expect(looksLikeNip44v2(v.payload), v.note).toBe(false);
      }
    }
  });

  it('a MAC-valid plaintext that is not UTF-8 is refused; a real U+FFFD and non-zero padding bytes are not', () => {
    const ck = new Uint8Array(32).fill(3);
    // A conforming sender's payload around arbitrary plaintext bytes and padding bytes.
    const seal = (bytes: number[], padByte = 0): string => {
      const nonce = new Uint8Array(32).fill(9);
      const { chachaKey, chachaNonce, hmacKey } = getMessageKeys(ck, nonce);
      const padded = new Uint8Array(2 + calcPaddedLen(bytes.length)).fill(padByte);
      padded.set([bytes.length >> 8, bytes.length & 255, ...bytes]);
      const ct = chacha20(chachaKey, chachaNonce, padded);
      const mac = hmac(sha256, hmacKey, new Uint8Array([...nonce, ...ct]));
      return base64Encode(new Uint8Array([2, ...nonce, ...ct, ...mac]));
    };
    expect(decrypt(seal([0x41, 0xff, 0x42]), ck)).toEqual({ ok: false, error: 'invalid utf-8 in plaintext' });
    expect(decrypt(seal([0xf0, 0x90, 0x80, 0x41]), ck)).toEqual({ ok: false, error: 'invalid utf-8 in plaintext' });
    expect(decrypt(seal([...utf8.encode('a\uFFFDb')]), ck)).toEqual({ ok: true, value: 'a\uFFFDb' });
    expect(decrypt(seal([...utf8.encode('hi')], 7), ck)).toEqual({ ok: true, value: 'hi' });
  });

  it('decrypt rejects a payload encrypted under another key with invalid MAC', () => {
    const payload = encrypt('secret', new Uint8Array(32).fill(1));
    expect(decrypt(payload, new Uint8Array(32).fill(2))).toEqual({ ok: false, error: 'invalid MAC' });
  });
});

describe('ConversationKeyCache', () => {
  const sk1 = '0000000000000000000000000000000000000000000000000000000000000001';
  const peers = v2.valid.get_conversation_key.map((v) => v.pub2);

  it('a hit returns the same key object without recomputing', () => {
    const cache = new ConversationKeyCache();
    const a = cache.get(sk1, peers[0]!);
    const b = cache.get(hexToBytes(sk1), peers[0]!.toUpperCase());
    expect(b).toBe(a);
    expect(cache.stats).toEqual({ hits: 1, misses: 1 });
    expect(bytesToHex(a)).toBe(bytesToHex(getConversationKey(sk1, peers[0]!)));
    // A different secret key with the same peer is a different entry.
    const other = cache.get('0000000000000000000000000000000000000000000000000000000000000002', peers[0]!);
    expect(bytesToHex(other)).not.toBe(bytesToHex(a));
    expect(cache.size).toBe(2);
  });

  it('is bounded and evicts the least recently used entry', () => {
    const cache = new ConversationKeyCache(3);
    expect(cache.maxEntries).toBe(3);
    const k0 = cache.get(sk1, peers[0]!);
    cache.get(sk1, peers[1]!);
    cache.get(sk1, peers[2]!);
    expect(cache.get(sk1, peers[0]!)).toBe(k0); // touch 0: now 1 is the oldest
    cache.get(sk1, peers[3]!); // evicts 1
    expect(cache.size).toBe(3);
    const before = cache.stats.misses;
    expect(cache.get(sk1, peers[0]!)).toBe(k0); // still cached
    expect(cache.stats.misses).toBe(before);
    cache.get(sk1, peers[1]!); // recomputed
    expect(cache.stats.misses).toBe(before + 1);
    for (const p of peers) cache.get(sk1, p);
    expect(cache.size).toBe(3);
    expect(new ConversationKeyCache().maxEntries).toBe(1024);
    expect(() => new ConversationKeyCache(0)).toThrow(RangeError);
  });
});
