// Relay connections from Node: the shared relay client (src/shared/relay-client.ts) over the `ws`
// package, authenticated (NIP-42) as the given key, with incoming events verified.
import WebSocket from 'ws';
import { finalizeEvent } from 'nostr-tools/pure';
import { checkIdAndSignature, type NostrEvent } from '../shared/event.js';
import type { Filter } from '../shared/filters.js';
import { RelayClient, type SocketLike } from '../shared/relay-client.js';
import { nobleVerifier } from '../shared/verify.js';
import type { KeyPair } from './keys.js';

export const nodeSocket = (url: string): SocketLike => new WebSocket(url);

export const verifyEvent = (e: NostrEvent): boolean => checkIdAndSignature(e, nobleVerifier).ok;

/** A relay client for `url` that authenticates as `key` when asked (or at once with authenticate()). */
export function relayClient(url: string, key: KeyPair | undefined, opts: { reconnect?: boolean } = {}): RelayClient {
  return new RelayClient({
    url,
    socket: nodeSocket,
    verify: verifyEvent,
    ...(key ? { auth: async (t) => finalizeEvent(t, key.sk) } : {}),
    ...(opts.reconnect ? {} : { reconnect: false as const }),
  });
}

/** Every stored event matching `filters`, up to EOSE (rejects with the relay's CLOSED message). */
export function fetchEvents(client: RelayClient, filters: Filter[], timeoutMs = 10_000): Promise<NostrEvent[]> {
  return new Promise((resolve, reject) => {
    const events: NostrEvent[] = [];
    const timer = setTimeout(() => {
      sub.close();
      reject(new Error(`no answer from ${client.url} within ${timeoutMs} ms`));
    }, timeoutMs);
    const sub = client.subscribe(filters, {
      onEvent: (e) => events.push(e),
      onEose: () => {
        clearTimeout(timer);
        sub.close();
        resolve(events);
      },
      onClosed: (m) => {
        clearTimeout(timer);
        reject(new Error(m));
      },
    });
  });
}
