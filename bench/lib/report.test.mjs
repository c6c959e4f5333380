// @ts-check
// previousFigures: what a bench run reads back from the report it replaces.
import { describe, expect, it } from 'vitest';
import { previousFigures } from './report.mjs';

const report = `# Benchmarks

Written by \`npm run bench\` (bench/run.mjs); every number below comes from the run of
2026-12-02T03:08:10.898Z. Performance is never asserted in tests, only measured here.

## Results

| metric | value | previous run (2026-12-01T19:00:00.000Z) | target | met | measured at |
| --- | --- | --- | --- | --- | --- |
| **Ingest ÷ raw verification** (median of per-round ratios), disk | **63 %** | **71 %** | ≥ 85 % | **no** |  |
| Memory per subscription | 3,095 bytes | — |  |  | /proc |

Context:

| measurement | value | measured at |
| --- | --- | --- |
| disk: ingest of ephemeral kind 20001 | 2,492 events/s | client (Node) |

| hop | cost |
| --- | --- |
| EventStore insert, per event | 34 µs |
`;

describe('previousFigures', () => {
  it("reads the run's date and the value of each Results and per-hop row, not the previous column or the context table", () => {
    const { date, values } = previousFigures(report);
    expect(date).toBe('2026-12-02T03:08:10.898Z');
    expect([...values]).toEqual([
      ['**Ingest ÷ raw verification** (median of per-round ratios), disk', '**63 %**'],
      ['Memory per subscription', '3,095 bytes'],
      ['EventStore insert, per event', '34 µs'],
    ]);
  });

  it('gives nothing to compare with for a file that is not a report', () => {
    expect(previousFigures('# Notes\n\n| a | b |\n| --- | --- |\n| x | y |\n')).toEqual({ date: 'unknown date', values: new Map() });
  });
});
