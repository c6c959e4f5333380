// Which edge a connection lands on: one edge per client address, spread evenly; random without one;
// under a key of the deployment's secret, so that nobody without it can pick addresses that share
// a victim's edge.
import { describe, expect, it } from 'vitest';
import { pickEdge, placementKey } from '../../workers/common/edges.js';

const key = placementKey({ EDGESTR_SECRET: 'edgestr-test-secret-0123456789' });

describe('pickEdge', () => {
  it('every connection of one address lands on the same edge', () => {
    for (const address of ['192.0.2.1', '2001:db8:1:2::/64', '198.51.100.77']) {
      const edges = new Set(Array.from({ length: 50 }, () => pickEdge(4, key, address)));
      expect(edges.size).toBe(1);
    }
  });

  it('addresses spread over the edges (4,000 addresses on 4 edges: each within 15 % of 1,000, over 5 standard deviations of a uniform pick)', () => {
    for (const secret of ['edgestr-test-secret-0123456789', 'another-deployment-secret-9876', 'a third secret of sixteen+']) {
      const counts = [0, 0, 0, 0];
      for (let i = 0; i < 4000; i++) counts[pickEdge(4, placementKey({ EDGESTR_SECRET: secret }), `10.${(i >> 8) & 255}.${i & 255}.${i % 7}`)]! += 1;
      for (const n of counts) expect(Math.abs(n - 1000)).toBeLessThan(150);
    }
  });

  it('without an address, connections spread at random over every edge', () => {
    const edges = new Set(Array.from({ length: 200 }, () => pickEdge(4, key)));
    expect([...edges].sort()).toEqual([0, 1, 2, 3]);
  });

  it('K = 1 is edge 0', () => expect(pickEdge(1, key, '192.0.2.1')).toBe(0));

  it('the edge of an address, an owner or a component depends on the deployment secret: one who knows the names but not the secret cannot tell which share an edge', () => {
    const other = placementKey({ EDGESTR_SECRET: 'another-deployment-secret-9876' });
    const names = [...Array.from({ length: 100 }, (_, i) => `203.0.113.${i}`), ...Array.from({ length: 100 }, (_, i) => `owner:${i.toString(16).padStart(64, '0')}`)];
    const under = (k: Uint8Array) => names.map((n) => pickEdge(16, k, n));
    // The same secret places the same way (every isolate agrees); another places about 15 in 16 elsewhere.
    const placed = under(key);
    expect(under(placementKey({ EDGESTR_SECRET: 'edgestr-test-secret-0123456789' }))).toEqual(placed);
    const elsewhere = under(other);
    expect(placed.filter((edge, i) => edge === elsewhere[i]).length).toBeLessThan(40);
    // The plain hash of the name (FNV-1a, what placed them before) does not predict it either.
    const fnv = (s: string) => {
      let h = 0x811c9dc5;
      for (let i = 0; i < s.length; i++) h = Math.imul(h ^ s.charCodeAt(i), 0x01000193) >>> 0;
      return h % 16;
    };
    expect(names.filter((n, i) => fnv(n) === placed[i]).length).toBeLessThan(40);
  });
});
