import { afterEach, describe, expect, it, vi } from 'vitest';
import { IngestQueue, type BatchSettings } from './ingest-queue.js';

/** A queue whose batches are recorded, and the failures the timer's flushes reported. */
function recording(settings: BatchSettings) {
  const batches: number[][] = [];
  const reported: unknown[] = [];
  const queue = new IngestQueue<number>(settings, async (b) => void batches.push(b), (e) => reported.push(e));
  return { queue, batches, reported };
}

describe('IngestQueue', () => {
  afterEach(() => {
    vi.useRealTimers();
  });

  it('flushes when it holds max items, in arrival order, and starts over', () => {
    vi.useFakeTimers();
    const { queue, batches } = recording({ max: 3, windowMs: 1000 });
    for (const n of [1, 2]) expect(queue.push(n)).toBeUndefined();
    expect(batches).toEqual([]);
    expect(queue.push(3)).toBeInstanceOf(Promise);
    expect(batches).toEqual([[1, 2, 3]]);
    queue.push(4);
    expect(queue.size).toBe(1);
  });

  it('flushes after the window, counted from the first queued item', () => {
    vi.useFakeTimers();
    const { queue, batches } = recording({ max: 64, windowMs: 5 });
    queue.push(1);
    vi.advanceTimersByTime(3);
    queue.push(2);
    vi.advanceTimersByTime(1);
    expect(batches).toEqual([]);
    vi.advanceTimersByTime(1);
    expect(batches).toEqual([[1, 2]]);
    vi.advanceTimersByTime(100);
    expect(batches).toEqual([[1, 2]]);
  });

  it('an explicit flush hands over what is queued and cancels the timer', () => {
    vi.useFakeTimers();
    const { queue, batches } = recording({ max: 64, windowMs: 5 });
    queue.push(1);
    void queue.flush();
    expect(batches).toEqual([[1]]);
    vi.advanceTimersByTime(10);
    expect(batches).toEqual([[1]]);
    void queue.flush();
    expect(batches).toEqual([[1]]);
  });

  it.each([
    { max: 1, windowMs: 5 },
    { max: 64, windowMs: 0 },
  ])('does not batch with %o', (settings) => {
    const { queue, batches } = recording(settings);
    queue.push(1);
    queue.push(2);
    expect(batches).toEqual([[1], [2]]);
  });

  it('reports the failure of a batch flushed by the timer', async () => {
    vi.useFakeTimers();
    const reported: unknown[] = [];
    const queue = new IngestQueue<number>({ max: 64, windowMs: 2 }, () => Promise.reject(new Error('boom')), (e) => reported.push(e));
    queue.push(1);
    await vi.advanceTimersByTimeAsync(2);
    expect(reported).toEqual([new Error('boom')]);
  });
});
