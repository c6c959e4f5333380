// Revocation on the hosted agent's side (workers/agent/agent-do.ts): when an operator suspends or
// removes an owner (/api/admin/owners, which tells each of the owner's agents: Agent.ownerChanged),
// the runs and DVMCP asks in flight end at once with the UNAUTHORIZED the agent answers new prompts
// of such an owner (their spend recorded as for any ended run); a run's model calls are refused when
// the owner is not allowed, never "no plan limit"; and the agent of a removed owner keeps no 30 s
// watchdog for ever: it closes its links to relays outside the deployment, announces nothing, and
// checks every 10 minutes whether its owner is back, until re-adding the owner wakes it at once.
// Retired, it also withdraws its DVMCP server once: a NIP-09 deletion of its announcements on the
// public shard (so /mcp and DVMCP discovery stop listing a server that answers UNAUTHORIZED), sent
// again by the next watchdog when the shard did not accept it; re-added, it announces anew.
import { env, runDurableObjectAlarm, runInDurableObject } from 'cloudflare:test';
import { describe, expect, inject, it, vi } from 'vitest';
import { announcementCoordinates } from '../../src/shared/dvmcp.js';
import type { NostrEvent } from '../../src/shared/event.js';
import { KIND } from '../../src/shared/kinds.js';
import type { Agent } from '../../workers/agent/agent-do.js';
import { OWNER_NOT_ALLOWED } from '../../workers/agent/admission.js';
import { ALL_RELAYS } from '../../workers/relay-do/vanish.js';
import { api } from './api-helpers.js';
import { NipXxClient, providerClosed } from './agent-helpers.js';
import { announcements, DvmcpClient } from './bridge-helpers.js';
import { connect, keys, now, sign, type Keys } from './helpers.js';
import { allToolNames, gatewayClient } from './mcp-gateway-helpers.js';
import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { TEST_ADMIN_SK } from './test-keys.js';

/** What a client is told of an owner removed or suspended: not why (the owner is told at admission, saas-accounts.test.ts). */
const UNAVAILABLE = 'this agent is unavailable on this deployment; retry later or use another agent';

declare module 'vitest' {
  export interface ProvidedContext {
    floodRelayUrl: string;
  }
}

const admin = (method: string, path: string, body?: unknown) => api(TEST_ADMIN_SK, method, path, body);
const stubOf = (agent: string) => env.AGENT.get(env.AGENT.idFromName(agent));
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const fake = inject('fakeProviderUrl');
const FIXTURE = inject('toolsFixtureUrl');
/** The fake provider's `slow` scenario: 50 deltas, one every 200 ms (test/fake-provider/server.ts SLOW_DELTAS). */
const SLOW_DELTAS = 50;
const SLOW = { provider: 'openai', models: ['fake-slow'], default_model: 'fake-slow' };
const MINUTE = 60_000;

async function addOwner(plan?: string, k: Keys = keys()): Promise<Keys> {
  expect(await admin('POST', '/api/admin/owners', { pubkey: k.pk, ...(plan ? { plan } : {}) })).toMatchObject({ status: 201 });
  return k;
}

async function createAgent(owner: Keys, body: object = {}): Promise<string> {
  const r = await api(owner.sk, 'POST', '/api/agents', { name: 'revocable agent', provider: 'echo', ...body });
  expect(r).toEqual({ status: 201, json: expect.objectContaining({ pubkey: expect.any(String) }) });
  return (r.json as { pubkey: string }).pubkey;
}

/** Waits until `client` has received an event of kind `kind` of run `runId` (left in its frames for collect()). */
async function arrived(client: NipXxClient, runId: string, kind: number, timeoutMs = 10_000): Promise<void> {
  const of = (f: unknown[]) => {
    const e = f[2] as NostrEvent | undefined;
    return f[0] === 'EVENT' && e?.kind === kind && e.tags.some((t) => t[0] === 'e' && t[1] === runId);
  };
  const deadline = Date.now() + timeoutMs;
  while (!client.sock.frames.some(of)) {
    if (Date.now() > deadline) throw new Error(`no event of kind ${kind} for run ${runId} within ${timeoutMs} ms`);
    await sleep(20);
  }
}

/** The agent's next wake (ms), as its storage holds it. */
const alarmOf = (agent: string) => runInDurableObject(stubOf(agent), (_i, state) => state.storage.getAlarm());

/** Polls until `ok(alarm)` holds for the agent's scheduled alarm (at most ~5 s); the last alarm seen. */
async function alarmWhen(agent: string, ok: (at: number | null) => boolean): Promise<number | null> {
  let at = await alarmOf(agent);
  for (let i = 0; i < 50 && !ok(at); i++) {
    await sleep(100);
    at = await alarmOf(agent);
  }
  return at;
}

/** Polls until the agent's relay connections satisfy `ok` (at most ~10 s); the last seen. */
async function linksWhen(agent: string, ok: (urls: string[]) => boolean): Promise<string[]> {
  let urls = await runInDurableObject(stubOf(agent), (i) => (i as Agent).connectedRelays);
  for (let i = 0; i < 100 && !ok(urls); i++) {
    await sleep(100);
    urls = await runInDurableObject(stubOf(agent), (i) => (i as Agent).connectedRelays);
  }
  return urls;
}

describe('a run in progress when its owner loses the deployment', () => {
  for (const { what, change, message } of [
    { what: 'removed', change: (pk: string) => admin('DELETE', `/api/admin/owners/${pk}`), message: UNAVAILABLE },
    { what: 'suspended', change: (pk: string) => admin('PATCH', `/api/admin/owners/${pk}`, { suspended: true }), message: UNAVAILABLE },
  ]) {
    it(`owner ${what}: the run ends at once with UNAUTHORIZED "${message}", fewer than all deltas, the model call closed, its spend recorded`, async () => {
      const owner = await addOwner();
      const agent = await createAgent(owner, SLOW);
      // On the public shard: the owner's shard stores nothing new once its owner is suspended or removed (terminals are stored events).
      const client = await NipXxClient.open(agent, keys(), '/');
      const marker = `scenario:slow ${what} ${Math.random()}`;
      const p = client.prompt({ ver: 1, message: marker });
      await client.send(p);
      await arrived(client, p.id, 25801);
      expect((await change(owner.pk)).status).toBeLessThan(300);
      const run = await client.collect(p.id, 20_000);
      // Run to its end, the slow scenario answers 25803 with all its deltas: this one was stopped.
      expect(run.terminal.kind).toBe(25805);
      expect(run.terminal.payload).toEqual({ ver: 1, code: 'UNAUTHORIZED', message });
      expect(run.deltas.length).toBeLessThan(SLOW_DELTAS);
      expect(await providerClosed(fake, marker)).toBe(true);
      const usage = await stubOf(agent).usage();
      expect(usage).toHaveLength(1);
      expect(usage[0]).toMatchObject({ run_id: p.id, outcome: 'UNAUTHORIZED' });
      expect(usage[0]!.input_tokens).toBeGreaterThan(0);
      expect(usage[0]!.output_tokens).toBeGreaterThan(0);
      // A new prompt gets the same answer, without a run.
      const next = client.prompt({ ver: 1, message: 'hello' });
      await client.send(next);
      expect((await client.collect(next.id)).terminal.payload).toEqual({ ver: 1, code: 'UNAUTHORIZED', message });
      expect(await stubOf(agent).usage()).toHaveLength(1);
    }, 40_000);
  }

  it('owner removed: a DVMCP ask in flight is answered UNAUTHORIZED at once, its model call closed', async () => {
    const owner = await addOwner();
    const agent = await createAgent(owner, { ...SLOW, dvmcp: { enabled: true } });
    const c = await DvmcpClient.open(agent, '/');
    await announcements(agent, [31316], (es) => es.length > 0, '/');
    const marker = `scenario:slow dvmcp ${Math.random()}`;
    const id = await c.send(c.request('tools/call', { name: 'ask', arguments: { message: marker } }));
    for (let i = 0; i < 100 && c.notifications(id).length === 0; i++) await sleep(100);
    expect(c.notifications(id).length).toBeGreaterThan(0);
    expect((await admin('DELETE', `/api/admin/owners/${owner.pk}`)).status).toBe(204);
    expect((await c.answer(id, 20_000)).result).toEqual({ ok: true, value: { content: [{ type: 'text', text: `UNAUTHORIZED: ${UNAVAILABLE}` }], isError: true } });
    expect(await providerClosed(fake, marker)).toBe(true);
    c.close();
  }, 40_000);
});

describe('the plan’s token limits before each model call', () => {
  it('a run whose owner was removed (the agent learnt it from another run’s report, the admin API’s notice lost) gets no further model call: UNAUTHORIZED, not "no plan limit"', async () => {
    // A plan with a token limit that holds both runs' first calls (each sends the web_fetch definition).
    const owner = await addOwner('some_tokens');
    const agent = await createAgent(owner, { tools: ['web_fetch'], web_fetch_hosts: ['127.0.0.1'], limits: { max_output_tokens: 16, max_concurrent_runs: 4 } });
    const [a, b] = await Promise.all([NipXxClient.open(agent, owner, '/'), NipXxClient.open(agent, owner, '/')]);
    // Step 1 (echo) asks for web_fetch, which answers after 3 s; step 2 would echo the page.
    const slow = a.prompt({ ver: 1, message: `/tool web_fetch {"url": "${FIXTURE}/slow-headers?ms=3000"}` });
    await a.send(slow);
    await arrived(a, slow.id, 25804);
    // The registry forgets the owner, as DELETE /api/admin/owners does, but this agent is not told.
    expect(await env.ACCOUNTS.get(env.ACCOUNTS.idFromName('accounts')).remove(owner.pk)).toBe(true);
    // Another run, admitted on what the agent knew: its report's answer says the owner is gone.
    const quick = b.prompt({ ver: 1, message: 'quick one' });
    await b.send(quick);
    expect((await b.collect(quick.id)).terminal.kind).toBe(25803);
    const run = await a.collect(slow.id, 15_000);
    // The tool ran to its end (the run was not aborted): the refusal came before the second model call.
    expect(run.tools.map((t) => t['phase'])).toEqual(['start', 'result']);
    expect(run.deltas).toEqual([]);
    // The run's client is the owner: it is told the reason (anyone else: UNAVAILABLE; told-to.ts).
    expect(run.terminal.payload).toEqual({ ver: 1, code: 'UNAUTHORIZED', message: OWNER_NOT_ALLOWED });
    const usage = (await stubOf(agent).usage()).find((r) => r.run_id === slow.id);
    expect(usage).toMatchObject({ outcome: 'UNAUTHORIZED', tool_calls: 1 });
  }, 40_000);
});

describe('the watchdog of a removed owner’s agent', () => {
  it('after removal: no 30 s wake (10 min), only the public shard’s link kept (never the external relay’s again), prompts answered UNAUTHORIZED; re-added: back to normal at once', async () => {
    const tag = `removed-${Math.random().toString(36).slice(2)}`;
    const flooder = inject('floodRelayUrl');
    const external = `${flooder}/${tag}/0`;
    const dialled = async () => ((await (await fetch(`${flooder.replace(/^ws/, 'http')}/stats?tag=${tag}`)).json()) as { connections: number }).connections;
    const owner = await addOwner();
    const agent = await createAgent(owner, { relays: [external] });
    const everywhere = [`ws://relay.test/r/${owner.pk}`, 'ws://relay.test/', external].sort();
    const client = await NipXxClient.open(agent, keys(), '/');
    const ask = async (c: NipXxClient) => {
      const p = c.prompt({ ver: 1, message: 'are you there?' });
      await c.send(p);
      return (await c.collect(p.id)).terminal;
    };
    expect((await ask(client)).kind).toBe(25803);
    expect((await linksWhen(agent, (urls) => urls.length === 3)).sort()).toEqual(everywhere);

    expect((await admin('DELETE', `/api/admin/owners/${owner.pk}`)).status).toBe(204);
    // Told at once: the watchdog retires the agent and comes back in 10 minutes, not 30 s.
    const retired = await alarmWhen(agent, (at) => at !== null && at > Date.now() + 5 * MINUTE);
    expect(retired).toBeGreaterThan(Date.now() + 9 * MINUTE);
    expect(await linksWhen(agent, (urls) => urls.length === 1)).toEqual(['ws://relay.test/']);
    const dials = await dialled();
    // Each later wake (the owner still removed) reconnects nothing else and does not wake sooner.
    const before = Date.now();
    expect(await runDurableObjectAlarm(stubOf(agent))).toBe(true);
    expect(await alarmOf(agent)).toBeGreaterThanOrEqual(before + 10 * MINUTE);
    expect(await runInDurableObject(stubOf(agent), (i) => (i as Agent).connectedRelays)).toEqual(['ws://relay.test/']);
    await sleep(500);
    expect(await dialled()).toBe(dials);
    // On the public shard it still says that it does not answer (to a stranger, not why).
    expect((await ask(client)).payload).toEqual({ ver: 1, code: 'UNAUTHORIZED', message: UNAVAILABLE });

    // Re-added: the admin API tells the agent, which reconnects everywhere and answers again.
    await addOwner(undefined, owner);
    expect((await linksWhen(agent, (urls) => urls.length === 3)).sort()).toEqual(everywhere);
    expect(await dialled()).toBe(dials + 1);
    expect(await alarmWhen(agent, (at) => at !== null && at <= Date.now() + 30_000)).toBeLessThanOrEqual(Date.now() + 30_000);
    // A new client (the first one's refusal window is still open), on the owner's shard again.
    const again = await NipXxClient.open(agent, keys(), `/r/${owner.pk}`);
    const p = again.prompt({ ver: 1, message: 'back?' });
    await again.send(p);
    expect((await again.collect(p.id)).terminal).toMatchObject({ kind: 25803, payload: { text: 'echo: back?' } });
  }, 60_000);
});

/** The DVMCP announcements (server, tools list). */
const DVMCP = [KIND.DVMCP_SERVER, KIND.DVMCP_TOOLS];
/** What the agent still publishes about itself while retired. */
const PROFILE = [KIND.METADATA, KIND.RELAY_LIST, KIND.AI_INFO];
const WITHDRAWN = 'the owner was removed from this deployment';

/**
 * Polls /mcp with `client` (once a second, at most ~20 s: its catalog is cached 10 s per isolate; one
 * request a poll, within the gateway's 120 a minute per address) until its tools of server `id` are
 * `expected`; the last seen.
 */
async function listedOf(client: Client, id: string, expected: string[]): Promise<string[]> {
  let tools: string[] = [];
  for (let i = 0; i < 20; i++) {
    tools = (await allToolNames(client)).filter((t) => t.startsWith(`${id}__`));
    if (JSON.stringify(tools) === JSON.stringify(expected)) break;
    await sleep(1000);
  }
  return tools;
}

/** An owner added by the operator, and its agent with a public DVMCP server `id`, announced on the public shard. */
async function announcedAgent(id: string): Promise<{ owner: Keys; agent: string }> {
  const owner = await addOwner();
  const agent = await createAgent(owner, { dvmcp: { enabled: true, server_id: id } });
  expect(await announcements(agent, DVMCP, (es) => es.length === 2, '/')).toHaveLength(2);
  return { owner, agent };
}

describe('the announcements of a removed owner’s agent', () => {
  it('retired: its DVMCP announcements deleted from the public shard once (NIP-09 by a), gone from /mcp, its profile, relay list and ai.info kept; re-added: announced and listed again', async () => {
    const id = `retired-${Math.random().toString(36).slice(2, 10)}`;
    const { owner, agent } = await announcedAgent(id);
    const mcp = await gatewayClient('agent-owner-removal');
    expect(await listedOf(mcp, id, [`${id}__ask`])).toEqual([`${id}__ask`]);

    expect((await admin('DELETE', `/api/admin/owners/${owner.pk}`)).status).toBe(204);
    expect(await announcements(agent, DVMCP, (es) => es.length === 0, '/')).toEqual([]);
    const deletion = (await announcements(agent, [KIND.DELETION], (es) => es.length > 0, '/'))[0]!;
    expect(deletion.tags.filter((t) => t[0] === 'a').map((t) => t[1])).toEqual(announcementCoordinates(agent, id));
    expect(deletion.content).toBe(WITHDRAWN);
    // Still true of the key, and where a prompt is told why it is not served (UNAUTHORIZED): kept.
    expect((await announcements(agent, PROFILE, (es) => es.length === 3, '/')).map((e) => e.kind).sort((a, b) => a - b)).toEqual([0, 10002, 31340]);
    expect(await listedOf(mcp, id, [])).toEqual([]);
    // Recorded: a later watchdog (the owner still removed) publishes no second deletion.
    expect(await runDurableObjectAlarm(stubOf(agent))).toBe(true);
    expect(await announcements(agent, [KIND.DELETION], () => true, '/')).toEqual([deletion]);

    // Re-added: the admin API wakes the agent, which announces again (dated after the deletion) and is listed again.
    await addOwner(undefined, owner);
    const back = await announcements(agent, DVMCP, (es) => es.length === 2, '/');
    expect(back.map((e) => e.kind).sort((a, b) => a - b)).toEqual(DVMCP);
    expect(back.every((e) => e.created_at > deletion.created_at)).toBe(true);
    expect(await listedOf(mcp, id, [`${id}__ask`])).toEqual([`${id}__ask`]);
    await mcp.close();
  }, 90_000);

  it('re-added at once after the deletion (within its second): announced again all the same', async () => {
    const id = `quick-${Math.random().toString(36).slice(2, 10)}`;
    const { owner, agent } = await announcedAgent(id);
    expect((await admin('DELETE', `/api/admin/owners/${owner.pk}`)).status).toBe(204);
    const deletion = (await announcements(agent, [KIND.DELETION], (es) => es.length > 0, '/'))[0]!;
    await addOwner(undefined, owner);
    // An announcement dated as the deletion would count as deleted (NIP-09: every version up to its created_at).
    const back = await announcements(agent, DVMCP, (es) => es.length === 2, '/');
    expect(back.map((e) => e.kind).sort((a, b) => a - b)).toEqual(DVMCP);
    expect(back.every((e) => e.created_at > deletion.created_at)).toBe(true);
  }, 40_000);

  it('a deletion the public shard refuses is not recorded: the next watchdog sends it again, once accepted never again', async () => {
    const id = `refused-${Math.random().toString(36).slice(2, 10)}`;
    const { owner, agent } = await announcedAgent(id);
    // The agent key asks the public shard to vanish until 2 s from now: its events dated up to then are refused (blocked:).
    const sk = await runInDurableObject(stubOf(agent), (i) => (i as unknown as { store: { secretKey(): Promise<Uint8Array> } }).store.secretKey());
    const until = now() + 2;
    const s = await connect('/');
    expect((await s.publish(sign({ sk, pk: agent }, { kind: 62, content: '', tags: [['relay', ALL_RELAYS]], created_at: until })))[2]).toBe(true);
    s.close();
    const warn = vi.spyOn(console, 'warn');
    try {
      const refusals = () => warn.mock.calls.filter((c) => String(c[0]).startsWith(`agent ${agent}: the public shard did not accept the deletion of its DVMCP announcements`));
      expect((await admin('DELETE', `/api/admin/owners/${owner.pk}`)).status).toBe(204);
      for (let i = 0; i < 100 && refusals().length === 0; i++) await sleep(100);
      expect(refusals().map((c) => c[0])).toEqual([
        `agent ${agent}: the public shard did not accept the deletion of its DVMCP announcements (blocked: this pubkey asked to vanish from this relay (NIP-62)); sent again at the next watchdog`,
      ]);
      expect(await announcements(agent, [KIND.DELETION], () => true, '/')).toEqual([]);
      // Past the vanish: the next watchdog sends it again, and it is stored.
      while (now() <= until) await sleep(100);
      expect(await runDurableObjectAlarm(stubOf(agent))).toBe(true);
      const deletion = (await announcements(agent, [KIND.DELETION], (es) => es.length > 0, '/'))[0]!;
      expect(deletion.tags.filter((t) => t[0] === 'a').map((t) => t[1])).toEqual(announcementCoordinates(agent, id));
      expect(refusals()).toHaveLength(1);
      // Accepted, recorded: the following watchdogs send nothing more.
      await sleep(1000);
      expect(await runDurableObjectAlarm(stubOf(agent))).toBe(true);
      expect(await announcements(agent, [KIND.DELETION], () => true, '/')).toEqual([deletion]);
    } finally {
      warn.mockRestore();
    }
  }, 60_000);
});
