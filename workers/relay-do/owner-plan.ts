// The owner's plan on its shard (workers/accounts): the account the admin API pushes (plan and
// suspension; none pushed: the default plan, as for any key under EDGESTR_OPEN_SHARDS; the owner's
// removal, pushed too, is kept until an operator adds the owner again). Each push carries the
// version the Accounts object gave that change (accounts-do.ts `standing`), kept with the account
// (`owner_version`, 0 before any): a push older than the one held is ignored, so overlapping admin
// calls cannot bring back an account a later change replaced. An owner listed in
// EDGESTR_OWNERS is on the default plan, never suspended nor removed, whatever was pushed before it
// was listed (the admin API refuses to change a listed owner, so nothing would lift it; the pushed
// account is kept and applies again once the owner is no longer listed). Then the shard's stored
// events and bytes, and the checks of a write against them — a
// suspended owner's shard stores nothing new (`restricted: suspended`), nor does a removed owner's
// (`restricted: removed`; where the router no longer serves it, shard.ts also closes its sockets);
// ephemeral events still pass both, so a suspended agent can say so — a stored event over the plan's
// stored_bytes (less what it replaces: the older versions of a replaceable event) is `restricted:
// storage quota`, and more than events_per_second events from outside connections is `rate-limited`.
// The owner's standing and the plan's figures (its limits, what is stored) are told to the owner's
// side alone (a connection authenticated as the owner or one of its agents, write-rules.ts
// `ownerSideConnection`; an import or restore is the owner's): every other connection gets the same
// refusals without them (FOR_OTHERS), so strangers cannot read the owner's suspension, plan or usage
// off the answers to their events.
// Every shard is also held to the relay's max_stored_bytes (RELAY_LIMITS), which a Durable Object
// must never outgrow: an owner shard's plan allowing more, or none, gets that bound instead; the
// public shard has no plan and only that bound, of which clients may fill all but RESERVED_SHARE,
// the rest being kept for what edgestr's own connections (its agents and bridges, an operator's
// restore) publish about themselves and to their owners (`reserveWrite`): their answers to other
// keys, which strangers cause, count against the clients' share like a client's write. What the
// agents and bridges of one owner (an internal connection serving that owner, socket-tags.ts) store
// there is held to OWNER_RESERVE_SHARE of the reserve (each such event is counted with its owner,
// `stored_sizes.owner`), so that one sign-up's many bridges cannot fill the shard for everyone; the
// deployment's own components (no owner served) are not. All owners' together hold at most the
// reserve (`stored_totals.owners`); past it their writes count against the clients' share, so many
// sign-ups cannot fill the shard for clients and the deployment's own components either.
//
// What is stored is counted exactly and without reading the stored events: each stored event's
// bytes (`countedBytes`: its JSON and the copies of its tag values the indexes keep), and whether
// they are the inbox's, are kept with it (`stored_sizes`, by the events' rid) and summed as they
// are added (`stored_totals`); SQL triggers remove an event's row, and its bytes from the sums, as
// the event row is deleted, whatever deletes it (a NIP-09 deletion, a newer version of a
// replaceable event, NIP-40 expiry, retention, a request to vanish), so room is freed at once. A
// shard made before this counts its stored events once, when it wakes (`backfill`).
//
// Strangers may write to the shard too (its inbox: events addressed to the owner or its agents), so
// that they cannot spend the owner's plan: events from others may hold at most INBOX_SHARE of
// stored_bytes (the plan's or the relay's), and their events per second are counted in a bucket of
// their own. What counts as the owner's own data is one rule (`ownersData`, a SQL expression),
// asked of each event as it is stored and kept with it (an agent recorded later leaves its earlier
// events the inbox's, as they were counted): signed by the owner, or by a key recorded as the
// owner's agent (or bridge) and addressed (`p`) to nobody but the owner and those keys. Everything
// else is the inbox's: strangers' events, and the agents' answers to other keys (which strangers
// cause: a prompt from a fresh key gets one, refusals included). A gift wrap is signed by a
// one-time key, so nothing stored tells who sent it: one published on a connection authenticated as
// the owner or one of its agents is judged as if that key had signed it; every other wrap is the
// inbox's. So strangers filling the inbox share with wraps cannot block the owner's wrapped prompts
// to its agents, nor the agents' wrapped answers to the owner.
// A restore (shard.ts `importEvents`) does not judge again what a backup says each event was
// counted as: who sent a wrap is not in it, nor are the AUTH proofs that made a key the owner's
// agent. A backup carries the side of each event a restore cannot tell from the event alone
// (`carriedSides`, export.ts COUNTED lines) and the restore takes it (`CountedSide`): on an owner
// shard every event not signed by the owner (the rule makes the owner's own its data whoever
// publishes them), on the public shard those held in an owner's share of the reserve.

import { reject, type Rejection } from '../../src/shared/errors.js';
import { DEFAULT_PLAN, planLimits, type PlanEnv } from '../accounts/plans.js';
import type { OwnerState } from '../common/owners.js';
import { TokenBucket } from './rate-limit.js';
import type { NostrEvent } from '../../src/shared/event.js';
import { coordinateD } from './store.js';
import { utf8Bytes } from '../../src/shared/json-cut.js';
import type { EventContext } from './policy.js';

/** The part of an owner shard's stored bytes (its plan's, or the relay's bound) that events from others (the inbox) may hold. */
export const INBOX_SHARE = 0.25;

/** The part of the public shard's max_stored_bytes kept for edgestr's own connections (`reserveWrite`): clients may fill the rest. */
export const RESERVED_SHARE = 0.125;

/** The part of the reserve the stored events of one owner's agents and bridges may hold (`OwnerPlan.check`, PlanWrite.servedOwner). */
export const OWNER_RESERVE_SHARE = 1 / 16;

/**
 * Whether a write may use the public shard's reserve (RESERVED_SHARE): one from edgestr's own
 * connection (its agents and bridges, an operator's restore) addressed (`p`) to nobody but who
 * publishes it — its signer, or a key the connection is authenticated as (a gift wrap's signer is
 * a one-time key) — and the owners the shard has on record for them (ownership.ts). That is what
 * the deployment publishes about itself: profiles, relay lists, ai.info, DVMCP announcements, their
 * deletions, and its answers to its owners. An answer to any other key counts against the clients'
 * share like a client's write: strangers cause it (a prompt or a call from a fresh key gets one,
 * refusals included), so through the deployment's agents and bridges they could otherwise fill the
 * reserve and push its own announcements out. Stops at the first `p` naming someone else.
 */
export function reserveWrite(e: NostrEvent, ctx: Pick<EventContext, 'internal' | 'authed' | 'isAgentOwner'>): boolean {
  if (!ctx.internal) return false;
  const publishers = new Set([e.pubkey, ...ctx.authed]);
  const owners = new Set<string>();
  for (const [name, value] of e.tags) {
    if (name !== 'p' || value === undefined || publishers.has(value) || owners.has(value)) continue;
    if (![...publishers].some((k) => ctx.isAgentOwner(k, value, k === e.pubkey ? e : undefined))) return false;
    owners.add(value);
  }
  return true;
}

/**
 * A write as the plan sees it: the event, stored or not, its bytes, from edgestr's own agent
 * connection, whether it may use the public shard's reserve (`reserveWrite`), from a connection
 * outside the owner's side of an owner shard (its events-per-second bucket, and refusals without
 * the owner's standing or figures: FOR_OTHERS), and whether it is stored in the inbox share
 * (`OwnerPlan.isInbox`).
 */
export interface PlanWrite {
  event: Pick<NostrEvent, 'pubkey' | 'kind' | 'tags'>;
  /** The stored events this write removes besides the versions it replaces (a deletion's targets, store.ts deletionTargets), by rid; asked only when the write does not fit without them. */
  removes?: () => readonly number[];
  stored: boolean;
  bytes: number;
  internal: boolean;
  reserved: boolean;
  /** A reserved write from an internal connection serving this owner (its agents and bridges): held to OWNER_RESERVE_SHARE of the reserve. */
  servedOwner?: string | undefined;
  fromOthers: boolean;
  inbox: boolean;
}

/**
 * The bytes a stored event is counted for (the unit of stored_bytes and max_stored_bytes): its JSON
 * (`raw`, UTF-8), and the copies of its values the shard's indexes keep (store.ts): each
 * single-letter tag's value twice (the tag index and its `rid` index; every such tag, as if none
 * repeated another), and the `d` coordinate of an addressable event twice more (events.d and
 * events_addr). So an event of long tag values costs what it takes, not a fifth of it.
 */
export function countedBytes(e: Pick<NostrEvent, 'kind' | 'tags'>, raw: string): number {
  let bytes = utf8Bytes(raw);
  for (const [name, value] of e.tags) if (name?.length === 1 && value !== undefined) bytes += 2 * utf8Bytes(value);
  return bytes + 2 * utf8Bytes(coordinateD(e) ?? '');
}

/**
 * The same for an event stored before each event's count was kept (a shard's first wake with
 * `stored_sizes`), from what the store holds of it: its tag index rows, one per distinct value.
 */
const COUNTED_STORED = `octet_length(events.raw) + 2 * coalesce(octet_length(events.d), 0)
  + 2 * coalesce((SELECT sum(octet_length(value)) FROM tags WHERE tags.rid = events.rid), 0)`;

/**
 * The one rule of what a stored event counts as (SQL, ?1 = the owner): the owner's own data when
 * signed by the owner, or signed by a key recorded as the owner's agent and p-tagging nobody but the
 * owner and such keys; otherwise the inbox's. `pubkey` is the event's author and `pValues` a table
 * of its `p` tag values (column `value`): the event's parameters as it is stored, its stored tag
 * rows when a shard made before `stored_sizes` counts what it holds. Agent keys are the shard's
 * records for the owner, whatever their conditions.
 */
const AGENTS_OF_OWNER = 'SELECT agent FROM agent_owners WHERE owner = ?1';
const ownersData = (pubkey: string, pValues: string): string =>
  `(${pubkey} = ?1 OR (${pubkey} IN (${AGENTS_OF_OWNER}) AND NOT EXISTS (SELECT 1 FROM ${pValues} WHERE value != ?1 AND value NOT IN (${AGENTS_OF_OWNER}))))`;
const OWNERS_DATA_AT_WRITE = `SELECT ${ownersData('?2', 'json_each(?3)')} AS own`;

/**
 * Each stored event's counted bytes and whether they are the inbox's (1) or the owner's (0), and
 * their sums, kept by triggers: a row added adds to the sums, an event row deleted removes its row
 * and takes it from the sums.
 */
const SCHEMA = `
CREATE TABLE IF NOT EXISTS stored_sizes (rid INTEGER PRIMARY KEY, bytes INTEGER NOT NULL, inbox INTEGER NOT NULL, owner TEXT);
CREATE INDEX IF NOT EXISTS stored_sizes_owner ON stored_sizes (owner) WHERE owner IS NOT NULL;
CREATE TABLE IF NOT EXISTS stored_totals (k INTEGER PRIMARY KEY CHECK (k = 1), events INTEGER NOT NULL, bytes INTEGER NOT NULL, inbox INTEGER NOT NULL, owners INTEGER NOT NULL DEFAULT 0);
CREATE TRIGGER IF NOT EXISTS stored_sizes_added AFTER INSERT ON stored_sizes BEGIN
  UPDATE stored_totals SET events = events + 1, bytes = bytes + NEW.bytes, inbox = inbox + NEW.bytes * NEW.inbox;
END;
CREATE TRIGGER IF NOT EXISTS stored_sizes_removed AFTER DELETE ON stored_sizes BEGIN
  UPDATE stored_totals SET events = events - 1, bytes = bytes - OLD.bytes, inbox = inbox - OLD.bytes * OLD.inbox;
END;
CREATE TRIGGER IF NOT EXISTS stored_sizes_owner_added AFTER INSERT ON stored_sizes WHEN NEW.owner IS NOT NULL BEGIN
  UPDATE stored_totals SET owners = owners + NEW.bytes;
END;
CREATE TRIGGER IF NOT EXISTS stored_sizes_owner_removed AFTER DELETE ON stored_sizes WHEN OLD.owner IS NOT NULL BEGIN
  UPDATE stored_totals SET owners = owners - OLD.bytes;
END;
CREATE TRIGGER IF NOT EXISTS stored_event_removed AFTER DELETE ON events BEGIN
  DELETE FROM stored_sizes WHERE rid = OLD.rid;
END;
`;

/** The side a stored event was counted in: the inbox's or not, and the owner whose agents and bridges hold it in the public shard's reserve (null: none). */
export type CountedSide = { id: string; inbox: boolean; owner: string | null };

/** What a write frees: counted bytes, of them the inbox's, and those of the owner whose agents and bridges write (PlanWrite.servedOwner). */
type Freed = { bytes: number; inbox: number; owner: number };

/** Stored events and bytes, the bytes of events from others, and of owners' agents and bridges in the public shard's reserve. */
type Counted = ShardStorage & { inbox: number; owners: number };

/**
 * The stored bytes a shard may hold: the owner's plan's stored_bytes (`planned`; the public shard
 * and a plan without one have none), never more than the relay's max_stored_bytes; and who sets it.
 */
export function storageLimit(planned: number | undefined, maxStoredBytes: number): { allowed: number; by: string } {
  return planned !== undefined && planned <= maxStoredBytes ? { allowed: planned, by: 'the owner’s plan allows' } : { allowed: maxStoredBytes, by: 'the relay allows' };
}

export type ShardStorage = {
  events: number;
  /** Their counted bytes (`countedBytes`). */
  bytes: number;
};

/** An owner's account as a shard holds it (undefined: removed) and the version it was pushed at (`OwnerPlan.set`). */
export type HeldAccount = { account: OwnerState | undefined; version: number };

/** The account of an owner removed from the deployment (`OwnerPlan.set(undefined)`). */
const REMOVED = 'removed';

/** A removed owner's shard stores nothing new (its sockets' answer to a stored event, on the owner's side). */
export const OWNER_REMOVED = 'removed: this owner was removed from this deployment; its shard is read-only';
/** A suspended owner's shard stores nothing new (likewise). */
export const SHARD_SUSPENDED = 'suspended: this owner’s shard is read-only';

/** What a connection not on the owner's side is told of the same refusals: no standing, no figure (see the header). */
export const FOR_OTHERS = {
  readOnly: 'this shard stores nothing new for now; retry later',
  rate: 'too many events from others on this shard; retry in a second',
  storage: 'storage quota: this shard has no room for more events from others for now',
} as const;
/** Where the router no longer serves a removed owner's shard, neither does the shard: why its sockets are closed and new ones refused. */
export const SHARD_NOT_SERVED = 'this owner was removed from this deployment; its shard is no longer served';

/** The account of an owner listed in EDGESTR_OWNERS. */
const LISTED: OwnerState = { plan: DEFAULT_PLAN, suspended: false };

export class OwnerPlan {
  /** The account pushed last: REMOVED once the owner was removed (until it is added again), undefined when none was. */
  private account: OwnerState | typeof REMOVED | undefined;
  /** The version of that push (0: none, or none carried one). */
  private version: number;
  /** The plan's events per second, for the owner's side and for others. */
  private readonly buckets = new Map<boolean, { rate: number; bucket: TokenBucket }>();

  constructor(
    private readonly sql: SqlStorage,
    private readonly env: PlanEnv,
    /** The shard's owner (null: the public shard). */
    private readonly owner: () => string | null,
    /** RELAY_LIMITS max_stored_bytes: the most any shard holds, whatever the owner's plan. */
    private readonly maxStoredBytes: number,
    /** Whether the shard's owner is listed in EDGESTR_OWNERS now (asked at every use: see the header). */
    private readonly listed: () => boolean = () => false,
  ) {
    this.sql.exec('CREATE TABLE IF NOT EXISTS owner_account (k INTEGER PRIMARY KEY CHECK (k = 1), plan TEXT NOT NULL, suspended INTEGER NOT NULL)');
    this.sql.exec('CREATE TABLE IF NOT EXISTS owner_removed (k INTEGER PRIMARY KEY CHECK (k = 1))');
    this.sql.exec('CREATE TABLE IF NOT EXISTS owner_version (k INTEGER PRIMARY KEY CHECK (k = 1), version INTEGER NOT NULL)');
    // The owner whose agents and bridges stored an event in the public shard's reserve (none: anyone else's).
    const columns = this.sql.exec<{ name: string }>("SELECT name FROM pragma_table_info('stored_sizes')").toArray();
    if (columns.length > 0 && !columns.some((c) => c.name === 'owner')) this.sql.exec('ALTER TABLE stored_sizes ADD COLUMN owner TEXT');
    const totals = this.sql.exec<{ name: string }>("SELECT name FROM pragma_table_info('stored_totals')").toArray();
    if (totals.length > 0 && !totals.some((c) => c.name === 'owners')) this.sql.exec('ALTER TABLE stored_totals ADD COLUMN owners INTEGER NOT NULL DEFAULT 0');
    this.sql.exec(SCHEMA);
    if (this.sql.exec('SELECT 1 FROM stored_totals').toArray().length === 0) this.backfill();
    const row = this.sql.exec<{ plan: string; suspended: number }>('SELECT plan, suspended FROM owner_account').toArray()[0];
    const removed = this.sql.exec('SELECT 1 FROM owner_removed').toArray().length > 0;
    this.account = removed ? REMOVED : row ? { plan: row.plan, suspended: row.suspended === 1 } : undefined;
    this.version = this.sql.exec<{ version: number }>('SELECT version FROM owner_version').toArray()[0]?.version ?? 0;
  }

  /**
   * Counts the events of a shard made before `stored_sizes` (once: the sums row marks it done; an
   * interrupted count is done again). Wraps were then judged the owner's by the ids kept in
   * `owner_wraps`, which nothing needs afterwards. `octet_length` reads no event's JSON.
   */
  private backfill(): void {
    this.sql.exec('CREATE TABLE IF NOT EXISTS owner_wraps (id TEXT PRIMARY KEY) WITHOUT ROWID');
    const own = `(${ownersData('events.pubkey', "(SELECT value FROM tags WHERE tags.rid = events.rid AND tags.name = 'p')")} OR events.id IN (SELECT id FROM owner_wraps))`;
    this.sql.exec(`INSERT OR IGNORE INTO stored_sizes (rid, bytes, inbox) SELECT rid, ${COUNTED_STORED}, NOT ${own} FROM events`, this.owner() ?? '');
    this.sql.exec('INSERT INTO stored_totals (k, events, bytes, inbox) SELECT 1, count(*), coalesce(sum(bytes), 0), coalesce(sum(bytes * inbox), 0) FROM stored_sizes');
    this.sql.exec('DROP TABLE owner_wraps');
  }

  /**
   * The owner's account as the admin API pushed it (undefined: the owner was removed, until an
   * account is pushed again) at `version`; false, and nothing changed, when that is older than the
   * version held (a late push). Without a version (a shard's edge takes its primary's account, or a
   * caller from before versions) it applies as the version held.
   */
  set(account: OwnerState | undefined, version: number = this.version): boolean {
    if (version < this.version) return false;
    this.account = account ?? REMOVED;
    this.version = version;
    this.sql.exec('DELETE FROM owner_account');
    this.sql.exec('DELETE FROM owner_removed');
    if (account) this.sql.exec('INSERT INTO owner_account (k, plan, suspended) VALUES (1, ?, ?)', account.plan, account.suspended ? 1 : 0);
    else this.sql.exec('INSERT INTO owner_removed (k) VALUES (1)');
    this.sql.exec('INSERT INTO owner_version (k, version) VALUES (1, ?) ON CONFLICT (k) DO UPDATE SET version = excluded.version', version);
    return true;
  }

  /**
   * The account pushed last (undefined: removed; none pushed: the default plan's) and its version,
   * whether or not the owner is listed in EDGESTR_OWNERS now: what a shard's primary tells its edge
   * objects, each of which asks the listing itself.
   */
  held(): HeldAccount {
    return { account: this.account === REMOVED ? undefined : (this.account ?? { plan: DEFAULT_PLAN, suspended: false }), version: this.version };
  }

  /** Whether the owner was removed from the deployment (and not added again, nor listed in EDGESTR_OWNERS now). */
  removed(): boolean {
    return this.current() === REMOVED;
  }

  /** The account that applies: the listed owners' while the owner is listed in EDGESTR_OWNERS, else the one pushed last. */
  private current(): OwnerState | typeof REMOVED | undefined {
    return this.listed() ? LISTED : this.account;
  }

  /** The shard's stored events and their bytes. */
  storage(): ShardStorage {
    const { events, bytes } = this.totals();
    return { events, bytes };
  }

  private totals(): Counted {
    return this.sql.exec<Counted>('SELECT events, bytes, inbox, owners FROM stored_totals').one();
  }

  /**
   * Whether a stored event of this shard counts against the inbox share (see the header); a gift
   * wrap is judged with `pubkey` the owner's-side key its connection is authenticated as
   * (write-rules.ts `ownerSideConnection`).
   */
  isInbox(e: Pick<NostrEvent, 'pubkey' | 'tags'>): boolean {
    const pValues = e.tags.filter((t) => t[0] === 'p' && t[1] !== undefined).map((t) => t[1]);
    return this.sql.exec<{ own: number }>(OWNERS_DATA_AT_WRITE, this.owner() ?? '', e.pubkey, JSON.stringify(pValues)).one().own !== 1;
  }

  /** Why the owner's plan (on an owner shard) or the shard's storage bound refuses a write at `nowMs`. */
  check(write: PlanWrite, nowMs: number): Rejection | undefined {
    if (this.owner() === null) return write.stored ? this.overStorage(write, undefined) : undefined;
    const current = this.current();
    const account = current === REMOVED ? undefined : current;
    const plan = planLimits(this.env, account?.plan ?? DEFAULT_PLAN);
    if (write.stored && (current === REMOVED || account?.suspended)) return reject('restricted', write.fromOthers ? FOR_OTHERS.readOnly : current === REMOVED ? OWNER_REMOVED : SHARD_SUSPENDED);
    if (!write.internal && plan.events_per_second !== undefined) {
      let b = this.buckets.get(write.fromOthers);
      if (b?.rate !== plan.events_per_second) {
        b = { rate: plan.events_per_second, bucket: new TokenBucket(plan.events_per_second, plan.events_per_second, nowMs) };
        this.buckets.set(write.fromOthers, b);
      }
      if (!b.bucket.take(nowMs)) return reject('rate-limited', write.fromOthers ? FOR_OTHERS.rate : `the owner’s plan allows ${plan.events_per_second} events per second on this shard`);
    }
    return write.stored ? this.overStorage(write, plan.stored_bytes) : undefined;
  }

  /**
   * Why a stored event does not fit: the shard holds at most the owner's plan's stored_bytes
   * (`planned`; the public shard has none), never more than the relay's max_stored_bytes. On an
   * owner shard events from others hold at most INBOX_SHARE of it; on the public shard clients all
   * but RESERVED_SHARE, the rest being for what `reserveWrite` allows. What the event replaces or
   * removes is freed (so a deletion that frees at least its own bytes is stored on a full shard).
   */
  private overStorage(write: PlanWrite, planned: number | undefined): Rejection | undefined {
    const owner = write.servedOwner ?? '';
    const replaced = this.replaced(write.event, owner);
    const refused = this.overStorageFreeing(write, planned, replaced);
    if (!refused || !write.removes) return refused;
    // Only a write that does not fit otherwise looks up what it removes.
    const removed = this.sizesOf(write.removes(), owner);
    return this.overStorageFreeing(write, planned, { bytes: replaced.bytes + removed.bytes, inbox: replaced.inbox + removed.inbox, owner: replaced.owner + removed.owner });
  }

  private overStorageFreeing(write: PlanWrite, planned: number | undefined, freed: Freed): Rejection | undefined {
    const { allowed, by } = storageLimit(planned, this.maxStoredBytes);
    const now = this.totals();
    const after = now.bytes - freed.bytes + write.bytes;
    // fromOthers: only on an owner shard, whose bound is the owner's figure (its plan's, and what it stores).
    if (after > allowed) return reject('restricted', write.fromOthers ? FOR_OTHERS.storage : `storage quota: ${by} ${allowed} stored bytes on this shard`);
    if (this.owner() === null) {
      const clients = Math.floor(allowed * (1 - RESERVED_SHARE));
      let reserved = write.reserved;
      if (write.servedOwner !== undefined) {
        // Only the owner's own agents and bridges write on its connection: it may be told the figures.
        const share = Math.floor(allowed * RESERVED_SHARE * OWNER_RESERVE_SHARE);
        if (this.ownerHolds(write.servedOwner) - freed.owner + write.bytes > share) {
          return reject('restricted', `storage quota: the agents and bridges of one owner may hold ${share} of the ${allowed} stored bytes ${by} on this shard`);
        }
        // All owners' agents and bridges together hold at most the reserve; past it they write in the clients' share.
        if (now.owners - freed.owner + write.bytes > allowed - clients) reserved = false;
      }
      if (!reserved && after > clients) {
        return reject('restricted', `storage quota: clients may hold ${clients} of the ${allowed} stored bytes ${by} on this shard; the rest is kept for its own agents and bridges`);
      }
      return undefined;
    }
    const inbox = Math.floor(allowed * INBOX_SHARE);
    if (write.inbox && now.inbox - freed.inbox + write.bytes > inbox) {
      return reject('restricted', write.fromOthers ? FOR_OTHERS.storage : `storage quota: events from others may hold ${inbox} of the ${allowed} stored bytes ${by} on this shard`);
    }
    return undefined;
  }

  /**
   * What storing `e` frees: the counted bytes of the versions it replaces when it is a replaceable
   * or addressable event (removed as it is stored; when one of them is newer, `e` is not stored).
   */
  private replaced(e: Pick<NostrEvent, 'pubkey' | 'kind' | 'tags'>, owner: string): Freed {
    const d = coordinateD(e);
    if (d === null) return { bytes: 0, inbox: 0, owner: 0 };
    return this.sql
      .exec<Freed>(
        `SELECT coalesce(sum(s.bytes), 0) AS bytes, coalesce(sum(s.bytes * s.inbox), 0) AS inbox, coalesce(sum(CASE WHEN s.owner = ? THEN s.bytes END), 0) AS owner
         FROM events e JOIN stored_sizes s ON s.rid = e.rid WHERE e.pubkey = ? AND e.kind = ? AND e.d = ?`,
        owner,
        e.pubkey,
        e.kind,
        d,
      )
      .one();
  }

  /** The counted bytes of stored events `rids`, of those the inbox's, and of those `owner`'s agents and bridges stored in the reserve. */
  private sizesOf(rids: readonly number[], owner: string): Freed {
    if (rids.length === 0) return { bytes: 0, inbox: 0, owner: 0 };
    return this.sql
      .exec<Freed>(
        'SELECT coalesce(sum(bytes), 0) AS bytes, coalesce(sum(bytes * inbox), 0) AS inbox, coalesce(sum(CASE WHEN owner = ? THEN bytes END), 0) AS owner FROM stored_sizes WHERE rid IN (SELECT value FROM json_each(?))',
        owner,
        JSON.stringify(rids),
      )
      .one();
  }

  /** The counted bytes `owner`'s agents and bridges hold in the public shard's reserve (by the index of stored_sizes.owner). */
  private ownerHolds(owner: string): number {
    return this.sql.exec<{ bytes: number }>('SELECT coalesce(sum(bytes), 0) AS bytes FROM stored_sizes WHERE owner = ?', owner).one().bytes;
  }

  /**
   * The sides of those of the stored events `ids` that a restore cannot tell from the event alone
   * (see the header), for a backup.
   */
  carriedSides(ids: readonly string[]): CountedSide[] {
    const owner = this.owner();
    return this.sql
      .exec<{ id: string; inbox: number; owner: string | null }>(
        `SELECT e.id, s.inbox, s.owner FROM events e JOIN stored_sizes s ON s.rid = e.rid
         WHERE e.id IN (SELECT value FROM json_each(?1)) AND ${owner === null ? 's.owner IS NOT NULL' : 'e.pubkey != ?2'} ORDER BY e.created_at, e.id`,
        JSON.stringify(ids),
        ...(owner === null ? [] : [owner]),
      )
      .toArray()
      .map((r) => ({ id: r.id, inbox: r.inbox === 1, owner: r.owner }));
  }

  /**
   * Event `e` was stored, `bytes` counted (in the inbox share or not; `servedOwner`: in the public
   * shard's reserve by that owner's agents and bridges). Runs in the write's transaction, after the insert.
   */
  added(e: Pick<NostrEvent, 'id'>, bytes: number, inbox: boolean, servedOwner?: string): void {
    this.sql.exec('INSERT INTO stored_sizes (rid, bytes, inbox, owner) SELECT rid, ?, ?, ? FROM events WHERE id = ?', bytes, inbox ? 1 : 0, servedOwner ?? null, e.id);
  }
}
