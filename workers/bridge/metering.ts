// Metering and the daily quota of an owner's bridge: every request that goes to an upstream server
// (after any payment) is counted per (UTC day, server, method) with its total duration in the
// Bridge DO's SQLite, and the owner's plan (bridge_calls_per_day) is checked against the day's
// count before admission — refused with JSON-RPC -32029 naming the quota and the seconds until the
// UTC day ends. Rows are kept RETENTION_DAYS and pruned in bounded batches: two with each recorded
// call (rows are made no faster than calls), up to METER_PRUNE_BATCH by the Bridge's watchdog alarm.

import { RPC, rpcError, type RpcError } from '../../src/shared/dvmcp.js';

const DAY_MS = 86_400_000;
/** Days of per-method rows kept. */
export const RETENTION_DAYS = 90;
/** Expired rows pruned by one watchdog alarm, at most. */
export const METER_PRUNE_BATCH = 500;
/** Expired rows pruned with each recorded call, at most. */
const PRUNE_PER_RECORD = 2;

const dayOf = (ms: number): string => new Date(ms).toISOString().slice(0, 10);

export type BridgeCallRow = { day: string; server: string; method: string; calls: number; duration_ms: number };

export class BridgeMeter {
  constructor(private readonly sql: SqlStorage) {
    this.sql.exec(`CREATE TABLE IF NOT EXISTS bridge_calls (
      day TEXT NOT NULL, server TEXT NOT NULL, method TEXT NOT NULL, calls INTEGER NOT NULL, duration_ms INTEGER NOT NULL,
      PRIMARY KEY (day, server, method)) WITHOUT ROWID`);
  }

  /** Requests admitted on the UTC day of `now` (ms). */
  callsToday(now: number): number {
    return this.sql.exec<{ n: number }>('SELECT coalesce(sum(calls), 0) AS n FROM bridge_calls WHERE day = ?', dayOf(now)).one().n;
  }

  /** The refusal of one more request under `limit` calls a day at `now` (ms), or undefined. */
  refusal(limit: number | undefined, now: number): RpcError | undefined {
    if (limit === undefined || this.callsToday(now) < limit) return undefined;
    const retry = Math.max(1, Math.ceil(((Math.floor(now / DAY_MS) + 1) * DAY_MS - now) / 1000));
    return { ...rpcError(RPC.RATE_LIMITED, `rate-limited: the owner’s plan allows ${limit} bridge calls per day (quota bridge_calls_per_day); retry in ${retry} s`), data: { quota: 'bridge_calls_per_day', retry_after: retry } };
  }

  /** Counts one request admitted at `now` (ms) to each of `servers`. */
  record(servers: readonly string[], method: string, now: number): void {
    const day = dayOf(now);
    for (const server of servers) {
      this.sql.exec(
        `INSERT INTO bridge_calls (day, server, method, calls, duration_ms) VALUES (?, ?, ?, 1, 0)
         ON CONFLICT (day, server, method) DO UPDATE SET calls = calls + 1`,
        day,
        server,
        method,
      );
    }
    this.prune(now, PRUNE_PER_RECORD);
  }

  /** Deletes at most `limit` rows older than RETENTION_DAYS at `now` (ms), oldest first; how many. */
  prune(now: number, limit: number): number {
    return this.sql.exec(
      'DELETE FROM bridge_calls WHERE (day, server, method) IN (SELECT day, server, method FROM bridge_calls WHERE day < ? ORDER BY day LIMIT ?)',
      dayOf(now - RETENTION_DAYS * DAY_MS),
      limit,
    ).rowsWritten;
  }

  /** Adds the duration of a request admitted at `startedAt` (ms) that ended at `now`. */
  finished(servers: readonly string[], method: string, startedAt: number, now: number): void {
    for (const server of servers) {
      this.sql.exec('UPDATE bridge_calls SET duration_ms = duration_ms + ? WHERE day = ? AND server = ? AND method = ?', Math.max(0, now - startedAt), dayOf(startedAt), server, method);
    }
  }

  /** The rows from `from` to `to` (UTC days, inclusive). */
  rows(from: string, to: string): BridgeCallRow[] {
    return this.sql.exec<BridgeCallRow>('SELECT * FROM bridge_calls WHERE day >= ? AND day <= ? ORDER BY day, server, method', from, to).toArray();
  }
}
