// Cancels (kind 25806) that arrive before their prompt's run exists: the prompt may still be on its
// way to its run row (awaiting the owner's account after a wake), or come later through another
// relay. Each is kept in memory for EARLY_CANCEL_TTL_MS, keyed by run id and canceller, and
// honoured only for the prompt's own sender (as a cancel of a running run). Its content is kept
// undecrypted (decrypted when its prompt comes, with that sender's conversation key): cancels from
// fresh keys for unknown runs cost no key agreement and do not churn the conversation-key cache.
// The owner's NIP-AO cancel_turn (already read and verified) of a run not started yet is kept the
// same way (`noteOwner`), and honoured whoever sent the prompt (the owner may cancel any run).
// Bounded: the newest EARLY_CANCELS, each of at most EARLY_CANCEL_MAX_CONTENT characters of content.

import { LruMap } from '../../src/shared/lru.js';

/** How long a cancel waits for its prompt. */
export const EARLY_CANCEL_TTL_MS = 120_000;
/** Early cancels kept at once (the newest). */
export const EARLY_CANCELS = 1024;
/** The longest content of a cancel kept (an encrypted `{"ver":1,"reason":…}` is under 200 characters). */
export const EARLY_CANCEL_MAX_CONTENT = 1024;

/** The canceller of an owner's cancel_turn in the keys (never a pubkey: those are 64 hex). */
const OWNER = '*owner';

export class EarlyCancels {
  /** `<run id> <canceller>` → until when (ms) it is honoured, and its encrypted content. */
  private readonly pending = new LruMap<string, { until: number; content: string }>(EARLY_CANCELS);

  /** `canceller` sent a cancel of run `runId` (its encrypted `content`) at `now` (ms), before the run existed. */
  note(runId: string, canceller: string, content: string, now: number): void {
    if (content.length > EARLY_CANCEL_MAX_CONTENT) return;
    this.pending.set(`${runId} ${canceller}`, { until: now + EARLY_CANCEL_TTL_MS, content });
  }

  /** The owner cancelled run `runId` (a verified cancel_turn) at `now` (ms), before the run existed. */
  noteOwner(runId: string, now: number): void {
    this.pending.set(`${runId} ${OWNER}`, { until: now + EARLY_CANCEL_TTL_MS, content: '' });
  }

  /** Whether the owner cancelled run `runId` before it started, no longer than the TTL before `now` (ms); forgets it. */
  takeOwner(runId: string, now: number): boolean {
    const key = `${runId} ${OWNER}`;
    const kept = this.pending.peek(key);
    this.pending.delete(key);
    return kept !== undefined && kept.until >= now;
  }

  /** The encrypted content of the cancel `sender` sent of its run `runId` before it started, no longer than the TTL before `now` (ms); forgets it. */
  take(runId: string, sender: string, now: number): string | undefined {
    const key = `${runId} ${sender}`;
    const kept = this.pending.peek(key);
    if (!kept) return undefined;
    this.pending.delete(key);
    return kept.until >= now ? kept.content : undefined;
  }
}
