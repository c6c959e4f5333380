// @ts-check
// projectEdges: the K = 1, 4, 16, 64 projection of docs/SCALING.md from measured per-hop costs.
import { describe, expect, it } from 'vitest';
import { projectEdges } from './edges.mjs';

/** The hops of the run docs/SCALING.md shows (2026-12-02T03:08Z), rounded: c1 = 550 µs, w = 90, r = 1.4, s = 42. */
const hops = {
  verifyUs: 396,
  rpcMs: { 64: 0.0896 },
  edgeBatchMs: { 64: 0.0896 + 5.76 },
  storeUs: 34,
  socketUs: 1,
  sockets: 500,
  sizes: [64],
  rounds: 10,
  ingestPerSecond: 1796,
  ingestPerCpuSecond: 1e6 / 550,
  subscriberCpuUs: 42,
};

describe('projectEdges', () => {
  const byK = new Map(projectEdges(hops).map((p) => [p.k, p]));

  it('K = 1 is the one object: ingest 1/c1, a fan-out to S subscribers 1/(c1 + S·s), a targeted event 1/(c1 + s)', () => {
    const one = byK.get(1);
    expect(one?.ingest).toBeCloseTo(1e6 / 550, 6);
    expect(one?.fanout[1000]?.events).toBeCloseTo(1e6 / (550 + 1000 * 42), 6);
    expect(one?.fanout[1000]?.deliveries).toBeCloseTo((1e6 / (550 + 1000 * 42)) * 1000, 3);
    expect(one?.targeted).toEqual({ events: 1e6 / (550 + 42), bound: 'the one object' });
  });

  it('K > 1: ingest grows with K until the primary write path bounds it; targeted events cost the primary one delivery each', () => {
    const r = 1.4;
    const x = 550 - 90;
    expect(byK.get(4)?.ingest).toBeCloseTo((4 * 1e6) / (x + r), 3);
    expect(byK.get(4)?.bound).toBe('the edges');
    expect(byK.get(16)?.ingest).toBeCloseTo(1e6 / (90 + r), 3);
    expect(byK.get(16)?.bound).toBe('the primary');
    // ~7,920 events/s at K = 4 and ~10,780 at K = 16 and 64, as SCALING.md worked out by hand before.
    expect(byK.get(4)?.targeted.events).toBeCloseTo((4 * 1e6) / (x + 2 * r + 42), 3);
    expect(Math.round((byK.get(4)?.targeted.events ?? 0) / 10) * 10).toBe(7920);
    expect(byK.get(4)?.targeted.bound).toBe('the edges');
    for (const k of [16, 64]) {
      expect(byK.get(k)?.targeted.events).toBeCloseTo(1e6 / (90 + 2 * r), 3);
      expect(byK.get(k)?.targeted.bound).toBe('the primary');
    }
    // Every event to every edge: at K = 64 the primary's 64 deliveries per event are part of its bound.
    expect(byK.get(64)?.fanout[1000]?.events).toBeCloseTo(Math.min((64 * 1e6) / (x + r + 64 * r + 1000 * 42), 1e6 / (90 + r + 64 * r)), 3);
  });
});
