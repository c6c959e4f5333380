// NIP-98 HTTP auth (kind 27235) for the management API: the server-side verifier of an
// `Authorization: Nostr <base64 event>` header (in two steps, so that a server checks the header
// before it reads a body: verifyHttpAuthHeader, then checkHttpAuthPayload), how long an id must
// be remembered (replayExpiry), a replay guard so that each event id is accepted once, and the
// client-side header builder used by the CLI and tests.

import { sha256 } from '@noble/hashes/sha2.js';
import { finalizeEvent } from 'nostr-tools/pure';
import { err, ok, type Result } from './errors.js';
import { tagValue, validateEvent, type NostrEvent, type Tag } from './event.js';
import { base64Decode, base64Encode, bytesToHex } from './hex.js';
import { KIND } from './kinds.js';
import { LruMap } from './lru.js';
import type { SchnorrVerifier } from './verify.js';

/** How far the event's created_at may be from the server clock, in seconds (inclusive). */
export const HTTP_AUTH_WINDOW_SECONDS = 60;
/** Extra seconds an accepted id is remembered past its validity, for clock differences between isolates. */
const HTTP_AUTH_SKEW_SECONDS = 5;
/** Longest accepted header value; a 27235 event is well under 1 KiB. */
const MAX_AUTH_HEADER_CHARS = 16384;

export interface HttpAuthError {
  readonly status: 401;
  readonly reason: string;
}

export interface HttpAuthRequest {
  /** The Authorization header value, or null when absent. */
  authorization: string | null;
  /** The full request URL as the server received it (scheme, host, path, query). */
  url: string;
  method: string;
  /** The raw body bytes (a string is hashed as UTF-8); absent or empty means no body. */
  body?: Uint8Array | string;
}

/**
 * Remembers accepted event ids. `seen` records `id` (to be remembered until the unix second
 * `expiresAt`, inclusive) and returns whether it had already been recorded and not yet expired.
 */
export interface ReplayGuard {
  seen(id: string, expiresAt: number): boolean;
}

export interface HttpAuthOptions {
  verifier: SchnorrVerifier;
  /** Server clock, unix seconds. */
  now: number;
  replay: ReplayGuard;
}

export interface HttpAuthOk {
  pubkey: string;
  event: NostrEvent;
}

const fail = (reason: string): Result<never, HttpAuthError> => err({ status: 401, reason });
const utf8 = new TextEncoder();
const utf8Strict = new TextDecoder('utf-8', { fatal: true, ignoreBOM: false });

const bodyBytes = (body: Uint8Array | string | undefined): Uint8Array =>
  body === undefined ? new Uint8Array(0) : typeof body === 'string' ? utf8.encode(body) : body;

export const sha256Hex = (bytes: Uint8Array): string => bytesToHex(sha256(bytes));

/**
 * The unix second until which an accepted event id must be remembered: the event stays valid
 * until created_at + window (an event dated in the future is valid longer than one dated now), so
 * the id is kept until max(now, created_at) + window + skew.
 */
export const replayExpiry = (event: Pick<NostrEvent, 'created_at'>, now: number): number =>
  Math.max(now, event.created_at) + HTTP_AUTH_WINDOW_SECONDS + HTTP_AUTH_SKEW_SECONDS;

/**
 * The header-only checks of a NIP-98 Authorization header, in order: the header and its base64
 * JSON event, the event's shape, id and signature, kind 27235, created_at within ±60 s, `u` equal
 * to the request URL (both compared as `new URL().href`), `method` (case-insensitive). The body
 * is not needed: a server runs this before reading it, then checkHttpAuthPayload.
 */
export function verifyHttpAuthHeader(
  req: Omit<HttpAuthRequest, 'body'>,
  opts: Pick<HttpAuthOptions, 'verifier' | 'now'>,
): Result<HttpAuthOk, HttpAuthError> {
  const header = req.authorization?.trim();
  if (!header) return fail('missing Authorization header');
  if (header.length > MAX_AUTH_HEADER_CHARS) return fail('Authorization header is too large');
  const m = /^Nostr[ \t]+(\S+)$/i.exec(header);
  if (!m) return fail('Authorization header must be "Nostr <base64 event>"');
  const raw = base64Decode(m[1]!);
  if (!raw) return fail('Authorization token is not valid base64');
  let json: unknown;
  try {
    json = JSON.parse(utf8Strict.decode(raw));
  } catch {
    return fail('Authorization token is not a JSON event');
  }
  const valid = validateEvent(json, opts.verifier);
  if (!valid.ok) return fail(`invalid event: ${valid.error.reason}`);
  const event = valid.value;

  if (event.kind !== KIND.HTTP_AUTH) return fail(`event kind must be ${KIND.HTTP_AUTH}`);
  if (Math.abs(event.created_at - opts.now) > HTTP_AUTH_WINDOW_SECONDS) {
    return fail(`event created_at is more than ${HTTP_AUTH_WINDOW_SECONDS} seconds from now`);
  }

  const expectedUrl = new URL(req.url).href;
  const u = tagValue(event, 'u');
  if (u === undefined) return fail('missing u tag');
  let signedUrl: string | undefined;
  try {
    signedUrl = new URL(u).href;
  } catch {
    signedUrl = undefined;
  }
  if (signedUrl !== expectedUrl) return fail(`u tag does not match the request URL (${expectedUrl})`);

  const method = tagValue(event, 'method');
  if (method === undefined) return fail('missing method tag');
  if (method.toUpperCase() !== req.method.toUpperCase()) {
    return fail(`method tag does not match the request method (${req.method.toUpperCase()})`);
  }
  return ok({ pubkey: event.pubkey, event });
}

/** The body check: `payload` = sha256 hex of the body (required when the body is non-empty, checked whenever present). */
export function checkHttpAuthPayload(event: NostrEvent, body: Uint8Array | string | undefined): Result<true, HttpAuthError> {
  const bytes = bodyBytes(body);
  const payload = tagValue(event, 'payload');
  if (payload === undefined) {
    if (bytes.length > 0) return fail('missing payload tag (required when the request has a body)');
  } else if (payload.toLowerCase() !== sha256Hex(bytes)) {
    return fail('payload tag does not match the SHA-256 of the body');
  }
  return ok(true);
}

/**
 * Verifies a NIP-98 Authorization header for one request: verifyHttpAuthHeader, then
 * checkHttpAuthPayload, and finally that the event id was not used before (remembered until
 * replayExpiry). Only events that pass every other check are recorded by the replay guard.
 */
export function verifyHttpAuth(req: HttpAuthRequest, opts: HttpAuthOptions): Result<HttpAuthOk, HttpAuthError> {
  const checked = verifyHttpAuthHeader(req, opts);
  if (!checked.ok) return checked;
  const payload = checkHttpAuthPayload(checked.value.event, req.body);
  if (!payload.ok) return payload;
  if (opts.replay.seen(checked.value.event.id, replayExpiry(checked.value.event, opts.now))) {
    return fail('event was already used (each NIP-98 event is accepted once)');
  }
  return checked;
}

/**
 * In-memory ReplayGuard bounded to `maxEntries` ids. Expired ids are forgotten; when the guard is
 * full of unexpired ids the oldest is evicted (a flood of valid events could then make an old id
 * acceptable again before it expires; its timestamp window still bounds that to 60 s). Per
 * isolate only: a deployment with several isolates needs a shared guard (e.g. a Durable Object).
 */
export class MemoryReplayGuard implements ReplayGuard {
  private readonly clock: () => number;
  private readonly ids: LruMap<string, number>;

  constructor(opts: { maxEntries?: number; clock?: () => number } = {}) {
    this.ids = new LruMap(opts.maxEntries ?? 10_000);
    this.clock = opts.clock ?? (() => Math.floor(Date.now() / 1000));
  }

  get maxEntries(): number {
    return this.ids.max;
  }

  seen(id: string, expiresAt: number): boolean {
    const now = this.clock();
    this.purge(now);
    const known = this.ids.peek(id);
    if (known !== undefined && known >= now) return true;
    this.ids.set(id, expiresAt);
    return false;
  }

  get size(): number {
    return this.ids.size;
  }

  /** Drops expired ids from the front (insertion order ≈ expiry order; stragglers go when reached). */
  private purge(now: number): void {
    for (const [id, expiresAt] of this.ids) {
      if (expiresAt >= now) break;
      this.ids.delete(id);
    }
  }
}

/**
 * Client side: the `Authorization` header value for one request. Pass the exact body bytes (or
 * string) that will be sent; when a body is given, its sha256 goes into the `payload` tag. A random
 * `nonce` tag makes two identical requests within one second distinct events, since servers
 * accept an event id only once.
 */
export function makeHttpAuthHeader(
  sk: Uint8Array,
  url: string,
  method: string,
  body?: Uint8Array | string,
  now: number = Math.floor(Date.now() / 1000),
): string {
  const tags: Tag[] = [
    ['u', url],
    ['method', method.toUpperCase()],
  ];
  if (body !== undefined) tags.push(['payload', sha256Hex(bodyBytes(body))]);
  tags.push(['nonce', bytesToHex(crypto.getRandomValues(new Uint8Array(8)))]);
  const event = finalizeEvent({ kind: KIND.HTTP_AUTH, created_at: now, tags, content: '' }, sk);
  return `Nostr ${base64Encode(utf8.encode(JSON.stringify(event)))}`;
}
