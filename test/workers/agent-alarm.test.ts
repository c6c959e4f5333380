// The Agent's alarm is its watchdog (reconnect, orphaned runs, the owner's account, retention) and
// also how create() and update() ask for a prompt (re)connection. An update that lands while the
// alarm runs must keep its near wake-up: the alarm reschedules itself no later than the watchdog,
// never over an earlier alarm.
import { env, runInDurableObject } from 'cloudflare:test';
import { describe, expect, it } from 'vitest';
import { agentStub } from '../../workers/api/agents.js';
import type { Agent } from '../../workers/agent/agent-do.js';
import { agentInfo, createTestAgent } from './agent-helpers.js';

describe('agent alarm', () => {
  it('keeps an earlier alarm set while it ran (an update asking to reconnect) instead of pushing it to the watchdog', async () => {
    const agent = await createTestAgent();
    expect(await agentInfo(agent)).toBeDefined(); // connected and announced
    const stub = agentStub(env, agent);
    const { soon, after } = await runInDurableObject(stub, async (i, state) => {
      const instance = i as Agent;
      const soon = Date.now() + 50;
      await state.storage.setAlarm(soon); // what update() does while the alarm below is running
      await instance.alarm();
      return { soon, after: await state.storage.getAlarm() };
    });
    expect(after).toBe(soon);
  });

  it('with no other alarm set, comes back at the watchdog (an idle agent: 30 s after its first pass, 60 s after its second; which this one is depends on whether the runtime ran the alarm create() set first: agent-watchdog-idle.test.ts checks the doubling)', async () => {
    const agent = await createTestAgent();
    expect(await agentInfo(agent)).toBeDefined();
    const stub = agentStub(env, agent);
    const { before, after } = await runInDurableObject(stub, async (i, state) => {
      const instance = i as Agent;
      await state.storage.deleteAlarm();
      const before = Date.now();
      await instance.alarm();
      return { before, after: await state.storage.getAlarm() };
    });
    expect(after).toBeGreaterThanOrEqual(before + 30_000);
    expect(after).toBeLessThan(Date.now() + 60_000 + 1000);
  });
});
