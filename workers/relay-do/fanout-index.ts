// Fan-out index of a shard's live subscriptions: for an event, the subscriptions that may match it,
// without a scan of every subscription. Each filter is filed under its most selective condition
// (its ids, else its authors, else its `#p` or `#e` values, whichever list is shorter, else its
// kinds, else the wildcard list); an event looks up its id, its pubkey, its kind, the values of its
// `p` and `e` tags, and the wildcard list. Every filter that matches an event is found this way
// (the condition it is filed under is one the event must meet), and a candidate is only a
// candidate: the caller checks it exactly (read-policy.ts `delivers`). A filter with an empty list
// for its condition matches nothing (filters.ts) and is filed nowhere.

import type { NostrEvent } from '../../src/shared/event.js';
import type { Filter } from '../../src/shared/filters.js';

/** A live subscription: its connection (`key` names it), its id and its filters. */
export interface Subscription<C> {
  readonly key: string;
  readonly conn: C;
  readonly sid: string;
  readonly filters: readonly Filter[];
}

type Bucket<C> = Set<Subscription<C>>;
/** A bucket of one of the index's maps (named by its value), or the wildcard list (no map). */
type Filed<C> = { map: Map<string, Bucket<C>> | Map<number, Bucket<C>>; value: string | number } | { map: undefined };

/** Where a filter is filed: one of the index's maps and the values it is filed under there, or the wildcard list. */
type Placement = { dimension: 'ids' | 'authors' | 'p' | 'e'; values: readonly string[] } | { dimension: 'kinds'; values: readonly number[] } | { dimension: 'any' };

/** The most selective condition of a filter, as the index files it. */
export function placement(f: Filter): Placement {
  if (f.ids) return { dimension: 'ids', values: f.ids };
  if (f.authors) return { dimension: 'authors', values: f.authors };
  const p = f['#p'];
  const e = f['#e'];
  if (p && (!e || p.length <= e.length)) return { dimension: 'p', values: p };
  if (e) return { dimension: 'e', values: e };
  if (f.kinds) return { dimension: 'kinds', values: f.kinds };
  return { dimension: 'any' };
}

export class FanoutIndex<C> {
  private readonly ids = new Map<string, Bucket<C>>();
  private readonly authors = new Map<string, Bucket<C>>();
  private readonly p = new Map<string, Bucket<C>>();
  private readonly e = new Map<string, Bucket<C>>();
  private readonly kinds = new Map<number, Bucket<C>>();
  private readonly any: Bucket<C> = new Set();
  /** Connection key → subscription id → the subscription and the buckets it was put in. */
  private readonly byConnection = new Map<string, Map<string, { sub: Subscription<C>; filed: Filed<C>[] }>>();

  /** Adds a subscription, or replaces the one with the same connection key and id. */
  set(key: string, conn: C, sid: string, filters: readonly Filter[]): void {
    this.delete(key, sid);
    const sub: Subscription<C> = { key, conn, sid, filters };
    const filed: Filed<C>[] = [];
    for (const f of filters) {
      const at = placement(f);
      if (at.dimension === 'any') {
        this.any.add(sub);
        filed.push({ map: undefined });
      } else if (at.dimension === 'kinds') {
        for (const k of at.values) {
          bucketOf(this.kinds, k).add(sub);
          filed.push({ map: this.kinds, value: k });
        }
      } else {
        const map = this[at.dimension];
        for (const v of at.values) {
          bucketOf(map, v).add(sub);
          filed.push({ map, value: v });
        }
      }
    }
    let subs = this.byConnection.get(key);
    if (!subs) this.byConnection.set(key, (subs = new Map()));
    subs.set(sid, { sub, filed });
  }

  delete(key: string, sid: string): void {
    const subs = this.byConnection.get(key);
    const entry = subs?.get(sid);
    if (!subs || !entry) return;
    for (const at of entry.filed) {
      if (!at.map) {
        this.any.delete(entry.sub);
        continue;
      }
      // Empty buckets are dropped, so values nobody subscribes to any more hold no memory.
      const map = at.map as Map<string | number, Bucket<C>>;
      const b = map.get(at.value);
      b?.delete(entry.sub);
      if (b?.size === 0) map.delete(at.value);
    }
    subs.delete(sid);
    if (subs.size === 0) this.byConnection.delete(key);
  }

  /** Removes every subscription of a connection. */
  deleteConnection(key: string): void {
    const subs = this.byConnection.get(key);
    if (!subs) return;
    for (const sid of [...subs.keys()]) this.delete(key, sid);
  }

  /** The subscriptions that may match `e`, each once (to be checked exactly by the caller). */
  candidates(e: NostrEvent): Set<Subscription<C>> {
    const out = new Set<Subscription<C>>(this.any);
    const add = (b: Bucket<C> | undefined) => {
      if (b) for (const s of b) out.add(s);
    };
    add(this.ids.get(e.id));
    add(this.authors.get(e.pubkey));
    add(this.kinds.get(e.kind));
    for (const t of e.tags) {
      const value = t[1];
      if (value === undefined) continue;
      if (t[0] === 'p') add(this.p.get(value));
      else if (t[0] === 'e') add(this.e.get(value));
    }
    return out;
  }

  /**
   * Whether `e` has any candidate (`candidates(e)` is not empty), without building the set: one
   * lookup per condition of the event, whatever the number of subscriptions.
   */
  mayMatch(e: NostrEvent): boolean {
    if (this.any.size > 0 || this.ids.has(e.id) || this.authors.has(e.pubkey) || this.kinds.has(e.kind)) return true;
    for (const t of e.tags) {
      const value = t[1];
      if (value === undefined) continue;
      if ((t[0] === 'p' && this.p.has(value)) || (t[0] === 'e' && this.e.has(value))) return true;
    }
    return false;
  }

  /** Whether no subscription is indexed. */
  get empty(): boolean {
    return this.byConnection.size === 0;
  }

  /** Live subscriptions indexed. */
  get size(): number {
    let n = 0;
    for (const subs of this.byConnection.values()) n += subs.size;
    return n;
  }
}

function bucketOf<K, C>(map: Map<K, Bucket<C>>, value: K): Bucket<C> {
  let b = map.get(value);
  if (!b) map.set(value, (b = new Set()));
  return b;
}
