// The plan's `agents` cap under concurrent creations: the owner's shard counts its provisioned
// agents and records the new one in one synchronous step (RelayShard.provisionAgent), so requests
// racing each other cannot pass it, and a refused creation leaves no agent behind. When the owner's
// shard or the Agent object fails part-way through a deletion or a creation, nothing is left that
// runs or counts against the plan without being listed and deletable (workers/api/agents.ts).
import { env, runInDurableObject } from 'cloudflare:test';
import { describe, expect, it } from 'vitest';
import { generateSecretKey, getPublicKey } from 'nostr-tools/pure';
import { createAgent } from '../../workers/api/agents.js';
import { CreateAgentSchema } from '../../workers/agent/config.js';
import { api } from './api-helpers.js';
import { BASE, keys } from './helpers.js';
import { holdObject, pauseObject } from './hold-object.js';
import { TEST_ADMIN_SK } from './test-keys.js';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe('the plan’s agents cap under concurrency', () => {
  it('five concurrent POST /api/agents on a one-agent plan: one 201, four 409, one agent and no orphan', async () => {
    const owner = keys();
    expect((await api(TEST_ADMIN_SK, 'POST', '/api/admin/owners', { pubkey: owner.pk, plan: 'one_agent' })).status).toBe(201);
    const rs = await Promise.all(Array.from({ length: 5 }, (_, i) => api(owner.sk, 'POST', '/api/agents', { name: `a${i}`, provider: 'echo' })));
    expect(rs.map((r) => r.status).sort()).toEqual([201, 409, 409, 409, 409]);
    for (const r of rs.filter((x) => x.status === 409)) {
      expect(r.json).toEqual({ error: 'the owner’s plan allows at most 1 agent; delete one first' });
    }
    const created = (rs.find((r) => r.status === 201)!.json as { pubkey: string }).pubkey;
    const list = await api(owner.sk, 'GET', '/api/agents');
    expect((list.json as { agents: Array<{ pubkey: string }> }).agents.map((a) => a.pubkey)).toEqual([created]);
    // The shard's records: the one agent only (nothing counts against the plan but it).
    const shard = env.RELAY_SHARD.get(env.RELAY_SHARD.idFromName(`owner:${owner.pk}`));
    expect(await shard.provisionedAgents(owner.pk)).toEqual([created]);
    await runInDurableObject(shard, (_i, state) => {
      const rows = state.storage.sql.exec<{ agent: string }>('SELECT agent FROM agent_owners WHERE owner = ?', owner.pk).toArray();
      expect(rows.map((r) => r.agent)).toEqual([created]);
    });
  }, 60_000);
});

/** A new owner on the one-agent plan, with its one agent created through the API. */
async function ownerWithAgent(): Promise<{ owner: ReturnType<typeof keys>; agent: string }> {
  const owner = keys();
  expect((await api(TEST_ADMIN_SK, 'POST', '/api/admin/owners', { pubkey: owner.pk, plan: 'one_agent' })).status).toBe(201);
  const created = await api(owner.sk, 'POST', '/api/agents', { name: 'a', provider: 'echo' });
  expect(created.status).toBe(201);
  return { owner, agent: (created.json as { pubkey: string }).pubkey };
}

const ownerShard = (owner: string) => env.RELAY_SHARD.get(env.RELAY_SHARD.idFromName(`owner:${owner}`));
const agentObject = (agent: string) => env.AGENT.get(env.AGENT.idFromName(agent));
const listed = async (sk: Uint8Array): Promise<string[]> => ((await api(sk, 'GET', '/api/agents')).json as { agents: Array<{ pubkey: string }> }).agents.map((a) => a.pubkey);

describe('the plan’s agents cap when an object fails part-way', () => {
  it('DELETE whose shard record cannot be removed (the owner’s shard reset after the agent was): 503 saying so; the retry is 204 and frees the plan’s place', async () => {
    const { owner, agent } = await ownerWithAgent();
    // The DELETE finds the record, then its call to the Agent waits behind a pause...
    const resumeAgent = await pauseObject(agentObject(agent));
    const deleting = api(owner.sk, 'DELETE', `/api/agents/${agent}`);
    await sleep(1500);
    // ...while the owner's shard is held: the Agent forgets the agent, the API's revokeAgent waits behind the hold, then the shard resets.
    const release = await holdObject(ownerShard(owner.pk));
    await resumeAgent();
    for (let i = 0; i < 2000 && (await agentObject(agent).view()) !== undefined; i++) await sleep(20);
    await sleep(300);
    await release(new Error('simulated shard reset'));
    expect(await deleting).toEqual({
      status: 503,
      json: { error: 'the agent was deleted but its record on your shard could not be removed (simulated shard reset); send DELETE again' },
    });
    expect(await ownerShard(owner.pk).provisionedAgents(owner.pk)).toEqual([agent]);
    expect(await api(owner.sk, 'DELETE', `/api/agents/${agent}`)).toEqual({ status: 204, json: null });
    expect(await ownerShard(owner.pk).provisionedAgents(owner.pk)).toEqual([]);
    const again = await api(owner.sk, 'POST', '/api/agents', { name: 'b', provider: 'echo' });
    expect(again.status).toBe(201);
    expect(await listed(owner.sk)).toEqual([(again.json as { pubkey: string }).pubkey]);
  }, 60_000);

  it('DELETE whose Agent fails (reset while the call waits for it): 503 with its reason, nothing deleted; the retry is 204', async () => {
    const { owner, agent } = await ownerWithAgent();
    const release = await holdObject(agentObject(agent));
    const deleting = api(owner.sk, 'DELETE', `/api/agents/${agent}`);
    await sleep(1500); // the call reaches the Agent and waits behind the hold
    await release(new Error('simulated agent reset'));
    expect(await deleting).toEqual({ status: 503, json: { error: 'simulated agent reset' } });
    expect(await listed(owner.sk)).toEqual([agent]);
    expect(await api(owner.sk, 'DELETE', `/api/agents/${agent}`)).toEqual({ status: 204, json: null });
    expect(await listed(owner.sk)).toEqual([]);
    expect(await ownerShard(owner.pk).provisionedAgents(owner.pk)).toEqual([]);
  }, 60_000);

  it('POST whose Agent stored the agent but whose answer was lost: the agent is removed before its record, 503 with the reason; nothing runs uncounted', async () => {
    const owner = keys();
    expect((await api(TEST_ADMIN_SK, 'POST', '/api/admin/owners', { pubkey: owner.pk, plan: 'one_agent' })).status).toBe(201);
    const sk = generateSecretKey();
    const agent = getPublicKey(sk);
    const input = CreateAgentSchema.parse({ name: 'a', provider: 'echo' });
    // The Agent stores the agent (what a creation whose answer is lost leaves: create is idempotent for a key)...
    expect((await createAgent(env, owner.pk, input, BASE, sk, 1)).status).toBe(201);
    // ...and the creation's call to it fails: it waits behind a hold, then the Agent resets.
    const release = await holdObject(agentObject(agent));
    const creating = createAgent(env, owner.pk, input, BASE, sk, 1);
    await sleep(1500);
    await release(new Error('simulated agent reset'));
    expect(await creating).toEqual({ status: 503, body: { error: 'the agent could not be created (simulated agent reset); nothing of it was kept: send the request again' } });
    expect(await agentObject(agent).view()).toBeUndefined();
    expect(await ownerShard(owner.pk).provisionedAgents(owner.pk)).toEqual([]);
    expect(await listed(owner.sk)).toEqual([]);
    const next = await api(owner.sk, 'POST', '/api/agents', { name: 'b', provider: 'echo' });
    expect(next.status).toBe(201);
    expect(await listed(owner.sk)).toEqual([(next.json as { pubkey: string }).pubkey]);
    // The plan's one place is taken by the agent that runs: no other fits.
    expect(await api(owner.sk, 'POST', '/api/agents', { name: 'c', provider: 'echo' })).toEqual({ status: 409, json: { error: 'the owner’s plan allows at most 1 agent; delete one first' } });
  }, 60_000);
});
