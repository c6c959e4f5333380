// Event storage of one shard in the Durable Object's SQLite: schema, insert with the replace /
// delete / expiry rules of ../shared/DESIGN.md's kind policy, and queries. The work of a query is
// linear in its filters (one statement per filter, compiled by query-sql.ts, after one probe when
// the filter has several lists that could drive it) and its answer is bounded in bytes.

import type { NostrEvent } from '../../src/shared/event.js';
import { expirationOf, tagValue, tagValues } from '../../src/shared/event.js';
import { compareEvents, type Filter } from '../../src/shared/filters.js';
import { KIND, kindClass } from '../../src/shared/kinds.js';
import { isHex64 } from '../../src/shared/hex.js';
import { compileFilter, MAX_BOUND_PARAMS, type CompiledQuery, type Probe, type ReadScope } from './query-sql.js';
import { pendingRemovalHiddenSql } from './vanish.js';
import { reject } from '../../src/shared/errors.js';
import type { RejectEventHook } from './policy.js';
import type { CountedEvents } from '../../src/shared/messages.js';

export type InsertOutcome =
  | { status: 'stored' }
  | { status: 'duplicate' }
  | { status: 'stale' }
  | { status: 'deleted' };

/** The outcomes decided by what is stored already (`EventStore.settled`). */
export type SettledOutcome = Exclude<InsertOutcome, { status: 'stored' }>;

/** A stored event as returned by queries: its stored (canonical) JSON plus its sort keys. */
export type StoredEvent = { id: string; created_at: number; raw: string };

/** Expired events one alarm removes at most (each removal deletes its tag rows too); the next alarm comes at once for the rest. */
export const EXPIRY_BATCH = 500;

const SCHEMA = `
CREATE TABLE IF NOT EXISTS events (
  rid INTEGER PRIMARY KEY,
  id TEXT NOT NULL UNIQUE,
  pubkey TEXT NOT NULL,
  kind INTEGER NOT NULL,
  created_at INTEGER NOT NULL,
  d TEXT,
  expires_at INTEGER,
  raw TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS events_created ON events(created_at DESC, id);
-- The lists a filter may be driven by (query-sql.ts), each value's rows newest first, then by id, so
-- that a limit stops early. A shard made before them builds them when it wakes (docs/OPERATIONS.md
-- "Shards") and drops the two they replace.
CREATE INDEX IF NOT EXISTS events_by_author ON events(pubkey, created_at DESC, id);
CREATE INDEX IF NOT EXISTS events_by_author_kind ON events(pubkey, kind, created_at DESC, id);
CREATE INDEX IF NOT EXISTS events_by_kind ON events(kind, created_at DESC, id);
DROP INDEX IF EXISTS events_author_kind;
DROP INDEX IF EXISTS events_kind;
CREATE INDEX IF NOT EXISTS events_addr ON events(pubkey, kind, d) WHERE d IS NOT NULL;
CREATE INDEX IF NOT EXISTS events_expiry ON events(expires_at) WHERE expires_at IS NOT NULL;
CREATE TABLE IF NOT EXISTS tags (
  name TEXT NOT NULL,
  value TEXT NOT NULL,
  created_at INTEGER NOT NULL,
  rid INTEGER NOT NULL,
  PRIMARY KEY (name, value, created_at, rid)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS tags_rid ON tags(rid);
-- at: the created_at of the newest deletion by pubkey naming id (0: unknown, EventStore.dateDeletionRecords).
CREATE TABLE IF NOT EXISTS deleted_ids (
  id TEXT NOT NULL,
  pubkey TEXT NOT NULL,
  at INTEGER NOT NULL DEFAULT 0,
  PRIMARY KEY (id, pubkey)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS deleted_addrs (
  pubkey TEXT NOT NULL,
  kind INTEGER NOT NULL,
  d TEXT NOT NULL,
  until INTEGER NOT NULL,
  PRIMARY KEY (pubkey, kind, d)
) WITHOUT ROWID;
-- One row once deleted_ids is dated from the stored deletions (EventStore.dateDeletionRecords).
CREATE TABLE IF NOT EXISTS deleted_ids_dated (k INTEGER PRIMARY KEY CHECK (k = 1));
`;

/**
 * A request to vanish (removeAuthor) removes the rows of its key's deletions dated up to it: by
 * these, without a scan of everyone's rows or of the key's later ones. After the `at` column exists.
 */
const DELETION_INDEXES = `
CREATE INDEX IF NOT EXISTS deleted_ids_by_pubkey_at ON deleted_ids(pubkey, at);
DROP INDEX IF EXISTS deleted_ids_by_pubkey;
CREATE INDEX IF NOT EXISTS deleted_addrs_by_pubkey_until ON deleted_addrs(pubkey, until);
`;

/** The `d` coordinate of replaceable ('') and addressable (missing d = '') events; null otherwise. */
export function coordinateD(e: Pick<NostrEvent, 'kind' | 'tags'>): string | null {
  const c = kindClass(e.kind);
  if (c === 'replaceable') return '';
  if (c === 'addressable') return tagValue(e, 'd') ?? '';
  return null;
}

/** Whether `a` replaces `b` for the same coordinate: newer wins; equal created_at → lowest id wins. */
export const supersedes = (a: Pick<NostrEvent, 'created_at' | 'id'>, b: Pick<NostrEvent, 'created_at' | 'id'>): boolean =>
  a.created_at > b.created_at || (a.created_at === b.created_at && a.id < b.id);

/** Single-letter tag names and their first values, deduplicated: what the tag index holds. */
function indexedTags(e: NostrEvent): Array<[string, string]> {
  const seen = new Set<string>();
  const out: Array<[string, string]> = [];
  for (const t of e.tags) {
    const [name, value] = t;
    if (name === undefined || value === undefined || name.length !== 1) continue;
    const key = `${name}\u0000${value}`;
    if (seen.has(key)) continue;
    seen.add(key);
    out.push([name, value]);
  }
  return out;
}

/** Rows of the first phase of a query: what to send, in order, before any event JSON is read. */
type Candidate = { rid: number; id: string; created_at: number };

/** A stored event with the UTF-8 size of its JSON, as query statements return it. */
type SizedEvent = StoredEvent & { size: number };

/** What queries read: the rows SQLite read for their statements (cursor.rowsRead, index and table rows), added up. */
export interface ScanMeter {
  rows: number;
}

/**
 * The longest prefix of `rows` whose JSON (`size` bytes each) fits in `maxBytes` (at least one
 * row), and whether rows were left out for it (`cut`); reads no row past the first one left out.
 */
function withinBytes<Row extends { size: number }>(rows: Iterable<Row>, maxBytes: number): { kept: Row[]; cut: boolean } {
  const kept: Row[] = [];
  let bytes = 0;
  for (const row of rows) {
    bytes += row.size;
    if (bytes > maxBytes && kept.length > 0) return { kept, cut: true };
    kept.push(row);
  }
  return { kept, cut: false };
}

export class EventStore {
  constructor(private readonly sql: SqlStorage) {
    sql.exec(SCHEMA);
    if (sql.exec("SELECT 1 FROM pragma_table_info('deleted_ids') WHERE name = 'at'").toArray().length === 0) {
      sql.exec('ALTER TABLE deleted_ids ADD COLUMN at INTEGER NOT NULL DEFAULT 0');
    }
    sql.exec(DELETION_INDEXES);
    if (sql.exec('SELECT 1 FROM deleted_ids_dated').toArray().length === 0) this.dateDeletionRecords();
  }

  /**
   * Dates the deletion records of a shard made before `deleted_ids.at` (its rows read as 0, so any
   * request to vanish of their key removed them, and what they deleted could be published again):
   * each gets the newest created_at of its key's stored kind 5s whose `e` tag names its id (kind 5s
   * are kept for good). Once (`deleted_ids_dated`), when the shard wakes, as one statement: it reads
   * the stored kind 5s' `e` rows once (driven by kind, not by the ids, which other events may name
   * by the thousand) and looks each record up by its key: about 5 rows read and 5 µs a record (0.1 s
   * for 20,000 in relay-deletion-tables.test.ts, so some 5 s per million; docs/OPERATIONS.md
   * "Shards"). A record whose deletion is no longer stored (one that expired or that a retention rule
   * removed before deletion requests were kept for good) stays 0: its date is unknown, so any request
   * to vanish of its key removes it, as before, and the event it deleted may then be published again
   * if dated after that request. Taking the larger date makes it idempotent: an interrupted run is
   * done again at the next wake.
   */
  private dateDeletionRecords(): void {
    this.sql.exec(
      `UPDATE deleted_ids SET at = max(deleted_ids.at, k.at)
       FROM (SELECT e.pubkey AS pubkey, t.value AS id, max(e.created_at) AS at
             FROM events e CROSS JOIN tags t ON t.rid = e.rid AND t.name = 'e' -- CROSS: by kind first
             WHERE e.kind = ${KIND.DELETION} GROUP BY e.pubkey, t.value) AS k
       WHERE deleted_ids.id = k.id AND deleted_ids.pubkey = k.pubkey`,
    );
    this.sql.exec('INSERT INTO deleted_ids_dated (k) VALUES (1)');
  }

  /** Whether an event of this id is stored. */
  has(id: string): boolean {
    return this.sql.exec('SELECT 1 FROM events WHERE id = ?', id).toArray().length > 0;
  }

  /** Stores an event (already validated and admitted by policy). Runs in one transaction. */
  insert(e: NostrEvent, raw: string, storage: DurableObjectStorage): InsertOutcome {
    return storage.transactionSync(() => this.insertInTransaction(e, raw));
  }

  /**
   * What storing `e` answers when the events stored already decide it, without writing anything: a
   * duplicate (its id is stored), stale (a version of its coordinate at least as new is stored) or
   * deleted (a NIP-09 deletion covers it); undefined when `e` would be stored. The shard asks it
   * before any rate bucket is spent, so sending an event again costs nobody a token.
   */
  settled(e: NostrEvent): SettledOutcome | undefined {
    const sql = this.sql;
    if (e.kind !== KIND.DELETION && this.isDeleted(e)) return this.has(e.id) ? { status: 'duplicate' } : { status: 'deleted' };
    const d = coordinateD(e);
    if (d === null) return this.has(e.id) ? { status: 'duplicate' } : undefined;
    const deletedUntil = sql
      .exec<{ until: number }>('SELECT until FROM deleted_addrs WHERE pubkey = ? AND kind = ? AND d = ?', e.pubkey, e.kind, d)
      .toArray()[0]?.until;
    if (deletedUntil !== undefined && e.created_at <= deletedUntil) return { status: 'deleted' };
    const existing = this.versionsOf(e, d);
    if (existing.some((x) => x.id === e.id)) return { status: 'duplicate' };
    if (existing.some((x) => !supersedes(e, x))) return { status: 'stale' };
    return undefined;
  }

  /** The stored versions of the coordinate (`d`) of replaceable or addressable `e`. */
  private versionsOf(e: NostrEvent, d: string): Array<{ rid: number; id: string; created_at: number }> {
    return this.sql
      .exec<{ rid: number; id: string; created_at: number }>('SELECT rid, id, created_at FROM events WHERE pubkey = ? AND kind = ? AND d = ?', e.pubkey, e.kind, d)
      .toArray();
  }

  /**
   * `insert` for a caller that already holds the transaction (the shard's write batch): no savepoint
   * of its own, since a throw here fails the caller's whole transaction anyway.
   */
  insertInTransaction(e: NostrEvent, raw: string): InsertOutcome {
    const settled = this.settled(e);
    if (settled) return settled;
    const d = coordinateD(e);
    if (d !== null) for (const x of this.versionsOf(e, d)) this.removeRow(x.rid);
    // A duplicate id inserts nothing and returns no row.
    const inserted = this.sql
      .exec<{ rid: number }>(
        'INSERT INTO events (id, pubkey, kind, created_at, d, expires_at, raw) VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (id) DO NOTHING RETURNING rid',
        e.id,
        e.pubkey,
        e.kind,
        e.created_at,
        d,
        heldExpiration(e),
        raw,
      )
      .toArray()[0];
    if (!inserted) return { status: 'duplicate' };
    this.indexTags(inserted.rid, e);
    if (e.kind === KIND.DELETION) this.applyDeletion(e);
    return { status: 'stored' };
  }

  /** Writes the tag index rows of an event, several rows per statement (within the parameter limit). */
  private indexTags(rid: number, e: NostrEvent): void {
    const rows = indexedTags(e);
    const perStatement = Math.floor(MAX_BOUND_PARAMS / 4);
    for (let i = 0; i < rows.length; i += perStatement) {
      const chunk = rows.slice(i, i + perStatement);
      const params: Array<string | number> = [];
      for (const [name, value] of chunk) params.push(name, value, e.created_at, rid);
      this.sql.exec(`INSERT OR IGNORE INTO tags (name, value, created_at, rid) VALUES ${chunk.map(() => '(?, ?, ?, ?)').join(', ')}`, ...params);
    }
  }

  /**
   * Whether a NIP-09 deletion already covers this event id: one primary-key lookup per key that may
   * delete it (`deletersOf`), whatever number of other keys named the id.
   */
  private isDeleted(e: NostrEvent): boolean {
    const deleters = deletersOf(e);
    if (deleters.length === 0) return false;
    return (
      this.sql
        .exec('SELECT 1 FROM deleted_ids WHERE id = ? AND pubkey IN (SELECT value FROM json_each(?)) LIMIT 1', e.id, JSON.stringify(deleters))
        .toArray().length > 0
    );
  }

  private removeRow(rid: number): void {
    this.sql.exec('DELETE FROM tags WHERE rid = ?', rid);
    this.sql.exec('DELETE FROM events WHERE rid = ?', rid);
  }

  /**
   * NIP-09: `e` tags delete the author's events (or a gift wrap addressed to the deleter); `a` tags
   * delete versions up to the deletion's created_at. Who may delete what is decided from indexed
   * columns (pubkey, kind, the `p` tag index), never by reading stored JSON; the number of targets
   * is capped by the shard (`max_deletion_targets`) before this runs.
   */
  private applyDeletion(del: NostrEvent): void {
    const sql = this.sql;
    const { ids, found, coords, byCoordinate } = this.deletionScope(del);
    for (const r of found) if (r.deletable) this.removeRow(r.rid);
    if (ids.length > 0) {
      // Remembered for targets deleted now or not stored yet (so they cannot be added later).
      const kept = new Set(found.filter((r) => !r.deletable).map((r) => r.id));
      const remembered = ids.filter((id) => !kept.has(id));
      if (remembered.length > 0) {
        sql.exec(
          'INSERT INTO deleted_ids (id, pubkey, at) SELECT value, ?, ? FROM json_each(?) WHERE true ON CONFLICT (id, pubkey) DO UPDATE SET at = max(at, excluded.at)',
          del.pubkey,
          del.created_at,
          JSON.stringify(remembered),
        );
      }
    }
    for (const rid of byCoordinate) this.removeRow(rid);
    for (const coord of coords) {
      sql.exec(
        `INSERT INTO deleted_addrs (pubkey, kind, d, until) VALUES (?, ?, ?, ?)
         ON CONFLICT (pubkey, kind, d) DO UPDATE SET until = max(until, excluded.until)`,
        coord.pubkey,
        coord.kind,
        coord.d,
        del.created_at,
      );
    }
  }

  /** The stored events deletion `del` would remove now (what applyDeletion removes): their rids. */
  deletionTargets(del: Pick<NostrEvent, 'pubkey' | 'created_at' | 'tags'>): number[] {
    const { found, byCoordinate } = this.deletionScope(del);
    return [...new Set([...found.filter((r) => r.deletable).map((r) => r.rid), ...byCoordinate])];
  }

  /**
   * What deletion `del` names (NIP-09): its `e` ids, the stored events they find (and whether the
   * deleter may delete each), its own `a` coordinates, and the stored versions those cover.
   */
  private deletionScope(del: Pick<NostrEvent, 'pubkey' | 'created_at' | 'tags'>): {
    ids: string[];
    found: Array<{ rid: number; id: string; deletable: number }>;
    coords: Array<{ kind: number; pubkey: string; d: string }>;
    byCoordinate: number[];
  } {
    const sql = this.sql;
    const ids = [...new Set(tagValues(del, 'e').filter(isHex64))];
    const found =
      ids.length === 0
        ? []
        : sql
            .exec<{ rid: number; id: string; deletable: number }>(
              `SELECT e.rid, e.id,
                 (e.kind NOT IN (${KIND.DELETION}, ${KIND.VANISH}) AND (e.pubkey = ?1 OR (e.kind = ${KIND.GIFT_WRAP}
                   AND EXISTS (SELECT 1 FROM tags p WHERE p.rid = e.rid AND p.name = 'p' AND p.value = ?1)))) AS deletable
               FROM events e WHERE e.id IN (SELECT value FROM json_each(?2))`,
              del.pubkey,
              JSON.stringify(ids),
            )
            .toArray();
    const coords = new Map<string, { kind: number; pubkey: string; d: string }>();
    for (const a of tagValues(del, 'a')) {
      const coord = parseCoordinate(a);
      if (coord && coord.pubkey === del.pubkey) coords.set(`${coord.kind}:${coord.d}`, coord);
    }
    const byCoordinate: number[] = [];
    for (const coord of coords.values()) {
      const rows = sql.exec<{ rid: number }>('SELECT rid FROM events WHERE pubkey = ? AND kind = ? AND d = ? AND created_at <= ?', coord.pubkey, coord.kind, coord.d, del.created_at);
      for (const r of rows) byCoordinate.push(r.rid);
    }
    return { ids, found, coords: [...coords.values()], byCoordinate };
  }

  /**
   * Matching stored events for a REQ: newest first (ties by lowest id), at most `limit` per filter,
   * the union without duplicates, and no more than `maxBytes` of event JSON (the first event always
   * goes, so paging with `until` progresses). Each filter first picks its events from the indexes
   * (one statement each, after a probe when query-sql.ts must choose its driving list; no JSON
   * read), then one statement reads the JSON of the merged list, lazily, stopping at the first
   * event over the budget.
   */
  query(filters: readonly Filter[], limitOf: (f: Filter) => number, scope: ReadScope, maxBytes: number, meter?: ScanMeter): StoredEvent[] {
    const probe = this.probe(meter);
    const chosen = this.union<Candidate>(filters.map((f) => compileFilter(f, scope, limitOf(f), probe)), meter);
    if (chosen.length === 0) return [];
    chosen.sort(compareEvents);
    // CROSS JOIN keeps json_each as the outer loop: rows come in the order of the array.
    const rows = this.metered<SizedEvent>(
      meter,
      'SELECT e.id AS id, e.created_at AS created_at, e.raw AS raw, octet_length(e.raw) AS size FROM json_each(?) j CROSS JOIN events e ON e.rid = j.value',
      JSON.stringify(chosen.map((c) => c.rid)),
    );
    return withinBytes(rows, maxBytes).kept.map(({ id, created_at, raw }) => ({ id, created_at, raw }));
  }

  /** Runs query-sql.ts's probe statements (one row of counts), metered like the queries. */
  private probe(meter: ScanMeter | undefined): Probe {
    return (q) => {
      const [row] = [...this.metered<Record<string, number>>(meter, q.sql, ...q.params)];
      return row ?? {};
    };
  }

  /** The rows of a statement, read lazily; what SQLite read for them is added to `meter` once the reading ends (or stops). */
  private *metered<Row extends Record<string, SqlStorageValue>>(meter: ScanMeter | undefined, sql: string, ...params: unknown[]): Generator<Row> {
    const cursor = this.sql.exec<Row>(sql, ...params);
    try {
      yield* cursor;
    } finally {
      if (meter) meter.rows += cursor.rowsRead;
    }
  }

  /**
   * NIP-45: number of distinct stored events matching any of the filters (their limits ignored),
   * counting at most `max` (RelayLimits.max_count): past it, the number counted so far, approximate.
   * One filter is counted by SQLite; several read at most `max` + 1 rows in all (their union).
   */
  count(filters: readonly Filter[], scope: ReadScope, max: number, meter?: ScanMeter): CountedEvents {
    const probe = this.probe(meter);
    const compiled = filters.map((f) => compileFilter(f, scope, undefined, probe)).filter((q) => q !== undefined);
    const bound = Math.floor(max) + 1; // an integer from the validated limits, written into the statement (no parameter)
    if (compiled.length === 1) {
      const q = compiled[0]!;
      const [row] = [...this.metered<{ n: number }>(meter, `SELECT count(*) AS n FROM (SELECT rid FROM (${q.sql}) LIMIT ${bound})`, ...q.params)];
      const n = row!.n;
      return n > max ? { count: max, approximate: true } : { count: n, approximate: false };
    }
    const seen = new Set<number>();
    let read = 0;
    for (const q of compiled) {
      for (const { rid } of this.metered<{ rid: number }>(meter, `SELECT rid FROM (${q.sql}) LIMIT ${bound - read}`, ...q.params)) {
        seen.add(rid);
        read += 1;
      }
      if (read >= bound) return { count: Math.min(seen.size, max), approximate: true };
    }
    return { count: seen.size, approximate: false };
  }

  /** The rows of several statements (undefined: cannot match), each event once: the first row with its rid, in statement order. */
  private union<Row extends { rid: number }>(queries: ReadonlyArray<CompiledQuery | undefined>, meter: ScanMeter | undefined): Row[] {
    const seen = new Set<number>();
    const rows: Row[] = [];
    for (const q of queries) {
      if (!q) continue;
      for (const row of this.metered<Row>(meter, q.sql, ...q.params)) {
        if (seen.has(row.rid)) continue;
        seen.add(row.rid);
        rows.push(row);
      }
    }
    return rows;
  }

  /**
   * Removes at most `batch` expired events (many can expire in the same second); returns the next
   * expiry still pending, if any: at or before `now` while expired ones remain (the alarm comes back at once).
   * A kind kept for good (`KEPT_FOR_GOOD`) stored with an expiration before `keptForGood` refused one
   * is not removed (its deletion rows would outlive it): its expiration is dropped instead.
   */
  purgeExpired(now: number, batch = EXPIRY_BATCH): number | undefined {
    const rows = this.sql
      .exec<{ rid: number; kind: number }>('SELECT rid, kind FROM events WHERE expires_at IS NOT NULL AND expires_at <= ? ORDER BY expires_at LIMIT ?', now, batch)
      .toArray();
    for (const r of rows) {
      if (KEPT_FOR_GOOD.has(r.kind)) this.sql.exec('UPDATE events SET expires_at = NULL WHERE rid = ?', r.rid);
      else this.removeRow(r.rid);
    }
    return this.sql
      .exec<{ next: number | null }>('SELECT min(expires_at) AS next FROM events WHERE expires_at IS NOT NULL')
      .one().next ?? undefined;
  }

  /**
   * Export order (oldest first, ties by id): unexpired events with `since <= created_at <= until`
   * after the cursor `after` (the last event of the previous page), none pending removal when
   * `vanishing`, at most `limit` of them and `maxBytes` of their JSON (at least one event). The
   * page is chosen from the index and the JSON's stored length (octet_length reads no JSON), with a
   * running total that stops at the first event over the budget; then only the chosen events' JSON
   * is read. `full`: the page stopped at one of the bounds (more may follow).
   */
  page(
    range: { since: number; until: number; after?: { created_at: number; id: string } },
    limit: number,
    maxBytes: number,
    { now, vanishing }: Omit<ReadScope, 'readers'>,
  ): { events: StoredEvent[]; full: boolean } {
    const after = range.after ?? { created_at: range.since - 1, id: '' };
    const sized = this.sql.exec<{ rid: number; size: number }>(
      `SELECT e.rid AS rid, octet_length(e.raw) AS size FROM events e
       WHERE e.created_at >= ?1 AND e.created_at <= ?2 AND (e.created_at > ?3 OR (e.created_at = ?3 AND e.id > ?4))
         AND (e.expires_at IS NULL OR e.expires_at > ?5)${vanishing ? ` AND ${pendingRemovalHiddenSql}` : ''}
       ORDER BY e.created_at, e.id LIMIT ?6`,
      range.since,
      range.until,
      after.created_at,
      after.id,
      now,
      limit,
    );
    const { kept, cut } = withinBytes(sized, maxBytes);
    if (kept.length === 0) return { events: [], full: false };
    // CROSS JOIN keeps json_each as the outer loop: rows come in the order of the array.
    const events = this.sql
      .exec<StoredEvent>(
        'SELECT e.id AS id, e.created_at AS created_at, e.raw AS raw FROM json_each(?) j CROSS JOIN events e ON e.rid = j.value',
        JSON.stringify(kept.map((r) => r.rid)),
      )
      .toArray();
    return { events, full: cut || kept.length === limit };
  }

  /** Removes at most `batch` events of `kinds` created before `before` (unix seconds); returns how many. */
  purgeOlder(kinds: readonly number[], before: number, batch: number): number {
    const rows = this.sql
      .exec<{ rid: number }>(
        'SELECT rid FROM events WHERE kind IN (SELECT value FROM json_each(?)) AND created_at < ? LIMIT ?',
        JSON.stringify(kinds),
        before,
        batch,
      )
      .toArray();
    for (const r of rows) this.removeRow(r.rid);
    return rows.length;
  }

  /**
   * NIP-62: removes at most `batch` of the events of `pubkey` created at or before `until` (its
   * deletions included) and the gift wraps addressed to it, except its request to vanish (kind 62
   * at `until`); once none is left, also the records of its deletions dated up to `until` (a row
   * stays while a later deletion of the key names it), found by their (pubkey, date) indexes and
   * counted in `batch` with the events (a key may have made millions). Returns how many events and
   * records it removed (fewer than `batch`: it is done).
   */
  removeAuthor(pubkey: string, until: number, batch: number): number {
    const sql = this.sql;
    const rids = sql
      .exec<{ rid: number }>(
        `SELECT rid FROM events WHERE pubkey = ?1 AND created_at <= ?2 AND NOT (kind = ${KIND.VANISH} AND created_at = ?2)
         UNION SELECT e.rid FROM tags t JOIN events e ON e.rid = t.rid
           WHERE t.name = 'p' AND t.value = ?1 AND e.kind = ${KIND.GIFT_WRAP} AND e.created_at <= ?2
         LIMIT ?3`,
        pubkey,
        until,
        batch,
      )
      .toArray();
    for (const r of rids) this.removeRow(r.rid);
    let removed = rids.length;
    if (removed < batch) {
      removed += sql
        .exec(
          'DELETE FROM deleted_ids WHERE pubkey = ?1 AND id IN (SELECT id FROM deleted_ids WHERE pubkey = ?1 AND at <= ?2 LIMIT ?3) RETURNING 1',
          pubkey,
          until,
          batch - removed,
        )
        .toArray().length;
    }
    if (removed < batch) {
      removed += sql
        .exec(
          'DELETE FROM deleted_addrs WHERE (pubkey, kind, d) IN (SELECT pubkey, kind, d FROM deleted_addrs WHERE pubkey = ?1 AND until <= ?2 LIMIT ?3) RETURNING 1',
          pubkey,
          until,
          batch - removed,
        )
        .toArray().length;
    }
    return removed;
  }

  /** Number of stored events (used by tests and the operations endpoint). */
  size(): number {
    return this.sql.exec<{ n: number }>('SELECT count(*) AS n FROM events').one().n;
  }
}

/** NIP-09 (a `rejectEvent` hook, policy.ts): a deletion names at most `max_deletion_targets` events (`e` and `a` tags). */
export const deletionTargetsCap: RejectEventHook = (e, { limits }) =>
  e.kind === KIND.DELETION && e.tags.filter((t) => t[0] === 'e' || t[0] === 'a').length > limits.max_deletion_targets
    ? reject('invalid', `a deletion may name at most ${limits.max_deletion_targets} events`)
    : undefined;

/**
 * The keys that may delete `e` (the SQL form in applyDeletion decides the same from the index): its
 * author, and the p-tagged recipients of a gift wrap; none for a deletion or a request to vanish.
 */
export function deletersOf(e: Pick<NostrEvent, 'pubkey' | 'kind' | 'tags'>): string[] {
  if (e.kind === KIND.DELETION || e.kind === KIND.VANISH) return [];
  if (e.kind !== KIND.GIFT_WRAP) return [e.pubkey];
  return [...new Set([e.pubkey, ...tagValues(e, 'p')])];
}

/**
 * The kinds a shard keeps for good, with what they are called in refusals. Their effect is permanent
 * (a NIP-09 deletion's: "deleted events cannot be re-added"; NIP-62's: vanished events are refused
 * for good), and so are the rows recording it (`deleted_ids`, `deleted_addrs`, `vanished`). So that
 * those rows never outlive the request that made them (whose bytes the owner's plan counts), such a
 * request may not expire (`keptForGood`) nor be named by a retention rule (retention.ts); only its
 * author's request to vanish removes one (with its deletion records, `removeAuthor`).
 */
export const KEPT_FOR_GOOD: ReadonlyMap<number, { what: string; nip: string }> = new Map([
  [KIND.DELETION, { what: 'a deletion request', nip: 'NIP-09' }],
  [KIND.VANISH, { what: 'a request to vanish', nip: 'NIP-62' }],
]);

/**
 * A `rejectEvent` hook (policy.ts): a kind kept for good may not carry a NIP-40 expiration. In a
 * restore it may: a backup made before this rule holds such requests as shards stored them (the
 * purge kept them, clearing only their expiration, `purgeExpired`), and refusing one would let
 * anyone publish again what it deleted; it is stored without its expiration (`heldExpiration`).
 */
export const keptForGood: RejectEventHook = (e, { restoring }) => {
  const kept = KEPT_FOR_GOOD.get(e.kind);
  return kept && !restoring && expirationOf(e) !== null ? reject('invalid', `${kept.what} (${kept.nip}) is kept for good: publish it without an expiration tag`) : undefined;
};

/** The NIP-40 expiration a shard holds `e` to: its tag's, none for a kind kept for good (`keptForGood`). */
export const heldExpiration = (e: NostrEvent): number | null => (KEPT_FOR_GOOD.has(e.kind) ? null : expirationOf(e));

/** Whether `deleter` may delete `e` (`deletersOf`). */
export const mayDelete = (deleter: string, e: Pick<NostrEvent, 'pubkey' | 'kind' | 'tags'>): boolean => deletersOf(e).includes(deleter);

/** Parses an `a` coordinate "kind:pubkey:d" (d may contain colons). */
export function parseCoordinate(a: string): { kind: number; pubkey: string; d: string } | undefined {
  const m = /^(\d{1,5}):([0-9a-f]{64}):(.*)$/s.exec(a);
  if (!m) return undefined;
  const kind = Number(m[1]);
  const c = kindClass(kind);
  if (c !== 'replaceable' && c !== 'addressable') return undefined;
  return { kind, pubkey: m[2]!, d: c === 'replaceable' ? '' : m[3]! };
}
