// The relay connections of edgestr's own components (hosted agents, bridges: INTERNAL_HEADER) are
// counted by the owner they serve. On a shard that is not that owner's (the public shard: every
// owner's), one owner holds at most max_agent_connections_per_owner of them (429), and the agents of
// all other owners together at most max_agent_connections (503), so the shard owner's own clients
// and agents still connect. Placed by their owner with edge objects (one owner's on one edge), so
// the per-owner count is the shard's at K = 4 too.
import { env, runInDurableObject } from 'cloudflare:test';
import { describe, expect, it } from 'vitest';
import { INTERNAL_HEADER, INTERNAL_OWNER_HEADER, SHARD_HEADER } from '../../workers/common/shards.js';
import { openRelaySocket } from '../../workers/common/relay-sockets.js';
import { RelayShard } from '../../workers/relay-do/shard.js';
import { DEFAULT_LIMITS } from '../../workers/relay-do/limits.js';
import { toNpub } from '../../src/shared/keys.js';
import type { SocketLike } from '../../src/shared/relay-client.js';
import { BASE, connect, freshOwner } from './helpers.js';

const ORIGIN = BASE; // http://relay.test: the relay URLs below are this deployment's shards

/** Opens an internal socket to `url` for a component of `owner` (null: the deployment's own), as agents and bridges do; the error text if refused. */
const open = (url: string, owner: string | null): Promise<SocketLike | string> =>
  openRelaySocket(env, url, { origin: ORIGIN, owner }).catch((e: unknown) => (e instanceof Error ? e.message : String(e)));

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

  it(`on the public shard, one owner's agents hold at most ${DEFAULT_LIMITS.max_agent_connections_per_owner} sockets; the deployment's own components are not held`, async () => {
    const attacker = freshOwner().pk;
    const cap = DEFAULT_LIMITS.max_agent_connections_per_owner;
    const sockets: SocketLike[] = [];
    for (let i = 0; i < cap; i++) {
      const s = await open('ws://relay.test/', attacker);
      if (typeof s === 'string') throw new Error(`socket ${i}: ${s}`);
      sockets.push(s);
    }
    expect(await open('ws://relay.test/', attacker)).toBe(
      `relay ws://relay.test/ did not accept a WebSocket (HTTP 429): too many connections from the agents of one owner (max ${cap}); close one first`,
    );
    const deployment: SocketLike[] = [];
    for (let i = 0; i <= cap; i++) {
      const s = await open('ws://relay.test/', null);
      if (typeof s === 'string') throw new Error(`deployment socket ${i}: ${s}`);
      deployment.push(s);
    }
    for (const s of [...sockets, ...deployment]) s.close();
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

  /** The headers of an internal upgrade for a component of `owner` (null: the deployment's own). */
  const agentOf = (owner: string | null): Record<string, string> => ({ [INTERNAL_HEADER]: 'agent', ...(owner === null ? {} : { [INTERNAL_OWNER_HEADER]: owner }) });

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

  it("on the public shard every owner's agents are others' (one owner: max_agent_connections_per_owner; all: max_agent_connections); the deployment's own components are the shard's side", async () => {
    const [a, b] = [freshOwner().pk, freshOwner().pk];
    const answers = await shardWith({ max_connections: 10, max_agent_connections_per_owner: 2, max_agent_connections: 3 }, 'public', async (upgrade) => ({
      a: [await upgrade(agentOf(a)), await upgrade(agentOf(a)), await upgrade(agentOf(a))],
      b: [await upgrade(agentOf(b)), await upgrade(agentOf(b))],
      deployment: [await upgrade(agentOf(null)), await upgrade(agentOf(null)), await upgrade(agentOf(null))],
      client: await upgrade({ 'CF-Connecting-IP': '198.51.100.64' }),
    }));
    expect(answers).toEqual({
      a: ['101', '101', '429 too many connections from the agents of one owner (max 2); close one first'],
      b: ['101', '503 this relay shard is full for hosted agents (3 connections); try again later'],
      deployment: ['101', '101', '101'],
      client: '101',
    });
  });

  it('refuses an internal upgrade naming no owner key (400)', async () => {
    const answer = await shardWith({}, 'public', (upgrade) => upgrade({ [INTERNAL_HEADER]: 'agent', [INTERNAL_OWNER_HEADER]: 'not-a-key' }));
    expect(answer).toBe(`400 invalid ${INTERNAL_OWNER_HEADER}: not an owner key`);
  });
});
