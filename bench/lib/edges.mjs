// @ts-check
// The per-hop costs of a shard split into K edge objects (docs/SCALING.md), measured inside workerd
// (bench/workerd/entry.ts, /__bench/hops and /__bench/sockets), and the ingest and fan-out they
// project for K = 1, 4, 16, 64. One local workerd runs every object on one thread, so K > 1 cannot
// be measured here as a gain: the projection assumes each edge object gets its own thread (as
// Durable Objects do on Cloudflare) and that the costs measured here hold per object.

import { closeSockets, nowSeconds, openSockets, postJson, randomHex } from './client.mjs';

/**
 * @typedef {import('./client.mjs').NostrEvent} NostrEvent
 * @typedef {{ verifyUs: number, rpcMs: Record<string, number>, edgeBatchMs: Record<string, number>, storeUs: number,
 *   socketUs: number, sockets: number, sizes: number[], rounds: number } & Baseline} Hops
 * @typedef {{ ingestPerSecond: number, ingestPerCpuSecond: number, subscriberCpuUs: number }} Baseline what the same pass
 *   measured of one object (K = 1): ingest over the wire, ingest per workerd CPU-second, workerd CPU per additional subscriber
 * @typedef {{ k: number, ingest: number, bound: string, fanout: Record<string, { events: number, deliveries: number, bound: string }>,
 *   targeted: { events: number, bound: string } }} Projection
 */

/**
 * Measures the hops: `sizes` batch sizes, `rounds` calls each, `subscribers` sockets for the socket write.
 * `baseline` is what the same pass measured of one object (verifyAndIngest, fanout), which the projection starts from.
 * @param {{ httpUrl: string, wsUrl: string, signer: { sign(t: import('./client.mjs').EventTemplate): NostrEvent },
 *   log: (s: string) => void, deadline: import('./client.mjs').Deadline, sizes: number[], rounds: number, subscribers: number,
 *   socketRounds: number, baseline: Baseline }} o
 * @returns {Promise<Hops>}
 */
export async function edgeHops(o) {
  const needed = (o.rounds + 1) * o.sizes.reduce((a, b) => a + b, 0);
  o.log(`  signing ${needed} events for the edge hops (not timed)…`);
  const created = nowSeconds();
  const events = Array.from({ length: needed }, (_, i) => o.signer.sign({ kind: 1, created_at: created, tags: [], content: `hop ${i} ${randomHex(8)}` }));
  const hops = /** @type {{ verifyUs: number, rpcMs: Record<string, number>, edgeBatchMs: Record<string, number>, storeUs: number }} */ (
    await postJson(`${o.httpUrl}/__bench/hops`, { events, sizes: o.sizes, rounds: o.rounds })
  );
  o.deadline.check();
  o.log(`  opening ${o.subscribers} sockets for the socket write…`);
  const sockets = await openSockets(`${o.wsUrl}/`, o.subscribers, o.deadline);
  try {
    const probe = o.signer.sign({ kind: 1, created_at: created, tags: [], content: `socket write ${randomHex(8)}` });
    const w = /** @type {{ sockets: number, usPerSend: number }} */ (await postJson(`${o.httpUrl}/__bench/sockets`, { event: probe, rounds: o.socketRounds }));
    if (w.sockets < o.subscribers) throw new Error(`the shard holds ${w.sockets} sockets, expected at least ${o.subscribers}`);
    return { ...hops, socketUs: w.usPerSend, sockets: w.sockets, sizes: o.sizes, rounds: o.rounds, ...o.baseline };
  } finally {
    await closeSockets(sockets);
  }
}

/** The batch size the projection assumes (events per edge → primary RPC and per primary → edge delivery). */
export const PROJECTION_BATCH = 64;
export const PROJECTED_K = [1, 4, 16, 64];
export const PROJECTED_SUBSCRIBERS = [1_000, 10_000];

/**
 * Ingest and fan-out projected from the hops (µs per event unless named otherwise):
 * - c1 = 1e6 / K = 1 ingest per workerd CPU-second: everything one object does per event (parse,
 *   verify, write, OK), without the load of the Node client sharing this machine;
 * - w = (edgeBatch(b) − rpc(b)) / b: the primary's write path per event (policy, store, answer);
 * - x = c1 − w: the socket side of an event (parse, id + signature, OK frame), which moves to the edges;
 * - r = rpc(b) / b: one RPC's share per event (its round trip on one thread: both ends);
 * - s: one subscriber's share of a fan-out: the workerd CPU per additional subscriber measured by the
 *   fan-out scenario (the runtime's own socket work included), or the JS send timed inside the DO if larger.
 * K = 1: ingest 1/c1, fan-out to S subscribers 1/(c1 + S·s).
 * K > 1: each edge does x + r per event it ingests and r + (S/K)·s per event it delivers; the
 * primary does w + r per event plus r per listening edge (one delivery batch per edge). Ingest =
 * min(K/(x + r), 1/(w + r)); fan-out = min(K/(x + r + K·r + S·s), 1/(w + r + K·r)).
 * Targeted events (each matches one subscriber, on one edge: a DM, a gift wrap for one `#p`; the
 * primary sends it to that edge alone): K = 1 1/(c1 + s); K > 1 min(K/(x + 2r + s), 1/(w + 2r)).
 * @param {Hops} h @returns {Projection[]}
 */
export function projectEdges(h) {
  const b = String(PROJECTION_BATCH);
  const c1 = 1e6 / h.ingestPerCpuSecond;
  const w = ((h.edgeBatchMs[b] ?? NaN) - (h.rpcMs[b] ?? NaN)) * 1000 / PROJECTION_BATCH;
  const r = ((h.rpcMs[b] ?? NaN) * 1000) / PROJECTION_BATCH;
  const x = Math.max(c1 - w, h.verifyUs);
  const s = Math.max(h.socketUs, h.subscriberCpuUs);
  return PROJECTED_K.map((k) => {
    /** @type {Projection['fanout']} */
    const fanout = {};
    if (k === 1) {
      for (const n of PROJECTED_SUBSCRIBERS) {
        const events = 1e6 / (c1 + n * s);
        fanout[n] = { events, deliveries: events * n, bound: 'the one object' };
      }
      return { k, ingest: 1e6 / c1, bound: 'the one object', fanout, targeted: { events: 1e6 / (c1 + s), bound: 'the one object' } };
    }
    const edges = (k * 1e6) / (x + r);
    const primary = 1e6 / (w + r);
    for (const n of PROJECTED_SUBSCRIBERS) {
      const atEdges = (k * 1e6) / (x + r + k * r + n * s);
      const atPrimary = 1e6 / (w + r + k * r);
      const events = Math.min(atEdges, atPrimary);
      fanout[n] = { events, deliveries: events * n, bound: atEdges < atPrimary ? 'the edges' : 'the primary' };
    }
    const targetedAtEdges = (k * 1e6) / (x + 2 * r + s);
    const targetedAtPrimary = 1e6 / (w + 2 * r);
    const targeted = {
      events: Math.min(targetedAtEdges, targetedAtPrimary),
      bound: targetedAtEdges < targetedAtPrimary ? 'the edges' : 'the primary',
    };
    return { k, ingest: Math.min(edges, primary), bound: edges < primary ? 'the edges' : 'the primary', fanout, targeted };
  });
}
