// Test helpers for in-runtime tests: real WebSocket connections to the Worker. Keys, events and the
// socket/sentinel helpers are runtime-neutral (test/support) and re-exported here for the workerd tests.

import { SELF } from 'cloudflare:test';
import { TestSocket } from '../support/test-socket.js';

export * from '../support/nostr.js';
export * from '../support/test-socket.js';

export const BASE = 'http://relay.test';

export async function connect(path = '/', headers: Record<string, string> = {}): Promise<TestSocket> {
  const res = await SELF.fetch(`${BASE}${path}`, { headers: { Upgrade: 'websocket', ...headers } });
  const ws = res.webSocket;
  if (!ws) throw new Error(`no websocket: ${res.status} ${await res.text()}`);
  ws.accept();
  const sock = new TestSocket(ws, `ws://relay.test${path}`);
  // The relay sends its NIP-42 challenge lazily; ask for it, so that `challenge` is known at once.
  sock.send(['AUTH']);
  await sock.next((f) => f[0] === 'AUTH').then((f) => sock.frames.unshift(f));
  return sock;
}
