import { describe, expect, it } from 'vitest';
import { SingleFlight } from './single-flight.js';

describe('SingleFlight', () => {
  it('joins a call made while a run for its key is in flight; other keys and later calls run on their own', async () => {
    const flights = new SingleFlight<string>();
    const started: string[] = [];
    let finish: () => void = () => undefined;
    const slow = (key: string) => () => {
      started.push(key);
      return new Promise<void>((resolve) => (finish = resolve));
    };
    const first = flights.run('a', slow('a'));
    const joined = flights.run('a', slow('a again'));
    expect(joined).toBe(first);
    void flights.run('b', () => (started.push('b'), Promise.resolve()));
    expect(started).toEqual(['a', 'b']);
    finish();
    await first;
    await flights.run('a', () => (started.push('a later'), Promise.resolve()));
    expect(started).toEqual(['a', 'b', 'a later']);
  });

  it('a failed run is not kept: the next call runs again', async () => {
    const flights = new SingleFlight<string>();
    await expect(flights.run('a', () => Promise.reject(new Error('auth failed')))).rejects.toThrow('auth failed');
    let ran = false;
    await flights.run('a', async () => void (ran = true));
    expect(ran).toBe(true);
  });
});
