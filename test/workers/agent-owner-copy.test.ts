// The agent's copy of its owner's account while Accounts fails (workers/agent/owner-copy.ts): a
// snapshot that failed is not asked again for REGISTRY_RETRY_MS whatever arrives meanwhile (a
// stranger's prompts cannot make every prompt one more RPC to an overloaded Accounts, and one more
// log line), and an agent that has no copy yet (restarted during the outage) tells its owner the
// registry could not be read, not that the owner is no longer allowed.
import { env, runInDurableObject } from 'cloudflare:test';
import { describe, expect, it } from 'vitest';
import type { Agent } from '../../workers/agent/agent-do.js';
import type { RunMeter } from '../../workers/agent/metering.js';
import type { OwnerCopy } from '../../workers/agent/owner-copy.js';
import type { StoredAgent } from '../../workers/agent/config.js';
import { accountsStub } from '../../workers/accounts/accounts-do.js';
import { REGISTRY_RETRY_MS } from '../../workers/common/owners.js';
import { NipXxClient, createTestAgent } from './agent-helpers.js';
import { keys } from './helpers.js';
import { holdObject, pauseObject } from './hold-object.js';
import { api } from './api-helpers.js';
import { TEST_ADMIN_SK } from './test-keys.js';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const stubOf = (agent: string) => env.AGENT.get(env.AGENT.idFromName(agent));
/** The snapshot RPCs the agent made to Accounts since it started (its own counter). */
const snapshots = (agent: string): Promise<number> => runInDurableObject(stubOf(agent), (i) => (i as Agent).ownerSnapshots);
const freeze = (agent: string, t: number) => runInDurableObject(stubOf(agent), (i) => void ((i as Agent).now = () => t));
/** Polls until the agent made `n` snapshot RPCs (at most ~2 s). */
async function snapshotsReach(agent: string, n: number): Promise<number> {
  for (let i = 0; i < 200 && (await snapshots(agent)) < n; i++) await sleep(10);
  return snapshots(agent);
}

describe('the owner’s account while Accounts fails', () => {
  it('after a failed snapshot, four prompts within REGISTRY_RETRY_MS ask Accounts nothing; the next prompt after it asks again', { timeout: 30_000 }, async () => {
    const strangers = Array.from({ length: 6 }, () => keys());
    const agent = await createTestAgent({ block: strangers.map((k) => k.pk) });
    const clients = await Promise.all(strangers.map((k) => NipXxClient.open(agent, k)));
    await sleep(300);
    // The copy is an hour old: the next prompt asks for it.
    const t0 = Date.now() + 3600_000;
    await freeze(agent, t0);
    const before = await snapshots(agent);
    const release = await holdObject(accountsStub(env));
    const first = clients[0]!.prompt({ ver: 1, message: 'while Accounts is overloaded' });
    await clients[0]!.send(first);
    expect(await snapshotsReach(agent, before + 1)).toBe(before + 1);
    await release(new Error('simulated Accounts overload'));
    // Refused for being blocked, whatever the copy (the one kept is used).
    expect((await clients[0]!.collect(first.id)).terminal.payload).toMatchObject({ code: 'BLOCKED_SENDER' });
    // Four strangers' prompts within REGISTRY_RETRY_MS of the failure (Accounts answers again by now): no RPC.
    for (const c of clients.slice(1, 5)) {
      const p = c.prompt({ ver: 1, message: 'again' });
      await c.send(p);
      expect((await c.collect(p.id)).terminal.payload).toMatchObject({ code: 'BLOCKED_SENDER' });
    }
    expect(await snapshots(agent)).toBe(before + 1);
    // Past REGISTRY_RETRY_MS: the next prompt asks Accounts again.
    await freeze(agent, t0 + REGISTRY_RETRY_MS + 1);
    const last = clients[5]!.prompt({ ver: 1, message: 'later' });
    await clients[5]!.send(last);
    expect((await clients[5]!.collect(last.id)).terminal.payload).toMatchObject({ code: 'BLOCKED_SENDER' });
    expect(await snapshots(agent)).toBe(before + 2);
  });

  it('an agent restarted while Accounts fails tells its owner the registry could not be read, and runs the owner’s prompt once Accounts answers', { timeout: 30_000 }, async () => {
    // An owner of the registry (a static owner, EDGESTR_OWNERS, needs no account).
    const owner = keys();
    expect((await api(TEST_ADMIN_SK, 'POST', '/api/admin/owners', { pubkey: owner.pk })).status).toBe(201);
    const created = await api(owner.sk, 'POST', '/api/agents', { name: 'registry owner agent', provider: 'echo' });
    expect(created.status).toBe(201);
    const agent = (created.json as { pubkey: string }).pubkey;
    const me = await NipXxClient.open(agent, owner, `/r/${owner.pk}`);
    await sleep(300);
    const release = await holdObject(accountsStub(env));
    await runInDurableObject(stubOf(agent), (_i, state) => state.abort('simulated restart')).catch(() => undefined);
    // The restarted agent's watchdog asks for the owner's account (it has none): Accounts fails.
    const t0 = Date.now();
    await freeze(agent, t0);
    const watchdog = runInDurableObject(stubOf(agent), (i) => (i as Agent).alarm());
    expect(await snapshotsReach(agent, 1)).toBe(1);
    await release(new Error('simulated Accounts overload'));
    await watchdog;
    const p = me.prompt({ ver: 1, message: 'hello' });
    await me.send(p);
    const refused = (await me.collect(p.id)).terminal;
    expect(refused.kind).toBe(25805);
    expect(refused.payload).toEqual({ ver: 1, code: 'INTERNAL_ERROR', message: `the owner registry could not be read yet; retry in ${REGISTRY_RETRY_MS / 1000} s`, retry_after: REGISTRY_RETRY_MS / 1000 });
    expect(await snapshots(agent)).toBe(1);
    // Past REGISTRY_RETRY_MS, Accounts answering: the owner's prompt runs.
    await freeze(agent, t0 + REGISTRY_RETRY_MS + 1);
    const q = me.prompt({ ver: 1, message: 'hello again' });
    await me.send(q);
    expect((await me.collect(q.id)).terminal.kind).toBe(25803);
  });
});

describe('the owner’s account across midnight (UTC)', () => {
  it('a run’s report answered with the previous day’s totals after midnight does not drop the run from the month: plan tokens_per_month 100 (others 90), a 60-token run, a stranger’s next prompt is refused', { timeout: 30_000 }, async () => {
    const owner = keys();
    expect((await api(TEST_ADMIN_SK, 'POST', '/api/admin/owners', { pubkey: owner.pk, plan: 'few_tokens_month' })).status).toBe(201);
    // 16 tokens of answer: a short prompt asks about 40 tokens, within the 90 others may use when nothing is spent.
    const created = await api(owner.sk, 'POST', '/api/agents', { name: 'month agent', provider: 'echo', limits: { max_output_tokens: 16 } });
    expect(created.status).toBe(201);
    const agent = (created.json as { pubkey: string }).pubkey;
    const stranger = await NipXxClient.open(agent, keys(), `/r/${owner.pk}`);
    await sleep(300);
    const D = Date.UTC(2031, 2, 15, 23, 59, 59, 900);
    const after = D + 1_000;
    // A snapshot the agent asked for just after midnight, computed before the run's report reached Accounts.
    const S = await accountsStub(env).snapshot(owner.pk, D + 200);
    expect(S.totals).toMatchObject({ day: '2031-03-16', tokens_month: 0 });
    // The run ends just before midnight; its report waits at Accounts until after midnight.
    const resume = await pauseObject(accountsStub(env));
    const run: RunMeter = { run_id: 'ab'.repeat(32), sender: owner.pk, provider: 'echo', model: 'echo', input_tokens: 30, output_tokens: 30, tool_calls: 0, duration_ms: 1, outcome: 'response' };
    type Inside = { now: () => number; ownerCopy: OwnerCopy; store: { config(): StoredAgent }; recordRun(c: StoredAgent, r: RunMeter): unknown };
    await runInDurableObject(stubOf(agent), (i) => {
      const a = i as unknown as Inside;
      a.now = () => D;
      a.recordRun(a.store.config(), run);
    });
    await runInDurableObject(stubOf(agent), (i) => {
      const a = i as unknown as Inside;
      a.now = () => after;
      a.ownerCopy.answered(S);
    });
    await resume();
    await sleep(300);
    // The report's answer is of 2031-03-15: the run still counts in the month, once.
    expect(await runInDurableObject(stubOf(agent), (i) => (i as unknown as Inside).ownerCopy.totals(after).tokens_month)).toBe(60);
    const p = stranger.prompt({ ver: 1, message: 'hello' });
    await stranger.send(p);
    const refused = (await stranger.collect(p.id)).terminal;
    expect(refused.kind).toBe(25805);
    expect(refused.payload).toMatchObject({ code: 'RATE_LIMIT', message: 'the agent’s owner reached a usage limit for this month (UTC)', details: { quota: 'tokens_per_month' } });
  });
});
