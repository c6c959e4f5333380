// The WebSocket layer as any client sees it, with a bare `ws` socket against `wrangler dev`:
// the close handshake (RFC 6455 §5.5.1: the relay answers a client's close frame with the same
// code), `["PING"]` keep-alives answered quietly, and the NIP-42 challenge sent only when needed.
import { afterEach, describe, expect, inject, it } from 'vitest';
import WebSocket from 'ws';

const relayUrl = inject('relayUrl');
const httpUrl = inject('httpUrl');
const sockets: WebSocket[] = [];
afterEach(() => {
  for (const ws of sockets.splice(0)) ws.terminate();
});

interface Opened {
  ws: WebSocket;
  frames: unknown[][];
  /** Resolves with the first frame (already received or still to come) matching `pred`. */
  next: (pred: (f: unknown[]) => boolean) => Promise<unknown[]>;
}

async function open(path: string): Promise<Opened> {
  const ws = new WebSocket(`${relayUrl}${path}`);
  sockets.push(ws);
  const frames: unknown[][] = [];
  const waiters: Array<() => void> = [];
  ws.on('message', (data) => {
    frames.push(JSON.parse(String(data)) as unknown[]);
    for (const w of waiters.splice(0)) w();
  });
  await new Promise<void>((resolve, reject) => {
    ws.once('open', () => resolve());
    ws.once('error', reject);
  });
  const next = async (pred: (f: unknown[]) => boolean): Promise<unknown[]> => {
    for (;;) {
      const found = frames.find(pred);
      if (found) return found;
      await new Promise<void>((r) => waiters.push(r));
    }
  };
  return { ws, frames, next };
}

/** Closes from the client side; resolves with what the client's close event reports. */
function closeFromClient(ws: WebSocket, code: number, reason: string): Promise<{ code: number; reason: string }> {
  return new Promise((resolve) => {
    ws.once('close', (c, r) => resolve({ code: c, reason: r.toString() }));
    ws.close(code, reason);
  });
}

async function demoOwner(): Promise<string> {
  const health = (await (await fetch(`${httpUrl}/health`)).json()) as { demo: { owner: string } };
  return health.demo.owner;
}

describe('the WebSocket layer seen by a plain client', () => {
  // `ws` waits 30 s for the peer's close frame and then reports 1006; the test timeout is shorter,
  // so a relay that does not answer fails here either way.
  it.each([['the public shard', 'public'], ['an owner shard', 'owner']])(
    'answers a close frame at once with the client’s code on %s',
    async (_, which) => {
      const path = which === 'public' ? '/' : `/r/${await demoOwner()}`;
      const a = await open(path);
      expect(await closeFromClient(a.ws, 1000, 'bye')).toEqual({ code: 1000, reason: 'bye' });
      const b = await open(path);
      expect(await closeFromClient(b.ws, 4001, 'app specific')).toEqual({ code: 4001, reason: 'app specific' });
    },
    20_000,
  );

  it('answers ["PING"] with nothing: the next frame is the answer to the sentinel REQ', async () => {
    const s = await open('/');
    s.ws.send('["PING"]');
    s.ws.send(JSON.stringify(['REQ', 'sentinel', { ids: ['0'.repeat(64)] }]));
    await s.next((f) => f[0] === 'EOSE' && f[1] === 'sentinel');
    expect(s.frames).toEqual([['EOSE', 'sentinel']]);
  });
});
