// The relay connections of edgestr's own components (hosted agents, bridges: INTERNAL_HEADER) are
// counted by the owner they serve. On a shard that is not that owner's (the public shard: every
// owner's), one owner holds at most max_agent_connections_per_owner of them (429), and the agents of
// all other owners together at most max_agent_connections (503), so the shard owner's own clients
// and agents still connect.
import { env, runInDurableObject } from 'cloudflare:test';
import { describe, expect, it } from 'vitest';
import { INTERNAL_HEADER, INTERNAL_OWNER_HEADER, SHARD_HEADER } from '../../workers/common/shards.js';
import { RelayShard } from '../../workers/relay-do/shard.js';
import { freshOwner } from './helpers.js';

describe('internal sockets, counted by the owner they serve', () => {
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
