// The one bounded least-recently-used map of the code base (conversation keys, NIP-98 replay
// ids, NIP-AO sequence counters and seen frames, rate-limit keys, agent budgets, MCP tool lists).
// Recency is the insertion order of a Map: `get`, `getOrCreate` and `set` move a key to the newest
// end; `peek`, `has` and iteration do not. Beyond `max` entries the oldest one is forgotten; with a
// weight bound (`weight.of(value)`, taken when the value is set), so are the oldest ones while the
// weights in all are over `weight.max` (a value heavier than that alone is not kept, and forgets
// nothing but the old value of its key).

export interface LruWeight<V> {
  /** The weight of a value (e.g. its size in characters), taken once, when it is set. */
  of: (value: V) => number;
  /** Most weight in all. */
  max: number;
}

export class LruMap<K, V extends {}> {
  readonly max: number;
  readonly #m = new Map<K, V>();
  readonly #weight: LruWeight<V> | undefined;
  readonly #weights = new Map<K, number>();
  #total = 0;

  constructor(max: number, weight?: LruWeight<V>) {
    if (!Number.isSafeInteger(max) || max < 1) throw new RangeError(`LruMap: max must be a positive integer (got ${max})`);
    if (weight && !(weight.max >= 0)) throw new RangeError(`LruMap: weight.max must be at least 0 (got ${weight.max})`);
    this.max = max;
    this.#weight = weight;
  }

  get size(): number {
    return this.#m.size;
  }

  /** The weights of the values kept, in all (0 without a weight bound). */
  get weight(): number {
    return this.#total;
  }

  /** The value of `key`, now the most recently used. */
  get(key: K): V | undefined {
    const v = this.#m.get(key);
    if (v !== undefined) {
      this.#m.delete(key);
      this.#m.set(key, v);
    }
    return v;
  }

  /** The value of `key`, leaving its recency alone. */
  peek(key: K): V | undefined {
    return this.#m.get(key);
  }

  has(key: K): boolean {
    return this.#m.has(key);
  }

  /** Stores `value` as the most recently used, forgetting the least recently used beyond the bounds. */
  set(key: K, value: V): this {
    this.delete(key);
    if (this.#weight) {
      const w = this.#weight.of(value);
      if (w > this.#weight.max) return this;
      this.#weights.set(key, w);
      this.#total += w;
    }
    this.#m.set(key, value);
    while (this.#m.size > this.max || (this.#weight !== undefined && this.#total > this.#weight.max)) {
      const oldest = this.#m.keys().next();
      if (oldest.done) break;
      this.delete(oldest.value);
    }
    return this;
  }

  /** The value of `key` (most recently used now), stored from `create()` when missing. */
  getOrCreate(key: K, create: () => V): V {
    const v = this.get(key);
    if (v !== undefined) return v;
    const created = create();
    this.set(key, created);
    return created;
  }

  delete(key: K): boolean {
    this.#total -= this.#weights.get(key) ?? 0;
    this.#weights.delete(key);
    return this.#m.delete(key);
  }

  clear(): void {
    this.#m.clear();
    this.#weights.clear();
    this.#total = 0;
  }

  /** Entries from the least to the most recently used; deleting while iterating is allowed. */
  [Symbol.iterator](): MapIterator<[K, V]> {
    return this.#m.entries();
  }
}
