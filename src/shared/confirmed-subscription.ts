// A subscription whose filter changes while it lives, each change confirmed by the relay before
// the caller relies on it: used by the DVMCP client (dvmcp-client.ts) to hear answers by the ids
// of the requests it is about to publish.
//
// NIP-01 lets a REQ replace the subscription of the same id, but says nothing of when: a relay
// may handle a connection's REQs apart from its EVENTs (strfry reads on one thread and writes on
// another), and workerd was seen handing a Durable Object three REQs sent in one tick in reverse
// order. An event published right after its REQ can then be answered before the relay holds the
// new filter, and an ephemeral answer is lost for good. So `update()` resolves only once the relay
// sent EOSE for a REQ sent after the call (history is returned before EOSE; live events from
// then on). One REQ is in flight at a time: the updates asked meanwhile share the next one, so a
// burst of N updates costs two REQs, not N, and the relay never holds two versions at once.
// A REQ the relay refuses (CLOSED), or one not confirmed within `timeoutMs`, lets its callers go
// on all the same (the caller decides what it still hears).

import type { Filter } from './filters.js';
import type { NostrEvent } from './event.js';
import type { RelayClient, Subscription } from './relay-client.js';

export interface ConfirmedSubscriptionOptions {
  /** The filter now (undefined: nothing to hear; nothing is sent). */
  filter: () => Filter | undefined;
  onEvent: (e: NostrEvent) => void;
  /** The relay refused the subscription (it stays refused until the next update). */
  onRefused?: (message: string) => void;
  /** How long an update waits for the relay's EOSE. */
  timeoutMs: number;
}

export class ConfirmedSubscription {
  readonly #relay: RelayClient;
  readonly #o: ConfirmedSubscriptionOptions;
  #sub: Subscription | undefined;
  /** Callers waiting for the next REQ (none is in flight, or one is and they came after it). */
  #next: Array<() => void> = [];
  /** The REQ in flight: its callers and how it ends; undefined when none is. */
  #inFlight: { callers: Array<() => void>; timer: ReturnType<typeof setTimeout> } | undefined;
  #closed = false;

  constructor(relay: RelayClient, options: ConfirmedSubscriptionOptions) {
    this.#relay = relay;
    this.#o = options;
  }

  /** Sends the current filter (replacing the previous one) and resolves once the relay confirmed it, refused it or timed out. */
  update(): Promise<void> {
    if (this.#closed) return Promise.resolve();
    return new Promise((go) => {
      this.#next.push(go);
      if (!this.#inFlight) this.#send();
    });
  }

  /** Sends CLOSE; waiting callers go on. */
  close(): void {
    this.#closed = true;
    this.#sub?.close();
    this.#settle();
    for (const go of this.#next.splice(0)) go();
  }

  #send(): void {
    const callers = this.#next.splice(0);
    const filter = this.#o.filter();
    if (filter === undefined || this.#closed) {
      for (const go of callers) go();
      return;
    }
    const flight = { callers, timer: setTimeout(() => this.#settle(flight), this.#o.timeoutMs) };
    this.#inFlight = flight;
    let last = filter;
    this.#sub = this.#relay.subscribe([filter], {
      ...(this.#sub ? { id: this.#sub.id } : {}),
      // Sent again by the relay client after a passing CLOSED: with what is waited for then.
      resubscribe: () => [(last = this.#o.filter() ?? last)],
      onEvent: this.#o.onEvent,
      onEose: () => this.#settle(flight),
      onClosed: (m) => {
        this.#o.onRefused?.(m);
        this.#settle(flight);
      },
    });
  }

  /** The REQ `flight` (default: whichever is in flight) ended: its callers go on, and the next REQ is sent if callers wait. */
  #settle(flight = this.#inFlight): void {
    if (!flight || this.#inFlight !== flight) return;
    clearTimeout(flight.timer);
    this.#inFlight = undefined;
    for (const go of flight.callers) go();
    if (this.#next.length > 0) this.#send();
  }
}
