// RelayShard: one Durable Object per shard (the public shard, or one per owner). A small core that
// speaks NIP-01 over hibernatable WebSockets (parse, verify, answer), stores durable kinds in SQLite
// and fans events out to the live sockets of this shard only; what is admitted, refused and done
// after a write is decided by the hook lists of policy.ts.
// With RELAY_EDGES giving the shard K > 1 edge objects (docs/SCALING.md), this class also plays an
// edge (told by the router's EDGE_HEADER, remembered in storage): it keeps the socket protocol
// (parse, limits, verify, AUTH, subscriptions) and hands the write path, REQ history and COUNT to
// the primary (edge-link.ts); the primary sends accepted events to its edges (edge-fanout.ts), and
// tells them when the owner is removed from the deployment or added again (`setOwnerAccount`). An
// edge that missed it learns it from its primary: the removal when the primary refuses its clients'
// operations as not served, the re-adding when it would refuse an upgrade as not served.
// The primary marks itself in the backups bucket at its first change after a backup, so that the
// backup cron wakes only shards written since (backup-marker.ts, `backupBegins`/`backupWritten`).
// An owner shard's object (primary or edge) that holds nothing worth keeping deletes its whole
// storage from its alarm, armed a minute after the storage is made or the object last held
// something (empty-shard.ts); the next use makes the schema again (`open`).

import { DurableObject } from 'cloudflare:workers';
import { checkIdAndSignature, eventIdOf, eventJson, parseEvent, type NostrEvent } from '../../src/shared/event.js';
import { err, errorMessage, formatRejection, ok, reject, type Rejection, type Result } from '../../src/shared/errors.js';
import { dedupeFilter, type Filter } from '../../src/shared/filters.js';
import { isStored, KIND } from '../../src/shared/kinds.js';
import { byteLengthOver, parseClientMessage, relayMessage, sniffEventId, sniffSubId, type NamedSubscription } from '../../src/shared/messages.js';
import { validateAuthEvent } from '../../src/shared/nip42.js';
import { verifyAttestation } from '../../src/shared/nip-oa.js';
import { bytesToHex } from '../../src/shared/hex.js';
import type { SchnorrSigner, SchnorrVerifier } from '../../src/shared/verify.js';
import { limitsFromEnv, type RelayLimits } from './limits.js';
import { countedBytes, OwnerPlan, reserveWrite, SHARD_NOT_SERVED, type CountedSide, type HeldAccount, type ShardStorage } from './owner-plan.js';
import type { PlanEnv } from '../accounts/plans.js';
import { staticOwners, type OwnerState } from '../common/owners.js';
import { firstVerdict, shardPolicy, type EventContext, type Holding, type RelayPolicy } from './policy.js';
import { EventStore, type SettledOutcome } from './store.js';
import type { ReadScope } from './query-sql.js';
import { subscriptionMemory } from './subscription-memory.js';
import { MAX_PREFERRED } from '../../src/shared/dvmcp-discovery.js';
import { ownerSideConnection } from './write-rules.js';
import { delivers } from './read-policy.js';
import { answerRejection, closeReplyCode, ConnectionStore, send, type Connection } from './connections.js';
import { coversUse, OwnershipRegistry, type OwnershipUse, type ProvisionedSource, type RestoredRecord } from './ownership.js';
import { relayVerifier } from '../common/verifier.js';
import { relayInformation, NIP11_CORS_HEADERS } from './nip11.js';
import { everyKeyHasShard, ownerOfShardName, PUBLIC_SHARD, SHARD_HEADER, shardStub, type RouterBindings, type ShardBindings } from '../common/shards.js';
import { EDGE_HEADER, edgeCount, edgesFromEnv, edgeStub, MAX_EDGES, type EdgesEnv } from '../common/edges.js';
import { INTERNAL_ADDRESS, isLoopbackKey, UNKNOWN_ADDRESS } from '../common/client-address.js';
import { addressTag, OTHER_OWNERS_TAG, REPLACED_SOCKET, servedOwnerOf, socketSide } from './socket-tags.js';
import { EdgeFanout } from './edge-fanout.js';
import { EdgeLink, LISTEN_CHECK_MS } from './edge-link.js';
import { BatchBudgets } from './edge-budgets.js';
import { CLIENT_OPS, MAX_ANSWER_BYTES, MAX_BATCH_ROWS, type Delivery, type EdgeAnswer, type EdgeOp, type Lost } from './edge-wire.js';
import { restoredRelayUrl, VanishList } from './vanish.js';
import { RetentionRules, type RetentionRule } from './retention.js';
import {
  backupEventsPage,
  exportPage,
  provisionedPage,
  retentionLines,
  revocationsPage,
  type ExportPage,
  type ExportRange,
  type ProvisionedCursor,
  type ProvisionedPage,
  type RevocationCursor,
  type RevocationPage,
} from './export.js';
import { importLines, type ImportReport } from './import.js';
import { BulkJobs, type BulkJob } from './bulk-jobs.js';
import { IngestQueue, type BatchSettings } from './ingest-queue.js';
import { wakeNoLaterThan } from '../common/alarms.js';
import { BackupMarker, type BackupSince } from './backup-marker.js';
import type { BackupBindings } from './backup.js';
import { EMPTY_SHARD_GRACE_MS, holdsNothing } from './empty-shard.js';

export interface RelayEnv extends PlanEnv, ShardBindings, EdgesEnv, BackupBindings, Pick<RouterBindings, 'EDGESTR_OPEN_SHARDS' | 'EDGESTR_ENV' | 'EDGESTR_OWNERS'> {
  RELAY_LIMITS?: string;
}


const nowSeconds = () => Math.floor(Date.now() / 1000);

/** What a shard object keeps in its SQLite storage, and the objects that read and write it (RelayShard `open`). */
interface ShardParts {
  store: EventStore;
  conns: ConnectionStore;
  ownership: OwnershipRegistry;
  policy: RelayPolicy;
  plan: OwnerPlan;
  retention: RetentionRules;
  vanished: VanishList;
  fanout: EdgeFanout;
  marker: BackupMarker;
}

export class RelayShard extends DurableObject<RelayEnv> {
  private readonly limits: RelayLimits;
  /** The shard's storage and what reads and writes it (`open`; none once `wipe` deleted the storage). */
  private parts: ShardParts | undefined;
  /** While `open` makes the schema (what it constructs may read `meta`, made first). */
  private opening = false;
  private owner: string | null | undefined;
  /** EDGESTR_OWNERS as read from `env` (read again only when the environment is another). */
  private listedOwners: { env: RelayEnv; owners: Set<string> } | undefined;
  /** This object's role: an edge of its shard, or null for the primary (undefined: not read yet). */
  private edgeRole: EdgeLink | null | undefined;
  private wasm: (SchnorrVerifier & SchnorrSigner) | undefined;
  private ingest: IngestQueue<PendingWrite>;
  /** The import, restore or export in flight (bulk-jobs.ts). */
  private readonly bulk = new BulkJobs();
  /**
   * The shard's clock in unix milliseconds, for everything this class decides by time (AUTH window,
   * rate limits, NIP-OA expiry, NIP-AO freshness). Tests replace it through runInDurableObject.
   */
  clock: () => number = () => Date.now();

  constructor(ctx: DurableObjectState, env: RelayEnv) {
    super(ctx, env);
    this.limits = limitsFromEnv(env.RELAY_LIMITS);
    // No message is delivered before the verifier is ready, so handlers never await it (an await
    // would let a later message of the same connection overtake this one). It is set up once per
    // isolate; on failure the object is reset and the next request constructs it again (a failed
    // setup is not cached).
    this.wasm = relayVerifier.ready;
    if (!this.wasm) {
      ctx
        .blockConcurrencyWhile(async () => {
          this.wasm = await setUpVerifier();
        })
        .catch((e: unknown) => console.error('relay shard: setup failed; the object will be constructed again', e));
    }
    this.ingest = this.ingestQueue({ max: this.limits.ingest_batch_max, windowMs: this.limits.ingest_batch_window_ms });
    this.open();
  }

  /**
   * The shard's storage and what reads and writes it: the schema made (or brought up to date) at
   * the first use of this instance, and again at the first use after `wipe`. Storage made here
   * (none was there) arms the alarm that deletes it again if the object still holds nothing worth
   * keeping by then (empty-shard.ts).
   */
  private open(): ShardParts {
    if (this.parts) return this.parts;
    this.opening = true;
    try {
      this.parts = this.makeParts();
    } finally {
      this.opening = false;
    }
    return this.parts;
  }

  private makeParts(): ShardParts {
    const { ctx, env } = this;
    const sql = ctx.storage.sql;
    const made = sql.exec("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'meta'").toArray().length === 0;
    sql.exec('CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID');
    // Shards older than ApiState kept the management API's NIP-98 replay ids (workers/api/api-state.ts now).
    sql.exec('DROP TABLE IF EXISTS http_auth_seen');
    const store = new EventStore(sql);
    const conns = new ConnectionStore(sql, this.limits, () => this.clock());
    const ownership = new OwnershipRegistry(sql, () => this.shardOwner());
    const retention = new RetentionRules(sql);
    const vanished = new VanishList(sql);
    const parts: ShardParts = {
      store,
      conns,
      ownership,
      retention,
      vanished,
      policy: shardPolicy(this.limits, ownership, ctx.storage, store, vanished, retention),
      plan: new OwnerPlan(sql, env, () => this.shardOwner(), this.limits.max_stored_bytes, () => this.ownerListed()),
      fanout: new EdgeFanout(sql, (i) => edgeStub(env, this.shardOwner(), i), this.limits.edge_delivery_queue_bytes),
      marker: new BackupMarker(sql, env.BACKUPS, ctx.id.name, (ms) => wakeNoLaterThan(ctx.storage, ms)),
    };
    const liveCids = new Set<string>();
    for (const ws of ctx.getWebSockets()) {
      const att = ws.deserializeAttachment() as { cid?: string } | null;
      if (att?.cid) liveCids.add(att.cid);
    }
    conns.forgetAllBut(liveCids);
    // No request has named the object's shard yet: the alarm finds out whether it holds anything.
    if (made) wakeNoLaterThan(ctx.storage, Date.now() + EMPTY_SHARD_GRACE_MS).catch((e: unknown) => console.error(`relay shard: no alarm could be set to delete a storage that may hold nothing: ${errorMessage(e)}`));
    return parts;
  }

  /** The SQL storage, its schema made again first if `wipe` deleted it (`open`; not while `open` makes it, `meta` first). */
  private get sql(): SqlStorage {
    if (this.parts === undefined && !this.opening) this.open();
    return this.ctx.storage.sql;
  }

  private get store(): EventStore {
    return this.open().store;
  }
  private get conns(): ConnectionStore {
    return this.open().conns;
  }
  private get ownership(): OwnershipRegistry {
    return this.open().ownership;
  }
  private get policy(): RelayPolicy {
    return this.open().policy;
  }
  private get plan(): OwnerPlan {
    return this.open().plan;
  }
  private get retention(): RetentionRules {
    return this.open().retention;
  }
  private get vanished(): VanishList {
    return this.open().vanished;
  }
  private get fanout(): EdgeFanout {
    return this.open().fanout;
  }
  /** The shard's mark in the backups bucket while it holds what its last backup lacks (backup-marker.ts). */
  private get marker(): BackupMarker {
    return this.open().marker;
  }

  /** Whether this object holds nothing worth keeping (empty-shard.ts) and no socket but `closing`. */
  private holdsNothing(closing?: WebSocket): boolean {
    const sockets = this.ctx.getWebSockets();
    if (sockets.length > 1 || (sockets.length === 1 && sockets[0] !== closing)) return false;
    return holdsNothing(this.sql);
  }

  /** Arms the alarm EMPTY_SHARD_GRACE_MS from now (keeping one due earlier) when the object holds nothing worth keeping but `closing`; the alarm deletes its storage if it still does (`wipe`). */
  private async armEmptyCheck(closing?: WebSocket): Promise<void> {
    if (this.holdsNothing(closing)) await wakeNoLaterThan(this.ctx.storage, Date.now() + EMPTY_SHARD_GRACE_MS);
  }

  /**
   * Deletes this object's whole storage and alarm (it holds nothing worth keeping: empty-shard.ts).
   * Both take effect at once, before any other event runs (the promises resolve later); the next
   * use of the object makes the schema again (`open`) and learns its shard from that request.
   */
  private async wipe(): Promise<void> {
    this.parts = undefined;
    this.owner = undefined;
    await Promise.all([this.ctx.storage.deleteAlarm(), this.ctx.storage.deleteAll()]);
  }

  /** The shard's owner (null for the public shard), remembered from the router's first request. */
  private shardOwner(): string | null {
    if (this.owner === undefined) {
      const row = this.sql.exec<{ value: string }>("SELECT value FROM meta WHERE key = 'owner'").toArray()[0];
      this.owner = row ? (row.value === PUBLIC_SHARD ? null : row.value) : null;
    }
    return this.owner;
  }

  /** Whether the shard's owner is listed in EDGESTR_OWNERS (owner-plan.ts: never suspended nor removed then). */
  private ownerListed(): boolean {
    const owner = this.shardOwner();
    if (owner === null) return false;
    if (this.listedOwners?.env !== this.env) this.listedOwners = { env: this.env, owners: staticOwners(this.env) };
    return this.listedOwners.owners.has(owner);
  }

  private rememberOwner(shard: string): void {
    this.sql.exec("INSERT OR IGNORE INTO meta (key, value) VALUES ('owner', ?)", shard);
    this.owner = undefined;
  }

  /** The edge link when this object is an edge of its shard (see the header), else null. */
  private edge(): EdgeLink | null {
    if (this.edgeRole === undefined) {
      const sql = this.sql;
      const row = sql.exec<{ value: string }>("SELECT value FROM meta WHERE key = 'edge'").toArray()[0];
      const shard = sql.exec<{ value: string }>("SELECT value FROM meta WHERE key = 'owner'").toArray()[0];
      this.edgeRole =
        row && shard
          ? new EdgeLink(
              Number(row.value),
              shard.value,
              () => shardStub(this.env, this.shardOwner()),
              {
                candidates: (e) => this.conns.subscribersOf(e, () => this.ctx.getWebSockets()),
                subscribed: () => this.conns.hasSubscriptions(() => this.ctx.getWebSockets()),
                all: () => this.connections(),
                stamps: (conn) => this.conns.stamps(conn),
                keepStamp: (conn, sid, stamp) => this.conns.keepStamp(conn, sid, stamp),
                dropStamp: (conn, sid) => this.conns.dropStamp(conn, sid),
                chargeRead: (conn, bytes) => this.conns.chargeRead(conn, bytes),
                chargeScan: (conn, rows) => this.conns.chargeScan(conn, rows),
                admitDelivery: (conn) => this.conns.admitDelivery(conn),
                budget: (conn) => this.conns.budget(conn),
              },
              (conn, sid) => this.conns.closeSub(conn, sid),
              this.limits,
              () => void this.ctx.storage.setAlarm(Date.now() + LISTEN_CHECK_MS),
              () => void this.askPrimary(this.shardOwner()),
            )
          : null;
    }
    return this.edgeRole;
  }

  /** Remembers that this object is edge `header` of its shard (EDGE_HEADER; absent: the primary). */
  private rememberEdge(header: string | null): void {
    if (header === null) return;
    const i = Number(header);
    if (!Number.isInteger(i) || i < 0 || i >= MAX_EDGES) throw new Error(`relay shard: invalid ${EDGE_HEADER} ${header}`);
    this.sql.exec("INSERT OR IGNORE INTO meta (key, value) VALUES ('edge', ?)", String(i));
    // The edge link, once made, serves every later connection: it holds the one queue of operations
    // to the primary (its order and its bound), whether the primary listens, and the streams of REQs
    // in flight. Only a role read as "not an edge" (null) is read again.
    if (this.edgeRole === null) this.edgeRole = undefined;
  }

  private *connections(): Iterable<Connection> {
    for (const ws of this.ctx.getWebSockets()) {
      const conn = this.conns.get(ws);
      if (conn) yield conn;
    }
  }

  override async fetch(request: Request): Promise<Response> {
    const shard = request.headers.get(SHARD_HEADER) || undefined;
    // Each socket is tagged with who it is counted as (socket-tags.ts), so its counts are exact, also after hibernation.
    const side = socketSide(request, shard);
    if (typeof side === 'string') return new Response(side, { status: 400 });
    // Always set (routedByRouter refuses requests without it), and before `served`: an edge object told only the owner's account asks the owner's listing (EDGESTR_OWNERS) itself.
    if (shard !== undefined) this.rememberOwner(shard);
    const { address, internal, otherOwner } = side;
    const counted = address !== INTERNAL_ADDRESS && address !== UNKNOWN_ADDRESS;
    const upgrade = request.headers.get('Upgrade')?.toLowerCase() === 'websocket';
    const served = this.served() || (await this.servedAfterAll(request, shard));
    // An agent's or bridge's socket replaces its older one here: that one is not counted against it,
    // nor, among agents' sockets, one closed already (replaced, its peer's answer not yet in).
    const replaced = upgrade && side.component !== undefined ? this.ctx.getWebSockets(side.component) : [];
    const open = (tag?: string): number => (tag === undefined ? this.ctx.getWebSockets() : this.ctx.getWebSockets(tag)).filter((ws) => !replaced.includes(ws)).length;
    const agentsOpen = (tag: string): number => this.ctx.getWebSockets(tag).filter((ws) => ws.readyState === WebSocket.READY_STATE_OPEN && !replaced.includes(ws)).length;
    const refused = firstVerdict(this.policy.rejectConnection, request, {
      shard,
      served,
      limits: this.limits,
      connections: open(),
      fromAddress: counted ? open(addressTag(address)) : undefined,
      ...(otherOwner === undefined ? {} : { fromOtherOwner: agentsOpen(otherOwner), ofOtherOwners: agentsOpen(OTHER_OWNERS_TAG) }),
      // Loopback (local runs: the developer's tools and the test suites, never a client on Cloudflare) reconnects freely.
      upgradeAdmitted: counted && upgrade && !isLoopbackKey(address) ? this.conns.admitUpgrade(address) : undefined,
    });
    if (refused) return new Response(refused.message, { status: refused.status });
    this.rememberEdge(request.headers.get(EDGE_HEADER));
    if (!upgrade) {
      const owner = this.shardOwner();
      return Response.json(relayInformation(this.limits, owner, this.retention.get(), owner === null ? this.bridgeProviders() : []), {
        headers: { ...NIP11_CORS_HEADERS, 'Content-Type': 'application/nostr+json' },
      });
    }
    const pair = new WebSocketPair();
    const [client, server] = [pair[0], pair[1]];
    this.ctx.acceptWebSocket(server, side.tags);
    for (const ws of replaced) {
      this.forgetConnection(ws);
      this.conns.drop(ws);
      ws.close(1000, REPLACED_SOCKET);
    }
    const url = new URL(request.url);
    url.protocol = url.protocol === 'https:' ? 'wss:' : 'ws:';
    const challenge = bytesToHex(crypto.getRandomValues(new Uint8Array(16)));
    this.conns.open(server, {
      cid: crypto.randomUUID(),
      challenge,
      ip: address,
      relayUrl: url.href,
      internal,
    });
    // NIP-42 challenge: not sent on connect (see `send`), so that clients with no auth set up
    // (welshman, NDK) are not left waiting for an authentication that nothing needs.
    return new Response(null, { status: 101, webSocket: client });
  }

  /**
   * Internal RPC from the agent component (and the bridge, with 'bridge' for its provider key):
   * records that edgestr provisioned `agent` for `owner`, unless `max` is given and `owner` has
   * `max` provisioned agents already (false, nothing recorded). The count and the record are one
   * synchronous step, so concurrent creations cannot pass the plan's `agents` cap.
   */
  async provisionAgent(agent: string, owner: string, source: ProvisionedSource = 'provisioned', max?: number): Promise<boolean> {
    if (max !== undefined && this.ownership.agentsOf(owner, 'provisioned').filter((a) => a !== agent).length >= max) return false;
    this.ownership.record(agent, owner, source, nowSeconds());
    await this.marker.changed();
    return true;
  }

  /** Internal RPC (the /mcp gateway, on the public shard): the DVMCP provider keys of this deployment's bridges. */
  bridgeProviders(): string[] {
    return this.ownership.keysOf('bridge', MAX_PREFERRED);
  }

  /** Internal RPC (management API): forgets every proof that `agent` belongs to `owner`. */
  async revokeAgent(agent: string, owner: string): Promise<void> {
    this.ownership.revoke(agent, owner);
    await this.marker.changed();
  }

  /**
   * Internal RPC (management API): `owner` revokes an agent key it attested itself (NIP-OA), for
   * good, whether this shard holds a proof of it now or not (ownership.ts `revokeAttested`).
   * Whether it is revoked here (false: the owner revoked MAX_REVOKED_PER_OWNER keys here already).
   */
  async revokeAttestedAgent(agent: string, owner: string): Promise<boolean> {
    const revoked = this.ownership.revokeAttested(agent, owner, this.clockSeconds());
    if (revoked) await this.marker.changed();
    return revoked;
  }

  /** Internal RPC: the agents edgestr provisioned for `owner` (the management API's list). */
  provisionedAgents(owner: string): string[] {
    return this.ownership.agentsOf(owner, 'provisioned');
  }

  /**
   * Internal RPC (admin API): the owner's account changed (undefined: the owner was removed; see
   * `takeAccount`) at `version` (the Accounts object's, accounts-do.ts `standing`): a version older
   * than the one this shard holds is a late push, ignored (owner-plan.ts `set`; none: applied). With
   * K > 1 edge objects, each edge is told the removal and the re-adding that ends it (they hold the
   * sockets); an edge that cannot be reached is logged, and learns it later from this primary, which
   * refuses its clients' operations meanwhile (`edgeBatch`, `edgeAccount`).
   */
  async setOwnerAccount(account: OwnerState | undefined, version?: number): Promise<void> {
    const wasRemoved = this.plan.removed();
    if (!this.takeAccount(account, version)) return;
    if (account !== undefined && !wasRemoved) return;
    // The owner, also when no request has named it here yet (edges may hold sockets all the same).
    const named = this.ctx.id.name === undefined ? undefined : ownerOfShardName(this.ctx.id.name);
    if (typeof named === 'string') this.rememberOwner(named);
    const owner = this.shardOwner();
    const config = edgesFromEnv(this.env);
    const k = config.ok && owner !== null ? edgeCount(config.value, owner) : 1;
    if (k === 1) return;
    const held = this.plan.held();
    const told = await Promise.allSettled(Array.from({ length: k }, (_, i) => edgeStub(this.env, owner, i).edgeOwnerAccount(held.account, held.version)));
    told.forEach((t, i) => {
      if (t.status === 'rejected') console.error(`relay shard: edge ${i} was not told that the owner's account changed: ${errorMessage(t.reason)}`);
    });
  }

  /**
   * Internal RPC from the shard's primary (this object is an edge): the owner was removed, or added
   * again (see setOwnerAccount), at the primary's `version`: a notice older than the one this edge
   * holds (two changes told in parallel, arriving out of order) is ignored.
   */
  edgeOwnerAccount(account: OwnerState | undefined, version: number): void {
    this.takeAccount(account, version);
  }

  /** Internal RPC from an edge of this shard: the owner's account as this primary holds it (undefined: removed) and its version. */
  edgeAccount(): HeldAccount {
    return this.plan.held();
  }

  /**
   * At an edge of the shard of `owner`: takes the primary's account (`edgeAccount`) when it differs
   * from this object's on the owner's removal (this edge missed being told, see setOwnerAccount).
   */
  private async askPrimary(owner: string | null): Promise<void> {
    try {
      const { account, version } = await shardStub(this.env, owner).edgeAccount();
      if (this.plan.removed() !== (account === undefined)) this.takeAccount(account, version);
    } catch (e) {
      console.error(`relay shard: an edge could not ask its primary for the owner's account: ${errorMessage(e)}`);
    }
  }

  /**
   * Whether a shard this object does not serve is served after all, for `request` (`shard`: its
   * SHARD_HEADER): an edge asks its primary, as it may have missed the owner's re-adding.
   */
  private async servedAfterAll(request: Request, shard: string | undefined): Promise<boolean> {
    if (shard === undefined || request.headers.get(EDGE_HEADER) === null) return false;
    await this.askPrimary(shard === PUBLIC_SHARD ? null : shard);
    return this.served();
  }

  /**
   * The owner's account (undefined: the owner was removed, kept until an account comes again; the
   * plan refuses every stored write then). Where the router no longer serves a removed owner's shard
   * (closed shards), this object closes the sockets it holds, with a reason the client can read, and
   * refuses new ones (`served`). False when `version` is older than the one held (nothing done).
   */
  private takeAccount(account: OwnerState | undefined, version?: number): boolean {
    if (!this.plan.set(account, version)) return false;
    if (this.served()) return true;
    for (const ws of this.ctx.getWebSockets()) {
      this.forgetConnection(ws);
      this.conns.drop(ws);
      ws.close(1008, NOT_SERVED);
    }
    return true;
  }

  /** Whether the deployment serves this shard: not when its owner was removed, unless every key has a shard (as the router decides). */
  private served(): boolean {
    return !this.plan.removed() || everyKeyHasShard(this.env);
  }

  /** Internal RPC: the shard's stored events and bytes (metering). */
  storedUsage(): ShardStorage {
    return this.plan.storage();
  }

  /** Internal RPC: whether the shard holds an authenticated agent → owner record valid now. */
  isAgentOwner(agent: string, owner: string): boolean {
    return this.ownership.isAgentOwner(agent, owner, { now: this.clockSeconds() });
  }

  /**
   * Internal RPC from edge `shard`'s edge objects (see edge-link.ts): their operations, run in
   * order; one answer each, for a first part of them: the primary stops before a query that could
   * take the batch's answers past MAX_ANSWER_BYTES, or once its queries read MAX_BATCH_ROWS rows
   * (edge-wire.ts), and the edge sends the rest again. A failure on one operation is logged and
   * answered `error:` for it alone. REQs and COUNTs are held to the budgets their addresses had left
   * at the edge (edge-budgets.ts). Where the shard is not served (`served`), its clients' operations
   * are refused (`notServed`: the edge then asks for the owner's account, takes the removal it missed
   * and closes its sockets).
   */
  async edgeBatch(shard: string, ops: EdgeOp[]): Promise<EdgeAnswer[]> {
    if ((this.shardOwner() ?? PUBLIC_SHARD) !== shard) this.rememberOwner(shard); // the primary may never have seen the router
    // The shard's own queued EVENTs go first; then each run of consecutive events is one write batch (one transaction).
    this.flushWrites();
    const answers: EdgeAnswer[] = [];
    const budgets = new BatchBudgets(this.limits);
    const served = this.served();
    /** What the batch's queries returned (bytes of events) and read (stored rows) so far. */
    const read = { bytes: 0, rows: 0 };
    for (let i = 0; i < ops.length; ) {
      const op = ops[i]!;
      if (!served && CLIENT_OPS.has(op.op)) {
        answers.push({ op: 'error', message: NOT_SERVED, notServed: true });
        i++;
        continue;
      }
      if ((op.op === 'query' || op.op === 'count') && answers.length > 0) {
        const room = read.bytes + (op.op === 'query' ? this.limits.max_query_bytes : 0) <= MAX_ANSWER_BYTES && read.rows < MAX_BATCH_ROWS;
        if (!room) break; // the edge sends this one and the rest again
      }
      if (op.op === 'event') {
        const writes: PendingWrite[] = [];
        for (; i < ops.length && ops[i]!.op === 'event'; i++) {
          const { event: e, origin } = ops[i] as Extract<EdgeOp, { op: 'event' }>;
          const k = answers.push({ op: 'error', message: formatRejection(reject('error', 'the event was not answered')) }) - 1;
          const ctx = this.eventContext({ ...origin, authed: new Set(origin.authed) }, e, this.clock(), this.verifier);
          writes.push({ e, ctx, ack: (accepted, message) => void (answers[k] = { op: 'ok', accepted, message }) });
        }
        await this.writeBatch(writes).catch(reportFailedHooks);
        continue;
      }
      try {
        const answer = await this.edgeOp(op, budgets);
        if (answer.op === 'rows') read.bytes += answer.rows.reduce((n, raw) => n + raw.length, 0);
        if (answer.op === 'rows' || answer.op === 'count') read.rows += answer.scanned;
        answers.push(answer);
      } catch (e) {
        console.error(`relay shard: an edge's ${op.op} failed: ${errorMessage(e)}`);
        answers.push({ op: 'error', message: formatRejection(reject('error', 'the shard failed on this request; try again')) });
      }
      i++;
    }
    return answers;
  }

  private async edgeOp(op: Exclude<EdgeOp, { op: 'event' }>, budgets: BatchBudgets): Promise<EdgeAnswer> {
    switch (op.op) {
      case 'listen':
        this.fanout.listen(op.edge, op.subs);
        return { op: 'done' };
      case 'forget':
        this.fanout.forget(op.edge, op.key);
        return { op: 'done' };
      case 'idle':
        this.fanout.idle(op.edge);
        await this.armEmptyCheck(); // the last edge listening may have been all it held
        return { op: 'done' };
      case 'query': {
        const spent = budgets.refuse(op.budget, true);
        if (spent) return { op: 'error', message: formatRejection(spent) };
        // Matched from before the query runs: what it does not return is delivered live.
        const relisted = op.sub ? this.fanout.subscribed(op.sub.edge, op.sub.key, op.filters) : false;
        const meter = { rows: 0 };
        const rows = this.store.query(op.filters, this.limitOf, this.readScope(op.readers), this.limits.max_query_bytes, meter).map((r) => r.raw);
        budgets.spend(op.budget, rows.reduce((n, raw) => n + raw.length, 0), meter.rows);
        return { op: 'rows', rows, stamp: this.fanout.stamp(), scanned: meter.rows, ...(relisted ? { relisted } : {}) };
      }
      case 'check':
        return { op: 'checked', stamp: this.fanout.stamp(), ...(this.fanout.ensure(op.edge) ? { relisted: true } : {}) };
      case 'count': {
        const spent = budgets.refuse(op.budget, false);
        if (spent) return { op: 'error', message: formatRejection(spent) };
        const meter = { rows: 0 };
        const counted = this.store.count(op.filters, this.readScope(op.readers), this.limits.max_count, meter);
        budgets.spend(op.budget, 0, meter.rows);
        return { op: 'count', ...counted, scanned: meter.rows };
      }
      case 'ownership':
        this.ownership.record(op.agent, op.owner, 'auth', op.at, op.conditions);
        return { op: 'done' };
    }
  }

  /**
   * Internal RPC from the shard's primary (this object is an edge): accepted events for its
   * subscriptions, and the stamp of the last one it dropped on the way here, if it did.
   */
  deliver(items: Delivery[], lost: Lost): void {
    const edge = this.edge();
    if (!edge) throw new Error('relay shard: deliver reached an object that is not an edge of its shard');
    edge.deliver(items, lost);
  }

  private clockSeconds(): number {
    return Math.floor(this.clock() / 1000);
  }

  /** The Wasm verifier, set up by the constructor before any message is delivered. */
  private get verifier(): SchnorrVerifier & SchnorrSigner {
    if (!this.wasm) throw new Error('relay shard: the signature verifier is not set up');
    return this.wasm;
  }

  /**
   * Replaces the ingest batch settings of this instance (what RELAY_LIMITS sets for every shard);
   * tests compare a batching shard with one that is not through runInDurableObject. Queued events
   * are stored first.
   */
  setIngestBatching(settings: BatchSettings): void {
    this.flushWrites();
    this.ingest = this.ingestQueue(settings);
  }

  private ingestQueue(settings: BatchSettings): IngestQueue<PendingWrite> {
    return new IngestQueue(settings, (batch) => this.writeBatch(batch), reportFailedHooks);
  }

  /**
   * Stores and answers every queued EVENT now: before a message whose answer must see them (REQ,
   * COUNT), or whose effect must come after them (CLOSE, AUTH). Not awaited: the commit, the OKs
   * and the deliveries happen before this returns; only the hooks after them are left running.
   */
  private flushWrites(): void {
    this.ingest.flush().catch(reportFailedHooks);
  }

  override async webSocketMessage(ws: WebSocket, message: string | ArrayBuffer): Promise<void> {
    const conn = this.conns.get(ws);
    if (!conn) return ws.close(1011, 'unknown connection');
    if (typeof message !== 'string') return send(conn, relayMessage.notice('invalid: binary frames are not supported'));
    const overBudget = this.conns.receive(conn, message.length);
    if (overBudget) return this.refuseUnparsed(conn, message, formatRejection(overBudget));
    if (byteLengthOver(message, this.limits.max_message_length)) {
      return this.refuseUnparsed(conn, message, formatRejection(reject('invalid', `message is longer than ${this.limits.max_message_length} bytes`)));
    }
    const parsed = parseClientMessage(message, { maxSubIdLength: this.limits.max_subid_length, maxFilters: this.limits.max_filters });
    if (!parsed.ok) {
      const { rejection, sub, eventId } = parsed.error;
      const text = formatRejection(rejection);
      if (sub !== undefined) return this.refuseQuery(conn, sub, text);
      if (eventId !== undefined) return send(conn, relayMessage.ok(eventId, false, text));
      return send(conn, relayMessage.notice(text));
    }
    const msg = parsed.value;
    if (msg.type === 'REQ' || msg.type === 'COUNT' || msg.type === 'CLOSE' || msg.type === 'AUTH') this.flushWrites();
    switch (msg.type) {
      case 'EVENT':
        return this.onEvent(conn, msg.event);
      case 'REQ':
        return this.onReq(conn, msg.subId, msg.filters);
      case 'COUNT':
        return this.onCount(conn, msg.subId, msg.filters);
      case 'CLOSE':
        return this.endSub(conn, msg.subId);
      case 'AUTH':
        return this.onAuth(conn, msg.event);
      case 'PING':
        return; // a keep-alive (welshman sends one every 30 s of silence): nothing to answer
      case 'CHALLENGE':
        return send(conn, relayMessage.auth(conn.att.challenge));
    }
  }

  /**
   * Answers a message refused before it is parsed (over its address's inbound budget, or too long),
   * as far as its first characters tell (messages.ts): OK false for an EVENT's id, CLOSED for a
   * REQ's or COUNT's subscription id (`refuseQuery`), else a NOTICE.
   */
  private refuseUnparsed(conn: Connection, message: string, reason: string): void {
    const eventId = sniffEventId(message);
    if (eventId) return send(conn, relayMessage.ok(eventId, false, reason));
    const sub = sniffSubId(message, this.limits.max_subid_length);
    if (sub) return this.refuseQuery(conn, sub, reason);
    send(conn, relayMessage.notice(reason));
  }

  /**
   * Answers a refused REQ or COUNT with CLOSED for its subscription id. A REQ replaces the
   * subscription of its id (NIP-01) and CLOSED says the relay ended it (a client then forgets it and
   * sends no CLOSE): a refused REQ ends the one `conn` held (`endSub`), once the events queued
   * before it are stored and delivered (a REQ accepted flushes them too). A COUNT holds nothing.
   */
  private refuseQuery(conn: Connection, sub: NamedSubscription, reason: string): void {
    if (sub.verb === 'REQ') {
      this.flushWrites(); // events queued before it still reach the subscription it ends
      this.endSub(conn, sub.subId);
    }
    send(conn, relayMessage.closed(sub.subId, reason));
  }

  /**
   * Ends subscription `subId` of `conn` if it holds one (a CLOSE, or a refused REQ); at an edge the
   * primary stops sending events for it. Only a subscription that exists costs the primary an
   * operation (a CLOSE flood does not).
   */
  private endSub(conn: Connection, subId: string): void {
    if (!conn.subs.has(subId)) return;
    this.edge()?.forget(conn, subId);
    this.conns.closeSub(conn, subId);
  }

  /**
   * The client closed: forget the connection and complete the close handshake (RFC 6455 §5.5.1).
   * Hibernatable sockets do not answer a close frame by themselves, so without this the client
   * waits for its own timeout and reports 1006. Codes a peer may not send (1005 "no code", 1006,
   * 1015) are answered with 1000; closing a socket that is already closed is a no-op.
   */
  override async webSocketClose(ws: WebSocket, code: number, reason: string): Promise<void> {
    this.forgetConnection(ws);
    this.conns.drop(ws);
    ws.close(closeReplyCode(code), reason);
    await this.armEmptyCheck(ws);
  }

  override async webSocketError(ws: WebSocket): Promise<void> {
    this.forgetConnection(ws);
    this.conns.drop(ws);
    await this.armEmptyCheck(ws);
  }

  /** At an edge: the primary no longer needs to send events for the subscriptions of a closed socket. */
  private forgetConnection(ws: WebSocket): void {
    const edge = this.edge();
    const conn = edge && this.conns.get(ws);
    if (conn) for (const sid of conn.subs.keys()) edge.forget(conn, sid);
  }

  /**
   * Purges expired events (NIP-40), a batch of events past their retention rule and a batch of the
   * removals requests to vanish left pending (NIP-62); comes back at the earliest next. Then puts
   * the backup mark of a change whose put failed (backup-marker.ts). At an edge (which stores no
   * events): its periodic check (edge-link.ts). Then, nothing left to do, an object that holds
   * nothing worth keeping deletes its storage (`wipe`, empty-shard.ts).
   */
  override async alarm(): Promise<void> {
    const edge = this.edge();
    if (edge) {
      if (await edge.check()) await this.ctx.storage.setAlarm(Date.now() + LISTEN_CHECK_MS);
      else if (this.holdsNothing()) await this.wipe();
      return;
    }
    const expiry = this.store.purgeExpired(nowSeconds());
    const retention = this.retention.apply(this.store, this.clockSeconds());
    const vanishing = this.vanished.removeSome(this.store) ? nowSeconds() : undefined; // more to remove: at once
    const next = Math.min(expiry ?? Infinity, retention ?? Infinity, vanishing ?? Infinity);
    if (next === Infinity && this.holdsNothing()) return this.wipe();
    if (next !== Infinity) await this.ctx.storage.setAlarm(next * 1000);
    await this.marker.resume(); // after the alarm is set: a failed put asks for an earlier one
  }

  /** Internal RPC (management API): replaces the retention rules; the alarm applies them now. */
  async setRetentionRules(rules: RetentionRule[]): Promise<RetentionRule[]> {
    this.retention.set(rules);
    const marking = this.marker.changed(); // a backup holds the rules
    if (rules.length > 0) await this.ctx.storage.setAlarm(this.clock());
    await marking;
    return this.retention.get();
  }

  /** Internal RPC (management API): a lease for one import, restore or export (bulk-jobs.ts), or why another job keeps the shard. */
  beginBulk(job: BulkJob): Result<string, string> {
    return this.bulk.begin(job, this.clock());
  }

  /** Internal RPC (management API): the job of `lease` ended. */
  endBulk(lease: string): void {
    this.bulk.end(lease);
  }

  /** Internal RPC (export, backups): one page of the shard's events in export order (see export.ts); an export names its lease (the cron's backups none). */
  exportPage(range: ExportRange, lease?: string): ExportPage {
    if (lease !== undefined) {
      const held = this.bulk.use(lease, 'export', this.clock());
      if (!held.ok) throw new Error(held.error);
    }
    return exportPage(this.store, range, this.readScope([]));
  }

  /** Internal RPC (backups): one page of the shard's events as a backup holds it, the sides a restore takes before them (see export.ts). */
  backupEventsPage(range: ExportRange): ExportPage {
    return backupEventsPage(this.store, range, this.readScope([]), (ids) => this.plan.carriedSides(ids));
  }

  /** Internal RPC (backups): the shard's retention rules as a backup line (none without rules; see export.ts). */
  retentionLines(): string[] {
    return retentionLines(this.retention.get());
  }

  /** Internal RPC (backups): one page of the owners' revocations of agent keys, as backup lines (see export.ts). */
  revocationsPage(after?: RevocationCursor): RevocationPage {
    return revocationsPage(this.ownership, after);
  }

  /** Internal RPC (backups): one page of the records of edgestr's own provisioning, as backup lines (see export.ts). */
  provisionedPage(after?: ProvisionedCursor): ProvisionedPage {
    return provisionedPage(this.ownership, after);
  }

  /**
   * Internal RPC (import, restore, under the job's `lease`): JSONL lines put through the write path
   * of an EVENT message published by the shard's owner `owner` (see import.ts); for the public
   * shard (`owner` null, an operator's restore) each event as published by its author,
   * authenticated; a backup's revocation lines restored (ownership.ts `restoreRevocation`). A
   * restore of this deployment's backups puts back what the shard accepted live, as it was counted:
   * each event is published as by the owner and also by its author (so author-only rules, NIP-70,
   * pass as they did live; an import's file proves no author, so not there), counted in the side
   * the backup carries for it (its COUNTED lines, owner-plan.ts `carriedSides`) instead of judged
   * again; and it restores the backup's provisioning lines (`restoreProvisioned`: on the public
   * shard a bridge stays one of this deployment's only for an owner in `vetted`, the owners of these
   * lines the operators vet now), its retention rules (retention.ts `restore`) and its kind 62s
   * naming this shard at another host (vanish.ts `restoredRelayUrl`). `relayUrl` is the URL
   * clients reach the shard at. An error when the lease went to another job.
   */
  async importEvents(
    owner: string | null,
    lines: string[],
    relayUrl: string,
    lease: string,
    job: Extract<BulkJob, 'import' | 'restore'>,
    vetted: readonly string[] = [],
  ): Promise<Result<ImportReport, string>> {
    this.rememberOwner(owner ?? PUBLIC_SHARD);
    if (this.shardOwner() !== owner) throw new Error('relay shard: import addressed to another shard');
    const held = this.bulk.use(lease, job, this.clock());
    if (!held.ok) return err(held.error);
    const restore = job === 'restore';
    const origin = (e: NostrEvent): EventOrigin => ({
      authed: new Set(restore ? [owner ?? e.pubkey, e.pubkey] : [owner ?? e.pubkey]),
      internal: true,
      ...(restore ? { relayUrl: restoredRelayUrl(e, relayUrl), restoring: true } : { relayUrl }),
    });
    this.flushWrites();
    // The sides of this call's last COUNTED line: a restore's batch that goes on with a page's events starts with their own line (import.ts).
    let sides = new Map<string, CountedSide>();
    const carried = (e: NostrEvent): CountedSide | undefined => (restore ? sides.get(e.id) : undefined);
    const vettedNow = new Set(vetted);
    // Revocations, provisioning records and retention rules put back change what a backup holds, as events do (writeBatch).
    let marking: Promise<void> | undefined;
    let retained = false;
    const noted = (r: RestoredRecord): RestoredRecord => {
      if (r === 'restored') marking = this.marker.changed();
      return r;
    };
    const report = await importLines(lines, {
      verifier: this.verifier,
      stored: (id) => this.store.has(id),
      write: (e, ack) => {
        const counted = carried(e);
        return this.writeBatch([{ e, ctx: this.eventContext(origin(e), e, this.clock(), this.verifier), ack, ...(counted ? { counted } : {}) }]);
      },
      revocation: (r) => noted(this.ownership.restoreRevocation(r.agent, r.owner, r.revoked_at)),
      ...(restore
        ? {
            provisioned: (r) => noted(this.ownership.restoreProvisioned(r, vettedNow)),
            retention: (rules) => {
              const r = noted(this.retention.restore(rules));
              retained ||= r === 'restored';
              return r;
            },
            counted: (counted) => {
              sides = new Map(counted.map((side) => [side.id, side]));
            },
          }
        : {}),
      ...(held.value.verified ? { verified: held.value.verified } : {}),
    });
    if (retained) await this.ctx.storage.setAlarm(this.clock()); // the alarm applies them, as setRetentionRules
    await marking;
    return ok(report);
  }

  /** Internal RPC (backups, backup.ts): a backup of this shard begins; what it answers goes to `backupWritten` (backup-marker.ts). */
  backupBegins(): BackupSince {
    return this.marker.begin();
  }

  /** Internal RPC (backups): the backup begun at `since` is written; the shard's mark goes unless it changed since (it may have been all the shard held). */
  async backupWritten(since: BackupSince): Promise<void> {
    await this.marker.done(since);
    await this.armEmptyCheck();
  }

  /**
   * The signed event of an EVENT or AUTH message: a token of the connection's `bucket` is taken
   * before any signature work (no bucket: exempt), then shape, id and signature are checked.
   * Undefined when the message was answered with a refusal (`too many` names what was refused).
   */
  private signedEvent(conn: Connection, input: unknown, throttled: Rejection | undefined): NostrEvent | undefined {
    if (throttled) {
      answerRejection(conn, eventIdOf(input), throttled);
      return undefined;
    }
    const shaped = parseEvent(input);
    if (!shaped.ok) {
      answerRejection(conn, eventIdOf(input), shaped.error);
      return undefined;
    }
    const checked = checkIdAndSignature(shaped.value, this.verifier);
    if (!checked.ok) answerRejection(conn, shaped.value.id, checked.error);
    return checked.ok ? checked.value : undefined;
  }

  private async onEvent(conn: Connection, input: unknown): Promise<void> {
    const now = this.clock();
    // Before the signature is verified: the connection's and the address's buckets (NIP-AO frames have their own).
    const e = this.signedEvent(conn, input, this.conns.throttle(conn, kindOf(input) === KIND.AO_FRAME, now));
    if (!e) return;
    const edge = this.edge();
    // Who an internal connection serves is its socket's tag (socket-tags.ts), forwarded by an edge to its primary.
    const servedOwner = conn.att.internal === true ? servedOwnerOf(this.ctx.getTags(conn.ws)) : undefined;
    const served = servedOwner === undefined ? {} : { servedOwner };
    if (edge) {
      const origin = { authed: [...conn.authed], internal: conn.att.internal === true, relayUrl: conn.att.relayUrl, ...served };
      return edge.submit(conn, e, origin, (accepted, message) => send(conn, relayMessage.ok(e.id, accepted, message)));
    }
    const ctx = this.eventContext({ authed: conn.authed, internal: conn.att.internal === true, relayUrl: conn.att.relayUrl, ...served }, e, now, this.verifier);
    return this.ingest.push({ e, ctx, ack: (accepted, message) => send(conn, relayMessage.ok(e.id, accepted, message)) });
  }

  /**
   * The write path of verified events (an ingest batch, or one imported event), in arrival order:
   * the synchronous part of every write (`admit`) runs in one transaction; after the commit each
   * event is answered (`ack`: NIP-01 OK's accepted flag and message) and delivered, in order; then
   * the `onEventSaved` hooks run. When the transaction fails nothing of it was stored, and every
   * event of the batch is answered with `error:`.
   */
  private async writeBatch(batch: readonly PendingWrite[]): Promise<void> {
    let outcomes: Admission[];
    try {
      outcomes = this.ctx.storage.transactionSync(() => {
        const admitted = batch.map((w) => this.admit(w.e, w.ctx, w.counted));
        this.fanout.reserve(
          admitted.filter((a) => a.raw !== undefined).length,
          admitted.some((a) => a.stored),
        );
        return admitted;
      });
    } catch (err) {
      console.error(`relay shard: a batch of ${batch.length} writes failed and was rolled back`, err);
      for (const w of batch) w.ack(false, WRITE_FAILED);
      return;
    }
    // Recorded with the commit (backup-marker.ts), the mark put after the answers.
    const marking = outcomes.some((o) => o.stored) ? this.marker.changed() : undefined;
    batch.forEach((w, i) => this.answer(w, outcomes[i]!));
    await marking;
    for (const [i, w] of batch.entries()) {
      if (outcomes[i]!.stored) for (const hook of this.policy.onEventSaved) await hook(w.e, w.ctx);
    }
  }

  /**
   * The synchronous part of a write, run inside the batch's transaction: the `rejectEvent` hooks;
   * then, for a stored kind, what the events stored already decide (a duplicate, an older version,
   * a deleted event: answered before any bucket is spent, so sending an event again costs nobody a
   * token); the `chargeEvent` hooks, the owner's plan and the shard's storage bound (owner-plan.ts;
   * on the public shard the bound alone), storage (replace and deletion rules) and the
   * `onEventStored` hooks. `counted`: the side a restore's backup carries for the event, taken
   * instead of judged (owner-plan.ts `carriedSides`).
   */
  private admit(e: NostrEvent, ctx: EventContext, counted?: CountedSide): Admission {
    const verdict = firstVerdict(this.policy.rejectEvent, e, ctx);
    if (verdict === 'drop') return { accepted: true, message: '' };
    if (verdict) return { accepted: false, message: formatRejection(verdict) };
    const settled = isStored(e.kind) ? this.store.settled(e) : undefined;
    if (settled) return SETTLED[settled.status];
    const charged = firstVerdict(this.policy.chargeEvent, e, ctx);
    if (charged) return { accepted: false, message: formatRejection(charged) };
    // Stored and served: the canonical JSON of what was validated, never the bytes received.
    const raw = eventJson(e);
    const bytes = countedBytes(e, raw);
    // The plan's bucket is the one of who sends the event (anyone may send again what the owner
    // signed): the owner's own for a connection authenticated as the owner's side, else the others'.
    const fromOthers = ctx.owner !== null && ownerSideConnection(ctx) === undefined;
    // The inbox share: by the event itself (the rule a recount applies), not by the connection; a
    // gift wrap (signed by a one-time key) as if signed by the owner's-side key its connection is.
    const wrapPublisher = e.kind === KIND.GIFT_WRAP ? ownerSideConnection(ctx) : undefined;
    const inbox = ctx.owner !== null && isStored(e.kind) && (counted ? counted.inbox : this.plan.isInbox(wrapPublisher === undefined ? e : { pubkey: wrapPublisher, tags: e.tags }));
    const removes = e.kind === KIND.DELETION ? () => this.store.deletionTargets(e) : undefined;
    // The public shard's reserve: what edgestr's own connections publish about themselves and to their owners.
    // Held to one owner's share of it when the connection serves an owner (its agents and bridges; in a restore, the owner the backup names).
    const carriedOwner = counted?.owner ?? undefined;
    const reserved = ctx.owner === null && isStored(e.kind) && (carriedOwner !== undefined || reserveWrite(e, ctx));
    const servedOwner = reserved ? (carriedOwner ?? ctx.servedOwner) : undefined;
    const overPlan = this.plan.check({ event: e, stored: isStored(e.kind), bytes, internal: ctx.internal, reserved, servedOwner, fromOthers, inbox, ...(removes ? { removes } : {}) }, ctx.nowMs);
    if (overPlan) return { accepted: false, message: formatRejection(overPlan) };
    if (!isStored(e.kind)) return { accepted: true, message: '', raw };
    const outcome = this.store.insertInTransaction(e, raw); // admit runs inside writeBatch's transaction
    if (outcome.status !== 'stored') return SETTLED[outcome.status];
    this.plan.added(e, bytes, inbox, servedOwner);
    for (const hook of this.policy.onEventStored) hook(e, ctx);
    return { accepted: true, message: '', raw, stored: true };
  }

  /** The part of a write after the commit: the answer, then delivery to live subscriptions. */
  private answer(w: PendingWrite, outcome: Admission): void {
    w.ack(outcome.accepted, outcome.message);
    if (outcome.raw !== undefined) this.broadcast(w.e, outcome.raw);
  }

  /**
   * What the policy hooks see of `event` published on `conn` at `nowMs`. An agent's proof must be
   * valid now, and cover `event`'s created_at when the agent signed it (not when its connection
   * vouches for an event signed by another key, e.g. a gift wrap with a randomized created_at).
   */
  private eventContext(origin: EventOrigin, event: NostrEvent, nowMs: number, verifier: SchnorrVerifier): EventContext {
    const owner = this.shardOwner();
    const now = Math.floor(nowMs / 1000);
    const use = (agentEvent?: Pick<NostrEvent, 'created_at'>): OwnershipUse => ({ now, eventCreatedAt: agentEvent?.created_at });
    return {
      owner,
      ...origin,
      now,
      nowMs,
      limits: this.limits,
      verifier,
      isOwnersAgent: (pubkey) => owner !== null && this.ownership.isAgentOwner(pubkey, owner, use(pubkey === event.pubkey ? event : undefined)),
      isAgentOwner: (agent, agentOwner, agentEvent) => this.ownership.isAgentOwner(agent, agentOwner, use(agentEvent)),
      // The attestation on the event itself: valid for it (verifyAttestation), not expired now, and not revoked by the owner.
      attestsToOwner: (e) => {
        const a = verifyAttestation(e, verifier);
        return owner !== null && a.ok && a.value.owner === owner && coversUse(a.value.conditions, use(e)) && !this.ownership.isRevoked(e.pubkey, owner);
      },
    };
  }

  /**
   * Sends an accepted event to every live subscription of this shard that matches and may read it:
   * the fan-out index's candidates, each checked exactly, within each address's budget of live
   * events (past it the subscription is closed); every frame is built from the one canonical `raw`;
   * and once to each listening edge (edge-fanout.ts).
   */
  private broadcast(e: NostrEvent, raw: string): void {
    this.fanout.publish(e, raw);
    for (const sub of this.conns.subscribersOf(e, () => this.ctx.getWebSockets())) {
      if (!delivers(sub.filters, e, sub.conn.authed)) continue;
      const overBudget = this.conns.admitDelivery(sub.conn);
      if (!overBudget) send(sub.conn, relayMessage.event(sub.sid, raw));
      else {
        this.conns.closeSub(sub.conn, sub.sid);
        send(sub.conn, relayMessage.closed(sub.sid, formatRejection(overBudget)));
      }
    }
  }

  private limitOf = (f: Filter): number => Math.min(f.limit ?? this.limits.default_limit, this.limits.max_limit);

  /** REQ/COUNT admission shared by both verbs (the `rejectFilter` hooks); returns a rejection for CLOSED. */
  /** What a read by `readers` sees now: NIP-40 at this second, and a pending NIP-62 removal hidden. */
  private readScope(readers: readonly string[]): ReadScope {
    return { readers, now: nowSeconds(), vanishing: this.vanished.pending() };
  }

  private admitQuery(conn: Connection, subId: string, filters: Filter[], holding?: Holding): Rejection | undefined {
    const reqOnly = holding ? { holding, readWait: this.conns.readWait(conn) } : {};
    return firstVerdict(this.policy.rejectFilter, filters, { conn, subId, limits: this.limits, nowMs: this.clock(), scanWait: this.conns.scanWait(conn), ...reqOnly });
  }

  private onReq(conn: Connection, subId: string, input: Filter[]): void | Promise<void> {
    const filters = input.map(dedupeFilter);
    const held = subscriptionMemory(filters);
    const denied = this.admitQuery(conn, subId, filters, this.conns.holding(conn, subId, held));
    if (denied) return this.refuseQuery(conn, { verb: 'REQ', subId }, formatRejection(denied));
    const edge = this.edge();
    if (edge) {
      const waiting = edge.queryRefusal(conn);
      if (waiting) return this.refuseQuery(conn, { verb: 'REQ', subId }, formatRejection(waiting));
      this.conns.setSub(conn, subId, filters, held);
      return edge.subscribe(conn, subId, filters);
    }
    const meter = { rows: 0 };
    const rows = this.store.query(filters, this.limitOf, this.readScope([...conn.authed]), this.limits.max_query_bytes, meter);
    let bytes = 0;
    for (const row of rows) {
      send(conn, relayMessage.event(subId, row.raw));
      bytes += row.raw.length;
    }
    send(conn, relayMessage.eose(subId));
    this.conns.chargeRead(conn, bytes);
    this.conns.chargeScan(conn, meter.rows);
    this.conns.setSub(conn, subId, filters, held);
  }

  private onCount(conn: Connection, subId: string, input: Filter[]): void | Promise<void> {
    const filters = input.map(dedupeFilter);
    const denied = this.admitQuery(conn, subId, filters);
    if (denied) return send(conn, relayMessage.closed(subId, formatRejection(denied)));
    const edge = this.edge();
    if (edge) {
      const waiting = edge.queryRefusal(conn);
      if (waiting) return send(conn, relayMessage.closed(subId, formatRejection(waiting)));
      return edge.count(conn, filters, (a) => send(conn, 'closed' in a ? relayMessage.closed(subId, a.closed) : relayMessage.count(subId, a)));
    }
    const meter = { rows: 0 };
    const counted = this.store.count(filters, this.readScope([...conn.authed]), this.limits.max_count, meter);
    this.conns.chargeScan(conn, meter.rows);
    send(conn, relayMessage.count(subId, counted));
  }

  /**
   * NIP-42: rate-limited before the signature is verified; at most `max_auth_pubkeys_per_connection`
   * keys. An AUTH carrying a NIP-OA proof, at an edge, authenticates the connection only once the
   * primary recorded the proof: a proof refused or not delivered is answered OK false and leaves the
   * connection as it was (messages sent before its OK are judged without that key).
   */
  private onAuth(conn: Connection, input: unknown): void | Promise<void> {
    const e = this.signedEvent(conn, input, conn.auths.take(this.clock()) ? undefined : reject('rate-limited', 'slow down: too many AUTH messages on this connection'));
    if (!e) return;
    const verifier = this.verifier;
    const valid = validateAuthEvent(e, { challenge: conn.att.challenge, relayUrl: conn.att.relayUrl, now: this.clockSeconds() });
    if (!valid.ok) return answerRejection(conn, e.id, valid.error);
    const a = verifyAttestation(e, verifier);
    const edge = this.edge();
    if (a.ok && edge) {
      const tooMany = this.conns.authRefusal(conn, e.pubkey);
      if (tooMany) return answerRejection(conn, e.id, tooMany);
      const { id, pubkey } = e;
      return edge.recordOwnership(conn, pubkey, a.value.owner, a.value.conditions, e.created_at, (failed) => {
        const refused = failed === undefined ? this.conns.addAuth(conn, pubkey) : undefined; // the cap again: another AUTH may have been answered meanwhile
        send(conn, relayMessage.ok(id, failed === undefined && !refused, failed ?? (refused ? formatRejection(refused) : '')));
      });
    }
    const refused = this.conns.addAuth(conn, e.pubkey);
    if (refused) return answerRejection(conn, e.id, refused);
    // Dated by the AUTH event (ownership.ts: a profile without the tag forgets only proofs dated at or before it).
    if (a.ok) this.ownership.record(e.pubkey, a.value.owner, 'auth', e.created_at, a.value.conditions);
    send(conn, relayMessage.ok(e.id, true, ''));
  }
}

/** The verifier, set up once per isolate; a shard's constructor tries a few times before giving up. */
async function setUpVerifier(attempts = 3): Promise<SchnorrVerifier & SchnorrSigner> {
  for (let i = 1; ; i++) {
    try {
      return await relayVerifier();
    } catch (e) {
      if (i >= attempts) throw new Error(`relay shard: the signature verifier could not be set up (${attempts} attempts)`, { cause: e });
    }
  }
}

/** NIP-01 OK's accepted flag and message for one event. */
type Ack = (accepted: boolean, message: string) => void;

/** A verified event waiting in the ingest queue: what its write sees, and how it is answered. */
interface PendingWrite {
  e: NostrEvent;
  ctx: EventContext;
  ack: Ack;
  /** In a restore: the side the backup carries for the event (owner-plan.ts `carriedSides`). */
  counted?: CountedSide;
}

/** What the synchronous part of a write decided: the answer; `raw` when the event is delivered; `stored` when it was newly stored. */
interface Admission {
  accepted: boolean;
  message: string;
  raw?: string;
  stored?: true;
}

/** The answer to an event that the events stored already decide (store.ts `settled`). */
const SETTLED: Record<SettledOutcome['status'], Admission> = {
  duplicate: { accepted: true, message: 'duplicate: already have this event' },
  stale: { accepted: false, message: 'duplicate: a newer version of this event is already stored' },
  deleted: { accepted: false, message: 'blocked: this event was deleted by its author' },
};

/** Why a removed owner's shard closes its sockets, and refuses what its edges still send (`served`). */
const NOT_SERVED = formatRejection(reject('restricted', SHARD_NOT_SERVED));

const WRITE_FAILED = formatRejection(reject('error', 'the relay could not store this event; send it again'));

/** Where the failure of an `onEventSaved` hook of a batch no caller awaits is reported. */
const reportFailedHooks = (e: unknown): void => console.error('relay shard: a hook after a write failed', e);

/** Who publishes an event: a connection's authenticated keys, address, kind and relay URL (or the owner's import, or a restore). */
type EventOrigin = Pick<EventContext, 'authed' | 'internal' | 'servedOwner' | 'relayUrl' | 'restoring'>;

const kindOf = (input: unknown): unknown =>
  typeof input === 'object' && input !== null ? (input as { kind?: unknown }).kind : undefined;
