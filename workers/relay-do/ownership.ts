// The shard's record of which agent keys belong to which owner: learned from authenticated proofs
// (a NIP-OA `auth` tag on the agent's AUTH event or stored kind 0) or from edgestr's own
// provisioning: 'provisioned' for the hosted agents (the management API's list), 'bridge' for the
// owner's DVMCP bridge provider key (the owner's for the write policy, but not an agent: never
// listed, so the list never wakes an Agent object for it). Kept in the shard's SQLite so it
// survives hibernation and restarts.
//
// A NIP-OA record keeps the attestation's conditions and applies their time clauses at every use:
// `created_at<T` covers neither an event dated at or after T nor any use once the relay's clock
// reaches T (the agent signs its own created_at, so the relay enforces wall-clock expiry itself, as
// NIP-OA asks of relays that need freshness); `created_at>T` covers no event dated at or before T.
// A `kind=` clause names the carrier the proof may come from (22242 for AUTH, 0 for a profile) and is
// checked when the record is made (verifyAttestation).
//
// Anyone can make a key and attest it to any other key, so what self-made proofs ('auth', 'kind0')
// may store is bounded: an agent key has one owner per source (a newer proof replaces the older,
// as a newer profile replaces the older event), an owner shard keeps only proofs naming its own
// owner (the only ones its write policy asks about), and an AUTH proof not renewed for
// AUTH_PROOF_TTL is forgotten (each new one removes a batch of stale ones). Conditions are at most
// MAX_CLAUSES clauses (nip-oa.ts). The TTL bounds age, not count: fresh keys attested by fresh keys
// make new proofs as fast as AUTH allows (on the public shard, which keeps any owner's: 16 a second
// per address, up to ~1 KB each), so a shard keeps at most MAX_AUTH_PROOFS; past it the proof
// used longest ago goes (`used_at`: its last AUTH, or at most once an hour, RENEW_ON_USE_SECONDS,
// an event of its agent it vouched for: a telemetry frame, a write), so the proofs of agents at
// work are not the ones a flood pushes out. Use does not extend AUTH_PROOF_TTL (only an AUTH does).
// A 'kind0' proof lasts as long as the profile that carried it is stored, and is counted with it
// (its bytes are the owner's or the shard's stored bytes): when that kind 0 leaves the events table,
// by expiry, a NIP-09 deletion, a retention rule, a request to vanish or a newer version, the
// key's 'kind0' proofs dated at or before it go too (a trigger: one rule for every path). A newer
// profile that carries an attestation records its proof again, dated by itself.
//
// A self-made proof is dated (`recorded_at`) by the event that carried it: the AUTH event's
// created_at, or the profile's. Both are signed by the agent, so a stored profile without the tag,
// which forgets the agent's self-made proofs, forgets only those dated at or before it, on the
// agent's own clock: anyone may send an older profile of the key again (it is public, and an owner
// shard takes it as its agent's from any connection), and that must not cancel a proof made since.
//
// An owner revokes a key it attested itself through the management API (`revokeAttested`). An
// attestation signature is permanent (anyone holding a copy can present it again, the key's holder
// can sign new AUTH events and profiles with it), so the revocation is kept: a `revoked_agents` row
// (agent, owner) from which no self-made proof of that pair is recorded again, whatever attestation
// comes, old or newly signed by the owner: the key is burned for that owner (it attests a new key
// instead). Provisioning is not affected. The row is made whether or not a proof is held now: the
// key's holder can have its proofs forgotten at will (a kind 0 without the tag, letting an AUTH
// proof lapse, or pushing it out past MAX_AUTH_PROOFS) and attest itself again later. A row only
// ever affects its owner's own attestations, so an owner may revoke any key; rows are made only by
// an owner's own API call (owners are the deployment's: strangers cannot make any), at most
// MAX_REVOKED_PER_OWNER per owner on a shard (the owner's, and the public shard, which keeps every
// owner's). Backups carry the rows (`revocations`, export.ts) and a restore puts them back
// (`restoreRevocation`: with their time, under the same bound, on an owner shard only its owner's),
// so a shard restored fresh still refuses the revoked keys' attestations.
//
// Backups also carry the provisioning records ('provisioned', 'bridge': `provisionedRecords`), and a
// restore of one of this deployment's backups puts them back (`restoreProvisioned`: with their time,
// on an owner shard only its owner's; on the public shard a 'bridge' record only for an owner vetted
// at the restore, any other as 'provisioned'), so that a shard restored fresh still lists the owner's
// hosted agents and counts them for its plan. Only a restore does: they make a key the owner's, and an
// owner's import of its own file must not (import.ts).

import { parseConditions, timeClausesHold, verifyAttestation } from '../../src/shared/nip-oa.js';
import { KIND } from '../../src/shared/kinds.js';
import { reject, type Rejection } from '../../src/shared/errors.js';
import type { OnEventStoredHook } from './policy.js';

export type OwnershipSource = 'auth' | 'kind0' | 'provisioned' | 'bridge';

/** An AUTH proof lasts this long after the agent last authenticated with it (seconds): 30 days. */
export const AUTH_PROOF_TTL = 30 * 86_400;
/** Stale AUTH proofs one new record removes at most. */
const STALE_BATCH = 100;
/** AUTH proofs a shard keeps at most (the public shard's are any owner's): past it, the one used longest ago goes. */
export const MAX_AUTH_PROOFS = 100_000;
/** Keys one owner may revoke on a shard (`revokeAttested`; past it a revocation is refused): 10,000. */
export const MAX_REVOKED_PER_OWNER = 10_000;
/** A proof's `used_at` is moved by an event of its agent it vouches for at most this often, in seconds. */
export const RENEW_ON_USE_SECONDS = 3_600;
/** The trigger that removes a profile's proofs with the profile (`tieProfileProofsToProfiles`). */
const PROFILE_PROOFS_TRIGGER = 'kind0_proofs_leave_with_profile';
/** The sources edgestr's own provisioning writes: a hosted agent, or the owner's bridge provider key. */
export type ProvisionedSource = Extract<OwnershipSource, 'provisioned' | 'bridge'>;

/** An owner's revocation of an agent key (a `revoked_agents` row): what a backup carries. */
export type Revocation = {
  agent: string;
  owner: string;
  /** Unix seconds. */
  revoked_at: number;
};

/** A record of edgestr's own provisioning (an `agent_owners` row of a ProvisionedSource): what a backup carries. */
export type ProvisionedRecord = {
  agent: string;
  owner: string;
  source: ProvisionedSource;
  /** Unix seconds. */
  recorded_at: number;
};

/** What restoring a revocation or provisioning record did: a new row, one the shard had already, or why it was not restored. */
export type RestoredRecord = 'restored' | 'known' | Rejection;

const OWNERS_ONLY = (what: string) => reject('restricted', `an owner's shard keeps only its owner's ${what}`);

/** What a record is used for: the relay's clock, and the agent-signed event it would vouch for, if any. */
export interface OwnershipUse {
  /** Unix seconds. */
  now: number;
  /** `created_at` of the agent's own event being admitted (a write or a telemetry frame). */
  eventCreatedAt?: number;
}

export class OwnershipRegistry {
  /** The number of AUTH proofs kept, counted once and then kept up to date (undefined: not counted yet). */
  #authProofs: number | undefined;

  constructor(
    private readonly sql: SqlStorage,
    /** The shard's owner (null: the public shard). */
    private readonly shardOwner: () => string | null,
    /** AUTH proofs kept at most (tests use fewer). */
    private readonly maxAuthProofs = MAX_AUTH_PROOFS,
    /** Keys one owner may revoke here at most (tests use fewer). */
    private readonly maxRevokedPerOwner = MAX_REVOKED_PER_OWNER,
  ) {
    sql.exec(`CREATE TABLE IF NOT EXISTS agent_owners (
      agent TEXT NOT NULL,
      owner TEXT NOT NULL,
      source TEXT NOT NULL,
      recorded_at INTEGER NOT NULL,
      conditions TEXT NOT NULL DEFAULT '',
      used_at INTEGER NOT NULL DEFAULT 0,
      PRIMARY KEY (agent, owner, source)
    ) WITHOUT ROWID`);
    // Shards created before conditions were kept: their records had none (and stay unconditional).
    const columns = sql.exec<{ name: string }>("SELECT name FROM pragma_table_info('agent_owners')").toArray();
    if (!columns.some((c) => c.name === 'conditions')) sql.exec("ALTER TABLE agent_owners ADD COLUMN conditions TEXT NOT NULL DEFAULT ''");
    // Shards created before `used_at` (the order in which AUTH proofs past the cap go): their last AUTH.
    if (!columns.some((c) => c.name === 'used_at')) {
      sql.exec('ALTER TABLE agent_owners ADD COLUMN used_at INTEGER NOT NULL DEFAULT 0');
      sql.exec('UPDATE agent_owners SET used_at = recorded_at');
    }
    sql.exec('CREATE TABLE IF NOT EXISTS revoked_agents (agent TEXT NOT NULL, owner TEXT NOT NULL, revoked_at INTEGER NOT NULL, PRIMARY KEY (agent, owner)) WITHOUT ROWID');
    sql.exec('CREATE INDEX IF NOT EXISTS revoked_agents_owner ON revoked_agents (owner)');
    sql.exec('CREATE INDEX IF NOT EXISTS agent_owners_age ON agent_owners (source, recorded_at)');
    sql.exec('CREATE INDEX IF NOT EXISTS agent_owners_use ON agent_owners (source, used_at)');
    this.tieProfileProofsToProfiles();
  }

  /**
   * A 'kind0' proof lasts as long as the profile that carried it (see the header): a trigger on the
   * events table (EventStore's, made before this registry) removes the key's 'kind0' proofs dated at
   * or before a kind 0 that leaves it, whatever removed it. A shard made before the trigger first
   * drops the 'kind0' proofs no stored profile of their key dated at or after them still carries
   * (one statement, by the events_by_author_kind index; once: the trigger's existence marks it done).
   */
  private tieProfileProofsToProfiles(): void {
    const sql = this.sql;
    if (sql.exec(`SELECT 1 FROM sqlite_master WHERE type = 'trigger' AND name = '${PROFILE_PROOFS_TRIGGER}'`).toArray().length > 0) return;
    sql.exec(
      `DELETE FROM agent_owners WHERE source = 'kind0' AND NOT EXISTS
         (SELECT 1 FROM events e WHERE e.pubkey = agent_owners.agent AND e.kind = ${KIND.METADATA} AND e.created_at >= agent_owners.recorded_at)`,
    );
    sql.exec(
      `CREATE TRIGGER ${PROFILE_PROOFS_TRIGGER} AFTER DELETE ON events WHEN OLD.kind = ${KIND.METADATA}
       BEGIN DELETE FROM agent_owners WHERE agent = OLD.pubkey AND source = 'kind0' AND recorded_at <= OLD.created_at; END`,
    );
  }

  /**
   * Records agent → owner at `now` (a self-made proof: the created_at of the AUTH event or profile
   * carrying it, see the header); `conditions` is the NIP-OA conditions string ('' for
   * provisioning). A self-made proof ('auth', 'kind0') replaces the agent's earlier one of its
   * source, and is not kept on an owner shard it does not name the owner of, nor for a pair the
   * owner revoked.
   */
  record(agent: string, owner: string, source: OwnershipSource, now: number, conditions = ''): void {
    if (source === 'auth' || source === 'kind0') {
      const shardOwner = this.shardOwner();
      if (shardOwner !== null && owner !== shardOwner) return;
      if (this.isRevoked(agent, owner)) return;
      const before = source === 'auth' ? this.authProofs() : 0; // counted before this record's deletions
      const replaced = this.sql.exec('DELETE FROM agent_owners WHERE agent = ? AND source = ? AND owner != ?', agent, source, owner).rowsWritten;
      if (source === 'auth') {
        const stale = this.sql.exec(
          `DELETE FROM agent_owners WHERE (agent, owner, source) IN
             (SELECT agent, owner, source FROM agent_owners WHERE source = 'auth' AND recorded_at < ? LIMIT ${STALE_BATCH})`,
          now - AUTH_PROOF_TTL,
        ).rowsWritten;
        const known = this.sql.exec("SELECT 1 FROM agent_owners WHERE agent = ? AND owner = ? AND source = 'auth'", agent, owner).toArray().length > 0;
        this.#authProofs = before - replaced - stale + (known ? 0 : 1);
      }
    }
    this.sql.exec(
      `INSERT INTO agent_owners (agent, owner, source, recorded_at, conditions, used_at) VALUES (?1, ?2, ?3, ?4, ?5, ?4)
       ON CONFLICT (agent, owner, source) DO UPDATE SET recorded_at = excluded.recorded_at, conditions = excluded.conditions, used_at = excluded.used_at`,
      agent,
      owner,
      source,
      now,
      conditions,
    );
    // A bridge key provisioned before the 'bridge' source existed was recorded as 'provisioned'.
    if (source === 'bridge') this.revoke(agent, owner, 'provisioned');
    if (source === 'auth') this.evictPastCap();
  }

  /** Forgets a proof of one source (or every source) for agent → owner. */
  revoke(agent: string, owner: string, source?: OwnershipSource): void {
    this.forgot(
      source
        ? this.sql.exec<{ source: string }>('DELETE FROM agent_owners WHERE agent = ? AND owner = ? AND source = ? RETURNING source', agent, owner, source)
        : this.sql.exec<{ source: string }>('DELETE FROM agent_owners WHERE agent = ? AND owner = ? RETURNING source', agent, owner),
    );
  }

  /**
   * A profile of `agent` without a valid NIP-OA tag, dated `at`, is stored: forgets the agent's
   * self-made proofs ('auth', 'kind0') dated at or before it, whatever owner they name. A proof
   * dated after it stays: anyone may send an older profile of the key again, and it says nothing of
   * a proof the agent made since.
   */
  forgetProofsUntil(agent: string, at: number): void {
    this.forgot(this.sql.exec<{ source: string }>("DELETE FROM agent_owners WHERE agent = ? AND source IN ('auth', 'kind0') AND recorded_at <= ? RETURNING source", agent, at));
  }

  /** Keeps the count of AUTH proofs after deleted rows (`removed`: their sources). */
  private forgot(removed: SqlStorageCursor<{ source: string }>): void {
    const proofs = removed.toArray().filter((r) => r.source === 'auth').length;
    if (proofs > 0 && this.#authProofs !== undefined) this.#authProofs -= proofs;
  }

  /**
   * The owner's revocation of a key it attested itself (see the header): forgets the self-made
   * proofs of agent → owner and keeps the pair revoked, whether a proof is held now or not. True
   * then (and when the pair was revoked already); false, nothing changed, when the owner has
   * revoked maxRevokedPerOwner keys here already.
   */
  revokeAttested(agent: string, owner: string, now: number): boolean {
    return this.keepRevoked(agent, owner, now) !== 'full';
  }

  /**
   * A revocation read back from a backup, kept as `revokeAttested` keeps one, with its own time: on
   * an owner shard only its owner's (the only ones its write policy asks about), and no more than
   * maxRevokedPerOwner per owner.
   */
  restoreRevocation(agent: string, owner: string, revokedAt: number): RestoredRecord {
    const shardOwner = this.shardOwner();
    if (shardOwner !== null && owner !== shardOwner) return OWNERS_ONLY('revocations of agent keys');
    const kept = this.keepRevoked(agent, owner, revokedAt);
    return kept === 'full'
      ? reject('restricted', `the owner has revoked ${this.maxRevokedPerOwner} agent keys on this shard, the most it keeps per owner: this revocation is not restored`)
      : kept;
  }

  /** Keeps agent → owner revoked (a row dated `at` unless there is one) and forgets its self-made proofs; 'full' (nothing changed) past maxRevokedPerOwner. */
  private keepRevoked(agent: string, owner: string, at: number): 'restored' | 'known' | 'full' {
    const known = this.isRevoked(agent, owner);
    if (!known) {
      const revoked = this.sql.exec<{ n: number }>('SELECT COUNT(*) AS n FROM revoked_agents WHERE owner = ?', owner).one().n;
      if (revoked >= this.maxRevokedPerOwner) return 'full';
      this.sql.exec('INSERT INTO revoked_agents (agent, owner, revoked_at) VALUES (?, ?, ?)', agent, owner, at);
    }
    this.revoke(agent, owner, 'auth');
    this.revoke(agent, owner, 'kind0');
    return known ? 'known' : 'restored';
  }

  /** The revocations after `after` (by agent, then owner: the table's key order), at most `limit`. */
  revocations(after: Pick<Revocation, 'agent' | 'owner'> | undefined, limit: number): Revocation[] {
    const from = after ?? { agent: '', owner: '' };
    return this.sql
      .exec<Revocation>(
        'SELECT agent, owner, revoked_at FROM revoked_agents WHERE (agent, owner) > (?1, ?2) ORDER BY agent, owner LIMIT ?3',
        from.agent,
        from.owner,
        limit,
      )
      .toArray();
  }

  /**
   * A provisioning record read back from one of this deployment's backups, kept as provisioning made
   * it, with its time (a row the shard has already stays as it is): on an owner shard only its owner's.
   * On the public shard a 'bridge' record (one of this deployment's bridges, NIP-11
   * `bridge_providers`) stays one only for an owner in `vetted`, the owners the operators vet at the
   * restore (looked up by whoever drives it: the shard does not read the registry); any other is
   * kept as 'provisioned', as the management API records the bridge of an owner not vetted
   * (common/deployment-bridges.ts recordPublicBridge).
   */
  restoreProvisioned(r: ProvisionedRecord, vetted: ReadonlySet<string> = new Set()): RestoredRecord {
    const shardOwner = this.shardOwner();
    if (shardOwner !== null && r.owner !== shardOwner) return OWNERS_ONLY('provisioning records');
    const source = shardOwner === null && r.source === 'bridge' && !vetted.has(r.owner) ? 'provisioned' : r.source;
    const known = this.sql.exec('SELECT 1 FROM agent_owners WHERE agent = ? AND owner = ? AND source = ?', r.agent, r.owner, source).toArray().length > 0;
    if (known) return 'known';
    this.record(r.agent, r.owner, source, r.recorded_at);
    return 'restored';
  }

  /** The provisioning records after `after` (by agent, owner, source: the table's key order), at most `limit`. */
  provisionedRecords(after: Pick<ProvisionedRecord, 'agent' | 'owner' | 'source'> | undefined, limit: number): ProvisionedRecord[] {
    const from = after ?? { agent: '', owner: '', source: '' };
    return this.sql
      .exec<ProvisionedRecord>(
        `SELECT agent, owner, source, recorded_at FROM agent_owners
         WHERE source IN ('provisioned', 'bridge') AND (agent, owner, source) > (?1, ?2, ?3) ORDER BY agent, owner, source LIMIT ?4`,
        from.agent,
        from.owner,
        from.source,
        limit,
      )
      .toArray();
  }

  /** Whether `owner` revoked `agent` (no self-made proof of the pair is recorded or trusted). */
  isRevoked(agent: string, owner: string): boolean {
    return this.sql.exec('SELECT 1 FROM revoked_agents WHERE agent = ? AND owner = ?', agent, owner).toArray().length > 0;
  }

  /**
   * Whether some record proves agent → owner for this use. An AUTH proof that vouches for the
   * agent's own event (`use.eventCreatedAt`) is marked used, at most once per RENEW_ON_USE_SECONDS.
   */
  isAgentOwner(agent: string, owner: string, use: OwnershipUse): boolean {
    const rows = this.sql
      .exec<{ conditions: string; source: string }>(
        "SELECT conditions, source FROM agent_owners WHERE agent = ? AND owner = ? AND NOT (source = 'auth' AND recorded_at < ?)",
        agent,
        owner,
        use.now - AUTH_PROOF_TTL,
      )
      .toArray();
    const covering = rows.filter((r) => coversUse(r.conditions, use));
    if (use.eventCreatedAt !== undefined && covering.some((r) => r.source === 'auth')) {
      this.sql.exec("UPDATE agent_owners SET used_at = ?1 WHERE agent = ?2 AND owner = ?3 AND source = 'auth' AND used_at < ?1 - ?4", use.now, agent, owner, RENEW_ON_USE_SECONDS);
    }
    return covering.length > 0;
  }

  /** AUTH proofs kept now. */
  authProofs(): number {
    this.#authProofs ??= this.sql.exec<{ n: number }>("SELECT COUNT(*) AS n FROM agent_owners WHERE source = 'auth'").one().n;
    return this.#authProofs;
  }

  /** Past maxAuthProofs: the proofs used longest ago go (agent_owners_use). */
  private evictPastCap(): void {
    const over = this.authProofs() - this.maxAuthProofs;
    if (over <= 0) return;
    this.#authProofs = this.authProofs() - this.sql.exec(
      `DELETE FROM agent_owners WHERE (agent, owner, source) IN
         (SELECT agent, owner, source FROM agent_owners WHERE source = 'auth' ORDER BY used_at LIMIT ?)`,
      over,
    ).rowsWritten;
  }

  ownersOf(agent: string, source: OwnershipSource): string[] {
    return this.sql
      .exec<{ owner: string }>('SELECT owner FROM agent_owners WHERE agent = ? AND source = ?', agent, source)
      .toArray()
      .map((r) => r.owner);
  }

  /** Keys recorded with `source` for any owner, at most `limit`, the earliest recorded first. */
  keysOf(source: ProvisionedSource, limit: number): string[] {
    return this.sql
      .exec<{ agent: string }>('SELECT DISTINCT agent FROM agent_owners WHERE source = ? ORDER BY recorded_at, agent LIMIT ?', source, limit)
      .toArray()
      .map((r) => r.agent);
  }

  agentsOf(owner: string, source: OwnershipSource): string[] {
    return this.sql
      .exec<{ agent: string }>('SELECT agent FROM agent_owners WHERE owner = ? AND source = ? ORDER BY recorded_at, agent', owner, source)
      .toArray()
      .map((r) => r.agent);
  }
}

/** Whether the time clauses of stored conditions hold for a use (a stored string that no longer parses covers nothing). */
export function coversUse(conditions: string, use: OwnershipUse): boolean {
  const parsed = parseConditions(conditions);
  if (!parsed.ok) return false;
  return timeClausesHold(parsed.value, use.now) && (use.eventCreatedAt === undefined || timeClausesHold(parsed.value, use.eventCreatedAt));
}

/**
 * An `onEventStored` hook (policy.ts): a stored kind 0 with a valid NIP-OA tag records agent → owner,
 * dated by the profile's created_at; one without it forgets the agent's self-made proofs dated at
 * or before it (`forgetProofsUntil`: a stranger sending an older profile again cancels nothing made
 * since; edgestr's own provisioning records are revoked through the management API only). It runs
 * in the write's transaction, so the next event of the same ingest batch is judged with what this
 * profile proved.
 */
export const learnOwnershipFromProfile =
  (registry: OwnershipRegistry): OnEventStoredHook =>
  (e, { verifier }) => {
    if (e.kind !== KIND.METADATA) return;
    const a = verifyAttestation(e, verifier);
    if (a.ok) registry.record(e.pubkey, a.value.owner, 'kind0', e.created_at, a.value.conditions);
    else registry.forgetProofsUntil(e.pubkey, e.created_at);
  };
