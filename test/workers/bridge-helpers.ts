// Helpers for the bridge tests: register servers through the management API, and a DVMCP client
// over a real WebSocket to a shard (plain or gift-wrapped requests, responses and notifications
// collected by request id), the public shard's clock set off (to make it refuse), the bridge's
// warnings, its next watchdog run now, its restart, a server's health and next refresh, and the fixture's
// /mcp-flood counts and outage switch.
import { env, runDurableObjectAlarm, runInDurableObject } from 'cloudflare:test';
import { expect, inject, vi } from 'vitest';
import type { CreateServer, ServerHealth } from '../../workers/bridge/config.js';
import type { NostrEvent } from '../../src/shared/event.js';
import { parseResponse, RPC } from '../../src/shared/dvmcp.js';
import { KIND } from '../../src/shared/kinds.js';
import { unwrapDvmcp, wrapDvmcp, type Form } from '../../src/shared/dvmcp-wrap.js';
import { ConversationKeyCache } from '../../src/shared/nip44.js';
import { makeRumor } from '../../src/shared/nip59.js';
import { nobleVerifier } from '../../src/shared/verify.js';
import { api } from './api-helpers.js';
import { shardStub } from '../../workers/common/shards.js';
import type { RelayShard } from '../../workers/relay-do/shard.js';
import { BASE, connect, keys, now, sign, socketObjects, type Keys, type TestSocket } from './helpers.js';
import { TEST_ADMIN_SK, TEST_OWNER_SK } from './test-keys.js';

export const everythingUrl = (): string => inject('mcpEverythingUrl');

export async function registerServer(body: Record<string, unknown>): Promise<{ provider: string; id: string }> {
  const r = await api(TEST_OWNER_SK, 'POST', '/api/bridge/servers', { url: everythingUrl(), ...body });
  if (r.status !== 201) throw new Error(`server not registered: ${r.status} ${JSON.stringify(r.json)}`);
  return r.json as { provider: string; id: string };
}

/** Polls `path` for `provider`'s events of `kinds` (at most ~10 s) until `ready` holds. */
export async function announcements(provider: string, kinds: number[], ready: (es: NostrEvent[]) => boolean, path = '/'): Promise<NostrEvent[]> {
  const s = await connect(path);
  let events: NostrEvent[] = [];
  for (let i = 0; i < 100; i++) {
    events = (await s.req(`a${i}`, { kinds, authors: [provider] })).events;
    s.send(['CLOSE', `a${i}`]); // the relay keeps at most max_subscriptions open per connection
    if (ready(events)) break;
    await new Promise((r) => setTimeout(r, 100));
  }
  s.close();
  return events;
}

/**
 * Sets the clock of the public shard's objects (its primary and, with K > 1, its edges) `skewMs`
 * off (0: back to the real time), through the test seam RelayShard.clock: an hour behind, the shard
 * refuses events dated now (`invalid: created_at is too far in the future`), as a relay whose clock
 * is wrong does.
 */
export async function publicShardClock(skewMs: number): Promise<void> {
  for (const stub of new Set([shardStub(env, null), ...socketObjects(null)])) {
    await runInDurableObject(stub, (instance: RelayShard) => {
      instance.clock = () => Date.now() + skewMs;
    });
  }
}

/** The bridge's warnings logged while `run` ran (`run` may read those logged so far). */
export async function warnings(run: (logged: () => string[]) => Promise<unknown>): Promise<string[]> {
  const warn = vi.spyOn(console, 'warn');
  const logged = (): string[] => warn.mock.calls.map((args) => args.map(String).join(' ')).filter((l) => l.startsWith('bridge: '));
  try {
    await run(logged);
    return logged();
  } finally {
    warn.mockRestore();
  }
}

/** Runs `run` with the public shard's clock an hour behind (it refuses events dated now); the bridge's warnings meanwhile. */
export async function whilePublicShardRefuses(run: (logged: () => string[]) => Promise<unknown>): Promise<string[]> {
  await publicShardClock(-3600_000);
  try {
    return await warnings(run);
  } finally {
    await publicShardClock(0);
  }
}

/** The next watchdog of the bridge of `owner`, run now (once the alarm a change asked for has set it again). */
export async function nextWatchdog(owner: string): Promise<void> {
  const bridge = env.BRIDGE.get(env.BRIDGE.idFromName(owner));
  await vi.waitFor(async () => expect(await runDurableObjectAlarm(bridge)).toBe(true), { timeout: 10_000, interval: 50 });
}

const bridgeOf = (owner: string) => env.BRIDGE.get(env.BRIDGE.idFromName(owner));

/** A restart (a deploy, an eviction) of `owner`'s bridge: its in-memory state gone, its storage kept; its watchdog runs, and it answers `provider`'s clients again. */
export async function restartBridge(owner: string, provider: string): Promise<void> {
  await runInDurableObject(bridgeOf(owner), (_i, state) => state.abort('simulated eviction')).catch(() => undefined);
  await runDurableObjectAlarm(bridgeOf(owner));
  await bridgeReady(provider);
}

/** The health of server `id` of `owner`'s bridge once `ready` holds (polled, at most ~15 s). */
export async function healthWhen(owner: string, id: string, ready: (h: ServerHealth) => boolean): Promise<ServerHealth> {
  return vi.waitFor(
    async () => {
      const h = (await bridgeOf(owner).view(id))?.health;
      if (!h || !ready(h)) throw new Error(`health of ${id} not ready: ${JSON.stringify(h)}`);
      return h;
    },
    { timeout: 15_000, interval: 100 },
  );
}

/** When server `id` of `owner`'s bridge is refreshed next (ms). */
export const refreshAt = (owner: string, id: string): Promise<number> =>
  runInDurableObject(bridgeOf(owner), (_i, state) => state.storage.sql.exec<{ refresh_at: number }>('SELECT refresh_at FROM servers WHERE id = ?', id).one().refresh_at);

/** Moves the next refresh of server `id` of `owner`'s bridge to now (the time booked has come). */
export const refreshDueNow = (owner: string, id: string): Promise<void> =>
  runInDurableObject(bridgeOf(owner), (_i, state) => {
    state.storage.sql.exec('UPDATE servers SET refresh_at = ? WHERE id = ?', Date.now(), id);
  });

/** The fixture's /mcp-flood endpoint of `bucket` (test/mcp/fixture-server.ts). */
export const floodUrl = (bucket: string): string => `${inject('toolsFixtureUrl')}/mcp-flood?bucket=${bucket}`;

/** What the fixture's /mcp-flood endpoint of `bucket` received: its tools/list and tools/call requests. */
export async function floodStats(bucket: string): Promise<{ lists: number; calls: number }> {
  return (await (await fetch(`${inject('toolsFixtureUrl')}/mcp-flood/stats?bucket=${bucket}`)).json()) as { lists: number; calls: number };
}

/** Makes the fixture's /mcp-flood endpoint of `bucket` answer every request HTTP 500 "flood backend down" (`down` false: up again). */
export async function floodDown(bucket: string, down: boolean): Promise<void> {
  const r = await fetch(`${inject('toolsFixtureUrl')}/mcp-flood/down?bucket=${bucket}&down=${down ? 1 : 0}`, { method: 'POST' });
  expect(await r.json()).toEqual({ down });
}

const cache = new ConversationKeyCache(64);

export interface Answer {
  event: NostrEvent;
  /** The rumor when the answer came gift-wrapped. */
  tags: string[][];
  content: string;
  result: ReturnType<typeof parseResponse>;
}

/** A DVMCP client on a shard: publishes 25910 (plain or wrapped) to `provider`, collects 26910/21316. */
export class DvmcpClient {
  private constructor(
    readonly k: Keys,
    readonly sock: TestSocket,
    readonly provider: string,
  ) {}

  static async open(provider: string, path = '/', k: Keys = keys()): Promise<DvmcpClient> {
    const sock = await connect(path);
    await sock.auth(k);
    await sock.req('answers', { kinds: [26910, 21316], '#p': [k.pk], since: now() - 5 });
    await sock.req('wraps', { kinds: [1059], '#p': [k.pk], since: now() - 5 });
    return new DvmcpClient(k, sock, provider);
  }

  /** A signed request event (not sent). */
  request(method: string, params?: Record<string, unknown>, opts: { s?: string; tags?: string[][]; created_at?: number; content?: string } = {}): NostrEvent {
    const tags = opts.tags ?? [['p', this.provider], ['method', method], ...(opts.s !== undefined ? [['s', opts.s]] : [])];
    const content = opts.content ?? JSON.stringify(params === undefined ? { method } : { method, params });
    return sign(this.k, { kind: 25910, content, tags, created_at: opts.created_at });
  }

  /** A signed client notification (21316) referring to request `id` (e.g. notifications/cancel). */
  sign21316(method: string, id: string): NostrEvent {
    return sign(this.k, { kind: 21316, content: JSON.stringify({ method, params: { requestId: id } }), tags: [['p', this.provider], ['method', method], ['e', id]] });
  }

  /** Publishes `e` plain, or wrapped in `form`; the request id (the rumor's when wrapped). */
  async send(e: NostrEvent, form: Form = 'plain'): Promise<string> {
    if (form === 'plain') {
      const ok = await this.sock.publish(e);
      if (!ok[2]) throw new Error(`request refused: ${ok[3]}`);
      return e.id;
    }
    const t = { kind: e.kind, created_at: e.created_at, tags: e.tags, content: e.content };
    const ok = await this.sock.publish(wrapDvmcp(t, this.k.sk, this.k.pk, this.provider, cache, form));
    if (!ok[2]) throw new Error(`wrap refused: ${ok[3]}`);
    return makeRumor({ pubkey: this.k.pk, ...t, kind: form === 'wrapped-dm' ? 14 : e.kind }).id;
  }

  /** Opens a 1059 addressed to this client: its rumor (undefined when it cannot be opened). */
  opened(wrap: NostrEvent): { id: string; kind: number; tags: string[][]; content: string; pubkey: string } | undefined {
    const r = unwrapDvmcp(wrap, this.k.sk, cache, nobleVerifier);
    return r.ok ? r.value.message : undefined;
  }

  /** Sends a request and waits for its 26910 answer (plain or wrapped as asked). */
  async call(method: string, params?: Record<string, unknown>, opts: { s?: string; form?: Form; timeoutMs?: number } = {}): Promise<Answer> {
    const id = await this.send(this.request(method, params, { s: opts.s }), opts.form ?? 'plain');
    return this.answer(id, opts.timeoutMs);
  }

  /** A message for this client (a plain 26910/21316 or the rumor of a wrap) referring to request `id`. */
  private match(f: unknown[], id: string, kinds: number[]): Answer | undefined {
    if (f[0] !== 'EVENT') return undefined;
    const e = f[2] as NostrEvent;
    const m = e.kind === 1059 ? this.opened(e) : e;
    if (!m || !kinds.includes(m.kind) || !m.tags.some((t) => t[0] === 'e' && t[1] === id)) return undefined;
    return { event: e, tags: m.tags, content: m.content, result: parseResponse(m.content) };
  }

  /** Waits for the answer (26910, or the kind 14 rumor of a wrapped-dm answer) to request `id`. */
  async answer(id: string, timeoutMs = 15_000): Promise<Answer> {
    const isAnswer = (x: unknown[]): boolean => {
      const m = this.match(x, id, [26910, 14]);
      return m !== undefined && !m.tags.some((t) => t[0] === 'method');
    };
    return this.match(await this.sock.next(isAnswer, timeoutMs), id, [26910, 14])!;
  }

  /** Notifications (21316) received so far for request `id`. */
  notifications(id: string): Answer[] {
    return this.sock.frames.map((f) => this.match(f, id, [21316, 14])).filter((a): a is Answer => a !== undefined && a.tags.some((t) => t[0] === 'method'));
  }

  close(): void {
    this.sock.close();
  }
}

/**
 * A bridge for a fresh owner (added by the operator: a bridge serves only an owner's), set up through
 * the Bridge Durable Object's own RPCs (what the API calls): its provider key (imported when `sk` is
 * given, EDGESTR_ENV=test only), provisioned on the owner's shard, with `servers`. Returns the owner
 * and provider.
 */
export async function directBridge(servers: CreateServer[], sk?: string): Promise<{ owner: string; provider: string }> {
  const owner = keys().pk;
  const added = await api(TEST_ADMIN_SK, 'POST', '/api/admin/owners', { pubkey: owner });
  if (added.status !== 201) throw new Error(`owner not added: ${added.status} ${JSON.stringify(added.json)}`);
  const stub = env.BRIDGE.get(env.BRIDGE.idFromName(owner));
  let provider: string;
  if (sk === undefined) provider = await stub.ensureProvider(owner, BASE);
  else {
    const imported = await stub.importTestProviderKey(owner, BASE, sk);
    if (!imported.ok) throw new Error(imported.error);
    provider = imported.value;
  }
  await env.RELAY_SHARD.get(env.RELAY_SHARD.idFromName(`owner:${owner}`)).provisionAgent(provider, owner);
  for (const s of servers) {
    const added = await stub.addServer(s);
    if (!added.ok) throw new Error(added.error);
  }
  return { owner, provider };
}

/** Waits until the bridge of `provider` answers on `path` (a ping from a throwaway key, every 200 ms, at most ~10 s). */
export async function bridgeReady(provider: string, path = '/'): Promise<void> {
  const probe = await DvmcpClient.open(provider, path);
  try {
    for (let i = 0; i < 50; i++) {
      const id = await probe.send(probe.request('ping'));
      const answered = await probe.answer(id, 200).then(
        () => true,
        () => false,
      );
      if (answered) return;
    }
    throw new Error(`bridge ${provider} never answered a ping on ${path}`);
  } finally {
    probe.close();
  }
}

/**
 * Floods `target` (a provider or an agent) from `c`'s key with 40 bad requests — half not JSON, half
 * an unknown method, naming server `s` when given — then waits for the answer to another key's ping
 * published after them on the same connection (a sentinel: any answer to the flood came before it).
 * The contents of the answers to the 40, in order (undefined: unanswered).
 */
export async function floodWithBadRequests(c: DvmcpClient, target: string, s?: string): Promise<Array<string | undefined>> {
  const server = s === undefined ? {} : { s };
  const b = keys();
  await c.sock.req('sentinel', { kinds: [KIND.DVMCP_RESPONSE], '#p': [b.pk] });
  const ids: string[] = [];
  for (let i = 0; i < 40; i++) {
    const e = i % 2 === 0 ? c.request('tools/list', undefined, { ...server, content: `{not json ${i}` }) : c.request('tools/destroy', { i }, server);
    ids.push(await c.send(e));
  }
  const ping = sign(b, { kind: KIND.DVMCP_REQUEST, content: JSON.stringify({ method: 'ping' }), tags: [['p', target], ['method', 'ping'], ...(s === undefined ? [] : [['s', s]])] });
  const ok = await c.sock.publish(ping);
  if (!ok[2]) throw new Error(`the sentinel ping was refused: ${ok[3]}`);
  await c.sock.next((f) => f[0] === 'EVENT' && f[1] === 'sentinel' && (f[2] as NostrEvent).tags.some((t) => t[0] === 'e' && t[1] === ping.id));
  return ids.map((id) => {
    const f = c.sock.frames.find((x) => x[0] === 'EVENT' && x[1] === 'answers' && (x[2] as NostrEvent).tags.some((t) => t[0] === 'e' && t[1] === id));
    return f && (f[2] as NostrEvent).content;
  });
}

/** What a flood of 40 bad requests from one key gets: 30 error answers (parse, unknown method), one rate-limited refusal, nothing more. */
export function expectErrorBudget(answers: Array<string | undefined>): void {
  expect(answers.slice(0, 30).map((a) => a && (JSON.parse(a) as { error: { code: number } }).error.code)).toEqual(answers.slice(0, 30).map((_, i) => (i % 2 === 0 ? -32700 : -32601)));
  expect(JSON.parse(answers[30]!)).toEqual({ error: { code: RPC.RATE_LIMITED, message: expect.stringMatching(/^rate-limited: more than 30 requests a minute from your key; retry in \d+ s$/) } });
  expect(answers.slice(31)).toEqual(Array(9).fill(undefined));
}

/** The plain 21316 notifications of `method` that `client` received. */
export function told(client: DvmcpClient, method: string): NostrEvent[] {
  return client.sock.frames
    .map((f) => (f[0] === 'EVENT' ? (f[2] as NostrEvent) : undefined))
    .filter((e): e is NostrEvent => e?.kind === 21316 && e.tags.some((t) => t[0] === 'method' && t[1] === method));
}

/** Waits (polling, at most `ms`) until `client` has received `n` 21316 notifications of `method`. */
export async function received(client: DvmcpClient, method: string, n: number, ms = 20_000): Promise<void> {
  const deadline = Date.now() + ms;
  while (told(client, method).length < n) {
    if (Date.now() > deadline) throw new Error(`${told(client, method).length} of ${n} ${method} received in ${ms} ms`);
    await new Promise((r) => setTimeout(r, 50));
  }
}
