// How many rows each caller may have the Accounts Durable Object read for it per window (GET
// /api/usage: the rows each of its queries covered). Fixed windows, one per caller, started by its
// first query; a query is let in while the caller's window has budget left, and what it covered is
// then spent (so one query may take the window past the budget, by at most one query's bound).
// Kept in memory for at most MAX_CALLERS callers (the least recently seen forgotten), and lost when
// the object restarts: a bound on the load one key makes, not an account. The Accounts object keeps
// a second one under a single key for all callers' queries together (which forgets nothing).

import { LruMap } from '../../src/shared/lru.js';

/** Callers whose windows are kept. */
const MAX_CALLERS = 10_000;

export class ReadBudget {
  readonly #windows = new LruMap<string, { start: number; read: number }>(MAX_CALLERS);

  constructor(
    /** Rows per window. */
    readonly rows: number,
    readonly windowMs: number,
  ) {}

  /** Milliseconds until `caller` may query again (0: now), at `now` (ms). */
  wait(caller: string, now: number): number {
    const w = this.#windows.get(caller);
    if (!w || now - w.start >= this.windowMs || w.read < this.rows) return 0;
    return Math.min(this.windowMs, w.start + this.windowMs - now);
  }

  /** Counts `read` rows for `caller` at `now` (ms). */
  spend(caller: string, read: number, now: number): void {
    const w = this.#windows.get(caller);
    if (!w || now - w.start >= this.windowMs) this.#windows.set(caller, { start: now, read });
    else w.read += read;
  }
}
