// Deleting an agent (Agent.remove) while a prompt waits for the owner's account: once the deletion
// has begun no run starts — the prompt is checked again after that wait, before its admission — so
// no model is called and nothing runs under the tables the deletion empties. A run in progress when
// the agent is deleted ends with UNAUTHORIZED "this agent was removed from this deployment", not
// the CANCELLED its client would take for its own cancel.
import { env, runInDurableObject } from 'cloudflare:test';
import { inject } from 'vitest';
import { describe, expect, it } from 'vitest';
import { AGENT_REMOVED, type Agent } from '../../workers/agent/agent-do.js';
import { accountsStub } from '../../workers/accounts/accounts-do.js';
import { NipXxClient, createTestAgent } from './agent-helpers.js';
import { holdObject, pauseObject } from './hold-object.js';

const fake = inject('fakeProviderUrl');
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const stubOf = (agent: string) => env.AGENT.get(env.AGENT.idFromName(agent));
const snapshots = (agent: string): Promise<number> => runInDurableObject(stubOf(agent), (i) => (i as Agent).ownerSnapshots);
/** The requests the fake provider got whose body holds `marker`. */
const providerCalls = async (marker: string): Promise<number> => ((await (await fetch(`${fake}/_requests?contains=${encodeURIComponent(marker)}`)).json()) as unknown[]).length;

describe('a prompt waiting for the owner’s account when the agent is deleted', () => {
  it('is not run: no terminal event, no model call, and the deletion completes', { timeout: 30_000 }, async () => {
    const agent = await createTestAgent({ provider: 'openai', models: ['gpt-test'], default_model: 'gpt-test' });
    const c = await NipXxClient.open(agent);
    // A run whose report fails (Accounts resets while it is queued): the deletion will send it first, and wait for Accounts.
    const first = c.prompt({ ver: 1, message: 'scenario:text first' });
    const lost = await holdObject(accountsStub(env));
    await c.send(first);
    expect((await c.collect(first.id)).terminal.kind).toBe(25803);
    await sleep(200);
    await lost(new Error('simulated Accounts reset'));
    // The copy is stale: the next prompt waits for its snapshot (Accounts held), and the deletion begins meanwhile.
    const later = Date.now() + 60_000;
    await runInDurableObject(stubOf(agent), (i) => void ((i as Agent).now = () => later));
    const before = await snapshots(agent);
    const resume = await pauseObject(accountsStub(env));
    const marker = `marker-${crypto.randomUUID()}`;
    const p = c.prompt({ ver: 1, message: `scenario:text ${marker}` });
    await c.send(p);
    for (let i = 0; i < 200 && (await snapshots(agent)) === before; i++) await sleep(10);
    const removal = stubOf(agent).remove();
    await sleep(300);
    await resume();
    expect(await removal).toBe(true);
    expect(await c.noTerminal(p.id, 1000)).toBe(true);
    expect(await providerCalls(marker)).toBe(0);
    expect(await stubOf(agent).view()).toBeUndefined();
  });
});

describe('a run in progress when the agent is deleted', () => {
  it('ends with UNAUTHORIZED "this agent was removed from this deployment", not CANCELLED', { timeout: 30_000 }, async () => {
    const agent = await createTestAgent({ provider: 'openai', models: ['fake-slow'], default_model: 'fake-slow' });
    const c = await NipXxClient.open(agent);
    const p = c.prompt({ ver: 1, message: 'scenario:slow deleted mid-run' });
    await c.send(p);
    await c.sock.next((f) => f[0] === 'EVENT' && (f[2] as { kind: number }).kind === 25801, 10_000);
    expect(await stubOf(agent).remove()).toBe(true);
    const run = await c.collect(p.id);
    expect(run.terminal.kind).toBe(25805);
    expect(run.terminal.payload).toEqual({ ver: 1, code: 'UNAUTHORIZED', message: AGENT_REMOVED });
    expect(AGENT_REMOVED).toBe('this agent was removed from this deployment');
    expect(await stubOf(agent).view()).toBeUndefined();
  });
});
