// The plan's `agents` cap under concurrent creations: the owner's shard counts its provisioned
// agents and records the new one in one synchronous step (RelayShard.provisionAgent), so requests
// racing each other cannot pass it, and a refused creation leaves no agent behind.
import { env, runInDurableObject } from 'cloudflare:test';
import { describe, expect, it } from 'vitest';
import { api } from './api-helpers.js';
import { keys } from './helpers.js';
import { TEST_ADMIN_SK } from './test-keys.js';

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
