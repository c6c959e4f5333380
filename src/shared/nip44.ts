// NIP-44 v2 payload encryption: a thin wrapper over nostr-tools' `nip44` (the same @noble
// primitives, checked here against the official vectors) that reports bad payloads as values,
// keeps the relay's cheap shape check (`looksLikeNip44v2`), and adds a bounded LRU cache of
// conversation keys: the ECDH step costs ~3 ms, so every component that talks to the same peer
// repeatedly goes through `ConversationKeyCache`. Encryption throws only on programmer errors
// (bad key material, plaintext outside 1..65535 bytes).

import { secp256k1 } from '@noble/curves/secp256k1.js';
import { expand } from '@noble/hashes/hkdf.js';
import { sha256 } from '@noble/hashes/sha2.js';
import { v2 } from 'nostr-tools/nip44';
import { err, ok, type Result } from './errors.js';
import { base64Decode, bytesToHex, hexToBytes, isHex64 } from './hex.js';
import { LruMap } from './lru.js';
import { utf8Bytes } from './json-cut.js';

const MIN_PLAINTEXT_BYTES = 1;
export const MAX_PLAINTEXT_BYTES = 65535;
/** Bounds of a v2 payload: base64 characters, and decoded bytes (version + nonce + ct + mac). */
const MIN_PAYLOAD_CHARS = 132;
const MAX_PAYLOAD_CHARS = 87472;
const MIN_PAYLOAD_BYTES = 99;
const MAX_PAYLOAD_BYTES = 65603;

/** Reasons returned by `decrypt` (stable strings; callers may map them to protocol error codes). */
export type DecryptError =
  | 'unknown encryption version'
  | 'invalid payload length'
  | 'invalid base64'
  | 'invalid MAC'
  | 'invalid padding'
  | 'invalid utf-8 in plaintext';


// ---- keys ----

const toSecretBytes = (sk: Uint8Array | string): Uint8Array => {
  if (typeof sk !== 'string') return sk;
  if (!isHex64(sk.toLowerCase())) throw new Error('nip44: secret key must be 32 bytes or 64 hex characters');
  return hexToBytes(sk);
};

const checkKey = (conversationKey: Uint8Array): void => {
  if (conversationKey.length !== 32) throw new Error('nip44: conversation key must be 32 bytes');
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
  try {
    return v2.utils.getConversationKey(secret, pubkeyHex.toLowerCase());
  } catch {
    throw new Error('nip44: invalid public key (not on the curve)');
  }
}

export interface MessageKeys {
  chachaKey: Uint8Array;
  chachaNonce: Uint8Array;
  hmacKey: Uint8Array;
}

/**
 * Per-message keys: HKDF-expand(conversation key, nonce, 76). nostr-tools derives them privately;
 * this exposes the same step for the official get_message_keys vectors.
 */
export function getMessageKeys(conversationKey: Uint8Array, nonce: Uint8Array): MessageKeys {
  checkKey(conversationKey);
  if (nonce.length !== 32) throw new Error('nip44: nonce must be 32 bytes');
  const keys = expand(sha256, conversationKey, nonce, 76);
  return { chachaKey: keys.subarray(0, 32), chachaNonce: keys.subarray(32, 44), hmacKey: keys.subarray(44, 76) };
}

/** Padded length of a plaintext of `len` bytes (len ≥ 1, else RangeError). */
export function calcPaddedLen(len: number): number {
  if (!Number.isSafeInteger(len) || len < 1) throw new RangeError('nip44: length must be a positive integer');
  return v2.utils.calcPaddedLen(len);
}

/** Base64 characters of the v2 payload of a plaintext of `len` bytes (1..65535): version, nonce, length prefix, padded text, MAC. */
export function payloadLength(len: number): number {
  return 4 * Math.ceil((1 + 32 + 2 + calcPaddedLen(len) + 32) / 3);
}

// ---- encrypt / decrypt ----

/** Encrypts `plaintext` (1..65535 UTF-8 bytes, else RangeError) into a base64 v2 payload. */
export function encrypt(plaintext: string, conversationKey: Uint8Array, nonce?: Uint8Array): string {
  checkKey(conversationKey);
  if (nonce !== undefined && nonce.length !== 32) throw new Error('nip44: nonce must be 32 bytes');
  // nostr-tools also accepts longer plaintexts (an extended length prefix that v2 peers refuse).
  const n = utf8Bytes(plaintext);
  if (n < MIN_PLAINTEXT_BYTES || n > MAX_PLAINTEXT_BYTES) {
    throw new RangeError(`nip44: plaintext must be ${MIN_PLAINTEXT_BYTES} to ${MAX_PLAINTEXT_BYTES} bytes of UTF-8 (got ${n})`);
  }
  return v2.encrypt(plaintext, conversationKey, nonce);
}

const BASE64_TEXT = /^[A-Za-z0-9+/]+={0,2}$/;

/** What makes `payload` no v2 payload, checked without decoding (the first failure, in decrypt's order). */
function shapeError(payload: string): DecryptError | undefined {
  if (payload.startsWith('#')) return 'unknown encryption version';
  const len = payload.length;
  if (len < MIN_PAYLOAD_CHARS || len > MAX_PAYLOAD_CHARS) return 'invalid payload length';
  if (len % 4 !== 0 || !BASE64_TEXT.test(payload)) return 'invalid base64';
  const pad = payload.endsWith('==') ? 2 : payload.endsWith('=') ? 1 : 0;
  const bytes = (len / 4) * 3 - pad;
  if (bytes < MIN_PAYLOAD_BYTES || bytes > MAX_PAYLOAD_BYTES) return 'invalid payload length';
  // Version byte 0x02 = 000000|10xxxx: first character 'A', second one of 'g'..'v'.
  const second = payload[1]!;
  if (payload[0] !== 'A' || second < 'g' || second > 'v') return 'unknown encryption version';
  return undefined;
}

/**
 * nostr-tools decodes the plaintext leniently (U+FFFD for bytes that are not UTF-8). A plaintext
 * holding U+FFFD is re-encrypted under the payload's own nonce: only the exact original bytes
 * (UTF-8, zero padding) give back the same payload.
 */
function decodedExactly(text: string, payload: string, conversationKey: Uint8Array): boolean {
  if (!text.includes('\uFFFD')) return true;
  const nonce = base64Decode(payload.slice(0, 44))?.subarray(1);
  return nonce !== undefined && v2.encrypt(text, conversationKey, nonce) === payload;
}

/** Decrypts a v2 payload. Every malformed or forged payload yields an error value, never a throw. */
export function decrypt(payload: string, conversationKey: Uint8Array): Result<string, DecryptError> {
  checkKey(conversationKey);
  const bad = shapeError(payload);
  if (bad) return err(bad);
  let text: string;
  try {
    text = v2.decrypt(payload, conversationKey);
  } catch (e) {
    // After the shape check the library fails only on non-canonical base64, the MAC or the padding.
    const message = e instanceof Error ? e.message : '';
    return err(message.startsWith('invalid base64') ? 'invalid base64' : message.startsWith('invalid MAC') ? 'invalid MAC' : 'invalid padding');
  }
  return decodedExactly(text, payload, conversationKey) ? ok(text) : err('invalid utf-8 in plaintext');
}

/**
 * Cheap shape check (no decoding, no allocation): padded base64 of a length a v2 payload can have,
 * whose first byte is the version 2. Used by the relay to reject content that cannot be NIP-44 v2.
 */
export const looksLikeNip44v2 = (content: string): boolean => shapeError(content) === undefined;

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
