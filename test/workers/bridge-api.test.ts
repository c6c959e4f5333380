// The bridge's management API (/api/bridge/servers) against the real server-everything: every call,
// the exact 401/403/404/409/422 answers, headers sealed and never returned, health after contact,
// announcements (31316/31317/31318/31319 with prices as cap tags) and their NIP-09 deletion.
import { env, runDurableObjectAlarm, runInDurableObject } from 'cloudflare:test';
import { sha256 } from '@noble/hashes/sha2.js';
import { describe, expect, inject, it } from 'vitest';
import { bytesToHex } from '../../src/shared/hex.js';
import type { NostrEvent } from '../../src/shared/event.js';
import { makeHttpAuthHeader } from '../../src/shared/nip98.js';
import { api } from './api-helpers.js';
import { BASE, connect, keys } from './helpers.js';
import { TEST_ADMIN_SK, TEST_OWNER, TEST_OWNER_SK } from './test-keys.js';
import { announcements, bridgeReady, DvmcpClient, everythingUrl, registerServer } from './bridge-helpers.js';
import type { Bridge } from '../../workers/bridge/bridge-do.js';
import { ServerStore } from '../../workers/bridge/server-store.js';
import { shardStub } from '../../workers/common/shards.js';

const SECRET = 'Bearer very-secret-token-value';

interface View {
  id: string;
  url: string;
  provider: string;
  header_names: string[];
  public: boolean;
  encryption: boolean;
  prices: Record<string, { price: string; unit: string }>;
  health: { ok: boolean | null; checked_at: number | null; error: string | null; tools: number; resources: number; resource_templates: number; prompts: number };
}

const tag = (e: NostrEvent, name: string) => e.tags.find((t) => t[0] === name)?.[1];

async function healthy(id: string): Promise<View> {
  for (let i = 0; i < 100; i++) {
    const r = await api(TEST_OWNER_SK, 'GET', `/api/bridge/servers/${id}`);
    const v = r.json as View;
    if (v.health.ok !== null && v.health.tools > 0) return v;
    await new Promise((res) => setTimeout(res, 100));
  }
  throw new Error(`server ${id} never became healthy`);
}

describe('bridge management API', () => {
  it('registers a server: 201 {provider, id}; lists it with health, header names only; the provider key is one per owner', async () => {
    const a = await registerServer({ id: 'api-a', name: 'Everything', headers: { Authorization: SECRET }, public: false });
    expect(a.id).toBe('api-a');
    expect(a.provider).toMatch(/^[0-9a-f]{64}$/);
    const b = await registerServer({ id: 'api-b', public: false });
    expect(b.provider).toBe(a.provider);
    // The public shard knows it as this deployment's bridge (/mcp lists such servers first).
    expect(await shardStub(env, null).bridgeProviders()).toContain(a.provider);
    const list = await api(TEST_OWNER_SK, 'GET', '/api/bridge/servers');
    expect(list.status).toBe(200);
    const servers = (list.json as { servers: View[] }).servers;
    expect(servers.map((s) => s.id)).toEqual(expect.arrayContaining(['api-a', 'api-b']));
    const raw = JSON.stringify(list.json);
    expect(raw).not.toContain('very-secret-token-value');
    const one = servers.find((s) => s.id === 'api-a')!;
    expect(one).toMatchObject({ url: everythingUrl(), header_names: ['Authorization'], public: false, encryption: true, provider: a.provider });
    const v = await healthy('api-a');
    expect(v.health).toMatchObject({ ok: true, error: null });
    expect(v.health.tools).toBeGreaterThan(5);
    expect(v.health.prompts).toBeGreaterThan(0);
    expect(v.health.resources).toBeGreaterThan(0);
    expect(JSON.stringify(v)).not.toContain('very-secret');
    // At rest: the headers and the key are sealed (no plaintext in the Durable Object's tables).
    const dump = await runInDurableObject(env.BRIDGE.get(env.BRIDGE.idFromName(TEST_OWNER)), (_i, state) =>
      JSON.stringify([state.storage.sql.exec('SELECT * FROM servers').toArray(), state.storage.sql.exec('SELECT * FROM provider').toArray()]),
    );
    expect(dump).not.toContain('very-secret-token-value');
    expect(dump).toContain('v1:');
  });

  it('409 on a duplicate id; 422 for bad bodies, ids, prices, headers and URLs the outbound policy refuses', async () => {
    await registerServer({ id: 'api-dup', public: false });
    const dup = await api(TEST_OWNER_SK, 'POST', '/api/bridge/servers', { id: 'api-dup', url: everythingUrl() });
    expect(dup).toEqual({ status: 409, json: { error: 'a server with id api-dup is already registered' } });

    const notJson = await api(TEST_OWNER_SK, 'POST', '/api/bridge/servers', '{nope');
    expect(notJson).toEqual({ status: 422, json: { error: 'body is not JSON', issues: [] } });
    const badId = await api(TEST_OWNER_SK, 'POST', '/api/bridge/servers', { id: 'bad id!', url: everythingUrl() });
    expect(badId).toEqual({ status: 422, json: { error: 'invalid server', issues: [{ path: 'id', message: 'server ids are 1-64 characters of [a-zA-Z0-9_.-]' }] } });
    const badPrice = await api(TEST_OWNER_SK, 'POST', '/api/bridge/servers', { id: 'p1', url: everythingUrl(), prices: { echo: { price: '0', unit: 'sats' } } });
    expect(badPrice).toEqual({ status: 422, json: { error: 'invalid server', issues: [{ path: 'prices.echo.price', message: 'price is a positive integer string, e.g. "21"' }] } });
    // A lone surrogate (possible in JSON) has no UTF-8 form: such a priced name could never be paid for (payments-gate.ts refuses the call).
    const loneSurrogate = await api(TEST_OWNER_SK, 'POST', '/api/bridge/servers', '{"id":"p2","url":' + JSON.stringify(everythingUrl()) + ',"prices":{"echo\\ud800":{"price":"21","unit":"sats"}}}');
    expect(loneSurrogate).toMatchObject({ status: 422, json: { error: 'invalid server', issues: [{ path: 'prices', message: 'a priced name must be valid Unicode (it has a lone surrogate)' }] } });
    const badHeader = await api(TEST_OWNER_SK, 'POST', '/api/bridge/servers', { id: 'h1', url: everythingUrl(), headers: { 'Mcp-Session-Id': 'x' } });
    expect(badHeader).toEqual({ status: 422, json: { error: 'invalid server', issues: [{ path: 'headers.Mcp-Session-Id', message: 'Mcp-Session-Id is set by the bridge' }] } });
    const unknownField = await api(TEST_OWNER_SK, 'POST', '/api/bridge/servers', { id: 'u1', url: everythingUrl(), color: 'red' });
    expect(unknownField.status).toBe(422);
    const metadata = await api(TEST_OWNER_SK, 'POST', '/api/bridge/servers', { id: 'm1', url: 'http://169.254.169.254/latest' });
    expect(metadata).toEqual({
      status: 422,
      json: { error: 'invalid server', issues: [{ path: 'url', message: 'refused: plain http:// is allowed only in development or for hosts in EDGESTR_OUTBOUND_ALLOW; use https://' }] },
    });
    const local = await api(TEST_OWNER_SK, 'POST', '/api/bridge/servers', { id: 'm2', url: 'https://10.0.0.1/mcp' });
    expect(local).toEqual({ status: 422, json: { error: 'invalid server', issues: [{ path: 'url', message: 'refused: 10.0.0.1 is a private address' }] } });
    const listed = (await api(TEST_OWNER_SK, 'GET', '/api/bridge/servers')).json as { servers: View[] };
    expect(listed.servers.map((s) => s.id)).not.toContain('m1');
  });

  it('401 without or with a bad NIP-98 header; 403 for a key that may not own, before anything is created', async () => {
    const none = await api(TEST_OWNER_SK, 'GET', '/api/bridge/servers', undefined, '');
    expect(none.status).toBe(401);
    expect((none.json as { error: string }).error).toMatch(/^NIP-98: /);
    const wrongUrl = await api(TEST_OWNER_SK, 'GET', '/api/bridge/servers', undefined, makeHttpAuthHeader(TEST_OWNER_SK, `${BASE}/api/agents`, 'GET'));
    expect(wrongUrl.status).toBe(401);
    const stranger = keys();
    const r = await api(stranger.sk, 'POST', '/api/bridge/servers', { id: 'x', url: everythingUrl() });
    expect(r).toEqual({ status: 403, json: { error: 'this pubkey is not an owner on this deployment; ask the operators to add it' } });
    const created = await runInDurableObject(env.BRIDGE.get(env.BRIDGE.idFromName(stranger.pk)), (_i, state) => state.storage.sql.exec('SELECT count(*) AS n FROM provider').one().n);
    expect(created).toBe(0);
  });

  it('a new owner\'s first two registrations at once both succeed, with one provider key', async () => {
    const owner = keys();
    expect((await api(TEST_ADMIN_SK, 'POST', '/api/admin/owners', { pubkey: owner.pk })).status).toBe(201);
    const [a, b] = await Promise.all(['twin-a', 'twin-b'].map((id) => api(owner.sk, 'POST', '/api/bridge/servers', { id, url: everythingUrl(), public: false })));
    expect(a).toEqual({ status: 201, json: { provider: expect.stringMatching(/^[0-9a-f]{64}$/), id: 'twin-a' } });
    expect(b).toEqual({ status: 201, json: { provider: (a!.json as { provider: string }).provider, id: 'twin-b' } });
    const provider = (a!.json as { provider: string }).provider;
    const views = (await api(owner.sk, 'GET', '/api/bridge/servers')).json as { servers: View[] };
    expect(views.servers.map((s) => [s.id, s.provider])).toEqual([['twin-a', provider], ['twin-b', provider]]);
    // A second creation that checked before the first stored its key (the sealing is awaited) keeps the first key.
    const kept = await runInDurableObject(env.BRIDGE.get(env.BRIDGE.idFromName(owner.pk)), async (_i, state) => {
      const late = new ServerStore(state.storage.sql, env);
      const record = await late.createProvider(owner.pk, BASE, keys().sk);
      return { record: record.pubkey, signer: (await late.sign({ kind: 1, created_at: 1, tags: [], content: '' })).pubkey };
    });
    expect(kept).toEqual({ record: provider, signer: provider });
  });

  it('GET/PATCH/DELETE of an unknown id: 404; PATCH validates like POST; PATCH of headers replaces them (names only shown)', async () => {
    for (const method of ['GET', 'PATCH', 'DELETE']) {
      const r = await api(TEST_OWNER_SK, method, '/api/bridge/servers/nope', method === 'PATCH' ? { name: 'x' } : undefined);
      expect(r).toEqual({ status: 404, json: { error: 'no such server' } });
    }
    await registerServer({ id: 'api-patch', public: false, headers: { 'X-One': 'a' } });
    const bad = await api(TEST_OWNER_SK, 'PATCH', '/api/bridge/servers/api-patch', { url: 'ftp://example.com/' });
    expect(bad).toEqual({ status: 422, json: { error: 'invalid server', issues: [{ path: 'url', message: 'refused: only http and https URLs are allowed' }] } });
    const idChange = await api(TEST_OWNER_SK, 'PATCH', '/api/bridge/servers/api-patch', { id: 'other' });
    expect(idChange.status).toBe(422);
    const r = await api(TEST_OWNER_SK, 'PATCH', '/api/bridge/servers/api-patch', { name: 'Renamed', headers: { 'X-Two': 'secret-two' } });
    expect(r.status).toBe(200);
    expect(r.json).toMatchObject({ id: 'api-patch', name: 'Renamed', header_names: ['X-Two'] });
    expect(JSON.stringify(r.json)).not.toContain('secret-two');
  });

  it('PATCH of the URL to another origin without headers: 422 (the secret headers are not sent to a new host); with headers: 200 and those sent; same origin: kept', async () => {
    const TOKEN = 'bridge-move-token-7d21';
    // The fixture's endpoint answers 401 without `Authorization: Bearer <TOKEN>`; its tool whoami answers the Authorization it got.
    const fixture = inject('toolsFixtureUrl');
    const bearerOnly = `${fixture}/mcp-paged?bearer-sha256=${bytesToHex(sha256(new TextEncoder().encode(TOKEN)))}`;
    const { provider } = await registerServer({ id: 'api-move', public: false, headers: { Authorization: SECRET } });
    const patch = (body: Record<string, unknown>) => api(TEST_OWNER_SK, 'PATCH', '/api/bridge/servers/api-move', body);
    const whoami = async (): Promise<unknown> => {
      await bridgeReady(provider);
      const c = await DvmcpClient.open(provider);
      const a = await c.call('tools/call', { name: 'whoami', arguments: {} }, { s: 'api-move' });
      c.close();
      return a.result.ok ? a.result.value.content : a.result;
    };

    // everythingUrl() and the fixture listen on two ports of 127.0.0.1: two origins.
    expect(new URL(fixture).origin).not.toBe(new URL(everythingUrl()).origin);
    expect(await patch({ url: bearerOnly })).toEqual({
      status: 422,
      json: {
        error: 'invalid server',
        issues: [{ path: 'headers', message: `the url moves to another origin (${new URL(fixture).origin}): give the headers again to send them there, or "headers": {} to send none` }],
      },
    });
    expect((await api(TEST_OWNER_SK, 'GET', '/api/bridge/servers/api-move')).json).toMatchObject({ url: everythingUrl(), header_names: ['Authorization'] });

    expect(await patch({ url: bearerOnly, headers: { Authorization: `Bearer ${TOKEN}` } })).toMatchObject({ status: 200, json: { url: bearerOnly, header_names: ['Authorization'] } });
    expect(await whoami()).toEqual([{ type: 'text', text: `authorization: Bearer ${TOKEN}` }]);
    // The same origin: the headers are kept (this path does not ask for them; whoami shows they are still sent).
    expect(await patch({ url: `${fixture}/mcp-paged` })).toMatchObject({ status: 200, json: { url: `${fixture}/mcp-paged`, header_names: ['Authorization'] } });
    expect(await whoami()).toEqual([{ type: 'text', text: `authorization: Bearer ${TOKEN}` }]);
    // `"headers": {}` moves it with none; a server without headers moves freely.
    expect(await patch({ url: everythingUrl(), headers: {} })).toMatchObject({ status: 200, json: { url: everythingUrl(), header_names: [] } });
    expect(await patch({ url: `${fixture}/mcp-paged` })).toMatchObject({ status: 200, json: { url: `${fixture}/mcp-paged`, header_names: [] } });
    expect(await whoami()).toEqual([{ type: 'text', text: 'authorization: (none)' }]);
  });

  it('a public server is announced on the public and the owner shard (31316, 31317, 31318 ×2, 31319), prices as cap tags; DELETE publishes the NIP-09 deletion', async () => {
    const { provider } = await registerServer({
      id: 'api-pub',
      name: 'Everything',
      about: 'server-everything over DVMCP',
      website: 'https://example.com/',
      prices: { echo: { price: '21', unit: 'sats' }, 'demo://resource/static/document/architecture.md': { price: '5', unit: 'sats' } },
    });
    const ofServer = (es: NostrEvent[]) => es.filter((e) => tag(e, 'd') === 'api-pub' || tag(e, 's') === 'api-pub');
    const all = ofServer(await announcements(provider, [31316, 31317, 31318, 31319], (es) => ofServer(es).length >= 5));
    const server = all.find((e) => e.kind === 31316)!;
    expect(server.tags).toEqual([['d', 'api-pub'], ['k', '25910'], ['name', 'Everything'], ['about', 'server-everything over DVMCP'], ['website', 'https://example.com/'], ['support_encryption', 'true']]);
    expect(JSON.parse(server.content)).toMatchObject({ serverInfo: { name: expect.any(String) }, capabilities: { tools: expect.any(Object) } });
    const tools = all.find((e) => e.kind === 31317)!;
    expect(tag(tools, 'd')).toBe('api-pub/tools/list');
    expect(tools.tags).toContainEqual(['cap', 'echo', '21', 'sats']);
    expect(tools.tags).toContainEqual(['cap', 'get-sum']);
    expect(tools.tags).toContainEqual(['s', 'api-pub']);
    const resources = all.filter((e) => e.kind === 31318);
    expect(resources.map((e) => tag(e, 'd')).sort()).toEqual(['api-pub/resources/list', 'api-pub/resources/templates/list']);
    const list = resources.find((e) => tag(e, 'd') === 'api-pub/resources/list')!;
    expect(list.tags).toContainEqual(['cap', 'architecture.md', '5', 'sats']);
    expect(all.some((e) => e.kind === 31319)).toBe(true);
    // The owner's shard has them too.
    const owners = ofServer(await announcements(provider, [31316, 31317], (es) => ofServer(es).length >= 2, `/r/${TEST_OWNER}`));
    expect(owners.map((e) => e.kind).sort()).toEqual([31316, 31317]);

    const del = await api(TEST_OWNER_SK, 'DELETE', '/api/bridge/servers/api-pub');
    expect(del).toEqual({ status: 204, json: null });
    const s = await connect('/');
    const deletions = (await s.req('del', { kinds: [5], authors: [provider] })).events;
    const deletion = deletions.find((e) => e.tags.some((t) => t[0] === 'a' && t[1] === `31316:${provider}:api-pub`))!;
    expect(deletion.tags.filter((t) => t[0] === 'a').map((t) => t[1])).toEqual([
      `31316:${provider}:api-pub`,
      `31317:${provider}:api-pub/tools/list`,
      `31318:${provider}:api-pub/resources/list`,
      `31318:${provider}:api-pub/resources/templates/list`,
      `31319:${provider}:api-pub/prompts/list`,
    ]);
    const gone = (await s.req('gone', { kinds: [31316, 31317], authors: [provider], '#d': ['api-pub', 'api-pub/tools/list'] })).events;
    expect(gone).toEqual([]);
    s.close();
    expect(await api(TEST_OWNER_SK, 'GET', '/api/bridge/servers/api-pub')).toEqual({ status: 404, json: { error: 'no such server' } });
  });

  it('a public server made private has its announcements deleted', async () => {
    const { provider } = await registerServer({ id: 'api-flip' });
    const mine = (es: NostrEvent[]) => es.filter((e) => tag(e, 'd') === 'api-flip');
    expect(mine(await announcements(provider, [31316], (es) => mine(es).length > 0))).toHaveLength(1);
    const r = await api(TEST_OWNER_SK, 'PATCH', '/api/bridge/servers/api-flip', { public: false });
    expect(r.status).toBe(200);
    const left = await announcements(provider, [31316], (es) => mine(es).length === 0);
    expect(mine(left)).toEqual([]);
  });

  it('a server made private while its announcements are being published has them deleted (the change is not overwritten by the refresh)', async () => {
    const { provider } = await registerServer({ id: 'api-race' });
    const mine = (es: NostrEvent[]) => es.filter((e) => tag(e, 'd') === 'api-race');
    expect(mine(await announcements(provider, [31316], (es) => mine(es).length > 0))).toHaveLength(1);
    const bridge = env.BRIDGE.get(env.BRIDGE.idFromName(TEST_OWNER));
    await runInDurableObject(bridge, async (i, state) => {
      const instance = i as Bridge;
      // A refresh of the public server runs (it lists upstream, then publishes all five again), and
      // the owner makes it private meanwhile. Before the fix either the alarm the change set ran a
      // second refresh alongside (which saw nothing announced yet, so deleted nothing), or the first
      // refresh, ending, pushed the refresh the change asked for 6 hours away.
      // (`announced` stale, not empty: the refresh publishes all five again, a window long enough to
      // land in, and a change landing before the refresh read the server still deletes. On the old
      // code the test failed in about half of the runs: the other half the parallel refresh deleted
      // first and the republished events were refused as deleted.)
      state.storage.sql.exec("UPDATE servers SET refresh_at = 0, announced = 'stale' WHERE id = 'api-race'");
      const running = instance.alarm();
      await new Promise((r) => setTimeout(r, 5)); // the refresh has read the server (public) and is listing upstream
      await instance.updateServer('api-race', { public: false });
      await running;
    });
    const left = await announcements(provider, [31316], (es) => mine(es).length === 0);
    expect(mine(left)).toEqual([]);
  });

  it('health shows an unreachable upstream with the error', async () => {
    await registerServer({ id: 'api-down', url: 'http://127.0.0.1:1/mcp', public: false });
    let v: View | undefined;
    for (let i = 0; i < 100 && v?.health.ok !== false; i++) {
      v = (await api(TEST_OWNER_SK, 'GET', '/api/bridge/servers/api-down')).json as View;
      if (v.health.ok !== false) await new Promise((r) => setTimeout(r, 100));
    }
    expect(v!.health).toMatchObject({ ok: false, checked_at: expect.any(Number), error: expect.stringMatching(/^unreachable: /), tools: 0 });
  });

  it('the scheduled refresh does not republish an unchanged set; an update republishes', async () => {
    const { provider } = await registerServer({ id: 'api-hash' });
    const server = async (ready: (e: NostrEvent | undefined) => boolean) =>
      (await announcements(provider, [31316], (es) => ready(es.find((e) => tag(e, 'd') === 'api-hash')))).find((e) => tag(e, 'd') === 'api-hash');
    const first = await server((e) => e !== undefined);
    const bridge = env.BRIDGE.get(env.BRIDGE.idFromName(TEST_OWNER));
    // The 6-hour refresh, made due now.
    await runInDurableObject(bridge, (_i, state) => {
      state.storage.sql.exec("UPDATE servers SET refresh_at = 0 WHERE id = 'api-hash'");
    });
    await new Promise((r) => setTimeout(r, 1100)); // a republish would carry a later created_at
    expect(await runDurableObjectAlarm(bridge)).toBe(true);
    const refreshAt = await runInDurableObject(bridge, (_i, state) => state.storage.sql.exec<{ r: number }>("SELECT refresh_at AS r FROM servers WHERE id = 'api-hash'").one().r);
    expect(refreshAt).toBeGreaterThan(Date.now() + 5 * 3600_000);
    expect((await server(() => true))!.id).toBe(first!.id);
    const r = await api(TEST_OWNER_SK, 'PATCH', '/api/bridge/servers/api-hash', { about: 'now described' });
    expect(r.status).toBe(200);
    const second = await server((e) => e !== undefined && tag(e, 'about') === 'now described');
    expect(second!.id).not.toBe(first!.id);
  });
});
