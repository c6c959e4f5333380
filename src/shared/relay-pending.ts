// Requests of one relay client waiting for the relay's answer: EVENT and AUTH waiting for OK (by
// event id; several callers may wait on one id) and COUNT waiting for COUNT or CLOSED. Each wait
// has a timeout and remembers the connection (generation) it was sent on.

import { CountAnswerSchema } from './messages.js';
import type { CountResult, PublishResult } from './relay-types.js';

interface Waiter<T> {
  readonly gen: number;
  readonly settle: (result: T) => void;
}

export class PendingRequests {
  readonly #ok = new Map<string, Array<Waiter<PublishResult>>>();
  readonly #count = new Map<string, Waiter<CountResult>>();

  /** Waits for the OK of `id` (registered before `send` runs); a failed send settles at once. */
  waitOk(id: string, gen: number, ms: number, send: () => boolean): Promise<PublishResult> {
    return new Promise((resolve) => {
      const waiter: Waiter<PublishResult> = {
        gen,
        settle: (r) => {
          clearTimeout(timer);
          resolve(r);
        },
      };
      const remove = (): void => {
        const list = this.#ok.get(id)?.filter((w) => w !== waiter) ?? [];
        if (list.length) this.#ok.set(id, list);
        else this.#ok.delete(id);
      };
      const timer = setTimeout(() => {
        remove();
        resolve({ ok: false, message: `error: no OK from the relay within ${ms} ms`, timeout: true });
      }, ms);
      this.#ok.set(id, [...(this.#ok.get(id) ?? []), waiter]);
      if (!send()) {
        remove();
        waiter.settle({ ok: false, message: 'error: could not send on the connection' });
      }
    });
  }

  /** Waits for the COUNT (or CLOSED) answering request `id`; a failed send settles at once. */
  waitCount(id: string, gen: number, ms: number, send: () => boolean): Promise<CountResult> {
    return new Promise((resolve) => {
      const timer = setTimeout(() => {
        this.#count.delete(id);
        resolve({ ok: false, message: `error: no COUNT from the relay within ${ms} ms`, timeout: true });
      }, ms);
      this.#count.set(id, {
        gen,
        settle: (r) => {
          clearTimeout(timer);
          resolve(r);
        },
      });
      if (!send()) {
        this.#count.delete(id);
        clearTimeout(timer);
        resolve({ ok: false, message: 'error: could not send on the connection' });
      }
    });
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
