// The usage summary's period (usage.ts usagePeriod): an answer the API cut (more run rows than one
// query reads, workers/accounts/accounts-do.ts MAX_USAGE_SCAN) says through which day it counts.
import { describe, expect, it } from 'vitest';
import { usagePeriod, usageRowLabel } from './usage.js';

describe('usagePeriod', () => {
  it('is the last 30 days for a whole answer', () => {
    expect(usagePeriod({ rows: [] })).toBe('last 30 days');
  });
  it('names the last day counted when the answer was cut', () => {
    expect(usagePeriod({ rows: [], truncated: true, through: '2026-11-20' })).toBe(
      'last 30 days, counted through 2026-11-20 only (more runs than one query reads; later days left out)',
    );
  });
});

describe('usageRowLabel', () => {
  it('names an agent by its name, and the row of runs summed past the row limits as such', () => {
    const names = (pk: string) => `agent ${pk.slice(0, 4)}`;
    expect(usageRowLabel('ab'.repeat(32), names)).toBe('agent abab');
    expect(usageRowLabel('others', names)).toBe('others (runs summed past the day’s row limits)');
  });
});
