// Which edge a connection lands on: one edge per client address, spread evenly; random without one.
import { describe, expect, it } from 'vitest';
import { pickEdge } from '../../workers/common/edges.js';

describe('pickEdge', () => {
  it('every connection of one address lands on the same edge', () => {
    for (const address of ['192.0.2.1', '2001:db8:1:2::/64', '198.51.100.77']) {
      const edges = new Set(Array.from({ length: 50 }, () => pickEdge(4, address)));
      expect(edges.size).toBe(1);
    }
  });

  it('addresses spread over the edges (4,000 addresses on 4 edges: each within 10 % of 1,000)', () => {
    const counts = [0, 0, 0, 0];
    for (let i = 0; i < 4000; i++) counts[pickEdge(4, `10.${(i >> 8) & 255}.${i & 255}.${i % 7}`)]! += 1;
    for (const n of counts) expect(Math.abs(n - 1000)).toBeLessThan(100);
  });

  it('without an address, connections spread at random over every edge', () => {
    const edges = new Set(Array.from({ length: 200 }, () => pickEdge(4)));
    expect([...edges].sort()).toEqual([0, 1, 2, 3]);
  });

  it('K = 1 is edge 0', () => expect(pickEdge(1, '192.0.2.1')).toBe(0));
});
