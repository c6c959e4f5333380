// A NIP-01 relay that floods its subscribers, for the agent's per-relay bound on incoming events
// (test/workers/agent-relay-flood.test.ts): a `ws` server on 127.0.0.1 (random port) that sends an
// AUTH challenge on connect and accepts every AUTH and EVENT; a REQ whose filters ask for kind 25802
// addressed (#p) to a key gets EOSE, then `n` signed kind 25802 events from fresh keys p-tagging that
// key, as fast as the socket takes them; other REQs get EOSE. The connection URL's path says how:
// /<tag>/<n>[/hold] (an agent's relay URL may not carry a query string: it is published). GET
// /stats?tag=T (HTTP, same port) answers {connections, sent, done} for the connections whose path
// named tag T. With /hold the flood waits for GET /start?tag=T (so that a test can open its own
// sockets first: local workerd runs every object on one thread, flood included).

import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { finalizeEvent, generateSecretKey } from 'nostr-tools/pure';
import { WebSocketServer, type WebSocket } from 'ws';

export interface FloodRelay {
  url: string;
  close(): Promise<void>;
}

interface Stats {
  connections: number;
  sent: number;
  done: boolean;
}

/** Sends `n` fresh-key prompts to `agent` on `ws`, yielding to the event loop between batches. */
async function flood(ws: WebSocket, sub: string, agent: string, n: number, stats: Stats): Promise<void> {
  const created_at = Math.floor(Date.now() / 1000);
  for (let i = 0; i < n && ws.readyState === ws.OPEN; i++) {
    const e = finalizeEvent({ kind: 25802, created_at, tags: [['p', agent], ['encryption', 'nip44']], content: `flood ${i}` }, generateSecretKey());
    ws.send(JSON.stringify(['EVENT', sub, e]));
    stats.sent++;
    if (i % 100 === 99) await new Promise((r) => setImmediate(r));
  }
  stats.done = true;
}

export async function startFloodRelay(): Promise<FloodRelay> {
  const stats = new Map<string, Stats>();
  /** Tags whose flood may start (`hold=1` connections wait for GET /start), and the floods waiting. */
  const started = new Set<string>();
  const waiting = new Map<string, Array<() => void>>();
  const http = createServer((req, res) => {
    const url = new URL(req.url ?? '/', 'http://x');
    const tag = url.searchParams.get('tag') ?? '';
    if (url.pathname === '/start') {
      started.add(tag);
      for (const go of waiting.get(tag) ?? []) go();
      waiting.delete(tag);
    }
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(JSON.stringify(stats.get(tag) ?? { connections: 0, sent: 0, done: false }));
  });
  const wss = new WebSocketServer({ server: http });
  wss.on('connection', (ws, req) => {
    const [tag = '', count = '3000', hold] = new URL(req.url ?? '/', 'http://x').pathname.split('/').slice(1);
    const n = Number(count);
    const s = stats.get(tag) ?? { connections: 0, sent: 0, done: false };
    s.connections++;
    stats.set(tag, s);
    ws.send(JSON.stringify(['AUTH', `challenge-${Math.random().toString(36).slice(2)}`]));
    ws.on('message', (data) => {
      let msg: unknown;
      try {
        msg = JSON.parse(String(data));
      } catch {
        return;
      }
      if (!Array.isArray(msg)) return;
      if ((msg[0] === 'AUTH' || msg[0] === 'EVENT') && typeof msg[1] === 'object' && msg[1] !== null) {
        ws.send(JSON.stringify(['OK', (msg[1] as { id: string }).id, true, '']));
      } else if (msg[0] === 'REQ' && typeof msg[1] === 'string') {
        const sub = msg[1];
        ws.send(JSON.stringify(['EOSE', sub]));
        const filters = msg.slice(2) as Array<{ kinds?: number[]; '#p'?: string[] }>;
        const target = filters.find((f) => f.kinds?.includes(25802) && f['#p']?.length)?.['#p']?.[0];
        if (!target || s.done || s.sent > 0) return;
        const go = () => void flood(ws, sub, target, n, s);
        if (hold !== 'hold' || started.has(tag)) go();
        else waiting.set(tag, [...(waiting.get(tag) ?? []), go]);
      }
    });
  });
  await new Promise<void>((r) => http.listen(0, '127.0.0.1', r));
  const { port } = http.address() as AddressInfo;
  return {
    url: `ws://127.0.0.1:${port}`,
    close: async () => {
      for (const c of wss.clients) c.terminate();
      await new Promise<void>((r) => wss.close(() => r()));
      await new Promise<void>((r) => http.close(() => r()));
    },
  };
}
