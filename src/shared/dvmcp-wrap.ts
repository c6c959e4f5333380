// DVMCP encryption (spec "Encryption"): NIP-59 gift wraps of kind 1059 around a seal (kind 13, signed
// by the sender) around a rumor. Two rumor forms are met: the full DVMCP event (25910 / 26910 / 21316
// with its tags; what the reference implementation sends, often without an `id`) and the spec text's
// kind 14 carrying the DVMCP content. Both are accepted; an answer is sent in the form it was asked in.
// The seal must be signed by the rumor's author (NIP-59): wraps whose seal is signed by another key
// (the reference implementation signs with a random key) cannot be authenticated and are refused.
// Wraps carry the real time (not NIP-59's randomized one): DVMCP clients subscribe with `since`.
// A sender may date its wraps out (`expiringWraps`: a NIP-40 expiration on the wrap, the spec's
// "support message expiration through appropriate tagging"), so that relays drop what no receiver
// acts on any more; receivers read only the wrap's `p`.

import type { EventSigner, NostrEvent } from './event.js';
import { err, ok, type Result } from './errors.js';
import { KIND } from './kinds.js';
import type { ConversationKeyCache } from './nip44.js';
import { giftWrap, makeRumor, rumorContentRoom, unwrap } from './nip59.js';
import type { EventTemplate } from './relay-types.js';
import type { SchnorrVerifier } from './verify.js';
import type { Incoming } from './dvmcp.js';

/** How a message travelled: as a plain event, a wrapped DVMCP event, or a wrapped kind 14. */
export type Form = 'plain' | 'wrapped' | 'wrapped-dm';

const RUMOR_KINDS: ReadonlySet<number> = new Set([KIND.DVMCP_REQUEST, KIND.DVMCP_RESPONSE, KIND.DVMCP_NOTIFICATION, KIND.PRIVATE_DM]);

/**
 * Wraps a DVMCP event template from `authorSk` (public key `author`) to `recipient`, in `form`;
 * `sign` signs the seal and the wrap (the Workers pass the Wasm signer; default @noble/curves).
 */
export function wrapDvmcp(
  t: EventTemplate,
  authorSk: Uint8Array,
  author: string,
  recipient: string,
  keys: ConversationKeyCache,
  form: Exclude<Form, 'plain'> = 'wrapped',
  sign?: EventSigner,
): NostrEvent {
  return wrapDvmcpWithId(t, authorSk, author, recipient, keys, form, sign).wrap;
}

/** wrapDvmcp, also returning the rumor's id (what the answers to a wrapped request refer to with `e`). */
export function wrapDvmcpWithId(
  t: EventTemplate,
  authorSk: Uint8Array,
  author: string,
  recipient: string,
  keys: ConversationKeyCache,
  form: Exclude<Form, 'plain'> = 'wrapped',
  sign?: EventSigner,
): { wrap: NostrEvent; rumorId: string } {
  const kind = form === 'wrapped-dm' ? KIND.PRIVATE_DM : t.kind;
  const rumor = makeRumor({ pubkey: author, created_at: t.created_at, kind, tags: t.tags, content: t.content });
  return { wrap: giftWrap(rumor, authorSk, recipient, keys, t.created_at, { kind: KIND.GIFT_WRAP, exactTime: true, sign }), rumorId: rumor.id };
}

/**
 * How long a DVMCP gift wrap is kept (NIP-40): the /mcp gateway's requests and cancels, and the
 * answers and notifications of agents and bridges. A request older than 60 s is ignored anyway.
 */
export const DVMCP_WRAP_TTL_SECONDS = 600;

/**
 * `sign` (an EventSigner, as DvmcpClient's `wrapSign`) putting a NIP-40 expiration `ttlSeconds`
 * after its created_at on every gift wrap (kind 1059) it signs; seals are signed as they are.
 */
export const expiringWraps =
  (sign: EventSigner, ttlSeconds: number): EventSigner =>
  (t, secretKey) =>
    sign(t.kind === KIND.GIFT_WRAP ? { ...t, tags: [...t.tags, ['expiration', String(t.created_at + ttlSeconds)]] } : t, secretKey);

/**
 * The most bytes `t`'s content can take as a JSON string (escapes counted, quotes not) for `t` to
 * be gift-wrapped in `form` by wrapDvmcp.
 */
export function wrapContentRoom(t: Pick<EventTemplate, 'kind' | 'created_at' | 'tags'>, form: Exclude<Form, 'plain'>): number {
  return rumorContentRoom({ kind: form === 'wrapped-dm' ? KIND.PRIVATE_DM : t.kind, created_at: t.created_at, tags: t.tags });
}

export interface UnwrappedMessage {
  /** The rumor, with its (computed) id: responses refer to it with `e`. */
  message: Incoming;
  form: Exclude<Form, 'plain'>;
  /** The rumor's created_at (requests older than a receiver's window are ignored). */
  createdAt: number;
}

/** Opens a 1059 addressed to `recipientSk`; the error says why it is refused (for the log, never answered). */
export function unwrapDvmcp(wrap: NostrEvent, recipientSk: Uint8Array, keys: ConversationKeyCache, verifier: SchnorrVerifier): Result<UnwrappedMessage, string> {
  if (wrap.kind !== KIND.GIFT_WRAP) return err(`not a DVMCP gift wrap (kind ${wrap.kind})`);
  const opened = unwrap(wrap, recipientSk, keys, verifier);
  if (!opened.ok) return opened;
  const { rumor } = opened.value;
  if (!RUMOR_KINDS.has(rumor.kind)) return err(`rumor kind ${rumor.kind} is not a DVMCP message`);
  const form = rumor.kind === KIND.PRIVATE_DM ? 'wrapped-dm' : 'wrapped';
  return ok({ message: { id: rumor.id, pubkey: rumor.pubkey, kind: rumor.kind, tags: rumor.tags, content: rumor.content }, form, createdAt: rumor.created_at });
}
