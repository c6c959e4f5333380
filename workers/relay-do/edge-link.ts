// The edge's side of a shard with K > 1 edge objects (docs/SCALING.md). An edge holds its sockets,
// their subscriptions and AUTH, and verifies events itself; what needs the shard's one order (the
// write path, REQ history, COUNT, ownership proofs) goes to the primary as operations, queued in
// the order the edge's connections sent them and sent in batches: one `edgeBatch` RPC in flight,
// the operations queued meanwhile forming the next one. The primary sends back accepted events
// (`deliver`), which the edge fans out to its own subscriptions through the same fan-out index as a
// single object (fanout-index.ts), with the read policy.
//
// Exactly once: a REQ's subscription is registered before its history is asked for, deliveries
// that arrive while the history is in flight wait, and afterwards only events stamped after the
// history's stamp are sent (the rest were in the history, or were ephemeral events published
// before the REQ, which a single object would not have sent either). The history's stamp is kept in
// the edge's storage with the subscription (STAMP_WRITE_MS after its EOSE, unless it closed by then),
// so a wake from hibernation still knows it. With no subscription left the edge stops listening a
// few seconds after its last close (IDLE_DELAY_MS): REQ and CLOSE on a quiet edge write no more rows
// than on a single object.
//
// Lost deliveries (the primary dropped events for this edge, see edge-fanout.ts): each subscription
// whose history is older than the last lost event is closed with LIVE_EVENTS_LOST, so its client
// subscribes again (with `since`) rather than keep a stream with a hole in it. The same when the
// periodic check (once a minute, when no delivery came) finds the primary was not sending events
// here; a REQ's answer that says so only lists the subscriptions again (docs/SCALING.md says why).
//
// Read budgets: a REQ or COUNT is admitted when it arrives and charged when its answer comes; the
// batch that carries it also carries what its address has left (edge-budgets.ts), so queries sent
// without waiting for the earlier ones' answers are held to the budget at the primary. How many
// queries one address may have waiting here is bounded too (edge_queries_per_ip, refused at once
// past it), and a batch carries as many as the primary's answers fit (it sends the rest back), so
// one address's cheap queries cannot hold everyone else's operations behind hundreds of round trips.
//
// What waits is bounded (edge_pending_bytes): past it a client's operation is refused without being
// sent, at once when nothing of its connection waits, else in its turn holding only the refusal's
// frame (MAX_REFUSED_WAITING per connection, past which it is answered at once, out of order).
//
// The owner's removal: an edge that missed being told sends its clients' operations on; the primary
// refuses them as not served, and the edge object then asks it for the removal (`notServed`).

import { errorMessage, formatRejection, reject, type Rejection } from '../../src/shared/errors.js';
import type { NostrEvent } from '../../src/shared/event.js';
import type { Filter } from '../../src/shared/filters.js';
import { relayMessage, type CountedEvents } from '../../src/shared/messages.js';
import { send, type Connection } from './connections.js';
import type { Subscription } from './fanout-index.js';
import { delivers } from './read-policy.js';
import { BatchBudgets, type BudgetRates } from './edge-budgets.js';
import type { RelayLimits } from './limits.js';
import { isLoopbackKey, UNKNOWN_ADDRESS } from '../common/client-address.js';
import {
  CLIENT_OPS,
  isAfter,
  later,
  MAX_BATCH_BYTES,
  MAX_BATCH_OPS,
  MAX_SUMMARY_BYTES,
  opBytes,
  type AddressBudget,
  type Delivery,
  type EdgeAnswer,
  type EdgeOp,
  type Lost,
  type Stamp,
  type SubSummary,
  type WireOrigin,
} from './edge-wire.js';

/** What the edge needs of its primary. */
export interface PrimaryLink {
  edgeBatch(shard: string, ops: EdgeOp[]): Promise<EdgeAnswer[]>;
}

/** What the edge needs of its own connections: their subscriptions, through the fan-out index. */
export interface EdgeConnections {
  /** The subscriptions that may match an event (fanout-index.ts; checked exactly here). */
  candidates(e: NostrEvent): Iterable<Subscription<Connection>>;
  /** Whether any connection has a subscription. */
  subscribed(): boolean;
  /** Every connection (to close what a loss touched). */
  all(): Iterable<Connection>;
  /** The stamps kept for `conn`'s subscriptions (the history each was answered with), by subscription id. */
  stamps(conn: Connection): Map<string, Stamp>;
  /** Keeps the stamp of subscription `subId`'s history, across hibernation. */
  keepStamp(conn: Connection, subId: string, stamp: Stamp): void;
  /** Subscription `subId` is gone: its stamp too. */
  dropStamp(conn: Connection, subId: string): void;
  /** `conn` was sent `bytes` of stored events (read_bytes_per_second_per_ip). */
  chargeRead(conn: Connection, bytes: number): void;
  /** `conn`'s query read `rows` stored rows at the primary (scan_rows_per_second_per_ip). */
  chargeScan(conn: Connection, rows: number): void;
  /** Whether a live event may be sent to a subscription of `conn` (its address's budget), else why to close it (ConnectionStore.admitDelivery). */
  admitDelivery(conn: Connection): Rejection | undefined;
  /** What is left of the read and scan budgets of `conn`'s address now (undefined: edgestr's own connections, not budgeted). */
  budget(conn: Connection): AddressBudget | undefined;
}

/** The limits an edge link applies (RelayLimits). */
export type EdgeLimits = BudgetRates & Pick<RelayLimits, 'edge_pending_bytes' | 'edge_queries_per_ip'>;

/** The connection a client's operation (EVENT, REQ, COUNT, an AUTH's proof) came from, and how to refuse it without the primary. */
interface Sender {
  conn: Connection;
  /** Answers the operation with an `error:` message; holds no more than that frame needs (an EVENT's: its id, not the event). */
  refuse: (message: string) => void;
}

interface Pending {
  /** Undefined when refused here: answered `refusal` in its turn, never sent. */
  op: EdgeOp | undefined;
  /** The answer of an operation refused here: EDGE_OVERLOADED, or a query's spent budget. */
  refusal: string;
  /** A client's operation: its connection (whose operations keep their order, and whose refusals wait at most MAX_REFUSED_WAITING). */
  conn?: Connection;
  /** A REQ's or COUNT's: who it is counted against under edge_queries_per_ip (`queryKey`); its connection's address budget goes with it. */
  query?: string;
  /** Refused as it arrived, while operations of its connection were waiting: it holds only its answer's frame. */
  refused?: true;
  /** What it adds to the bytes waiting (opBytes; 0 when refused as it arrived). */
  bytes: number;
  answer: (a: EdgeAnswer) => void;
  answered: () => void;
}

/** The answer to an operation refused because `edge_pending_bytes` were waiting for the primary. */
export const EDGE_OVERLOADED = formatRejection(reject('error', 'the relay is overloaded (too much is waiting for this shard); try again'));

/**
 * Refused operations of one connection an edge keeps waiting for their turn behind its other
 * operations; past it a refusal is answered at once, out of order (closing the connection instead
 * would disconnect a client whose page load met an edge another address overloads). Each holds only
 * what its answer needs (an EVENT's id), about 370 bytes, so 300 connections hold at most about
 * 3.5 MiB of them (docs/OPERATIONS.md "Memory of a shard"); a client's buckets would let it send
 * about 200 messages at once.
 */
export const MAX_REFUSED_WAITING = 32;

/** A subscription's view of the live stream: buffering while its history is in flight, then what it has seen. */
interface SubStream {
  buffer: Delivery[] | undefined;
  seen: Stamp | undefined;
  /** While buffering: the last stamp the primary reported lost. */
  lost: Lost;
}

/**
 * Event JSON all subscriptions of an edge whose history is in flight may hold (an event held by
 * many counts once: they share it). Past it, a subscription does not hold a delivery it does not
 * already share: it is closed after its EOSE unless its history has the event (as for a loss).
 */
export const MAX_HELD_BYTES = 4_194_304;

/** How often an edge with subscriptions and no delivery since makes sure its primary sends it events (`check`). */
export const LISTEN_CHECK_MS = 60_000;

/**
 * An edge whose last subscription closed tells its primary to stop sending (`idle`) this long after
 * the last close, unless a REQ came meanwhile: a client's REQ, EOSE, CLOSE, REQ… on a quiet edge then
 * costs the primary no listening rows each time (each `listen` and `idle` writes two).
 */
export const IDLE_DELAY_MS = 3_000;

/**
 * A history's stamp is written to the edge's storage (conn_stamps) this long after its EOSE, unless
 * the subscription closed meanwhile (most one-off REQs are closed right after EOSE, and then write no
 * stamp). The object does not hibernate while the write is pending (a timer keeps it awake); a stamp
 * lost anyway (the object reset) only makes a later loss close that subscription too.
 */
export const STAMP_WRITE_MS = 2_000;

/** The CLOSED message of a subscription that missed live events. */
const LIVE_EVENTS_LOST = formatRejection(reject('error', 'live events were lost on the way to this connection (the relay is overloaded); subscribe again'));

const unreachable = (e: unknown): EdgeAnswer => ({ op: 'error', message: formatRejection(reject('error', `the shard could not be reached (${errorMessage(e)}); try again`)) });

export class EdgeLink {
  private queue: Pending[] = [];
  /** Event JSON held for subscriptions whose history is in flight (MAX_HELD_BYTES), each delivery once. */
  private heldBytes = 0;
  /** How many of those subscriptions hold each delivery. */
  private readonly holders = new Map<Delivery, number>();
  /** opBytes of the queued operations (not those in flight). */
  private queuedBytes = 0;
  private inFlight = false;
  private scheduled = false;
  /** Whether the primary sends this edge live events; undefined after a wake (a REQ or the next delivery says so again). */
  private listening: boolean | undefined;
  private readonly streams = new WeakMap<Connection, Map<string, SubStream>>();
  /** Operations of each connection queued or in flight (none: a refusal is answered at once). */
  private readonly waiting = new Map<Connection, number>();
  /** Refused operations of each connection waiting for their turn (MAX_REFUSED_WAITING). */
  private readonly refusedWaiting = new Map<Connection, number>();
  /** REQs and COUNTs queued or in flight, by `queryKey` (edge_queries_per_ip). */
  private readonly queries = new Map<string, number>();
  /** The primary's epoch in the last stamp it sent (delivery, history, check): a new one means it restarted and lost the list of this edge's subscriptions. */
  private epoch: number | undefined;
  /** Whether a delivery came since the last periodic check (then the primary does send events here). */
  private heard = false;
  /** The `idle` waiting for IDLE_DELAY_MS after the last subscription closed. */
  private idleTimer: ReturnType<typeof setTimeout> | undefined;
  /** Stamps of histories answered and not written yet (STAMP_WRITE_MS), by connection and subscription. */
  private readonly unwritten = new Map<Connection, Map<string, Stamp>>();
  private stampTimer: ReturnType<typeof setTimeout> | undefined;

  constructor(
    readonly index: number,
    /** The shard's name as the router gives it (SHARD_HEADER): "public" or the owner's hex. */
    private readonly shard: string,
    private readonly primary: () => PrimaryLink,
    private readonly connections: EdgeConnections,
    /** Removes a subscription from a connection (its REQ failed at the primary). */
    private readonly dropSub: (conn: Connection, subId: string) => void,
    /**
     * edge_pending_bytes: bytes of operations that may wait here for the primary;
     * edge_queries_per_ip: the REQs and COUNTs one address may have waiting; the read and scan rates (edge-budgets.ts).
     */
    private readonly limits: EdgeLimits,
    /** Schedules the periodic check (`check`) LISTEN_CHECK_MS from now, replacing one scheduled. */
    private readonly armCheck: () => void,
    /** The primary refused an operation as its shard is not served (the owner was removed): run after the batch's answers. */
    private readonly notServed: () => void,
  ) {}

  // Each operation's answer is handled by a callback, run as soon as its batch is answered and in
  // the order the operations were queued, so one connection's answers keep the order of its messages.

  /** EVENT of `conn`: `reply` gets the primary's answer (NIP-01 OK's accepted flag and message). */
  submit(conn: Connection, event: NostrEvent, origin: WireOrigin, reply: (accepted: boolean, message: string) => void): Promise<void> {
    const answer = (a: EdgeAnswer) => {
      if (a.op === 'ok') reply(a.accepted, a.message);
      else reply(false, a.op === 'error' ? a.message : unexpected(a));
    };
    return this.call({ op: 'event', event, origin }, answer, { conn, refuse: okRefusal(conn, event.id) });
  }

  /** COUNT: `reply` gets what the primary counted, or the message of a CLOSED. */
  count(conn: Connection, filters: Filter[], reply: (answer: CountedEvents | { closed: string }) => void): Promise<void> {
    const answer = (a: EdgeAnswer) => {
      if (a.op !== 'count') return reply({ closed: a.op === 'error' ? a.message : unexpected(a) });
      this.connections.chargeScan(conn, a.scanned);
      reply({ count: a.count, approximate: a.approximate });
    };
    return this.call({ op: 'count', filters, readers: [...conn.authed] }, answer, { conn, refuse: refusalOf(answer) });
  }

  /**
   * Why a REQ or COUNT of `conn` is refused at once, before anything of it is kept: its address (or
   * the connection, `queryKey`) has edge_queries_per_ip queries waiting for the primary already.
   */
  queryRefusal(conn: Connection): Rejection | undefined {
    const cap = this.limits.edge_queries_per_ip;
    if ((this.queries.get(queryKey(conn)) ?? 0) < cap) return undefined;
    return reject('rate-limited', `slow down: this address has too many queries waiting (${cap}); send more once they are answered`);
  }

  /** An AUTH's NIP-OA proof dated `at` (the AUTH event's created_at), recorded by the primary (where the write policy reads it); `reply` gets undefined or why not. */
  recordOwnership(conn: Connection, agent: string, owner: string, conditions: string, at: number, reply: (failed: string | undefined) => void): Promise<void> {
    const answer = (a: EdgeAnswer) => reply(a.op === 'done' ? undefined : a.op === 'error' ? a.message : unexpected(a));
    return this.call({ op: 'ownership', agent, owner, conditions, at }, answer, { conn, refuse: refusalOf(answer) });
  }

  /**
   * REQ, once admitted and its subscription set on `conn`: the history from the primary, EOSE, then
   * the live events that came in meanwhile and are not in the history.
   */
  subscribe(conn: Connection, subId: string, filters: Filter[]): Promise<void> {
    const streams = this.streamsOf(conn);
    const stream: SubStream = { buffer: [], seen: undefined, lost: undefined };
    streams.set(subId, stream);
    // Not listening, or a new edge: say so first. Not known with other subscriptions (after a wake):
    // the query's answer says whether the primary had stopped (relisted), then the list goes.
    if (this.listening === false || (this.listening === undefined && !this.subscribedBesides(conn, subId))) this.setListening(true);
    const sub = { edge: this.index, key: subKey(conn, subId) };
    const answer = (a: EdgeAnswer) => {
      // Whatever the answer, the stream holds nothing from here on (this runs once per REQ).
      const buffered = stream.buffer ?? [];
      stream.buffer = undefined;
      for (const d of buffered) this.release(d);
      if (a.op !== 'rows') {
        if (conn.subs.get(subId) === filters) {
          this.dropSub(conn, subId);
          this.forget(conn, subId);
        }
        if (streams.get(subId) === stream) streams.delete(subId);
        return send(conn, relayMessage.closed(subId, a.op === 'error' ? a.message : unexpected(a)));
      }
      // A REQ closed meanwhile (CLOSE, or a REQ of the same id refused at once, whose CLOSED went
      // first) gets nothing more; one replaced by a later REQ of the same id still gets its history
      // and EOSE, before the later one's (as from one object).
      let bytes = 0;
      if (streams.has(subId)) {
        for (const raw of a.rows) {
          send(conn, relayMessage.event(subId, raw));
          bytes += raw.length;
        }
        send(conn, relayMessage.eose(subId));
      }
      this.connections.chargeRead(conn, bytes);
      this.connections.chargeScan(conn, a.scanned);
      const current = streams.get(subId) === stream; // else replaced by a later REQ with the same id, or closed
      if (current) stream.seen = a.stamp;
      // The primary was not sending events here (relisted), restarted (and lost the list), or this edge
      // does not know (after a wake): list the subscriptions. The older ones are not closed here (see
      // docs/SCALING.md: they are closed for events they may not have needed, and a DVMCP client then
      // lost an ephemeral answer in its resubscribe's backoff); the periodic check closes them when it
      // finds a quiet edge unheard.
      const restarted = this.restarted(a.stamp);
      if ((a.relisted || restarted || this.listening === undefined) && this.connections.subscribed()) this.setListening(true);
      if (!current) return;
      if (conn.subs.get(subId) !== filters) return; // closed meanwhile
      this.keepStamp(conn, subId, a.stamp);
      // Live events, within the address's budget as every live event (`deliver`).
      for (const d of buffered) {
        if (!isAfter(d.stamp, a.stamp)) continue;
        const overBudget = this.connections.admitDelivery(conn);
        if (overBudget) return this.close(conn, subId, formatRejection(overBudget));
        send(conn, relayMessage.event(subId, d.raw));
      }
      if (stream.lost && isAfter(stream.lost, a.stamp)) this.close(conn, subId);
    };
    return this.call({ op: 'query', filters, readers: [...conn.authed], sub }, answer, { conn, refuse: refusalOf(answer) });
  }

  /** Whether this edge has a subscription other than `subId` of `conn`. */
  private subscribedBesides(conn: Connection, subId: string): boolean {
    for (const c of this.connections.all()) for (const sid of c.subs.keys()) if (c !== conn || sid !== subId) return true;
    return false;
  }

  /** CLOSE, a closed connection, or a subscription closed here: its stream is no longer needed, nor its events at the primary. */
  forget(conn: Connection, subId: string): void {
    this.streams.get(conn)?.delete(subId);
    const unwritten = this.unwritten.get(conn);
    if (unwritten?.delete(subId)) {
      if (unwritten.size === 0) this.unwritten.delete(conn);
    } else this.connections.dropStamp(conn, subId);
    if (this.listening !== true) return;
    void this.call({ op: 'forget', edge: this.index, key: subKey(conn, subId) }, ignore);
    // Once the caller has removed it: with no subscription left, stop listening IDLE_DELAY_MS after
    // the last close (no delivery would come to say so), unless a REQ came meanwhile.
    queueMicrotask(() => {
      if (this.listening !== true || this.connections.subscribed()) return;
      if (this.idleTimer !== undefined) clearTimeout(this.idleTimer);
      this.idleTimer = setTimeout(() => {
        this.idleTimer = undefined;
        if (this.listening === true && !this.connections.subscribed()) this.setListening(false);
      }, IDLE_DELAY_MS);
    });
  }

  /** Keeps the stamp of subscription `subId`'s history in storage STAMP_WRITE_MS from now, if it is still open then. */
  private keepStamp(conn: Connection, subId: string, stamp: Stamp): void {
    let stamps = this.unwritten.get(conn);
    if (!stamps) this.unwritten.set(conn, (stamps = new Map()));
    stamps.set(subId, stamp);
    this.stampTimer ??= setTimeout(() => {
      this.stampTimer = undefined;
      const due = [...this.unwritten];
      this.unwritten.clear();
      for (const [c, byId] of due) for (const [sid, st] of byId) if (c.subs.has(sid)) this.connections.keepStamp(c, sid, st);
    }, STAMP_WRITE_MS);
  }

  /**
   * The primary's accepted events: each to the subscriptions of this edge that match and may read
   * it (the fan-out index's candidates, checked exactly), event after event (a connection gets its
   * frames in the primary's order, as from one object).
   */
  deliver(items: Delivery[], lost: Lost): void {
    this.heard = true;
    if (!this.connections.subscribed()) {
      if (this.listening !== false) this.setListening(false);
      return;
    }
    const stamp = items[0]?.stamp ?? lost;
    // List the subscriptions again when the primary may not have them: it restarted (a new epoch), or
    // this edge does not know what it was told (a wake from hibernation, or a listen that failed).
    const restarted = stamp !== undefined && this.restarted(stamp);
    if (this.listening === undefined || restarted) this.setListening(true);
    if (lost) for (const conn of this.connections.all()) if (conn.subs.size > 0) this.lose(conn, lost);
    for (const d of items) {
      for (const { conn, sid, filters } of this.connections.candidates(d.event)) {
        if (!delivers(filters, d.event, conn.authed)) continue;
        const stream = this.streamsOf(conn).get(sid);
        if (stream?.buffer) this.hold(stream, stream.buffer, d);
        else if (!stream?.seen || isAfter(d.stamp, stream.seen)) {
          const overBudget = this.connections.admitDelivery(conn);
          if (overBudget) this.close(conn, sid, formatRejection(overBudget));
          else send(conn, relayMessage.event(sid, d.raw));
        }
      }
    }
  }

  /**
   * The periodic check (the edge's alarm, every LISTEN_CHECK_MS while it has subscriptions): unless
   * a delivery came since the last one, asks the primary whether it sends events here (it does from
   * then on), and closes the subscriptions that missed events if it did not. Resolves to whether
   * to check again (false: no subscription left).
   */
  async check(): Promise<boolean> {
    if (!this.connections.subscribed()) {
      if (this.listening !== false) this.setListening(false);
      return false;
    }
    const heard = this.heard;
    this.heard = false;
    if (this.listening === true && heard) return true;
    await this.call({ op: 'check', edge: this.index }, (a) => {
      if (a.op !== 'checked') {
        if (this.listening === true) this.listening = undefined; // the next delivery, REQ or check lists them again
        return;
      }
      const restarted = this.restarted(a.stamp);
      if (a.relisted) this.relisted(a.stamp);
      else if ((restarted || this.listening !== true) && this.connections.subscribed()) this.setListening(true); // lost by a restart, or not known (after a wake): the list goes
    });
    return true;
  }

  /**
   * Whether `stamp` (any the primary sent: a delivery's, a history's, a check's) is of a later epoch
   * than the last one seen here: the primary restarted since, and lost the list of this edge's
   * subscriptions. Remembers the latest epoch (a loss told after a restart carries an older one).
   */
  private restarted(stamp: Stamp): boolean {
    if (this.epoch !== undefined && stamp.epoch <= this.epoch) return false;
    const restarted = this.epoch !== undefined;
    this.epoch = stamp.epoch;
    return restarted;
  }

  /**
   * The primary did not send events here until `stamp` (edge-wire.ts EdgeAnswer): each subscription
   * answered before then may have missed some and is closed (those reading their history close
   * after it if it is older); the others are listed to the primary, which sends every event meanwhile.
   */
  private relisted(stamp: Stamp): void {
    for (const conn of this.connections.all()) if (conn.subs.size > 0) this.lose(conn, stamp);
    if (this.connections.subscribed()) this.setListening(true);
  }

  /** Closes each subscription of `conn` that may have missed events up to `lost`; those still reading history close after it. */
  private lose(conn: Connection, lost: Stamp): void {
    const streams = this.streamsOf(conn);
    for (const sid of [...conn.subs.keys()]) {
      const stream = streams.get(sid);
      if (stream?.buffer) stream.lost = later(stream.lost, lost);
      else if (!stream?.seen || isAfter(lost, stream.seen)) this.close(conn, sid);
    }
  }

  /** Keeps `d` for a subscription whose history is in flight, or, past MAX_HELD_BYTES, marks it lost there. */
  private hold(stream: SubStream, buffer: Delivery[], d: Delivery): void {
    const holders = this.holders.get(d) ?? 0;
    if (holders === 0) {
      if (this.heldBytes + d.raw.length > MAX_HELD_BYTES) {
        stream.lost = later(stream.lost, d.stamp);
        return;
      }
      this.heldBytes += d.raw.length;
    }
    this.holders.set(d, holders + 1);
    buffer.push(d);
  }

  /** A subscription that held `d` no longer does (its history answered). */
  private release(d: Delivery): void {
    const holders = (this.holders.get(d) ?? 1) - 1;
    if (holders > 0) return void this.holders.set(d, holders);
    this.holders.delete(d);
    this.heldBytes -= d.raw.length;
  }

  /** The streams of `conn`'s subscriptions; after a wake from hibernation, rebuilt from the stamps kept in storage. */
  private streamsOf(conn: Connection): Map<string, SubStream> {
    let streams = this.streams.get(conn);
    if (!streams) {
      streams = new Map([...this.connections.stamps(conn)].map(([sid, seen]) => [sid, { buffer: undefined, seen, lost: undefined }]));
      this.streams.set(conn, streams);
    }
    return streams;
  }

  private close(conn: Connection, subId: string, reason = LIVE_EVENTS_LOST): void {
    this.dropSub(conn, subId);
    this.forget(conn, subId);
    send(conn, relayMessage.closed(subId, reason));
  }

  /**
   * Tells the primary whether to send live events here, with the list of this edge's subscriptions
   * when listening (in order with the other operations); unknown again if that failed.
   */
  private setListening(on: boolean): void {
    this.listening = on;
    if (on) this.armCheck();
    const op: EdgeOp = on ? { op: 'listen', edge: this.index, subs: this.summary() } : { op: 'idle', edge: this.index };
    void this.call(op, (a) => {
      if (a.op !== 'done' && this.listening === on) this.listening = undefined;
    });
  }

  /** Every live subscription of this edge, or undefined when their filters do not fit MAX_SUMMARY_BYTES (the primary then sends everything). */
  private summary(): SubSummary[] | undefined {
    const subs: SubSummary[] = [];
    let bytes = 0;
    for (const conn of this.connections.all()) {
      for (const [sid, filters] of conn.subs) {
        bytes += JSON.stringify(filters).length + sid.length + 40;
        if (bytes > MAX_SUMMARY_BYTES) return undefined;
        subs.push([subKey(conn, sid), filters]);
      }
    }
    return subs;
  }

  /**
   * Queues `op` (a client's: with the connection it came from, `from`); `answer` runs when the
   * primary answered it. Resolves after that. Past edge_pending_bytes waiting, an EVENT, REQ, COUNT
   * or ownership proof is not kept (`refuse`), and the promise resolves at once.
   */
  private call(op: EdgeOp, answer: (a: EdgeAnswer) => void, from?: Sender): Promise<void> {
    const bytes = opBytes(op);
    if (from && CLIENT_OPS.has(op.op) && this.queuedBytes > 0 && this.queuedBytes + bytes > this.limits.edge_pending_bytes) {
      this.refuse(from, EDGE_OVERLOADED); // one always waits
      return Promise.resolve();
    }
    const query = from && (op.op === 'query' || op.op === 'count') ? queryKey(from.conn) : undefined;
    return new Promise((answered) => this.enqueue({ op, refusal: EDGE_OVERLOADED, conn: from?.conn, query, bytes, answer, answered }));
  }

  /**
   * Refuses a client's operation without sending it: at once when nothing of its connection waits
   * (no answer of it can be overtaken); else in its turn, keeping only the refusal's frame (an
   * EVENT's id, not the event). Past MAX_REFUSED_WAITING such refusals of one connection, at once
   * too (ahead of its connection's earlier answers): its client is refused, not disconnected.
   */
  private refuse(from: Sender, message: string): void {
    const { conn } = from;
    if (!this.waiting.has(conn)) return from.refuse(message);
    const refused = (this.refusedWaiting.get(conn) ?? 0) + 1;
    if (refused > MAX_REFUSED_WAITING) return from.refuse(message);
    this.refusedWaiting.set(conn, refused);
    this.enqueue({ op: undefined, refusal: message, conn, refused: true, bytes: 0, answer: refusedAnswer(from.refuse), answered: ignore });
  }

  /** Adds `p` to the queue and counts it (its connection's, its address's queries); the next batch goes when none is in flight. */
  private enqueue(p: Pending): void {
    this.queue.push(p);
    this.queuedBytes += p.bytes;
    if (p.conn) this.waiting.set(p.conn, (this.waiting.get(p.conn) ?? 0) + 1);
    if (p.query !== undefined) this.queries.set(p.query, (this.queries.get(p.query) ?? 0) + 1);
    if (!this.scheduled && !this.inFlight) {
      this.scheduled = true;
      queueMicrotask(() => {
        this.scheduled = false;
        void this.flush();
      });
    }
  }

  /** `p` was answered: it no longer counts as waiting. */
  private settle(p: Pending): void {
    if (p.conn) decrement(this.waiting, p.conn);
    if (p.conn && p.refused) decrement(this.refusedWaiting, p.conn);
    if (p.query !== undefined) decrement(this.queries, p.query);
  }

  /**
   * Sends the first queued operations as one batch (bounds: edge-wire.ts); the next batch goes when
   * it is answered. The primary answers the first operations it ran (edge-wire.ts: it stops before a
   * query past what one batch may read); the others go back to the head of the queue, in order.
   */
  private async flush(): Promise<void> {
    if (this.inFlight || this.queue.length === 0) return;
    this.inFlight = true;
    const batch = this.takeBatch();
    const ops = batch.flatMap((p) => (p.op ? [p.op] : []));
    let answers: EdgeAnswer[] = [];
    if (ops.length > 0) {
      try {
        answers = await this.primary().edgeBatch(this.shard, ops);
        if (answers.length === 0 || answers.length > ops.length) throw new Error(`the primary answered ${answers.length} of ${ops.length} operations`);
      } catch (e) {
        console.error(`relay shard edge ${this.index}: a batch of ${ops.length} operations failed: ${errorMessage(e)}`);
        answers = ops.map(() => unreachable(e));
      }
    }
    this.inFlight = false;
    const rest = batch.splice(firstNotRun(batch, answers.length));
    this.queue.unshift(...rest);
    for (const p of rest) this.queuedBytes += p.bytes;
    let next = 0;
    for (const p of batch) {
      try {
        p.answer(p.op ? answers[next++]! : { op: 'error', message: p.refusal });
      } catch (e) {
        console.error(`relay shard edge ${this.index}: answering a ${p.op?.op ?? 'refused operation'} failed: ${errorMessage(e)}`);
      }
      this.settle(p);
      p.answered();
    }
    // After the answers (a refusal reaches its client before its socket is closed).
    if (answers.some((a) => a.op === 'error' && a.notServed)) this.notServed();
    void this.flush();
  }

  /**
   * Takes the queued entries of the next batch (at least one): at most MAX_BATCH_OPS operations and
   * MAX_BATCH_BYTES (edge-wire.ts). Each query gets its address's budgets as they are now
   * (edge-budgets.ts); one whose address is in debt is refused here. Refused entries (answered here,
   * sent nowhere) take no place among them.
   */
  private takeBatch(): Pending[] {
    const budgets = new BatchBudgets(this.limits);
    let bytes = 0;
    let ops = 0;
    let n = 0;
    for (const p of this.queue) {
      if (p.op && ops === MAX_BATCH_OPS) break;
      if (p.op && (p.op.op === 'query' || p.op.op === 'count') && p.conn) {
        const budget = this.connections.budget(p.conn);
        const spent = budgets.refuse(budget, p.op.op === 'query');
        if (spent) {
          p.op = undefined;
          p.refusal = formatRejection(spent);
        } else p.op = { ...p.op, budget };
      }
      if (p.op && n > 0 && bytes + p.bytes > MAX_BATCH_BYTES) break;
      if (p.op) {
        bytes += p.bytes;
        ops += 1;
      }
      n += 1;
    }
    const batch = this.queue.splice(0, n);
    for (const p of batch) this.queuedBytes -= p.bytes;
    return batch;
  }
}

const unexpected = (a: EdgeAnswer): string => `error: the shard answered ${a.op} to this request`;

/** What a `forget` needs of its answer: nothing (a failed one leaves the primary sending a little more). */
const ignore = (): void => {};

/** The position in `batch` of the first operation past the `answered` ones the primary ran: it and what follows are sent again. */
function firstNotRun(batch: readonly Pending[], answered: number): number {
  let ops = 0;
  for (const [i, p] of batch.entries()) {
    if (!p.op) continue;
    if (ops === answered) return i;
    ops += 1;
  }
  return batch.length;
}

const decrement = <K>(counts: Map<K, number>, key: K): void => {
  const n = (counts.get(key) ?? 0) - 1;
  if (n > 0) counts.set(key, n);
  else counts.delete(key);
};

// Refusals are made here, apart from the operations they answer, so that the closures keep only
// what the frame needs (a closure made beside one that holds an event would keep the event too).

/** The refusal of `conn`'s EVENT `id`: OK false. */
const okRefusal =
  (conn: Connection, id: string) =>
  (message: string): void =>
    send(conn, relayMessage.ok(id, false, message));

/** The refusal of an operation through its own answer (a REQ's, COUNT's or proof's holds no event). */
const refusalOf =
  (answer: (a: EdgeAnswer) => void) =>
  (message: string): void =>
    answer({ op: 'error', message });

/** The answer of an entry refused as it arrived: its refusal, whatever the batch says. */
const refusedAnswer =
  (refuse: (message: string) => void) =>
  (a: EdgeAnswer): void =>
    refuse(a.op === 'error' ? a.message : EDGE_OVERLOADED);

/**
 * Who a REQ or COUNT is counted against under edge_queries_per_ip: its client address; a
 * connection of edgestr's own, or of no known address (local runs), on its own.
 */
const queryKey = (conn: Connection): string =>
  conn.att.internal || conn.att.ip === UNKNOWN_ADDRESS || isLoopbackKey(conn.att.ip) ? `connection ${conn.att.cid}` : conn.att.ip;

/** A subscription's key at the primary: its connection and its id. */
const subKey = (conn: Connection, subId: string): string => `${conn.att.cid}/${subId}`;
