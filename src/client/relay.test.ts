// What a relay can make the Node client do (relay.ts over the shared relay client): a frame past
// MAX_FRAME_BYTES ends the connection with that reason (ws alone reads 100 MiB), and a flood of
// distinct AUTH challenges is answered at most AUTO_AUTH_PER_CONNECTION times per connection.
// Against a local `ws` server that plays the hostile relay.
import { afterEach, describe, expect, it } from 'vitest';
import { WebSocketServer, type WebSocket } from 'ws';
import { finalizeEvent, generateSecretKey } from 'nostr-tools/pure';
import { AUTO_AUTH_PER_CONNECTION } from '../shared/relay-client.js';
import { keyPair } from './keys.js';
import { MAX_FRAME_BYTES, relayClient } from './relay.js';

let wss: WebSocketServer | undefined;
afterEach(async () => {
  for (const c of wss?.clients ?? []) c.terminate();
  await new Promise((resolve) => (wss ? wss.close(resolve) : resolve(undefined)));
  wss = undefined;
});

/** A relay on 127.0.0.1 whose sockets `onConnection` plays; its ws:// URL. */
async function hostileRelay(onConnection: (socket: WebSocket) => void): Promise<string> {
  wss = new WebSocketServer({ port: 0, host: '127.0.0.1' });
  wss.on('connection', onConnection);
  await new Promise((resolve) => wss!.on('listening', resolve));
  return `ws://127.0.0.1:${(wss.address() as { port: number }).port}/`;
}

const note = () => finalizeEvent({ kind: 1, created_at: Math.floor(Date.now() / 1000), tags: [], content: 'hi' }, generateSecretKey());

describe('relayClient (Node)', () => {
  it("a frame past MAX_FRAME_BYTES ends the connection, the reason said to what waits; one just within it is read", async () => {
    const url = await hostileRelay((socket) =>
      socket.on('message', (raw) => {
        const [, e] = JSON.parse(String(raw)) as [string, { id: string; content: string }];
        const padding = MAX_FRAME_BYTES - `["OK","${e.id}",true,""]`.length;
        socket.send(e.content === 'big' ? `["OK","${e.id}",true,"${'x'.repeat(padding + 1)}"]` : `["OK","${e.id}",true,"${'x'.repeat(padding)}"]`);
      }),
    );
    const relay = relayClient(url, undefined);
    try {
      expect(await relay.publish(note())).toMatchObject({ ok: true });
      const big = finalizeEvent({ kind: 1, created_at: Math.floor(Date.now() / 1000), tags: [], content: 'big' }, generateSecretKey());
      const started = Date.now();
      expect(await relay.publish(big)).toEqual({ ok: false, message: `error: connection closed (1009 a message over ${MAX_FRAME_BYTES} bytes, this client's limit) before the relay answered` });
      expect(Date.now() - started).toBeLessThan(5_000);
    } finally {
      relay.close();
    }
  });

  it(`answers at most ${AUTO_AUTH_PER_CONNECTION} distinct AUTH challenges of one connection (a relay sent 200)`, async () => {
    const answered: string[] = [];
    const url = await hostileRelay((socket) => {
      for (let n = 0; n < 200; n++) socket.send(JSON.stringify(['AUTH', `challenge-${n}`]));
      socket.on('message', (raw) => {
        const m = JSON.parse(String(raw)) as [string, { id: string; tags: string[][] }];
        if (m[0] !== 'AUTH') return;
        answered.push(m[1].tags.find((t) => t[0] === 'challenge')![1]!);
        socket.send(JSON.stringify(['OK', m[1].id, true, '']));
      });
    });
    const relay = relayClient(url, keyPair(generateSecretKey()));
    try {
      expect(await relay.connect()).toMatchObject({ ok: true });
      await new Promise((resolve) => setTimeout(resolve, 500));
      expect(answered).toEqual(Array.from({ length: AUTO_AUTH_PER_CONNECTION }, (_, n) => `challenge-${n}`));
    } finally {
      relay.close();
    }
  });
});
