// What an edge object and its shard's primary say to each other (docs/SCALING.md): the edge sends
// its operations in order, batched into one `edgeBatch` RPC, and gets one answer per operation in
// the same order; the primary sends accepted events to each listening edge, batched into one
// `deliver` RPC. Stamps order the primary's deliveries against its answers to history queries,
// so that an edge sends a subscription each event exactly once (from history or live).

import type { NostrEvent } from '../../src/shared/event.js';
import type { Filter } from '../../src/shared/filters.js';

/**
 * A point in the primary's sequence of delivered events: `epoch` grows each time the primary
 * object starts (stored), `seq` counts the events it delivered to edges since.
 */
export interface Stamp {
  epoch: number;
  seq: number;
}

/** Whether `a` comes after `b`. */
export const isAfter = (a: Stamp, b: Stamp): boolean => a.epoch > b.epoch || (a.epoch === b.epoch && a.seq > b.seq);

/** Who published an event at the edge: what the primary's write policy needs of the connection. */
export interface WireOrigin {
  authed: string[];
  internal: boolean;
  relayUrl: string;
  /** The owner an internal connection serves (EventContext.servedOwner), forwarded so the primary holds it to its share. */
  servedOwner?: string;
}

/**
 * What is left of a client address's read and scan budgets at its edge (read_bytes_*_per_ip,
 * scan_rows_*_per_ip; below zero: its debt) when the batch carrying its REQ or COUNT was sent. The
 * primary spends it as it runs the batch's queries in order (edge-budgets.ts), so queries an address
 * sent before the earlier ones were answered are held to it as they are at K = 1.
 */
export interface AddressBudget {
  address: string;
  read: number;
  scan: number;
}

/** One live subscription of an edge as the primary knows it: a key unique at the edge (connection and subscription id) and its filters. */
export type SubSummary = [key: string, filters: Filter[]];

/** One operation of an edge, run by the primary in the order the edge sent them. */
export type EdgeOp =
  /**
   * The edge has live subscriptions: send it the accepted events that may match them (`subs`, all
   * of them), or every accepted event when `subs` is absent (too many to list).
   */
  | { op: 'listen'; edge: number; subs?: SubSummary[] }
  /** The edge has none: stop sending. */
  | { op: 'idle'; edge: number }
  /** A verified event, for the write path (policy, storage, OK, fan-out). */
  | { op: 'event'; event: NostrEvent; origin: WireOrigin }
  /**
   * REQ history, read as `readers` may; `sub`: the subscription it opens at the edge, matched from
   * now on; `budget`: its client address's (none: edgestr's own connections, not budgeted).
   */
  | { op: 'query'; filters: Filter[]; readers: string[]; sub?: { edge: number; key: string }; budget?: AddressBudget }
  /** The edge has subscriptions and believes the primary sends it events (its periodic check): make sure. */
  | { op: 'check'; edge: number }
  /** A subscription of the edge is gone (CLOSE, a closed connection): its events are no longer needed. */
  | { op: 'forget'; edge: number; key: string }
  /** COUNT, read as `readers` may; `budget` as a query's. */
  | { op: 'count'; filters: Filter[]; readers: string[]; budget?: AddressBudget }
  /** An agent → owner proof carried by an AUTH event (NIP-OA), verified at the edge; `at`: the AUTH event's created_at (the proof's date). */
  | { op: 'ownership'; agent: string; owner: string; conditions: string; at: number };

/**
 * A client's operations (EVENT, REQ, COUNT, an AUTH's proof): what an edge refuses when too much
 * waits for the primary, and what the primary refuses from the edges of a shard it no longer
 * serves; the others keep the primary's view of the edge's subscriptions.
 */
export const CLIENT_OPS: ReadonlySet<EdgeOp['op']> = new Set(['event', 'query', 'count', 'ownership']);

/** The answer to one EdgeOp (`error`: the primary failed on it; the message is for the client). */
export type EdgeAnswer =
  | { op: 'done' }
  | { op: 'ok'; accepted: boolean; message: string }
  /**
   * `relisted` (a query with `sub`, a check): the primary did not count the edge as listening (their
   * views had come apart) and does from `stamp` on, with every event. Events up to `stamp` were not
   * sent to the edge, so each of its subscriptions answered before may have missed some.
   */
  | { op: 'rows'; rows: string[]; stamp: Stamp; relisted?: true; scanned: number }
  | { op: 'checked'; stamp: Stamp; relisted?: true }
  | { op: 'count'; count: number; approximate: boolean; scanned: number }
  /**
   * `notServed`: refused because the owner was removed and the shard is no longer served; the edge
   * asks for the removal (it missed being told: shard.ts `setOwnerAccount`) and closes its sockets.
   */
  | { op: 'error'; message: string; notServed?: true };

/** An accepted event on its way to an edge's subscribers. */
export interface Delivery {
  stamp: Stamp;
  event: NostrEvent;
  raw: string;
}

/**
 * Set on a deliver call when the primary dropped deliveries meant for this edge (its queue for the
 * edge passed `edge_delivery_queue_bytes`, or a deliver call failed): the stamp of the last one
 * dropped. A subscription that had not seen up to there may have missed events.
 */
export type Lost = Stamp | undefined;

/** The later of two stamps (either may be absent). */
export const later = (a: Lost, b: Lost): Lost => (!a ? b : !b ? a : isAfter(a, b) ? a : b);

/**
 * Bounds of one RPC (well under the runtime's limit on a message): an edgeBatch carries at most
 * MAX_BATCH_OPS operations and about MAX_BATCH_BYTES of events and filters (at least one of
 * anything); a deliver call at most MAX_DELIVERY_EVENTS events and MAX_BATCH_BYTES of their JSON.
 * The primary answers an edgeBatch's operations in order and stops before a query (REQ history,
 * COUNT) that could take its answers past MAX_ANSWER_BYTES (what a REQ may return is
 * max_query_bytes) or once its queries read MAX_BATCH_ROWS stored rows, which bounds the time its
 * one thread spends reading for one batch; it answers the operations it ran (at least one), and the
 * edge sends the others again at the head of its queue. Cheap queries thus go many per batch, and
 * queries that return or read much a few per batch (4 REQs of max_query_bytes by default).
 */
export const MAX_BATCH_OPS = 256;
export const MAX_BATCH_BYTES = 1_048_576;
export const MAX_ANSWER_BYTES = 16_777_216;
export const MAX_BATCH_ROWS = 400_000;
export const MAX_DELIVERY_EVENTS = 256;
/** A `listen` lists the edge's subscriptions when their JSON fits in this; past it, it asks for every event. */
export const MAX_SUMMARY_BYTES = 1_048_576;

/** About how many bytes an operation weighs in an edgeBatch (its events' and filters' JSON). */
export function opBytes(op: EdgeOp): number {
  switch (op.op) {
    case 'event':
      return op.event.content.length + JSON.stringify(op.event.tags).length + 400;
    case 'query':
    case 'count':
      return JSON.stringify(op.filters).length;
    case 'listen':
      return op.subs ? JSON.stringify(op.subs).length : 100;
    default:
      return 100;
  }
}
