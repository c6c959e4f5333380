// Cancels (kind 25806) that arrive before their prompt's run exists: the prompt may still be on its
// way to its run row (awaiting the owner's account after a wake), or come later through another
// relay. Each is kept in memory for EARLY_CANCEL_TTL_MS, keyed by run id and canceller, and
// honoured only when the prompt's own sender sent it (as a cancel of a running run). Bounded: the
// newest EARLY_CANCELS are kept, so a flood of cancels for unknown runs costs a fixed amount of memory.

import { LruMap } from '../../src/shared/lru.js';

/** How long a cancel waits for its prompt. */
export const EARLY_CANCEL_TTL_MS = 120_000;
/** Early cancels kept at once (the newest). */
export const EARLY_CANCELS = 1024;

export class EarlyCancels {
  /** `<run id> <canceller>` → until when (ms) it is honoured. */
  private readonly pending = new LruMap<string, number>(EARLY_CANCELS);

  /** `canceller` cancelled run `runId` at `now` (ms), before the run existed. */
  note(runId: string, canceller: string, now: number): void {
    this.pending.set(`${runId} ${canceller}`, now + EARLY_CANCEL_TTL_MS);
  }

  /** Whether `sender` cancelled its run `runId` before it started, no longer than the TTL before `now` (ms); forgets that cancel. */
  take(runId: string, sender: string, now: number): boolean {
    const key = `${runId} ${sender}`;
    const until = this.pending.peek(key);
    if (until === undefined) return false;
    this.pending.delete(key);
    return until >= now;
  }
}
