// NIP-42 client authentication: the kind 22242 AUTH template a client signs, and the relay-side
// checks of a received AUTH event against the connection's challenge and the relay's URL.
// Signature verification is NOT done here: the caller validates the event (id, signature) with
// event.ts `validateEvent` first, as for every event, then calls `validateAuthEvent`.

import { err, ok, reject, type Result } from './errors.js';
import type { NostrEvent, Tag } from './event.js';
import { tagValue } from './event.js';
import { KIND } from './kinds.js';

/** How far an AUTH event's created_at may be from the relay's clock, in seconds (inclusive). */
export const AUTH_WINDOW_SECONDS = 600;

export interface AuthTemplateArgs {
  /** The relay URL the client connected to. */
  relay: string;
  /** The challenge string the relay sent in ["AUTH", challenge]. */
  challenge: string;
  /** Unix seconds; defaults to the current time. */
  now?: number;
  /** Extra tags, e.g. a NIP-OA `auth` tag proving the signer is an owner's agent. */
  tags?: Tag[];
}

/** An unsigned kind 22242 template (sign it with nostr-tools `finalizeEvent` or a signer). */
export interface AuthTemplate {
  kind: typeof KIND.AUTH;
  created_at: number;
  tags: Tag[];
  content: string;
}

export function makeAuthEvent(args: AuthTemplateArgs): AuthTemplate {
  return {
    kind: KIND.AUTH,
    created_at: args.now ?? Math.floor(Date.now() / 1000),
    tags: [['relay', args.relay], ['challenge', args.challenge], ...(args.tags ?? [])],
    content: '',
  };
}

const RELAY_SCHEMES: Readonly<Record<string, string>> = { 'ws:': 'ws:', 'wss:': 'wss:', 'http:': 'ws:', 'https:': 'wss:' };

/**
 * Canonical form of a relay URL for comparison: scheme + host (lowercase, default port dropped)
 * + path without trailing slash; query and fragment ignored. http(s) maps to ws(s), since a
 * Worker sees the upgrade request as https:// while the client dialled wss://.
 * Returns undefined when the input is not a ws(s)/http(s) URL.
 */
export function normalizeRelayUrl(url: string): string | undefined {
  let u: URL;
  try {
    u = new URL(url.trim());
  } catch {
    return undefined;
  }
  const scheme = RELAY_SCHEMES[u.protocol];
  if (!scheme) return undefined;
  const defaultPort = scheme === 'wss:' ? '443' : '80';
  const port = u.port && u.port !== defaultPort ? `:${u.port}` : '';
  const path = u.pathname.replace(/\/+$/, '');
  return `${scheme}//${u.hostname.toLowerCase()}${port}${path}`;
}

export interface AuthCheck {
  /** The challenge this connection sent. */
  challenge: string;
  /** This relay's URL as clients reach it (e.g. wss://host/r/<owner>). */
  relayUrl: string;
  /** The relay's clock, unix seconds. */
  now: number;
}

/**
 * Checks a (signature-verified) AUTH event for this connection; the value is the authenticated
 * pubkey. Malformed events get `invalid:`; events for another challenge or relay get
 * `auth-required:` (the client should authenticate again with the right values).
 */
export function validateAuthEvent(event: NostrEvent, check: AuthCheck): Result<string> {
  if (event.kind !== KIND.AUTH) return err(reject('invalid', `AUTH event must be kind ${KIND.AUTH}`));
  if (Math.abs(event.created_at - check.now) > AUTH_WINDOW_SECONDS) {
    return err(reject('invalid', 'AUTH event is more than 10 minutes from now'));
  }
  const challenge = tagValue(event, 'challenge');
  if (challenge === undefined) return err(reject('invalid', 'AUTH event has no challenge tag'));
  if (challenge !== check.challenge) return err(reject('auth-required', 'challenge does not match'));
  const relay = tagValue(event, 'relay');
  if (relay === undefined) return err(reject('invalid', 'AUTH event has no relay tag'));
  const expected = normalizeRelayUrl(check.relayUrl);
  if (expected === undefined) throw new Error(`validateAuthEvent: relayUrl is not a relay URL: ${check.relayUrl}`);
  if (normalizeRelayUrl(relay) !== expected) {
    return err(reject('auth-required', `relay tag does not match this relay (${expected})`));
  }
  return ok(event.pubkey);
}
