// The owner's plan across its agents' runs in progress (workers/accounts/in-flight.ts,
// workers/agent/owner-copy.ts): each agent tells Accounts what its runs in progress hold (spent so
// far, and held by their model calls in flight) with every fetch of the owner's snapshot and every
// run report, and the snapshot it is answered counts the owner's other agents' figures. So a
// stranger prompting several agents of one owner at once cannot spend the others' share once per
// agent: within one refresh of the copies (30 s), the later model call is refused. A run's report
// replaces its agent's figure (the run is counted once), and a figure older than
// IN_FLIGHT_MAX_AGE_MS no longer counts.
import { env, runInDurableObject } from 'cloudflare:test';
import { describe, expect, inject, it } from 'vitest';
import type { Agent } from '../../workers/agent/agent-do.js';
import { accountsStub } from '../../workers/accounts/accounts-do.js';
import { IN_FLIGHT_MAX_AGE_MS } from '../../workers/accounts/in-flight.js';
import { OWNER_COPY_MAX_AGE_MS } from '../../workers/agent/owner-copy.js';
import { api } from './api-helpers.js';
import { NipXxClient } from './agent-helpers.js';
import { keys, type Keys } from './helpers.js';
import { TEST_ADMIN_SK } from './test-keys.js';

const stubOf = (agent: string) => env.AGENT.get(env.AGENT.idFromName(agent));
/** What a stranger is told when the owner's plan (the others' share of it) refuses its prompt or its run's model call. */
const DAY_LIMIT = 'the agent’s owner reached a usage limit for today (UTC)';
/** The agent's clock runs one refresh period ahead: its copy of the owner's account is stale. */
const AHEAD = OWNER_COPY_MAX_AGE_MS + 1_000;

async function addOwner(plan: string): Promise<Keys> {
  const k = keys();
  expect((await api(TEST_ADMIN_SK, 'POST', '/api/admin/owners', { pubkey: k.pk, plan })).status).toBe(201);
  return k;
}

async function createAgent(owner: Keys, body: object): Promise<string> {
  const r = await api(owner.sk, 'POST', '/api/agents', { name: 'in-flight agent', ...body });
  expect(r.status).toBe(201);
  return (r.json as { pubkey: string }).pubkey;
}

/** The agent's clock runs AHEAD from now on. */
const ahead = (agent: string) => runInDurableObject(stubOf(agent), (i) => void ((i as Agent).now = () => Date.now() + AHEAD));

/** The agent's watchdog pass (every 30 s while a run is in flight), its clock AHEAD: it fetches the owner's snapshot. */
async function watchdogPass(agent: string): Promise<void> {
  await ahead(agent);
  await runInDurableObject(stubOf(agent), (i) => (i as Agent).alarm());
}

/** The owner's snapshot as Accounts answers a caller that is none of its agents, at `now`. */
const snapshotAt = (owner: string, now: number) => accountsStub(env).snapshot(owner, now);

describe('a stranger prompting two agents of one owner at once (plan some_tokens: 1,000 tokens a day, others may use 900)', () => {
  it('the second agent’s prompt is refused once the first agent’s model call in flight (about 560 tokens held) is known: the two would pass the others’ share', { timeout: 60_000 }, async () => {
    const owner = await addOwner('some_tokens');
    // Each prompt asks about 340 tokens of input and 256 of answer at admission (promptAsk): alone
    // it fits the share of 900; its model call holds about 300 of input and 256 of answer.
    const body = { provider: 'openai', models: ['fake-slow'], default_model: 'fake-slow', limits: { max_output_tokens: 256, max_prompt_bytes: 64_000 } };
    const a = await createAgent(owner, body);
    const b = await createAgent(owner, body);
    const stranger = keys();
    const onA = await NipXxClient.open(a, stranger, `/r/${owner.pk}`);
    const onB = await NipXxClient.open(b, stranger, `/r/${owner.pk}`);
    const message = `scenario:slow ${'word '.repeat(240)}`;
    const pa = onA.prompt({ ver: 1, message });
    await onA.send(pa);
    // A's model call is streaming (fake-slow: one delta every 200 ms for 10 s).
    await onA.sock.next((f) => f[0] === 'EVENT' && (f[2] as { kind: number }).kind === 25801, 10_000);
    // A's watchdog (due 30 s after the prompt) fetches the owner's snapshot, telling Accounts what its run holds.
    await watchdogPass(a);
    const held = (await snapshotAt(owner.pk, Date.now() + AHEAD)).in_flight;
    // B's copy of the owner's account (fetched when it started) is stale too: the prompt's admission fetches it.
    await ahead(b);
    const pb = onB.prompt({ ver: 1, message });
    await onB.send(pb);
    const refused = await onB.collect(pb.id, 15_000);
    expect(refused.terminal.kind).toBe(25805);
    expect(refused.terminal.payload).toEqual({ ver: 1, code: 'RATE_LIMIT', message: DAY_LIMIT, retry_after: expect.any(Number), details: { quota: 'tokens_per_day' } });
    expect(await stubOf(b).usage()).toEqual([]);
    // What A told Accounts: its call's estimated input (about 300) and the 256 of answer it may produce.
    expect(held).toBeGreaterThan(500);
    expect(held).toBeLessThan(700);
    expect((await onA.collect(pa.id, 20_000)).terminal.kind).toBe(25803);
  });

  it('two runs admitted before either was known: after one refresh, the second agent’s next model call is refused; each run alone fits the share', { timeout: 60_000 }, async () => {
    const owner = await addOwner('some_tokens');
    // echo asks for web_fetch, whose page answers after 8 s, then answers with it. The first call
    // spends about 355 tokens (input with the tool's definition, and the tool call); the second
    // would send about 370 and hold 16 of answer: a run alone spends about 740 of the 900, two
    // with the other run's first call about 1,100.
    const body = { provider: 'echo', tools: ['web_fetch'], web_fetch_hosts: ['127.0.0.1'], limits: { max_output_tokens: 16 } };
    const a = await createAgent(owner, body);
    const b = await createAgent(owner, body);
    const stranger = keys();
    const onA = await NipXxClient.open(a, stranger, `/r/${owner.pk}`);
    const onB = await NipXxClient.open(b, stranger, `/r/${owner.pk}`);
    const message = `/tool web_fetch {"url":"${inject('toolsFixtureUrl')}/slow-headers?ms=8000&pad=${'x'.repeat(400)}"}`;
    const pa = onA.prompt({ ver: 1, message });
    const pb = onB.prompt({ ver: 1, message });
    await onA.send(pa);
    await onB.send(pb);
    // Both runs made their first model call and wait for the page.
    await onA.sock.next((f) => f[0] === 'EVENT' && (f[2] as { kind: number }).kind === 25804, 10_000);
    await onB.sock.next((f) => f[0] === 'EVENT' && (f[2] as { kind: number }).kind === 25804, 10_000);
    // One refresh: A's watchdog tells Accounts what its run spent; then B's fetches the snapshot, which counts it.
    await watchdogPass(a);
    await watchdogPass(b);
    const both = (await snapshotAt(owner.pk, Date.now() + AHEAD)).in_flight;
    const expired = (await snapshotAt(owner.pk, Date.now() + AHEAD + IN_FLIGHT_MAX_AGE_MS + 1_000)).in_flight;
    expect((await onA.collect(pa.id, 20_000)).terminal.kind).toBe(25803);
    const refused = await onB.collect(pb.id, 20_000);
    expect(refused.terminal.kind).toBe(25805);
    expect(refused.terminal.payload).toEqual({ ver: 1, code: 'RATE_LIMIT', message: DAY_LIMIT, retry_after: expect.any(Number), details: { quota: 'tokens_per_day' } });
    // B's run made its first call only: the page was fetched, the call that would send it was not made.
    const [rowB] = await stubOf(b).usage();
    expect(rowB).toMatchObject({ run_id: pb.id, outcome: 'RATE_LIMIT', tool_calls: 1 });
    expect(rowB!.input_tokens + rowB!.output_tokens).toBeLessThan(400);
    // While both waited for the page, Accounts counted what their first calls spent (about 355 each);
    // a figure older than IN_FLIGHT_MAX_AGE_MS no longer counts.
    expect(both).toBeGreaterThan(600);
    expect(expired).toBe(0);
    // The runs' reports replaced their agents' figures: what they spent is counted once.
    const [rowA] = await stubOf(a).usage();
    const spent = [rowA!, rowB!].reduce((n, r) => n + r.input_tokens + r.output_tokens, 0);
    for (let i = 0; i < 100 && (await snapshotAt(owner.pk, Date.now() + AHEAD)).totals.runs_today < 2; i++) await new Promise((r) => setTimeout(r, 50));
    const after = await snapshotAt(owner.pk, Date.now() + AHEAD);
    expect(after.totals).toMatchObject({ runs_today: 2, tokens_today: spent });
    expect(after.in_flight).toBe(0);
  });
});
