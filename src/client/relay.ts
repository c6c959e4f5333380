// Relay connections from Node: the shared relay client (src/shared/relay-client.ts) over the `ws`
// package, authenticated (NIP-42) as the given key, with incoming events verified. Frames are read
// up to MAX_FRAME_BYTES (`ws` alone takes 100 MiB); a larger one closes the connection, reported as
// close code 1009 with the reason.
import WebSocket from 'ws';
import { finalizeEvent } from 'nostr-tools/pure';
import { checkIdAndSignature, type NostrEvent } from '../shared/event.js';
import type { Filter } from '../shared/filters.js';
import { RelayClient, type RelayClientOptions, type SocketEvent, type SocketLike } from '../shared/relay-client.js';
import { nobleVerifier } from '../shared/verify.js';
import type { KeyPair } from './keys.js';

/**
 * The largest frame the client reads: 16 MiB. A frame from a relay carries one event; an edgestr
 * relay takes events in frames of at most its max_message_length (NIP-11; 256 KiB by default) and
 * in an owner's import of at most 8 MiB (IMPORT_MAX_BYTES, workers/api/relay.ts), so none it
 * stores comes near. docs/CLI.md "Limits".
 */
export const MAX_FRAME_BYTES = 16 * 1024 * 1024;

/** A `ws` socket reading frames of at most MAX_FRAME_BYTES: a larger one closes it, said as close code 1009 with the reason. */
export function nodeSocket(url: string): SocketLike {
  const ws = new WebSocket(url, { maxPayload: MAX_FRAME_BYTES });
  let tooLarge = false;
  ws.on('error', (e: Error & { code?: string }) => {
    if (e.code === 'WS_ERR_UNSUPPORTED_MESSAGE_LENGTH') tooLarge = true;
  });
  const closeEvent = (ev: SocketEvent): SocketEvent => (tooLarge ? { type: 'close', code: 1009, reason: `a message over ${MAX_FRAME_BYTES} bytes, this client's limit` } : ev);
  return {
    get readyState() {
      return ws.readyState;
    },
    send: (data) => ws.send(data),
    close: (code, reason) => ws.close(code, reason),
    addEventListener: (type, listener) => {
      if (type === 'error') ws.addEventListener('error', (ev) => (tooLarge ? undefined : listener(ev)));
      else if (type === 'close') ws.addEventListener('close', (ev) => listener(closeEvent(ev)));
      else ws.addEventListener(type, listener);
    },
  };
}

export const verifyEvent = (e: NostrEvent): boolean => checkIdAndSignature(e, nobleVerifier).ok;

/** A relay client for `url` that authenticates as `key` when asked (or at once with authenticate()). */
export function relayClient(url: string, key: KeyPair | undefined, opts: { reconnect?: boolean; onStatus?: RelayClientOptions['onStatus'] } = {}): RelayClient {
  return new RelayClient({
    url,
    socket: nodeSocket,
    verify: verifyEvent,
    ...(key ? { auth: async (t) => finalizeEvent(t, key.sk) } : {}),
    ...(opts.reconnect ? {} : { reconnect: false as const }),
    ...(opts.onStatus ? { onStatus: opts.onStatus } : {}),
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

/**
 * The newest stored event matching `filters`, or, when none is stored, the first one that arrives
 * within `lingerMs` after EOSE (an event published moments ago, e.g. a new agent's relay list);
 * undefined when none came. Rejects with the relay's CLOSED message or when EOSE does not come
 * within `timeoutMs`.
 */
export function latestOrNext(client: RelayClient, filters: Filter[], lingerMs: number, timeoutMs = 10_000): Promise<NostrEvent | undefined> {
  return new Promise((resolve, reject) => {
    let best: NostrEvent | undefined;
    let eose = false;
    const finish = (e: NostrEvent | undefined) => {
      clearTimeout(timer);
      sub.close();
      resolve(e);
    };
    let timer = setTimeout(() => {
      sub.close();
      reject(new Error(`no answer from ${client.url} within ${timeoutMs} ms`));
    }, timeoutMs);
    const sub = client.subscribe(filters, {
      onEvent: (e) => {
        if (eose) return finish(e);
        if (!best || e.created_at > best.created_at) best = e;
      },
      onEose: () => {
        eose = true;
        if (best) return finish(best);
        clearTimeout(timer);
        timer = setTimeout(() => finish(undefined), lingerMs);
      },
      onClosed: (m) => {
        clearTimeout(timer);
        reject(new Error(m));
      },
    });
  });
}
