// Metering and the daily quota of an owner's bridge: every request that goes to an upstream server
// (after any payment) is counted per (UTC day, server, method) with its total duration in the
// Bridge DO's SQLite, and the owner's plan (bridge_calls_per_day) is checked against the day's
// count plus what the request will be charged (one call per server it goes to) before admission — refused with JSON-RPC -32029 naming the quota and the seconds until the
// UTC day ends. A request admitted but not yet counted holds its calls in memory (`hold`) until it
// goes upstream (then counted) or ends without (then dropped); the checks count the holds too, so
// calls admitted while nothing was counted yet cannot all pass the quota. A hold counts on
// whichever day is checked (one taken before midnight UTC and paid after it is counted on the new
// day). Clients other than the owner's key may use OTHERS_PLAN_SHARE of the quota (their calls and
// holds are counted apart, `bridge_others`): the rest is kept for the owner, so strangers calling a
// public server cannot leave the owner's own calls refused for the day.
// A priced call waiting for its payment (`MeteredCall.awaitPayment`, from the payment gate, before
// it makes an invoice) is held apart: strangers' waiting calls may hold at most WAITING_SHARE of
// their share (rounded up), and the call must fit the quota and the share with every hold, waiting
// ones included; but a call that is free or already paid is refused only by the counted calls and
// the holds not waiting for a payment. A waiting call whose invoice is recorded is counted from the
// payment rows (`openInvoices`: unpaid, unexpired, uncancelled, per side), not from memory, so a
// restart (a deploy, an eviction), which empties the holds, leaves the open invoices counted; a
// call is counted in memory only until its invoice is recorded (`invoiced`), never twice. So unpaid
// invoices, which fresh keys open for nothing, cannot
// leave every other client refused on every server; in exchange a paid call runs even when free
// calls used the share while it waited, so strangers' counted calls may pass their share by up to
// WAITING_SHARE of it a day, and that excess is not taken from the owner's kept calls (the owner's
// check counts strangers' calls up to their share only). A refusal that the counted calls cause
// says to retry when the UTC day ends; one that holds cause, when the first of them ends (a waiting
// call: its invoice's expiry; another: once its price is known, UPSTREAM_TIMEOUT_MS at most).
// Only the owner's key is told the plan's figure; others get OWNER_CALLS_REACHED (no figure), so
// that varying their requests' fan-out does not tell them the owner's plan and its calls of the
// day. Rows are kept RETENTION_DAYS and pruned in bounded batches: two with each recorded call (rows
// are made no faster than calls), up to METER_PRUNE_BATCH by the Bridge's watchdog alarm; a row past
// them that is still stored (an idle bridge books no alarm) is never answered (`rows`).

import { RPC, rpcError, type RpcError } from '../../src/shared/dvmcp.js';
import { OTHERS_PLAN_SHARE } from '../accounts/quota.js';
import { UPSTREAM_TIMEOUT_MS } from './upstream.js';

const DAY_MS = 86_400_000;
/** Days of per-method rows kept. */
export const RETENTION_DAYS = 90;
/** Expired rows pruned by one watchdog alarm, at most. */
export const METER_PRUNE_BATCH = 500;
/** Expired rows pruned with each recorded call, at most. */
const PRUNE_PER_RECORD = 2;

const dayOf = (ms: number): string => new Date(ms).toISOString().slice(0, 10);

/** The seconds from `now` to `at` (ms), at least 1. */
const secondsUntil = (at: number, now: number): number => Math.max(1, Math.ceil((at - now) / 1000));

/** When the UTC day of `now` (ms) ends. */
const dayEnd = (now: number): number => (Math.floor(now / DAY_MS) + 1) * DAY_MS;

/** When the first of `holds` ends at the latest (ms); with none, when the UTC day of `now` ends. */
const firstEnd = (holds: readonly Hold[], now: number): number => (holds.length === 0 ? dayEnd(now) : Math.min(...holds.map((h) => h.ends)));

/** A -32029 refusal for `why`, retry in `seconds`. */
const quotaRefusal = (why: string, seconds: number): QuotaRefusal => ({
  error: { ...rpcError(RPC.RATE_LIMITED, `rate-limited: ${why} (quota bridge_calls_per_day); retry in ${seconds} s`), data: { quota: 'bridge_calls_per_day', retry_after: seconds } },
  retryMs: seconds * 1000,
});

/** Why a client other than the owner's key is refused by the daily quota (the figures are the owner's). */
export const OWNER_CALLS_REACHED = 'the bridge’s owner reached a usage limit for today (UTC)';
/** Why a client other than the owner's key may not wait for a payment now (WAITING_SHARE). */
export const TOO_MANY_WAITING = 'too many calls to this bridge are waiting for a payment';
/** The part of the share of clients other than the owner's key that their calls waiting for a payment may hold (rounded up). */
export const WAITING_SHARE = 0.5;

/** A quota refusal: its answer, and in how many ms the client may try again (what the answer says). */
export interface QuotaRefusal {
  error: RpcError;
  retryMs: number;
}

export type BridgeCallRow = { day: string; server: string; method: string; calls: number; duration_ms: number };

/** One admitted request's calls (BridgeMeter.hold): held until it goes upstream or ends. */
export interface MeteredCall {
  /**
   * The request is about to wait for its payment, until `until` (ms) at the latest, under `limit`
   * calls a day at `now` (ms): undefined, it may (held as waiting from then on), or the refusal.
   * `invoiced`: it waits on an invoice already recorded (among `openInvoices`; made before, or made
   * for it since it was asked without: asked again so, it is only counted from then on that way,
   * never refused).
   */
  awaitPayment(limit: number | undefined, until: number, now: number, invoiced: boolean): QuotaRefusal | undefined;
  /** The request goes upstream at `now` (ms): its calls counted for that day instead of held. */
  upstream(now: number): void;
  /** The request ended at `now` (ms): its duration added if it went upstream, else its hold dropped. */
  end(now: number): void;
}

export type Side = 'owner' | 'others';

/** The unpaid invoices of one side open at a time (as the payment rows have them): how many, and when the first expires (ms). */
export interface OpenInvoices {
  side: Side;
  calls: number;
  ends: number;
}

/**
 * An admitted request's calls not counted yet: whose, how many, whether it waits for a payment and
 * on an invoice recorded (then counted among `openInvoices`, not as a hold), when it ends at the
 * latest (ms).
 */
interface Hold {
  side: Side;
  calls: number;
  waiting: boolean;
  invoiced: boolean;
  ends: number;
}

/** What one check weighs: the day's counted calls of each side and the holds it counts. */
interface Load {
  owner: number;
  others: number;
  holds: Hold[];
}

const sum = (holds: readonly Hold[], side?: Side): number => holds.reduce((n, h) => n + (side === undefined || h.side === side ? h.calls : 0), 0);

export class BridgeMeter {
  /** Calls admitted and not yet counted (see the header). */
  private readonly holds = new Set<Hold>();

  /** `openInvoices`: the unpaid invoices open at `now` (ms), per side (the payment rows, workers/bridge/payments-store.ts). */
  constructor(
    private readonly sql: SqlStorage,
    private readonly openInvoices: (now: number) => OpenInvoices[],
  ) {
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
   * its share, and no figure in the message), or undefined. Its price is not known yet: it is
   * weighed as a free call, against the counted calls and the holds not waiting for a payment.
   */
  refusal(limit: number | undefined, now: number, other: boolean, calls = 1): QuotaRefusal | undefined {
    if (limit === undefined) return undefined;
    return this.check(limit, now, other ? 'others' : 'owner', calls, [...this.holds].filter((h) => !h.waiting));
  }

  /**
   * Holds the calls of one request admitted to `servers` for `method` at `now` (ms) (`other`: from a
   * client other than the owner's key), one per server, until it goes upstream (counted) or ends
   * (dropped); it may wait for a payment meanwhile (`awaitPayment`).
   */
  hold(servers: readonly string[], method: string, other: boolean, now: number): MeteredCall {
    const h: Hold = { side: other ? 'others' : 'owner', calls: servers.length, waiting: false, invoiced: false, ends: now + UPSTREAM_TIMEOUT_MS };
    this.holds.add(h);
    let startedAt: number | undefined;
    return {
      awaitPayment: (limit, until, at, invoiced) => {
        if (!this.holds.has(h)) return undefined;
        const refused = h.waiting || limit === undefined ? undefined : this.waitRefusal(h, limit, at, invoiced);
        if (refused) return refused;
        h.waiting = true;
        h.invoiced ||= invoiced;
        h.ends = until;
        return undefined;
      },
      upstream: (at) => {
        if (!this.holds.delete(h)) return;
        startedAt = at;
        this.record(servers, method, at, other);
      },
      end: (at) => {
        this.holds.delete(h);
        if (startedAt !== undefined) this.finished(servers, method, startedAt, at);
        startedAt = undefined;
      },
    };
  }

  /**
   * Why hold `h` may not wait for a payment at `now` (ms) under `limit`: past the waiting calls'
   * part of the others' share (WAITING_SHARE), or with every hold, waiting ones included, past the
   * quota or the share. The calls at an invoice are the open invoices (`invoiced`: `h`'s is one of
   * them); the others waiting, the holds of calls not yet at one.
   */
  private waitRefusal(h: Hold, limit: number, now: number, invoiced: boolean): QuotaRefusal | undefined {
    const atInvoices = this.openInvoices(now).map((o): Hold => ({ ...o, waiting: true, invoiced: true }));
    const others = [...[...this.holds].filter((x) => x !== h && !x.invoiced), ...atInvoices];
    const calls = invoiced ? 0 : h.calls;
    const waiting = others.filter((x) => x.waiting && x.side === 'others');
    if (h.side === 'others' && sum(waiting) + calls > Math.ceil(Math.floor(limit * OTHERS_PLAN_SHARE) * WAITING_SHARE)) {
      return quotaRefusal(TOO_MANY_WAITING, secondsUntil(firstEnd(waiting, now), now));
    }
    return this.check(limit, now, h.side, calls, others);
  }

  /**
   * The refusal of `calls` more calls of `side` under `limit` at `now` (ms), with `holds` counted:
   * the owner's key within the quota (strangers' calls counted up to their share: what a paid
   * call ran past it is not the owner's loss), another within the quota and the share.
   */
  private check(limit: number, now: number, side: Side, calls: number, holds: readonly Hold[]): QuotaRefusal | undefined {
    const share = Math.floor(limit * OTHERS_PLAN_SHARE);
    const others = this.callsToday(now, true);
    const counted: Load = { owner: this.callsToday(now) - others, others, holds: [] };
    const load: Load = { ...counted, holds: [...holds] };
    const tests: Array<{ over: (l: Load) => boolean; why: string }> =
      side === 'owner'
        ? [{ over: (l) => l.owner + sum(l.holds, 'owner') + Math.min(l.others + sum(l.holds, 'others'), share) + calls > limit, why: `the owner’s plan allows ${limit} bridge calls per day` }]
        : [
            { over: (l) => l.owner + l.others + sum(l.holds) + calls > limit, why: OWNER_CALLS_REACHED },
            { over: (l) => l.others + sum(l.holds, 'others') + calls > share, why: OWNER_CALLS_REACHED },
          ];
    const failed = tests.find((t) => t.over(load));
    if (failed === undefined) return undefined;
    // The counted calls alone refuse it: until the UTC day ends; else until the first hold ends.
    return quotaRefusal(failed.why, secondsUntil(failed.over(counted) ? dayEnd(now) : firstEnd(holds, now), now));
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
