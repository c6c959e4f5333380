// A run's streamed text on the receiving side (NIP-XX 25801 deltas, `seq` contiguous from 0): the
// deltas are handed on in seq order, each once, and what is kept is bounded against a hostile
// agent (hundreds of large deltas, seqs that never line up). Used by the client library's
// AgentConversation (src/client/run.ts) and the console's answers (src/console/conversation-view.ts).
//
// - A delta ahead of the one expected waits for it; at most MAX_EARLY_DELTAS wait, a later one
//   past that is dropped: `delta 9 dropped: 256 later deltas already wait for delta 0`.
// - The text handed on and waiting is at most MAX_RUN_OUTPUT_CHARS characters in all (what the
//   hosted agent's model writes in a run at most, so an honest agent never reaches it). The delta
//   that would pass it ends the stream: the part of it that fits is handed on when it is the one
//   expected, the deltas waiting are forgotten, and every later delta is dropped:
//   `the agent sent over 2097152 characters; the rest of the answer is not shown`.
// - A repeated or past seq is ignored. `skip` gives up on the missing delta(s): the waiting ones
//   are handed on from the lowest seq (the console does so after a while, so that a lost delta,
//   or an agent that counts from 1, does not stop the stream until the terminal event).

import { MAX_RUN_OUTPUT_CHARS } from './nip-xx.js';

/** Deltas that may wait for an earlier one at most. */
export const MAX_EARLY_DELTAS = 256;

/** Why deltas are dropped once the text passed MAX_RUN_OUTPUT_CHARS. */
export const ANSWER_CUT = `the agent sent over ${MAX_RUN_OUTPUT_CHARS} characters; the rest of the answer is not shown`;

export interface DeltaText {
  seq: number;
  text: string;
}

export interface DeltasTaken {
  /** Deltas now in order, to hand on (none when the delta waits, repeats one, or is dropped). */
  ready: DeltaText[];
  /** Why the delta, or the part of it past the bound, was dropped. */
  dropped?: string;
}

export class DeltaOrder {
  #next = 0;
  readonly #early = new Map<number, string>();
  /** Characters handed on and waiting. */
  #chars = 0;
  #full = false;

  /** The seq expected next. */
  get next(): number {
    return this.#next;
  }

  /** Deltas waiting for an earlier one. */
  get waiting(): number {
    return this.#early.size;
  }

  /** The text reached MAX_RUN_OUTPUT_CHARS: every delta is dropped. */
  get full(): boolean {
    return this.#full;
  }

  push(seq: number, text: string): DeltasTaken {
    if (this.#full) return { ready: [], dropped: ANSWER_CUT };
    if (seq < this.#next || this.#early.has(seq)) return { ready: [] };
    if (seq > this.#next && this.#early.size >= MAX_EARLY_DELTAS) {
      return { ready: [], dropped: `delta ${seq} dropped: ${MAX_EARLY_DELTAS} later deltas already wait for delta ${this.#next}` };
    }
    const room = MAX_RUN_OUTPUT_CHARS - this.#chars;
    if (text.length > room) {
      this.#full = true;
      this.#early.clear();
      return { ready: seq === this.#next ? [{ seq, text: text.slice(0, room) }] : [], dropped: ANSWER_CUT };
    }
    this.#chars += text.length;
    this.#early.set(seq, text);
    return { ready: this.#drain() };
  }

  /** Hands on the waiting deltas from the lowest seq, as if the ones before it had come. */
  skip(): DeltasTaken {
    if (this.#early.size === 0) return { ready: [] };
    this.#next = Math.min(...this.#early.keys());
    return { ready: this.#drain() };
  }

  #drain(): DeltaText[] {
    const ready: DeltaText[] = [];
    for (let text = this.#early.get(this.#next); text !== undefined; text = this.#early.get(this.#next)) {
      this.#early.delete(this.#next);
      ready.push({ seq: this.#next++, text });
    }
    return ready;
  }
}
