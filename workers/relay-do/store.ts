// Event storage of one shard in the Durable Object's SQLite: schema, insert with the replace /
// delete / expiry rules of DESIGN.md's kind policy, and filter queries compiled to SQL (chunked so
// that no statement binds more than 100 parameters).

import type { NostrEvent } from '../../src/shared/event.js';
import { tagValue } from '../../src/shared/event.js';
import { compareEvents, tagFilters, type Filter } from '../../src/shared/filters.js';
import { KIND, kindClass } from '../../src/shared/kinds.js';
import { isHex64 } from '../../src/shared/hex.js';
import { readableKindsSql } from './visibility.js';

/** SQLite in Durable Objects binds at most 100 parameters per statement; keep headroom. */
export const MAX_BOUND_PARAMS = 100;

export type InsertOutcome =
  | { status: 'stored' }
  | { status: 'duplicate' }
  | { status: 'stale' }
  | { status: 'deleted' };

/** A stored event as returned by queries: the exact JSON received plus its sort keys. */
export interface StoredEvent {
  id: string;
  created_at: number;
  raw: string;
}

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
CREATE INDEX IF NOT EXISTS events_author_kind ON events(pubkey, kind, created_at DESC);
CREATE INDEX IF NOT EXISTS events_kind ON events(kind, created_at DESC);
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
CREATE TABLE IF NOT EXISTS deleted_ids (
  id TEXT NOT NULL,
  pubkey TEXT NOT NULL,
  PRIMARY KEY (id, pubkey)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS deleted_addrs (
  pubkey TEXT NOT NULL,
  kind INTEGER NOT NULL,
  d TEXT NOT NULL,
  until INTEGER NOT NULL,
  PRIMARY KEY (pubkey, kind, d)
) WITHOUT ROWID;
`;

/** The `d` coordinate of replaceable ('') and addressable (missing d = '') events; null otherwise. */
export function coordinateD(e: Pick<NostrEvent, 'kind' | 'tags'>): string | null {
  const c = kindClass(e.kind);
  if (c === 'replaceable') return '';
  if (c === 'addressable') return tagValue(e, 'd') ?? '';
  return null;
}

/** The NIP-40 expiration timestamp, when the event carries a well-formed one. */
export function expirationOf(e: Pick<NostrEvent, 'tags'>): number | null {
  const v = tagValue(e, 'expiration');
  return v !== undefined && /^\d{1,10}$/.test(v) ? Number(v) : null;
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

/** Splits a filter so that each piece binds at most `budget` parameters; the union of the pieces' matches equals the filter's. */
export function chunkFilter(f: Filter, budget: number): Filter[] {
  const lists: Array<[string, string[]]> = [];
  if (f.ids) lists.push(['ids', f.ids]);
  if (f.authors) lists.push(['authors', f.authors]);
  for (const [letter, values] of tagFilters(f)) lists.push([`#${letter}`, values]);
  const count = lists.reduce((n, [, v]) => n + v.length, 0);
  if (count <= budget) return [f];
  const [key, longest] = lists.reduce((a, b) => (b[1].length > a[1].length ? b : a));
  const size = Math.max(1, budget - (count - longest.length));
  const out: Filter[] = [];
  for (let i = 0; i < longest.length; i += size) {
    out.push(...chunkFilter({ ...f, [key]: longest.slice(i, i + size) }, budget));
  }
  return out;
}

interface CompiledQuery {
  sql: string;
  params: Array<string | number>;
}

const placeholders = (n: number) => Array.from({ length: n }, () => '?').join(',');

export class EventStore {
  constructor(private readonly sql: SqlStorage) {
    sql.exec(SCHEMA);
  }

  /** Stores an event (already validated and admitted by policy). Runs in one transaction. */
  insert(e: NostrEvent, raw: string, storage: DurableObjectStorage): InsertOutcome {
    return storage.transactionSync(() => this.insertInTransaction(e, raw));
  }

  private insertInTransaction(e: NostrEvent, raw: string): InsertOutcome {
    const sql = this.sql;
    if (e.kind !== KIND.DELETION && this.isDeleted(e)) {
      return sql.exec('SELECT 1 FROM events WHERE id = ?', e.id).toArray().length ? { status: 'duplicate' } : { status: 'deleted' };
    }
    const d = coordinateD(e);
    if (d !== null) {
      const deletedUntil = sql
        .exec<{ until: number }>('SELECT until FROM deleted_addrs WHERE pubkey = ? AND kind = ? AND d = ?', e.pubkey, e.kind, d)
        .toArray()[0]?.until;
      if (deletedUntil !== undefined && e.created_at <= deletedUntil) return { status: 'deleted' };
      const existing = sql
        .exec<{ rid: number; id: string; created_at: number }>(
          'SELECT rid, id, created_at FROM events WHERE pubkey = ? AND kind = ? AND d = ?',
          e.pubkey,
          e.kind,
          d,
        )
        .toArray();
      if (existing.some((x) => x.id === e.id)) return { status: 'duplicate' };
      if (existing.some((x) => !supersedes(e, x))) return { status: 'stale' };
      for (const x of existing) this.removeRow(x.rid);
    }
    // A duplicate id inserts nothing and returns no row.
    const inserted = sql
      .exec<{ rid: number }>(
        'INSERT INTO events (id, pubkey, kind, created_at, d, expires_at, raw) VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (id) DO NOTHING RETURNING rid',
        e.id,
        e.pubkey,
        e.kind,
        e.created_at,
        d,
        expirationOf(e),
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

  /** Whether a NIP-09 deletion already covers this event id (by its author, or by the recipient of a gift wrap). */
  private isDeleted(e: NostrEvent): boolean {
    const deleters = this.sql
      .exec<{ pubkey: string }>('SELECT pubkey FROM deleted_ids WHERE id = ?', e.id)
      .toArray()
      .map((r) => r.pubkey);
    return deleters.some((p) => mayDelete(p, e));
  }

  private removeRow(rid: number): void {
    this.sql.exec('DELETE FROM tags WHERE rid = ?', rid);
    this.sql.exec('DELETE FROM events WHERE rid = ?', rid);
  }

  /** NIP-09: `e` tags delete the author's events (or a gift wrap addressed to the deleter); `a` tags delete versions up to the deletion's created_at. */
  private applyDeletion(del: NostrEvent): void {
    const sql = this.sql;
    for (const t of del.tags) {
      if (t[0] === 'e' && t[1] && isHex64(t[1])) {
        const target = sql.exec<{ rid: number; raw: string }>('SELECT rid, raw FROM events WHERE id = ?', t[1]).toArray()[0];
        if (target) {
          const ev = JSON.parse(target.raw) as NostrEvent;
          if (ev.kind === KIND.DELETION || !mayDelete(del.pubkey, ev)) continue;
          this.removeRow(target.rid);
        }
        sql.exec('INSERT OR IGNORE INTO deleted_ids (id, pubkey) VALUES (?, ?)', t[1], del.pubkey);
      } else if (t[0] === 'a' && t[1]) {
        const coord = parseCoordinate(t[1]);
        if (!coord || coord.pubkey !== del.pubkey) continue;
        const rows = sql
          .exec<{ rid: number }>(
            'SELECT rid FROM events WHERE pubkey = ? AND kind = ? AND d = ? AND created_at <= ?',
            coord.pubkey,
            coord.kind,
            coord.d,
            del.created_at,
          )
          .toArray();
        for (const r of rows) this.removeRow(r.rid);
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
  }

  /** Matching stored events for a REQ, newest first, at most `limit` per filter. */
  query(filters: readonly Filter[], limitOf: (f: Filter) => number, readers: readonly string[], now: number): StoredEvent[] {
    const seen = new Set<string>();
    const out: StoredEvent[] = [];
    for (const f of filters) {
      const limit = limitOf(f);
      if (limit === 0) continue;
      const rows: StoredEvent[] = [];
      for (const piece of chunkFilter(f, MAX_BOUND_PARAMS - 8 - 2 * readers.length)) {
        const q = this.compile(piece, readers, now, 'SELECT DISTINCT e.id, e.created_at, e.raw', limit);
        rows.push(...this.sql.exec<{ id: string; created_at: number; raw: string }>(q.sql, ...q.params).toArray());
      }
      rows.sort(compareEvents);
      let taken = 0;
      for (const r of rows) {
        if (taken >= limit) break;
        if (seen.has(r.id)) continue;
        seen.add(r.id);
        out.push(r);
        taken++;
      }
    }
    return filters.length > 1 ? out.sort(compareEvents) : out;
  }

  /** NIP-45: number of distinct stored events matching any of the filters (limits ignored). */
  count(filters: readonly Filter[], readers: readonly string[], now: number): number {
    const rids = new Set<number>();
    for (const f of filters) {
      for (const piece of chunkFilter(f, MAX_BOUND_PARAMS - 8 - 2 * readers.length)) {
        const q = this.compile(piece, readers, now, 'SELECT DISTINCT e.rid', undefined);
        for (const r of this.sql.exec<{ rid: number }>(q.sql, ...q.params)) rids.add(r.rid);
      }
    }
    return rids.size;
  }

  private compile(f: Filter, readers: readonly string[], now: number, select: string, limit: number | undefined): CompiledQuery {
    const where: string[] = [];
    const params: Array<string | number> = [];
    const tags = tagFilters(f);
    let from = 'events e';
    // The most selective tag filter drives the query through the tag index; the others are EXISTS checks.
    tags.sort((a, b) => a[1].length - b[1].length);
    const driver = tags.shift();
    if (driver) {
      if (driver[1].length === 0) return { sql: `${select} FROM events e WHERE 0`, params: [] };
      from = 'tags t JOIN events e ON e.rid = t.rid';
      where.push(`t.name = ? AND t.value IN (${placeholders(driver[1].length)})`);
      params.push(driver[0], ...driver[1]);
    }
    for (const [name, values] of tags) {
      if (values.length === 0) return { sql: `${select} FROM events e WHERE 0`, params: [] };
      where.push(`EXISTS (SELECT 1 FROM tags x WHERE x.rid = e.rid AND x.name = ? AND x.value IN (${placeholders(values.length)}))`);
      params.push(name, ...values);
    }
    if (f.ids) {
      where.push(`e.id IN (${placeholders(f.ids.length)})`);
      params.push(...f.ids);
    }
    if (f.authors) {
      where.push(`e.pubkey IN (${placeholders(f.authors.length)})`);
      params.push(...f.authors);
    }
    if (f.kinds) where.push(`e.kind IN (${f.kinds.map((k) => Math.trunc(k)).join(',') || 'NULL'})`);
    if (f.since !== undefined) {
      where.push(driver ? 't.created_at >= ?' : 'e.created_at >= ?');
      params.push(f.since);
    }
    if (f.until !== undefined) {
      where.push(driver ? 't.created_at <= ?' : 'e.created_at <= ?');
      params.push(f.until);
    }
    where.push('(e.expires_at IS NULL OR e.expires_at > ?)');
    params.push(now);
    const visible = readableKindsSql(readers);
    where.push(visible.sql);
    params.push(...visible.params);
    let sql = `${select} FROM ${from} WHERE ${where.join(' AND ')}`;
    if (limit !== undefined) {
      sql += driver ? ' ORDER BY t.created_at DESC, e.id ASC LIMIT ?' : ' ORDER BY e.created_at DESC, e.id ASC LIMIT ?';
      params.push(limit);
    }
    return { sql, params };
  }

  /** Removes expired events; returns the next expiry still pending, if any. */
  purgeExpired(now: number): number | undefined {
    const rows = this.sql.exec<{ rid: number }>('SELECT rid FROM events WHERE expires_at IS NOT NULL AND expires_at <= ?', now).toArray();
    for (const r of rows) this.removeRow(r.rid);
    return this.sql
      .exec<{ next: number | null }>('SELECT min(expires_at) AS next FROM events WHERE expires_at IS NOT NULL')
      .one().next ?? undefined;
  }

  /** Number of stored events (used by tests and the operations endpoint). */
  size(): number {
    return this.sql.exec<{ n: number }>('SELECT count(*) AS n FROM events').one().n;
  }
}

/** Whether `deleter` may delete `e`: its author, or the p-tagged recipient of a gift wrap. */
export function mayDelete(deleter: string, e: Pick<NostrEvent, 'pubkey' | 'kind' | 'tags'>): boolean {
  if (e.kind === KIND.DELETION) return false;
  if (e.pubkey === deleter) return true;
  return e.kind === KIND.GIFT_WRAP && e.tags.some((t) => t[0] === 'p' && t[1] === deleter);
}

/** Parses an `a` coordinate "kind:pubkey:d" (d may contain colons). */
export function parseCoordinate(a: string): { kind: number; pubkey: string; d: string } | undefined {
  const m = /^(\d{1,5}):([0-9a-f]{64}):(.*)$/s.exec(a);
  if (!m) return undefined;
  const kind = Number(m[1]);
  const c = kindClass(kind);
  if (c !== 'replaceable' && c !== 'addressable') return undefined;
  return { kind, pubkey: m[2]!, d: c === 'replaceable' ? '' : m[3]! };
}
