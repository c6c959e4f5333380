// NIP-44 v2 payload encryption (secp256k1 ECDH + HKDF + ChaCha20 + HMAC-SHA256), written on the
// @noble primitives, plus a bounded LRU cache of conversation keys: the ECDH step costs ~3 ms, so
// every component that talks to the same peer repeatedly goes through `ConversationKeyCache`.
// Decryption reports bad payloads as values; encryption throws only on programmer errors
// (bad key material, plaintext outside 1..65535 bytes).

import { chacha20 } from '@noble/ciphers/chacha.js';
import { secp256k1 } from '@noble/curves/secp256k1.js';
import { expand, extract } from '@noble/hashes/hkdf.js';
import { hmac } from '@noble/hashes/hmac.js';
import { sha256 } from '@noble/hashes/sha2.js';
import { randomBytes } from '@noble/hashes/utils.js';
import { err, ok, type Result } from './errors.js';
import { bytesToHex, hexToBytes, isHex64 } from './hex.js';
import { LruMap } from './lru.js';

export const NIP44_VERSION = 2;
export const MIN_PLAINTEXT_BYTES = 1;
export const MAX_PLAINTEXT_BYTES = 65535;
/** Bounds of a v2 payload: base64 characters, and decoded bytes (version + nonce + ct + mac). */
export const MIN_PAYLOAD_CHARS = 132;
export const MAX_PAYLOAD_CHARS = 87472;
export const MIN_PAYLOAD_BYTES = 99;
export const MAX_PAYLOAD_BYTES = 65603;

/** Reasons returned by `decrypt` (stable strings; callers may map them to protocol error codes). */
export type DecryptError =
  | 'unknown encryption version'
  | 'invalid payload length'
  | 'invalid base64'
  | 'invalid MAC'
  | 'invalid padding'
  | 'invalid utf-8 in plaintext';

const utf8 = new TextEncoder();
const utf8Strict = new TextDecoder('utf-8', { fatal: true, ignoreBOM: false });
const SALT = utf8.encode('nip44-v2');

// ---- base64 (RFC 4648, standard alphabet, padding required; strict: no whitespace) ----

const B64 = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/';
const B64_INDEX = new Int16Array(128).fill(-1);
for (let i = 0; i < B64.length; i++) B64_INDEX[B64.charCodeAt(i)] = i;

export function base64Encode(bytes: Uint8Array): string {
  let out = '';
  let i = 0;
  for (; i + 2 < bytes.length; i += 3) {
    const n = (bytes[i]! << 16) | (bytes[i + 1]! << 8) | bytes[i + 2]!;
    out += B64[n >> 18]! + B64[(n >> 12) & 63]! + B64[(n >> 6) & 63]! + B64[n & 63]!;
  }
  const rest = bytes.length - i;
  if (rest === 1) {
    const n = bytes[i]! << 16;
    out += B64[n >> 18]! + B64[(n >> 12) & 63]! + '==';
  } else if (rest === 2) {
    const n = (bytes[i]! << 16) | (bytes[i + 1]! << 8);
    out += B64[n >> 18]! + B64[(n >> 12) & 63]! + B64[(n >> 6) & 63]! + '=';
  }
  return out;
}

/** Strict base64 decoding; undefined when the input is not canonical padded base64. */
export function base64Decode(s: string): Uint8Array | undefined {
  if (s.length % 4 !== 0) return undefined;
  const pad = s.endsWith('==') ? 2 : s.endsWith('=') ? 1 : 0;
  const out = new Uint8Array((s.length / 4) * 3 - pad);
  let o = 0;
  for (let i = 0; i < s.length; i += 4) {
    const last = i + 4 === s.length;
    let n = 0;
    for (let j = 0; j < 4; j++) {
      const c = s.charCodeAt(i + j);
      let v: number;
      if (c === 61 /* '=' */ && last && j >= 4 - pad) v = 0;
      else v = c < 128 ? B64_INDEX[c]! : -1;
      if (v < 0) return undefined;
      n = (n << 6) | v;
    }
    out[o++] = n >> 16;
    if (o < out.length) out[o++] = (n >> 8) & 255;
    if (o < out.length) out[o++] = n & 255;
    // Non-zero bits hidden under the padding make the encoding non-canonical.
    if (last && ((pad === 1 && (n & 0xff) !== 0) || (pad === 2 && (n & 0xffff) !== 0))) return undefined;
  }
  return out;
}

// ---- keys ----

const toSecretBytes = (sk: Uint8Array | string): Uint8Array => {
  if (typeof sk !== 'string') return sk;
  if (!isHex64(sk.toLowerCase())) throw new Error('nip44: secret key must be 32 bytes or 64 hex characters');
  return hexToBytes(sk);
};

/**
 * The conversation key shared by `sk` and the x-only public key `pubkeyHex` (symmetric: A→B and
 * B→A give the same key). Throws on an invalid secret key (0 or ≥ n) or a public key that is not
 * on the curve; an event's verified pubkey is always on the curve.
 */
export function getConversationKey(sk: Uint8Array | string, pubkeyHex: string): Uint8Array {
  const secret = toSecretBytes(sk);
  if (secret.length !== 32 || !secp256k1.utils.isValidSecretKey(secret)) throw new Error('nip44: invalid secret key');
  if (!isHex64(pubkeyHex.toLowerCase())) throw new Error('nip44: public key must be 64 hex characters');
  let shared: Uint8Array;
  try {
    shared = secp256k1.getSharedSecret(secret, hexToBytes('02' + pubkeyHex), true);
  } catch {
    throw new Error('nip44: invalid public key (not on the curve)');
  }
  return extract(sha256, shared.subarray(1, 33), SALT);
}

export interface MessageKeys {
  chachaKey: Uint8Array;
  chachaNonce: Uint8Array;
  hmacKey: Uint8Array;
}

/** Per-message keys: HKDF-expand(conversation key, nonce, 76). */
export function getMessageKeys(conversationKey: Uint8Array, nonce: Uint8Array): MessageKeys {
  if (conversationKey.length !== 32) throw new Error('nip44: conversation key must be 32 bytes');
  if (nonce.length !== 32) throw new Error('nip44: nonce must be 32 bytes');
  const keys = expand(sha256, conversationKey, nonce, 76);
  return { chachaKey: keys.subarray(0, 32), chachaNonce: keys.subarray(32, 44), hmacKey: keys.subarray(44, 76) };
}

// ---- padding ----

/** Padded length of a plaintext of `len` bytes (len ≥ 1). */
export function calcPaddedLen(len: number): number {
  if (!Number.isSafeInteger(len) || len < 1) throw new RangeError('nip44: length must be a positive integer');
  if (len <= 32) return 32;
  const nextPower = 1 << (Math.floor(Math.log2(len - 1)) + 1);
  const chunk = nextPower <= 256 ? 32 : nextPower / 8;
  return chunk * (Math.floor((len - 1) / chunk) + 1);
}

function pad(plaintext: string): Uint8Array {
  const bytes = utf8.encode(plaintext);
  const n = bytes.length;
  if (n < MIN_PLAINTEXT_BYTES || n > MAX_PLAINTEXT_BYTES) {
    throw new RangeError(`nip44: plaintext must be ${MIN_PLAINTEXT_BYTES} to ${MAX_PLAINTEXT_BYTES} bytes of UTF-8 (got ${n})`);
  }
  const out = new Uint8Array(2 + calcPaddedLen(n));
  out[0] = n >> 8;
  out[1] = n & 255;
  out.set(bytes, 2);
  return out;
}

function unpad(padded: Uint8Array): Result<string, DecryptError> {
  const n = ((padded[0] ?? 0) << 8) | (padded[1] ?? 0);
  if (n === 0 || padded.length < 2 + n || padded.length !== 2 + calcPaddedLen(n)) return err('invalid padding');
  try {
    return ok(utf8Strict.decode(padded.subarray(2, 2 + n)));
  } catch {
    return err('invalid utf-8 in plaintext');
  }
}

// ---- MAC ----

function hmacAad(key: Uint8Array, nonce: Uint8Array, ciphertext: Uint8Array): Uint8Array {
  return hmac.create(sha256, key).update(nonce).update(ciphertext).digest();
}

function constantTimeEqual(a: Uint8Array, b: Uint8Array): boolean {
  if (a.length !== b.length) return false;
  let diff = 0;
  for (let i = 0; i < a.length; i++) diff |= a[i]! ^ b[i]!;
  return diff === 0;
}

// ---- encrypt / decrypt ----

/** Encrypts `plaintext` (1..65535 UTF-8 bytes, else RangeError) into a base64 v2 payload. */
export function encrypt(plaintext: string, conversationKey: Uint8Array, nonce: Uint8Array = randomBytes(32)): string {
  const { chachaKey, chachaNonce, hmacKey } = getMessageKeys(conversationKey, nonce);
  const ciphertext = chacha20(chachaKey, chachaNonce, pad(plaintext));
  const mac = hmacAad(hmacKey, nonce, ciphertext);
  const out = new Uint8Array(1 + 32 + ciphertext.length + 32);
  out[0] = NIP44_VERSION;
  out.set(nonce, 1);
  out.set(ciphertext, 33);
  out.set(mac, 33 + ciphertext.length);
  return base64Encode(out);
}

/** Decrypts a v2 payload. Every malformed or forged payload yields an error value, never a throw. */
export function decrypt(payload: string, conversationKey: Uint8Array): Result<string, DecryptError> {
  if (conversationKey.length !== 32) throw new Error('nip44: conversation key must be 32 bytes');
  if (payload.startsWith('#')) return err('unknown encryption version');
  if (payload.length < MIN_PAYLOAD_CHARS || payload.length > MAX_PAYLOAD_CHARS) return err('invalid payload length');
  const data = base64Decode(payload);
  if (!data) return err('invalid base64');
  if (data.length < MIN_PAYLOAD_BYTES || data.length > MAX_PAYLOAD_BYTES) return err('invalid payload length');
  if (data[0] !== NIP44_VERSION) return err('unknown encryption version');
  const nonce = data.subarray(1, 33);
  const ciphertext = data.subarray(33, data.length - 32);
  const mac = data.subarray(data.length - 32);
  const { chachaKey, chachaNonce, hmacKey } = getMessageKeys(conversationKey, nonce);
  if (!constantTimeEqual(hmacAad(hmacKey, nonce, ciphertext), mac)) return err('invalid MAC');
  return unpad(chacha20(chachaKey, chachaNonce, ciphertext));
}

/**
 * Cheap shape check (no decoding, no allocation): padded base64 of a length a v2 payload can have,
 * whose first byte is the version 2. Used by the relay to reject content that cannot be NIP-44 v2.
 */
export function looksLikeNip44v2(content: string): boolean {
  const len = content.length;
  if (len < MIN_PAYLOAD_CHARS || len > MAX_PAYLOAD_CHARS || len % 4 !== 0) return false;
  // Version byte 0x02 = 000000|10xxxx: first character 'A', second one of 'g'..'v'.
  const second = B64_INDEX[content.charCodeAt(1)] ?? -1;
  if (content[0] !== 'A' || second < 32 || second > 47) return false;
  const pad = content.endsWith('==') ? 2 : content.endsWith('=') ? 1 : 0;
  const bytes = (len / 4) * 3 - pad;
  if (bytes < MIN_PAYLOAD_BYTES || bytes > MAX_PAYLOAD_BYTES) return false;
  for (let i = 2; i < len - pad; i++) {
    const c = content.charCodeAt(i);
    if (c >= 128 || B64_INDEX[c]! < 0) return false;
  }
  return true;
}

// ---- conversation key cache ----

/**
 * Bounded LRU cache of conversation keys keyed by (our secret key, peer public key). Holds secret
 * material: keep one per isolate/Durable Object, never serialise it.
 */
export class ConversationKeyCache {
  private readonly entries: LruMap<string, Uint8Array>;
  private hitCount = 0;
  private missCount = 0;

  constructor(maxEntries = 1024) {
    this.entries = new LruMap(maxEntries);
  }

  get maxEntries(): number {
    return this.entries.max;
  }

  /** The conversation key for (sk, pk), computed on a miss; throws like `getConversationKey`. */
  get(sk: Uint8Array | string, pubkeyHex: string): Uint8Array {
    const secret = toSecretBytes(sk);
    const pk = pubkeyHex.toLowerCase();
    const id = bytesToHex(secret) + pk;
    const hit = this.entries.get(id);
    if (hit) {
      this.hitCount++;
      return hit;
    }
    this.missCount++;
    const key = getConversationKey(secret, pk);
    this.entries.set(id, key);
    return key;
  }

  get size(): number {
    return this.entries.size;
  }

  get stats(): { hits: number; misses: number } {
    return { hits: this.hitCount, misses: this.missCount };
  }

  clear(): void {
    this.entries.clear();
  }
}
