// NIP-59 gift wrap: rumor (unsigned event) → seal (kind 13, signed by the author, NIP-44 to the
// recipient) → wrap (kind 1059, or 21059 for ephemeral kinds, signed by a one-time key; it may
// carry a NIP-40 expiration). Unwrap checks every layer and that the seal's signer is the rumor's author.

import { finalizeEvent, generateSecretKey, getPublicKey } from 'nostr-tools/pure';
import { computeEventId, parseEvent, checkIdAndSignature, type EventSigner, type NostrEvent, type UnsignedEvent } from './event.js';
import { err, errorMessage, ok, type Result } from './errors.js';
import { ConversationKeyCache, decrypt, encrypt, getConversationKey, MAX_PLAINTEXT_BYTES, payloadLength } from './nip44.js';
import type { SchnorrVerifier } from './verify.js';
import { KIND, kindClass } from './kinds.js';
import { utf8Bytes } from './json-cut.js';

/** A rumor: an event with an id but no signature (deniable if leaked). */
export type Rumor = UnsignedEvent & { id: string };

const TWO_DAYS = 2 * 24 * 3600;
/**
 * How far back a subscription to gift wraps reads (its `since`, from now): NIP-59 (and DVMCP's
 * "Timestamp Randomization") dates wraps up to two days in the past, and relays apply `since` to
 * live events too; plus 10 minutes of clock skew. What a wrap carries is judged by its rumor's
 * created_at (the real time), never by the wrap's.
 */
export const WRAP_LOOKBACK_SECONDS = TWO_DAYS + 600;
/** NIP-59 recommends randomising seal and wrap timestamps up to two days into the past. */
const tweakedTime = (now: number) => now - Math.floor(Math.random() * TWO_DAYS);

export function makeRumor(e: UnsignedEvent): Rumor {
  return { ...e, id: computeEventId(e) };
}

export interface WrapOptions {
  /** The wrap's kind (default: 21059 for rumors of ephemeral kinds, else 1059). DVMCP uses 1059 for all. */
  kind?: number;
  /** The wrap's created_at is `now`, not randomized (default: exact for ephemeral wraps only). */
  exactTime?: boolean;
  /** Signs the seal and the wrap (default: nostr-tools' finalizeEvent; the Workers pass the Wasm signer). */
  sign?: EventSigner;
  /**
   * A NIP-40 expiration (seconds) on the wrap, the event relays store: real time, whatever the
   * wrap's (randomized) created_at.
   */
  expiration?: number;
}

const nobleSign: EventSigner = (t, sk) => {
  const { id, pubkey, created_at, kind, tags, content, sig } = finalizeEvent(t, sk);
  return { id, pubkey, created_at, kind, tags, content, sig };
};

/** Wraps `rumor` from `authorSk` to `recipient`. Rumors of ephemeral kinds get kind 21059. */
export function giftWrap(
  rumor: Rumor,
  authorSk: Uint8Array,
  recipient: string,
  keys: ConversationKeyCache,
  now = Math.floor(Date.now() / 1000),
  options: WrapOptions = {},
): NostrEvent {
  const sign = options.sign ?? nobleSign;
  const seal = sign(
    { kind: KIND.SEAL, created_at: tweakedTime(now), tags: [], content: encrypt(JSON.stringify(rumor), keys.get(authorSk, recipient)) },
    authorSk,
  );
  const oneTime = generateSecretKey();
  // NIP-XX's durable kinds (25802/25803/25805) live in the ephemeral range but must be replayable.
  const ephemeral = kindClass(rumor.kind) === 'ephemeral';
  return sign(
    {
      kind: options.kind ?? (ephemeral ? KIND.EPHEMERAL_GIFT_WRAP : KIND.GIFT_WRAP),
      // Ephemeral wraps keep the real time: relays drop stale ephemeral events (and DVMCP clients
      // subscribe with `since`).
      created_at: (options.exactTime ?? ephemeral) ? now : tweakedTime(now),
      tags: options.expiration === undefined ? [['p', recipient]] : [['p', recipient], ['expiration', String(options.expiration)]],
      // A one-time key: its conversation key is never reused, so it is not cached.
      content: encrypt(JSON.stringify(seal), getConversationKey(oneTime, recipient)),
    },
    oneTime,
  );
}

/** A signed seal with empty content, as giftWrap serializes it (only its length matters). */
const EMPTY_SEAL_BYTES = utf8Bytes(
  JSON.stringify({ kind: KIND.SEAL, created_at: 1_000_000_000, tags: [], content: '', pubkey: '0'.repeat(64), id: '0'.repeat(64), sig: '0'.repeat(128) }),
);

/** The most bytes of rumor JSON a gift wrap carries: the seal encrypts it, the wrap the seal, each at most MAX_PLAINTEXT_BYTES. */
const MAX_RUMOR_BYTES = largest((n) => n <= MAX_PLAINTEXT_BYTES && EMPTY_SEAL_BYTES + payloadLength(n) <= MAX_PLAINTEXT_BYTES);

/** The largest n in [0, MAX_PLAINTEXT_BYTES] for which `fits` holds (it holds for every smaller n). */
function largest(fits: (n: number) => boolean): number {
  let lo = 0;
  let hi = MAX_PLAINTEXT_BYTES;
  while (lo < hi) {
    const mid = Math.ceil((lo + hi) / 2);
    if (fits(mid)) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

/**
 * The most bytes the content of a rumor with these fields (`content` and `pubkey` aside) can take
 * as a JSON string (escapes counted, quotes not) for the rumor to be gift-wrapped. Negative when
 * nothing fits.
 */
export function rumorContentRoom(rumor: Pick<UnsignedEvent, 'kind' | 'created_at' | 'tags'>): number {
  return MAX_RUMOR_BYTES - utf8Bytes(JSON.stringify({ ...rumor, content: '', pubkey: '0'.repeat(64), id: '0'.repeat(64) }));
}

/**
 * The most plaintext bytes whose NIP-44 ciphertext, as the content of a rumor with these fields
 * (`content` and `pubkey` aside), can still be gift-wrapped: the seal encrypts the rumor's JSON
 * and the wrap the seal's, each at most MAX_PLAINTEXT_BYTES. 0 when nothing fits.
 */
export function wrapRoom(rumor: Pick<UnsignedEvent, 'kind' | 'created_at' | 'tags'>): number {
  const room = rumorContentRoom(rumor);
  // base64 needs no escapes in JSON
  return largest((n) => payloadLength(n) <= room);
}

export interface Unwrapped {
  rumor: Rumor;
  /** The verified author (the seal's signer). */
  author: string;
}

/** Unwraps a gift wrap addressed to `recipientSk`, checking both layers. */
export function unwrap(wrap: NostrEvent, recipientSk: Uint8Array, keys: ConversationKeyCache, verifier: SchnorrVerifier): Result<Unwrapped, string> {
  if (wrap.kind !== KIND.GIFT_WRAP && wrap.kind !== KIND.EPHEMERAL_GIFT_WRAP) return err(`not a gift wrap (kind ${wrap.kind})`);
  const me = getPublicKey(recipientSk);
  if (!wrap.tags.some((t) => t[0] === 'p' && t[1] === me)) return err('gift wrap is not addressed to this key');
  // The wrap's key is a one-time key: its conversation key is computed, never cached (caching it
  // would let any sender evict real peers from the shared cache).
  const wrapKey = conversationKeyOf(recipientSk, wrap.pubkey);
  if (!wrapKey.ok) return err(`cannot decrypt gift wrap: ${wrapKey.error}`);
  const sealText = decrypt(wrap.content, wrapKey.value);
  if (!sealText.ok) return err(`cannot decrypt gift wrap: ${sealText.error}`);
  const seal = parseJsonEvent(sealText.value, verifier);
  if (!seal.ok) return err(`invalid seal: ${seal.error}`);
  if (seal.value.kind !== KIND.SEAL) return err(`invalid seal: kind ${seal.value.kind}, expected 13`);
  const rumorText = decrypt(seal.value.content, keys.get(recipientSk, seal.value.pubkey));
  if (!rumorText.ok) return err(`cannot decrypt seal: ${rumorText.error}`);
  let rumor: unknown;
  try {
    rumor = JSON.parse(rumorText.value);
  } catch {
    return err('rumor is not JSON');
  }
  if (typeof rumor !== 'object' || rumor === null || Array.isArray(rumor)) return err('invalid rumor: not an object');
  // A rumor without an id (the DVMCP reference implementation sends those) gets its computed id.
  const given = rumor as Record<string, unknown>;
  const withId = 'id' in given ? given : { ...given, id: '0'.repeat(64) };
  const shaped = parseEvent({ ...withId, sig: '0'.repeat(128) });
  if (!shaped.ok) return err(`invalid rumor: ${shaped.error.reason}`);
  const { sig: _sig, id: claimed, ...fields } = shaped.value;
  const id = computeEventId(fields);
  if ('id' in given && claimed !== id) return err('invalid rumor: id does not match');
  const r: Rumor = { ...fields, id };
  if (r.pubkey !== seal.value.pubkey) return err('seal signer is not the rumor author');
  return ok({ rumor: r, author: seal.value.pubkey });
}

/** The NIP-44 conversation key, or why there is none (a pubkey that is not a point on the curve). */
function conversationKeyOf(sk: Uint8Array, pubkey: string): Result<Uint8Array, string> {
  try {
    return ok(getConversationKey(sk, pubkey));
  } catch (e) {
    return err(errorMessage(e));
  }
}

function parseJsonEvent(text: string, verifier: SchnorrVerifier): Result<NostrEvent, string> {
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch {
    return err('not JSON');
  }
  const shaped = parseEvent(raw);
  if (!shaped.ok) return err(shaped.error.reason);
  const checked = checkIdAndSignature(shaped.value, verifier);
  return checked.ok ? checked : err(checked.error.reason);
}
