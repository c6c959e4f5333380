import { describe, expect, it } from 'vitest';
import { RESERVATION_MARGIN_MS, RunReservations } from './run-reservations.js';

const T = Date.parse('2026-12-01T12:00:00Z');
const until = T + 120_000 + RESERVATION_MARGIN_MS;

describe('RunReservations', () => {
  it('counts the runs every agent of the owner reserved, never another owner’s; a report ends its own run’s only', () => {
    const r = new RunReservations();
    r.add({ owner: 'owner1', agent: 'a', run: 'r1', until }, T);
    r.add({ owner: 'owner1', agent: 'b', run: 'r1', until }, T);
    r.add({ owner: 'owner2', agent: 'c', run: 'r2', until }, T);
    expect(r.count('owner1', T)).toBe(2);
    expect(r.count('owner2', T)).toBe(1);
    expect(r.count('owner3', T)).toBe(0);
    // Agent a's report of r1: b's run of the same id (another agent) still counts.
    r.release('owner1', 'a', 'r1');
    expect(r.count('owner1', T)).toBe(1);
    r.release('owner1', 'a', 'r1');
    expect(r.count('owner1', T)).toBe(1);
    r.release('owner1', 'b', 'r1');
    expect(r.count('owner1', T)).toBe(0);
    expect(r.size).toBe(1);
  });

  it('a run never reported counts until its expiry, no longer', () => {
    const r = new RunReservations();
    r.add({ owner: 'owner', agent: 'a', run: 'r', until }, T);
    expect(r.count('owner', until - 1)).toBe(1);
    expect(r.count('owner', until)).toBe(0);
  });

  it('forgets the expired ones: past RESERVATION_MARGIN_MS since the last sweep, the next reservation sweeps them', () => {
    const r = new RunReservations();
    for (let i = 0; i < 1_000; i++) r.add({ owner: `owner${i}`, agent: `agent${i}`, run: 'r', until: T + 1 }, T);
    expect(r.size).toBe(1_000);
    r.add({ owner: 'owner', agent: 'a', run: 'r', until }, T + RESERVATION_MARGIN_MS);
    expect(r.size).toBe(1);
  });
});
