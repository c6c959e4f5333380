// nostr-tools' Relay as the interop tests drive it (nostr-tools.test.ts, edges.test.ts): sockets
// opened for one test and closed after it, a REQ read to its EOSE, and NIP-42 authentication
// before any REQ (a bare ["AUTH"] asks for the challenge; onauth answers it).
import WebSocket from 'ws';
import { Relay, useWebSocketImplementation } from 'nostr-tools/relay';
import { finalizeEvent, type Event, type EventTemplate } from 'nostr-tools/pure';
import type { Filter } from 'nostr-tools/filter';
import { within, type Key } from './demo.js';

useWebSocketImplementation(WebSocket);

export const signer = (key: Key) => (t: EventTemplate) => Promise.resolve(finalizeEvent(t, key.sk));

/** What a test opened (relays, pools), closed by `closeAll` after it. */
export class Opened {
  private readonly items: Array<{ close: () => void }> = [];

  add(item: { close: () => void }): void {
    this.items.push(item);
  }

  /** A connected Relay; with `key`, onauth signs challenges with it. */
  async connect(url: string, key?: Key): Promise<Relay> {
    const r = await Relay.connect(url);
    if (key) r.onauth = signer(key);
    this.add(r);
    return r;
  }

  closeAll(): void {
    for (const r of this.items.splice(0)) r.close();
  }
}

/** REQ until EOSE; rejects with the CLOSED reason. */
export function fetchAll(r: Relay, filter: Filter): Promise<Event[]> {
  return new Promise((resolve, reject) => {
    const got: Event[] = [];
    const sub = r.subscribe([filter], {
      onevent: (e) => got.push(e),
      oneose: () => {
        resolve(got); // first: close() below calls onclose ("closed by caller")
        sub.close();
      },
      onclose: (reason) => reject(new Error(reason)),
    });
  });
}

/** Authenticates `r` as `key` up front: asks for the challenge with a bare ["AUTH"]; onauth answers it. */
export async function authenticate(r: Relay, key: Key): Promise<void> {
  let challenged: () => void = () => undefined;
  const asked = new Promise<void>((resolve) => (challenged = resolve));
  r.onauth = (t) => {
    challenged();
    return signer(key)(t);
  };
  await r.send('["AUTH"]');
  await within(asked, 10_000, 'the challenge');
  const answer = await r.auth(signer(key));
  if (answer !== '') throw new Error(`AUTH refused: ${answer}`);
}
