// The progress values the dispatcher sends always increase (MCP), keep-alives included.
import { describe, expect, it } from 'vitest';
import { increasingProgress, PROGRESS_STEP } from './dispatcher.js';

describe('increasingProgress', () => {
  it('passes increasing upstream values through, total and message kept', () => {
    expect(increasingProgress({ progress: 0, total: 2 }, undefined)).toEqual({ progress: 0, total: 2 });
    expect(increasingProgress({ progress: 1, total: 2, message: 'half' }, 0)).toEqual({ progress: 1, total: 2, message: 'half' });
  });

  it('moves a repeated value (a keep-alive) a step on, and drops a total it would pass', () => {
    expect(increasingProgress({ progress: 1, total: 2, message: 'waiting' }, 1)).toEqual({ progress: 1 + PROGRESS_STEP, total: 2, message: 'waiting' });
    expect(increasingProgress({ progress: 2, total: 2 }, 2)).toEqual({ progress: 2 + PROGRESS_STEP });
    expect(increasingProgress({ progress: 0.5 }, 3)).toEqual({ progress: 3 + PROGRESS_STEP });
  });

  it('keeps a run of keep-alives strictly increasing', () => {
    let last: number | undefined;
    const sent: number[] = [];
    for (let i = 0; i < 5; i++) {
      const p = increasingProgress({ progress: 0 }, last);
      last = p.progress;
      sent.push(p.progress);
    }
    for (let i = 1; i < sent.length; i++) expect(sent[i]!).toBeGreaterThan(sent[i - 1]!);
  });
});
