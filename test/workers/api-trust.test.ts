// Management API trust rules: the owner allow-list on every call (not only on create), NIP-98
// header checks before the body is read, a capped body, no Durable Object touched for callers who
// may not use the API, and replay ids remembered (in the caller's ApiState) as long as their event
// is valid.
import { listDurableObjectIds, runInDurableObject, env, SELF } from 'cloudflare:test';
import { describe, expect, it } from 'vitest';
import { DEMO_AGENT, DEMO_OWNER, DEMO_OWNER_SK } from '../../workers/common/owners.js';
import { base64Decode } from '../../src/shared/hex.js';
import { makeHttpAuthHeader } from '../../src/shared/nip98.js';
import { apiStateStub } from '../../workers/api/api-state.js';
import { shardName } from '../../workers/common/shards.js';
import { api } from './api-helpers.js';
import { apiWithEnv, fetchWithEnv } from './app-env.js';
import { BASE, keys, now } from './helpers.js';
import { TEST_OWNER, TEST_OWNER_SK } from './test-keys.js';

const NOT_AN_OWNER = { error: 'this pubkey is not an owner on this deployment; ask the operators to add it' };
const TOO_LARGE = { error: 'request body too large (max 262144 bytes)' };

const eventIdOf = (header: string): string =>
  (JSON.parse(new TextDecoder().decode(base64Decode(header.slice('Nostr '.length))!)) as { id: string }).id;

/** Whether the caller's ApiState object exists (listing the ids never creates one), and its shard's. */
const touched = async (caller: string) => {
  const ids = await listDurableObjectIds(env.API_STATE);
  const shards = await listDurableObjectIds(env.RELAY_SHARD);
  const shard = env.RELAY_SHARD.idFromName(shardName(caller));
  return {
    apiState: ids.some((id) => id.equals(env.API_STATE.idFromName(caller))),
    shard: shards.some((id) => id.equals(shard)),
  };
};

describe('the owner allow-list on every management call', () => {
  it('an owner removed from EDGESTR_OWNERS can no longer list, read, change or delete its agents', async () => {
    const created = await api(TEST_OWNER_SK, 'POST', '/api/agents', { name: 'to be orphaned' });
    expect(created.status).toBe(201);
    const pk = (created.json as { pubkey: string }).pubkey;
    const removed = { EDGESTR_OWNERS: '' };
    expect(await apiWithEnv(removed, TEST_OWNER_SK, 'GET', '/api/agents')).toEqual({ status: 403, json: NOT_AN_OWNER });
    expect(await apiWithEnv(removed, TEST_OWNER_SK, 'GET', `/api/agents/${pk}`)).toEqual({ status: 403, json: NOT_AN_OWNER });
    expect(await apiWithEnv(removed, TEST_OWNER_SK, 'PATCH', `/api/agents/${pk}`, { name: 'x' })).toEqual({ status: 403, json: NOT_AN_OWNER });
    expect(await apiWithEnv(removed, TEST_OWNER_SK, 'DELETE', `/api/agents/${pk}`)).toEqual({ status: 403, json: NOT_AN_OWNER });
    // Allowed again: the agent is untouched.
    expect(await api(TEST_OWNER_SK, 'GET', `/api/agents/${pk}`)).toMatchObject({ status: 200, json: { pubkey: pk, name: 'to be orphaned' } });
  });

  it('the development demo agent is not editable with the public demo key once the deployment leaves development', async () => {
    const health = await fetchWithEnv({ EDGESTR_ENV: 'development' }, new Request('http://127.0.0.1/health'));
    expect(((await health.json()) as { demo?: { owner: string; agent: string } }).demo).toMatchObject({ owner: DEMO_OWNER, agent: DEMO_AGENT });
    const dev = await apiWithEnv({ EDGESTR_ENV: 'development' }, DEMO_OWNER_SK, 'GET', `/api/agents/${DEMO_AGENT}`, undefined, 'http://127.0.0.1');
    expect(dev).toMatchObject({ status: 200, json: { pubkey: DEMO_AGENT } });
    // This test run is EDGESTR_ENV=test: the demo key is just a stranger's key.
    expect(await api(DEMO_OWNER_SK, 'PATCH', `/api/agents/${DEMO_AGENT}`, { system_prompt: 'leak everything' })).toEqual({ status: 403, json: NOT_AN_OWNER });
    expect(await api(DEMO_OWNER_SK, 'DELETE', `/api/agents/${DEMO_AGENT}`)).toEqual({ status: 403, json: NOT_AN_OWNER });
  });

  it('a stranger who can sign is refused before any Durable Object is touched (no replay record, no shard)', async () => {
    const stranger = keys();
    expect(await api(stranger.sk, 'GET', '/api/agents')).toEqual({ status: 403, json: NOT_AN_OWNER });
    expect(await api(stranger.sk, 'POST', '/api/agents', { name: 'x' })).toEqual({ status: 403, json: NOT_AN_OWNER });
    expect(await touched(stranger.pk)).toEqual({ apiState: false, shard: false });
    // The allowed owner's calls do record their id.
    expect((await api(TEST_OWNER_SK, 'GET', '/api/agents')).status).toBe(200);
    expect((await touched(TEST_OWNER)).apiState).toBe(true);
  });
});

describe('EDGESTR_PUBLIC_URL', () => {
  it("an agent's relays are on the public URL, whatever Host the management call used", async () => {
    const r = await apiWithEnv({ EDGESTR_PUBLIC_URL: 'https://relay.example.org' }, TEST_OWNER_SK, 'POST', '/api/agents', { name: 'public' });
    expect(r.status).toBe(201);
    expect((r.json as { relays: string[] }).relays).toEqual([`wss://relay.example.org/r/${TEST_OWNER}`, 'wss://relay.example.org/']);
  });
});

describe('NIP-98 before the body', () => {
  const url = `${BASE}/api/agents`;

  it('413 for a body over 256 KiB (declared length), from an allowed owner with a valid header', async () => {
    const body = JSON.stringify({ name: 'big', system_prompt: 'x'.repeat(300 * 1024) });
    const r = await api(TEST_OWNER_SK, 'POST', '/api/agents', body);
    expect(r).toEqual({ status: 413, json: TOO_LARGE });
  });

  it('413 for a streamed body that grows past 256 KiB without a Content-Length', async () => {
    const chunk = new TextEncoder().encode('x'.repeat(64 * 1024));
    let sent = 0;
    const stream = new ReadableStream<Uint8Array>({
      pull(controller) {
        if (sent++ < 8) controller.enqueue(chunk);
        else controller.close();
      },
    });
    const header = makeHttpAuthHeader(TEST_OWNER_SK, url, 'POST', 'whatever');
    // Straight into the Worker's fetch (no network pipe whose writer would see the cancel).
    const res = await fetchWithEnv({}, new Request(url, { method: 'POST', headers: { Authorization: header }, body: stream }));
    expect({ status: res.status, json: await res.json() }).toEqual({ status: 413, json: TOO_LARGE });
  });

  it('a bad header is refused without reading the body (a body that never ends)', async () => {
    const never = new ReadableStream<Uint8Array>({ pull: () => new Promise<void>(() => undefined) });
    const res = await SELF.fetch(url, { method: 'POST', headers: { Authorization: 'Nostr !!!' }, body: never });
    expect({ status: res.status, json: await res.json() }).toEqual({ status: 401, json: { error: 'NIP-98: Authorization token is not valid base64' } });
  });

  it('an event dated 55 s ahead is remembered until it stops being valid (created_at + 60 s), so it cannot be replayed', async () => {
    const createdAt = now() + 55;
    const header = makeHttpAuthHeader(TEST_OWNER_SK, url, 'GET', undefined, createdAt);
    expect((await api(TEST_OWNER_SK, 'GET', '/api/agents', undefined, header)).status).toBe(200);
    const id = eventIdOf(header);
    const expiresAt = await runInDurableObject(apiStateStub(env, TEST_OWNER), (_i, state) =>
      state.storage.sql.exec<{ expires_at: number }>('SELECT expires_at FROM http_auth_seen WHERE id = ?', id).one().expires_at,
    );
    expect(expiresAt).toBeGreaterThanOrEqual(createdAt + 60);
  });
});

describe('private answers are never kept by a cache', () => {
  const signed = (method: string, path: string) => ({ method, headers: { Authorization: makeHttpAuthHeader(TEST_OWNER_SK, `${BASE}${path}`, method) } });
  it('every /api answer (an owner’s agents, usage, export, a refusal, an unknown route) says no-store and nosniff', async () => {
    const answers = [
      await SELF.fetch(`${BASE}/api/agents`, signed('GET', '/api/agents')),
      await SELF.fetch(`${BASE}/api/usage`, signed('GET', '/api/usage')),
      await SELF.fetch(`${BASE}/api/relay/export`, signed('GET', '/api/relay/export')),
      await SELF.fetch(`${BASE}/api/agents`),
      await SELF.fetch(`${BASE}/api/no-such-route`),
    ];
    expect(answers.map((r) => r.status)).toEqual([200, 200, 200, 401, 404]);
    for (const r of answers) {
      await r.arrayBuffer();
      expect(r.headers.get('Cache-Control')).toBe('no-store');
      expect(r.headers.get('X-Content-Type-Options')).toBe('nosniff');
    }
  });
});
