// NIP-42 pieces of the relay client: the AUTH event template, the `auth-required:` test, the wire
// order of a signed event, and the slot holding a connection's challenge.

import { parseRejection } from './errors.js';
import type { NostrEvent } from './event.js';
import { KIND } from './kinds.js';
import type { EventTemplate } from './relay-types.js';

/** Whether a relay's OK or CLOSED message asks the client to authenticate first. */
export const isAuthRequired = (message: string): boolean => parseRejection(message)?.prefix === 'auth-required';

/** The kind 22242 template answering `challenge` from the relay at `url`. */
export const authTemplate = (url: string, challenge: string): EventTemplate => ({
  kind: KIND.AUTH,
  created_at: Math.floor(Date.now() / 1000),
  tags: [
    ['relay', url],
    ['challenge', challenge],
  ],
  content: '',
});

/** The event with `id` first, so a relay refusing an oversized message can still name it in OK. */
export const wireEvent = (e: NostrEvent): NostrEvent => ({
  id: e.id,
  pubkey: e.pubkey,
  created_at: e.created_at,
  kind: e.kind,
  tags: e.tags,
  content: e.content,
  sig: e.sig,
});

/** The latest AUTH challenge of one connection, and the callers waiting for one to arrive. */
export class ChallengeSlot {
  #value: string | undefined;
  #waiters: Array<() => void> = [];

  get value(): string | undefined {
    return this.#value;
  }

  /** Sets (a challenge arrived) or clears (the connection is gone) the challenge; wakes every waiter. */
  set(value: string | undefined): void {
    this.#value = value;
    for (const w of this.#waiters.splice(0)) w();
  }

  /** The challenge once one is set (or the slot is cleared), or undefined at `deadline`. */
  wait(deadline: number): Promise<string | undefined> {
    return new Promise((resolve) => {
      const done = (): void => {
        clearTimeout(timer);
        resolve(this.#value);
      };
      const timer = setTimeout(() => {
        this.#waiters = this.#waiters.filter((w) => w !== done);
        resolve(undefined);
      }, Math.max(0, deadline - Date.now()));
      this.#waiters.push(done);
    });
  }
}
