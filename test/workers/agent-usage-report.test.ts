// A finished run's report to the owner's plan aggregate (the Accounts DO) is not lost: the agent
// keeps each run's row unreported until Accounts took it, the watchdog alarm sends the unreported
// ones again, and Accounts counts a run once however often it is sent (by agent and run id).
// Deleting the agent sends them first: a deletion while Accounts fails is refused (the owner is told
// to send it again) rather than erase spend the owner's plan never counted.
import { env, runDurableObjectAlarm } from 'cloudflare:test';
import { describe, expect, it } from 'vitest';
import { accountsStub, type UsageRow } from '../../workers/accounts/accounts-do.js';
import { NipXxClient, createTestAgent } from './agent-helpers.js';
import { holdObject } from './hold-object.js';
import { TEST_OWNER } from './test-keys.js';

const stubOf = (agent: string) => env.AGENT.get(env.AGENT.idFromName(agent));
const today = (): string => new Date().toISOString().slice(0, 10);
/** The agent's runs as the owner's aggregate has them (GET /api/usage's figures). */
const aggregated = async (agent: string): Promise<Pick<UsageRow, 'runs' | 'input_tokens' | 'output_tokens'> | undefined> => {
  const answer = await accountsStub(env).usage({ caller: TEST_OWNER, owner: TEST_OWNER, from: today(), to: today(), by: 'agent' }, Date.now());
  const row = answer.ok ? answer.value.rows.find((r) => r.key === agent) : undefined;
  return row && { runs: row.runs, input_tokens: row.input_tokens, output_tokens: row.output_tokens };
};
/** The agent's own metering, summed. */
const own = async (agent: string): Promise<{ runs: number; input_tokens: number; output_tokens: number }> => {
  const rows = await stubOf(agent).usage();
  return { runs: rows.length, input_tokens: rows.reduce((s, r) => s + r.input_tokens, 0), output_tokens: rows.reduce((s, r) => s + r.output_tokens, 0) };
};

describe('the run report to the owner’s plan', () => {
  it('a report that fails (the Accounts object resets while it is queued) is sent again by the watchdog, and counted once', { timeout: 30_000 }, async () => {
    const agent = await createTestAgent();
    const c = await NipXxClient.open(agent);
    const warm = c.prompt({ ver: 1, message: 'warm' });
    await c.send(warm);
    expect((await c.collect(warm.id)).terminal.kind).toBe(25803);
    // The Accounts object holds its input gate while the next run ends, then resets: the report queued behind the gate fails.
    const p = c.prompt({ ver: 1, message: 'lost report' });
    const release = await holdObject(accountsStub(env));
    await c.send(p);
    await c.collect(p.id);
    await new Promise((r) => setTimeout(r, 200));
    await release(new Error('simulated Accounts reset'));
    await new Promise((r) => setTimeout(r, 200));
    expect(await own(agent)).toMatchObject({ runs: 2 });
    expect((await aggregated(agent))?.runs).toBe(1);
    await runDurableObjectAlarm(stubOf(agent));
    expect(await aggregated(agent)).toEqual(await own(agent));
    await runDurableObjectAlarm(stubOf(agent));
    expect(await aggregated(agent)).toEqual(await own(agent));
  });

  it('Accounts counts a run sent twice once', async () => {
    const agent = await createTestAgent();
    const stub = accountsStub(env);
    const run = { owner: TEST_OWNER, agent, run_id: 'a'.repeat(64), sender: TEST_OWNER, model: 'echo', at: Date.now(), input_tokens: 3, output_tokens: 4, tool_calls: 0, error: false };
    await stub.record(run);
    await stub.record(run);
    expect(await aggregated(agent)).toEqual({ runs: 1, input_tokens: 3, output_tokens: 4 });
  });

  it('deleting the agent sends its unreported runs first; while Accounts fails the deletion is refused, the agent kept, and a second deletion records them and removes it', { timeout: 30_000 }, async () => {
    const agent = await createTestAgent();
    const c = await NipXxClient.open(agent);
    // A run whose report fails (Accounts resets while it is queued): its row stays unreported.
    const p = c.prompt({ ver: 1, message: 'lost report' });
    const lost = await holdObject(accountsStub(env));
    await c.send(p);
    await c.collect(p.id);
    await new Promise((r) => setTimeout(r, 200));
    await lost(new Error('simulated Accounts reset'));
    await new Promise((r) => setTimeout(r, 200));
    expect(await own(agent)).toMatchObject({ runs: 1 });
    expect(await aggregated(agent)).toBeUndefined();
    // The deletion while Accounts fails again: refused with the reason, nothing forgotten.
    const failing = await holdObject(accountsStub(env));
    const removal = stubOf(agent)
      .remove()
      .then(
        (held) => `resolved ${held}`,
        (e: Error) => e.message,
      );
    await new Promise((r) => setTimeout(r, 300));
    await failing(new Error('simulated Accounts reset'));
    expect(await removal).toBe('the agent’s usage of its last runs could not be recorded yet (simulated Accounts reset); send DELETE again');
    expect((await stubOf(agent).view())?.pubkey).toBe(agent);
    expect(await own(agent)).toMatchObject({ runs: 1 });
    // Sent again: the run reaches the owner's plan, then the agent is removed.
    const spent = await own(agent);
    expect(await stubOf(agent).remove()).toBe(true);
    expect(await aggregated(agent)).toEqual(spent);
    expect(await stubOf(agent).view()).toBeUndefined();
    expect(await stubOf(agent).usage()).toEqual([]);
  });
});
