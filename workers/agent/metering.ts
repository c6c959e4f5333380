// Metering of a hosted agent's runs: one row per run in the Agent DO's SQLite (provider, model,
// input/output tokens and whether some are estimated, tool calls, duration, outcome, sender), kept RUN_USAGE_RETENTION_MS, and
// the same run reported to the owner's aggregate in the Accounts DO (workers/accounts), whose
// answer — the owner's totals for the day and month — is what the agent checks the plan against.
// A row stays `reported = 0` until Accounts took it: the watchdog sends such rows again (at most
// REPORT_BATCH per alarm, for REPORT_RESEND_MS), and Accounts counts each run once (by agent and run id);
// until then the row counts on top of the owner's totals the agent has (unreportedTotals, owner-copy.ts).
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

/** Run rows are kept 90 days. */
const RUN_USAGE_RETENTION_MS = 90 * 24 * 3600 * 1000;
/** A run not yet reported to the owner's aggregate is sent again for this long after it ended (Accounts keeps run ids longer: RECORDED_RUN_RETENTION_MS). */
export const REPORT_RESEND_MS = 7 * 24 * 3600 * 1000;
/** Unreported runs sent again per watchdog alarm, at most (oldest first). */
export const REPORT_BATCH = 50;

export class UsageMeter {
  constructor(private readonly sql: SqlStorage) {
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

  /** Stores the run's row (at `at`, ms), not yet reported; its checkpoint, counted in the row, is deleted. */
  record(r: RunMeter, at: number): void {
    this.sql.exec('DELETE FROM run_spend WHERE run_id = ?', r.run_id);
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
   * tokens, the month's tokens (what Accounts does not count yet of this agent's runs).
   */
  unreportedTotals(now: number): OwnerTotals {
    const day = new Date(now).toISOString().slice(0, 10);
    const dayStart = Date.parse(`${day}T00:00:00Z`);
    const monthStart = Date.parse(`${day.slice(0, 7)}-01T00:00:00Z`);
    const r = this.sql
      .exec<Omit<OwnerTotals, 'day'>>(
        `SELECT count(CASE WHEN at >= ? THEN 1 END) AS runs_today, coalesce(sum(CASE WHEN at >= ? THEN input_tokens + output_tokens END), 0) AS tokens_today,
                coalesce(sum(input_tokens + output_tokens), 0) AS tokens_month
         FROM run_usage WHERE reported = 0 AND at >= ?`,
        dayStart,
        dayStart,
        monthStart,
      )
      .one();
    return { day, ...r };
  }

  /** The owner's aggregate took run `runId`. */
  markReported(runId: string): void {
    this.sql.exec('UPDATE run_usage SET reported = 1 WHERE run_id = ?', runId);
  }

  private rows(query: string, ...args: SqlStorageValue[]): Array<RunMeter & { at: number }> {
    const rows = this.sql.exec<Omit<RunMeter, 'estimated'> & { at: number; estimated: number; reported: number }>(query, ...args).toArray();
    return rows.map(({ reported: _reported, ...r }) => ({ ...r, estimated: r.estimated === 1 }));
  }

  prune(now: number, batch: number): void {
    this.sql.exec('DELETE FROM run_usage WHERE run_id IN (SELECT run_id FROM run_usage WHERE at < ? LIMIT ?)', now - RUN_USAGE_RETENTION_MS, batch);
  }
}
