// The query compiler of the event store: one NIP-01 filter → one SQLite statement over the events
// and tags tables (store.ts), with the reader's visibility (read-policy.ts) and what a pending
// NIP-62 removal hides (vanish.ts) in its WHERE clause. The statement selects the matches' rid, id
// and created_at (never their JSON: store.ts reads that for the chosen rows only).
//
// The plan. One list of the filter drives the statement through an index that holds, for each of
// its values, the rows newest first (created_at DESC, then id); the other lists are checks on each
// row. With a limit, SQLite then reads each value's rows only while they can still be among the
// newest `limit` (it leaves a value at its first row older than all the rows it keeps), so a
// value costs about `limit` rows plus the rows the checks reject, never all its matches. The
// driver:
//   1. `ids` when given (the unique id index: at most one row per id);
//   2. otherwise the candidates are `authors` (index events_by_author; with kinds, events_by_author_kind
//      over each (author, kind) pair), `kinds` when there are no authors (events_by_kind), and each
//      tag list (the tags table's key: name, value, created_at). One candidate drives. Several are
//      first counted by a probe (each candidate's index rows within since/until, at most
//      PROBE_ROWS / candidates each, and with a limit at most 4 × limit, at least 64) and the one
//      with the fewest rows drives; ties (typically every candidate at its cap) go to the fewest
//      index seeks (values; authors × kinds for the pairs), then to the probe order. The probe counts
//      one candidate at a time, the likely smallest first (lists of keys or ids: authors, #p, #e…;
//      then other tag lists; then kinds; never the filter's key order), each only as far as it can
//      still win: up to the fewest rows counted so far, one row further if it wins their tie;
//   3. no list: events_created (created_at DESC, id), read newest first.
// The tag index orders equal created_at by rid, not id: a tag list of several values with a limit
// runs one subquery per value (each with its own limit, ties sorted by id) and sorts their union
// again (at most values × limit rows). Whatever the plan, the statement's WHERE, ORDER BY
// created_at DESC, id and LIMIT say exactly what NIP-01 asks; the plan only decides what it reads.
//
// The work is linear in the filter's size: long value lists bind one JSON array each, so no
// statement binds more than MAX_BOUND_PARAMS parameters, and nothing is split into a product of
// statements or parameters (the author × kind pairs are index seeks of one statement).

import { dedupeFilter, tagFilters, type Filter } from '../../src/shared/filters.js';
import { isHex64 } from '../../src/shared/hex.js';
import { readRule } from '../../src/shared/kinds.js';
import { readableKindsSql } from './read-policy.js';
import { pendingRemovalHiddenSql } from './vanish.js';

/** SQLite in Durable Objects binds at most 100 parameters per statement; keep headroom. */
export const MAX_BOUND_PARAMS = 100;

/** What the probe of several candidate drivers reads at most, in all (index rows; see the header). */
export const PROBE_ROWS = 1_000;

/**
 * With a limit, a candidate is counted up to PROBE_PER_LIMIT × limit rows (at least PROBE_MIN): a
 * driver is read only until `limit` rows pass the other checks, so counts past a few times the
 * limit tell little, and a recipient asking for its last 10 messages should not pay 1,000 rows.
 */
const PROBE_PER_LIMIT = 4;
const PROBE_MIN = 64;

/**
 * Who reads and when: the connection's authenticated keys (read-policy.ts), the time that decides
 * NIP-40 expiry, and whether a NIP-62 removal is pending (then its events are hidden; vanish.ts).
 */
export interface ReadScope {
  readers: readonly string[];
  now: number;
  vanishing: boolean;
}

export interface CompiledQuery {
  sql: string;
  params: Array<string | number>;
}

/** Runs a probe statement and returns its one row: the count of the candidate at place i of the probe order, as column n<i>. */
export type Probe = (q: CompiledQuery) => Readonly<Record<string, number>>;

/** Lists up to this long bind one parameter per value (`IN (?,?)` plans best); longer ones bind one JSON array. */
const PLAIN_LIST_MAX = 16;

/** A value list as SQL: `expr IN (?,…)` or `expr IN (SELECT value FROM json_each(?))`. */
function inList(expr: string, values: readonly (string | number)[], plain: boolean): CompiledQuery {
  if (plain) return { sql: `${expr} IN (${values.map(() => '?').join(',')})`, params: [...values] };
  return { sql: `${expr} IN (SELECT value FROM json_each(?))`, params: [JSON.stringify(values)] };
}

/**
 * Which lists bind their values one by one: the shortest first, while the statement stays within
 * MAX_BOUND_PARAMS (every list costs at least one parameter, the rest are `reserved`).
 */
function plainLists(lengths: readonly number[], reserved: number): boolean[] {
  let spare = MAX_BOUND_PARAMS - reserved - lengths.length;
  const plain = lengths.map(() => false);
  const order = lengths.map((n, i) => [n, i] as const).sort((a, b) => a[0] - b[0]);
  for (const [n, i] of order) {
    if (n > PLAIN_LIST_MAX || n - 1 > spare) break;
    plain[i] = true;
    spare -= n - 1;
  }
  return plain;
}

/** A tag letter is inlined in SQL: only a single ASCII letter may get there. */
const tagLiteral = (letter: string): string => {
  if (!/^[a-zA-Z]$/.test(letter)) throw new Error(`not a tag letter: ${JSON.stringify(letter)}`);
  return `'${letter}'`;
};

/** Kinds are inlined in SQL as integers (validated by the filter schema). */
const kindList = (kinds: readonly number[]): string => kinds.map((k) => Math.trunc(k)).join(',');

/** The index of the events table each driver walks (store.ts's schema; ids: SQLite's index of the UNIQUE id); `pairs`: authors with kinds. */
const EVENT_INDEX = {
  ids: 'sqlite_autoindex_events_1',
  authors: 'events_by_author',
  pairs: 'events_by_author_kind',
  kinds: 'events_by_kind',
  time: 'events_created',
} as const;

/** The list a statement walks through its index (see the header). */
type Driver =
  | { by: 'ids'; values: readonly string[] }
  | { by: 'authors'; values: readonly string[]; kinds?: readonly number[] }
  | { by: 'kinds'; values: readonly number[] }
  | { by: 'tag'; letter: string; values: readonly string[] }
  | { by: 'time' };

/** A driver the probe can count: one of several candidates (see the header). */
type Candidate = Extract<Driver, { by: 'authors' | 'kinds' | 'tag' }>;

/** The index seeks a candidate makes: one per value (per author × kind pair for authors with kinds). */
const seeks = (d: Candidate): number => d.values.length * (d.by === 'authors' && d.kinds ? d.kinds.length : 1);

/** How likely a candidate is to have few rows (lower: likelier): keys and ids name few events each, kinds many. */
const likelySmall = (d: Candidate): number => (d.by === 'kinds' ? 2 : d.by === 'authors' || d.values.every(isHex64) ? 0 : 1);

/** The probe order (see the header): likely smallest first, then fewer seeks, then by name. */
function probeOrder(a: Candidate, b: Candidate): number {
  const name = (d: Candidate) => (d.by === 'tag' ? `#${d.letter}` : d.by);
  return likelySmall(a) - likelySmall(b) || seeks(a) - seeks(b) || (name(a) < name(b) ? -1 : name(a) > name(b) ? 1 : 0);
}

/**
 * The probe of the candidate at place i of the probe order: a statement whose column n<i> counts
 * its index rows within since/until, up to `cap` (numbered parameters: ?1 since, ?2 until, ?3 its
 * list unless kinds, which are inlined).
 */
function probeStatement(f: Filter, d: Candidate, i: number, cap: number): CompiledQuery {
  const params: Array<string | number> = [f.since ?? 0, f.until ?? Number.MAX_SAFE_INTEGER];
  if (d.by !== 'kinds') params.push(JSON.stringify(d.values));
  const range = 'created_at >= ?1 AND created_at <= ?2';
  const list = 'IN (SELECT value FROM json_each(?3))';
  const rows =
    d.by === 'tag'
      ? `SELECT 1 FROM tags WHERE name = ${tagLiteral(d.letter)} AND value ${list} AND ${range}`
      : d.by === 'kinds'
        ? `SELECT 1 FROM events INDEXED BY ${EVENT_INDEX.kinds} WHERE kind IN (${kindList(d.values)}) AND ${range}`
        : d.kinds
          ? `SELECT 1 FROM events INDEXED BY ${EVENT_INDEX.pairs} WHERE pubkey ${list} AND kind IN (${kindList(d.kinds)}) AND ${range}`
          : `SELECT 1 FROM events INDEXED BY ${EVENT_INDEX.authors} WHERE pubkey ${list} AND ${range}`;
  return { sql: `SELECT count(*) AS n${i} FROM (${rows} LIMIT ${cap})`, params };
}

/**
 * The driver of a (deduplicated, satisfiable) filter, see the header: its ids; else its only
 * candidate, or of several the one the probe found fewest rows for (ties: fewer index seeks, then
 * the probe order); else the created_at index.
 */
function chooseDriver(f: Filter, limit: number | undefined, probe: Probe): Driver {
  if (f.ids) return { by: 'ids', values: f.ids };
  const all: Candidate[] = tagFilters(f).map(([letter, values]) => ({ by: 'tag', letter, values }));
  if (f.authors) all.push(f.kinds ? { by: 'authors', values: f.authors, kinds: f.kinds } : { by: 'authors', values: f.authors });
  else if (f.kinds) all.push({ by: 'kinds', values: f.kinds });
  if (all.length <= 1) return all[0] ?? { by: 'time' };
  const share = Math.max(1, Math.floor(PROBE_ROWS / all.length));
  const cap = limit === undefined ? share : Math.min(share, Math.max(PROBE_MIN, PROBE_PER_LIMIT * limit));
  all.sort(probeOrder);
  let best = { d: all[0]!, rows: Infinity };
  for (const [i, d] of all.entries()) {
    // Counted only as far as it can win: reaching the fewest rows so far it loses, unless it wins their tie.
    const winsTie = seeks(d) < seeks(best.d);
    const rows = probe(probeStatement(f, d, i, Math.min(cap, best.rows + (winsTie ? 1 : 0))))[`n${i}`] ?? Infinity;
    if (rows < best.rows || (rows === best.rows && winsTie)) best = { d, rows };
    if (best.rows === 0) break;
  }
  return best.d;
}

/** A value list of a filter checked on each row (or walked, for the driver): the column it constrains and the clause around the `IN`. */
interface ListClause {
  expr: string;
  values: readonly (string | number)[];
  wrap: (inList: string) => string;
}

/**
 * `f` narrowed to what its readers may see where one tag list says it exactly: kinds that only their
 * p-tagged recipients read (gift wraps), asked without a `#p` of their own, are asked with `#p` = the
 * readers (none: nothing), so the tag index drives through the readers' own events instead of
 * walking everyone's (an audit measured 30,000 rows read to answer a stranger's `{kinds:[1059]}`
 * with nothing). A filter with its own `#p` is left as it is: an event may match it by one p tag
 * and be readable by another.
 */
function narrowedToReaders(f: Filter, readers: readonly string[]): Filter {
  if (f['#p'] !== undefined || f.kinds === undefined || f.kinds.length === 0 || !f.kinds.every((k) => readRule(k) === 'recipient')) return f;
  return { ...f, '#p': [...readers] };
}

/**
 * One filter as one SQL statement selecting `rid, id, created_at` of the events the scope may read
 * (visible to its readers, not expired at its time, not pending removal), newest first and at most
 * `limit` rows when a limit is given, each event once; undefined when it cannot match (an empty
 * list, or a limit of 0). `probe` runs the statement that chooses between several candidate
 * drivers (see the header).
 */
export function compileFilter(filter: Filter, scope: ReadScope, limit: number | undefined, probe: Probe): CompiledQuery | undefined {
  const f = narrowedToReaders(dedupeFilter(filter), scope.readers);
  const parts = readersParts(f, scope.readers);
  if (parts === undefined) return compileOne(f, scope, limit, probe);
  const compiled = parts.map((p) => compileOne(p, scope, limit, probe)).filter((q) => q !== undefined);
  if (compiled.length <= 1) return compiled[0];
  let sql = compiled.map((q) => `SELECT rid, id, created_at FROM (${q.sql})`).join(' UNION ');
  const params = compiled.flatMap((q) => q.params);
  if (limit !== undefined) {
    sql = `SELECT rid, id, created_at FROM (${sql}) ORDER BY created_at DESC, id LIMIT ?`;
    params.push(limit);
  }
  // Past the parameter bound (many readers and long lists), the filter is asked as it is.
  return params.length > MAX_BOUND_PARAMS ? compileOne(f, scope, limit, probe) : { sql, params };
}

/**
 * The parts a filter is asked as, their union being exactly it, or undefined when it is asked as it
 * is: NIP-XX kinds (read by their author or a p-tagged recipient, read-policy.ts) asked with neither
 * `ids`, `authors` nor `#p` of their own are asked twice, with `authors` = the readers and with `#p`
 * = the readers (each part with the limit; the union cut to it again), so each part walks the
 * readers' own events instead of everyone's.
 */
function readersParts(f: Filter, readers: readonly string[]): Filter[] | undefined {
  if (f.ids !== undefined || f.authors !== undefined || f['#p'] !== undefined || f.kinds === undefined || f.kinds.length === 0) return undefined;
  if (!f.kinds.every((k) => readRule(k) === 'author-or-recipient')) return undefined;
  return [
    { ...f, authors: [...readers] },
    { ...f, '#p': [...readers] },
  ];
}

/** One filter (deduplicated, narrowed) as one statement: see compileFilter. */
function compileOne(f: Filter, { readers, now, vanishing }: ReadScope, limit: number | undefined, probe: Probe): CompiledQuery | undefined {
  const tags = tagFilters(f);
  if (limit === 0 || tags.some(([, v]) => v.length === 0) || f.ids?.length === 0 || f.authors?.length === 0 || f.kinds?.length === 0) return undefined;
  const driver = chooseDriver(f, limit, probe);
  // Several values of a tag with a limit: one subquery per value (json_each `d`), see the header.
  const perValue = driver.by === 'tag' && driver.values.length > 1 && limit !== undefined ? { values: driver.values, limit } : undefined;
  const clauses: ListClause[] = [];
  const where: string[] = [];
  let from: string;
  let at: string;
  if (driver.by === 'tag') {
    from = 'tags t CROSS JOIN events e ON e.rid = t.rid';
    at = 't.created_at';
    const name = `t.name = ${tagLiteral(driver.letter)}`;
    if (perValue) where.push(`${name} AND t.value = d.value`);
    else clauses.push({ expr: 't.value', values: driver.values, wrap: (c) => `${name} AND ${c}` });
  } else {
    from = `events e INDEXED BY ${EVENT_INDEX[driver.by === 'authors' && driver.kinds ? 'pairs' : driver.by]}`;
    at = 'e.created_at';
  }
  for (const [name, values] of tags) {
    if (driver.by === 'tag' && name === driver.letter) continue;
    clauses.push({
      expr: 'x.value',
      values,
      wrap: (c) => `EXISTS (SELECT 1 FROM tags x WHERE x.rid = e.rid AND x.name = ${tagLiteral(name)} AND ${c})`,
    });
  }
  if (f.ids) clauses.push({ expr: 'e.id', values: f.ids, wrap: (c) => c });
  if (f.authors) clauses.push({ expr: 'e.pubkey', values: f.authors, wrap: (c) => c });
  const visible = readableKindsSql(readers);
  const bound = (perValue ? 3 : limit !== undefined ? 1 : 0) + (f.since !== undefined ? 1 : 0) + (f.until !== undefined ? 1 : 0) + 1 + visible.params.length;
  const plain = plainLists(clauses.map((c) => c.values.length), bound);
  const params: Array<string | number> = perValue ? [JSON.stringify(perValue.values)] : [];
  clauses.forEach((c, i) => {
    const list = inList(c.expr, c.values, plain[i]!);
    where.push(c.wrap(list.sql));
    params.push(...list.params);
  });
  if (f.kinds) where.push(`e.kind IN (${kindList(f.kinds)})`);
  if (f.since !== undefined) {
    where.push(`${at} >= ?`);
    params.push(f.since);
  }
  if (f.until !== undefined) {
    where.push(`${at} <= ?`);
    params.push(f.until);
  }
  where.push('(e.expires_at IS NULL OR e.expires_at > ?)');
  params.push(now);
  where.push(visible.sql);
  params.push(...visible.params);
  if (vanishing) where.push(pendingRemovalHiddenSql);
  let sql = `FROM ${from} WHERE ${where.join(' AND ')}`;
  if (perValue) {
    sql =
      `SELECT DISTINCT o.rid AS rid, o.id AS id, o.created_at AS created_at FROM json_each(?) d CROSS JOIN events o ON o.rid IN ` +
      `(SELECT t.rid ${sql} ORDER BY ${at} DESC, e.id LIMIT ?) ORDER BY o.created_at DESC, o.id LIMIT ?`;
    params.push(perValue.limit, perValue.limit);
  } else {
    sql = `SELECT DISTINCT e.rid AS rid, e.id AS id, e.created_at AS created_at ${sql}`;
    if (limit !== undefined) {
      sql += ` ORDER BY ${at} DESC, e.id LIMIT ?`;
      params.push(limit);
    }
  }
  if (params.length > MAX_BOUND_PARAMS) throw new Error(`query binds ${params.length} parameters (max ${MAX_BOUND_PARAMS}): too many readers`);
  return { sql, params };
}
