// A fake relay at the network boundary for Node tests of the client and the `edgestr` command: a
// `ws` WebSocketServer on 127.0.0.1 speaking real Nostr frames (NIP-01, NIP-42) with real signed
// events. It stores what it is given, answers every REQ with the stored events that match and EOSE,
// keeps live subscriptions, accepts every EVENT (OK true) and hands it to `onEvent`, which may answer
// by `deliver`ing more events to the matching live subscriptions; plain HTTP requests go to `onHttp`
// (default 404). `refuseReq` and `refuseEvent` make it answer a REQ with CLOSED or an EVENT with OK
// false, with the message they return; `ignoreReq` makes it hold a REQ without ever answering it (no
// events, no EOSE, no CLOSED); `closeOnEvent` makes it end the live subscriptions of the connection
// an EVENT came on with CLOSED (as a shard does when a subscription's live events pass its rate).
// No verification, no limits: it stands for a relay that passes along whatever strangers publish.
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import { WebSocketServer, type WebSocket } from 'ws';
import type { NostrEvent } from '../../src/shared/event.js';
import { matchFilter, type Filter } from '../../src/shared/filters.js';

export interface FakeRelay {
  /** http://127.0.0.1:<port> (the CLI's --url; ws://… is the same socket). */
  url: string;
  /** Events answered to REQs that match them. */
  stored: NostrEvent[];
  /** Sends `e` to every live subscription that matches it (and stores it when `store`). */
  deliver(e: NostrEvent, store?: boolean): void;
  close(): Promise<void>;
}

interface Sub {
  socket: WebSocket;
  id: string;
  filters: Filter[];
}

export interface FakeRelayOptions {
  onEvent?: (e: NostrEvent, relay: FakeRelay) => void;
  onHttp?: (req: IncomingMessage, res: ServerResponse, relay: FakeRelay) => void;
  /** The CLOSED message for a REQ with these filters (undefined: answered as usual). */
  refuseReq?: (filters: Filter[]) => string | undefined;
  /** The OK false message for this event (undefined: accepted). */
  refuseEvent?: (e: NostrEvent) => string | undefined;
  /** Whether a REQ with these filters is held unanswered: no stored events, no EOSE, no CLOSED, no live events. */
  ignoreReq?: (filters: Filter[]) => boolean;
  /** The CLOSED message sent, after this event's OK, to every live subscription of the connection it came on (undefined: none). */
  closeOnEvent?: (e: NostrEvent) => string | undefined;
}

export async function fakeRelay(opts: FakeRelayOptions = {}): Promise<FakeRelay> {
  const http = createServer((req, res) => {
    if (opts.onHttp) return opts.onHttp(req, res, relay);
    res.writeHead(404).end();
  });
  const wss = new WebSocketServer({ server: http });
  await new Promise<void>((resolve) => http.listen(0, '127.0.0.1', () => resolve()));
  const address = http.address();
  const port = address && typeof address === 'object' ? address.port : 0;
  const subs: Sub[] = [];
  const matches = (filters: Filter[], e: NostrEvent): boolean => filters.some((f) => matchFilter(f, e));
  const relay: FakeRelay = {
    url: `http://127.0.0.1:${port}`,
    stored: [],
    deliver(e, store = false) {
      if (store) relay.stored.push(e);
      for (const s of subs) if (matches(s.filters, e)) s.socket.send(JSON.stringify(['EVENT', s.id, e]));
    },
    close: () =>
      new Promise<void>((resolve) => {
        for (const c of wss.clients) c.terminate();
        wss.close();
        http.closeAllConnections();
        http.close(() => resolve());
      }),
  };
  wss.on('connection', (socket) => {
    const challenge = `challenge-${Math.random()}`;
    socket.send(JSON.stringify(['AUTH', challenge]));
    socket.on('close', () => {
      for (let i = subs.length - 1; i >= 0; i--) if (subs[i]!.socket === socket) subs.splice(i, 1);
    });
    socket.on('message', (raw) => {
      const m = JSON.parse(String(raw)) as unknown[];
      if (m[0] === 'AUTH' && m.length === 1) socket.send(JSON.stringify(['AUTH', challenge]));
      else if (m[0] === 'AUTH') socket.send(JSON.stringify(['OK', (m[1] as NostrEvent).id, true, '']));
      else if (m[0] === 'REQ') {
        const id = m[1] as string;
        const filters = m.slice(2) as Filter[];
        const refused = opts.refuseReq?.(filters);
        if (refused !== undefined) return socket.send(JSON.stringify(['CLOSED', id, refused]));
        if (opts.ignoreReq?.(filters) === true) return;
        for (const e of relay.stored) if (matches(filters, e)) socket.send(JSON.stringify(['EVENT', id, e]));
        socket.send(JSON.stringify(['EOSE', id]));
        subs.push({ socket, id, filters });
      } else if (m[0] === 'CLOSE') {
        const i = subs.findIndex((s) => s.socket === socket && s.id === m[1]);
        if (i >= 0) subs.splice(i, 1);
      } else if (m[0] === 'EVENT') {
        const e = m[1] as NostrEvent;
        const refused = opts.refuseEvent?.(e);
        if (refused !== undefined) return socket.send(JSON.stringify(['OK', e.id, false, refused]));
        socket.send(JSON.stringify(['OK', e.id, true, '']));
        const closing = opts.closeOnEvent?.(e);
        if (closing !== undefined) {
          for (let i = subs.length - 1; i >= 0; i--) {
            if (subs[i]!.socket !== socket) continue;
            socket.send(JSON.stringify(['CLOSED', subs[i]!.id, closing]));
            subs.splice(i, 1);
          }
        }
        setTimeout(() => opts.onEvent?.(e, relay), 0);
      }
    });
  });
  return relay;
}
