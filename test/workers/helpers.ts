// Test helpers for in-runtime tests: real WebSocket connections to the Worker. Keys, events and the
// socket/sentinel helpers are runtime-neutral (test/support) and re-exported here for the workerd tests.

import { env, runInDurableObject, SELF } from 'cloudflare:test';
import { TestSocket } from '../support/test-socket.js';
import { SHARD_HEADER, shardStub } from '../../workers/common/shards.js';
import { EDGE_HEADER, edgeCount, edgesFromEnv, edgeStub } from '../../workers/common/edges.js';
import type { RelayShard } from '../../workers/relay-do/shard.js';

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

/** K of the shard of `owner` (null: the public shard) in this test project (RELAY_EDGES; vitest.edges.config.ts sets 4). */
/**
 * A socket on edge object `i` of the shard of `owner` (null: the public shard), opened as the router
 * opens it, from the client address `ip` when given (CF-Connecting-IP).
 */
export async function connectEdgeObject(owner: string | null, i: number, ip?: string): Promise<TestSocket> {
  const path = owner ? `/r/${owner}` : '/';
  const res = await edgeStub(env, owner, i).fetch(`${BASE}${path}`, {
    headers: { Upgrade: 'websocket', [SHARD_HEADER]: owner ?? 'public', [EDGE_HEADER]: String(i), ...(ip ? { 'CF-Connecting-IP': ip } : {}) },
  });
  if (!res.webSocket) throw new Error(`edge ${i} gave no websocket: ${res.status} ${await res.text()}`);
  res.webSocket.accept();
  return new TestSocket(res.webSocket, `ws://relay.test${path}`);
}

export function edgesOf(owner: string | null): number {
  const config = edgesFromEnv(env);
  if (!config.ok) throw new Error(config.error);
  return edgeCount(config.value, owner);
}

/** The Durable Objects that may hold the sockets of the shard of `owner`: its primary at K = 1, else its K edges. */
export function socketObjects(owner: string | null): DurableObjectStub<RelayShard>[] {
  const k = edgesOf(owner);
  return k === 1 ? [shardStub(env, owner)] : Array.from({ length: k }, (_, i) => edgeStub(env, owner, i));
}

/**
 * Closes, from the relay's side, every subscription of the connections to the shard of `owner`
 * authenticated as `pubkey`, with `message` (a CLOSED, as an edge does when live events were lost on
 * the way to a connection); how many.
 */
export async function closeSubscriptionsOf(owner: string | null, pubkey: string, message: string): Promise<number> {
  let n = 0;
  for (const shard of socketObjects(owner)) {
    n += await runInDurableObject(shard, (instance, state) => {
      // The shard's own connection table (workers/relay-do/connections.ts): each subscription goes as a close at the relay removes it.
      type Conns = { get(ws: WebSocket): { subs: Map<string, unknown> } | undefined; closeSub(conn: unknown, sid: string): void };
      const conns = (instance as unknown as { conns: Conns }).conns;
      const cids = state.storage.sql.exec<{ cid: string }>('SELECT cid FROM conn_auth WHERE pubkey = ?', pubkey).toArray().map((r) => r.cid);
      let closed = 0;
      for (const ws of state.getWebSockets()) {
        const att = ws.deserializeAttachment() as { cid: string } | null;
        const conn = att && cids.includes(att.cid) ? conns.get(ws) : undefined;
        for (const sid of conn ? [...conn.subs.keys()] : []) {
          conns.closeSub(conn, sid);
          ws.send(JSON.stringify(['CLOSED', sid, message]));
          closed++;
        }
      }
      return closed;
    });
  }
  return n;
}

/** How many subscriptions the connections to the shard of `owner` authenticated as `pubkey` hold. */
export async function subscriptionsOf(owner: string | null, pubkey: string): Promise<number> {
  let n = 0;
  for (const shard of socketObjects(owner)) {
    n += await runInDurableObject(shard, (_i, state) =>
      state.storage.sql.exec<{ n: number }>('SELECT COUNT(*) AS n FROM conn_subs WHERE cid IN (SELECT cid FROM conn_auth WHERE pubkey = ?)', pubkey).one().n,
    );
  }
  return n;
}

/** The CLOSED an edge sends a subscription that missed live events (workers/relay-do/edge-link.ts). */
export const LIVE_EVENTS_LOST = 'error: live events were lost on the way to this connection (the relay is overloaded); subscribe again';

/**
 * The Durable Object holding the sockets of the shard of `owner` (for tests that reach into the
 * object serving a connection): the primary at K = 1, else the edge the shard's connections landed
 * on (they must all be on one edge).
 */
export async function socketObject(owner: string | null): Promise<DurableObjectStub<RelayShard>> {
  const holding: DurableObjectStub<RelayShard>[] = [];
  for (const stub of socketObjects(owner)) {
    if (await runInDurableObject(stub, (_i, state) => state.getWebSockets().length > 0)) holding.push(stub);
  }
  if (holding.length !== 1) throw new Error(`the shard's sockets are on ${holding.length} objects, expected one`);
  return holding[0]!;
}
