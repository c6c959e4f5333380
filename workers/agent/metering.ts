// Metering of a hosted agent's runs: one row per run in the Agent DO's SQLite (provider, model,
// input/output tokens and whether some are estimated, tool calls, duration, outcome, sender), kept RUN_USAGE_RETENTION_MS, and
// the same run reported to the owner's aggregate in the Accounts DO (workers/accounts), whose
// answer — the owner's totals for the day and month — is what the agent checks the plan against.
// A row stays `reported = 0` until Accounts took it: the watchdog sends such rows again (at most
// REPORT_BATCH per alarm, for REPORT_RESEND_MS), and Accounts counts each run once (by agent and run id);
// until then the row counts on top of the owner's totals the agent has (unreportedTotals, owner-copy.ts).
// Those rows are also kept summed per UTC day (`unreported_days`: runs and tokens not reported),
// updated in the same transaction as the rows (record, markReported, prune), so that reading the
// totals costs a row per day of the month, not one per run, however many wait after Accounts failed
// for a while (it is read at each admission, DVMCP ask and model call); an agent stored before the
// sums existed sums its rows once, when its object starts.
// A run in progress keeps what it has spent so far in `run_spend` (after each model call and tool
// call), deleted when its row is recorded: what a restart leaves there is recorded by the watchdog.

import type { OwnerTotals } from '../accounts/accounts-do.js';

/** One finished run, as metered. */
export type RunMeter = {
  run_id: string;
  sender: string;
  provider: string;
  model: string;
  input_tokens: number;
  output_tokens: number;
  tool_calls: number;
  duration_ms: number;
  /** "response" or the NIP-XX error code. */
  outcome: string;
  /** Some of the tokens are estimated: a model call's stream ended without its usage report (runtime.ts, CallTokens). */
  estimated?: boolean;
};

/** What a run in progress has spent so far (its RunMeter without the end). */
export type RunSpend = Omit<RunMeter, 'outcome' | 'duration_ms'>;

/** The spend a run left when the agent restarted during it: from `started_at` to its last checkpoint `at` (ms). */
export type UnrecordedSpend = RunSpend & { started_at: number; at: number };

/** A row not reported yet, as the sums count it: when (ms) and its model tokens. */
type Unreported = { at: number; tokens: number };

/** Run rows are kept 90 days. */
const RUN_USAGE_RETENTION_MS = 90 * 24 * 3600 * 1000;
/** A run not yet reported to the owner's aggregate is sent again for this long after it ended (Accounts keeps run ids longer: RECORDED_RUN_RETENTION_MS). */
export const REPORT_RESEND_MS = 7 * 24 * 3600 * 1000;
/** Unreported runs sent again per watchdog alarm, at most (oldest first). */
export const REPORT_BATCH = 50;

/** The UTC day (YYYY-MM-DD) of `at` (ms). */
const dayOf = (at: number): string => new Date(at).toISOString().slice(0, 10);

export class UsageMeter {
  private readonly sql: SqlStorage;
  private readonly transact: <T>(f: () => T) => T;

  constructor(storage: Pick<DurableObjectStorage, 'sql' | 'transactionSync'>) {
    this.sql = storage.sql;
    this.transact = (f) => storage.transactionSync(f);
    this.sql.exec(`
      CREATE TABLE IF NOT EXISTS run_usage (
        run_id TEXT PRIMARY KEY, at INTEGER NOT NULL, sender TEXT NOT NULL, provider TEXT NOT NULL, model TEXT NOT NULL,
        input_tokens INTEGER NOT NULL, output_tokens INTEGER NOT NULL, tool_calls INTEGER NOT NULL, duration_ms INTEGER NOT NULL, outcome TEXT NOT NULL
      ) WITHOUT ROWID;
      CREATE INDEX IF NOT EXISTS run_usage_at ON run_usage(at);
    `);
    const columns = this.sql.exec<{ name: string }>('PRAGMA table_info(run_usage)').toArray();
    if (!columns.some((c) => c.name === 'estimated')) this.sql.exec('ALTER TABLE run_usage ADD COLUMN estimated INTEGER NOT NULL DEFAULT 0');
    // Rows stored before reports were tracked count as reported: Accounts did not dedupe them, a second report would count twice.
    if (!columns.some((c) => c.name === 'reported')) this.sql.exec('ALTER TABLE run_usage ADD COLUMN reported INTEGER NOT NULL DEFAULT 1');
    this.sql.exec('CREATE INDEX IF NOT EXISTS run_usage_unreported ON run_usage(at) WHERE reported = 0');
    // Made with the sums of the rows already stored (once: the table exists from then on).
    this.transact(() => {
      if (this.sql.exec("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'unreported_days'").toArray().length > 0) return;
      this.sql.exec('CREATE TABLE unreported_days (day TEXT PRIMARY KEY, runs INTEGER NOT NULL, tokens INTEGER NOT NULL) WITHOUT ROWID');
      this.sql.exec(
        "INSERT INTO unreported_days (day, runs, tokens) SELECT strftime('%Y-%m-%d', at / 1000, 'unixepoch'), count(*), sum(input_tokens + output_tokens) FROM run_usage WHERE reported = 0 GROUP BY 1",
      );
    });
    this.sql.exec(`
      CREATE TABLE IF NOT EXISTS run_spend (
        run_id TEXT PRIMARY KEY, started_at INTEGER NOT NULL, at INTEGER NOT NULL, sender TEXT NOT NULL, provider TEXT NOT NULL, model TEXT NOT NULL,
        input_tokens INTEGER NOT NULL, output_tokens INTEGER NOT NULL, estimated INTEGER NOT NULL, tool_calls INTEGER NOT NULL
      ) WITHOUT ROWID;
    `);
  }

  /** Keeps what run `r.run_id` (started at `startedAt`, ms) has spent by `at` (ms), in place of its earlier checkpoint. */
  checkpoint(r: RunSpend, startedAt: number, at: number): void {
    this.sql.exec(
      'INSERT OR REPLACE INTO run_spend (run_id, started_at, at, sender, provider, model, input_tokens, output_tokens, estimated, tool_calls) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)',
      r.run_id,
      startedAt,
      at,
      r.sender,
      r.provider,
      r.model,
      r.input_tokens,
      r.output_tokens,
      r.estimated ? 1 : 0,
      r.tool_calls,
    );
  }

  /** The spends of runs not recorded (in progress, or left by a restart). */
  unrecorded(): UnrecordedSpend[] {
    const rows = this.sql.exec<Omit<UnrecordedSpend, 'estimated'> & { estimated: number }>('SELECT * FROM run_spend').toArray();
    return rows.map((r) => ({ ...r, estimated: r.estimated === 1 }));
  }

  /** Stores the run's row (at `at`, ms), not yet reported, and adds it to the sums (in place of a row it replaces); its checkpoint, counted in the row, is deleted. */
  record(r: RunMeter, at: number): void {
    this.transact(() => {
      this.sql.exec('DELETE FROM run_spend WHERE run_id = ?', r.run_id);
      this.forgetUnreported(this.sql.exec<Unreported>('SELECT at, input_tokens + output_tokens AS tokens FROM run_usage WHERE run_id = ? AND reported = 0', r.run_id).toArray());
      this.sql.exec(
        'INSERT OR REPLACE INTO run_usage (run_id, at, sender, provider, model, input_tokens, output_tokens, tool_calls, duration_ms, outcome, estimated, reported) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 0)',
        r.run_id,
        at,
        r.sender,
        r.provider,
        r.model,
        r.input_tokens,
        r.output_tokens,
        r.tool_calls,
        r.duration_ms,
        r.outcome,
        r.estimated ? 1 : 0,
      );
      this.addToDay(dayOf(at), 1, r.input_tokens + r.output_tokens);
    });
  }

  /** The stored rows, newest first (at most `limit`). */
  recent(limit: number): Array<RunMeter & { at: number }> {
    return this.rows('SELECT * FROM run_usage ORDER BY at DESC LIMIT ?', limit);
  }

  /** Rows not yet reported to the owner's aggregate, of runs ended at `since` (ms) or later: the oldest `limit`. */
  unreported(since: number, limit: number): Array<RunMeter & { at: number }> {
    return this.rows('SELECT * FROM run_usage WHERE reported = 0 AND at >= ? ORDER BY at LIMIT ?', since, limit);
  }

  /**
   * The rows not yet reported as the owner's totals at `now` (ms, UTC): the day's runs and model
   * tokens, the month's tokens (what Accounts does not count yet of this agent's runs; rows dated
   * later count as today's). Read from the day sums: a row per day of the month.
   */
  unreportedTotals(now: number): OwnerTotals {
    const day = dayOf(now);
    const r = this.sql
      .exec<Omit<OwnerTotals, 'day'>>(
        `SELECT coalesce(sum(CASE WHEN day >= ? THEN runs END), 0) AS runs_today, coalesce(sum(CASE WHEN day >= ? THEN tokens END), 0) AS tokens_today,
                coalesce(sum(tokens), 0) AS tokens_month
         FROM unreported_days WHERE day >= ?`,
        day,
        day,
        `${day.slice(0, 7)}-01`,
      )
      .one();
    return { day, ...r };
  }

  /** The owner's aggregate took run `runId`: its row is marked reported and leaves the sums. */
  markReported(runId: string): void {
    this.transact(() => {
      this.forgetUnreported(this.sql.exec<Unreported>('UPDATE run_usage SET reported = 1 WHERE run_id = ? AND reported = 0 RETURNING at, input_tokens + output_tokens AS tokens', runId).toArray());
    });
  }

  /** Takes rows that were unreported (their `at` and tokens) off the sums of their days. */
  private forgetUnreported(rows: readonly Unreported[]): void {
    for (const r of rows) this.addToDay(dayOf(r.at), -1, -r.tokens);
  }

  /** Adds `runs` and `tokens` (negative: takes them off) to the sums of `day`; a day left with no run has no row. */
  private addToDay(day: string, runs: number, tokens: number): void {
    this.sql.exec(
      'INSERT INTO unreported_days (day, runs, tokens) VALUES (?, ?, ?) ON CONFLICT (day) DO UPDATE SET runs = runs + excluded.runs, tokens = tokens + excluded.tokens',
      day,
      runs,
      tokens,
    );
    if (runs < 0) this.sql.exec('DELETE FROM unreported_days WHERE day = ? AND runs <= 0', day);
  }

  private rows(query: string, ...args: SqlStorageValue[]): Array<RunMeter & { at: number }> {
    const rows = this.sql.exec<Omit<RunMeter, 'estimated'> & { at: number; estimated: number; reported: number }>(query, ...args).toArray();
    return rows.map(({ reported: _reported, ...r }) => ({ ...r, estimated: r.estimated === 1 }));
  }

  /** Deletes at most `batch` rows past their retention at `now` (ms); those not reported leave the sums. */
  prune(now: number, batch: number): void {
    this.transact(() => {
      const deleted = this.sql
        .exec<Unreported & { reported: number }>(
          'DELETE FROM run_usage WHERE run_id IN (SELECT run_id FROM run_usage WHERE at < ? LIMIT ?) RETURNING at, input_tokens + output_tokens AS tokens, reported',
          now - RUN_USAGE_RETENTION_MS,
          batch,
        )
        .toArray();
      this.forgetUnreported(deleted.filter((r) => r.reported === 0));
    });
  }
}
