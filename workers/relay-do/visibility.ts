// Who may read a stored or live event (DESIGN.md kind policy, `readRule` in src/shared/kinds.ts):
// every NIP-XX kind (stored 25802/25803/25805 and live-only 25800/25801/25804/25806) goes only to
// the authenticated author or p-tagged recipient, gift wraps (1059, live-only 21059) only to the
// authenticated recipient, and NIP-AO frames (never stored) only to the authenticated recipient
// through a `#p` subscription. The read rule exists in two forms — a predicate for live fan-out and
// a SQL clause for queries — both built from the same kind lists and tested against each other.

import type { NostrEvent } from '../../src/shared/event.js';
import { matchFilter, matchFilters, type Filter } from '../../src/shared/filters.js';
import { kindClass, READ_RESTRICTED_KINDS, readRule } from '../../src/shared/kinds.js';

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
