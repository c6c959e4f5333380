// The Agent Durable Object's run bookkeeping in its SQLite: the `runs` table (one row per claimed
// prompt, its state, whether a relay took its terminal event, and that event only while it may
// still be sent: cleared once a relay took it or refused it for good, or once its run is past the
// resend window the caller gives to prune), the `seen` ids (each
// incoming event and rumor handled once: claimed atomically in memory, a bounded LRU, and kept in
// the table of workers/common/seen-ids.ts only once the agent acts on it — a prompt run, answered
// or dropped at admission, for about 3 days; a fresh DVMCP request, 120 s past its created_at — so
// junk that fails to open or to verify adds no row) and the subscription `cursor` (how far back a
// (re)subscribe asks), with their bounded retention.

import type { NostrEvent } from '../../src/shared/event.js';
import { SeenIds } from '../common/seen-ids.js';
import { STALE_SECONDS } from '../common/dvmcp-server/limits.js';
import { LruMap } from '../../src/shared/lru.js';
import { WRAP_LOOKBACK_SECONDS } from '../../src/shared/nip59.js';

/** Ids claimed in memory (every incoming event and rumor, acted on or not): the newest this many. */
export const RECENT_IDS = 10_000;
/** Expired `seen` ids deleted with each id kept, so that the table cannot outgrow its retention (beside the watchdog's batches). */
export const PRUNE_PER_KEEP = 2;

/** Replay window on (re)subscribe, covering clock skew and the time the agent was away. */
export const REPLAY_SLACK_SECONDS = 300;
/**
 * A prompt is run only while its created_at (a gift wrap's rumor's, the real time) is at most this old:
 * longer than a wrap's randomised timestamp reaches back, so what an agent missed while away up to
 * two days is still answered.
 */
export const PROMPT_MAX_AGE_SECONDS = WRAP_LOOKBACK_SECONDS + REPLAY_SLACK_SECONDS;
/** ... and at most this far ahead (the relay's default created_at_upper_limit). */
export const PROMPT_MAX_AHEAD_SECONDS = 900;
/**
 * Prompt ids in `seen` are kept one day longer than a prompt may be run (from their receipt): a
 * prompt, replayed by a relay or re-broadcast by anyone, is refused by its id or by its age, never run twice.
 */
const SEEN_RETENTION_SECONDS = PROMPT_MAX_AGE_SECONDS + 24 * 3600;
/**
 * DVMCP request ids are kept this long past their created_at: a request is served only while its
 * created_at is within STALE_SECONDS of now (isFresh, as by the bridge), so a copy published again
 * once its id is gone is stale.
 */
export const DVMCP_SEEN_SECONDS = 2 * STALE_SECONDS;

/** Whether a prompt created at `createdAt` may be run at `now` (both in seconds); stale ones are ignored. */
export const isFreshPrompt = (createdAt: number, now: number): boolean =>
  createdAt >= now - PROMPT_MAX_AGE_SECONDS && createdAt <= now + PROMPT_MAX_AHEAD_SECONDS;
/** Finished runs are kept 7 days, whether their terminal event was delivered or not. */
const RUN_RETENTION_MS = 7 * 24 * 3600 * 1000;

export type RunRow = {
  id: string;
  client: string;
  session: string;
  wrapped: number;
  relay: string;
  state: 'running' | 'done';
  terminal: string | null;
  /** 1 once the relay accepted the terminal event. */
  published: number;
  /** The relay's answer when it refused the terminal event for good (it is not sent again). */
  refused: string | null;
};

/** Where a run's events go: its client, run id, session and relay, and whether they are gift-wrapped. */
export type RunAddress = Pick<RunRow, 'id' | 'client' | 'session' | 'wrapped' | 'relay'>;

export class RunStore {
  private readonly seen: SeenIds;
  private readonly recent = new LruMap<string, true>(RECENT_IDS);

  constructor(private readonly sql: SqlStorage) {
    this.seen = new SeenIds(sql);
    this.migrate();
  }

  private migrate(): void {
    this.sql.exec(`
      CREATE TABLE IF NOT EXISTS runs (
        id TEXT PRIMARY KEY, client TEXT NOT NULL, session TEXT NOT NULL, wrapped INTEGER NOT NULL,
        relay TEXT NOT NULL, state TEXT NOT NULL, outcome TEXT, terminal TEXT, published INTEGER NOT NULL DEFAULT 0,
        started_at INTEGER NOT NULL, finished_at INTEGER
      ) WITHOUT ROWID;
      CREATE INDEX IF NOT EXISTS runs_finished ON runs(state, finished_at);
      CREATE INDEX IF NOT EXISTS runs_unsent ON runs(finished_at) WHERE terminal IS NOT NULL;
      CREATE TABLE IF NOT EXISTS cursor (k INTEGER PRIMARY KEY CHECK (k = 1), since INTEGER NOT NULL);
    `);
    const columns = this.sql.exec<{ name: string }>("SELECT name FROM pragma_table_info('runs')").toArray();
    if (!columns.some((c) => c.name === 'refused')) this.sql.exec('ALTER TABLE runs ADD COLUMN refused TEXT');
  }

  // ---- seen ----

  /**
   * Claims an id atomically (no await between check and claim): in memory only; false when it was
   * claimed recently or kept in `seen`. Call keep() once the agent acts on it.
   */
  claim(id: string): boolean {
    if (this.recent.has(id) || this.seen.has(id)) return false;
    this.recent.set(id, true);
    return true;
  }

  /** Keeps a claimed prompt's id in `seen` (it survives an eviction) for SEEN_RETENTION_SECONDS. */
  keep(id: string): void {
    this.keepUntil(id, Math.floor(Date.now() / 1000) + SEEN_RETENTION_SECONDS);
  }

  /** Keeps a claimed DVMCP request's id in `seen` until DVMCP_SEEN_SECONDS past its `createdAt` (seconds; the caller served it as fresh). */
  keepRequest(id: string, createdAt: number): void {
    this.keepUntil(id, createdAt + DVMCP_SEEN_SECONDS);
  }

  /**
   * Keeps `id` in `seen` until `until` (seconds), deleting PRUNE_PER_KEEP expired ids. A row's `at`
   * is when its retention began, SEEN_RETENTION_SECONDS before it expires (a prompt's receipt), so
   * that one cut-off prunes ids kept for any time.
   */
  private keepUntil(id: string, until: number): void {
    this.seen.add(id, until - SEEN_RETENTION_SECONDS);
    this.seen.prune(Math.floor(Date.now() / 1000) - SEEN_RETENTION_SECONDS, PRUNE_PER_KEEP);
  }

  /** Releases a claim (a forged copy must not block the genuine event with the same id). */
  unclaim(id: string): void {
    this.recent.delete(id);
    this.seen.forget(id);
  }

  // ---- cursor ----

  /** Starts the cursor at `since` (seconds) unless it exists. */
  initCursor(since: number): void {
    this.sql.exec('INSERT OR IGNORE INTO cursor (k, since) VALUES (1, ?)', since);
  }

  since(): number {
    return this.sql.exec<{ since: number }>('SELECT since FROM cursor WHERE k = 1').one().since;
  }

  /** Moves the cursor forward to `at` (seconds), never backward. */
  advance(at: number): void {
    this.sql.exec('UPDATE cursor SET since = max(since, ?) WHERE k = 1', at);
  }

  // ---- runs ----

  get(id: string): RunRow | undefined {
    return this.sql.exec<RunRow>('SELECT * FROM runs WHERE id = ?', id).toArray()[0];
  }

  has(id: string): boolean {
    return this.sql.exec('SELECT 1 FROM runs WHERE id = ?', id).toArray().length > 0;
  }

  /** Inserts the row of a claimed prompt, in state 'running'. */
  start(id: string, client: string, session: string, wrapped: boolean, relay: string): void {
    this.sql.exec(
      'INSERT INTO runs (id, client, session, wrapped, relay, state, started_at) VALUES (?, ?, ?, ?, ?, ?, ?)',
      id,
      client,
      session,
      wrapped ? 1 : 0,
      relay,
      'running',
      Date.now(),
    );
  }

  /** Ends a run with its outcome and its (signed, not yet published) terminal event. */
  finish(id: string, outcome: string, terminal: NostrEvent): void {
    this.sql.exec("UPDATE runs SET state = 'done', outcome = ?, terminal = ?, finished_at = ? WHERE id = ?", outcome, JSON.stringify(terminal), Date.now(), id);
  }

  /** A relay took the terminal event: it is not sent again, and no longer kept. */
  markPublished(id: string): void {
    this.sql.exec('UPDATE runs SET published = 1, terminal = NULL WHERE id = ?', id);
  }

  /** The relay refused the terminal event for good with `message`: it is not sent again, and no longer kept. */
  markRefused(id: string, message: string): void {
    this.sql.exec('UPDATE runs SET refused = ?, terminal = NULL WHERE id = ?', message, id);
  }

  running(): RunRow[] {
    return this.sql.exec<RunRow>("SELECT * FROM runs WHERE state = 'running'").toArray();
  }

  /**
   * Finished runs whose terminal event is still to be sent (neither accepted nor refused for good),
   * finished at `since` (ms) or later: the newest `limit`.
   */
  unpublished(since: number, limit: number): RunRow[] {
    return this.sql
      .exec<RunRow>(
        "SELECT * FROM runs WHERE state = 'done' AND published = 0 AND refused IS NULL AND finished_at >= ? ORDER BY finished_at DESC LIMIT ?",
        since,
        limit,
      )
      .toArray();
  }

  /**
   * Retention at `now` (ms): expired `seen` ids and old finished runs (delivered, refused or not),
   * and the terminal events still kept of runs finished before `unsentBefore` (ms; past the resend
   * window, never sent again), at most `batch` rows each.
   */
  prune(now: number, unsentBefore: number, batch: number): void {
    this.seen.prune(Math.floor(now / 1000) - SEEN_RETENTION_SECONDS, batch);
    this.sql.exec(
      "DELETE FROM runs WHERE id IN (SELECT id FROM runs WHERE state = 'done' AND finished_at < ? LIMIT ?)",
      now - RUN_RETENTION_MS,
      batch,
    );
    this.sql.exec(
      'UPDATE runs SET terminal = NULL WHERE id IN (SELECT id FROM runs WHERE terminal IS NOT NULL AND finished_at < ? LIMIT ?)',
      unsentBefore,
      batch,
    );
  }
}
