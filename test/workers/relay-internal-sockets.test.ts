// The relay connections of edgestr's own components (hosted agents, bridges: INTERNAL_HEADER) are
// counted by the owner they serve and named by the component (INTERNAL_COMPONENT_HEADER: the agent's
// or bridge's key). A component holds one socket of a shard: a newer one replaces the older, so no
// spelling of a URL, reconnect or config opens more. On a shard that is not that owner's, one owner's
// components hold at most max_agent_connections_per_owner sockets (429); on every shard, the agents
// of all other owners together at most max_agent_connections (503), so the shard owner's own clients
// and agents still connect. On the public shard (every owner's) an owner has as many as its plan
// gives it agents and bridges. Placed by their owner with edge objects on an owner's shard (one
// owner's on one edge, so the per-owner count is the shard's at K = 4 too), by the component on `/`.
import { env, runInDurableObject } from 'cloudflare:test';
import { describe, expect, it } from 'vitest';
import { INTERNAL_COMPONENT_HEADER, INTERNAL_HEADER, INTERNAL_OWNER_HEADER, SHARD_HEADER } from '../../workers/common/shards.js';
import { openRelaySocket } from '../../workers/common/relay-sockets.js';
import { RelayShard } from '../../workers/relay-do/shard.js';
import { DEFAULT_LIMITS } from '../../workers/relay-do/limits.js';
import { toNpub } from '../../src/shared/keys.js';
import type { SocketEvent, SocketLike } from '../../src/shared/relay-client.js';
import { BASE, connect, freshOwner } from './helpers.js';

const ORIGIN = BASE; // http://relay.test: the relay URLs below are this deployment's shards

/** Opens an internal socket to `url` for component `component` (a fresh one by default: another agent) of `owner` (null: the deployment's own), as agents and bridges do; the error text if refused. */
const open = (url: string, owner: string | null, component: string | undefined = owner === null ? undefined : freshOwner().pk): Promise<SocketLike | string> =>
  openRelaySocket(env, url, { origin: ORIGIN, owner, ...(component === undefined ? {} : { component }) }).catch((e: unknown) => (e instanceof Error ? e.message : String(e)));

/** The close `s` gets from the relay (code and reason). */
const closeOf = (s: SocketLike): Promise<{ code?: number; reason?: string }> =>
  new Promise((resolve) => s.addEventListener('close', (e: SocketEvent) => resolve({ code: e.code, reason: e.reason })));

const REPLACED = { code: 1000, reason: 'replaced by a newer connection of the same agent or bridge' };

describe('internal sockets, counted by the owner they serve', () => {
  it(`another owner's agents hold at most ${DEFAULT_LIMITS.max_agent_connections_per_owner} sockets of a shard, whatever the spelling of its URL; the shard owner's clients and agents still connect`, async () => {
    const victim = freshOwner().pk;
    const attacker = freshOwner().pk;
    const cap = DEFAULT_LIMITS.max_agent_connections_per_owner;
    // The spellings an agent's relays may use for one shard of this deployment.
    const spellings = [`ws://relay.test/r/${victim}`, `ws://relay.test/r/${victim}/`, `ws://relay.test/r/${toNpub(victim)}`, `ws://RELAY.test/r/${victim}`];
    const sockets: SocketLike[] = [];
    for (let i = 0; i < cap; i++) {
      const s = await open(spellings[i % spellings.length]!, attacker);
      if (typeof s === 'string') throw new Error(`socket ${i}: ${s}`);
      sockets.push(s);
    }
    const url = spellings[cap % spellings.length]!;
    expect(await open(url, attacker)).toBe(
      `relay ${url} did not accept a WebSocket (HTTP 429): too many connections from the agents of another owner (max ${cap}); close one first`,
    );
    // The shard owner's own agents are not held by it, nor its clients.
    const own: SocketLike[] = [];
    for (let i = 0; i <= cap; i++) {
      const s = await open(`ws://relay.test/r/${victim}`, victim);
      if (typeof s === 'string') throw new Error(`own socket ${i}: ${s}`);
      own.push(s);
    }
    const cli = await connect(`/r/${victim}`, { 'CF-Connecting-IP': '198.51.100.61' });
    expect(await cli.req('fine', { kinds: [1], limit: 1 })).toEqual({ events: [] });
    // A third owner's agents have their own count.
    const third = await open(`ws://relay.test/r/${victim}`, freshOwner().pk);
    expect(typeof third).toBe('object');
    // A closed socket frees its place.
    sockets.pop()!.close();
    await expect.poll(async () => {
      const again = await open(`ws://relay.test/r/${victim}`, attacker);
      if (typeof again === 'string') return again;
      sockets.push(again);
      return 'opened';
    }, { timeout: 10_000 }).toBe('opened');
    cli.close();
    for (const s of [...sockets, ...own, third]) if (typeof s === 'object') s.close();
  }, 60_000);

  it('an agent or bridge holds one socket of a shard: its newer socket, in any spelling, replaces the older (closed 1000), even at the per-owner cap', async () => {
    const victim = freshOwner().pk;
    const attacker = freshOwner().pk;
    const agent = freshOwner().pk;
    const spellings = [`ws://relay.test/r/${victim}`, `ws://relay.test/r/${victim}/`, `ws://relay.test/r/${toNpub(victim)}`, `ws://RELAY.test/r/${victim}`];
    const closes: Promise<{ code?: number; reason?: string }>[] = [];
    // Four times the cap of one agent's sockets: each replaces the one before.
    for (let i = 0; i < DEFAULT_LIMITS.max_agent_connections_per_owner * 4; i++) {
      const s = await open(spellings[i % spellings.length]!, attacker, agent);
      if (typeof s === 'string') throw new Error(`socket ${i}: ${s}`);
      closes.push(closeOf(s));
    }
    const replacedOnes = closes.slice(0, -1);
    expect(await Promise.all(replacedOnes)).toEqual(replacedOnes.map(() => REPLACED));
    // The owner's other agents still have every other place of its count.
    const others: SocketLike[] = [];
    for (let i = 1; i < DEFAULT_LIMITS.max_agent_connections_per_owner; i++) {
      const s = await open(`ws://relay.test/r/${victim}`, attacker);
      if (typeof s === 'string') throw new Error(`other agent ${i}: ${s}`);
      others.push(s);
    }
    // At the cap, the same agent still reconnects (replacing), another agent does not.
    const replaced = closes.at(-1)!;
    const again = await open(`ws://relay.test/r/${victim}`, attacker, agent);
    expect(typeof again).toBe('object');
    expect(await replaced).toEqual(REPLACED);
    expect(await open(`ws://relay.test/r/${victim}`, attacker)).toMatch(/HTTP 429\): too many connections from the agents of another owner/);
    for (const s of [...others, again]) if (typeof s === 'object') s.close();
  }, 60_000);

  it("an outside client naming an agent in the internal headers (deleted by the router) does not replace the agent's socket", async () => {
    const [owner, agent] = [freshOwner().pk, freshOwner().pk];
    const mine = await open('ws://relay.test/', owner, agent);
    if (typeof mine === 'string') throw new Error(mine);
    let closed: { code?: number; reason?: string } | undefined;
    void closeOf(mine).then((c) => (closed = c));
    const stranger = await connect('/', {
      'CF-Connecting-IP': '198.51.100.65',
      [INTERNAL_HEADER]: 'agent',
      [INTERNAL_OWNER_HEADER]: owner,
      [INTERNAL_COMPONENT_HEADER]: agent,
    });
    expect(await stranger.req('probe', { kinds: [1], limit: 1 })).toEqual({ events: [] });
    expect([closed, mine.readyState]).toEqual([undefined, 1]);
    stranger.close();
    mine.close();
  });

  it(`on the public shard an owner's agents and bridges each hold one socket, past ${DEFAULT_LIMITS.max_agent_connections_per_owner} (the per-owner cap is for other owners' shards); the deployment's own components are not held`, async () => {
    const owner = freshOwner().pk;
    const many = DEFAULT_LIMITS.max_agent_connections_per_owner + 10;
    const sockets: SocketLike[] = [];
    for (let i = 0; i < many; i++) {
      const s = await open('ws://relay.test/', owner);
      if (typeof s === 'string') throw new Error(`agent ${i}: ${s}`);
      sockets.push(s);
    }
    // One of them connecting again replaces its socket.
    const agent = freshOwner().pk;
    const first = await open('ws://relay.test/', owner, agent);
    if (typeof first === 'string') throw new Error(first);
    const replaced = closeOf(first);
    const second = await open('ws://relay.test/', owner, agent);
    if (typeof second === 'string') throw new Error(second);
    expect(await replaced).toEqual(REPLACED);
    const deployment: SocketLike[] = [];
    for (let i = 0; i <= DEFAULT_LIMITS.max_agent_connections_per_owner; i++) {
      const s = await open('ws://relay.test/', null);
      if (typeof s === 'string') throw new Error(`deployment socket ${i}: ${s}`);
      deployment.push(s);
    }
    for (const s of [...sockets, second, ...deployment]) s.close();
  }, 60_000);

  /** Upgrades of a shard object with `limits` over this storage (RELAY_LIMITS is the deployment's setting): each answered as `101` or `<status> <text>`. */
  async function shardWith(limits: Record<string, number>, shard: string, run: (upgrade: (headers: Record<string, string>) => Promise<string>, info: () => Promise<unknown>) => Promise<unknown>) {
    const stub = env.RELAY_SHARD.get(env.RELAY_SHARD.newUniqueId());
    return runInDurableObject(stub, async (_i, state) => {
      const object = new RelayShard(state, { ...env, RELAY_LIMITS: JSON.stringify(limits) });
      const upgrade = async (headers: Record<string, string>) => {
        const res = await object.fetch(new Request('http://relay.test/', { headers: { Upgrade: 'websocket', [SHARD_HEADER]: shard, ...headers } }));
        res.webSocket?.accept();
        return res.status === 101 ? '101' : `${res.status} ${await res.text()}`;
      };
      const info = async () => {
        const res = await object.fetch(new Request('http://relay.test/', { headers: { Accept: 'application/nostr+json', [SHARD_HEADER]: shard } }));
        return ((await res.json()) as { limitation: unknown }).limitation;
      };
      return run(upgrade, info);
    });
  }

  /** The headers of an internal upgrade for component `component` (a fresh one by default) of `owner` (null: the deployment's own). */
  const agentOf = (owner: string | null, component: string = freshOwner().pk): Record<string, string> => ({
    [INTERNAL_HEADER]: 'agent',
    ...(owner === null ? {} : { [INTERNAL_OWNER_HEADER]: owner, [INTERNAL_COMPONENT_HEADER]: component }),
  });

  it("the agents of all other owners together hold at most max_agent_connections of a shard's sockets (503): the rest is kept for the shard owner's side; NIP-11 advertises both caps", async () => {
    const victim = freshOwner().pk;
    const [a, b, c, d] = [freshOwner().pk, freshOwner().pk, freshOwner().pk, freshOwner().pk];
    const answers = await shardWith({ max_connections: 10, max_agent_connections_per_owner: 2, max_agent_connections: 5 }, victim, async (upgrade, info) => ({
      a: [await upgrade(agentOf(a)), await upgrade(agentOf(a)), await upgrade(agentOf(a))],
      others: [await upgrade(agentOf(b)), await upgrade(agentOf(b)), await upgrade(agentOf(c))],
      full: [await upgrade(agentOf(d)), await upgrade(agentOf(null))],
      own: [await upgrade(agentOf(victim)), await upgrade(agentOf(victim)), await upgrade(agentOf(victim))],
      client: [await upgrade({ 'CF-Connecting-IP': '198.51.100.62' }), await upgrade({ 'CF-Connecting-IP': '198.51.100.63' })],
      shardFull: await upgrade(agentOf(victim)),
      limits: await info(),
    }));
    expect(answers).toEqual({
      a: ['101', '101', '429 too many connections from the agents of another owner (max 2); close one first'],
      others: ['101', '101', '101'],
      full: ["503 this relay shard is full for other owners' agents (5 connections); try again later", "503 this relay shard is full for other owners' agents (5 connections); try again later"],
      own: ['101', '101', '101'],
      client: ['101', '101'],
      shardFull: '503 this relay shard is full (10 connections); try again later',
      limits: expect.objectContaining({ max_connections: 10, max_agent_connections_per_owner: 2, max_agent_connections: 5 }),
    });
  });

  it("on the public shard every owner's agents are others' (all: max_agent_connections; one owner: no cap of its own, one socket per agent); the deployment's own components are the shard's side", async () => {
    const [a, b] = [freshOwner().pk, freshOwner().pk];
    const agent = freshOwner().pk;
    const answers = await shardWith({ max_connections: 10, max_agent_connections_per_owner: 2, max_agent_connections: 4 }, 'public', async (upgrade, info) => ({
      a: [await upgrade(agentOf(a, agent)), await upgrade(agentOf(a)), await upgrade(agentOf(a))],
      again: await upgrade(agentOf(a, agent)),
      b: [await upgrade(agentOf(b)), await upgrade(agentOf(b))],
      deployment: [await upgrade(agentOf(null)), await upgrade(agentOf(null)), await upgrade(agentOf(null))],
      client: await upgrade({ 'CF-Connecting-IP': '198.51.100.64' }),
      limits: await info(),
    }));
    expect(answers).toMatchObject({
      a: ['101', '101', '101'],
      again: '101',
      b: ['101', '503 this relay shard is full for hosted agents (4 connections); try again later'],
      deployment: ['101', '101', '101'],
      client: '101',
      limits: expect.objectContaining({ max_agent_connections: 4 }),
    });
    // NIP-11 of the public shard does not advertise a per-owner cap it does not apply.
    expect((answers as { limits: object }).limits).not.toHaveProperty('max_agent_connections_per_owner');
  });

  it("refuses an internal upgrade naming no owner key, or an owner's without its component's key (400)", async () => {
    const owner = freshOwner().pk;
    const answers = await shardWith({}, 'public', async (upgrade) => [
      await upgrade({ [INTERNAL_HEADER]: 'agent', [INTERNAL_OWNER_HEADER]: 'not-a-key' }),
      await upgrade({ [INTERNAL_HEADER]: 'agent', [INTERNAL_OWNER_HEADER]: owner }),
      await upgrade({ [INTERNAL_HEADER]: 'agent', [INTERNAL_OWNER_HEADER]: owner, [INTERNAL_COMPONENT_HEADER]: 'npub1nope' }),
    ]);
    expect(answers).toEqual([
      `400 invalid ${INTERNAL_OWNER_HEADER}: not an owner key`,
      `400 missing ${INTERNAL_COMPONENT_HEADER}: an owner's agent or bridge names its own key`,
      `400 invalid ${INTERNAL_COMPONENT_HEADER}: not a key (64 hex)`,
    ]);
  });
});
