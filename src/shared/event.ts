// Nostr events (NIP-01): the zod schema, the canonical serializations (for the id, and the JSON a
// relay serves), id computation, and full validation (shape, id, signature) that every component
// runs before looking at an event; tag readers, including the NIP-40 expiration.

import { z } from 'zod';
import { sha256 } from '@noble/hashes/sha2.js';
import { bytesToHex, HEX64, hexToBytes } from './hex.js';
import { err, ok, reject, type Result } from './errors.js';
import type { SchnorrSigner, SchnorrVerifier } from './verify.js';
import { MAX_KIND } from './kinds.js';

/** The largest created_at (and NIP-OA timestamp) accepted: an unsigned 32-bit value. */
export const MAX_TIMESTAMP = 2 ** 32 - 1;

const hex64 = (what: string) => z.string().regex(HEX64, `${what} must be 64 lowercase hex characters`);

const TagSchema = z
  .array(z.string({ error: 'tag elements must be strings' }), { error: 'each tag must be an array of strings' })
  .min(1, 'a tag must not be empty');

const EventSchema = z.strictObject(
  {
    id: hex64('id'),
    pubkey: hex64('pubkey'),
    created_at: z
      .number({ error: 'created_at must be a number' })
      .int('created_at must be an integer')
      .min(0, 'created_at must not be negative')
      .max(MAX_TIMESTAMP, 'created_at is too large'),
    kind: z
      .number({ error: 'kind must be a number' })
      .int('kind must be an integer')
      .min(0, 'kind must not be negative')
      .max(MAX_KIND, `kind must be at most ${MAX_KIND}`),
    tags: z.array(TagSchema, { error: 'tags must be an array' }),
    content: z.string({ error: 'content must be a string' }),
    sig: z.string().regex(/^[0-9a-f]{128}$/, 'sig must be 128 lowercase hex characters'),
  },
  { error: (issue) => (issue.code === 'unrecognized_keys' ? `unknown event field: ${issue.keys.join(', ')}` : 'event must be an object') },
);

export type NostrEvent = z.infer<typeof EventSchema>;
export type Tag = z.infer<typeof TagSchema>;
export type UnsignedEvent = Omit<NostrEvent, 'id' | 'sig'>;
/** What a signer turns into an event: kind, created_at, tags and content. */
export type EventTemplate = Pick<NostrEvent, 'kind' | 'created_at' | 'tags' | 'content'>;

/** NIP-01 canonical serialization: [0, pubkey, created_at, kind, tags, content]. */
const serializeEvent = (e: UnsignedEvent): string =>
  JSON.stringify([0, e.pubkey, e.created_at, e.kind, e.tags, e.content]);

/**
 * The JSON a relay stores and serves for a validated event: exactly the seven NIP-01 fields, once
 * each, in a fixed order (like strfry). Never the bytes a client sent: those may hold duplicate keys
 * that other parsers read differently from the value that was validated.
 */
export const eventJson = (e: NostrEvent): string =>
  JSON.stringify({ id: e.id, pubkey: e.pubkey, created_at: e.created_at, kind: e.kind, tags: e.tags, content: e.content, sig: e.sig });

const utf8 = new TextEncoder();

const computeEventIdBytes = (e: UnsignedEvent, hash: (data: Uint8Array) => Uint8Array = sha256): Uint8Array =>
  hash(utf8.encode(serializeEvent(e)));

export const computeEventId = (e: UnsignedEvent): string => bytesToHex(computeEventIdBytes(e));

/** First zod issue of a failed parse, as a user-facing sentence. */
export function describeIssue(error: z.ZodError): string {
  const issue = error.issues[0];
  if (!issue) return 'malformed';
  const path = issue.path.length ? issue.path.join('.') : '';
  return path && !issue.message.startsWith(`${path} `) ? `${path}: ${issue.message}` : issue.message;
}

/** Shape check only (types, hex, ranges); no hashing. */
export function parseEvent(input: unknown): Result<NostrEvent> {
  const parsed = EventSchema.safeParse(input);
  if (!parsed.success) return err(reject('invalid', describeIssue(parsed.error)));
  return ok(parsed.data);
}

/** Recomputes the id and checks the signature. The event's shape must already be valid. */
export function checkIdAndSignature(e: NostrEvent, verifier: SchnorrVerifier): Result<NostrEvent> {
  const idBytes = computeEventIdBytes(e, verifier.sha256 ? (d) => verifier.sha256!(d) : sha256);
  if (bytesToHex(idBytes) !== e.id) return err(reject('invalid', 'event id does not match the event hash'));
  if (!verifier.verify(hexToBytes(e.sig), idBytes, hexToBytes(e.pubkey))) {
    return err(reject('invalid', 'signature verification failed'));
  }
  return ok(e);
}

/** Full validation: shape, id, signature. */
export function validateEvent(input: unknown, verifier: SchnorrVerifier): Result<NostrEvent> {
  const shaped = parseEvent(input);
  return shaped.ok ? checkIdAndSignature(shaped.value, verifier) : shaped;
}

/** Value of the first tag named `name` (its element 1), if any. */
export const tagValue = (e: Pick<NostrEvent, 'tags'>, name: string): string | undefined =>
  e.tags.find((t) => t[0] === name)?.[1];

/** All element-1 values of tags named `name`. */
export const tagValues = (e: Pick<NostrEvent, 'tags'>, name: string): string[] =>
  e.tags.filter((t) => t[0] === name && t[1] !== undefined).map((t) => t[1]!);

/** Signs a template with a fast backend (the relay's Wasm module): id with its SHA-256 when it has one. */
export function signEventWith(
  t: EventTemplate,
  secretKey: Uint8Array,
  backend: SchnorrSigner & Pick<SchnorrVerifier, 'sha256'>,
  pubkey: string,
): NostrEvent {
  const unsigned = { pubkey, created_at: t.created_at, kind: t.kind, tags: t.tags, content: t.content };
  const idBytes = computeEventIdBytes(unsigned, backend.sha256 ? (d) => backend.sha256!(d) : sha256);
  const { signature, pubkey: signer } = backend.sign(idBytes, secretKey);
  if (bytesToHex(signer) !== pubkey) throw new Error('signEventWith: the secret key does not belong to the pubkey');
  return { id: bytesToHex(idBytes), ...unsigned, sig: bytesToHex(signature) };
}

/** The NIP-40 expiration timestamp, when the event carries a well-formed one. */
export function expirationOf(e: Pick<NostrEvent, 'tags'>): number | null {
  const v = tagValue(e, 'expiration');
  return v !== undefined && /^\d{1,10}$/.test(v) ? Number(v) : null;
}

/** The `id` of something that may be an event (a string, not checked further), to answer OK with. */
export const eventIdOf = (input: unknown): string | undefined => {
  const id = typeof input === 'object' && input !== null ? (input as { id?: unknown }).id : undefined;
  return typeof id === 'string' ? id : undefined;
};
