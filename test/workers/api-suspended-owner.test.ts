// A suspended owner may look and clean up through the management API, not change anything: every
// write route (POST/PATCH of /api/agents and /api/bridge/servers, /api/relay import, retention and
// restore) answers 403 with OWNER_SUSPENDED, the text POST /api/agents always gave; GET and DELETE
// still work, so the owner can read its agents and servers and delete them. Resumed, the writes
// work again. Before, PATCH /api/agents/<key> re-announced the agent's new profile on the public
// shard and POST /api/bridge/servers made the bridge dial and announce a new server.
import { describe, expect, it } from 'vitest';
import { OWNER_SUSPENDED } from '../../workers/common/owners.js';
import { api } from './api-helpers.js';
import { everythingUrl } from './bridge-helpers.js';
import { keys, now, sign, type Keys } from './helpers.js';
import { TEST_ADMIN_SK } from './test-keys.js';

const admin = (method: string, path: string, body?: unknown) => api(TEST_ADMIN_SK, method, path, body);

async function addOwner(): Promise<Keys> {
  const k = keys();
  expect(await admin('POST', '/api/admin/owners', { pubkey: k.pk })).toMatchObject({ status: 201 });
  return k;
}

async function createAgent(owner: Keys, name: string): Promise<string> {
  const r = await api(owner.sk, 'POST', '/api/agents', { name, provider: 'echo' });
  expect(r.status).toBe(201);
  return (r.json as { pubkey: string }).pubkey;
}

const suspend = async (owner: Keys, suspended: boolean) =>
  expect(await admin('PATCH', `/api/admin/owners/${owner.pk}`, { suspended })).toMatchObject({ status: 200, json: { suspended } });

const refused = { status: 403, json: { error: OWNER_SUSPENDED } };

describe('a suspended owner may look and delete through the management API, not change anything', () => {
  it('agents: POST and PATCH 403 (one text); GET 200, DELETE 204 (a hosted agent) and 200 (a revocation); resumed: PATCH 200', async () => {
    const owner = await addOwner();
    const kept = await createAgent(owner, 'kept');
    const deleted = await createAgent(owner, 'deleted');
    await suspend(owner, true);

    expect(OWNER_SUSPENDED).toBe('this owner is suspended on this deployment; contact its operator');
    expect(await api(owner.sk, 'PATCH', `/api/agents/${kept}`, { name: 'renamed', about: 'new text' })).toEqual(refused);
    expect(await api(owner.sk, 'POST', '/api/agents', { name: 'new', provider: 'echo' })).toEqual(refused);
    const listed = await api(owner.sk, 'GET', '/api/agents');
    expect(listed.status).toBe(200);
    expect((listed.json as { agents: Array<{ pubkey: string; name: string }> }).agents.map((a) => a.name).sort()).toEqual(['deleted', 'kept']);
    expect(await api(owner.sk, 'GET', `/api/agents/${kept}`)).toMatchObject({ status: 200, json: { pubkey: kept, name: 'kept' } });
    expect(await api(owner.sk, 'DELETE', `/api/agents/${deleted}`)).toEqual({ status: 204, json: null });
    const attested = keys().pk;
    expect(await api(owner.sk, 'DELETE', `/api/agents/${attested}`)).toEqual({ status: 200, json: { revoked: attested } });

    await suspend(owner, false);
    expect(await api(owner.sk, 'PATCH', `/api/agents/${kept}`, { name: 'renamed' })).toMatchObject({ status: 200, json: { pubkey: kept, name: 'renamed' } });
    expect(await api(owner.sk, 'GET', '/api/agents')).toMatchObject({ status: 200, json: { agents: [{ pubkey: kept, name: 'renamed' }] } });
  });

  it('bridge servers: POST and PATCH 403; GET 200, DELETE 204; resumed: POST 201', async () => {
    const owner = await addOwner();
    const added = await api(owner.sk, 'POST', '/api/bridge/servers', { id: 'before', url: everythingUrl(), public: false });
    expect(added).toMatchObject({ status: 201, json: { id: 'before' } });
    await suspend(owner, true);

    expect(await api(owner.sk, 'POST', '/api/bridge/servers', { id: 'while', url: everythingUrl() })).toEqual(refused);
    expect(await api(owner.sk, 'PATCH', '/api/bridge/servers/before', { name: 'renamed' })).toEqual(refused);
    const listed = await api(owner.sk, 'GET', '/api/bridge/servers');
    expect(listed.status).toBe(200);
    expect((listed.json as { servers: Array<{ id: string }> }).servers.map((s) => s.id)).toEqual(['before']);
    expect(await api(owner.sk, 'GET', '/api/bridge/servers/before')).toMatchObject({ status: 200, json: { id: 'before' } });
    expect(await api(owner.sk, 'DELETE', '/api/bridge/servers/before')).toEqual({ status: 204, json: null });

    await suspend(owner, false);
    expect(await api(owner.sk, 'POST', '/api/bridge/servers', { id: 'after', url: everythingUrl(), public: false })).toMatchObject({ status: 201, json: { id: 'after' } });
  });

  it('relay: import, retention and restore 403; export and the list of backups still answer; resumed: retention 200', async () => {
    const owner = await addOwner();
    await suspend(owner, true);

    const note = JSON.stringify(sign(owner, { kind: 1, content: 'imported while suspended', created_at: now() }));
    expect(await api(owner.sk, 'POST', '/api/relay/import', `${note}\n`)).toEqual(refused);
    expect(await api(owner.sk, 'PATCH', '/api/relay/retention', { rules: [{ kinds: [1], days: 1 }] })).toEqual(refused);
    expect(await api(owner.sk, 'POST', '/api/relay/restore', { backup: '2026-01-01T00-00-00Z' })).toEqual(refused);
    expect(await api(owner.sk, 'GET', '/api/relay/backups')).toEqual({ status: 200, json: { backups: [] } });
    expect(await api(owner.sk, 'GET', '/api/relay/export')).toEqual({ status: 200, json: null });

    await suspend(owner, false);
    expect(await api(owner.sk, 'PATCH', '/api/relay/retention', { rules: [{ kinds: [1], days: 1 }] })).toEqual({ status: 200, json: { rules: [{ kinds: [1], days: 1 }] } });
  });
});
