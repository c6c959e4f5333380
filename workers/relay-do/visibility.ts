// Who may read a stored or live event (DESIGN.md kind policy): NIP-XX durable kinds go only to the
// authenticated author or p-tagged recipient, gift wraps only to the authenticated recipient, and
// NIP-AO frames (never stored) only to the authenticated recipient through a `#p` subscription.
// The stored-kind rule exists in two forms — a predicate for live fan-out and a SQL clause for
// queries — tested against each other.

import type { NostrEvent } from '../../src/shared/event.js';
import { matchFilter, matchFilters, type Filter } from '../../src/shared/filters.js';
import { authorMayRead, isPrivateKind, KIND, kindClass, NIPXX_DURABLE_KINDS } from '../../src/shared/kinds.js';

const PRIVATE_KINDS = [...NIPXX_DURABLE_KINDS, KIND.GIFT_WRAP];

export function canRead(e: Pick<NostrEvent, 'kind' | 'pubkey' | 'tags'>, readers: ReadonlySet<string>): boolean {
  if (!isPrivateKind(e.kind)) return true;
  if (authorMayRead(e.kind) && readers.has(e.pubkey)) return true;
  return e.tags.some((t) => t[0] === 'p' && t[1] !== undefined && readers.has(t[1]));
}

/** The SQL form of canRead over `events e` joined with the tag index. */
export function readableKindsSql(readers: readonly string[]): { sql: string; params: string[] } {
  const privateList = PRIVATE_KINDS.join(',');
  if (readers.length === 0) return { sql: `e.kind NOT IN (${privateList})`, params: [] };
  const marks = readers.map(() => '?').join(',');
  return {
    sql: `(e.kind NOT IN (${privateList})
      OR (e.kind <> ${KIND.GIFT_WRAP} AND e.pubkey IN (${marks}))
      OR EXISTS (SELECT 1 FROM tags v WHERE v.rid = e.rid AND v.name = 'p' AND v.value IN (${marks})))`,
    params: [...readers, ...readers],
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
