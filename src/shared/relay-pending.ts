// Requests of one relay client waiting for the relay's answer: EVENT and AUTH waiting for OK (by
// event id; several callers may wait on one id) and COUNT waiting for COUNT or CLOSED. Each wait
// has a timeout and remembers the connection (generation) it was sent on.

import { CountAnswerSchema } from './messages.js';
import type { CountResult, PublishResult } from './relay-types.js';

interface Waiter<T> {
  readonly gen: number;
  readonly settle: (result: T) => void;
}

/** How a wait ends without an answer: the relay said nothing in time, or the frame could not be sent. */
type Unanswered = { ok: false; message: string; timeout?: true };

/**
 * One wait for the relay's `answer`: the waiter is registered (`add`) before `send` runs, and
 * removed again on a timeout after `ms` or a failed send, which settle it with an error.
 */
function wait<T>(
  answer: string,
  gen: number,
  ms: number,
  add: (w: Waiter<T>) => void,
  remove: (w: Waiter<T>) => void,
  send: () => boolean,
): Promise<T | Unanswered> {
  return new Promise((resolve) => {
    const waiter: Waiter<T> = {
      gen,
      settle: (r) => {
        clearTimeout(timer);
        resolve(r);
      },
    };
    const timer = setTimeout(() => {
      remove(waiter);
      resolve({ ok: false, message: `error: no ${answer} from the relay within ${ms} ms`, timeout: true });
    }, ms);
    add(waiter);
    if (!send()) {
      remove(waiter);
      clearTimeout(timer);
      resolve({ ok: false, message: 'error: could not send on the connection' });
    }
  });
}

export class PendingRequests {
  readonly #ok = new Map<string, Array<Waiter<PublishResult>>>();
  readonly #count = new Map<string, Waiter<CountResult>>();

  /** Waits for the OK of `id` (registered before `send` runs); a failed send settles at once. */
  waitOk(id: string, gen: number, ms: number, send: () => boolean): Promise<PublishResult> {
    const add = (w: Waiter<PublishResult>): void => {
      this.#ok.set(id, [...(this.#ok.get(id) ?? []), w]);
    };
    const remove = (w: Waiter<PublishResult>): void => {
      const list = this.#ok.get(id)?.filter((x) => x !== w) ?? [];
      if (list.length) this.#ok.set(id, list);
      else this.#ok.delete(id);
    };
    return wait('OK', gen, ms, add, remove, send);
  }

  /** Waits for the COUNT (or CLOSED) answering request `id`; a failed send settles at once. */
  waitCount(id: string, gen: number, ms: number, send: () => boolean): Promise<CountResult> {
    return wait(
      'COUNT',
      gen,
      ms,
      (w: Waiter<CountResult>) => this.#count.set(id, w),
      () => this.#count.delete(id),
      send,
    );
  }

  /** An OK arrived on connection `gen`: settles the waits sent on it, drops older ones. */
  onOk(id: string, accepted: boolean, message: string, gen: number): void {
    const waiters = this.#ok.get(id);
    if (!waiters) return;
    this.#ok.delete(id);
    for (const w of waiters) if (w.gen === gen) w.settle({ ok: accepted, message });
  }

  onCount(id: string, payload: unknown): void {
    const w = this.#count.get(id);
    if (!w) return;
    this.#count.delete(id);
    const answer = CountAnswerSchema.safeParse(payload);
    if (answer.success) {
      w.settle({ ok: true, count: answer.data.count, approximate: answer.data.approximate === true });
    } else {
      w.settle({ ok: false, message: 'invalid: malformed COUNT answer from the relay' });
    }
  }

  /** A CLOSED for subscription id `id`: ends the COUNT of that id, if any (then true). */
  onClosed(id: string, message: string): boolean {
    const w = this.#count.get(id);
    if (!w) return false;
    this.#count.delete(id);
    w.settle({ ok: false, message });
    return true;
  }

  /** Fails every wait (the connection is gone). */
  failAll(message: string): void {
    const oks = [...this.#ok.values()].flat();
    const counts = [...this.#count.values()];
    this.#ok.clear();
    this.#count.clear();
    for (const w of oks) w.settle({ ok: false, message });
    for (const w of counts) w.settle({ ok: false, message });
  }
}
