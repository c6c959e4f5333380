// Why edgestr sends its NIP-42 challenge lazily: each library against a scripted in-process relay
// (a `ws` server) that sends its challenge either on connect or only when asked (`["AUTH"]`), with
// no auth set up in the library. A NOTICE "sentinel" that follows the frames under test tells that
// the library has handled them, so "nothing happened" is not a matter of waiting long enough.
//   on connect: welshman swallows the EOSE (once it has processed an unanswered challenge, its
//               auth buffer drops every EOSE); NDK is left in AUTH_REQUESTED (never reconnected).
//   lazy:       nostr-tools `relay.auth()` and applesauce `authenticate()` find no challenge until
//               one is asked for.
import { afterEach, describe, expect, it } from 'vitest';
import WebSocket, { WebSocketServer } from 'ws';
import { Relay as ToolsRelay, useWebSocketImplementation } from 'nostr-tools/relay';
import { finalizeEvent, type EventTemplate } from 'nostr-tools/pure';
import { Pool, request, SocketEvent } from '@welshman/net';
import NDK, { NDKRelayStatus } from '@nostr-dev-kit/ndk';
import { Relay as SauceRelay } from 'applesauce-relay';
import { filter, firstValueFrom, lastValueFrom, toArray } from 'rxjs';
import { newKey, within } from './demo.js';

useWebSocketImplementation(WebSocket);
(globalThis as { WebSocket?: unknown }).WebSocket ??= WebSocket; // NDK uses the global

type Mode = 'on-connect' | 'lazy';
const CHALLENGE = 'probe-challenge';

const servers: WebSocketServer[] = [];
const cleanups: Array<() => void> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0)) c();
  for (const s of servers.splice(0)) {
    for (const ws of s.clients) ws.terminate();
    await new Promise((r) => s.close(r));
  }
});

/** A relay that answers REQ with EOSE, signed AUTH with OK true, and `["AUTH"]` with its challenge. */
async function probeRelay(mode: Mode): Promise<string> {
  const server = new WebSocketServer({ host: '127.0.0.1', port: 0 });
  servers.push(server);
  await new Promise((r) => server.once('listening', r));
  const send = (ws: WebSocket, ...frame: unknown[]) => ws.send(JSON.stringify(frame));
  server.on('connection', (ws) => {
    if (mode === 'on-connect') send(ws, 'AUTH', CHALLENGE);
    send(ws, 'NOTICE', 'sentinel: connected');
    ws.on('message', (data) => {
      const f = JSON.parse(String(data)) as unknown[];
      if (f[0] === 'REQ') {
        // After welshman's receive batch (100 ms) holding a challenge sent on connect has run, as it
        // has over any real network: this process's timers fire in order of expiry.
        setTimeout(() => {
          send(ws, 'EOSE', f[1]);
          send(ws, 'NOTICE', `sentinel: after ${String(f[1])}`);
        }, 300);
      }
      if (f[0] === 'AUTH' && f.length === 1) send(ws, 'AUTH', CHALLENGE);
      if (f[0] === 'AUTH' && f.length === 2) send(ws, 'OK', (f[1] as { id: string }).id, true, '');
    });
  });
  const address = server.address();
  return `ws://127.0.0.1:${typeof address === 'object' && address ? address.port : 0}`;
}

const sign = (t: EventTemplate) => Promise.resolve(finalizeEvent(t, newKey().sk));

describe.each<[Mode]>([['on-connect'], ['lazy']])('a relay whose challenge comes %s', (mode) => {
  it('welshman with no auth policy: a request completes only when no challenge came', async () => {
    const url = await probeRelay(mode);
    const pool = new Pool();
    cleanups.push(() => pool.clear());
    let resolved = false;
    const done = request({ relays: [url], filters: [{ kinds: [1] }], autoClose: true, context: { pool } }).then(() => (resolved = true));
    await within(
      new Promise<void>((resolve) => {
        pool.get(url).on(SocketEvent.Receive, (m: unknown[]) => {
          if (m[0] === 'NOTICE' && String(m[1]).startsWith('sentinel: after')) resolve();
        });
      }),
      10_000,
      'the sentinel after EOSE',
    );
    await Promise.resolve();
    if (mode === 'lazy') await done;
    expect(resolved).toBe(mode === 'lazy');
  });

  it('NDK with no auth policy: the relay stays CONNECTED (reconnectable) only when no challenge came', async () => {
    const url = await probeRelay(mode);
    const ndk = new NDK({ explicitRelayUrls: [url], enableOutboxModel: false });
    const relay = [...ndk.pool.relays.values()][0]!;
    cleanups.push(() => relay.disconnect());
    const sentinel = new Promise<void>((resolve) => relay.on('notice', () => resolve()));
    await ndk.connect(10_000);
    await within(sentinel, 10_000, 'the sentinel');
    expect(relay.status).toBe(mode === 'lazy' ? NDKRelayStatus.CONNECTED : NDKRelayStatus.AUTH_REQUESTED);
  });

  it('nostr-tools: relay.auth() right after connecting works only with a challenge on connect', async () => {
    const url = await probeRelay(mode);
    const r = await ToolsRelay.connect(url);
    cleanups.push(() => r.close());
    await within(
      new Promise<void>((resolve) => {
        const sub = r.subscribe([{ kinds: [1] }], { oneose: () => (resolve(), sub.close()) });
      }),
      10_000,
      'EOSE (after any challenge sent on connect)',
    );
    if (mode === 'on-connect') expect(await r.auth(sign)).toBe('');
    else {
      await expect(r.auth(sign)).rejects.toThrow("can't perform auth, no challenge was received");
      r.onauth = sign;
      await r.send('["AUTH"]'); // edgestr's way to ask for the challenge
      await within(
        new Promise<void>((resolve) => {
          const t = setInterval(() => {
            void r.auth(sign).then(
              () => (clearInterval(t), resolve()),
              () => undefined,
            );
          }, 20);
        }),
        10_000,
        'auth after asking for the challenge',
      );
    }
  });

  it('applesauce: authenticate() right after connecting works only with a challenge on connect', async () => {
    const url = await probeRelay(mode);
    const r = new SauceRelay(url, { WebSocket: WebSocket as unknown as typeof globalThis.WebSocket });
    cleanups.push(() => r.close());
    await within(lastValueFrom(r.request([{ kinds: [1] }]).pipe(toArray())), 10_000, 'EOSE');
    const signer = { signEvent: (t: EventTemplate) => finalizeEvent(t, newKey().sk) };
    if (mode === 'on-connect') {
      await within(firstValueFrom(r.challenge$.pipe(filter((c) => c !== null))), 10_000, 'the challenge');
      expect(await r.authenticate(signer)).toMatchObject({ ok: true });
    } else {
      expect(() => r.authenticate(signer)).toThrow('Have not received authentication challenge');
      r.send(['AUTH']);
      await within(firstValueFrom(r.challenge$.pipe(filter((c) => c !== null))), 10_000, 'the challenge');
      expect(await r.authenticate(signer)).toMatchObject({ ok: true });
    }
  });
});
