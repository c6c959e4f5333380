// Write policy of a shard as a list of small hooks (khatru style): each looks at a verified event
// and the publishing connection and either admits it (undefined) or answers with a rejection.

import { expirationOf, type NostrEvent } from '../../src/shared/event.js';
import { reject, type Rejection } from '../../src/shared/errors.js';
import { KIND } from '../../src/shared/kinds.js';
import type { RelayLimits } from './limits.js';

export interface PolicyContext {
  /** Owner of the shard, or null for the public shard. */
  owner: string | null;
  /** Pubkeys the connection has authenticated as (NIP-42). */
  authed: ReadonlySet<string>;
  /** Seconds since the epoch. */
  now: number;
  limits: RelayLimits;
  isOwnersAgent(pubkey: string): boolean;
  /** Whether the event carries a valid NIP-OA attestation naming the shard's owner. */
  attestsToOwner(e: NostrEvent): boolean;
}

export type RejectEventHook = (e: NostrEvent, ctx: PolicyContext) => Rejection | undefined;

export const withinLimits: RejectEventHook = (e, { limits, now }) => {
  if (e.tags.length > limits.max_event_tags) return reject('invalid', `too many tags (max ${limits.max_event_tags})`);
  if (e.content.length > limits.max_content_length) {
    return reject('invalid', `content is longer than ${limits.max_content_length} characters`);
  }
  if (e.created_at < now - limits.created_at_lower_limit) return reject('invalid', 'created_at is too far in the past');
  if (e.created_at > now + limits.created_at_upper_limit) return reject('invalid', 'created_at is too far in the future');
  return undefined;
};

export const notAuthEvent: RejectEventHook = (e) =>
  e.kind === KIND.AUTH ? reject('invalid', 'kind 22242 is sent with the AUTH message, not EVENT') : undefined;

/** NIP-40: an expired event is refused on publish. */
export const notExpired: RejectEventHook = (e, { now }) => {
  const exp = expirationOf(e);
  return exp !== null && exp <= now ? reject('invalid', 'event has expired') : undefined;
};

/** NIP-70: an event tagged ["-"] is accepted only from a connection authenticated as its author. */
export const protectedByAuthor: RejectEventHook = (e, { authed }) => {
  if (!e.tags.some((t) => t.length === 1 && t[0] === '-')) return undefined;
  if (authed.has(e.pubkey)) return undefined;
  return authed.size === 0
    ? reject('auth-required', 'this event is protected: authenticate as its author to publish it')
    : reject('restricted', 'this event is protected: only its author may publish it');
};

/** The owner shard's default: the owner, the owner's agents, and anything addressed to them (its inbox). */
export const ownerShardWrites: RejectEventHook = (e, ctx) => {
  const { owner } = ctx;
  if (owner === null) return undefined;
  if (e.pubkey === owner || ctx.isOwnersAgent(e.pubkey)) return undefined;
  // A connection authenticated as the owner or one of the owner's agents vouches for what it
  // publishes: gift wraps are signed by one-time keys and may be addressed to anyone.
  for (const who of ctx.authed) if (who === owner || ctx.isOwnersAgent(who)) return undefined;
  if (e.tags.some((t) => t[0] === 'p' && t[1] !== undefined && (t[1] === owner || ctx.isOwnersAgent(t[1])))) return undefined;
  if (e.kind === KIND.METADATA && ctx.attestsToOwner(e)) return undefined;
  return reject('restricted', "this shard accepts events from its owner and the owner's agents, or addressed to them");
};

/** Hooks every shard runs, in order, after the event's id and signature are verified. */
export const DEFAULT_WRITE_POLICY: readonly RejectEventHook[] = [
  withinLimits,
  notAuthEvent,
  notExpired,
  protectedByAuthor,
  ownerShardWrites,
];

export function checkWrite(e: NostrEvent, ctx: PolicyContext, hooks = DEFAULT_WRITE_POLICY): Rejection | undefined {
  for (const hook of hooks) {
    const r = hook(e, ctx);
    if (r) return r;
  }
  return undefined;
}
