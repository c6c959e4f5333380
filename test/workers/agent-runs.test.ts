// Hosted agent runs end to end inside workerd: a NIP-XX client talks to an agent created through the
// management API, over the owner's shard, with the offline echo model.
import { env, runInDurableObject } from 'cloudflare:test';
import { describe, expect, inject, it } from 'vitest';
import { ConversationKeyCache, encrypt, getConversationKey } from '../../src/shared/nip44.js';
import { giftWrap, makeRumor } from '../../src/shared/nip59.js';
import { Agent } from '../../workers/agent/agent-do.js';
import { NipXxClient, agentInfo, createTestAgent, dropAgentConnections } from './agent-helpers.js';
import { closeSubscriptionsOf, connect, keys, LIVE_EVENTS_LOST, now } from './helpers.js';
import { TEST_OWNER } from './test-keys.js';

/** Raw NIP-44 content from the client to the agent (for payloads that are not JSON). */
const encryptFor = (c: NipXxClient, text: string) => encrypt(text, getConversationKey(c.k.sk, c.agent));

describe('a run with the echo model', () => {
  it('streams status and contiguous deltas, then exactly one response with usage', async () => {
    const agent = await createTestAgent();
    const c = await NipXxClient.open(agent);
    const p = c.prompt({ ver: 1, message: 'hello there, agent' });
    await c.send(p);
    const run = await c.collect(p.id);
    expect(run.terminal.kind).toBe(25803);
    expect(run.terminal.payload).toMatchObject({ ver: 1, text: 'echo: hello there, agent' });
    expect(run.terminal.payload['usage']).toEqual({ input_tokens: expect.any(Number), output_tokens: expect.any(Number) });
    expect(run.deltas.map((d) => d.seq)).toEqual(run.deltas.map((_, i) => i));
    expect(run.deltas.map((d) => d.text).join('')).toBe('echo: hello there, agent');
    expect(run.status[0]).toMatchObject({ state: 'thinking' });
    expect(run.status.at(-1)).toMatchObject({ state: 'done', progress: 100 });
    const tags = run.terminal.event.tags;
    expect(tags).toContainEqual(['e', p.id, '', 'root']);
    expect(tags).toContainEqual(['s', `sender:${c.k.pk}`]);
    expect(tags).toContainEqual(['encryption', 'nip44']);
    expect(await c.noTerminal(p.id)).toBe(true);
  });

  it('publishes ai.info with tool schemas, a kind 0 and a relay list', async () => {
    const agent = await createTestAgent({ name: 'info test', tools: ['calculator'] });
    const info = await agentInfo(agent);
    expect(info).toBeDefined();
    const s = await connect(`/r/${TEST_OWNER}`);
    const content = JSON.parse(info!.content);
    expect(content).toMatchObject({ ver: 1, encryption: ['nip44'], supported_models: ['echo'], default_model: 'echo', tool_names: ['calculator'], tool_schema_version: 1 });
    expect(content.tool_schemas.calculator.input_schema).toMatchObject({ type: 'object' });
    const profile = (await s.req('p', { kinds: [0], authors: [agent] })).events[0];
    expect(JSON.parse(profile!.content)).toEqual({ name: 'info test' });
    expect((await s.req('r', { kinds: [10002], authors: [agent] })).events[0]?.tags).toEqual([
      ['r', `ws://relay.test/r/${TEST_OWNER}`],
      ['r', 'ws://relay.test/'],
    ]);
  });
});

describe('what ai.info tells everyone', () => {
  it('a private agent (an allow list) publishes its tool names only; no agent publishes web_fetch’s hosts; a public agent still publishes tool schemas', async () => {
    // ai.info goes to every relay of the agent (the public shard too): an owner's internal hosts and
    // its authenticated MCP servers' tool definitions are not for strangers.
    const privateAgent = await createTestAgent({ name: 'private info', allow: [TEST_OWNER], tools: ['web_fetch', 'calculator'], web_fetch_hosts: ['intranet.example'] });
    const hidden = await agentInfo(privateAgent);
    expect(hidden!.content).not.toContain('intranet.example');
    const names = JSON.parse(hidden!.content) as Record<string, unknown>;
    expect(names).toMatchObject({ ver: 1, tool_names: ['web_fetch', 'calculator'], tool_schema_version: 1 });
    expect(names).not.toHaveProperty('tool_schemas');

    const publicAgent = await createTestAgent({ name: 'public info', tools: ['web_fetch'], web_fetch_hosts: ['intranet.example'] });
    const shown = await agentInfo(publicAgent);
    expect(shown!.content).not.toContain('intranet.example');
    expect(JSON.parse(shown!.content).tool_schemas).toEqual({
      web_fetch: {
        schema_version: 1,
        description: 'Fetch a URL over HTTP(S) with GET and return the response body as text (HTML, plain text, JSON or XML). Only hosts the agent’s owner allows can be fetched. max_bytes limits the returned body (at most 262144).',
        requires_approval: false,
        input_schema: expect.objectContaining({ type: 'object' }),
      },
    });
  });
});

describe('prompt validation → the exact NIP-XX error', () => {
  const cases: Array<[string, object, (c: NipXxClient) => ReturnType<NipXxClient['prompt']>, string, RegExp | string]> = [
    ['unsupported encryption', {}, (c) => c.prompt({ ver: 1, message: 'x' }, { tags: [['p', c.agent], ['encryption', 'nip04']] }), 'UNSUPPORTED_ENCRYPTION', 'unsupported encryption "nip04"; this agent supports nip44'],
    ['missing encryption tag', {}, (c) => c.prompt({ ver: 1, message: 'x' }, { tags: [['p', c.agent]] }), 'INVALID_SCHEMA', 'missing encryption tag'],
    [
      'session id too long',
      {},
      (c) => c.prompt({ ver: 1, message: 'x' }, { tags: [['p', c.agent], ['encryption', 'nip44'], ['s', 's'.repeat(40_000)]] }),
      'INVALID_SCHEMA',
      'the session id (s tag) is 40000 characters; at most 256',
    ],
    ['undecryptable content', {}, (c) => c.prompt('not nip44 at all'), 'PARSE_ERROR', /^the prompt could not be decrypted with NIP-44/],
    ['missing message', {}, (c) => c.prompt({ ver: 1 }), 'INVALID_SCHEMA', /^prompt: message: /],
    ['wrong ver', {}, (c) => c.prompt({ ver: 2, message: 'x' }), 'INVALID_SCHEMA', 'prompt: ver: ver must be 1'],
    ['unknown thinking', {}, (c) => c.prompt({ ver: 1, message: 'x', thinking: 'extreme' }), 'INVALID_SCHEMA', 'prompt: thinking: thinking must be low, medium, high or max'],
    ['unknown model', {}, (c) => c.prompt({ ver: 1, message: 'x', model: 'gpt-9' }), 'UNSUPPORTED_MODEL', 'model "gpt-9" is not supported; supported: echo'],
    ['unknown provider', {}, (c) => c.prompt({ ver: 1, message: 'x', provider: 'openai' }), 'UNSUPPORTED_MODEL', 'provider "openai" is not available; this agent uses echo'],
    ['schema version', {}, (c) => c.prompt({ ver: 1, message: 'x', tool_schema_version: 2 }), 'UNSUPPORTED_SCHEMA_VERSION', 'tool_schema_version 2 is not supported; this agent uses 1'],
    ['prompt too large', { limits: { max_prompt_bytes: 10 } }, (c) => c.prompt({ ver: 1, message: 'more than ten bytes' }), 'INVALID_SCHEMA', 'the message is 19 bytes; this agent accepts at most 10 (max_prompt_bytes)'],
    ['not on the allowlist', { allow: ['0'.repeat(63) + '1'] }, (c) => c.prompt({ ver: 1, message: 'x' }), 'UNAUTHORIZED', 'this sender is not on the agent’s allowlist'],
    ['unknown tool', {}, (c) => c.prompt({ ver: 1, message: '/tool nosuchtool {}' }), 'UNSUPPORTED_FEATURE', 'unknown tool "nosuchtool"'],
    ['decrypted prompt is not JSON', {}, (c) => c.prompt(encryptFor(c, 'not json')), 'PARSE_ERROR', 'the decrypted prompt is not JSON'],
    ['tool loop over max_tool_steps', { tools: ['calculator'], limits: { max_tool_steps: 1 } }, (c) => c.prompt({ ver: 1, message: '/tool calculator {"expr":"1+1"}' }), 'TOOL_ERROR', 'the tool loop exceeded 1 steps'],
  ];
  for (const [name, agentBody, make, code, message] of cases) {
    it(`${name} → ${code}`, async () => {
      const agent = await createTestAgent(agentBody);
      const c = await NipXxClient.open(agent);
      const p = make(c);
      await c.send(p);
      const run = await c.collect(p.id);
      expect(run.terminal.kind).toBe(25805);
      expect(run.terminal.payload['code']).toBe(code);
      if (typeof message === 'string') expect(run.terminal.payload['message']).toBe(message);
      else expect(run.terminal.payload['message']).toMatch(message);
    });
  }

  it('fallback_models are honoured', async () => {
    const agent = await createTestAgent();
    const c = await NipXxClient.open(agent);
    const p = c.prompt({ ver: 1, message: 'hi', model: 'gpt-9', fallback_models: ['nope', 'echo'] });
    await c.send(p);
    expect((await c.collect(p.id)).terminal.kind).toBe(25803);
  });

  it('BLOCKED_SENDER for a blocked client', async () => {
    const client = keys();
    const agent = await createTestAgent({ block: [client.pk] });
    const c = await NipXxClient.open(agent, client);
    const p = c.prompt({ ver: 1, message: 'x' });
    await c.send(p);
    expect((await c.collect(p.id)).terminal.payload).toMatchObject({ code: 'BLOCKED_SENDER', message: 'this sender is blocked by the agent’s policy' });
  });

  it('RATE_LIMIT per sender with retry_after', async () => {
    const agent = await createTestAgent({ limits: { prompts_per_minute: 1 } });
    // The limiter's clock, frozen: the window cannot free between the two prompts on a slow machine.
    await runInDurableObject(env.AGENT.get(env.AGENT.idFromName(agent)), (i) => void ((i as Agent).now = () => Date.UTC(2026, 0, 1)));
    const c = await NipXxClient.open(agent);
    const p1 = c.prompt({ ver: 1, message: 'one' });
    await c.send(p1);
    expect((await c.collect(p1.id)).terminal.kind).toBe(25803);
    const p2 = c.prompt({ ver: 1, message: 'two' });
    await c.send(p2);
    expect((await c.collect(p2.id)).terminal.payload).toMatchObject({ code: 'RATE_LIMIT', message: 'at most 1 prompts per minute per sender', retry_after: 60 });
  });

  it('SESSION_LIMIT after max_session_turns', async () => {
    const agent = await createTestAgent({ limits: { max_session_turns: 1 } });
    const c = await NipXxClient.open(agent);
    const p1 = c.prompt({ ver: 1, message: 'one' }, { session: 'session:a' });
    await c.send(p1);
    expect((await c.collect(p1.id)).terminal.kind).toBe(25803);
    const p2 = c.prompt({ ver: 1, message: 'two' }, { session: 'session:a' });
    await c.send(p2);
    expect((await c.collect(p2.id)).terminal.payload).toMatchObject({ code: 'SESSION_LIMIT' });
    const p3 = c.prompt({ ver: 1, message: 'three' }, { session: 'session:b' });
    await c.send(p3);
    expect((await c.collect(p3.id)).terminal.kind).toBe(25803);
  });
});

describe('tools', () => {
  it('runs the calculator in a tool loop with 25804 telemetry', async () => {
    const agent = await createTestAgent({ tools: ['calculator'] });
    const c = await NipXxClient.open(agent);
    const p = c.prompt({ ver: 1, message: '/tool calculator {"expr":"12 * 7"}' });
    await c.send(p);
    const run = await c.collect(p.id);
    expect(run.terminal.payload).toMatchObject({ text: '84' });
    expect(run.tools[0]).toMatchObject({ name: 'calculator', phase: 'start', arguments: { expr: '12 * 7' } });
    expect(run.tools[1]).toMatchObject({ name: 'calculator', phase: 'result', success: true, output: { stdout: '84', exit_code: 0 } });
    expect(run.tools[1]!['duration_ms']).toEqual(expect.any(Number));
    expect(run.status.map((s) => s['state'])).toContain('tool_use');
  });
});

describe('MCP tools', () => {
  it('calls a tool of a configured remote MCP server (server-everything over Streamable HTTP)', async () => {
    const agent = await createTestAgent({ mcp_servers: [{ id: 'everything', url: inject('mcpEverythingUrl') }] });
    const c = await NipXxClient.open(agent);
    const p = c.prompt({ ver: 1, message: '/tool everything__echo {"message":"hi from nostr"}' });
    await c.send(p);
    const run = await c.collect(p.id);
    expect(run.tools[1]).toMatchObject({ name: 'everything__echo', phase: 'result', success: true });
    expect(run.terminal.payload['text']).toBe('Echo: hi from nostr');
  });

  it('keeps the MCP session and tool list across runs', async () => {
    const fixture = inject('toolsFixtureUrl');
    const url = `${fixture}/mcp-expire?bucket=agent-runs&keep=1`;
    const agent = await createTestAgent({ mcp_servers: [{ id: 'kept', url }] });
    const c = await NipXxClient.open(agent);
    const texts: unknown[] = [];
    for (let i = 0; i < 2; i++) {
      const p = c.prompt({ ver: 1, message: '/tool kept__ping {}' });
      await c.send(p);
      texts.push((await c.collect(p.id)).terminal.payload['text']);
    }
    expect(texts[0]).toMatch(/^pong from session-\d+$/);
    expect(texts[1]).toBe(texts[0]);
    // Both runs (one sender) share one session; ai.info's listing has its own: two initializes.
    const stats = (await (await fetch(`${fixture}/mcp-expire/stats?bucket=agent-runs`)).json()) as { initializes: number };
    expect(stats.initializes).toBe(2);
  });
});

describe('durability', () => {
  it('a prompt replayed after a restart produces no second terminal event', async () => {
    const agent = await createTestAgent();
    const c = await NipXxClient.open(agent);
    const p = c.prompt({ ver: 1, message: 'once' });
    await c.send(p);
    expect((await c.collect(p.id)).terminal.kind).toBe(25803);
    const stub = env.AGENT.get(env.AGENT.idFromName(agent));
    await runInDurableObject(stub, async (_i, state) => {
      // A fresh instance over the same storage, as after an eviction, runs its watchdog.
      await new Agent(state, env).alarm();
    });
    // The relay replays the stored prompt to the reconnected agent; publish it again as well.
    const again = await c.sock.publish(p);
    expect(again[3]).toBe('duplicate: already have this event');
    expect(await c.noTerminal(p.id, 800)).toBe(true);
  });

  it('a run interrupted by a restart ends with exactly one INTERNAL_ERROR', async () => {
    const agent = await createTestAgent();
    const c = await NipXxClient.open(agent);
    const stub = env.AGENT.get(env.AGENT.idFromName(agent));
    const runId = 'f'.repeat(63) + '0';
    await runInDurableObject(stub, (_i, state) => {
      state.storage.sql.exec(
        "INSERT INTO runs (id, client, session, wrapped, relay, state, started_at) VALUES (?, ?, ?, 0, ?, 'running', ?)",
        runId,
        c.k.pk,
        `sender:${c.k.pk}`,
        `ws://relay.test/r/${TEST_OWNER}`,
        Date.now(),
      );
    });
    await runInDurableObject(stub, async (_i, state) => new Agent(state, env).alarm());
    const run = await c.collect(runId);
    expect(run.terminal.payload).toMatchObject({ code: 'INTERNAL_ERROR', message: 'the agent restarted during this run; please retry', retry_after: 5 });
    await runInDurableObject(stub, async (_i, state) => new Agent(state, env).alarm());
    expect(await c.noTerminal(runId)).toBe(true);
  });
});

describe('privacy-first profile', () => {
  it('answers a gift-wrapped prompt with gift-wrapped events', async () => {
    const agent = await createTestAgent();
    const c = await NipXxClient.open(agent);
    const { wrap, rumorId } = c.wrappedPrompt({ ver: 1, message: 'secret hello' });
    await c.send(wrap);
    const run = await c.collect(rumorId);
    expect(run.terminal.kind).toBe(25803);
    expect(run.terminal.payload['text']).toBe('echo: secret hello');
    expect(run.terminal.event.kind).toBe(1059);
    expect(run.terminal.event.pubkey).not.toBe(agent);
  });
});

describe('sessions', () => {
  it('keeps history per session (the s tag)', async () => {
    const agent = await createTestAgent();
    const c = await NipXxClient.open(agent);
    for (const message of ['first', 'second']) {
      const p = c.prompt({ ver: 1, message }, { session: 'session:hist' });
      await c.send(p);
      expect((await c.collect(p.id)).terminal.kind).toBe(25803);
    }
    const stub = env.AGENT.get(env.AGENT.idFromName(agent));
    const rows = await runInDurableObject(stub, (_i, state) =>
      state.storage.sql.exec<{ message: string }>("SELECT message FROM history WHERE session = 'session:hist' ORDER BY idx").toArray(),
    );
    expect(rows.map((r) => JSON.parse(r.message).content)).toEqual(['first', 'echo: first', 'second', 'echo: second']);
  });
});


describe('reconnection', () => {
  it('when the relay closes its subscriptions with error: (live events lost on the way), the agent subscribes again and answers the next prompt', async () => {
    const agent = await createTestAgent();
    const c = await NipXxClient.open(agent);
    const warm = c.prompt({ ver: 1, message: 'before' });
    await c.send(warm);
    expect((await c.collect(warm.id)).terminal.kind).toBe(25803);
    // Its prompt subscription and its NIP-AO control subscription on the owner's shard.
    expect(await closeSubscriptionsOf(TEST_OWNER, agent, LIVE_EVENTS_LOST)).toBe(2);
    const next = c.prompt({ ver: 1, message: 'after the CLOSED' });
    await c.send(next);
    const run = await c.collect(next.id, 15_000);
    expect(run.terminal.payload).toMatchObject({ text: 'echo: after the CLOSED' });
  });


  it('after the relay drops its socket, the agent reconnects, replays the prompt it missed, and answers', async () => {
    const agent = await createTestAgent();
    const c = await NipXxClient.open(agent);
    const warm = c.prompt({ ver: 1, message: 'before' });
    await c.send(warm);
    expect((await c.collect(warm.id)).terminal.kind).toBe(25803);
    const dropped = await dropAgentConnections(agent);
    expect(dropped).toBe(1);
    // Published while the agent is away: stored (NIP-XX durable), replayed after it re-authenticates.
    const missed = c.prompt({ ver: 1, message: 'while you were away' });
    await c.send(missed);
    const run = await c.collect(missed.id, 15_000);
    expect(run.terminal.payload).toMatchObject({ text: 'echo: while you were away' });
  });
});

describe('stale prompts', () => {
  const DAY = 86_400;
  const runIds = (agent: string) =>
    runInDurableObject(env.AGENT.get(env.AGENT.idFromName(agent)), (_i, state) => state.storage.sql.exec<{ id: string }>('SELECT id FROM runs').toArray().map((r) => r.id));

  it('an agent idle for 8 days resubscribes from its old cursor: the prompt stored 8 days ago is not run, the one sent meanwhile is', async () => {
    const agent = await createTestAgent();
    const c = await NipXxClient.open(agent);
    const warm = c.prompt({ ver: 1, message: 'before' });
    await c.send(warm);
    expect((await c.collect(warm.id)).terminal.kind).toBe(25803);
    // Stored on the relay 8 days ago (the live subscription's since keeps it from the agent now).
    const stale = c.prompt({ ver: 1, message: 'eight days ago' }, { created_at: now() - 8 * DAY });
    await c.send(stale);
    // The agent's state after 8 idle days: the cursor at the last prompt it saw, its seen id and run pruned.
    await runInDurableObject(env.AGENT.get(env.AGENT.idFromName(agent)), (_i, state) => {
      state.storage.sql.exec('UPDATE cursor SET since = ?', stale.created_at);
    });
    expect(await dropAgentConnections(agent)).toBe(1);
    const fresh = c.prompt({ ver: 1, message: 'today' });
    await c.send(fresh);
    // Both come in the answer to the agent's new REQ; the fresh one's answer arrives after the stale one was handled.
    expect((await c.collect(fresh.id, 15_000)).terminal.payload).toMatchObject({ text: 'echo: today' });
    expect(await runIds(agent)).not.toContain(stale.id);
    expect(await c.noTerminal(stale.id)).toBe(true);
  });

  it('a gift-wrapped prompt is dated by its rumor: a rumor 8 days old in a recent wrap is not run; a fresh rumor (wrap backdated up to 2 days) is', async () => {
    const agent = await createTestAgent();
    const c = await NipXxClient.open(agent);
    const cache = new ConversationKeyCache(4);
    const wrapped = (message: string, created_at: number) => {
      const rumor = makeRumor({ pubkey: c.k.pk, kind: 25802, created_at, tags: [['p', agent], ['encryption', 'nip44']], content: encryptFor(c, JSON.stringify({ ver: 1, message })) });
      return { rumor, wrap: giftWrap(rumor, c.k.sk, agent, cache) };
    };
    const stale = wrapped('eight days ago', now() - 8 * DAY);
    await c.send(stale.wrap);
    const fresh = wrapped('today', now());
    await c.send(fresh.wrap);
    expect((await c.collect(fresh.rumor.id, 15_000)).terminal.payload).toMatchObject({ text: 'echo: today' });
    expect(await runIds(agent)).not.toContain(stale.rumor.id);
    expect(await c.noTerminal(stale.rumor.id)).toBe(true);
  });
});
