// Accounts: the deployment's owner registry and usage aggregate, one SQLite Durable Object per
// deployment (named "accounts"). It holds the owners added by operators or by sign-up (plan,
// suspended, vetted) — the static EDGESTR_OWNERS list is not stored here — the keys operators removed
// (`removed_owners`, see below), and, per owner, the usage reported by its agents after each run,
// summed per (UTC day, agent, sender, model): the figures of GET /api/usage and the owner-wide
// totals the agents check their plan against.
//
// The aggregate is bounded. The sender is whoever prompts an agent (any key; a stranger may use a
// fresh one per prompt), so each agent's first USAGE_SENDERS_PER_AGENT_DAY senders of a UTC day
// keep their own rows and the runs of further senders that day are summed under the sender OTHERS.
// The model is one of the agent's (up to 50), but the prompt picks which, and a stranger may prompt
// every public agent of every owner. So the rows of one UTC day are capped twice: an owner's day
// holds at most USAGE_ROWS_PER_OWNER_DAY rows, and all owners' days together USAGE_ROWS_PER_DAY
// (counted in `usage_days`, one row per day). A new key (agent, sender, model) of an owner's day
// gets its own row while the owner's day has fewer than USAGE_ROWS_PER_OWNER_DAY − 1 and the day
// fewer than USAGE_ROWS_PER_DAY; past either, its runs are summed in the owner-day's one row whose
// agent, sender and model are OTHERS (not counted in usage_days: there is one per owner-day at
// most). Every run is still counted (by day the figures are exact); only the breakdown past the
// caps is coarser. A model name is kept to MODEL_NAME_MAX characters (the agent API's rule,
// workers/agent/config.ts; an agent configured before it may report a longer one), so a row is at
// most about 1 KB with its index. Rows older than USAGE_RETENTION_DAYS (more than GET /api/usage's
// 366-day range) are deleted, oldest first, USAGE_PRUNE_PER_RECORD with each recorded run (a run
// makes at most one row), with their days' counts. The table thus holds at most
// USAGE_RETENTION_DAYS × (USAGE_ROWS_PER_DAY + owners with runs that day) rows
// (docs/OPERATIONS.md "Metering" gives the bytes). An object from before `usage_days` counts, once,
// the rows of the days a report may still come for (RECORDED_RUN_RETENTION_MS).
//
// Reading it is bounded too (this one object also answers every router isolate's registry fetch and
// every agent's run report). A usage query reads at most MAX_USAGE_SCAN rows, earliest day first: a
// range holding more is answered for the whole days that fit, with `through` naming the last one
// (a first day that alone holds more: its first MAX_USAGE_SCAN rows, `through` that day). And each
// caller's queries may cover USAGE_ROWS_PER_MINUTE rows per minute, all callers' together
// USAGE_ROWS_PER_MINUTE_ALL (read-budget.ts; so keys signed up in numbers, or more than it keeps
// windows for, do not multiply the load): past either, a query is refused, with the wait, before
// anything is read. The plan totals every run report answers (today's runs and tokens, this month's
// tokens) are kept apart, one row per owner and day (`owner_days`, pruned with `usage`), so a report
// reads at most 31 rows. Each snapshot also answers what the owner's other agents' runs in progress
// hold (`in_flight`: in-flight.ts), as the asking agent tells its own with the call, so that the
// agents of one owner see each other's runs before they end. When the owner's plan sets
// runs_per_day, each agent reserves every run it admits here first (reserveRun: the plan's check
// against the day's runs plus every agent's runs reserved and not reported yet, run-reservations.ts,
// kept in memory), so the runs of the day are counted owner-wide at admission.
//
// A run is counted once: agents send a report again until it is taken (workers/agent/metering.ts),
// so each recorded (agent, run id) is kept RECORDED_RUN_RETENTION_MS (longer than an agent sends a
// report again) in `recorded_runs`, and a report of one already there adds nothing. Those ids are
// pruned USAGE_PRUNE_PER_RECORD with each recorded run; there are as many as the runs the plans allow.
//
// `vetted`: whether the operators stand behind the owner — true for one an operator added, false for
// a key that signed itself up, until an operator says otherwise (PATCH /api/admin/owners). Only a
// vetted owner's bridge is one of this deployment's bridges (workers/common/deployment-bridges.ts,
// docs/BRIDGE.md), only to a vetted owner's dials does EDGESTR_OUTBOUND_ALLOW apply
// (workers/common/owner-outbound.ts), and the backup cron takes vetted owners' shards first
// (vettedAmong: which of the keys it names are vetted; workers/relay-do/backup.ts). Rows from
// before the column existed recorded nothing of how they were made, so the upgrade that adds it
// decides by the sign-up setting it runs under: with EDGESTR_SIGNUP=open any of them may have
// signed itself up, and none is vetted; with sign-up closed they count as vetted (the operators
// added them). Either way it logs once how many rows it set and what the operators can review
// (docs/OPERATIONS.md "Vetted owners").
//
// Sign-up is bounded (signup-limits.ts): signUp adds a key only while the registry holds fewer
// owners than the caps' `owners` and fewer keys signed themselves up this UTC day than `per_day`
// (counted in `signup_days`, one row per day, the days before today deleted with each sign-up); an
// operator's add() is not capped. Whatever the registry's size, what one call reads or answers is
// bounded: states() (the copy each router, API and Bridge isolate holds, workers/common/owners.ts)
// at most REGISTRY_COPY_MAX owners, in key order, saying whether that is all of them (the isolates
// look the others up by key, state()); ownerKeys() a page of keys (the backup cron); overview() a
// page of owners with their totals (GET /api/admin/owners).
//
// A removal is not undone by open sign-up: remove() deletes the owner's row and records its key
// with the time (removed_at) in the same step, and signUp() refuses a recorded key; only an
// operator's add() takes the record back out, with the key made an owner again. Only an operator's
// removal writes a row (one per key removed and not added back, never written by a stranger's
// request), so the table holds no more rows than the operators' own actions made.
//
// Each change of an owner's account (add, sign-up, update, remove) gives it a higher `version`, in
// the same step (owners.version; a removal's in removed_owners.version, and the owner added again
// goes on from there). standing() answers the account with its version, as the admin API pushes it
// to the owner's shard (RelayShard.setOwnerAccount), which ignores a version older than the one it
// holds: overlapping admin calls cannot leave the shard on an account read before a later change.

import { DurableObject } from 'cloudflare:workers';
import { staticOwners, type OwnerEnv, type OwnerState } from '../common/owners.js';
import { err, ok, type Result } from '../../src/shared/errors.js';
import { MODEL_NAME_MAX } from '../agent/config.js';
import { DEFAULT_PLAN } from './plans.js';
import { ReadBudget } from './read-budget.js';
import { InFlightTokens, type AgentInFlight } from './in-flight.js';
import { RunReservations, type RunReservation } from './run-reservations.js';
import { planRefusal, type QuotaRefusal } from './quota.js';
import type { SignupCaps } from './signup-limits.js';
import { USAGE_OTHERS } from '../../src/shared/usage-keys.js';

/** What the Accounts object reads of the Worker's configuration. */
export interface AccountsEnv extends OwnerEnv {
  /** 'open': keys may sign themselves up (workers/api/signup.ts); read by the upgrade that adds `vetted`. */
  EDGESTR_SIGNUP?: string;
}

export interface AccountsBindings {
  ACCOUNTS: DurableObjectNamespace<Accounts>;
}

export const accountsStub = (env: AccountsBindings): DurableObjectStub<Accounts> => env.ACCOUNTS.get(env.ACCOUNTS.idFromName('accounts'));

export interface OwnerRow {
  pubkey: string;
  plan: string;
  suspended: boolean;
  /** Added by an operator (or marked vetted by one), not by the key's own sign-up. */
  vetted: boolean;
  created_at: number;
}

/** An owner's account as its shard is to hold it (undefined: the operators removed the key), and the version of that change. */
export interface OwnerStanding {
  account: OwnerState | undefined;
  version: number;
}

/**
 * What a sign-up did: the key became an owner, was one already, or was refused: removed by an
 * operator, the registry at the caps' `owners` (`full`), or `per_day` keys signed up today already.
 */
export type SignUpResult = 'added' | 'owner' | 'removed' | 'full' | 'full_today';

/** Owners states() answers at most (see the header): about 1.1 MB and a few tens of ms of this object's thread per copy. */
export const REGISTRY_COPY_MAX = 10_000;

/** The registry as states() answers it: at most REGISTRY_COPY_MAX owners in key order; `complete` false when there are more. */
export interface RegistryCopy {
  owners: Array<OwnerState & { pubkey: string }>;
  complete: boolean;
}

/** Owners one page of overview() lists at most (and its default). */
export const OVERVIEW_PAGE_MAX = 1_000;

/** An owner as GET /api/admin/owners lists it. */
export type ListedOwner = OwnerRow & { source: 'static' | 'registry'; usage: OwnerTotals };

/** One page of overview(): `next`, when there are more, is the cursor of the next page. */
export interface OwnersPage {
  owners: ListedOwner[];
  next?: string;
}

/** One run as the agent reports it to the aggregate. */
export interface RunUsage {
  owner: string;
  agent: string;
  /** The run's id (its prompt's event id, or its DVMCP request's): counted once per agent. */
  run_id: string;
  sender: string;
  model: string;
  /** When the run ended (ms). */
  at: number;
  input_tokens: number;
  output_tokens: number;
  tool_calls: number;
  error: boolean;
}

/** An owner's consumption in the current UTC day and month (what the plan limits). */
export interface OwnerTotals {
  day: string;
  tokens_today: number;
  tokens_month: number;
  runs_today: number;
}

/** What an agent needs to admit prompts: the owner's registry state (undefined: not registered) and totals. */
export interface OwnerSnapshot {
  state: OwnerState | undefined;
  totals: OwnerTotals;
  /**
   * Model tokens the owner's agents' runs in progress hold (spent so far, and held by their model
   * calls in flight), not in `totals` yet: each agent's last figure that still counts, the asking
   * agent's own left out (in-flight.ts).
   */
  in_flight: number;
}

/** A run an agent admitted on an owner whose plan sets runs_per_day, to reserve (reserveRun). */
export interface RunAsk extends RunReservation {
  /** The run's sender is not the owner: OTHERS_PLAN_SHARE of the limit applies. */
  other: boolean;
  /** The owner's plan's runs_per_day, as the agent reads the owner's plan. */
  runs_per_day: number;
}

export const USAGE_KEYS = ['agent', 'sender', 'model', 'day'] as const;
export type UsageKey = (typeof USAGE_KEYS)[number];

export interface UsageRow {
  key: string;
  runs: number;
  input_tokens: number;
  output_tokens: number;
  tool_calls: number;
  errors: number;
}

/** Rows answered by one usage query at most (past them the last keys are summed in one OTHERS row: withinAnswer). */
export const MAX_USAGE_ROWS = 10_000;
/** Rows of the aggregate one usage query sums at most (see the header). */
export const MAX_USAGE_SCAN = 50_000;
/**
 * Rows each caller's usage queries may cover per minute: a query counts the rows of its range it
 * looked at, at most MAX_USAGE_SCAN + 1 (it reads them once to find the cut and at most once more
 * to sum them), so four of the largest are let in a minute.
 */
export const USAGE_ROWS_PER_MINUTE = 200_000;
/** Rows all callers' usage queries together may cover per minute: twenty of the largest. */
export const USAGE_ROWS_PER_MINUTE_ALL = 1_000_000;

/** One usage query: by `caller` (whose budget it uses), of `owner` (undefined: every owner), between the UTC days `from` and `to` (inclusive). */
export interface UsageQuery {
  caller: string;
  owner: string | undefined;
  from: string;
  to: string;
  by: UsageKey;
}

/**
 * `rows` (sorted by key) as an answer holds them: at most MAX_USAGE_ROWS, the keys after the first
 * MAX_USAGE_ROWS - 1 (besides OTHERS) summed with OTHERS' in one OTHERS row, where it sorts, so
 * every total stays exact.
 */
function withinAnswer<R extends { key: string; runs: number; input_tokens: number; output_tokens: number; tool_calls: number; errors: number }>(rows: R[]): R[] {
  if (rows.length <= MAX_USAGE_ROWS) return rows;
  const named = rows.filter((r) => r.key !== OTHERS);
  const kept = named.slice(0, MAX_USAGE_ROWS - 1);
  const others = { ...named[MAX_USAGE_ROWS - 1]!, key: OTHERS, runs: 0, input_tokens: 0, output_tokens: 0, tool_calls: 0, errors: 0 };
  for (const r of [...named.slice(MAX_USAGE_ROWS - 1), ...rows.filter((r) => r.key === OTHERS)]) {
    others.runs += r.runs;
    others.input_tokens += r.input_tokens;
    others.output_tokens += r.output_tokens;
    others.tool_calls += r.tool_calls;
    others.errors += r.errors;
  }
  return [...kept, others].sort((a, b) => (a.key < b.key ? -1 : a.key > b.key ? 1 : 0));
}

/** A usage answer: `through` only when the range held more than MAX_USAGE_SCAN rows (the rows count `from` through that day). */
export interface UsageAnswer {
  rows: UsageRow[];
  through?: string;
}

/** A usage query refused: the caller used its USAGE_ROWS_PER_MINUTE, or all callers USAGE_ROWS_PER_MINUTE_ALL. */
export interface UsageRefusal {
  error: string;
  retry_after: number;
}

/** Days of usage rows kept (a row of day D goes once D is more than this many days before a recorded run). */
export const USAGE_RETENTION_DAYS = 400;
/** Senders of one agent in one UTC day that keep their own rows; the runs of later ones are summed under the sender OTHERS. */
export const USAGE_SENDERS_PER_AGENT_DAY = 200;
/** Rows of one owner's UTC day at most: past USAGE_ROWS_PER_OWNER_DAY − 1 keys, further runs are summed in the OTHERS row. */
export const USAGE_ROWS_PER_OWNER_DAY = 1_000;
/** Rows of one UTC day, all owners together, at most (besides each owner's OTHERS row): past them, each owner's new keys of the day are summed in its OTHERS row. */
export const USAGE_ROWS_PER_DAY = 10_000;
/**
 * The key of runs summed past a cap (never a pubkey: those are 64-hex): the sender past
 * USAGE_SENDERS_PER_AGENT_DAY; agent, sender and model of an owner-day's row past USAGE_ROWS_PER_OWNER_DAY.
 */
export const OTHERS = USAGE_OTHERS;
/** Expired rows deleted with each recorded run, at most. */
export const USAGE_PRUNE_PER_RECORD = 10;
/** How long a recorded run's id is kept to refuse it a second time (longer than an agent re-sends: REPORT_RESEND_MS, 7 days). */
export const RECORDED_RUN_RETENTION_MS = 8 * 86_400_000;

const DAY_MS = 86_400_000;
/** The one key of the all-callers read budget. */
const ALL_CALLERS = '*';
const dayOf = (ms: number): string => new Date(ms).toISOString().slice(0, 10);

type Row = Record<string, SqlStorageValue>;
const toOwner = (r: Row): OwnerRow => ({
  pubkey: String(r.pubkey),
  plan: String(r.plan),
  suspended: r.suspended === 1,
  vetted: r.vetted === 1,
  created_at: Number(r.created_at),
});

export class Accounts extends DurableObject<AccountsEnv> {
  private readonly sql: SqlStorage;
  private readonly reads = new ReadBudget(USAGE_ROWS_PER_MINUTE, 60_000);
  /** The budget of all callers' queries, kept under one key. */
  private readonly allReads = new ReadBudget(USAGE_ROWS_PER_MINUTE_ALL, 60_000);
  /** What each agent's runs in progress hold, as it last told (in-flight.ts). */
  private readonly inFlight = new InFlightTokens();
  /** The runs the agents admitted and did not report yet, on plans with runs_per_day (run-reservations.ts). */
  private readonly reservations = new RunReservations();

  constructor(ctx: DurableObjectState, env: AccountsEnv) {
    super(ctx, env);
    this.sql = ctx.storage.sql;
    this.sql.exec(`
      CREATE TABLE IF NOT EXISTS owners (pubkey TEXT PRIMARY KEY, plan TEXT NOT NULL, suspended INTEGER NOT NULL DEFAULT 0, created_at INTEGER NOT NULL) WITHOUT ROWID;
      CREATE TABLE IF NOT EXISTS removed_owners (pubkey TEXT PRIMARY KEY, removed_at INTEGER NOT NULL) WITHOUT ROWID;
      CREATE TABLE IF NOT EXISTS signup_days (day TEXT PRIMARY KEY, n INTEGER NOT NULL) WITHOUT ROWID;
      CREATE TABLE IF NOT EXISTS usage (
        owner TEXT NOT NULL, day TEXT NOT NULL, agent TEXT NOT NULL, sender TEXT NOT NULL, model TEXT NOT NULL,
        runs INTEGER NOT NULL, input_tokens INTEGER NOT NULL, output_tokens INTEGER NOT NULL, tool_calls INTEGER NOT NULL, errors INTEGER NOT NULL,
        PRIMARY KEY (owner, day, agent, sender, model)
      ) WITHOUT ROWID;
      CREATE INDEX IF NOT EXISTS usage_day ON usage(day);
      CREATE TABLE IF NOT EXISTS recorded_runs (agent TEXT NOT NULL, run_id TEXT NOT NULL, at INTEGER NOT NULL, PRIMARY KEY (agent, run_id)) WITHOUT ROWID;
      CREATE INDEX IF NOT EXISTS recorded_runs_at ON recorded_runs(at);
    `);
    // The plan totals every run report answers, one row per owner and day (see `totals`); filled
    // once from `usage` by an object from before the table.
    const hadDays = this.sql.exec("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'owner_days'").toArray().length > 0;
    this.sql.exec('CREATE TABLE IF NOT EXISTS owner_days (owner TEXT NOT NULL, day TEXT NOT NULL, runs INTEGER NOT NULL, tokens INTEGER NOT NULL, PRIMARY KEY (owner, day)) WITHOUT ROWID');
    if (!hadDays) this.sql.exec('INSERT INTO owner_days (owner, day, runs, tokens) SELECT owner, day, sum(runs), sum(input_tokens + output_tokens) FROM usage GROUP BY owner, day');
    // The rows of each day, all owners together, but the OTHERS rows (see the header); filled once,
    // for the days a report may still come for, by an object from before the table.
    const hadCounts = this.sql.exec("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'usage_days'").toArray().length > 0;
    this.sql.exec('CREATE TABLE IF NOT EXISTS usage_days (day TEXT PRIMARY KEY, rows INTEGER NOT NULL) WITHOUT ROWID');
    if (!hadCounts) {
      this.sql.exec(
        'INSERT INTO usage_days (day, rows) SELECT day, count(*) FROM usage WHERE day >= ? AND agent != ? GROUP BY day',
        dayOf(Date.now() - RECORDED_RUN_RETENTION_MS),
        OTHERS,
      );
    }
    const columns = this.sql.exec<{ name: string }>('PRAGMA table_info(owners)').toArray();
    if (!columns.some((c) => c.name === 'vetted')) this.addVetted(env.EDGESTR_SIGNUP === 'open');
    // Accounts from before versions are at 0 (so is what their shards hold: owner-plan.ts).
    for (const table of ['owners', 'removed_owners']) {
      const cols = this.sql.exec<{ name: string }>(`PRAGMA table_info(${table})`).toArray();
      if (!cols.some((c) => c.name === 'version')) this.sql.exec(`ALTER TABLE ${table} ADD COLUMN version INTEGER NOT NULL DEFAULT 0`);
    }
  }

  /** The upgrade that adds owners.vetted: the rows already there are vetted unless sign-up is `open` (see the header). */
  private addVetted(open: boolean): void {
    this.sql.exec(`ALTER TABLE owners ADD COLUMN vetted INTEGER NOT NULL DEFAULT ${open ? 0 : 1}`);
    const rows = this.sql.exec<{ n: number }>('SELECT count(*) AS n FROM owners').one().n;
    if (rows === 0) return;
    const found = `accounts upgrade: owners registered before sign-ups were told apart: ${rows}`;
    console.warn(
      open
        ? `${found}; EDGESTR_SIGNUP=open, so none of them is vetted (any may have signed itself up): EDGESTR_OUTBOUND_ALLOW does not apply to their dials and their bridges are not this deployment's. Review GET /api/admin/owners and vet those the operators added with PATCH /api/admin/owners/<pubkey> {"vetted":true}`
        : `${found}; EDGESTR_SIGNUP is not open, so they count as vetted. If sign-up was open on this deployment before, review GET /api/admin/owners and mark those that signed themselves up with PATCH /api/admin/owners/<pubkey> {"vetted":false}`,
    );
  }

  // ---- registry ----

  owner(pubkey: string): OwnerRow | undefined {
    const r = this.sql.exec('SELECT * FROM owners WHERE pubkey = ?', pubkey).toArray()[0];
    return r ? toOwner(r) : undefined;
  }

  /** Up to `limit` registered owners in key order, after the key `after` when given. */
  owners(limit: number = OVERVIEW_PAGE_MAX, after?: string): OwnerRow[] {
    const rows = after === undefined ? this.sql.exec('SELECT * FROM owners ORDER BY pubkey LIMIT ?', limit) : this.sql.exec('SELECT * FROM owners WHERE pubkey > ? ORDER BY pubkey LIMIT ?', after, limit);
    return rows.toArray().map(toOwner);
  }

  /** Up to `limit` registered owners' keys in key order, after `after` when given (the backup cron pages through them). */
  ownerKeys(limit: number, after?: string): string[] {
    return this.owners(limit, after).map((o) => o.pubkey);
  }

  /**
   * An operator adds an owner (a key it removed before too: its removal record goes, its version
   * going on from the removal's); false when it is already registered.
   */
  add(pubkey: string, plan: string = DEFAULT_PLAN): boolean {
    return this.ctx.storage.transactionSync(() => {
      if (this.owner(pubkey)) return false;
      const removal = this.sql.exec<{ version: number }>('DELETE FROM removed_owners WHERE pubkey = ? RETURNING version', pubkey).toArray()[0];
      return this.insert(pubkey, plan, true, (removal?.version ?? 0) + 1);
    });
  }

  /**
   * A key signs itself up on `plan` at `now` (ms) within `caps` (see the header): 'removed' when an
   * operator removed it, 'owner' when it is registered already, 'full' / 'full_today' past the caps
   * (nothing added in those cases).
   */
  signUp(pubkey: string, plan: string, caps: SignupCaps, now: number = Date.now()): SignUpResult {
    return this.ctx.storage.transactionSync(() => {
      if (this.sql.exec('SELECT 1 FROM removed_owners WHERE pubkey = ?', pubkey).toArray().length > 0) return 'removed';
      if (this.owner(pubkey)) return 'owner';
      if (this.sql.exec<{ n: number }>('SELECT count(*) AS n FROM owners').one().n >= caps.owners) return 'full';
      const day = dayOf(now);
      this.sql.exec('DELETE FROM signup_days WHERE day < ?', day);
      const today = this.sql.exec<{ n: number }>('SELECT coalesce(sum(n), 0) AS n FROM signup_days WHERE day = ?', day).one().n;
      if (today >= caps.per_day) return 'full_today';
      this.insert(pubkey, plan, false, 1);
      this.sql.exec('INSERT INTO signup_days (day, n) VALUES (?, 1) ON CONFLICT (day) DO UPDATE SET n = n + 1', day);
      return 'added';
    });
  }

  private insert(pubkey: string, plan: string, vetted: boolean, version: number): boolean {
    return (
      this.sql
        .exec(
          'INSERT INTO owners (pubkey, plan, created_at, vetted, version) VALUES (?, ?, ?, ?, ?) ON CONFLICT (pubkey) DO NOTHING RETURNING pubkey',
          pubkey,
          plan,
          Math.floor(Date.now() / 1000),
          vetted ? 1 : 0,
          version,
        )
        .toArray().length > 0
    );
  }

  /** An operator changes an owner (its version goes up with it); undefined when it is not registered. */
  update(pubkey: string, patch: { plan?: string; suspended?: boolean; vetted?: boolean }): OwnerRow | undefined {
    return this.ctx.storage.transactionSync(() => {
      const row = this.owner(pubkey);
      if (!row) return undefined;
      const next = { ...row, ...patch };
      this.sql.exec('UPDATE owners SET plan = ?, suspended = ?, vetted = ?, version = version + 1 WHERE pubkey = ?', next.plan, next.suspended ? 1 : 0, next.vetted ? 1 : 0, pubkey);
      return next;
    });
  }

  /**
   * An operator removes an owner and records its key (the removal one version above the owner's
   * last), so that it cannot sign up again; false when it is not registered.
   */
  remove(pubkey: string): boolean {
    return this.ctx.storage.transactionSync(() => {
      const row = this.sql.exec<{ version: number }>('DELETE FROM owners WHERE pubkey = ? RETURNING version', pubkey).toArray()[0];
      if (!row) return false;
      this.sql.exec(
        'INSERT INTO removed_owners (pubkey, removed_at, version) VALUES (?, ?, ?) ON CONFLICT (pubkey) DO UPDATE SET removed_at = excluded.removed_at, version = excluded.version',
        pubkey,
        Math.floor(Date.now() / 1000),
        row.version + 1,
      );
      return true;
    });
  }

  /**
   * The account of `pubkey` as its shard is to hold it, with its version (see the header): the
   * registered owner's plan and suspension, or `account` undefined for a key the operators removed;
   * undefined for a key that is neither.
   */
  standing(pubkey: string): OwnerStanding | undefined {
    const row = this.sql.exec<{ plan: string; suspended: number; version: number }>('SELECT plan, suspended, version FROM owners WHERE pubkey = ?', pubkey).toArray()[0];
    if (row) return { account: { plan: row.plan, suspended: row.suspended === 1 }, version: row.version };
    const removal = this.sql.exec<{ version: number }>('SELECT version FROM removed_owners WHERE pubkey = ?', pubkey).toArray()[0];
    return removal ? { account: undefined, version: removal.version } : undefined;
  }

  /**
   * One page of the owners, each with its totals at `now` (ms): up to `limit` (at most
   * OVERVIEW_PAGE_MAX) registered owners in key order after the cursor `after`, and on the first
   * page (no cursor) the static ones before them (as many as EDGESTR_OWNERS lists).
   */
  overview(now: number, limit: number = OVERVIEW_PAGE_MAX, after?: string): OwnersPage {
    const statics =
      after === undefined ? [...staticOwners(this.env)].sort().map((pubkey) => ({ pubkey, plan: DEFAULT_PLAN, suspended: false, vetted: true, created_at: 0, source: 'static' as const })) : [];
    const rows = this.owners(Math.min(limit, OVERVIEW_PAGE_MAX) + 1, after);
    const page = rows.slice(0, Math.min(limit, OVERVIEW_PAGE_MAX));
    const owners = [...statics, ...page.map((r) => ({ ...r, source: 'registry' as const }))].map((o) => ({ ...o, usage: this.totals(o.pubkey, now) }));
    const last = page.at(-1);
    return rows.length > page.length && last ? { owners, next: last.pubkey } : { owners };
  }

  /** The registered owners' states, at most REGISTRY_COPY_MAX of them (what router isolates copy, workers/common/owners.ts). */
  states(): RegistryCopy {
    const rows = this.owners(REGISTRY_COPY_MAX + 1);
    return { owners: rows.slice(0, REGISTRY_COPY_MAX).map(({ pubkey, plan, suspended }) => ({ pubkey, plan, suspended })), complete: rows.length <= REGISTRY_COPY_MAX };
  }

  /**
   * The registry's state of `pubkey`, or undefined when it is not registered. (Static owners are
   * the caller's to check first, against its own EDGESTR_OWNERS: see workers/common/owners.ts.)
   */
  state(pubkey: string): OwnerState | undefined {
    const row = this.owner(pubkey);
    return row ? { plan: row.plan, suspended: row.suspended } : undefined;
  }

  /** Which of `keys` are registered owners the operators vetted (the caller bounds how many it names). */
  vettedAmong(keys: string[]): string[] {
    return this.sql
      .exec<{ pubkey: string }>('SELECT pubkey FROM owners WHERE vetted = 1 AND pubkey IN (SELECT value FROM json_each(?))', JSON.stringify(keys))
      .toArray()
      .map((r) => r.pubkey);
  }

  // ---- usage ----

  /**
   * Adds one run to the owner's aggregate (see usageKey for the row) unless it was recorded
   * already, prunes a few expired rows, and answers the owner's snapshot at `now` (ms). `inFlight`:
   * what the reporting agent's runs still in progress hold (without this run), kept in place of its
   * figure in the same step as the run is added, so that the run is never counted twice; the run's
   * reservation, if any, ends in that step too (counted once: reserved, then in the totals).
   */
  record(run: RunUsage, now: number = run.at, inFlight?: number): OwnerSnapshot {
    this.reservations.release(run.owner, run.agent, run.run_id);
    this.sql.exec('DELETE FROM recorded_runs WHERE (agent, run_id) IN (SELECT agent, run_id FROM recorded_runs WHERE at < ? ORDER BY at LIMIT ?)', now - RECORDED_RUN_RETENTION_MS, USAGE_PRUNE_PER_RECORD);
    const fresh = this.sql.exec('INSERT INTO recorded_runs (agent, run_id, at) VALUES (?, ?, ?) ON CONFLICT DO NOTHING RETURNING run_id', run.agent, run.run_id, run.at).toArray().length > 0;
    if (fresh) this.addUsage(run);
    this.prune(now, USAGE_PRUNE_PER_RECORD);
    return this.snapshot(run.owner, now, inFlight === undefined ? undefined : { agent: run.agent, tokens: inFlight });
  }

  private addUsage(run: RunUsage): void {
    const day = dayOf(run.at);
    this.sql.exec(
      `INSERT INTO owner_days (owner, day, runs, tokens) VALUES (?, ?, 1, ?)
       ON CONFLICT (owner, day) DO UPDATE SET runs = runs + 1, tokens = tokens + excluded.tokens`,
      run.owner,
      day,
      run.input_tokens + run.output_tokens,
    );
    const key = this.usageKey(run.owner, day, run.agent, run.sender, Array.from(run.model).slice(0, MODEL_NAME_MAX).join(''));
    this.sql.exec(
      `INSERT INTO usage (owner, day, agent, sender, model, runs, input_tokens, output_tokens, tool_calls, errors) VALUES (?, ?, ?, ?, ?, 1, ?, ?, ?, ?)
       ON CONFLICT (owner, day, agent, sender, model) DO UPDATE SET runs = runs + 1, input_tokens = input_tokens + excluded.input_tokens,
       output_tokens = output_tokens + excluded.output_tokens, tool_calls = tool_calls + excluded.tool_calls, errors = errors + excluded.errors`,
      run.owner,
      day,
      key.agent,
      key.sender,
      key.model,
      run.input_tokens,
      run.output_tokens,
      run.tool_calls,
      run.error ? 1 : 0,
    );
  }

  /**
   * The row a run of the owner's `day` is summed in: its agent, sender (see senderKey) and model
   * when that row exists, or when the owner's day has fewer than USAGE_ROWS_PER_OWNER_DAY − 1 rows
   * besides its OTHERS row and the day fewer than USAGE_ROWS_PER_DAY (the new row then counted in
   * usage_days); else the owner-day's OTHERS row. Reads at most USAGE_ROWS_PER_OWNER_DAY rows.
   */
  private usageKey(owner: string, day: string, agent: string, sender: string, model: string): { agent: string; sender: string; model: string } {
    const own = { agent, sender: this.senderKey(owner, day, agent, sender), model };
    const listed = this.sql.exec('SELECT 1 FROM usage WHERE owner = ? AND day = ? AND agent = ? AND sender = ? AND model = ?', owner, day, own.agent, own.sender, own.model).toArray().length > 0;
    if (listed) return own;
    const ownerRows = this.sql
      .exec<{ n: number }>('SELECT count(*) AS n FROM (SELECT 1 FROM usage WHERE owner = ? AND day = ? AND agent != ? LIMIT ?)', owner, day, OTHERS, USAGE_ROWS_PER_OWNER_DAY)
      .one().n;
    const dayRows = this.sql.exec<{ rows: number }>('SELECT rows FROM usage_days WHERE day = ?', day).toArray()[0]?.rows ?? 0;
    if (ownerRows >= USAGE_ROWS_PER_OWNER_DAY - 1 || dayRows >= USAGE_ROWS_PER_DAY) return { agent: OTHERS, sender: OTHERS, model: OTHERS };
    this.sql.exec('INSERT INTO usage_days (day, rows) VALUES (?, 1) ON CONFLICT (day) DO UPDATE SET rows = rows + 1', day);
    return own;
  }

  /** The sender a run is summed under: its own key when the agent's day already lists it or has room, else OTHERS. */
  private senderKey(owner: string, day: string, agent: string, sender: string): string {
    const listed = this.sql.exec('SELECT 1 FROM usage WHERE owner = ? AND day = ? AND agent = ? AND sender = ? LIMIT 1', owner, day, agent, sender).toArray().length > 0;
    if (listed) return sender;
    const senders = this.sql
      .exec<{ n: number }>('SELECT COUNT(DISTINCT sender) AS n FROM usage WHERE owner = ? AND day = ? AND agent = ? AND sender != ?', owner, day, agent, OTHERS)
      .one().n;
    return senders < USAGE_SENDERS_PER_AGENT_DAY ? sender : OTHERS;
  }

  /** Deletes at most `limit` rows older than USAGE_RETENTION_DAYS before `now` (ms), oldest first (of usage, and of owner_days), and those days' counts. */
  private prune(now: number, limit: number): void {
    const expired = dayOf(now - USAGE_RETENTION_DAYS * DAY_MS);
    this.sql.exec(
      `DELETE FROM usage WHERE (owner, day, agent, sender, model) IN
         (SELECT owner, day, agent, sender, model FROM usage WHERE day < ? ORDER BY day LIMIT ?)`,
      expired,
      limit,
    );
    this.sql.exec('DELETE FROM owner_days WHERE (owner, day) IN (SELECT owner, day FROM owner_days WHERE day < ? ORDER BY day LIMIT ?)', expired, limit);
    this.sql.exec('DELETE FROM usage_days WHERE day IN (SELECT day FROM usage_days WHERE day < ? ORDER BY day LIMIT ?)', expired, limit);
  }

  /**
   * The owner's state and totals at `now` (ms), with what its agents' runs in progress hold. `from`:
   * the asking agent and what its own runs in progress hold, kept (in-flight.ts) and left out of
   * the answer's `in_flight` (the agent counts its own).
   */
  snapshot(owner: string, now: number, from?: AgentInFlight): OwnerSnapshot {
    if (from) this.inFlight.set(owner, from, now);
    return { state: this.state(owner), totals: this.totals(owner, now), in_flight: this.inFlight.others(owner, now, from?.agent) };
  }

  /**
   * Reserves a run an agent admitted, when the owner's plan sets runs_per_day: the plan's check
   * (quota.ts planRefusal, the others' share for a sender other than the owner) against the owner's
   * runs of the day at `now` (ms) plus every agent's runs reserved and not reported yet; the refusal,
   * or undefined with the run reserved until its report or `r.until` (run-reservations.ts).
   */
  reserveRun(r: RunAsk, now: number): QuotaRefusal | undefined {
    const { other, runs_per_day, ...reservation } = r;
    const refusal = planRefusal({ runs_per_day }, this.totals(r.owner, now), now, { other, inFlight: this.reservations.count(r.owner, now) });
    if (!refusal) this.reservations.add(reservation, now);
    return refusal;
  }

  /** The owner's runs and tokens today and tokens this month at `now` (ms): at most 31 rows of owner_days, whatever the agents, senders and models. */
  totals(owner: string, now: number): OwnerTotals {
    const day = dayOf(now);
    const month = day.slice(0, 7);
    const r = this.sql
      .exec<{ tokens_today: number; tokens_month: number; runs_today: number }>(
        `SELECT coalesce(sum(CASE WHEN day = ? THEN tokens END), 0) AS tokens_today,
                coalesce(sum(tokens), 0) AS tokens_month,
                coalesce(sum(CASE WHEN day = ? THEN runs END), 0) AS runs_today
         FROM owner_days WHERE owner = ? AND day >= ? AND day <= ?`,
        day,
        day,
        owner,
        `${month}-01`,
        `${month}-31`,
      )
      .one();
    return { day, ...r };
  }

  /**
   * The usage of `q` grouped by `q.by`, read within MAX_USAGE_SCAN rows (see the header), at `now`
   * (ms); refused when the caller has used its USAGE_ROWS_PER_MINUTE, or all callers USAGE_ROWS_PER_MINUTE_ALL.
   */
  usage(q: UsageQuery, now: number): Result<UsageAnswer, UsageRefusal> {
    const refusal = (wait: number, budget: string): Result<UsageAnswer, UsageRefusal> => {
      const retry = Math.ceil(wait / 1000);
      return err({ error: `${budget}; retry in ${retry} s`, retry_after: retry });
    };
    const wait = this.reads.wait(q.caller, now);
    if (wait > 0) return refusal(wait, `usage queries of this key may read ${USAGE_ROWS_PER_MINUTE} rows a minute`);
    const waitAll = this.allReads.wait(ALL_CALLERS, now);
    if (waitAll > 0) return refusal(waitAll, `usage queries on this deployment may read ${USAGE_ROWS_PER_MINUTE_ALL} rows a minute in all`);
    const range = (to: string): [string, SqlStorageValue[]] =>
      q.owner === undefined ? ['day >= ? AND day <= ?', [q.from, to]] : ['owner = ? AND day >= ? AND day <= ?', [q.owner, q.from, to]];
    // The range's rows up to one past the bound, in day order (the table's key, or usage_day for
    // every owner): past it, the day of the first row left out is the cut.
    const [where, args] = range(q.to);
    const seen = this.sql
      .exec<{ n: number; last: string | null }>(`SELECT count(*) AS n, max(day) AS last FROM (SELECT day FROM usage WHERE ${where} ORDER BY day LIMIT ${MAX_USAGE_SCAN + 1})`, ...args)
      .one();
    const cut = seen.n > MAX_USAGE_SCAN && seen.last !== null ? seen.last : undefined;
    const through = cut === undefined ? undefined : cut > q.from ? dayOf(Date.parse(`${cut}T00:00:00Z`) - DAY_MS) : q.from;
    const [sumWhere, sumArgs] = range(through ?? q.to);
    // Up to the cut the range holds at most MAX_USAGE_SCAN rows; a first day that alone holds more is read up to the bound.
    const rowsOf = cut === q.from ? `(SELECT * FROM usage WHERE ${sumWhere} ORDER BY day LIMIT ${MAX_USAGE_SCAN})` : `usage WHERE ${sumWhere}`;
    const sums = this.sql.exec<{ key: string; runs: number; input_tokens: number; output_tokens: number; tool_calls: number; errors: number }>(
      `SELECT ${q.by} AS key, sum(runs) AS runs, sum(input_tokens) AS input_tokens, sum(output_tokens) AS output_tokens,
              sum(tool_calls) AS tool_calls, sum(errors) AS errors
       FROM ${rowsOf} GROUP BY ${q.by} ORDER BY ${q.by}`,
      ...sumArgs,
    );
    const rows = withinAnswer(sums.toArray());
    this.reads.spend(q.caller, seen.n, now);
    this.allReads.spend(ALL_CALLERS, seen.n, now);
    return ok(through === undefined ? { rows } : { rows, through });
  }
}
