// Whether a shard object's storage is worth keeping. Where every key has a shard (EDGESTR_OPEN_SHARDS,
// development), a NIP-11 fetch or an upgrade on /r/<fresh key> makes a RelayShard whose schema (20
// tables with their indexes and triggers, ~150 KB) would otherwise stay stored for good: a stranger
// cycling fresh keys grows storage without bound. So an owner shard's object (its primary, or one
// of its edges) that holds nothing but what any request makes again deletes its whole storage
// (shard.ts: from its alarm, armed EMPTY_SHARD_GRACE_MS after the storage is made, after the last
// socket closes, after the last edge stops listening, after a backup took the shard's mark), and
// the next request makes the schema again, as for a new key.
// Nothing worth keeping: the object belongs to an owner shard (its owner row says which; never the
// public shard, nor an object no request named), holds no socket, and every table is empty but
// `meta` and the rows made with the schema (MADE_WITH_SCHEMA): no stored event, no deletion or
// vanish record, no ownership proof, provisioning record or revocation, no account pushed by the
// admin API (a registered owner's plan, suspension, removal, version: kept; an owner signed up on
// the default plan has none, and is served the same without it), no edge listening at the
// primary; and `meta` holds no key but IDENTITY_KEYS (a retention rule or a backup mark is kept).
// A table added later is worth keeping by default: any row in it keeps the object.

import { PUBLIC_SHARD } from '../common/shards.js';

/** How long after the storage is made, or the last socket closed, an object that holds nothing deletes it (ms). */
export const EMPTY_SHARD_GRACE_MS = 60_000;

/** Tables whose rows the schema itself makes: stored_totals (the sums of stored_sizes, zero when it is empty), deleted_ids_dated (a migration's mark). */
const MADE_WITH_SCHEMA = new Set(['meta', 'stored_totals', 'deleted_ids_dated']);

/**
 * The `meta` keys that say what the object is rather than what it holds: its shard ('owner'), its
 * edge index ('edge'), and, at a primary, what orders the stamps of its deliveries to its edges
 * (edge-fanout.ts: the count of its starts, 'edge_epoch', and the last stamp published,
 * 'edge_published'). An edge compares stamps only for its subscriptions, and while an edge has one
 * its primary lists it in `edges_listening` (an edge says `idle` only once it has none left), which
 * keeps the primary like any table with rows; so a primary emptied starts its count again with no
 * stamp of the old count held anywhere.
 */
const IDENTITY_KEYS = ['owner', 'edge', 'edge_epoch', 'edge_published'];

/** Whether the storage `sql` of a shard object holds nothing worth keeping (see the header); sockets are the caller's to check. */
export function holdsNothing(sql: SqlStorage): boolean {
  const shard = sql.exec<{ value: string }>("SELECT value FROM meta WHERE key = 'owner'").toArray()[0]?.value;
  if (shard === undefined || shard === PUBLIC_SHARD) return false;
  const keys = JSON.stringify(IDENTITY_KEYS);
  if (sql.exec('SELECT 1 FROM meta WHERE key NOT IN (SELECT value FROM json_each(?)) LIMIT 1', keys).toArray().length > 0) return false;
  const tables = sql
    .exec<{ name: string }>("SELECT name FROM sqlite_master WHERE type = 'table' AND substr(name, 1, 7) != 'sqlite_' AND substr(name, 1, 4) != '_cf_'")
    .toArray();
  return tables.every(({ name }) => MADE_WITH_SCHEMA.has(name) || sql.exec(`SELECT 1 FROM "${name.replaceAll('"', '""')}" LIMIT 1`).toArray().length === 0);
}
