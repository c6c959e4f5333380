// Metering and the daily quota of an owner's bridge: every request that goes to an upstream server
// (after any payment) is counted per (UTC day, server, method) with its total duration in the
// Bridge DO's SQLite, and the owner's plan (bridge_calls_per_day) is checked against the day's
// count plus what the request will be charged (one call per server it goes to) before admission — refused with JSON-RPC -32029 naming the quota and the seconds until the
// UTC day ends. A request admitted but not yet counted (a priced call waiting for its payment, a
// resource read waiting for its price) holds its calls in memory (`hold`) until it goes upstream
// (then counted) or ends without (then dropped), and the check counts the holds too: calls admitted
// while nothing was counted yet cannot all pass the quota once paid. A hold counts on whichever day
// is checked (one taken before midnight UTC and paid after it is counted on the new day).
// Clients other than the owner's key may use OTHERS_PLAN_SHARE of the quota (their
// calls and holds are counted apart, `bridge_others`): the rest is kept for the owner, so strangers
// calling a public server, or leaving invoices unpaid, cannot leave the owner's own calls refused for the day. Only the owner's
// key is told the plan's figure; others get OWNER_CALLS_REACHED (no figure), so that varying their
// requests' fan-out does not tell them the owner's plan and its calls of the day. Rows are kept
// RETENTION_DAYS and pruned in bounded batches: two with each recorded call (rows are made no
// faster than calls), up to METER_PRUNE_BATCH by the Bridge's watchdog alarm; a row past them that
// is still stored (an idle bridge books no alarm) is never answered (`rows`).

import { RPC, rpcError, type RpcError } from '../../src/shared/dvmcp.js';
import { OTHERS_PLAN_SHARE } from '../accounts/quota.js';

const DAY_MS = 86_400_000;
/** Days of per-method rows kept. */
export const RETENTION_DAYS = 90;
/** Expired rows pruned by one watchdog alarm, at most. */
export const METER_PRUNE_BATCH = 500;
/** Expired rows pruned with each recorded call, at most. */
const PRUNE_PER_RECORD = 2;

const dayOf = (ms: number): string => new Date(ms).toISOString().slice(0, 10);

/** Why a client other than the owner's key is refused by the daily quota (the figures are the owner's). */
export const OWNER_CALLS_REACHED = 'the bridge’s owner reached a usage limit for today (UTC)';

export type BridgeCallRow = { day: string; server: string; method: string; calls: number; duration_ms: number };

/** One admitted request's calls (BridgeMeter.hold): held until it goes upstream or ends. */
export interface MeteredCall {
  /** The request goes upstream at `now` (ms): its calls counted for that day instead of held. */
  upstream(now: number): void;
  /** The request ended at `now` (ms): its duration added if it went upstream, else its hold dropped. */
  end(now: number): void;
}

export class BridgeMeter {
  /** Calls admitted and not yet counted (see the header), of the owner's key and of other clients. */
  private readonly held = { owner: 0, others: 0 };

  constructor(private readonly sql: SqlStorage) {
    this.sql.exec(`CREATE TABLE IF NOT EXISTS bridge_calls (
      day TEXT NOT NULL, server TEXT NOT NULL, method TEXT NOT NULL, calls INTEGER NOT NULL, duration_ms INTEGER NOT NULL,
      PRIMARY KEY (day, server, method)) WITHOUT ROWID`);
    this.sql.exec('CREATE TABLE IF NOT EXISTS bridge_others (day TEXT PRIMARY KEY, calls INTEGER NOT NULL) WITHOUT ROWID');
  }

  /** Requests admitted on the UTC day of `now` (ms): all of them, or those of clients other than the owner. */
  callsToday(now: number, others = false): number {
    const query = others ? 'SELECT coalesce(sum(calls), 0) AS n FROM bridge_others WHERE day = ?' : 'SELECT coalesce(sum(calls), 0) AS n FROM bridge_calls WHERE day = ?';
    return this.sql.exec<{ n: number }>(query, dayOf(now)).one().n;
  }

  /**
   * The refusal of one more request, charged `calls` calls (one per server it goes to, as `record`
   * counts them), under `limit` calls a day at `now` (ms) from the owner's key or another (`other`:
   * its share, and no figure in the message), or undefined: refused when the day's count and the
   * calls held (`hold`) would pass the limit (another client: also its share, with the others' holds).
   */
  refusal(limit: number | undefined, now: number, other: boolean, calls = 1): RpcError | undefined {
    if (limit === undefined) return undefined;
    const retry = Math.max(1, Math.ceil(((Math.floor(now / DAY_MS) + 1) * DAY_MS - now) / 1000));
    const refuse = (why: string): RpcError => ({ ...rpcError(RPC.RATE_LIMITED, `rate-limited: ${why} (quota bridge_calls_per_day); retry in ${retry} s`), data: { quota: 'bridge_calls_per_day', retry_after: retry } });
    if (this.callsToday(now) + this.held.owner + this.held.others + calls > limit) return refuse(other ? OWNER_CALLS_REACHED : `the owner’s plan allows ${limit} bridge calls per day`);
    if (other && this.callsToday(now, true) + this.held.others + calls > Math.floor(limit * OTHERS_PLAN_SHARE)) return refuse(OWNER_CALLS_REACHED);
    return undefined;
  }

  /**
   * Holds the calls of one request admitted to `servers` for `method` (`other`: from a client other
   * than the owner's key), one per server, until it goes upstream (counted) or ends (dropped).
   */
  hold(servers: readonly string[], method: string, other: boolean): MeteredCall {
    const side = other ? 'others' : 'owner';
    this.held[side] += servers.length;
    let holding = true;
    let startedAt: number | undefined;
    const unhold = (): void => {
      if (holding) this.held[side] -= servers.length;
      holding = false;
    };
    return {
      upstream: (now) => {
        if (!holding) return;
        unhold();
        startedAt = now;
        this.record(servers, method, now, other);
      },
      end: (now) => {
        unhold();
        if (startedAt !== undefined) this.finished(servers, method, startedAt, now);
        startedAt = undefined;
      },
    };
  }

  /** Counts one request admitted at `now` (ms) to each of `servers` (`other`: from a client other than the owner's key). */
  private record(servers: readonly string[], method: string, now: number, other: boolean): void {
    const day = dayOf(now);
    if (other && servers.length > 0) {
      this.sql.exec('INSERT INTO bridge_others (day, calls) VALUES (?, ?) ON CONFLICT (day) DO UPDATE SET calls = calls + excluded.calls', day, servers.length);
    }
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

  /** Deletes at most `limit` rows older than RETENTION_DAYS at `now` (ms), oldest first; how many (others' day counts: those before today, which nothing reads). */
  prune(now: number, limit: number): number {
    this.sql.exec('DELETE FROM bridge_others WHERE day IN (SELECT day FROM bridge_others WHERE day < ? ORDER BY day LIMIT ?)', dayOf(now), limit);
    return this.sql.exec(
      'DELETE FROM bridge_calls WHERE (day, server, method) IN (SELECT day, server, method FROM bridge_calls WHERE day < ? ORDER BY day LIMIT ?)',
      dayOf(now - RETENTION_DAYS * DAY_MS),
      limit,
    ).rowsWritten;
  }

  /** Adds the duration of a request admitted at `startedAt` (ms) that ended at `now`. */
  private finished(servers: readonly string[], method: string, startedAt: number, now: number): void {
    for (const server of servers) {
      this.sql.exec('UPDATE bridge_calls SET duration_ms = duration_ms + ? WHERE day = ? AND server = ? AND method = ?', Math.max(0, now - startedAt), dayOf(startedAt), server, method);
    }
  }

  /** The rows from `from` to `to` (UTC days, inclusive) of the days kept at `now` (ms): a row past RETENTION_DAYS that is not pruned yet (an idle bridge has no watchdog) is not answered. */
  rows(from: string, to: string, now = Date.now()): BridgeCallRow[] {
    const kept = dayOf(now - RETENTION_DAYS * DAY_MS);
    return this.sql.exec<BridgeCallRow>('SELECT * FROM bridge_calls WHERE day >= ? AND day >= ? AND day <= ? ORDER BY day, server, method', from, kept, to).toArray();
  }
}
