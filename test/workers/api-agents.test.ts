// Management API for agents: NIP-98 authentication, who may own, validation, and CRUD by the owner only.
import { env, listDurableObjectIds, SELF } from 'cloudflare:test';
import { describe, expect, it } from 'vitest';
import { npubEncode } from 'nostr-tools/nip19';
import { makeHttpAuthHeader } from '../../src/shared/nip98.js';
import { api } from './api-helpers.js';
import { apiWithEnv } from './app-env.js';
import { BASE, keys } from './helpers.js';
import { TEST_OWNER, TEST_OWNER_SK } from './test-keys.js';

const create = (body: object = { name: 'test agent' }) => api(TEST_OWNER_SK, 'POST', '/api/agents', body);

describe('POST /api/agents', () => {
  it('creates an agent for an allowed owner', async () => {
    const r = await create({ name: 'alpha', about: 'a test agent', tools: ['calculator'] });
    expect(r.status).toBe(201);
    const body = r.json as { pubkey: string; npub: string; owner: string; relays: string[] };
    expect(body.pubkey).toMatch(/^[0-9a-f]{64}$/);
    expect(body.npub).toBe(npubEncode(body.pubkey));
    expect(body.owner).toBe(TEST_OWNER);
    expect(body.relays).toEqual([`ws://relay.test/r/${TEST_OWNER}`, 'ws://relay.test/']);
    expect(Object.keys(body).sort()).toEqual(['npub', 'owner', 'pubkey', 'relays']);
  });

  it.each([
    ['missing name', {}, 'name'],
    ['unknown field', { name: 'x', colour: 'red' }, ''],
    ['bad provider', { name: 'x', provider: 'gpt' }, 'provider'],
    ['bad pubkey in allow', { name: 'x', allow: ['nope'] }, 'allow'],
    ['bad relay', { name: 'x', relays: ['http://example.com'] }, 'relays.0'],
    ['unconfigured provider', { name: 'x', provider: 'workers-ai' }, 'provider'],
    ['openai without a model', { name: 'x', provider: 'openai' }, 'models'],
    ['anthropic without a model', { name: 'x', provider: 'anthropic', models: [] }, 'models'],
    ['web_fetch without hosts', { name: 'x', provider: 'echo', tools: ['web_fetch'] }, 'web_fetch_hosts'],
    ['web_fetch with an empty host list', { name: 'x', provider: 'echo', tools: ['web_fetch'], web_fetch_hosts: [] }, 'web_fetch_hosts'],
  ])('422 for %s', async (_n, body, path) => {
    const r = await create(body);
    expect(r.status).toBe(422);
    const j = r.json as { error: string; issues: Array<{ path: string; message: string }> };
    expect(j.error).toBe('invalid agent');
    expect(j.issues.map((i) => i.path)).toContain(path);
  });

  it('an explicit hosted provider needs a model: the exact 422 a user gets, and what is accepted', async () => {
    expect(await create({ name: 'x', provider: 'openai' })).toEqual({
      status: 422,
      json: {
        error: 'invalid agent',
        issues: [{ path: 'models', message: 'provider "openai" needs a model: set models (e.g. ["gpt-4o-mini"], or a local server\'s model name such as ["llama3.2"]) or default_model' }],
      },
    });
    const withModels = await create({ name: 'x', provider: 'openai', models: ['llama3.2'] });
    expect(withModels.status).toBe(201);
    const withDefault = await create({ name: 'x', provider: 'anthropic', default_model: 'claude-sonnet-4-5' });
    expect(withDefault.status).toBe(201);
    // ai.info advertises the model named, never a made-up "default".
    const view = await api(TEST_OWNER_SK, 'GET', `/api/agents/${(withDefault.json as { pubkey: string }).pubkey}`);
    expect(view.json).toMatchObject({ provider: 'anthropic', default_model: 'claude-sonnet-4-5' });
    // echo needs none.
    expect((await create({ name: 'x', provider: 'echo' })).status).toBe(201);
  });

  it('a model name (models, default_model) longer than 200 characters: the exact 422 naming the limit (each name is a key of the owner’s usage rows); 200 characters are accepted', async () => {
    expect(await create({ name: 'x', provider: 'openai', models: ['m'.repeat(201)] })).toEqual({
      status: 422,
      json: { error: 'invalid agent', issues: [{ path: 'models.0', message: 'model names are at most 200 characters' }] },
    });
    expect(await create({ name: 'x', provider: 'openai', models: ['m'], default_model: 'm'.repeat(201) })).toEqual({
      status: 422,
      json: { error: 'invalid agent', issues: [{ path: 'default_model', message: 'model names are at most 200 characters' }] },
    });
    expect((await create({ name: 'x', provider: 'openai', models: ['m'.repeat(200)] })).status).toBe(201);
  });

  it('web_fetch without hosts: the exact 422; with hosts it is created', async () => {
    expect(await create({ name: 'x', provider: 'echo', tools: ['web_fetch'] })).toEqual({
      status: 422,
      json: { error: 'invalid agent', issues: [{ path: 'web_fetch_hosts', message: 'web_fetch needs the hosts it may fetch: set web_fetch_hosts (e.g. ["example.com", "*.example.org"])' }] },
    });
    expect((await create({ name: 'x', provider: 'echo', tools: ['web_fetch'], web_fetch_hosts: ['example.com'] })).status).toBe(201);
  });

  it("web_fetch_hosts naming this deployment's own host (production: its hostname): the exact 422 at create and PATCH; another host, a wildcard, and the local modes' port-less entry are accepted", async () => {
    const own = (path: string, host: string) => ({
      status: 422,
      json: { error: 'invalid agent', issues: [{ path, message: `refused: ${host} is this deployment's own host (a loop)` }] },
    });
    const production = { EDGESTR_ENV: undefined };
    const fetching = (hosts: string[]) => ({ name: 'x', provider: 'echo', tools: ['web_fetch'], web_fetch_hosts: hosts });
    // The host the call came in on (BASE: http://relay.test), in any spelling of it.
    expect(await apiWithEnv(production, TEST_OWNER_SK, 'POST', '/api/agents', fetching(['example.com', 'RELAY.test.']))).toEqual(own('web_fetch_hosts.1', 'relay.test'));
    // EDGESTR_PUBLIC_URL's host (the agent's origin; a deployment with it set is called on that host only).
    const pub = { ...production, EDGESTR_PUBLIC_URL: 'https://relay.example.org' };
    const onPub = (body: unknown) => apiWithEnv(pub, TEST_OWNER_SK, 'POST', '/api/agents', body, 'https://relay.example.org');
    expect(await onPub(fetching(['relay.example.org']))).toEqual(own('web_fetch_hosts.0', 'relay.example.org'));
    // A wildcard names other hosts too: accepted (a fetch of the own host is refused when it is dialled).
    expect((await onPub(fetching(['*.example.org', '*.test']))).status).toBe(201);
    const created = await apiWithEnv(production, TEST_OWNER_SK, 'POST', '/api/agents', fetching(['example.com']));
    expect(created.status).toBe(201);
    const pk = (created.json as { pubkey: string }).pubkey;
    expect(await apiWithEnv(production, TEST_OWNER_SK, 'PATCH', `/api/agents/${pk}`, { web_fetch_hosts: ['relay.test'] })).toEqual(own('web_fetch_hosts.0', 'relay.test'));
    // The local modes compare host and port: a port-less entry also names the host's other ports, other local servers.
    expect((await create(fetching(['relay.test']))).status).toBe(201);
  });

  it('PATCH is checked on the agent it would make: a model-less provider or host-less web_fetch is refused', async () => {
    const pk = ((await create({ name: 'patchme', provider: 'echo' })).json as { pubkey: string }).pubkey;
    const r1 = await api(TEST_OWNER_SK, 'PATCH', `/api/agents/${pk}`, { provider: 'openai' });
    expect(r1.status).toBe(422);
    expect((r1.json as { issues: Array<{ path: string }> }).issues.map((i) => i.path)).toEqual(['models']);
    const r2 = await api(TEST_OWNER_SK, 'PATCH', `/api/agents/${pk}`, { tools: ['web_fetch'] });
    expect((r2.json as { issues: Array<{ path: string }> }).issues.map((i) => i.path)).toEqual(['web_fetch_hosts']);
    expect((await api(TEST_OWNER_SK, 'PATCH', `/api/agents/${pk}`, { provider: 'openai', models: ['gpt-4o-mini'] })).status).toBe(200);
    // The stored model still satisfies a later provider change.
    expect((await api(TEST_OWNER_SK, 'PATCH', `/api/agents/${pk}`, { provider: 'anthropic' })).status).toBe(200);
  });

  it('PATCH to a provider this deployment does not configure: the exact 422 POST gives (no run of it could reach a model); a configured one is accepted', async () => {
    const pk = ((await create({ name: 'switcher', provider: 'echo' })).json as { pubkey: string }).pubkey;
    const noAnthropic = { ANTHROPIC_API_KEY: undefined, ANTHROPIC_BASE_URL: undefined };
    const unconfigured = {
      status: 422,
      json: { error: 'invalid agent', issues: [{ path: 'provider', message: 'provider "anthropic" is not configured on this deployment (available: openai, echo)' }] },
    };
    const toAnthropic = { provider: 'anthropic', models: ['claude-sonnet-4-5'], default_model: 'claude-sonnet-4-5' };
    expect(await apiWithEnv(noAnthropic, TEST_OWNER_SK, 'POST', '/api/agents', { name: 'x', ...toAnthropic })).toEqual(unconfigured);
    expect(await apiWithEnv(noAnthropic, TEST_OWNER_SK, 'PATCH', `/api/agents/${pk}`, toAnthropic)).toEqual(unconfigured);
    expect((await api(TEST_OWNER_SK, 'GET', `/api/agents/${pk}`)).json).toMatchObject({ provider: 'echo' });
    // The same PATCH where anthropic is configured.
    expect(await api(TEST_OWNER_SK, 'PATCH', `/api/agents/${pk}`, toAnthropic)).toMatchObject({ status: 200, json: { provider: 'anthropic', default_model: 'claude-sonnet-4-5' } });
  });

  it('an agent created without a provider shows none (it follows the deployment) and the provider its runs use as effective_provider; a rename keeps it following', async () => {
    const pk = ((await create({ name: 'follower' })).json as { pubkey: string }).pubkey;
    const view = (await api(TEST_OWNER_SK, 'GET', `/api/agents/${pk}`)).json as Record<string, unknown>;
    expect(view).toMatchObject({ name: 'follower', effective_provider: 'openai' });
    expect(view).not.toHaveProperty('provider');
    expect(view).not.toHaveProperty('models');
    expect(view).not.toHaveProperty('default_model');
    // The list shows the same.
    const listed = ((await api(TEST_OWNER_SK, 'GET', '/api/agents')).json as { agents: Array<Record<string, unknown>> }).agents.find((a) => a.pubkey === pk);
    expect(listed).toMatchObject({ effective_provider: 'openai' });
    expect(listed).not.toHaveProperty('provider');
    const renamed = await api(TEST_OWNER_SK, 'PATCH', `/api/agents/${pk}`, { name: 'follower renamed' });
    expect(renamed).toMatchObject({ status: 200, json: { name: 'follower renamed', effective_provider: 'openai' } });
    expect(renamed.json).not.toHaveProperty('provider');
    // An explicit provider shows as both.
    const echo = ((await create({ name: 'echoer', provider: 'echo' })).json as { pubkey: string }).pubkey;
    expect((await api(TEST_OWNER_SK, 'GET', `/api/agents/${echo}`)).json).toMatchObject({ provider: 'echo', effective_provider: 'echo' });
  });

  it('relays naming one shard of this deployment twice, in any spelling, get a 422 naming it (create and PATCH); the agent uses each shard once, by its own URL', async () => {
    const other = keys().pk;
    const invalid = (path: string, shard: string) => ({ status: 422, json: { error: 'invalid agent', issues: [{ path, message: `names the relay shard ${shard} already listed` }] } });
    expect(await create({ name: 'x', relays: [`ws://relay.test/r/${other}`, `ws://relay.test/r/${other}/`] })).toEqual(invalid('relays.1', `/r/${other}`));
    expect(await create({ name: 'x', relays: [`ws://relay.test/r/${npubEncode(other)}`, 'wss://example.com/', `ws://RELAY.test/r/${other.toUpperCase()}`] })).toEqual(
      invalid('relays.2', `/r/${other}`),
    );
    expect(await create({ name: 'x', relays: ['ws://relay.test', 'ws://relay.test/'] })).toEqual(invalid('relays.1', '/'));
    // One spelling each is fine; what the agent uses is each shard once, by its own URL (the owner's and the public shard are always used).
    const created = await create({ name: 'x', relays: [`ws://relay.test/r/${npubEncode(other)}/`, 'ws://relay.test', `ws://RELAY.test/r/${TEST_OWNER}/`] });
    expect(created.status).toBe(201);
    expect((created.json as { relays: string[] }).relays).toEqual([`ws://relay.test/r/${TEST_OWNER}`, 'ws://relay.test/', `ws://relay.test/r/${other}`]);
    const pk = (created.json as { pubkey: string }).pubkey;
    expect(await api(TEST_OWNER_SK, 'PATCH', `/api/agents/${pk}`, { relays: [`ws://relay.test/r/${other}`, `ws://relay.test/r/${npubEncode(other)}`] })).toEqual(invalid('relays.1', `/r/${other}`));
  });

  it('422 for a body that is not JSON', async () => {
    const r = await api(TEST_OWNER_SK, 'POST', '/api/agents', '{nope');
    expect(r).toEqual({ status: 422, json: { error: 'body is not JSON', issues: [] } });
  });

  it('403 for a pubkey not in EDGESTR_OWNERS', async () => {
    const r = await api(keys().sk, 'POST', '/api/agents', { name: 'x' });
    expect(r).toEqual({ status: 403, json: { error: 'this pubkey is not an owner on this deployment; ask the operators to add it' } });
  });
});

describe('NIP-98 on /api', () => {
  const url = `${BASE}/api/agents`;
  it.each([
    ['missing header', () => '', 'NIP-98: missing Authorization header'],
    ['wrong URL', () => makeHttpAuthHeader(TEST_OWNER_SK, `${BASE}/api/other`, 'GET'), /^NIP-98: .*u/],
    ['wrong method', () => makeHttpAuthHeader(TEST_OWNER_SK, url, 'POST'), /^NIP-98: .*method/],
    ['stale', () => makeHttpAuthHeader(TEST_OWNER_SK, url, 'GET', undefined, Math.floor(Date.now() / 1000) - 120), /^NIP-98: event created_at is more than/],
    ['not base64', () => 'Nostr !!!', /^NIP-98: /],
  ])('401 for %s', async (_n, header, message) => {
    const r = await api(TEST_OWNER_SK, 'GET', '/api/agents', undefined, header());
    expect(r.status).toBe(401);
    const error = (r.json as { error: string }).error;
    if (typeof message === 'string') expect(error).toBe(message);
    else expect(error).toMatch(message);
  });

  it('401 when the payload hash does not match the body', async () => {
    const header = makeHttpAuthHeader(TEST_OWNER_SK, url, 'POST', '{"name":"a"}');
    const r = await api(TEST_OWNER_SK, 'POST', '/api/agents', { name: 'b' }, header);
    expect(r.status).toBe(401);
    expect((r.json as { error: string }).error).toMatch(/^NIP-98: .*payload/);
  });

  it('401 when an authorization event is replayed', async () => {
    const header = makeHttpAuthHeader(TEST_OWNER_SK, url, 'GET');
    expect((await api(TEST_OWNER_SK, 'GET', '/api/agents', undefined, header)).status).toBe(200);
    expect(await api(TEST_OWNER_SK, 'GET', '/api/agents', undefined, header)).toEqual({
      status: 401,
      json: { error: 'NIP-98: this authorization event was already used' },
    });
  });
});

describe('agent CRUD', () => {
  it('lists, reads, updates and deletes; never returns a secret key; only the owner may touch it', async () => {
    const created = (await create({ name: 'crud', system_prompt: 'be brief' })).json as { pubkey: string };
    const list = (await api(TEST_OWNER_SK, 'GET', '/api/agents')).json as { agents: Array<{ pubkey: string }> };
    expect(list.agents.map((a) => a.pubkey)).toContain(created.pubkey);
    const one = await api(TEST_OWNER_SK, 'GET', `/api/agents/${npubEncode(created.pubkey)}`);
    expect(one.status).toBe(200);
    expect(one.json).toMatchObject({ pubkey: created.pubkey, owner: TEST_OWNER, name: 'crud', system_prompt: 'be brief', effective_provider: 'openai' });
    expect(JSON.stringify(one.json)).not.toMatch(/sealed|secret|"sk"|nsec/);

    // Another owner allowed on the same deployment sees nothing of it.
    const other = keys();
    const twoOwners = { EDGESTR_OWNERS: `${TEST_OWNER},${other.pk}` };
    // (Looked up in the caller's own shard record: to another owner the agent does not exist.)
    const notYours = { status: 404, json: { error: 'no such agent' } };
    expect(await apiWithEnv(twoOwners, other.sk, 'GET', `/api/agents/${created.pubkey}`)).toEqual(notYours);
    expect(await apiWithEnv(twoOwners, other.sk, 'PATCH', `/api/agents/${created.pubkey}`, { name: 'mine' })).toEqual(notYours);
    // Its DELETE revokes only its own NIP-OA attestations of the key (relay-agent-revocation), and says so: the agent stays.
    expect(await apiWithEnv(twoOwners, other.sk, 'DELETE', `/api/agents/${created.pubkey}`)).toEqual({ status: 200, json: { revoked: created.pubkey } });
    expect(await api(TEST_OWNER_SK, 'GET', `/api/agents/${created.pubkey}`)).toMatchObject({ status: 200, json: { pubkey: created.pubkey, owner: TEST_OWNER } });
    expect(await apiWithEnv(twoOwners, other.sk, 'GET', '/api/agents')).toEqual({ status: 200, json: { agents: [] } });
    // A key that may not own gets the allow-list refusal on every call.
    const stranger = keys();
    const notAnOwner = { status: 403, json: { error: 'this pubkey is not an owner on this deployment; ask the operators to add it' } };
    expect(await api(stranger.sk, 'GET', `/api/agents/${created.pubkey}`)).toEqual(notAnOwner);
    expect(await api(stranger.sk, 'DELETE', `/api/agents/${created.pubkey}`)).toEqual(notAnOwner);
    expect(await api(stranger.sk, 'GET', '/api/agents')).toEqual(notAnOwner);

    const patched = await api(TEST_OWNER_SK, 'PATCH', `/api/agents/${created.pubkey}`, { name: 'renamed', limits: { prompts_per_minute: 5 } });
    expect(patched.status).toBe(200);
    expect(patched.json).toMatchObject({ name: 'renamed', limits: { prompts_per_minute: 5, max_prompt_bytes: 32000, max_tool_calls_per_step: 16 } });
    expect((await api(TEST_OWNER_SK, 'PATCH', `/api/agents/${created.pubkey}`, { limits: { prompts_per_minute: 0 } })).status).toBe(422);
    expect((await api(TEST_OWNER_SK, 'PATCH', `/api/agents/${created.pubkey}`, { limits: { max_tool_calls_per_step: 65 } })).status).toBe(422);
    expect((await api(TEST_OWNER_SK, 'PATCH', `/api/agents/${created.pubkey}`, { limits: { max_tool_calls_per_step: 64 } })).json).toMatchObject({ limits: { max_tool_calls_per_step: 64 } });

    expect(await api(TEST_OWNER_SK, 'DELETE', `/api/agents/${created.pubkey}`)).toEqual({ status: 204, json: null });
    expect(await api(TEST_OWNER_SK, 'GET', `/api/agents/${created.pubkey}`)).toEqual({ status: 404, json: { error: 'no such agent' } });
    // Deleted already: no longer a hosted agent of the caller, so a second DELETE is a revocation, and says so.
    expect(await api(TEST_OWNER_SK, 'DELETE', `/api/agents/${created.pubkey}`)).toEqual({ status: 200, json: { revoked: created.pubkey } });
  });

  it('a PATCH of one limit keeps the other limits the owner set (they are not reset to their defaults)', async () => {
    const created = (await api(TEST_OWNER_SK, 'POST', '/api/agents', { name: 'limits kept', provider: 'echo', limits: { max_tokens_per_day: 5000 } })).json as { pubkey: string };
    expect((await api(TEST_OWNER_SK, 'PATCH', `/api/agents/${created.pubkey}`, { limits: { prompts_per_minute: 3 } })).json).toMatchObject({ limits: { prompts_per_minute: 3, max_tokens_per_day: 5000 } });
    expect((await api(TEST_OWNER_SK, 'GET', `/api/agents/${created.pubkey}`)).json).toMatchObject({ limits: { prompts_per_minute: 3, max_tokens_per_day: 5000 } });
  });

  it('two concurrent PATCHes of different limits are both kept', async () => {
    const created = (await api(TEST_OWNER_SK, 'POST', '/api/agents', { name: 'limits race', provider: 'echo' })).json as { pubkey: string };
    const [a, b] = await Promise.all([
      api(TEST_OWNER_SK, 'PATCH', `/api/agents/${created.pubkey}`, { limits: { prompts_per_minute: 3 } }),
      api(TEST_OWNER_SK, 'PATCH', `/api/agents/${created.pubkey}`, { limits: { max_session_turns: 7 } }),
    ]);
    expect([a.status, b.status]).toEqual([200, 200]);
    expect((await api(TEST_OWNER_SK, 'GET', `/api/agents/${created.pubkey}`)).json).toMatchObject({ limits: { prompts_per_minute: 3, max_session_turns: 7 } });
  });

  it('404 for a key that is not one of the caller\'s agents (DELETE: 200 {revoked}, a NIP-OA revocation), without creating an Agent Durable Object', async () => {
    const unknown = keys().pk;
    const noSuch = { status: 404, json: { error: 'no such agent' } };
    expect(await api(TEST_OWNER_SK, 'GET', `/api/agents/${unknown}`)).toEqual(noSuch);
    expect(await api(TEST_OWNER_SK, 'PATCH', `/api/agents/${npubEncode(unknown)}`, { name: 'x' })).toEqual(noSuch);
    expect(await api(TEST_OWNER_SK, 'DELETE', `/api/agents/${unknown}`)).toEqual({ status: 200, json: { revoked: unknown } });
    const id = env.AGENT.idFromName(unknown).toString();
    expect((await listDurableObjectIds(env.AGENT)).map((i) => i.toString())).not.toContain(id);
  });

  it('400 for a path segment that is not a key', async () => {
    const notAKey = { status: 400, json: { error: 'not an agent key: expected a 64-hex pubkey or an npub' } };
    expect(await api(TEST_OWNER_SK, 'GET', '/api/agents/zzz')).toEqual(notAKey);
    expect(await api(TEST_OWNER_SK, 'PATCH', '/api/agents/npub1nope', { name: 'x' })).toEqual(notAKey);
    expect(await api(TEST_OWNER_SK, 'DELETE', `/api/agents/${'a'.repeat(63)}`)).toEqual(notAKey);
  });
});

describe('methods', () => {
  it.each([
    ['PUT', '/api/agents', 'GET, POST'],
    ['DELETE', '/api/agents', 'GET, POST'],
    ['PUT', `/api/agents/${'ab'.repeat(32)}`, 'GET, PATCH, DELETE'],
    ['POST', `/api/agents/${'ab'.repeat(32)}`, 'GET, PATCH, DELETE'],
  ])('%s %s → 405 with Allow: %s (before authentication)', async (method, path, allow) => {
    const res = await SELF.fetch(`${BASE}${path}`, { method, body: method === 'DELETE' ? null : '{}' });
    expect(res.status).toBe(405);
    expect(res.headers.get('Allow')).toBe(allow);
    expect(await res.json()).toEqual({ error: `method ${method} is not allowed here (allowed: ${allow})` });
  });
});
