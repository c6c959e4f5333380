// The read policy of a shard: who may read what, in one place (../shared/DESIGN.md kind policy,
// `readRule` in src/shared/kinds.ts). Every NIP-XX kind (stored 25802/25803/25805 and live-only
// 25800/25801/25804/25806) goes only to the authenticated author or p-tagged recipient, gift wraps
// (1059, live-only 21059) only to the authenticated recipient, and NIP-AO frames (never stored)
// only to the authenticated recipient through a live `#p` subscription. The rule has three forms,
// all built here from the same kind lists: the predicate (live fan-out), the SQL clause (stored
// queries; tested against the predicate in test/workers/store*.test.ts) and the REQ/COUNT admission
// of filters (what a connection may ask for at all: `rejectFilter` hooks, policy.ts).

import type { NostrEvent } from '../../src/shared/event.js';
import { reject } from '../../src/shared/errors.js';
import { matchFilter, matchFilters, type Filter } from '../../src/shared/filters.js';
import { isPrivateKind, KIND, kindClass, READ_RESTRICTED_KINDS, readRule } from '../../src/shared/kinds.js';
import type { RejectFilterHook } from './policy.js';

/** NIP-AO history requests are refused; `since` may lag the relay's clock by this much (clock skew). */
export const AO_SINCE_TOLERANCE_SECONDS = 60;

export function canRead(e: Pick<NostrEvent, 'kind' | 'pubkey' | 'tags'>, readers: ReadonlySet<string>): boolean {
  const rule = readRule(e.kind);
  if (rule === 'anyone') return true;
  if (rule === 'author-or-recipient' && readers.has(e.pubkey)) return true;
  return e.tags.some((t) => t[0] === 'p' && t[1] !== undefined && readers.has(t[1]));
}

/**
 * The SQL form of canRead over `events e` joined with the tag index. The readers travel as one JSON
 * array parameter (read with json_each), so the clause costs two bound parameters however many
 * pubkeys the connection authenticated as (a statement may bind at most 100).
 */
export function readableKindsSql(readers: readonly string[]): { sql: string; params: string[] } {
  const authorOrRecipient = READ_RESTRICTED_KINDS['author-or-recipient'].join(',');
  const recipientOnly = READ_RESTRICTED_KINDS.recipient.join(',');
  const restricted = `${authorOrRecipient},${recipientOnly}`;
  if (readers.length === 0) return { sql: `e.kind NOT IN (${restricted})`, params: [] };
  const list = JSON.stringify(readers);
  return {
    sql: `(e.kind NOT IN (${restricted})
      OR (e.kind IN (${authorOrRecipient}) AND e.pubkey IN (SELECT value FROM json_each(?)))
      OR EXISTS (SELECT 1 FROM tags v WHERE v.rid = e.rid AND v.name = 'p' AND v.value IN (SELECT value FROM json_each(?))))`,
    params: [list, list],
  };
}

/** Whether a live event goes to a subscription with these filters on a connection authenticated as `readers`. */
export function delivers(filters: readonly Filter[], e: NostrEvent, readers: ReadonlySet<string>): boolean {
  if (kindClass(e.kind) === 'ao-frame') {
    const recipient = e.tags.find((t) => t[0] === 'p')?.[1];
    return recipient !== undefined && readers.has(recipient) && filters.some((f) => f['#p'] !== undefined && matchFilter(f, e));
  }
  return canRead(e, readers) && matchFilters(filters, e);
}

/** REQ/COUNT (a `rejectFilter` hook): filters naming only private kinds need an authenticated connection. */
export const privateKindsNeedAuth: RejectFilterHook = (filters, { conn }) => {
  const onlyPrivate = filters.every((f) => f.kinds !== undefined && f.kinds.length > 0 && f.kinds.every(isPrivateKind));
  return onlyPrivate && conn.authed.size === 0
    ? reject('auth-required', 'these kinds are only served to their authenticated author or recipient')
    : undefined;
};

/**
 * REQ/COUNT (a `rejectFilter` hook): filters naming kind 24200 must be live (no history) and carry
 * `#p` of pubkeys the connection authenticated as.
 */
export const aoFramesLiveToRecipient: RejectFilterHook = (filters, { conn, nowMs }) => {
  const now = Math.floor(nowMs / 1000);
  const authed = conn.authed;
  for (const f of filters) {
    if (!f.kinds?.includes(KIND.AO_FRAME)) continue;
    if (f.ids || f.until !== undefined || (f.since !== undefined && f.since < now - AO_SINCE_TOLERANCE_SECONDS)) {
      return reject('restricted', 'kind 24200 frames are live only: subscribe with since = now, without until or ids');
    }
    if (authed.size === 0) return reject('auth-required', 'kind 24200 frames are only delivered to their authenticated recipient');
    if (!f['#p'] || f['#p'].length === 0 || !f['#p'].every((p) => authed.has(p))) {
      return reject('restricted', 'a kind 24200 subscription must carry #p of a pubkey this connection authenticated as');
    }
  }
  return undefined;
};
