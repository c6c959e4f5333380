// The one bounded least-recently-used map of the code base (conversation keys, NIP-98 replay
// ids, NIP-AO sequence counters and seen frames, rate-limit keys, agent budgets). Recency is the
// insertion order of a Map: `get`, `getOrCreate` and `set` move a key to the newest end; `peek`,
// `has` and iteration do not. Beyond `max` entries the oldest one is forgotten.

export class LruMap<K, V extends {}> {
  readonly max: number;
  readonly #m = new Map<K, V>();

  constructor(max: number) {
    if (!Number.isSafeInteger(max) || max < 1) throw new RangeError(`LruMap: max must be a positive integer (got ${max})`);
    this.max = max;
  }

  get size(): number {
    return this.#m.size;
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

  /** Stores `value` as the most recently used, forgetting the least recently used beyond `max`. */
  set(key: K, value: V): this {
    this.#m.delete(key);
    this.#m.set(key, value);
    if (this.#m.size > this.max) {
      const oldest = this.#m.keys().next();
      if (!oldest.done) this.#m.delete(oldest.value);
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
    return this.#m.delete(key);
  }

  clear(): void {
    this.#m.clear();
  }

  /** Entries from the least to the most recently used; deleting while iterating is allowed. */
  [Symbol.iterator](): MapIterator<[K, V]> {
    return this.#m.entries();
  }
}
