// What the primary knows of its edges' subscriptions (docs/SCALING.md "Which edges need an
// event"): per edge, the filters it listed, filed in a fan-out index, so that an event goes only to
// the edges with a filter that may match it. Bounded on both counts a stranger could push up with
// REQs: the work per event is one lookup per condition of the event per edge (`mayMatch`, never a
// scan of subscriptions), and the memory, estimated as for a shard's own subscriptions
// (subscription-memory.ts), is at most MAX_EDGE_INTEREST_MEMORY per edge and MAX_INTEREST_MEMORY in
// all; an edge past either gets every event again (always correct: the edge checks each
// subscription exactly) until it lists its subscriptions anew.

import type { NostrEvent } from '../../src/shared/event.js';
import type { Filter } from '../../src/shared/filters.js';
import { FanoutIndex } from './fanout-index.js';
import type { SubSummary } from './edge-wire.js';
import { subscriptionMemory } from './subscription-memory.js';

/** Estimated memory of what one edge may have filed: what an edge holds itself by default (`max_subscription_memory`). */
export const MAX_EDGE_INTEREST_MEMORY = 8_388_608;
/** Estimated memory of what all edges of a shard may have filed together. */
export const MAX_INTEREST_MEMORY = 4 * MAX_EDGE_INTEREST_MEMORY;

/** One edge's filed subscriptions and the estimated memory of each. */
class Filed {
  readonly index = new FanoutIndex<null>();
  readonly sizes = new Map<string, number>();
  bytes = 0;

  set(key: string, filters: readonly Filter[]): void {
    this.delete(key);
    const size = key.length + subscriptionMemory(filters);
    this.sizes.set(key, size);
    this.bytes += size;
    this.index.set(key, null, '', filters);
  }

  delete(key: string): void {
    const size = this.sizes.get(key);
    if (size === undefined) return;
    this.sizes.delete(key);
    this.bytes -= size;
    this.index.delete(key, '');
  }
}

export class EdgeInterests {
  private readonly edges = new Map<number, Filed>();
  private total = 0;

  /** Edge `i` lists all its subscriptions (undefined: it did not, so it gets every event). */
  list(i: number, subs: readonly SubSummary[] | undefined): void {
    this.drop(i);
    if (!subs) return;
    const filed = new Filed();
    this.edges.set(i, filed);
    for (const [key, filters] of subs) filed.set(key, filters);
    this.total += filed.bytes;
    this.bound(i, filed);
  }

  /** A subscription of edge `i` opened or changed (nothing when the edge gets every event anyway). */
  add(i: number, key: string, filters: readonly Filter[]): void {
    const filed = this.edges.get(i);
    if (!filed) return;
    this.total -= filed.bytes;
    filed.set(key, filters);
    this.total += filed.bytes;
    this.bound(i, filed);
  }

  remove(i: number, key: string): void {
    const filed = this.edges.get(i);
    if (!filed) return;
    this.total -= filed.bytes;
    filed.delete(key);
    this.total += filed.bytes;
  }

  /** Forgets what edge `i` listed: it gets every event (or none, when it no longer listens). */
  drop(i: number): void {
    const filed = this.edges.get(i);
    if (!filed) return;
    this.total -= filed.bytes;
    this.edges.delete(i);
  }

  /** Whether edge `i` may have a subscription `e` matches. */
  needs(i: number, e: NostrEvent): boolean {
    return this.edges.get(i)?.index.mayMatch(e) ?? true;
  }

  /** Estimated memory of what is filed for all edges. */
  get bytes(): number {
    return this.total;
  }

  private bound(i: number, filed: Filed): void {
    if (filed.bytes <= MAX_EDGE_INTEREST_MEMORY && this.total <= MAX_INTEREST_MEMORY) return;
    console.warn(`relay shard: the subscriptions of edge ${i} pass what the primary files (${filed.bytes} bytes; all edges ${this.total}); it gets every event`);
    this.drop(i);
  }
}
