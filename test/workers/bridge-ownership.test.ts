// The bridge's provider key on the owner's shard: recorded as the owner's ('bridge' source), so
// the shard's write policy admits its events, yet never listed by GET /api/agents, which therefore
// never wakes (and so creates) an Agent Durable Object for it. A key recorded before the 'bridge'
// source existed (as 'provisioned') moves to it when the bridge provisions it again.
import { env, listDurableObjectIds, runInDurableObject } from 'cloudflare:test';
import { describe, expect, it } from 'vitest';
import { shardStub } from '../../workers/common/shards.js';
import { api } from './api-helpers.js';
import { announcements, registerServer } from './bridge-helpers.js';
import { keys } from './helpers.js';
import { TEST_OWNER, TEST_OWNER_SK } from './test-keys.js';

const agentObjects = async (): Promise<string[]> => (await listDurableObjectIds(env.AGENT)).map((id) => id.toString());
const agentObject = (pubkey: string): string => env.AGENT.idFromName(pubkey).toString();

/** The sources of the shard's ownership records for agent → owner. */
const sources = (owner: string, agent: string): Promise<string[]> =>
  runInDurableObject(shardStub(env, owner), (_instance, state) =>
    state.storage.sql
      .exec<{ source: string }>('SELECT source FROM agent_owners WHERE agent = ? AND owner = ? ORDER BY source', agent, owner)
      .toArray()
      .map((r) => r.source),
  );

describe('the bridge provider key on the owner shard', () => {
  it('is the owner’s for the write policy, but not an agent: GET /api/agents lists the agents only and creates no Agent object for it', async () => {
    const created = await api(TEST_OWNER_SK, 'POST', '/api/agents', { name: 'an agent' });
    expect(created.status).toBe(201);
    const agent = (created.json as { pubkey: string }).pubkey;
    const { provider } = await registerServer({ id: 'own-a', public: true });

    expect(await sources(TEST_OWNER, provider)).toEqual(['bridge']);
    expect(await sources(TEST_OWNER, agent)).toEqual(['provisioned']);
    expect(await shardStub(env, TEST_OWNER).isAgentOwner(provider, TEST_OWNER)).toBe(true);
    // The write policy admits the provider's announcements on the owner's shard.
    const published = await announcements(provider, [31316], (es) => es.length > 0, `/r/${TEST_OWNER}`);
    expect(published.length).toBeGreaterThan(0);

    const list = await api(TEST_OWNER_SK, 'GET', '/api/agents');
    expect(list.status).toBe(200);
    expect((list.json as { agents: Array<{ pubkey: string }> }).agents.map((a) => a.pubkey)).toEqual([agent]);
    const objects = await agentObjects();
    expect(objects).toContain(agentObject(agent));
    expect(objects).not.toContain(agentObject(provider));
  });

  it('moves a record made before the bridge source existed, and keeps the owner’s right to write', async () => {
    const owner = keys().pk;
    const provider = keys().pk;
    const shard = shardStub(env, owner);
    await shard.provisionAgent(provider, owner);
    expect(await shard.provisionedAgents(owner)).toEqual([provider]);
    await shard.provisionAgent(provider, owner, 'bridge');
    expect(await sources(owner, provider)).toEqual(['bridge']);
    expect(await shard.provisionedAgents(owner)).toEqual([]);
    expect(await shard.isAgentOwner(provider, owner)).toBe(true);
  });
});
