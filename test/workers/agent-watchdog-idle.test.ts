// An idle agent costs the one Accounts object nothing: its watchdog alarm does not ask Accounts for
// the owner's account (only an admission or a run in flight does, when the copy is older than
// 30 s), and it wakes less and less often while nothing is pending (30 s doubling up to 10
// minutes), back to 30 s once a prompt arrives.
import { env, runInDurableObject } from 'cloudflare:test';
import { describe, expect, it } from 'vitest';
import type { Agent } from '../../workers/agent/agent-do.js';
import { NipXxClient, createTestAgent } from './agent-helpers.js';

const stubOf = (agent: string) => env.AGENT.get(env.AGENT.idFromName(agent));
/** The snapshot RPCs the agent made to Accounts so far (its own counter). */
const snapshots = (agent: string): Promise<number> => runInDurableObject(stubOf(agent), (i) => (i as Agent).ownerSnapshots);
/**
 * Runs the watchdog as the runtime does (the alarm that fired is no longer set while its handler
 * runs; runDurableObjectAlarm leaves it set until after) and answers the seconds until the next one.
 */
const watchdog = (agent: string): Promise<number | null> =>
  runInDurableObject(stubOf(agent), async (i, state) => {
    await state.storage.deleteAlarm();
    await (i as Agent).alarm();
    const at = await state.storage.getAlarm();
    return at === null ? null : Math.round((at - Date.now()) / 1000);
  });
const nextAlarmIn = (agent: string): Promise<number | null> =>
  runInDurableObject(stubOf(agent), async (_i, state) => {
    const at = await state.storage.getAlarm();
    return at === null ? null : Math.round((at - Date.now()) / 1000);
  });

describe('the watchdog of an idle agent', () => {
  it('asks Accounts nothing and backs off up to 10 minutes; a prompt after 30 s refreshes the account once and brings the watchdog back to 30 s', { timeout: 30_000 }, async () => {
    const agent = await createTestAgent();
    const c = await NipXxClient.open(agent);
    let clock = Date.now();
    await runInDurableObject(stubOf(agent), (i) => {
      (i as Agent).now = () => clock;
    });
    await watchdog(agent);
    const first = await snapshots(agent);
    const delays: Array<number | null> = [];
    for (let n = 0; n < 10; n++) {
      clock += 60_000;
      delays.push(await watchdog(agent));
    }
    expect(await snapshots(agent)).toBe(first);
    // Each idle pass doubles the wait (from 30 s), up to 10 minutes. The runtime may run the alarm
    // itself between two of these passes (an idle pass of its own: the wait doubles once more), so
    // each wait is at least twice the one before.
    expect(delays[0]).toBeLessThanOrEqual(240);
    for (let n = 1; n < delays.length; n++) {
      expect(delays[n]).toBeGreaterThanOrEqual(Math.min(600, 2 * delays[n - 1]!));
      expect(delays[n]).toBeLessThanOrEqual(600);
    }
    expect(delays.at(-1)).toBe(600);
    // A prompt: the copy is older than 30 s, so admission fetches it once; the watchdog is due within 30 s again.
    const p = c.prompt({ ver: 1, message: 'hello' });
    await c.send(p);
    expect((await c.collect(p.id)).terminal.kind).toBe(25803);
    expect(await snapshots(agent)).toBe(first + 1);
    expect(await nextAlarmIn(agent)).toBeLessThanOrEqual(30);
    // A second prompt within 30 s uses the copy (the run report's answer renewed it).
    const q = c.prompt({ ver: 1, message: 'again' });
    await c.send(q);
    expect((await c.collect(q.id)).terminal.kind).toBe(25803);
    expect(await snapshots(agent)).toBe(first + 1);
  });
});
