// Hosted agents' MCP server headers at rest (workers/agent/mcp-headers.ts, agent-store.ts): the
// stored config holds them sealed under EDGESTR_SECRET, bound to the agent and the server id, and
// they are opened when the agent connects to that server. The fixture's /mcp-paged?bearer-sha256=
// answers 401 without the right bearer token, so each tool call here shows whether it was sent.
import { env, runDurableObjectAlarm, runInDurableObject } from 'cloudflare:test';
import { sha256 } from '@noble/hashes/sha2.js';
import { describe, expect, inject, it } from 'vitest';
import { bytesToHex } from '../../src/shared/hex.js';
import { AgentStore } from '../../workers/agent/agent-store.js';
import type { StoredAgent } from '../../workers/agent/config.js';
import { api } from './api-helpers.js';
import { apiWithEnv } from './app-env.js';
import { NipXxClient, createTestAgent } from './agent-helpers.js';
import { TEST_OWNER_SK } from './test-keys.js';

const TOKEN = 'agent-mcp-token-4f1c9e';
const OTHER_TOKEN = 'agent-mcp-token-b72d05';
/** The fixture endpoint that requires `Authorization: Bearer <token>`. */
const serverUrl = (token: string): string =>
  `${inject('toolsFixtureUrl')}/mcp-paged?bearer-sha256=${bytesToHex(sha256(new TextEncoder().encode(token)))}`;
/** The answer of a run calling a tool of a server the agent could not connect to: echo answers with the failed call (registry.ts). */
/** What echo answers for a tool of server `server`, which could not be used (registry.ts: its problem is the owner's to read). */
const UNAVAILABLE = (name: string, server: string) => ({ text: `error: tool ${name} is unavailable: its server ${server} could not be used for this run (the agent's owner can see why)` });

const stubOf = (agent: string) => env.AGENT.get(env.AGENT.idFromName(agent));

/** The agent's stored config row, as text. */
const storedRow = (agent: string): Promise<string> =>
  runInDurableObject(stubOf(agent), (_i, state) => state.storage.sql.exec<{ config: string }>('SELECT config FROM agent').one().config);

/** Edits the stored config row, then restarts the agent over it (as after a deploy) and runs its watchdog. */
async function restartWith(agent: string, edit: (c: StoredAgent) => StoredAgent): Promise<void> {
  await runInDurableObject(stubOf(agent), (_i, state) => {
    const c = JSON.parse(state.storage.sql.exec<{ config: string }>('SELECT config FROM agent').one().config) as StoredAgent;
    state.storage.sql.exec('UPDATE agent SET config = ?', JSON.stringify(edit(c)));
  });
  await runInDurableObject(stubOf(agent), (_i, state) => state.abort('simulated restart')).catch(() => undefined);
  await runDurableObjectAlarm(stubOf(agent));
}

/** The terminal payload of a run calling `<server>__whoami` (which answers the Authorization it got). */
async function whoami(agent: string, server = 'auth'): Promise<Record<string, unknown>> {
  const c = await NipXxClient.open(agent);
  const p = c.prompt({ ver: 1, message: `/tool ${server}__whoami {}` });
  await c.send(p);
  const run = await c.collect(p.id);
  c.sock.close();
  return run.terminal.payload;
}

const servers = (c: StoredAgent) => c.mcp_servers ?? [];

describe('agent MCP server headers at rest', () => {
  it('are stored sealed, never shown, and still sent to the server that requires them', async () => {
    const agent = await createTestAgent({ mcp_servers: [{ id: 'auth', url: serverUrl(TOKEN), headers: { Authorization: `Bearer ${TOKEN}` } }] });
    const row = await storedRow(agent);
    expect(row).not.toContain(TOKEN);
    expect(row).not.toContain('Authorization');
    const view = await api(TEST_OWNER_SK, 'GET', `/api/agents/${agent}`);
    expect((view.json as { mcp_servers: unknown }).mcp_servers).toEqual([{ id: 'auth', url: serverUrl(TOKEN) }]);
    expect(await whoami(agent)).toMatchObject({ text: `authorization: Bearer ${TOKEN}` });
  });

  it('a sealed blob moved to another server id or to another agent does not open there', async () => {
    const url = serverUrl(TOKEN);
    const owner = await createTestAgent({ mcp_servers: [{ id: 'auth', url, headers: { Authorization: `Bearer ${TOKEN}` } }, { id: 'other', url }] });
    const thief = await createTestAgent({ mcp_servers: [{ id: 'auth', url }] });
    const sealed = servers(JSON.parse(await storedRow(owner)) as StoredAgent).find((s) => s.id === 'auth')!;
    // The owner's own 'auth' entry copied under its server 'other', and into the other agent's 'auth'.
    await restartWith(owner, (c) => ({ ...c, mcp_servers: servers(c).map((s) => (s.id === 'other' ? { ...sealed, id: 'other' } : s)) }));
    await restartWith(thief, (c) => ({ ...c, mcp_servers: [sealed] }));
    expect(await whoami(owner)).toMatchObject({ text: `authorization: Bearer ${TOKEN}` });
    expect(await whoami(owner, 'other')).toMatchObject(UNAVAILABLE('other__whoami', 'other'));
    expect(await whoami(thief)).toMatchObject(UNAVAILABLE('auth__whoami', 'auth'));
    await runInDurableObject(stubOf(thief), async (_i, state) => {
      await expect(new AgentStore(state.storage.sql, env).mcpHeaders(sealed)).rejects.toThrow();
    });
  });

  it('PATCH: mcp_servers replaces the list (headers sealed anew; a server without headers has none); other fields keep them', async () => {
    const agent = await createTestAgent({ mcp_servers: [{ id: 'auth', url: serverUrl(TOKEN), headers: { Authorization: `Bearer ${TOKEN}` } }] });
    expect((await api(TEST_OWNER_SK, 'PATCH', `/api/agents/${agent}`, { about: 'kept headers' })).status).toBe(200);
    expect(await whoami(agent)).toMatchObject({ text: `authorization: Bearer ${TOKEN}` });

    const next = [{ id: 'auth', url: serverUrl(OTHER_TOKEN), headers: { Authorization: `Bearer ${OTHER_TOKEN}` } }];
    expect((await api(TEST_OWNER_SK, 'PATCH', `/api/agents/${agent}`, { mcp_servers: next })).status).toBe(200);
    expect(await storedRow(agent)).not.toContain(OTHER_TOKEN);
    expect(await whoami(agent)).toMatchObject({ text: `authorization: Bearer ${OTHER_TOKEN}` });

    expect((await api(TEST_OWNER_SK, 'PATCH', `/api/agents/${agent}`, { mcp_servers: [{ id: 'auth', url: serverUrl(OTHER_TOKEN) }] })).status).toBe(200);
    expect(await whoami(agent)).toMatchObject(UNAVAILABLE('auth__whoami', 'auth'));
  });

  it('PATCH with headers on a deployment without EDGESTR_SECRET: 500, nothing changed', async () => {
    const agent = await createTestAgent({ mcp_servers: [{ id: 'auth', url: serverUrl(TOKEN), headers: { Authorization: `Bearer ${TOKEN}` } }] });
    const before = await storedRow(agent);
    const patch = { mcp_servers: [{ id: 'auth', url: serverUrl(OTHER_TOKEN), headers: { Authorization: `Bearer ${OTHER_TOKEN}` } }] };
    expect(await apiWithEnv({ EDGESTR_SECRET: undefined }, TEST_OWNER_SK, 'PATCH', `/api/agents/${agent}`, patch)).toEqual({
      status: 500,
      json: { error: 'EDGESTR_SECRET is not configured on this deployment' },
    });
    expect(await storedRow(agent)).toBe(before);
  });

  it('an agent stored with plain headers (before sealing) keeps working, and its watchdog seals them', async () => {
    const url = serverUrl(TOKEN);
    const agent = await createTestAgent({ mcp_servers: [{ id: 'auth', url }] });
    const plain = { id: 'auth', url, headers: { Authorization: `Bearer ${TOKEN}` } };
    await runInDurableObject(stubOf(agent), async (_i, state) => {
      const c = JSON.parse(state.storage.sql.exec<{ config: string }>('SELECT config FROM agent').one().config) as StoredAgent;
      state.storage.sql.exec('UPDATE agent SET config = ?', JSON.stringify({ ...c, mcp_servers: [plain] }));
      // Read as it is: a fresh store over the row opens the plain form as well.
      expect(await new AgentStore(state.storage.sql, env).mcpHeaders(plain)).toEqual(plain.headers);
    });
    await restartWith(agent, (c) => c);
    const row = await storedRow(agent);
    expect(row).not.toContain(TOKEN);
    expect(servers(JSON.parse(row) as StoredAgent)).toEqual([{ id: 'auth', url, sealed_headers: expect.stringMatching(/^v1:/) }]);
    expect(await whoami(agent)).toMatchObject({ text: `authorization: Bearer ${TOKEN}` });
  });

  it('are checked as the bridge checks its servers’ headers: names, reserved names, one-line values, at most 16, __proto__ (422)', async () => {
    // Bodies as text: a JavaScript object literal would make "__proto__" its prototype, not a key.
    const create = (headers: string) => api(TEST_OWNER_SK, 'POST', '/api/agents', `{"name":"h","provider":"echo","mcp_servers":[{"id":"s","url":"https://mcp.example.com/mcp","headers":${headers}}]}`);
    const invalid = (path: string, message: string) => ({ status: 422, json: { error: 'invalid agent', issues: [{ path, message }] } });
    expect(await create('{"__proto__":"x"}')).toEqual(invalid('mcp_servers.0.headers.__proto__', '"__proto__" cannot be used as a name here'));
    expect(await create('{"Mcp-Session-Id":"x"}')).toEqual(invalid('mcp_servers.0.headers.Mcp-Session-Id', 'Mcp-Session-Id is set by the agent'));
    expect(await create('{"Host":"x"}')).toEqual(invalid('mcp_servers.0.headers.Host', 'Host is set by the agent'));
    expect(await create('{"Bad Name":"x"}')).toEqual(invalid('mcp_servers.0.headers.Bad Name', 'not an HTTP header name'));
    expect(await create('{"X-Token":"a\\r\\nX-Injected: 1"}')).toEqual(invalid('mcp_servers.0.headers.X-Token', 'header values are one line'));
    const many = `{${Array.from({ length: 17 }, (_, i) => `"X-H${i}":"v"`).join(',')}}`;
    expect(await create(many)).toEqual(invalid('mcp_servers.0.headers', 'at most 16 headers'));
    expect((await create('{"Authorization":"Bearer t","X-Api-Key":"k"}')).status).toBe(201);
  });
});
