// The Bridge Durable Object's tables: its provider record (owner, origin of the deployment, the
// provider key sealed with EDGESTR_SECRET), its servers (config, secret headers sealed with the
// same secret under `<provider>/<server id>`, health, hash of what was last announced: set only
// once the public shard took the whole set), the
// deletions of servers' announcements the public shard did not take yet (signed, by server id, at
// most MAX_PENDING_DELETIONS: bridge-do.ts sends them again) and, while its owner is removed, that
// the bridge withdrew (bridge-do.ts `withdraw`). While EDGESTR_SECRET is rotated, what only
// EDGESTR_SECRET_PREVIOUS opens is opened with it and sealed again with EDGESTR_SECRET by the
// watchdog (reseal; workers/common/secrets.ts).

import { getPublicKey } from 'nostr-tools/pure';
import { signEventWith, type NostrEvent } from '../../src/shared/event.js';
import type { EventTemplate } from '../../src/shared/relay-types.js';
import { relayVerifier } from '../common/verifier.js';
import { headersOf, openRotating, resealed, sealHeaders, sealingSecrets, sealSecretKey, type ResealPass, type SealingSecrets, type SecretEnv } from '../common/secrets.js';
import { EMPTY_HEALTH, type ServerHealth, type StoredServer } from './config.js';

export interface ProviderRecord {
  owner: string;
  pubkey: string;
  /** The deployment's origin (http(s)://host) the bridge dials its shards on. */
  origin: string;
}

interface ServerRow extends Record<string, SqlStorageValue> {
  id: string;
  config: string;
  sealed_headers: string;
  health: string;
  announced: string;
}

/** Deletions kept to be sent again, at most; one more gives up the oldest. */
export const MAX_PENDING_DELETIONS = 100;
/** A deletion kept this long (ms) without landing is given up. */
export const PENDING_DELETION_MS = 7 * 24 * 3600_000;

/** A deletion of a server's announcements the public shard did not take yet. */
export interface PendingDeletion {
  /** The server's id (it may be removed). */
  id: string;
  /** The signed NIP-09 deletion, sent again as it is (its created_at bounds what it deletes). */
  event: NostrEvent;
  /** When it was kept (ms): it is given up PENDING_DELETION_MS later. */
  since: number;
}

interface PendingRow extends Record<string, SqlStorageValue> {
  id: string;
  event: string;
  since: number;
}

const pendingOf = (r: PendingRow): PendingDeletion => ({ id: r.id, event: JSON.parse(r.event) as NostrEvent, since: r.since });

/** What a sealed value is, in errors and log lines. */
const keyWhat = (provider: string): string => `the secret key of bridge provider ${provider}`;
const headersWhat = (provider: string, server: string): string => `the headers of server ${server} of bridge provider ${provider}`;

export class ServerStore {
  private sk: Uint8Array | undefined;
  private provider: ProviderRecord | null | undefined;
  private readonly headers = new Map<string, Record<string, string>>();

  constructor(
    private readonly sql: SqlStorage,
    private readonly env: SecretEnv,
  ) {
    sql.exec('CREATE TABLE IF NOT EXISTS provider (k INTEGER PRIMARY KEY CHECK (k = 1), owner TEXT NOT NULL, pubkey TEXT NOT NULL, origin TEXT NOT NULL, sealed_key TEXT NOT NULL)');
    sql.exec(`CREATE TABLE IF NOT EXISTS servers (
      id TEXT PRIMARY KEY,
      config TEXT NOT NULL,
      sealed_headers TEXT NOT NULL DEFAULT '',
      health TEXT NOT NULL DEFAULT '{}',
      announced TEXT NOT NULL DEFAULT '',
      refresh_at INTEGER NOT NULL DEFAULT 0
    ) WITHOUT ROWID`);
    sql.exec('CREATE TABLE IF NOT EXISTS withdrawn (k INTEGER PRIMARY KEY CHECK (k = 1))');
    sql.exec('CREATE TABLE IF NOT EXISTS pending_deletions (id TEXT PRIMARY KEY, event TEXT NOT NULL, since INTEGER NOT NULL) WITHOUT ROWID');
  }

  private secrets(): SealingSecrets {
    const s = sealingSecrets(this.env);
    if (!s) throw new Error('EDGESTR_SECRET is not configured');
    return s;
  }

  providerRecord(): ProviderRecord | undefined {
    if (this.provider === undefined) {
      this.provider = this.sql.exec<{ owner: string; pubkey: string; origin: string }>('SELECT owner, pubkey, origin FROM provider WHERE k = 1').toArray()[0] ?? null;
    }
    return this.provider ?? undefined;
  }

  /**
   * Stores the provider key (sealed) for `owner`, unless one is stored already: the first is kept
   * (two first registrations at once both checked before either stored its key); the record stored.
   */
  async createProvider(owner: string, origin: string, sk: Uint8Array): Promise<ProviderRecord> {
    const pubkey = getPublicKey(sk);
    const sealed = await sealSecretKey(sk, pubkey, this.secrets().current);
    this.sql.exec('INSERT INTO provider (k, owner, pubkey, origin, sealed_key) VALUES (1, ?, ?, ?, ?) ON CONFLICT (k) DO NOTHING', owner, pubkey, origin, sealed);
    this.provider = undefined;
    const stored = this.providerRecord()!;
    if (stored.pubkey === pubkey) this.sk = sk;
    return stored;
  }

  async secretKey(): Promise<Uint8Array> {
    if (this.sk) return this.sk;
    const row = this.sql.exec<{ pubkey: string; sealed_key: string }>('SELECT pubkey, sealed_key FROM provider WHERE k = 1').one();
    const sk = (await openRotating(row.sealed_key, row.pubkey, this.secrets(), keyWhat(row.pubkey))).plain;
    if (getPublicKey(sk) !== row.pubkey) throw new Error('stored key does not match the provider pubkey');
    this.sk = sk;
    return sk;
  }

  /**
   * During a rotation (EDGESTR_SECRET_PREVIOUS set; the watchdog calls it): the provider key and the
   * servers' headers that only the previous secret opens are sealed again with EDGESTR_SECRET, each
   * written only if it did not change meanwhile. Undefined outside a rotation.
   */
  async reseal(): Promise<ResealPass | undefined> {
    const secrets = sealingSecrets(this.env);
    const p = this.providerRecord();
    if (secrets?.previous === undefined || !p) return undefined;
    const pass: ResealPass = { resealed: 0, failed: [] };
    const row = this.sql.exec<{ sealed_key: string }>('SELECT sealed_key FROM provider WHERE k = 1').one();
    const key = await resealed(row.sealed_key, p.pubkey, secrets, keyWhat(p.pubkey), pass);
    if (key !== undefined && this.sql.exec('UPDATE provider SET sealed_key = ? WHERE k = 1 AND sealed_key = ?', key, row.sealed_key).rowsWritten > 0) pass.resealed++;
    for (const s of this.sql.exec<ServerRow>("SELECT id, sealed_headers FROM servers WHERE sealed_headers != ''").toArray()) {
      const headers = await resealed(s.sealed_headers, this.headerAad(s.id), secrets, headersWhat(p.pubkey, s.id), pass);
      if (headers !== undefined && this.sql.exec('UPDATE servers SET sealed_headers = ? WHERE id = ? AND sealed_headers = ?', headers, s.id, s.sealed_headers).rowsWritten > 0) pass.resealed++;
    }
    return pass;
  }

  async sign(t: EventTemplate): Promise<NostrEvent> {
    const sk = await this.secretKey();
    return signEventWith(t, sk, await relayVerifier(), this.providerRecord()?.pubkey ?? getPublicKey(sk));
  }

  servers(): StoredServer[] {
    return this.sql.exec<ServerRow>('SELECT config FROM servers ORDER BY id').toArray().map((r) => JSON.parse(r.config) as StoredServer);
  }

  server(id: string): StoredServer | undefined {
    const row = this.sql.exec<ServerRow>('SELECT config FROM servers WHERE id = ?', id).toArray()[0];
    return row ? (JSON.parse(row.config) as StoredServer) : undefined;
  }

  /** Inserts a server; false when the id is taken. */
  /**
   * Adds a server unless its id is taken or `max` servers are registered; checked again in the
   * insert itself, so that adds running at once (each awaits the sealing) cannot pass either.
   */
  async insert(s: StoredServer, headers: Record<string, string>, max: number): Promise<'added' | 'duplicate' | 'full'> {
    const refused = (): 'duplicate' | 'full' | undefined => (this.server(s.id) ? 'duplicate' : this.count() >= max ? 'full' : undefined);
    const before = refused();
    if (before) return before;
    const sealed = await this.sealFor(s.id, headers);
    const written = this.sql.exec(
      'INSERT OR IGNORE INTO servers (id, config, sealed_headers, health) SELECT ?, ?, ?, ? WHERE (SELECT COUNT(*) FROM servers) < ?',
      s.id, JSON.stringify(s), sealed, JSON.stringify(EMPTY_HEALTH), max,
    ).rowsWritten;
    if (written === 0) return refused() ?? 'full';
    this.headers.set(s.id, headers);
    return 'added';
  }

  /** Servers registered. */
  count(): number {
    return this.sql.exec<{ n: number }>('SELECT COUNT(*) AS n FROM servers').one().n;
  }

  /** Replaces a server's config (and its headers when given). */
  async update(s: StoredServer, headers?: Record<string, string>): Promise<void> {
    this.sql.exec('UPDATE servers SET config = ? WHERE id = ?', JSON.stringify(s), s.id);
    if (headers !== undefined) {
      this.sql.exec('UPDATE servers SET sealed_headers = ? WHERE id = ?', await this.sealFor(s.id, headers), s.id);
      this.headers.set(s.id, headers);
    }
  }

  delete(id: string): void {
    this.sql.exec('DELETE FROM servers WHERE id = ?', id);
    this.headers.delete(id);
  }

  /** The server's secret headers, opened once and kept in memory. */
  async secretHeaders(id: string): Promise<Record<string, string>> {
    const cached = this.headers.get(id);
    if (cached) return cached;
    const row = this.sql.exec<ServerRow>('SELECT sealed_headers FROM servers WHERE id = ?', id).toArray()[0];
    if (!row || row.sealed_headers === '') return {};
    const headers = headersOf((await openRotating(row.sealed_headers, this.headerAad(id), this.secrets(), headersWhat(this.providerRecord()?.pubkey ?? '', id))).plain);
    this.headers.set(id, headers);
    return headers;
  }

  /** The server's health as recorded; `announced`: a set is out (its hash kept) and the last refresh had no announce_error. */
  health(id: string): ServerHealth {
    const row = this.sql.exec<ServerRow>('SELECT health, announced FROM servers WHERE id = ?', id).toArray()[0];
    const recorded = { ...EMPTY_HEALTH, ...(row ? (JSON.parse(row.health) as Partial<ServerHealth>) : {}) };
    return { ...recorded, announced: row !== undefined && row.announced !== '' && recorded.announce_error === null };
  }

  /** Records `patch` into the server's health (`announced` is not recorded: `health` derives it). */
  recordHealth(id: string, patch: Partial<Omit<ServerHealth, 'announced'>>): void {
    const next: Partial<ServerHealth> = { ...this.health(id), ...patch };
    delete next.announced;
    this.sql.exec('UPDATE servers SET health = ? WHERE id = ?', JSON.stringify(next), id);
  }

  /** Hash of the announcement set last published ('' when none is out). */
  announced(id: string): string {
    return this.sql.exec<ServerRow>('SELECT announced FROM servers WHERE id = ?', id).toArray()[0]?.announced ?? '';
  }

  setAnnounced(id: string, hash: string): void {
    this.sql.exec('UPDATE servers SET announced = ? WHERE id = ?', hash, id);
  }

  /** When the server's announcements (and health counts) are refreshed next (ms; 0 = now). */
  scheduleRefresh(id: string, at: number): void {
    this.sql.exec('UPDATE servers SET refresh_at = ? WHERE id = ?', at, id);
  }

  /** Moves a server's next refresh from `booked` (ms) to `at`, unless another was booked since (kept). */
  rebookRefresh(id: string, booked: number, at: number): void {
    this.sql.exec('UPDATE servers SET refresh_at = ? WHERE id = ? AND refresh_at = ?', at, id, booked);
  }

  /** Moves a server's next refresh to `at` (ms) unless one is booked earlier. */
  refreshNoLaterThan(id: string, at: number): void {
    this.sql.exec('UPDATE servers SET refresh_at = ?1 WHERE id = ?2 AND (refresh_at IS NULL OR refresh_at > ?1)', at, id);
  }

  /** The earliest refresh time (ms) of any server, or undefined with none. */
  nextRefresh(): number | undefined {
    const v = this.sql.exec<{ at: number | null }>('SELECT min(refresh_at) AS at FROM servers').one().at;
    return v ?? undefined;
  }

  /** Servers whose refresh is due at `now` (ms). */
  dueForRefresh(now: number): string[] {
    return this.sql.exec<{ id: string }>('SELECT id FROM servers WHERE refresh_at <= ? ORDER BY refresh_at, id', now).toArray().map((r) => r.id);
  }

  /** Whether the bridge withdrew because its owner was removed (and was not reinstated since). */
  withdrawn(): boolean {
    return this.sql.exec('SELECT 1 FROM withdrawn').toArray().length > 0;
  }

  /** Records the withdrawal, or forgets it (false: the owner is allowed again). */
  setWithdrawn(withdrawn: boolean): void {
    this.sql.exec(withdrawn ? 'INSERT OR IGNORE INTO withdrawn (k) VALUES (1)' : 'DELETE FROM withdrawn');
  }

  /**
   * Keeps deletion `e` of server `id`'s announcements to be sent again, kept since `at` (ms), in
   * place of one kept for that id before (the newer deletion covers what the older did); past
   * MAX_PENDING_DELETIONS the oldest are given up: them.
   */
  keepDeletion(id: string, e: NostrEvent, at: number): PendingDeletion[] {
    this.sql.exec('INSERT OR REPLACE INTO pending_deletions (id, event, since) VALUES (?, ?, ?)', id, JSON.stringify(e), at);
    return this.sql
      .exec<PendingRow>('DELETE FROM pending_deletions WHERE id NOT IN (SELECT id FROM pending_deletions ORDER BY since DESC, id DESC LIMIT ?) RETURNING id, event, since', MAX_PENDING_DELETIONS)
      .toArray()
      .map(pendingOf);
  }

  /** The deletions kept, oldest first. */
  pendingDeletions(): PendingDeletion[] {
    return this.sql.exec<PendingRow>('SELECT id, event, since FROM pending_deletions ORDER BY since, id').toArray().map(pendingOf);
  }

  /** Deletion `e` of server `id`'s announcements landed: the one kept for `id` is no longer, if `e` covers it (dated no earlier). */
  deletionLanded(id: string, e: NostrEvent): void {
    this.sql.exec("DELETE FROM pending_deletions WHERE id = ? AND json_extract(event, '$.created_at') <= ?", id, e.created_at);
  }

  /** Gives up the deletions kept since before `before` (ms): them. */
  expireDeletions(before: number): PendingDeletion[] {
    return this.sql.exec<PendingRow>('DELETE FROM pending_deletions WHERE since < ? RETURNING id, event, since', before).toArray().map(pendingOf);
  }

  private headerAad(id: string): string {
    return `${this.providerRecord()?.pubkey ?? ''}/${id}`;
  }

  private async sealFor(id: string, headers: Record<string, string>): Promise<string> {
    return sealHeaders(headers, this.headerAad(id), this.secrets().current);
  }
}
