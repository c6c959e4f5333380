// The query compiler of the event store: one NIP-01 filter → one SQLite statement over the events
// and tags tables (store.ts), with the reader's visibility (read-policy.ts) and what a pending
// NIP-62 removal hides (vanish.ts) in its WHERE clause.
// The work is linear in the filter's size: the most selective tag list drives the statement through
// the tag index, the others are EXISTS checks, and long value lists bind one JSON array each, so no
// statement binds more than MAX_BOUND_PARAMS parameters and nothing is split into a product.

import { dedupeFilter, tagFilters, type Filter } from '../../src/shared/filters.js';
import { readableKindsSql } from './read-policy.js';
import { pendingRemovalHiddenSql } from './vanish.js';

/** SQLite in Durable Objects binds at most 100 parameters per statement; keep headroom. */
export const MAX_BOUND_PARAMS = 100;

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

/** A value list of a filter: the column it constrains and the clause around the `IN`. */
interface ListClause {
  expr: string;
  values: readonly string[];
  wrap: (inList: string) => string;
}

/**
 * One filter as one SQL statement `select … FROM … WHERE …` over the events `e` the scope may read
 * (visible to its readers, not expired at its time, not pending removal), newest first and at most
 * `limit` rows when a limit is given; undefined when it cannot match (an empty list, or a limit of 0).
 */
export function compileFilter(
  filter: Filter,
  { readers, now, vanishing }: ReadScope,
  select: string,
  limit: number | undefined,
): CompiledQuery | undefined {
  const f = dedupeFilter(filter);
  const tags = tagFilters(f);
  if (limit === 0 || tags.some(([, v]) => v.length === 0) || f.ids?.length === 0 || f.authors?.length === 0 || f.kinds?.length === 0) return undefined;
  tags.sort((a, b) => a[1].length - b[1].length);
  const driver = tags.shift();
  const clauses: ListClause[] = [];
  if (driver) clauses.push({ expr: 't.value', values: driver[1], wrap: (c) => `t.name = ${tagLiteral(driver[0])} AND ${c}` });
  for (const [name, values] of tags) {
    clauses.push({
      expr: 'x.value',
      values,
      wrap: (c) => `EXISTS (SELECT 1 FROM tags x WHERE x.rid = e.rid AND x.name = ${tagLiteral(name)} AND ${c})`,
    });
  }
  if (f.ids) clauses.push({ expr: 'e.id', values: f.ids, wrap: (c) => c });
  if (f.authors) clauses.push({ expr: 'e.pubkey', values: f.authors, wrap: (c) => c });
  const visible = readableKindsSql(readers);
  const fixed = (f.since !== undefined ? 1 : 0) + (f.until !== undefined ? 1 : 0) + 1 + (limit !== undefined ? 1 : 0) + visible.params.length;
  const plain = plainLists(clauses.map((c) => c.values.length), fixed);
  const where: string[] = [];
  const params: Array<string | number> = [];
  clauses.forEach((c, i) => {
    const list = inList(c.expr, c.values, plain[i]!);
    where.push(c.wrap(list.sql));
    params.push(...list.params);
  });
  if (f.kinds) where.push(`e.kind IN (${f.kinds.map((k) => Math.trunc(k)).join(',')})`);
  const at = driver ? 't.created_at' : 'e.created_at';
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
  const from = driver ? 'tags t JOIN events e ON e.rid = t.rid' : 'events e';
  let sql = `${select} FROM ${from} WHERE ${where.join(' AND ')}`;
  if (limit !== undefined) {
    sql += ` ORDER BY ${at} DESC, e.id ASC LIMIT ?`;
    params.push(limit);
  }
  if (params.length > MAX_BOUND_PARAMS) throw new Error(`query binds ${params.length} parameters (max ${MAX_BOUND_PARAMS}): too many readers`);
  return { sql, params };
}
