// NIP-62 request to vanish on a shard: a kind 62 naming this relay (its URL in a `relay` tag, or
// ALL_RELAYS) removes every event of its author created up to the request's created_at, with the
// gift wraps addressed to it, and the shard refuses those events for good (`blocked:`). Any key may
// vanish from any shard, an owner shard included (NIP-62: "regardless of the user's status"); the
// request itself stays stored (bookkeeping) and a NIP-09 deletion cannot remove it (store.ts).
// Strangers can store any number of wraps addressed to a key, so the removal goes in batches of
// VANISH_BATCH: the first before the request's OK, the rest by the shard's alarm, at once after;
// meanwhile reads hide what is still to be removed (`pendingRemovalHiddenSql`).
// A restore (backup.ts) writes a backup's kind 62s again with `restoredRelayUrl`: one that names this
// shard (its path: / or /r/<hex>) at another host counts as addressed here, so that a backup
// restored after the deployment moved (a new host, EDGESTR_PUBLIC_URL changed) keeps blocking the
// keys that vanished. A backup holds only what its shard accepted, and a restore writes a shard's
// backups into that shard only, so these are the requests the shard took, under whatever URL it had
// then (which no URL recorded at backup time would tell: the cron has no request). A plain import
// keeps the live rule.

import { tagValues, type NostrEvent } from '../../src/shared/event.js';
import { reject } from '../../src/shared/errors.js';
import { KIND } from '../../src/shared/kinds.js';
import { normalizeRelayUrl } from '../../src/shared/nip42.js';
import { PUBLIC_SHARD } from '../common/shards.js';
import { shardOfPath } from '../../src/shared/shard-url.js';
import type { OnEventSavedHook, OnEventStoredHook, RejectEventHook } from './policy.js';
import type { EventStore } from './store.js';
import { wakeNoLaterThan } from '../common/alarms.js';

/** Events and deletion records one pass of a removal takes at most (the request's write, then each alarm). */
export const VANISH_BATCH = 500;

export const ALL_RELAYS = 'ALL_RELAYS';

/** The keys that vanished from this shard and up to which created_at, in the shard's SQLite. */
export class VanishList {
  constructor(private readonly sql: SqlStorage) {
    sql.exec(`
      CREATE TABLE IF NOT EXISTS vanished (pubkey TEXT PRIMARY KEY, until INTEGER NOT NULL) WITHOUT ROWID;
      CREATE TABLE IF NOT EXISTS vanish_pending (pubkey TEXT PRIMARY KEY, until INTEGER NOT NULL) WITHOUT ROWID;
    `);
  }

  /** A request to vanish up to `until`: refused from now on, its removal pending. */
  record(pubkey: string, until: number): void {
    for (const table of ['vanished', 'vanish_pending']) {
      this.sql.exec(
        `INSERT INTO ${table} (pubkey, until) VALUES (?, ?) ON CONFLICT (pubkey) DO UPDATE SET until = max(until, excluded.until)`,
        pubkey,
        until,
      );
    }
  }

  /** Removes at most `batch` events of the pending removals; true while some are still pending. */
  removeSome(store: EventStore, batch = VANISH_BATCH): boolean {
    let left = batch;
    // Each row read either loses events or is done (and deleted): `batch` rows are enough for a pass,
    // however many keys wait.
    const pending = this.sql.exec<{ pubkey: string; until: number }>('SELECT pubkey, until FROM vanish_pending LIMIT ?', batch).toArray();
    for (const { pubkey, until } of pending) {
      if (left === 0) break;
      const removed = store.removeAuthor(pubkey, until, left);
      if (removed < left) this.sql.exec('DELETE FROM vanish_pending WHERE pubkey = ? AND until = ?', pubkey, until);
      left -= removed;
    }
    return this.pending();
  }

  /** Whether a removal is still pending. */
  pending(): boolean {
    return this.sql.exec('SELECT 1 FROM vanish_pending LIMIT 1').toArray().length > 0;
  }

  /** Whether an event created at `createdAt` by (or addressed to) one of `pubkeys` was vanished. */
  covers(pubkeys: readonly string[], createdAt: number): boolean {
    return (
      this.sql
        .exec('SELECT 1 FROM vanished WHERE pubkey IN (SELECT value FROM json_each(?)) AND until >= ? LIMIT 1', JSON.stringify(pubkeys), createdAt)
        .toArray().length > 0
    );
  }
}

/**
 * While a removal is pending, the SQL condition (over the events row `e`) that keeps what it will
 * remove out of REQ, COUNT and export answers: the author's events up to the request (but the
 * request itself), and gift wraps addressed to it. Each stored row costs one primary-key lookup,
 * plus one per `p` tag of a gift wrap.
 */
export const pendingRemovalHiddenSql = `NOT EXISTS (SELECT 1 FROM vanish_pending vp WHERE vp.pubkey = e.pubkey AND vp.until >= e.created_at
    AND NOT (e.kind = ${KIND.VANISH} AND e.created_at = vp.until))
  AND NOT (e.kind = ${KIND.GIFT_WRAP} AND EXISTS (SELECT 1 FROM tags vt JOIN vanish_pending vp ON vp.pubkey = vt.value
    WHERE vt.rid = e.rid AND vt.name = 'p' AND vp.until >= e.created_at))`;

/**
 * The shard a relay URL names: its `<scheme>//<host>[:port]` and the shard (NIP-42 normalization;
 * an owner shard by its hex key, so /r/<npub>, /r/<hex> and a trailing slash are one shard), or undefined.
 */
function shardAddress(url: string): { origin: string; shard: string } | undefined {
  const normal = normalizeRelayUrl(url);
  if (normal === undefined) return undefined;
  const u = new URL(normal);
  const shard = shardOfPath(u.pathname);
  return shard === undefined ? undefined : { origin: `${u.protocol}//${u.host}`, shard: shard ?? PUBLIC_SHARD };
}

/** A kind 62 is accepted only when it names this shard (at the URL clients dial, as in NIP-42, in any of its forms) or ALL_RELAYS. */
export const vanishAddressedHere: RejectEventHook = (e, { relayUrl }) => {
  if (e.kind !== KIND.VANISH) return undefined;
  const here = shardAddress(relayUrl);
  const named = tagValues(e, 'relay');
  const isHere = (url: string) => {
    const there = shardAddress(url);
    return here !== undefined && there !== undefined && there.origin === here.origin && there.shard === here.shard;
  };
  if (named.includes(ALL_RELAYS) || named.some(isHere)) return undefined;
  return reject('invalid', `a request to vanish must name this relay (${relayUrl}) or ${ALL_RELAYS} in a relay tag`);
};

/**
 * The URL a restored event counts as published at (see the header): for a kind 62 naming this shard
 * (the one `relayUrl` names) at another host, the URL it names; `relayUrl` for anything else.
 */
export function restoredRelayUrl(e: NostrEvent, relayUrl: string): string {
  if (e.kind !== KIND.VANISH) return relayUrl;
  const shard = shardAddress(relayUrl)?.shard;
  return tagValues(e, 'relay').find((url) => shard !== undefined && shardAddress(url)?.shard === shard) ?? relayUrl;
}

/** Refuses what a request to vanish removed: the author's events up to it, and gift wraps addressed to it. */
export const notVanished =
  (list: VanishList): RejectEventHook =>
  (e) => {
    const who = e.kind === KIND.GIFT_WRAP ? [e.pubkey, ...tagValues(e, 'p')] : [e.pubkey];
    return list.covers(who, e.created_at) ? reject('blocked', 'this pubkey asked to vanish from this relay (NIP-62)') : undefined;
  };

/** Applies a stored request to vanish before it is confirmed with OK: recorded, and its first batch removed. */
export const applyVanish =
  (list: VanishList, store: EventStore): OnEventStoredHook =>
  (e) => {
    if (e.kind !== KIND.VANISH) return;
    list.record(e.pubkey, e.created_at);
    list.removeSome(store);
  };

/** After a request to vanish, while removals are pending: the shard's alarm continues them at once. */
export const scheduleVanish =
  (list: VanishList, storage: DurableObjectStorage): OnEventSavedHook =>
  async (e) => {
    if (e.kind === KIND.VANISH && list.pending()) await wakeNoLaterThan(storage, Date.now());
  };
