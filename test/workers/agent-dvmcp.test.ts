// A hosted agent exposed as a DVMCP server, end to end inside workerd: an agent created through the
// management API with `dvmcp` enabled, a plain DVMCP client (bridge-helpers.ts) on the real relay
// shards, the offline echo model or the fake OpenAI-compatible provider (test/fake-provider).
import { env, runInDurableObject } from 'cloudflare:test';
import { describe, expect, inject, it } from 'vitest';
import type { NostrEvent } from '../../src/shared/event.js';
import { Agent } from '../../workers/agent/agent-do.js';
import { REFUSED_BY_POLICY } from '../../workers/agent/dvmcp-server.js';
import { api } from './api-helpers.js';
import { createTestAgent, NipXxClient, ownerRelayClient, providerClosed } from './agent-helpers.js';
import { Observer, type ObservedFrame } from '../../src/shared/ao-observer.js';
import { announcements, DvmcpClient } from './bridge-helpers.js';
import { connect, keys, sign } from './helpers.js';
import { TEST_ADMIN_SK, TEST_OWNER, TEST_OWNER_SK } from './test-keys.js';

const OWNER_SHARD = `/r/${TEST_OWNER}`;
const ON = { dvmcp: { enabled: true } };
const FAKE = { provider: 'openai', models: ['gpt-test'] };
const fake = inject('fakeProviderUrl');
const tag = (e: NostrEvent, name: string) => e.tags.find((t) => t[0] === name)?.[1];
const stubOf = (agent: string) => env.AGENT.get(env.AGENT.idFromName(agent));
const T0 = Date.UTC(2026, 0, 10, 12, 0, 0);
/** Freezes the agent's limiter clock at `t` (ms): a window cannot free between two asks on a slow machine. */
const freeze = (agent: string, t: number) => runInDurableObject(stubOf(agent), (i) => void ((i as Agent).now = () => t));
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** An agent with its DVMCP server on, and a client connected once the agent listens. */
async function agentAndClient(body: object = {}, path = OWNER_SHARD, k = keys()): Promise<{ agent: string; c: DvmcpClient }> {
  const agent = await createTestAgent({ ...ON, ...body });
  const c = await DvmcpClient.open(agent, path, k);
  // The agent subscribes once it connected: its announcements on this shard say it did.
  await announcements(agent, [31316], (es) => es.length > 0, path);
  return { agent, c };
}

const ask = (c: DvmcpClient, args: Record<string, unknown>, opts: { form?: 'plain' | 'wrapped'; timeoutMs?: number } = {}) =>
  c.call('tools/call', { name: 'ask', arguments: args }, opts);

/** The text of an MCP tool result. */
const textOf = (r: Record<string, unknown>) => (r.content as Array<{ type: string; text: string }>)[0]!.text;

/** Polls until `n` notifications arrived for request `id` (at most ~10 s). */
async function notificationsOf(c: DvmcpClient, id: string, n: number) {
  for (let i = 0; i < 100 && c.notifications(id).length < n; i++) await sleep(100);
  return c.notifications(id);
}

describe('announcements', () => {
  it('31316 (d = server id, the agent’s name and about, k 25910, support_encryption) and 31317 with the one tool ask, on the owner and the public shard', async () => {
    const agent = await createTestAgent({ name: 'Helper', about: 'answers questions about Nostr', dvmcp: { enabled: true, server_id: 'helper' } });
    for (const path of [OWNER_SHARD, '/']) {
      const all = await announcements(agent, [31316, 31317], (es) => es.length >= 2, path);
      const server = all.find((e) => e.kind === 31316)!;
      expect(server.tags).toEqual([['d', 'helper'], ['k', '25910'], ['name', 'Helper'], ['about', 'answers questions about Nostr'], ['support_encryption', 'true']]);
      expect(JSON.parse(server.content)).toEqual({
        protocolVersion: '2025-03-26',
        capabilities: { tools: {} },
        serverInfo: { name: 'Helper', version: '1.0.0' },
        instructions: 'answers questions about Nostr',
      });
      const tools = all.find((e) => e.kind === 31317)!;
      expect(tools.tags).toEqual([['d', 'helper/tools/list'], ['s', 'helper'], ['cap', 'ask']]);
      const listed = JSON.parse(tools.content) as { tools: Array<{ name: string; description: string; inputSchema: { required: string[] } }> };
      expect(listed.tools).toHaveLength(1);
      expect(listed.tools[0]).toMatchObject({ name: 'ask', description: 'Ask Helper: answers questions about Nostr', inputSchema: { type: 'object', required: ['message'] } });
    }
  });

  it('a private server (public: false) is not announced but answers; encryption false is announced', async () => {
    const agent = await createTestAgent({ dvmcp: { enabled: true, public: false } });
    const c = await DvmcpClient.open(agent, OWNER_SHARD);
    // The agent listens once it published its ai.info.
    await announcements(agent, [31340], (es) => es.length > 0, OWNER_SHARD);
    // A private server is reached by naming it (without s: agent-dvmcp-limits.test.ts).
    const a = await c.call('tools/list', undefined, { s: 'agent' });
    expect(a.result).toEqual({ ok: true, value: { tools: [expect.objectContaining({ name: 'ask' })] } });
    const s = await connect(OWNER_SHARD);
    expect((await s.req('none', { kinds: [31316, 31317], authors: [agent] })).events).toEqual([]);
    s.close();
    c.close();
    const plainOnly = await createTestAgent({ dvmcp: { enabled: true, encryption: false } });
    const server = (await announcements(plainOnly, [31316], (es) => es.length > 0, OWNER_SHARD))[0]!;
    expect(tag(server, 'support_encryption')).toBe('false');
  });

  it('disabling the server publishes the NIP-09 deletion and the announcements are gone; requests go unanswered', async () => {
    const { agent, c } = await agentAndClient();
    const r = await api(TEST_OWNER_SK, 'PATCH', `/api/agents/${agent}`, { dvmcp: { enabled: false } });
    expect(r.status).toBe(200);
    expect(r.json).toMatchObject({ dvmcp: { enabled: false, server_id: 'agent', public: true, encryption: true } });
    const s = await connect(OWNER_SHARD);
    const deletion = (await s.req('del', { kinds: [5], authors: [agent] })).events.find((e) => e.content === 'DVMCP server disabled')!;
    expect(deletion.tags.filter((t) => t[0] === 'a').map((t) => t[1])).toEqual([
      `31316:${agent}:agent`,
      `31317:${agent}:agent/tools/list`,
      `31318:${agent}:agent/resources/list`,
      `31318:${agent}:agent/resources/templates/list`,
      `31319:${agent}:agent/prompts/list`,
    ]);
    expect((await s.req('gone', { kinds: [31316, 31317], authors: [agent] })).events).toEqual([]);
    s.close();
    const id = await c.send(c.request('tools/list'));
    await expect(c.answer(id, 1500)).rejects.toThrow();
    c.close();
  });

  it('two concurrent updates (disabling the server, changing the system prompt) are both kept', async () => {
    const agent = await createTestAgent(ON);
    const stub = stubOf(agent);
    const dvmcp = (await stub.view())!.dvmcp!;
    // Delivered in this order: the first awaits its deletion's publication while the second is applied.
    const [disabled, prompted] = await Promise.all([stub.update({ dvmcp: { ...dvmcp, enabled: false } }), stub.update({ system_prompt: 'be brief' })]);
    expect(disabled).toMatchObject({ dvmcp: { enabled: false }, system_prompt: 'be brief' });
    expect(prompted).toMatchObject({ system_prompt: 'be brief' });
    expect(await stub.view()).toMatchObject({ dvmcp: { enabled: false }, system_prompt: 'be brief' });
  });

  it('renaming the server (server_id) deletes the old announcements, announces the new and answers s = the new id', async () => {
    const { agent, c } = await agentAndClient();
    expect((await api(TEST_OWNER_SK, 'PATCH', `/api/agents/${agent}`, { dvmcp: { enabled: true, server_id: 'renamed' } })).status).toBe(200);
    const now = await announcements(agent, [31316], (es) => es.some((e) => tag(e, 'd') === 'renamed'), OWNER_SHARD);
    expect(now.map((e) => tag(e, 'd'))).toEqual(['renamed']);
    expect((await c.call('tools/list', undefined, { s: 'renamed' })).result.ok).toBe(true);
    expect((await c.call('tools/list', undefined, { s: 'agent' })).result).toEqual({ ok: false, error: { code: -32602, message: 'Unknown server id agent' } });
    c.close();
  });

  it('deleting the agent deletes its announcements', async () => {
    const { agent, c } = await agentAndClient({ dvmcp: { enabled: true, server_id: 'gone' } });
    c.close();
    expect((await api(TEST_OWNER_SK, 'DELETE', `/api/agents/${agent}`)).status).toBe(204);
    const s = await connect('/');
    const deletions = (await s.req('del', { kinds: [5], authors: [agent] })).events;
    expect(deletions.some((e) => e.content === 'agent deleted' && e.tags.some((t) => t[0] === 'a' && t[1] === `31316:${agent}:gone`))).toBe(true);
    expect((await s.req('gone', { kinds: [31316, 31317], authors: [agent] })).events).toEqual([]);
    s.close();
  });

  it('deleting the agent during an ask: the client is answered UNAUTHORIZED (the agent was removed) before the agent goes', async () => {
    const { agent, c } = await agentAndClient(FAKE);
    const id = await c.send(c.request('tools/call', { name: 'ask', arguments: { message: 'scenario:slow until deleted' } }));
    await notificationsOf(c, id, 2);
    expect((await api(TEST_OWNER_SK, 'DELETE', `/api/agents/${agent}`)).status).toBe(204);
    expect((await c.answer(id, 1000)).result).toEqual({ ok: true, value: { content: [{ type: 'text', text: 'UNAUTHORIZED: this agent was removed from this deployment' }], isError: true } });
    c.close();
  });

  it('the API refuses a bad dvmcp setting with the exact 422', async () => {
    const agent = await createTestAgent();
    expect(await api(TEST_OWNER_SK, 'PATCH', `/api/agents/${agent}`, { dvmcp: { enabled: true, server_id: 'has space' } })).toEqual({
      status: 422,
      json: { error: 'invalid agent', issues: [{ path: 'dvmcp.server_id', message: 'server_id is 1-64 characters of [a-zA-Z0-9_.-]' }] },
    });
    expect((await api(TEST_OWNER_SK, 'PATCH', `/api/agents/${agent}`, { dvmcp: { server_id: 'x' } })).status).toBe(422);
  });
});

describe('requests', () => {
  it('initialize answers the agent’s server info with d and support_encryption; tools/list lists ask; ping {}; resources/list -32601', async () => {
    const { c } = await agentAndClient({ name: 'Info agent', about: 'about me' });
    const init = await c.call('initialize', { protocolVersion: '2025-03-26', capabilities: {}, clientInfo: { name: 'test', version: '1' } });
    expect(init.result).toEqual({ ok: true, value: { protocolVersion: '2025-03-26', capabilities: { tools: {} }, serverInfo: { name: 'Info agent', version: '1.0.0' }, instructions: 'about me' } });
    expect(init.tags).toContainEqual(['d', 'agent']);
    expect(init.tags).toContainEqual(['support_encryption', 'true']);
    const list = await c.call('tools/list', undefined, { s: 'agent' });
    expect(list.result.ok && (list.result.value.tools as Array<{ name: string }>).map((t) => t.name)).toEqual(['ask']);
    expect((await c.call('ping')).result).toEqual({ ok: true, value: {} });
    expect((await c.call('resources/list')).result).toEqual({ ok: false, error: { code: -32601, message: 'Method not found: resources/list (this agent offers the tool "ask" only)' } });
    expect((await c.call('tools/list', undefined, { s: 'other' })).result).toEqual({ ok: false, error: { code: -32602, message: 'Unknown server id other' } });
    c.close();
  });

  it('tools/call ask runs the agent: the answer is the final text as MCP content (here on the public shard)', async () => {
    const { c } = await agentAndClient({}, '/');
    const a = await ask(c, { message: 'hello over dvmcp' });
    expect(a.result).toEqual({ ok: true, value: { content: [{ type: 'text', text: 'echo: hello over dvmcp' }] } });
    expect(a.event.kind).toBe(26910);
    expect(a.event.tags).toContainEqual(['p', c.k.pk]);
    c.close();
  });

  it('bad calls: unknown tool, missing message, over max_prompt_bytes → the exact errors', async () => {
    const { c } = await agentAndClient({ limits: { max_prompt_bytes: 10 } });
    expect((await c.call('tools/call', { name: 'nope', arguments: {} })).result).toEqual({ ok: false, error: { code: -32602, message: 'Unknown tool: nope (this agent offers "ask")' } });
    expect((await ask(c, { session: 'x' })).result).toEqual({ ok: false, error: { code: -32602, message: 'Invalid arguments for ask: message: message must be a string' } });
    expect((await ask(c, { message: 'hi', session: 7 })).result).toEqual({ ok: false, error: { code: -32602, message: 'Invalid arguments for ask: session: session must be a string' } });
    const big = await ask(c, { message: 'more than ten bytes' });
    expect(big.result).toEqual({ ok: true, value: { content: [{ type: 'text', text: 'INVALID_SCHEMA: the message is 19 bytes; this agent accepts at most 10 (max_prompt_bytes)' }], isError: true } });
    c.close();
  });

  it('a failed run is isError content with the NIP-XX code', async () => {
    const { c } = await agentAndClient(FAKE);
    const a = await ask(c, { message: 'scenario:400' });
    expect(a.result).toEqual({ ok: true, value: { content: [{ type: 'text', text: 'MODEL_UNAVAILABLE: the model provider refused the request; the agent owner can see why' }], isError: true } });
    c.close();
  });

  it('the run’s text streams as notifications/progress (e = request id, increasing progress, text so far), coalesced, before the answer', async () => {
    const { c } = await agentAndClient(FAKE);
    const started = Date.now();
    const id = await c.send(c.request('tools/call', { name: 'ask', arguments: { message: 'scenario:slow' } }));
    const a = await c.answer(id, 30_000);
    const elapsed = Date.now() - started;
    expect(a.result.ok && textOf(a.result.value)).toBe(Array.from({ length: 50 }, (_, i) => `tick ${i} `).join(''));
    const ns = c.notifications(id);
    expect(ns.length).toBeGreaterThan(3);
    // At most one per 300 ms (plus the first at once).
    expect(ns.length).toBeLessThanOrEqual(Math.ceil(elapsed / 300) + 1);
    const params = ns.map((n) => (JSON.parse(n.content) as { method: string; params: { progress: number; progressToken: string; message: string } }));
    expect(params.every((p) => p.method === 'notifications/progress' && p.params.progressToken === id)).toBe(true);
    expect(params.map((p) => p.params.progress)).toEqual(params.map((_, i) => i + 1));
    expect(params.some((p) => p.params.message.startsWith('tick 0 tick 1 '))).toBe(true);
    for (const n of ns) {
      expect(n.tags).toContainEqual(['e', id]);
      expect(n.tags).toContainEqual(['method', 'notifications/progress']);
      expect(n.tags).toContainEqual(['s', 'agent']);
    }
    // Every progress notification was published before the answer: none arrives after it.
    await sleep(600);
    expect(c.notifications(id)).toHaveLength(ns.length);
    c.close();
  });

  it('a session continues: the second ask in the same session sees the first; another session and another client do not', async () => {
    const { agent, c } = await agentAndClient(FAKE);
    const secret = `m${Math.random().toString(36).slice(2)}`;
    expect((await ask(c, { message: `scenario:text my word is ${secret}`, session: 'one' })).result.ok).toBe(true);
    const probe = `p${Math.random().toString(36).slice(2)}`;
    expect((await ask(c, { message: `scenario:text what was my word? ${probe}`, session: 'one' })).result.ok).toBe(true);
    const other = `o${Math.random().toString(36).slice(2)}`;
    expect((await ask(c, { message: `scenario:text fresh ${other}` })).result.ok).toBe(true);
    const recorded = async (marker: string) =>
      JSON.stringify(((await (await fetch(`${fake}/_requests?contains=${encodeURIComponent(marker)}`)).json()) as Array<{ body: { messages: unknown } }>)[0]!.body.messages);
    expect(await recorded(probe)).toContain(secret);
    expect(await recorded(other)).not.toContain(secret);
    const sessions = await runInDurableObject(stubOf(agent), (_i, state) =>
      state.storage.sql.exec<{ session: string; turns: number }>('SELECT session, turns FROM conversations WHERE sender = ? ORDER BY session', c.k.pk).toArray(),
    );
    expect(sessions).toEqual([
      { session: `dvmcp:${c.k.pk}:default`, turns: 1 },
      { session: `dvmcp:${c.k.pk}:one`, turns: 2 },
    ]);
    c.close();
  });

  it('max_session_turns applies per session: SESSION_LIMIT as isError content', async () => {
    const { c } = await agentAndClient({ limits: { max_session_turns: 1 } });
    expect((await ask(c, { message: 'one', session: 's' })).result.ok).toBe(true);
    expect((await ask(c, { message: 'two', session: 's' })).result).toEqual({
      ok: true,
      value: { content: [{ type: 'text', text: 'SESSION_LIMIT: this session reached 1 turns; start a new session (s tag)' }], isError: true },
    });
    expect((await ask(c, { message: 'three', session: 't' })).result).toEqual({ ok: true, value: { content: [{ type: 'text', text: 'echo: three' }] } });
    c.close();
  });

  it('a gift-wrapped ask is answered gift-wrapped (progress too)', async () => {
    const { c } = await agentAndClient();
    const a = await ask(c, { message: 'wrapped hello' }, { form: 'wrapped' });
    expect(a.event.kind).toBe(1059);
    expect(a.result).toEqual({ ok: true, value: { content: [{ type: 'text', text: 'echo: wrapped hello' }] } });
    const id = a.tags.find((t) => t[0] === 'e')![1]!;
    const progress = c.notifications(id);
    expect(progress.length).toBeGreaterThan(0);
    expect(progress.every((n) => n.event.kind === 1059 && n.tags.some((t) => t[0] === 'method' && t[1] === 'notifications/progress'))).toBe(true);
    const init = await c.call('initialize', { protocolVersion: '2025-03-26', capabilities: {}, clientInfo: { name: 't', version: '1' } }, { form: 'wrapped' });
    expect(init.event.kind).toBe(1059);
    expect(init.tags).toContainEqual(['support_encryption', 'true']);
    c.close();
  });

  it('with encryption off, a gift-wrapped request is not answered', async () => {
    const { c } = await agentAndClient({ dvmcp: { enabled: true, encryption: false } });
    const id = await c.send(c.request('tools/list'), 'wrapped');
    await expect(c.answer(id, 1500)).rejects.toThrow();
    expect((await c.call('tools/list')).result.ok).toBe(true);
    c.close();
  });

  it('a cancel from the client aborts the run (the provider stream is closed) and nothing is answered; a cancel from someone else is ignored', async () => {
    const { agent, c } = await agentAndClient(FAKE);
    const id = await c.send(c.request('tools/call', { name: 'ask', arguments: { message: 'scenario:slow cancel me' } }));
    await notificationsOf(c, id, 2);
    const cancel = (k = c.k) =>
      sign(k, { kind: 21316, content: JSON.stringify({ method: 'notifications/cancelled', params: { requestId: id, reason: 'test' } }), tags: [['p', agent], ['e', id], ['method', 'notifications/cancelled']] });
    const stranger = keys();
    await c.sock.publish(cancel(stranger));
    await sleep(700);
    const before = c.notifications(id).length;
    await sleep(700);
    expect(c.notifications(id).length).toBeGreaterThan(before);
    await c.send(cancel());
    expect(await providerClosed(fake, 'cancel me')).toBe(true);
    await expect(c.answer(id, 1500)).rejects.toThrow();
    c.close();
  });
});

describe('the owner sees an ask as any run (NIP-AO)', () => {
  it('turn_started and session_resolved reach the owner with the request id as run id; the owner’s cancel ends the ask with CANCELLED', async () => {
    const { agent, c } = await agentAndClient(FAKE);
    const owner = ownerRelayClient();
    await owner.connect();
    await owner.authenticate();
    const frames: ObservedFrame[] = [];
    const observer = new Observer({
      ownerSecretKey: TEST_OWNER_SK,
      agents: [agent],
      subscribe: (filters, opts) => owner.subscribe(filters, opts),
      publish: (e) => owner.publish(e),
      onFrame: (f) => frames.push(f),
      onRejected: () => undefined,
    });
    observer.start();
    await sleep(100);
    const id = await c.send(c.request('tools/call', { name: 'ask', arguments: { message: 'scenario:slow watched' } }));
    await notificationsOf(c, id, 2);
    const started = frames.find((f) => f.frame.kind === 'turn_started')?.frame.payload;
    expect(started).toMatchObject({ run_id: id, client: c.k.pk, model: 'gpt-test' });
    expect(await observer.cancelTurn(agent, id)).toMatchObject({ ok: true });
    // Not the client's cancel: the client is told, as a NIP-XX client would be.
    expect((await c.answer(id, 5000)).result).toEqual({ ok: true, value: { content: [{ type: 'text', text: 'CANCELLED: run cancelled' }], isError: true } });
    for (let i = 0; i < 100 && !frames.some((f) => f.frame.kind === 'session_resolved'); i++) await sleep(50);
    const resolved = frames.find((f) => f.frame.kind === 'session_resolved')?.frame.payload;
    expect(resolved).toMatchObject({ run_id: id, outcome: 'CANCELLED' });
    observer.stop();
    owner.close();
    c.close();
  });
});

describe('the agent’s policy and budget apply as for NIP-XX prompts', () => {
  it('a blocked sender gets BLOCKED_SENDER as a JSON-RPC error, once per window; then it is dropped', async () => {
    const k = keys();
    const { c } = await agentAndClient({ block: [k.pk] }, OWNER_SHARD, k);
    expect((await ask(c, { message: 'hi' })).result).toEqual({ ok: false, error: { code: REFUSED_BY_POLICY, message: 'BLOCKED_SENDER: this sender is blocked by the agent’s policy' } });
    const id = await c.send(c.request('tools/list'));
    await expect(c.answer(id, 1000)).rejects.toThrow();
    c.close();
  });

  it('a sender not on the allowlist gets UNAUTHORIZED', async () => {
    const { c } = await agentAndClient({ allow: [keys().pk] });
    expect((await c.call('initialize', {})).result).toEqual({ ok: false, error: { code: REFUSED_BY_POLICY, message: 'UNAUTHORIZED: this sender is not on the agent’s allowlist' } });
    c.close();
  });

  it('prompts_per_minute per sender: the second ask is rate-limited (-32029), another sender still gets an answer', async () => {
    const { agent, c } = await agentAndClient({ limits: { prompts_per_minute: 1 } });
    await freeze(agent, T0);
    expect((await ask(c, { message: 'one' })).result.ok).toBe(true);
    expect((await ask(c, { message: 'two' })).result).toEqual({ ok: false, error: { code: -32029, message: 'rate-limited: at most 1 prompts per minute per sender; retry in 60 s' } });
    // tools/list starts no run: not counted.
    expect((await c.call('tools/list')).result.ok).toBe(true);
    const other = await DvmcpClient.open(agent, OWNER_SHARD);
    expect((await ask(other, { message: 'three' })).result).toEqual({ ok: true, value: { content: [{ type: 'text', text: 'echo: three' }] } });
    other.close();
    c.close();
  });

  it('the daily token budget: once spent, an ask is refused until the UTC day ends', async () => {
    // 100 one-letter words: the ask (its arguments, about 58 tokens by the admission's estimate) and
    // its answer (max_output_tokens 16) fit the budget of 80; echo counts its input as the agent
    // estimates it (about 54) and its answer cut to 16 tokens, so what is left holds no further call.
    const { agent, c } = await agentAndClient({ limits: { max_tokens_per_day: 80, max_output_tokens: 16 } });
    await freeze(agent, T0);
    expect((await ask(c, { message: Array.from({ length: 100 }, () => 'a').join(' ') })).result.ok).toBe(true);
    expect((await ask(c, { message: 'more' })).result).toEqual({
      ok: false,
      error: { code: -32029, message: `rate-limited: this agent reached its model budget for today (UTC); retry in ${12 * 3600} s` },
    });
    c.close();
  });

  it('an ask the budget cannot serve is refused at admission, by its arguments’ estimate: no run, nothing metered', async () => {
    // 1,000 tokens a day; the ask's message alone is about 2,000 by estimate (4 bytes per token).
    const { agent, c } = await agentAndClient({ limits: { max_tokens_per_day: 1_000, max_prompt_bytes: 64_000 } });
    await freeze(agent, T0);
    const refused = await ask(c, { message: 'x'.repeat(8_000) });
    expect(refused.result).toEqual({
      ok: false,
      error: { code: -32029, message: 'rate-limited: this agent reached its model budget for today (UTC); retry in 43200 s' },
    });
    expect(await stubOf(agent).usage()).toEqual([]);
    // A small ask still runs.
    expect((await ask(c, { message: 'small' })).result).toEqual({ ok: true, value: { content: [{ type: 'text', text: 'echo: small' }] } });
    expect(await stubOf(agent).usage()).toHaveLength(1);
    c.close();
  });

  it('asks count toward max_concurrent_runs with NIP-XX runs', async () => {
    const { agent, c } = await agentAndClient({ ...FAKE, limits: { max_concurrent_runs: 1 } });
    await freeze(agent, T0);
    const first = await c.send(c.request('tools/call', { name: 'ask', arguments: { message: 'scenario:slow busy' } }));
    await notificationsOf(c, first, 1);
    const other = await DvmcpClient.open(agent, OWNER_SHARD);
    expect((await ask(other, { message: 'scenario:text hi' })).result).toEqual({
      ok: false,
      error: { code: -32029, message: 'rate-limited: this agent is already running its maximum of 1 concurrent runs; retry in 5 s' },
    });
    other.close();
    const cancel = sign(c.k, { kind: 21316, content: JSON.stringify({ method: 'notifications/cancelled', params: { requestId: first } }), tags: [['p', agent], ['e', first]] });
    await c.send(cancel);
    expect(await providerClosed(fake, 'scenario:slow busy')).toBe(true);
    c.close();
  });
});

describe('the owner’s plan: an ask is admitted on a copy of the owner’s account no older than a prompt’s', () => {
  /** A registered owner on `plan`, an idle agent A with its DVMCP server on, and an agent B a stranger has just used up the others' share on with `message`. */
  async function sharedUsedOnB(plan: string, b: object, message: string, aBody: object = {}): Promise<{ a: string; c: DvmcpClient }> {
    const owner = keys();
    expect((await api(TEST_ADMIN_SK, 'POST', '/api/admin/owners', { pubkey: owner.pk, plan })).status).toBe(201);
    const create = async (body: object): Promise<string> => ((await api(owner.sk, 'POST', '/api/agents', { name: 'plan agent', provider: 'echo', ...body })).json as { pubkey: string }).pubkey;
    const a = await create({ ...ON, ...aBody });
    const agentB = await create(b);
    const path = `/r/${owner.pk}`;
    const c = await DvmcpClient.open(a, path, keys());
    await announcements(a, [31316], (es) => es.length > 0, path);
    const stranger = await NipXxClient.open(agentB, keys(), path);
    await sleep(300);
    const p = stranger.prompt({ ver: 1, message });
    await stranger.send(p);
    expect((await stranger.collect(p.id)).terminal.kind).toBe(25803);
    await sleep(300);
    return { a, c };
  }

  /** The seconds from `t` (ms) to the end of its UTC day, as a refusal's retry_after counts them. */
  const untilMidnight = (t: number): number => Math.max(1, Math.ceil(((Math.floor(t / 86_400_000) + 1) * 86_400_000 - t) / 1000));

  it('plan runs_per_day 2 (others’ share 1) used by a stranger on agent B: a stranger’s ask to agent A, idle for 2 minutes, is refused', async () => {
    const { a, c } = await sharedUsedOnB('two_runs', {}, 'hello');
    // A's copy of the owner's account is 2 minutes old: it holds none of B's runs.
    const later = Date.now() + 120_000;
    await freeze(a, later);
    expect((await ask(c, { message: 'hi' })).result).toEqual({
      ok: false,
      error: { code: -32029, message: `rate-limited: the agent’s owner reached a usage limit for today (UTC); retry in ${untilMidnight(later)} s` },
    });
    expect(await stubOf(a).usage()).toEqual([]);
    c.close();
  });

  it('plan tokens_per_day 200 (others’ share 180), 143 of them spent by a stranger on agent B: a stranger’s ask to agent A, idle for 2 minutes, needing about 73 more, is refused', async () => {
    // 150 one-letter words with 64 tokens of answer: 143 tokens as echo counts them.
    const { a, c } = await sharedUsedOnB('few_tokens', { limits: { max_output_tokens: 64 } }, Array.from({ length: 150 }, () => 'a').join(' '), { limits: { max_output_tokens: 16 } });
    const later = Date.now() + 120_000;
    await freeze(a, later);
    // The ask's arguments are about 57 tokens by estimate, with 16 of answer: within the share on A's old copy (nothing spent), not past B's run.
    expect((await ask(c, { message: 'b'.repeat(200) })).result).toEqual({
      ok: false,
      error: { code: -32029, message: `rate-limited: the agent’s owner reached a usage limit for today (UTC); retry in ${untilMidnight(later)} s` },
    });
    expect(await stubOf(a).usage()).toEqual([]);
    c.close();
  });

  it('plan runs_per_day 2 (others’ share 1), two agents with fresh copies: strangers’ asks to both at once get one run; the other is refused at Accounts', async () => {
    const owner = keys();
    expect((await api(TEST_ADMIN_SK, 'POST', '/api/admin/owners', { pubkey: owner.pk, plan: 'two_runs' })).status).toBe(201);
    const path = `/r/${owner.pk}`;
    const body = { ...ON, provider: 'openai', models: ['fake-slow'], default_model: 'fake-slow' };
    const agents = [0, 1].map(async () => ((await api(owner.sk, 'POST', '/api/agents', { name: 'plan agent', ...body })).json as { pubkey: string }).pubkey);
    const clients = await Promise.all(
      agents.map(async (a) => {
        const c = await DvmcpClient.open(await a, path, keys());
        await announcements(await a, [31316], (es) => es.length > 0, path);
        return c;
      }),
    );
    const results = (await Promise.all(clients.map((c, i) => ask(c, { message: `scenario:slow ${i}` }, { timeoutMs: 40_000 })))).map((r) => r.result);
    const refused = results.filter((r) => !r.ok);
    expect(results.filter((r) => r.ok)).toHaveLength(1);
    expect(refused).toEqual([{ ok: false, error: { code: -32029, message: expect.stringMatching(/^rate-limited: the agent’s owner reached a usage limit for today \(UTC\); retry in \d+ s$/) } }]);
    const runs = await Promise.all(agents.map(async (a) => stubOf(await a).usage()));
    expect(runs.flat()).toHaveLength(1);
    for (const c of clients) c.close();
  }, 60_000);
});
