// Write rules of a shard (`rejectEvent` hooks, see policy.ts): the NIP-11 limits on one event, kind
// 22242 only through AUTH, one `p` at most on the kinds addressed to one recipient
// (src/shared/recipients.ts), NIP-70 protected events, and the owner shard's default of accepting only
// its owner's traffic (and anyone's request to vanish); and the per-pubkey rate limit (a
// `chargeEvent` hook).

import { CREATED_AT_TOO_NEW, CREATED_AT_TOO_OLD, reject } from '../../src/shared/errors.js';
import { KIND } from '../../src/shared/kinds.js';
import { charactersOver } from '../../src/shared/messages.js';
import { tooManyRecipients } from '../../src/shared/recipients.js';
import type { RelayLimits } from './limits.js';
import type { ChargeEventHook, EventContext, RejectEventHook } from './policy.js';
import type { NostrEvent } from '../../src/shared/event.js';
import { BucketMap } from './rate-limit.js';

/**
 * Events per pubkey (a token bucket shared by every connection of the shard), a `chargeEvent` hook:
 * spent only by an event new to the shard published on a connection authenticated (NIP-42) as its
 * signer, the one case where the sender is known to be the key. Anyone may send again an event
 * someone else signed, so charging the signer whoever sends it let a stranger empty a victim's
 * bucket with the victim's own events; such events spend the buckets of the connection and address
 * that send them (connections.ts `throttle`, before verification), as every event does. New keys
 * cost nothing, so the bucket never bounded an unauthenticated sender; it bounds one key
 * authenticated on connections from many addresses. Kind 24200 frames have their own limits
 * (NIP-AO) and edgestr's own agents are bounded by theirs.
 */
export function eventRateLimits(limits: RelayLimits): ChargeEventHook[] {
  const byPubkey = new BucketMap(limits.events_per_second_per_pubkey, limits.events_burst_per_pubkey);
  return [
    (e, { internal, authed, nowMs }) =>
      internal || e.kind === KIND.AO_FRAME || !authed.has(e.pubkey) || byPubkey.take(e.pubkey, nowMs)
        ? undefined
        : reject('rate-limited', 'slow down: too many events from this pubkey'),
  ];
}

export const withinLimits: RejectEventHook = (e, { limits, now }) => {
  if (e.tags.length > limits.max_event_tags) return reject('invalid', `too many tags (max ${limits.max_event_tags})`);
  if (charactersOver(e.content, limits.max_content_length)) {
    return reject('invalid', `content is longer than ${limits.max_content_length} characters`);
  }
  if (e.created_at < now - limits.created_at_lower_limit) return reject('invalid', CREATED_AT_TOO_OLD);
  if (e.created_at > now + limits.created_at_upper_limit) return reject('invalid', CREATED_AT_TOO_NEW);
  return undefined;
};

export const notAuthEvent: RejectEventHook = (e) =>
  e.kind === KIND.AUTH ? reject('invalid', 'kind 22242 is sent with the AUTH message, not EVENT') : undefined;

/**
 * A kind addressed to one recipient (a NIP-XX, DVMCP or zap event, a gift wrap) naming several:
 * refused, so that one EVENT is not delivered to every agent and bridge it tags.
 */
export const oneRecipient: RejectEventHook = (e) => tooManyRecipients(e);

/** NIP-70: an event tagged ["-"] is accepted only from a connection authenticated as its author. */
export const protectedByAuthor: RejectEventHook = (e, { authed }) => {
  if (!e.tags.some((t) => t.length === 1 && t[0] === '-')) return undefined;
  if (authed.has(e.pubkey)) return undefined;
  return authed.size === 0
    ? reject('auth-required', 'this event is protected: authenticate as its author to publish it')
    : reject('restricted', 'this event is protected: only its author may publish it');
};

/**
 * Whether an event comes from the owner's side of an owner shard: signed by the owner or one of its
 * agents, or published on a connection authenticated as one of them (it vouches for what it
 * publishes: gift wraps are signed by one-time keys and may be addressed to anyone).
 */
export function fromOwnerSide(e: NostrEvent, ctx: Pick<EventContext, 'owner' | 'authed' | 'isOwnersAgent'>): boolean {
  const { owner } = ctx;
  if (owner === null) return false;
  return e.pubkey === owner || ctx.isOwnersAgent(e.pubkey) || ownerSideConnection(ctx) !== undefined;
}

/**
 * The owner's-side key a connection is authenticated as on an owner shard: the owner when it is one
 * of them, else one of the owner's agents; undefined when none (or on the public shard).
 */
export function ownerSideConnection(ctx: Pick<EventContext, 'owner' | 'authed' | 'isOwnersAgent'>): string | undefined {
  const { owner } = ctx;
  if (owner === null) return undefined;
  if (ctx.authed.has(owner)) return owner;
  for (const who of ctx.authed) if (ctx.isOwnersAgent(who)) return who;
  return undefined;
}

/** The owner shard's default: the owner, the owner's agents, and anything addressed to them (its inbox). */
export const ownerShardWrites: RejectEventHook = (e, ctx) => {
  const { owner } = ctx;
  if (owner === null) return undefined;
  // NIP-62: any key may vanish from a relay that restricts who can post (see vanish.ts).
  if (e.kind === KIND.VANISH) return undefined;
  if (fromOwnerSide(e, ctx)) return undefined;
  if (e.tags.some((t) => t[0] === 'p' && t[1] !== undefined && (t[1] === owner || ctx.isOwnersAgent(t[1])))) return undefined;
  if (e.kind === KIND.METADATA && ctx.attestsToOwner(e)) return undefined;
  return reject('restricted', "this shard accepts events from its owner and the owner's agents, or addressed to them");
};
