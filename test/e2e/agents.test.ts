// Hosted agents end to end from a Node client through the relay under `wrangler dev` (the second
// instance of test/e2e/global-setup.ts, whose OpenAI / Anthropic providers point at the fake
// provider): agents created through the NIP-98 management API, then prompted over `ws` on the
// owner's shard as a NIP-XX client — a full run, a multi-turn session, a tool loop watched by the
// owner over NIP-AO, a cancel racing the response, every error code the agent produces, and the
// gift-wrapped (NIP-59) profile.
import { afterEach, describe, expect, inject, it } from 'vitest';
import { checkIdAndSignature, type NostrEvent } from '../../src/shared/event.js';
import { ConversationKeyCache, decrypt, encrypt } from '../../src/shared/nip44.js';
import { giftWrap, makeRumor, unwrap } from '../../src/shared/nip59.js';
import { makeHttpAuthHeader } from '../../src/shared/nip98.js';
import { Observer, type ObservedFrame } from '../../src/shared/ao-observer.js';
import { coalescedItems } from '../../src/shared/ao-payloads.js';
import type { RelayClient } from '../../src/shared/relay-client.js';
import { nobleVerifier } from '../../src/shared/verify.js';
import { E2E_OWNER, E2E_OWNER_SK } from './e2e-keys.js';
import { clientFactory, newKey, nowSeconds, signed, signedApi, signer, sleep, waitFor, type Key } from './helpers.js';

/** How long a hosted agent's response to a client other than its owner is kept (NIP-40): workers/agent/outbox.ts RESPONSE_TTL_SECONDS. */
const RESPONSE_TTL_SECONDS = 86_400;

const httpUrl = inject('agentHttpUrl');
const relayUrl = inject('agentRelayUrl');
const fakeUrl = inject('fakeProviderUrl');
const ownerShard = `${relayUrl}/r/${E2E_OWNER}`;

const clients = clientFactory();
afterEach(() => clients.closeAll());

const cache = new ConversationKeyCache(256);
const verify = (e: NostrEvent): boolean => checkIdAndSignature(e, nobleVerifier).ok;

// ---- management API (NIP-98) ----

const api = signedApi(httpUrl, E2E_OWNER_SK);


const FAKE_MODELS = ['fake-slow', 'fake-429', 'fake-overloaded', 'fake-truncated', 'fake-empty'];

async function createAgent(body: Record<string, unknown> = {}): Promise<string> {
  const r = await api('POST', '/api/agents', { name: 'e2e agent', provider: 'echo', ...body });
  expect(r.status, JSON.stringify(r.json)).toBe(201);
  const created = r.json as { pubkey: string; owner: string; relays: string[] };
  expect(created.owner).toBe(E2E_OWNER);
  expect(created.relays).toEqual([ownerShard, `${relayUrl}/`]);
  return created.pubkey;
}

const openAiAgent = (body: Record<string, unknown> = {}) => createAgent({ provider: 'openai', models: ['gpt-e2e', ...FAKE_MODELS], ...body });

// ---- the fake provider's record ----

interface Recorded {
  api: string;
  path: string;
  headers: Record<string, string>;
  body: { model?: string; stream?: boolean; messages?: Array<{ role: string; content: unknown; tool_calls?: unknown }> };
  clientClosed: boolean;
}

async function recorded(contains: string): Promise<Recorded[]> {
  const res = await fetch(`${fakeUrl}/_requests?contains=${encodeURIComponent(contains)}`);
  return (await res.json()) as Recorded[];
}

const marker = (): string => `m${Math.random().toString(36).slice(2, 10)}`;

// ---- a NIP-XX client over `ws` ----

interface Opened {
  /** The event as received (a gift wrap for the privacy-first profile). */
  event: NostrEvent;
  /** The protocol event's kind, tags and author (the rumor's when wrapped). */
  kind: number;
  tags: string[][];
  pubkey: string;
  payload: Record<string, unknown>;
}

interface Run {
  status: Array<Record<string, unknown>>;
  deltas: Array<{ text: string; seq: number }>;
  tools: Array<Record<string, unknown>>;
  terminal: Opened;
  all: Opened[];
}

const TERMINAL = new Set([25803, 25805]);
const rootOf = (o: Opened): string | undefined => o.tags.find((t) => t[0] === 'e' && t[3] === 'root')?.[1];

class NipXxClient {
  /** Every event the agent sent this client, decrypted, in arrival order. */
  readonly received: Opened[] = [];
  /** Events from the agent this client could not open (a failure of the agent's encryption). */
  readonly problems: string[] = [];

  private constructor(
    readonly key: Key,
    readonly agent: string,
    readonly relay: RelayClient,
  ) {}

  /** Connects to the owner's shard, authenticates (NIP-42) as `key`, then subscribes to what the agent sends it. */
  static async open(agent: string, key: Key = newKey()): Promise<NipXxClient> {
    const { client } = clients.create(ownerShard, { auth: signer(key), verify, reconnect: false });
    const c = new NipXxClient(key, agent, client);
    expect(await client.connect()).toMatchObject({ ok: true });
    expect(await client.authenticate()).toMatchObject({ ok: true });
    expect(client.authenticatedAs).toBe(key.pk);
    const subscribed = (filter: Parameters<RelayClient['subscribe']>[0][number]) =>
      new Promise<void>((resolve, reject) => {
        client.subscribe([filter], {
          onEvent: (e) => c.take(e),
          onEose: () => resolve(),
          onClosed: (m) => reject(new Error(`subscription closed: ${m}`)),
        });
      });
    await Promise.all([
      subscribed({ kinds: [25800, 25801, 25803, 25804, 25805], '#p': [key.pk], since: nowSeconds() - 5 }),
      subscribed({ kinds: [1059, 21059], '#p': [key.pk], since: nowSeconds() - 3 * 24 * 3600 }),
    ]);
    return c;
  }

  private take(e: NostrEvent): void {
    let inner: { kind: number; tags: string[][]; content: string; pubkey: string } = e;
    if (e.kind === 1059 || e.kind === 21059) {
      const u = unwrap(e, this.key.sk, cache, nobleVerifier);
      if (!u.ok) return void this.problems.push(`cannot unwrap ${e.id}: ${u.error}`);
      inner = u.value.rumor;
    }
    if (inner.pubkey !== this.agent) return;
    const text = decrypt(inner.content, cache.get(this.key.sk, this.agent));
    if (!text.ok) return void this.problems.push(`cannot decrypt kind ${inner.kind}: ${text.error}`);
    this.received.push({ event: e, kind: inner.kind, tags: inner.tags, pubkey: inner.pubkey, payload: JSON.parse(text.value) as Record<string, unknown> });
  }

  encrypt(text: string): string {
    return encrypt(text, cache.get(this.key.sk, this.agent));
  }

  /** A plain 25802 prompt; `payload` is JSON-encoded and encrypted unless it is a string (raw content). */
  prompt(payload: object | string, opts: { tags?: string[][]; session?: string } = {}): NostrEvent {
    const content = typeof payload === 'string' ? payload : this.encrypt(JSON.stringify(payload));
    const tags = opts.tags ?? [['p', this.agent], ['encryption', 'nip44'], ...(opts.session ? [['s', opts.session]] : [])];
    return signed(this.key, 25802, content, tags);
  }

  cancel(runId: string): NostrEvent {
    return signed(this.key, 25806, this.encrypt(JSON.stringify({ ver: 1, reason: 'user_cancel' })), [
      ['p', this.agent],
      ['e', runId, '', 'root'],
      ['encryption', 'nip44'],
    ]);
  }

  /** A gift-wrapped prompt (NIP-59): the rumor's id is the run id. */
  wrappedPrompt(payload: object): { wrap: NostrEvent; rumorId: string } {
    const rumor = makeRumor({
      pubkey: this.key.pk,
      kind: 25802,
      created_at: nowSeconds(),
      tags: [['p', this.agent], ['encryption', 'nip44']],
      content: this.encrypt(JSON.stringify(payload)),
    });
    return { wrap: giftWrap(rumor, this.key.sk, this.agent, cache), rumorId: rumor.id };
  }

  /** A gift-wrapped cancel (21059: 25806 is ephemeral). */
  wrappedCancel(runId: string): NostrEvent {
    const rumor = makeRumor({
      pubkey: this.key.pk,
      kind: 25806,
      created_at: nowSeconds(),
      tags: [['p', this.agent], ['e', runId, '', 'root'], ['encryption', 'nip44']],
      content: this.encrypt(JSON.stringify({ ver: 1, reason: 'user_cancel' })),
    });
    return giftWrap(rumor, this.key.sk, this.agent, cache);
  }

  async send(e: NostrEvent): Promise<void> {
    const r = await this.relay.publish(e);
    expect(r, `publishing kind ${e.kind}`).toMatchObject({ ok: true });
  }

  of(runId: string): Opened[] {
    return this.received.filter((o) => rootOf(o) === runId);
  }

  terminals(runId: string): Opened[] {
    return this.of(runId).filter((o) => TERMINAL.has(o.kind));
  }

  /** Waits for the run's terminal event and sorts what came before it. */
  async collect(runId: string, timeoutMs = 15_000): Promise<Run> {
    await waitFor(() => this.terminals(runId).length > 0 || this.problems.length > 0, `the terminal event of ${runId}`, timeoutMs);
    expect(this.problems).toEqual([]);
    const all = this.of(runId);
    const i = all.findIndex((o) => TERMINAL.has(o.kind));
    const before = all.slice(0, i);
    return {
      status: before.filter((o) => o.kind === 25800).map((o) => o.payload),
      deltas: before.filter((o) => o.kind === 25801).map((o) => o.payload as { text: string; seq: number }),
      tools: before.filter((o) => o.kind === 25804).map((o) => o.payload),
      terminal: all[i]!,
      all,
    };
  }

  /** Sends a prompt and returns its run. */
  async run(p: NostrEvent): Promise<Run> {
    await this.send(p);
    return this.collect(p.id);
  }

  /** The number of terminal events for `runId` received after `ms` more of waiting. */
  async terminalCountAfter(runId: string, ms: number): Promise<number> {
    await sleep(ms);
    return this.terminals(runId).length;
  }
}

/** What the relay stores and serves for `filter`, read on a fresh connection (authenticated as `key` when given). */
async function stored(key: Key | undefined, filter: Parameters<RelayClient['subscribe']>[0][number]): Promise<{ events: NostrEvent[]; closed?: string }> {
  const { client } = clients.create(ownerShard, { ...(key ? { auth: signer(key), authOn: 'demand' as const } : {}), reconnect: false });
  if (key) expect(await client.authenticate()).toMatchObject({ ok: true });
  const events: NostrEvent[] = [];
  const closed = await new Promise<string | undefined>((resolve) => {
    const sub = client.subscribe([filter], {
      onEvent: (e) => events.push(e),
      onEose: () => {
        sub.close();
        resolve(undefined);
      },
      onClosed: (m) => resolve(m),
    });
  });
  client.close();
  return closed === undefined ? { events } : { events, closed };
}

/** The terminal events stored for a plain run, as the client (authenticated) reads them. */
const storedTerminals = async (key: Key, runId: string): Promise<NostrEvent[]> => (await stored(key, { kinds: [25803, 25805], '#e': [runId] })).events;

/** The owner watching its agents' telemetry (NIP-AO) on its shard, authenticated as the owner. */
async function watchAsOwner(agent: string): Promise<{ observer: Observer; frames: ObservedFrame[]; rejected: string[]; closed: string[] }> {
  const { client: owner } = clients.create(ownerShard, { auth: signer({ sk: E2E_OWNER_SK, pk: E2E_OWNER }), reconnect: false });
  expect(await owner.authenticate()).toMatchObject({ ok: true });
  const frames: ObservedFrame[] = [];
  const rejected: string[] = [];
  const closed: string[] = [];
  let live = false;
  const observer = new Observer({
    ownerSecretKey: E2E_OWNER_SK,
    agents: [agent],
    // The REQ is live once the relay has answered it with EOSE (there is no history of 24200).
    subscribe: (filters, opts) => owner.subscribe(filters, { ...opts, onEose: () => (live = true) }),
    publish: (e) => owner.publish(e),
    onFrame: (f) => frames.push(f),
    onRejected: (r) => rejected.push(r),
    onClosed: (m) => closed.push(m),
  });
  observer.start();
  await waitFor(() => live || closed.length > 0, 'the EOSE of the observer subscription');
  expect(closed).toEqual([]);
  return { observer, frames, rejected, closed };
}

const FAKE_TEXT = 'Hello from the fake provider ✓';

// ---------------------------------------------------------------------------------------------

describe('management API from Node (NIP-98)', () => {
  it('creates, reads and lists an agent; refuses a replayed authorization', async () => {
    // EDGESTR_ENV=test: no demo agent on this instance.
    expect(await (await fetch(`${httpUrl}/health`)).json()).toEqual({ ok: true, version: expect.any(String) });
    const agent = await openAiAgent({ name: 'listed' });
    const one = await api('GET', `/api/agents/${agent}`);
    expect(one.status).toBe(200);
    expect(one.json).toMatchObject({ pubkey: agent, owner: E2E_OWNER, provider: 'openai', name: 'listed', origin: httpUrl });
    expect(JSON.stringify(one.json)).not.toMatch(/sealed|secret/i);
    const list = await api('GET', '/api/agents');
    expect((list.json as { agents: Array<{ pubkey: string }> }).agents.map((a) => a.pubkey)).toContain(agent);
    // The same Authorization header twice: the second is a replay.
    const url = `${httpUrl}/api/agents/${agent}`;
    const header = makeHttpAuthHeader(E2E_OWNER_SK, url, 'GET');
    expect((await fetch(url, { headers: { Authorization: header } })).status).toBe(200);
    const replay = await fetch(url, { headers: { Authorization: header } });
    expect(replay.status).toBe(401);
    expect(await replay.json()).toEqual({ error: expect.stringMatching(/^NIP-98: /) });
    // A key not in EDGESTR_OWNERS may not create agents.
    const stranger = newKey();
    const body = JSON.stringify({ name: 'not mine', provider: 'echo' });
    const create = `${httpUrl}/api/agents`;
    const refused = await fetch(create, { method: 'POST', headers: { Authorization: makeHttpAuthHeader(stranger.sk, create, 'POST', body), 'Content-Type': 'application/json' }, body });
    expect(refused.status).toBe(403);
  });
});

describe.each(['openai', 'anthropic'] as const)('a full run with the %s provider', (provider) => {
  it('status → contiguous deltas → exactly one 25803 with usage', async () => {
    const model = provider === 'openai' ? 'gpt-e2e' : 'claude-e2e';
    const agent = await createAgent({ provider, models: [model] });
    const c = await NipXxClient.open(agent);
    const m = marker();
    const p = c.prompt({ ver: 1, message: `tell me something ${m}` });
    const run = await c.run(p);

    expect(run.terminal.kind).toBe(25803);
    expect(run.terminal.event.pubkey).toBe(agent);
    expect(run.terminal.payload).toEqual({ ver: 1, text: FAKE_TEXT, timestamp: expect.any(Number), usage: { input_tokens: 21, output_tokens: 9 } });
    expect(Math.abs(Number(run.terminal.payload['timestamp']) - nowSeconds())).toBeLessThanOrEqual(5);
    // A response to a client other than the owner expires (NIP-40) a day after it is written (workers/agent/outbox.ts).
    expect(run.terminal.tags).toEqual([
      ['p', c.key.pk],
      ['e', p.id, '', 'root'],
      ['s', `sender:${c.key.pk}`],
      ['encryption', 'nip44'],
      ['expiration', String(run.terminal.event.created_at + RESPONSE_TTL_SECONDS)],
    ]);
    expect(run.deltas.length).toBeGreaterThan(0);
    expect(run.deltas.map((d) => d.seq)).toEqual(run.deltas.map((_, i) => i));
    expect(run.deltas.map((d) => d.text).join('')).toBe(FAKE_TEXT);
    expect(run.status[0]).toMatchObject({ ver: 1, state: 'thinking', progress: 0 });
    expect(run.status.at(-1)).toMatchObject({ state: 'done', progress: 100 });
    // The fake provider saw the request the deployment was configured for.
    const [req, ...more] = await recorded(m);
    expect(more).toEqual([]);
    expect(req!.api).toBe(provider);
    expect(req!.body).toMatchObject({ model, stream: true });
    if (provider === 'openai') expect(req!.headers['authorization']).toBe('Bearer sk-fake');
    else expect(req!.headers['x-api-key']).toBe('sk-ant-fake');
    // The same prompt again is a duplicate for the relay, and the agent does not run it twice.
    expect(await c.relay.publish(p)).toEqual({ ok: true, message: 'duplicate: already have this event' });
    expect(await c.terminalCountAfter(p.id, 300)).toBe(1);
    expect((await storedTerminals(c.key, p.id)).map((e) => e.kind)).toEqual([25803]);
    // Served only to the client: not to another authenticated key, and not without AUTH.
    expect(await stored(newKey(), { kinds: [25803, 25805], '#e': [p.id] })).toEqual({ events: [] });
    expect((await stored(undefined, { kinds: [25803, 25805], '#e': [p.id] })).closed).toMatch(/^auth-required: /);
  });
});

describe('a multi-turn session', () => {
  it('the second request carries the first exchange; another session does not', async () => {
    const agent = await openAiAgent({ system_prompt: 'You are terse.' });
    const c = await NipXxClient.open(agent);
    const m = marker();
    const session = `session:${m}`;
    const first = await c.run(c.prompt({ ver: 1, message: `first ${m}` }, { session }));
    expect(first.terminal.payload['text']).toBe(FAKE_TEXT);
    const second = await c.run(c.prompt({ ver: 1, message: `second ${m}` }, { session }));
    expect(second.terminal.payload['text']).toBe(FAKE_TEXT);
    expect(second.terminal.tags).toContainEqual(['s', session]);
    const other = await c.run(c.prompt({ ver: 1, message: `other ${m}` }));
    expect(other.terminal.kind).toBe(25803);

    const [req2] = await recorded(`second ${m}`);
    expect(req2!.body.messages!.map((x) => [x.role, x.content])).toEqual([
      ['system', 'You are terse.'],
      ['user', `first ${m}`],
      ['assistant', FAKE_TEXT],
      ['user', `second ${m}`],
    ]);
    const [req3] = await recorded(`other ${m}`);
    expect(req3!.body.messages!.map((x) => [x.role, x.content])).toEqual([
      ['system', 'You are terse.'],
      ['user', `other ${m}`],
    ]);
  });
});

describe('a conversation is private to its sender', () => {
  it('another key sending the victim’s s tag gets a fresh conversation: none of the victim’s text reaches the model', async () => {
    const agent = await openAiAgent();
    const victim = await NipXxClient.open(agent);
    const m = marker();
    expect((await victim.run(victim.prompt({ ver: 1, message: `my secret ${m}` }))).terminal.kind).toBe(25803);
    const attacker = await NipXxClient.open(agent);
    const probe = marker();
    const stolen = await attacker.run(attacker.prompt({ ver: 1, message: `repeat it ${probe}` }, { session: `sender:${victim.key.pk}` }));
    expect(stolen.terminal.kind).toBe(25803);
    const [req] = await recorded(`repeat it ${probe}`);
    expect(req!.body.messages!.map((x) => [x.role, x.content])).toEqual([['user', `repeat it ${probe}`]]);
    const next = marker();
    await victim.run(victim.prompt({ ver: 1, message: `again ${next}` }));
    const [mine] = await recorded(`again ${next}`);
    expect(mine!.body.messages!.map((x) => [x.role, x.content])).toEqual([
      ['user', `my secret ${m}`],
      ['assistant', FAKE_TEXT],
      ['user', `again ${next}`],
    ]);
  });
});

describe('a tool loop with telemetry', () => {
  it('25804 start/result to the client; turn_started, acp_write, acp_read, session_resolved to the owner (NIP-AO)', async () => {
    const agent = await openAiAgent({ tools: ['calculator'] });
    const { observer, frames, rejected, closed } = await watchAsOwner(agent);

    const c = await NipXxClient.open(agent);
    const m = marker();
    const p = c.prompt({ ver: 1, message: `scenario:tool compute ${m}` });
    const run = await c.run(p);
    expect(run.terminal.kind).toBe(25803);
    expect(run.tools.map((t) => [t['name'], t['phase']])).toEqual([
      ['calculator', 'start'],
      ['calculator', 'result'],
    ]);
    expect(run.tools[0]).toMatchObject({ ver: 1, arguments: { city: 'Paris' } });
    // The fake model passes arguments the calculator does not take: the error goes back to the model.
    expect(run.tools[1]).toMatchObject({ success: false, duration_ms: expect.any(Number) });
    expect(String(run.terminal.payload['text'])).toMatch(/^Tool result: error: /);
    const toolEvents = run.all.filter((o) => o.kind === 25804);
    expect(toolEvents.map((o) => o.tags.filter((t) => t[0] === 'tool' || t[0] === 'phase'))).toEqual([
      [['tool', 'calculator'], ['phase', 'start']],
      [['tool', 'calculator'], ['phase', 'result']],
    ]);
    expect(run.status.map((s) => s['state'])).toContain('tool_use');
    // Two provider requests: the second carries the tool call and its result.
    const reqs = await recorded(m);
    expect(reqs).toHaveLength(2);
    expect(reqs[1]!.body.messages!.map((x) => x.role)).toEqual(['user', 'assistant', 'tool']);

    await waitFor(() => frames.some((f) => f.frame.kind === 'session_resolved'), 'session_resolved', 10_000);
    const mine = frames.filter((f) => f.frame.channelId === p.id);
    expect(mine).toHaveLength(frames.length);
    expect(frames.every((f) => f.agent === agent && f.frame.turnId === p.id && f.frame.sessionId === `sender:${c.key.pk}`)).toBe(true);
    const kinds = frames.map((f) => f.frame.kind);
    expect(kinds[0]).toBe('turn_started');
    expect(kinds.at(-1)).toBe('session_resolved');
    expect(kinds.filter((k) => k === 'acp_write')).toHaveLength(2);
    expect(kinds).toContain('acp_read');
    expect(frames[0]!.frame.payload).toEqual({ run_id: p.id, model: 'gpt-e2e', client: c.key.pk });
    const writes = frames.filter((f) => f.frame.kind === 'acp_write');
    expect(JSON.stringify(writes[0]!.frame.payload['request'])).toContain(`compute ${m}`);
    expect(JSON.stringify(writes[1]!.frame.payload['request'])).toContain('"role":"tool"');
    // acp_read carries the raw provider stream (batches of chunks are coalesced by the emitter).
    const raw = frames
      .filter((f) => f.frame.kind === 'acp_read')
      .flatMap((f) => coalescedItems(f.frame.payload))
      .map((item) => String((item as { data?: unknown }).data))
      .join('');
    expect(raw).toContain('"content":"Tool result: "');
    expect(raw).toContain('"finish_reason":"tool_calls"');
    expect(frames.at(-1)!.frame.payload).toMatchObject({ run_id: p.id, outcome: 'response', usage: { provider: 'openai', tool_calls: 1 } });
    const seqs = frames.map((f) => f.frame.seq);
    expect(seqs).toEqual([...seqs].sort((a, b) => a - b));
    expect(observer.stats.gaps).toBe(0);
    expect(rejected).toEqual([]);
    expect(closed).toEqual([]);
    observer.stop();
  });
});

describe('a cancel racing the response', () => {
  it('25806 after the first delta → exactly one CANCELLED; a second cancel is a no-op', async () => {
    const agent = await openAiAgent();
    const c = await NipXxClient.open(agent);
    const m = marker();
    const p = c.prompt({ ver: 1, message: `long please ${m}`, model: 'fake-slow' });
    await c.send(p);
    await waitFor(() => c.of(p.id).some((o) => o.kind === 25801), 'the first delta', 10_000);
    await c.send(c.cancel(p.id));
    await c.send(c.cancel(p.id)); // a duplicate, racing the first: ignored
    const run = await c.collect(p.id);
    expect(run.terminal.kind).toBe(25805);
    expect(run.terminal.payload).toEqual({ ver: 1, code: 'CANCELLED', message: 'run cancelled' });
    expect(run.deltas.length).toBeGreaterThan(0);
    expect(run.deltas.map((d) => d.seq)).toEqual(run.deltas.map((_, i) => i));
    // The provider request was aborted: the fake provider sees the client go away mid-stream.
    let reqs = await recorded(m);
    for (const deadline = Date.now() + 3_000; !reqs[0]?.clientClosed && Date.now() < deadline; reqs = await recorded(m)) await sleep(50);
    expect(reqs.map((r) => r.clientClosed)).toEqual([true]);
    await c.send(c.cancel(p.id)); // a cancel for a finished run: ignored
    expect(await c.terminalCountAfter(p.id, 600)).toBe(1);
    expect(c.of(p.id).filter((o) => o.kind === 25801).length).toBe(run.deltas.length);
    expect((await storedTerminals(c.key, p.id)).map((e) => e.kind)).toEqual([25805]);
  });
});

describe('the owner cancels a run with a NIP-AO control frame', () => {
  it('cancel_turn from the owner ends the client\'s run with exactly one CANCELLED', async () => {
    const agent = await openAiAgent();
    const { observer, frames, rejected } = await watchAsOwner(agent);
    const c = await NipXxClient.open(agent);
    const p = c.prompt({ ver: 1, message: 'watch me', model: 'fake-slow' });
    await c.send(p);
    await waitFor(() => frames.some((f) => f.frame.kind === 'acp_read' && f.frame.channelId === p.id), 'an acp_read frame', 10_000);
    expect(await observer.cancelTurn(agent, p.id)).toMatchObject({ ok: true });
    const run = await c.collect(p.id);
    expect(run.terminal.payload).toEqual({ ver: 1, code: 'CANCELLED', message: 'run cancelled' });
    await waitFor(() => frames.some((f) => f.frame.kind === 'session_resolved'), 'session_resolved');
    expect(frames.find((f) => f.frame.kind === 'session_resolved')!.frame.payload).toMatchObject({
      run_id: p.id,
      outcome: 'CANCELLED',
      usage: { provider: 'openai', tool_calls: 0, input_tokens: expect.any(Number), output_tokens: expect.any(Number), duration_ms: expect.any(Number) },
      owner_usage: { plan: 'default', limits: {} },
    });
    expect(rejected).toEqual([]);
    expect(await c.terminalCountAfter(p.id, 300)).toBe(1);
    observer.stop();
  });
});

// ---------------------------------------------------------------------------------------------

type Make = (c: NipXxClient) => NostrEvent;
interface ErrorCase {
  name: string;
  agent: Record<string, unknown>;
  /** Prompts sent (and answered) before the one that fails. */
  before?: Make[];
  make: Make;
  expected: Record<string, unknown>;
}

const msg = (message: string, extra: object = {}): Make => (c) => c.prompt({ ver: 1, message, ...extra });
const openai = { provider: 'openai', models: ['gpt-e2e', ...FAKE_MODELS] };
// What a client is told about provider failures: a generic message (the provider's own text goes
// to the owner over NIP-AO only, see workers/agent/runtime.ts PROVIDER_MESSAGES).
const PROVIDER_RATE_LIMITED = 'the model provider is rate limiting this agent; retry later';
const PROVIDER_UNAVAILABLE = 'the model provider is unavailable; retry later';

const ERROR_CASES: ErrorCase[] = [
  {
    name: 'an encryption other than nip44',
    agent: {},
    make: (c) => c.prompt({ ver: 1, message: 'x' }, { tags: [['p', c.agent], ['encryption', 'nip04']] }),
    expected: { code: 'UNSUPPORTED_ENCRYPTION', message: 'unsupported encryption "nip04"; this agent supports nip44' },
  },
  {
    name: 'no encryption tag',
    agent: {},
    make: (c) => c.prompt({ ver: 1, message: 'x' }, { tags: [['p', c.agent]] }),
    expected: { code: 'INVALID_SCHEMA', message: 'missing encryption tag' },
  },
  { name: 'no message', agent: {}, make: (c) => c.prompt({ ver: 1 }), expected: { code: 'INVALID_SCHEMA', message: 'prompt: message: message must be a string' } },
  { name: 'ver 2', agent: {}, make: msg('x', { ver: 2 }), expected: { code: 'INVALID_SCHEMA', message: 'prompt: ver: ver must be 1' } },
  {
    name: 'a prompt over max_prompt_bytes',
    agent: { limits: { max_prompt_bytes: 10 } },
    make: msg('more than ten bytes'),
    expected: { code: 'INVALID_SCHEMA', message: 'the message is 19 bytes; this agent accepts at most 10 (max_prompt_bytes)' },
  },
  {
    name: 'content that is not NIP-44',
    agent: {},
    make: (c) => c.prompt('not nip44 at all'),
    expected: { code: 'PARSE_ERROR', message: expect.stringMatching(/^the prompt could not be decrypted with NIP-44 \(.+\)$/) },
  },
  { name: 'a decrypted prompt that is not JSON', agent: {}, make: (c) => c.prompt(c.encrypt('not json')), expected: { code: 'PARSE_ERROR', message: 'the decrypted prompt is not JSON' } },
  { name: 'an unknown model', agent: openai, make: msg('x', { model: 'gpt-9' }), expected: { code: 'UNSUPPORTED_MODEL', message: `model "gpt-9" is not supported; supported: ${['gpt-e2e', ...FAKE_MODELS].join(', ')}` } },
  {
    name: 'another provider',
    agent: {},
    make: msg('x', { provider: 'openai' }),
    expected: { code: 'UNSUPPORTED_MODEL', message: 'provider "openai" is not available; this agent uses echo' },
  },
  {
    name: 'tool_schema_version 2',
    agent: {},
    make: msg('x', { tool_schema_version: 2 }),
    expected: { code: 'UNSUPPORTED_SCHEMA_VERSION', message: 'tool_schema_version 2 is not supported; this agent uses 1' },
  },
  {
    name: 'a sender not on the allowlist',
    agent: { allow: ['0'.repeat(63) + '1'] },
    make: msg('x'),
    expected: { code: 'UNAUTHORIZED', message: 'this sender is not on the agent’s allowlist' },
  },
  {
    name: 'a sender over prompts_per_minute',
    agent: { limits: { prompts_per_minute: 1 } },
    before: [msg('one')],
    make: msg('two'),
    // retry_after: seconds until the sender's window frees (60 at most; exact values are checked on an
    // injected clock in test/workers/agent-trust.test.ts).
    expected: { code: 'RATE_LIMIT', message: 'at most 1 prompts per minute per sender', retry_after: expect.any(Number) },
  },
  { name: 'the provider answering 429', agent: openai, make: msg('hi', { model: 'fake-429' }), expected: { code: 'RATE_LIMIT', message: PROVIDER_RATE_LIMITED, retry_after: 7, details: { provider: 'openai', status: 429 } } },
  {
    name: 'a session over max_session_turns',
    agent: { limits: { max_session_turns: 1 } },
    before: [(c) => c.prompt({ ver: 1, message: 'one' }, { session: 'session:limited' })],
    make: (c) => c.prompt({ ver: 1, message: 'two' }, { session: 'session:limited' }),
    expected: { code: 'SESSION_LIMIT', message: 'this session reached 1 turns; start a new session (s tag)' },
  },
  {
    name: 'the provider overloaded (503)',
    agent: openai,
    make: msg('hi', { model: 'fake-overloaded' }),
    expected: { code: 'MODEL_UNAVAILABLE', message: PROVIDER_UNAVAILABLE, retry_after: 30, details: { provider: 'openai', status: 503 } },
  },
  {
    name: 'a truncated provider stream',
    agent: openai,
    make: msg('hi', { model: 'fake-truncated' }),
    expected: { code: 'MODEL_UNAVAILABLE', message: PROVIDER_UNAVAILABLE, retry_after: 30, details: { provider: 'openai' } },
  },
  {
    name: 'a run over max_run_seconds',
    agent: { ...openai, limits: { max_run_seconds: 1 } },
    make: msg('hi', { model: 'fake-slow' }),
    expected: { code: 'MODEL_UNAVAILABLE', message: 'the run exceeded 1 s', retry_after: 30 },
  },
  { name: 'a provider answer without text', agent: openai, make: msg('hi', { model: 'fake-empty' }), expected: { code: 'EMPTY_RESPONSE', message: 'the model produced no text' } },
  { name: 'a call of a tool the agent lacks', agent: {}, make: msg('/tool nosuchtool {}'), expected: { code: 'UNSUPPORTED_FEATURE', message: 'unknown tool "nosuchtool"' } },
  {
    name: 'a tool loop over max_tool_steps',
    agent: { tools: ['calculator'], limits: { max_tool_steps: 1 } },
    make: msg('/tool calculator {"expr":"1+1"}'),
    expected: { code: 'TOOL_ERROR', message: 'the tool loop exceeded 1 steps' },
  },
];

describe('every error code, as seen from Node', () => {
  it.each(ERROR_CASES.map((k) => [`${k.name} → ${String(k.expected['code'])}`, k] as const))('%s', async (_name, k) => {
    const agent = await createAgent(k.agent);
    const c = await NipXxClient.open(agent);
    for (const make of k.before ?? []) expect((await c.run(make(c))).terminal.kind).toBe(25803);
    const p = k.make(c);
    const run = await c.run(p);
    expect(run.terminal.kind).toBe(25805);
    expect(run.terminal.payload).toEqual({ ver: 1, ...k.expected });
    expect(run.terminal.tags).toContainEqual(['e', p.id, '', 'root']);
    expect(await c.terminalCountAfter(p.id, 150)).toBe(1);
  });

  it('BLOCKED_SENDER for a blocked client', async () => {
    const client = newKey();
    const agent = await createAgent({ block: [client.pk] });
    const c = await NipXxClient.open(agent, client);
    const p = c.prompt({ ver: 1, message: 'x' });
    const run = await c.run(p);
    expect(run.terminal.payload).toEqual({ ver: 1, code: 'BLOCKED_SENDER', message: 'this sender is blocked by the agent’s policy' });
    expect(run.status).toEqual([]);
    expect(await c.terminalCountAfter(p.id, 150)).toBe(1);
  });
});

describe('the privacy-first profile (NIP-59)', () => {
  it('answers a gift-wrapped prompt with gift-wrapped events only', async () => {
    const agent = await openAiAgent();
    const c = await NipXxClient.open(agent);
    const m = marker();
    const { wrap, rumorId } = c.wrappedPrompt({ ver: 1, message: `secret hello ${m}` });
    expect(wrap.kind).toBe(1059);
    await c.send(wrap);
    const run = await c.collect(rumorId);
    expect(run.terminal.kind).toBe(25803);
    expect(run.terminal.payload).toMatchObject({ text: FAKE_TEXT, usage: { input_tokens: 21, output_tokens: 9 } });
    expect(run.deltas.map((d) => d.text).join('')).toBe(FAKE_TEXT);
    // Every event of the run came gift-wrapped: 1059 for the durable terminal, 21059 for the rest,
    // each wrap signed by a one-time key, each rumor authored by the agent.
    for (const o of run.all) {
      expect(o.event.kind).toBe(TERMINAL.has(o.kind) ? 1059 : 21059);
      expect(o.event.pubkey).not.toBe(agent);
      expect(o.pubkey).toBe(agent);
      // The durable terminal's wrap expires a day after it was written (its own created_at is randomised).
      if (TERMINAL.has(o.kind)) {
        expect(o.event.tags).toEqual([['p', c.key.pk], ['expiration', expect.any(String)]]);
        expect(Math.abs(Number(o.event.tags[1]![1]) - (nowSeconds() + RESPONSE_TTL_SECONDS))).toBeLessThanOrEqual(60);
      } else expect(o.event.tags).toEqual([['p', c.key.pk]]);
    }
    expect(new Set(run.all.map((o) => o.event.pubkey)).size).toBe(run.all.length);
    expect(run.all.map((o) => o.kind)).toContain(25801);
    // The relay keeps the terminal's wrap (1059 is replayable) and serves it only to the client.
    const wraps = (await stored(c.key, { kinds: [1059, 21059], '#p': [c.key.pk] })).events;
    expect(wraps.map((e) => e.id)).toEqual([run.terminal.event.id]);
    expect(await stored(newKey(), { kinds: [1059], '#p': [c.key.pk] })).toEqual({ events: [] });
    expect((await storedTerminals(c.key, rumorId)).length).toBe(0); // the run id is inside the wrap, not on it
    const [req] = await recorded(`secret hello ${m}`);
    expect(req!.body.messages!.at(-1)).toEqual({ role: 'user', content: `secret hello ${m}` });
    expect(await c.terminalCountAfter(rumorId, 300)).toBe(1);
  });

  it('a gift-wrapped prompt that fails validation gets a gift-wrapped 25805', async () => {
    const agent = await openAiAgent();
    const c = await NipXxClient.open(agent);
    const { wrap, rumorId } = c.wrappedPrompt({ ver: 1, message: 'x', tool_schema_version: 2 });
    await c.send(wrap);
    const run = await c.collect(rumorId);
    expect(run.terminal.event.kind).toBe(1059);
    expect(run.terminal.payload).toEqual({ ver: 1, code: 'UNSUPPORTED_SCHEMA_VERSION', message: 'tool_schema_version 2 is not supported; this agent uses 1' });
  });

  it('a gift-wrapped cancel cancels a gift-wrapped run', async () => {
    const agent = await openAiAgent();
    const c = await NipXxClient.open(agent);
    const { wrap, rumorId } = c.wrappedPrompt({ ver: 1, message: 'long and private', model: 'fake-slow' });
    await c.send(wrap);
    await waitFor(() => c.of(rumorId).some((o) => o.kind === 25801), 'the first wrapped delta', 10_000);
    const cancel = c.wrappedCancel(rumorId);
    expect(cancel.kind).toBe(21059);
    await c.send(cancel);
    const run = await c.collect(rumorId);
    expect(run.terminal.event.kind).toBe(1059);
    expect(run.terminal.payload).toEqual({ ver: 1, code: 'CANCELLED', message: 'run cancelled' });
    expect(await c.terminalCountAfter(rumorId, 300)).toBe(1);
  });
});
