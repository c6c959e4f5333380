import { describe, expect, it } from 'vitest';
import { IN_FLIGHT_MAX_AGE_MS, InFlightTokens } from './in-flight.js';

const T = Date.parse('2026-12-01T12:00:00Z');

describe('InFlightTokens', () => {
  it('answers the sum of the owner’s other agents’ figures: never the asker’s own, never another owner’s', () => {
    const f = new InFlightTokens();
    f.set('owner1', { agent: 'a', tokens: 500 }, T);
    f.set('owner1', { agent: 'b', tokens: 300 }, T);
    f.set('owner2', { agent: 'c', tokens: 7000 }, T);
    expect(f.others('owner1', T, 'a')).toBe(300);
    expect(f.others('owner1', T, 'b')).toBe(500);
    expect(f.others('owner1', T)).toBe(800);
    expect(f.others('owner3', T)).toBe(0);
  });

  it('keeps an agent’s latest figure: a later one replaces it (its runs ended: 0), one sent earlier is ignored', () => {
    const f = new InFlightTokens();
    f.set('owner', { agent: 'a', tokens: 500 }, T);
    f.set('owner', { agent: 'a', tokens: 0 }, T + 1_000);
    expect(f.others('owner', T + 1_000)).toBe(0);
    // A figure taken before the run's report, delivered after it, would count the run twice.
    f.set('owner', { agent: 'a', tokens: 500 }, T + 500);
    expect(f.others('owner', T + 1_000)).toBe(0);
  });

  it('counts a figure IN_FLIGHT_MAX_AGE_MS after it was sent, no longer', () => {
    const f = new InFlightTokens();
    f.set('owner', { agent: 'a', tokens: 500 }, T);
    expect(f.others('owner', T + IN_FLIGHT_MAX_AGE_MS)).toBe(500);
    expect(f.others('owner', T + IN_FLIGHT_MAX_AGE_MS + 1)).toBe(0);
  });

  it('forgets the figures that no longer count: it holds the agents that told one in the last two periods at most', () => {
    const f = new InFlightTokens();
    for (let i = 0; i < 1_000; i++) f.set(`owner${i}`, { agent: `agent${i}`, tokens: 1 }, T);
    expect(f.size).toBe(1_000);
    f.set('owner', { agent: 'a', tokens: 1 }, T + IN_FLIGHT_MAX_AGE_MS + 1);
    expect(f.size).toBe(1);
  });
});
