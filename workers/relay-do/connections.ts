// Per-connection state of a shard that must survive hibernation: the socket attachment holds the
// connection's identity and AUTH challenge; subscriptions and authenticated pubkeys live in SQLite
// (an attachment is limited to 2 KiB). In memory they are only a cache rebuilt on wake, with the
// fan-out index of the live subscriptions (fanout-index.ts), kept in step with every change, and the
// memory their filters hold (subscription-memory.ts), per connection and in all. At an
// edge object, also the stamp of the history each subscription was answered with (edge-link.ts), so
// that a loss told after a wake closes only what may have missed events. Also how frames are sent
// to a connection (with the lazy NIP-42 challenge) and how its close is answered.

import { formatRejection, reject, type Rejection } from '../../src/shared/errors.js';
import { isAuthRequiredAnswer, relayMessage } from '../../src/shared/messages.js';
import type { Filter } from '../../src/shared/filters.js';
import type { NostrEvent } from '../../src/shared/event.js';
import { FanoutIndex, type Subscription } from './fanout-index.js';
import { BucketMap, ByteBudgets, TokenBucket } from './rate-limit.js';
import type { RelayLimits } from './limits.js';
import type { AddressBudget, Stamp } from './edge-wire.js';
import type { Holding } from './policy.js';

export interface Attachment {
  cid: string;
  challenge: string;
  ip: string;
  relayUrl: string;
  /** A connection of edgestr's own hosted agent (see INTERNAL_HEADER in shard.ts). */
  internal?: boolean;
}

export interface Connection {
  readonly ws: WebSocket;
  readonly att: Attachment;
  readonly authed: Set<string>;
  readonly subs: Map<string, Filter[]>;
  /** Estimated memory each subscription's filters hold (subscription-memory.ts), by subscription id. */
  readonly held: Map<string, number>;
  readonly events: TokenBucket;
  readonly reqs: TokenBucket;
  readonly frames: TokenBucket;
  /** AUTH messages: each costs a signature verification, so they are refused before it when empty. */
  readonly auths: TokenBucket;
}

export class ConnectionStore {
  private readonly live = new Map<WebSocket, Connection>();
  private readonly index = new FanoutIndex<Connection>();
  /** What REQs returned per client address (read_bytes_per_second_per_ip); edgestr's own agents are not counted. */
  private readonly reads: ByteBudgets;
  /** Characters of messages per client address, before parsing (inbound_bytes_per_second_per_ip). */
  private readonly inbound: ByteBudgets;
  /** Stored rows the queries of each client address read (scan_rows_per_second_per_ip). */
  private readonly scans: ByteBudgets;
  /** EVENTs (other than frames) and kind 24200 frames per client address, before verification. */
  private readonly eventsByIp: BucketMap;
  private readonly framesByIp: BucketMap;
  private readonly upgradesByIp: BucketMap;
  private readonly deliveriesByIp: BucketMap;
  /** Whether every socket of the shard has its connection (and subscriptions) in memory. */
  private complete = false;
  /** Estimated memory the filters of every connection hold (read from storage when unknown). */
  private heldInAll: number | undefined;
  /** Connections whose socket closed (`drop`), while something still holds them. */
  private readonly closed = new WeakSet<Connection>();

  constructor(
    private readonly sql: SqlStorage,
    private readonly limits: RelayLimits,
    /** The shard's clock (unix milliseconds), for the buckets of rebuilt connections. */
    private readonly clock: () => number,
  ) {
    sql.exec(`
      CREATE TABLE IF NOT EXISTS conn_auth (cid TEXT NOT NULL, pubkey TEXT NOT NULL, PRIMARY KEY (cid, pubkey)) WITHOUT ROWID;
      CREATE TABLE IF NOT EXISTS conn_subs (cid TEXT NOT NULL, sid TEXT NOT NULL, filters TEXT NOT NULL, held INTEGER NOT NULL DEFAULT 0, PRIMARY KEY (cid, sid)) WITHOUT ROWID;
      CREATE TABLE IF NOT EXISTS conn_stamps (cid TEXT NOT NULL, sid TEXT NOT NULL, epoch INTEGER NOT NULL, seq INTEGER NOT NULL, PRIMARY KEY (cid, sid)) WITHOUT ROWID;
    `);
    // Shards created before the memory was kept: their rows (of sockets a deploy closed) count nothing.
    const columns = sql.exec<{ name: string }>("SELECT name FROM pragma_table_info('conn_subs')").toArray();
    if (!columns.some((c) => c.name === 'held')) sql.exec('ALTER TABLE conn_subs ADD COLUMN held INTEGER NOT NULL DEFAULT 0');
    this.reads = new ByteBudgets(limits.read_bytes_per_second_per_ip, limits.read_bytes_burst_per_ip);
    this.inbound = new ByteBudgets(limits.inbound_bytes_per_second_per_ip, limits.inbound_bytes_burst_per_ip);
    this.scans = new ByteBudgets(limits.scan_rows_per_second_per_ip, limits.scan_rows_burst_per_ip);
    this.eventsByIp = new BucketMap(limits.events_per_second_per_ip, limits.events_burst_per_ip);
    this.framesByIp = new BucketMap(limits.frames_per_second_per_ip, limits.frames_burst_per_ip);
    this.upgradesByIp = new BucketMap(limits.connections_per_second_per_ip, limits.connections_burst_per_ip);
    this.deliveriesByIp = new BucketMap(limits.deliveries_per_second_per_ip, limits.deliveries_burst_per_ip);
  }

  /**
   * Whether a live event may be sent to a subscription of `conn` now: within its address's budget
   * of live events (deliveries_*_per_ip; edgestr's own agents are not counted), whose token is then
   * taken; else the reason to close that subscription with.
   */
  admitDelivery(conn: Connection): Rejection | undefined {
    if (conn.att.internal || this.deliveriesByIp.take(conn.att.ip, this.clock())) return undefined;
    return reject('rate-limited', `too many live events for your address (${this.limits.deliveries_per_second_per_ip} per second); subscribe again later`);
  }

  /** Whether client address `ip` may open one more connection now (connections_*_per_ip); takes its token when it may. */
  admitUpgrade(ip: string): boolean {
    return this.upgradesByIp.take(ip, this.clock());
  }

  /**
   * A message of `chars` characters arrived on `conn`: the rejection when its address has sent
   * more than its budget (the message is then not parsed), else undefined (and it is charged).
   */
  receive(conn: Connection, chars: number): Rejection | undefined {
    if (conn.att.internal) return undefined;
    const now = this.clock();
    const wait = this.inbound.wait(conn.att.ip, now);
    if (wait > 0) {
      return reject('rate-limited', `slow down: this address sent too much (${this.limits.inbound_bytes_per_second_per_ip} bytes/s); retry in ${wait} s`);
    }
    this.inbound.spend(conn.att.ip, chars, now);
    return undefined;
  }

  /**
   * Whether an EVENT (`frame`: a kind 24200 frame) from `conn` may have its signature verified now:
   * its connection's bucket, then its address's; the rejection when not. Edgestr's own agents are
   * bounded by their own limits.
   */
  throttle(conn: Connection, frame: boolean, now: number): Rejection | undefined {
    if (conn.att.internal) return undefined;
    if (!(frame ? conn.frames : conn.events).take(now)) return reject('rate-limited', 'slow down: too many events on this connection');
    if (!(frame ? this.framesByIp : this.eventsByIp).take(conn.att.ip, now)) return reject('rate-limited', 'slow down: too many events from this address');
    return undefined;
  }

  /** `conn` was sent `bytes` of stored events (a REQ's history): charged to its client address. */
  chargeRead(conn: Connection, bytes: number): void {
    if (!conn.att.internal) this.reads.spend(conn.att.ip, bytes, this.clock());
  }

  /** `conn`'s query read `rows` stored rows (SQLite's count, returned or not): charged to its client address. */
  chargeScan(conn: Connection, rows: number): void {
    if (!conn.att.internal) this.scans.spend(conn.att.ip, rows, this.clock());
  }

  /** Whole seconds `conn`'s address must wait before its next REQ or COUNT runs a query (0: none). */
  scanWait(conn: Connection): number {
    return conn.att.internal ? 0 : this.scans.wait(conn.att.ip, this.clock());
  }

  /** Whole seconds `conn`'s address must wait before its next REQ is answered (0: none). */
  readWait(conn: Connection): number {
    return conn.att.internal ? 0 : this.reads.wait(conn.att.ip, this.clock());
  }

  /** What is left of the read and scan budgets of `conn`'s address now (an edge sends it with a query: edge-budgets.ts); edgestr's own agents have none. */
  budget(conn: Connection): AddressBudget | undefined {
    if (conn.att.internal) return undefined;
    const now = this.clock();
    return { address: conn.att.ip, read: this.reads.left(conn.att.ip, now), scan: this.scans.left(conn.att.ip, now) };
  }

  /** Drops state of connections that no longer exist (after a restart closed their sockets). */
  forgetAllBut(liveCids: ReadonlySet<string>): void {
    for (const table of ['conn_auth', 'conn_subs', 'conn_stamps']) {
      const cids = this.sql.exec<{ cid: string }>(`SELECT DISTINCT cid FROM ${table}`).toArray();
      for (const { cid } of cids) if (!liveCids.has(cid)) this.sql.exec(`DELETE FROM ${table} WHERE cid = ?`, cid);
    }
  }

  /** The connection of a socket, rebuilt from its attachment and storage after hibernation. */
  get(ws: WebSocket): Connection | undefined {
    const known = this.live.get(ws);
    if (known) return known;
    const att = ws.deserializeAttachment() as Attachment | null;
    if (!att) return undefined;
    const now = this.clock();
    const subs = this.sql
      .exec<{ sid: string; filters: string; held: number }>('SELECT sid, filters, held FROM conn_subs WHERE cid = ?', att.cid)
      .toArray();
    const conn: Connection = {
      ws,
      att,
      authed: new Set(
        this.sql
          .exec<{ pubkey: string }>('SELECT pubkey FROM conn_auth WHERE cid = ?', att.cid)
          .toArray()
          .map((r) => r.pubkey),
      ),
      subs: new Map(subs.map((r) => [r.sid, JSON.parse(r.filters) as Filter[]])),
      held: new Map(subs.map((r) => [r.sid, r.held])),
      events: new TokenBucket(this.limits.events_per_second_per_connection, this.limits.events_burst_per_connection, now),
      reqs: new TokenBucket(this.limits.reqs_per_second_per_connection, this.limits.reqs_burst_per_connection, now),
      frames: new TokenBucket(this.limits.frames_per_second_per_connection, this.limits.frames_burst_per_connection, now),
      auths: new TokenBucket(this.limits.auths_per_second_per_connection, this.limits.auths_burst_per_connection, now),
    };
    this.live.set(ws, conn);
    for (const [sid, filters] of conn.subs) this.index.set(att.cid, conn, sid, filters);
    return conn;
  }

  /**
   * The live subscriptions that may match `e` (to be checked with read-policy.ts `delivers`). The
   * first call after a wake from hibernation loads every socket's connection from `sockets`
   * (ctx.getWebSockets()), so the index holds every subscription of the shard.
   */
  subscribersOf(e: NostrEvent, sockets: () => WebSocket[]): Set<Subscription<Connection>> {
    this.loadAll(sockets);
    return this.index.candidates(e);
  }

  /** Whether any connection of the shard has a live subscription (loading them all after a wake, as `subscribersOf`). */
  hasSubscriptions(sockets: () => WebSocket[]): boolean {
    this.loadAll(sockets);
    return !this.index.empty;
  }

  private loadAll(sockets: () => WebSocket[]): void {
    if (this.complete) return;
    for (const ws of sockets()) this.get(ws);
    this.complete = true;
  }

  open(ws: WebSocket, att: Attachment): Connection {
    ws.serializeAttachment(att);
    const conn = this.get(ws);
    if (!conn) throw new Error('attachment was not stored');
    return conn;
  }

  /** Why the connection may not authenticate as `pubkey` too: past `max_auth_pubkeys_per_connection` distinct keys. */
  authRefusal(conn: Connection, pubkey: string): Rejection | undefined {
    const max = this.limits.max_auth_pubkeys_per_connection;
    if (conn.authed.has(pubkey) || conn.authed.size < max) return undefined;
    return reject('restricted', `this connection is already authenticated as ${conn.authed.size} pubkeys (max ${max})`);
  }

  /** Records that the connection authenticated as `pubkey`; refused as `authRefusal` says, and once its socket closed (`drop`: an edge's proof answered late). */
  addAuth(conn: Connection, pubkey: string): Rejection | undefined {
    if (this.closed.has(conn)) return reject('error', 'this connection is closed; authenticate on a new one');
    if (conn.authed.has(pubkey)) return undefined;
    const refused = this.authRefusal(conn, pubkey);
    if (refused) return refused;
    conn.authed.add(pubkey);
    this.sql.exec('INSERT OR IGNORE INTO conn_auth (cid, pubkey) VALUES (?, ?)', conn.att.cid, pubkey);
    return undefined;
  }

  /** What is held besides subscription `sid` of `conn`, and what `adding` (a REQ's filters for it) would add. */
  holding(conn: Connection, sid: string, adding: number): Holding {
    const replaced = conn.held.get(sid) ?? 0;
    let connection = 0;
    for (const n of conn.held.values()) connection += n;
    return { adding, connection: connection - replaced, shard: this.heldByAll() - replaced };
  }

  /** Holds subscription `sid` of `conn` (replacing one of the same id), its filters holding `held` bytes (subscription-memory.ts); nothing once its socket closed. */
  setSub(conn: Connection, sid: string, filters: Filter[], held: number): void {
    if (this.closed.has(conn)) return;
    this.heldInAll = this.heldByAll() - (conn.held.get(sid) ?? 0) + held;
    conn.subs.set(sid, filters);
    conn.held.set(sid, held);
    this.index.set(conn.att.cid, conn, sid, filters);
    this.sql.exec(
      'INSERT INTO conn_subs (cid, sid, filters, held) VALUES (?, ?, ?, ?) ON CONFLICT (cid, sid) DO UPDATE SET filters = excluded.filters, held = excluded.held',
      conn.att.cid,
      sid,
      JSON.stringify(filters),
      held,
    );
  }

  /** Ends subscription `sid` of `conn`; nothing once its socket closed (`drop` ended them all: an edge's REQ refused late). */
  closeSub(conn: Connection, sid: string): void {
    if (this.closed.has(conn)) return;
    this.heldInAll = this.heldByAll() - (conn.held.get(sid) ?? 0);
    conn.subs.delete(sid);
    conn.held.delete(sid);
    this.index.delete(conn.att.cid, sid);
    this.sql.exec('DELETE FROM conn_subs WHERE cid = ? AND sid = ?', conn.att.cid, sid);
  }

  /** Estimated memory the filters of all subscriptions of the shard (an edge: of its connections) hold. */
  private heldByAll(): number {
    this.heldInAll ??= this.sql.exec<{ n: number }>('SELECT coalesce(sum(held), 0) AS n FROM conn_subs').one().n;
    return this.heldInAll;
  }

  /** At an edge: the stamp of the history subscription `sid` of `conn` was answered with (kept across hibernation). */
  keepStamp(conn: Connection, sid: string, stamp: Stamp): void {
    this.sql.exec(
      'INSERT INTO conn_stamps (cid, sid, epoch, seq) VALUES (?, ?, ?, ?) ON CONFLICT (cid, sid) DO UPDATE SET epoch = excluded.epoch, seq = excluded.seq',
      conn.att.cid,
      sid,
      stamp.epoch,
      stamp.seq,
    );
  }

  /** At an edge: subscription `sid` of `conn` is gone (its CLOSE, its socket's close, or a close here). */
  dropStamp(conn: Connection, sid: string): void {
    this.sql.exec('DELETE FROM conn_stamps WHERE cid = ? AND sid = ?', conn.att.cid, sid);
  }

  /** The stamps kept for `conn`'s subscriptions, by subscription id. */
  stamps(conn: Connection): Map<string, Stamp> {
    const rows = this.sql.exec<{ sid: string; epoch: number; seq: number }>('SELECT sid, epoch, seq FROM conn_stamps WHERE cid = ?', conn.att.cid).toArray();
    return new Map(rows.map((r) => [r.sid, { epoch: r.epoch, seq: r.seq }]));
  }

  /**
   * The socket closed: its connection's subscriptions and authentication are gone, in memory and in
   * storage. Its Connection may still be held by answers an edge awaits: `setSub` and `closeSub`
   * ignore it from now on (else a late refusal subtracts its memory twice), `addAuth` refuses it.
   */
  drop(ws: WebSocket): void {
    const conn = this.live.get(ws);
    const att = (conn?.att ?? ws.deserializeAttachment()) as Attachment | null;
    this.live.delete(ws);
    if (conn) {
      this.closed.add(conn);
      conn.subs.clear();
      conn.held.clear();
    }
    if (!att) return;
    this.index.deleteConnection(att.cid);
    const held = this.sql.exec<{ n: number }>('SELECT coalesce(sum(held), 0) AS n FROM conn_subs WHERE cid = ?', att.cid).one().n;
    this.heldInAll = this.heldByAll() - held;
    this.sql.exec('DELETE FROM conn_auth WHERE cid = ?', att.cid);
    this.sql.exec('DELETE FROM conn_subs WHERE cid = ?', att.cid);
  }
}

/**
 * Sends a frame. The connection's NIP-42 challenge goes out lazily: right before every
 * `auth-required:` answer (OK or CLOSED), so a client learns it the moment authenticating would
 * help, and clients that never need it (welshman and NDK without an auth policy) never see one.
 */
export function send(conn: Connection, frame: string): void {
  if (conn.ws.readyState !== WebSocket.OPEN) return;
  if (isAuthRequiredAnswer(frame)) conn.ws.send(relayMessage.auth(conn.att.challenge));
  conn.ws.send(frame);
}

/** Answers a refused EVENT or AUTH: OK false for its id, or a NOTICE when it had none. */
export function answerRejection(conn: Connection, id: string | undefined, r: Rejection): void {
  send(conn, id ? relayMessage.ok(id, false, formatRejection(r)) : relayMessage.notice(formatRejection(r)));
}

/** The code to echo in a close reply: the peer's own, unless it is one that may not be sent on the wire. */
export function closeReplyCode(code: number): number {
  const sendable = (code >= 1000 && code <= 1003) || (code >= 1007 && code <= 1014) || (code >= 3000 && code <= 4999);
  return sendable ? code : 1000;
}
