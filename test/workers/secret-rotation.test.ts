// Rotating EDGESTR_SECRET (workers/common/secrets.ts, docs/OPERATIONS.md "Rotating EDGESTR_SECRET"):
// with the new secret in EDGESTR_SECRET and the former one in EDGESTR_SECRET_PREVIOUS, agents and
// bridges sealed under the former keep working, their watchdogs seal every value again with the new
// one (and say so in a log line), after which the new secret alone opens them. The env of this
// isolate is shared by the test, the API and the Durable Objects: it is switched here and put back
// after each test. The fixture's /mcp-paged?bearer-sha256= answers 401 without the right bearer
// token; its tool whoami answers the Authorization it got.
import { env, runDurableObjectAlarm, runInDurableObject } from 'cloudflare:test';
import { sha256 } from '@noble/hashes/sha2.js';
import { getPublicKey } from 'nostr-tools/pure';
import { afterEach, describe, expect, inject, it, vi, type MockInstance } from 'vitest';
import { bytesToHex } from '../../src/shared/hex.js';
import { AgentStore } from '../../workers/agent/agent-store.js';
import type { StoredAgent, StoredMcpServer } from '../../workers/agent/config.js';
import { mcpHeadersBinding } from '../../workers/agent/mcp-headers.js';
import { ServerStore } from '../../workers/bridge/server-store.js';
import { headersOf, openRotating } from '../../workers/common/secrets.js';
import { api } from './api-helpers.js';
import { NipXxClient, createTestAgent } from './agent-helpers.js';
import { bridgeReady, DvmcpClient } from './bridge-helpers.js';
import { keys } from './helpers.js';
import { TEST_ADMIN_SK } from './test-keys.js';

/** The secret of vitest.config.ts, under which everything here is created. */
const S1 = 'edgestr-test-secret-0123456789';
const S2 = 'edgestr-rotated-secret-9876543210';
const TOKEN = 'rotation-mcp-token-51ab';
const serverUrl = (): string => `${inject('toolsFixtureUrl')}/mcp-paged?bearer-sha256=${bytesToHex(sha256(new TextEncoder().encode(TOKEN)))}`;
const HEADERS = { Authorization: `Bearer ${TOKEN}` };
/** `sealed` (bound to `binding`) opened with `secret` alone. */
const openWith = async (sealed: string, binding: string, secret: string): Promise<Uint8Array> => (await openRotating(sealed, binding, { current: secret }, 'test')).plain;
const WHOAMI = `authorization: Bearer ${TOKEN}`;

const secrets = env as unknown as { EDGESTR_SECRET?: string; EDGESTR_SECRET_PREVIOUS?: string };
function useSecrets(current: string, previous?: string): void {
  secrets.EDGESTR_SECRET = current;
  if (previous === undefined) delete secrets.EDGESTR_SECRET_PREVIOUS;
  else secrets.EDGESTR_SECRET_PREVIOUS = previous;
}

let warn: MockInstance<typeof console.warn> | undefined;
afterEach(() => {
  useSecrets(S1);
  warn?.mockRestore();
  warn = undefined;
});
/** The warn lines so far that start with `prefix`. */
const lines = (prefix: string): string[] => (warn?.mock.calls ?? []).map((args) => String(args[0])).filter((l) => l.startsWith(prefix));
const PASS = /: every sealed value opens with EDGESTR_SECRET \((\d+) re-sealed from EDGESTR_SECRET_PREVIOUS by this pass\)$/;
/**
 * The values `who` re-sealed, over its passes so far (each line checked). Its own alarm may run a
 * pass beside the one a test runs: the compare-and-swap writes each value once, so the sum is exact.
 */
const resealedBy = (who: string): number =>
  lines(`${who}:`).reduce((n, l) => {
    expect(l).toMatch(PASS);
    return n + Number(PASS.exec(l)![1]);
  }, 0);

const agentStub = (agent: string) => env.AGENT.get(env.AGENT.idFromName(agent));
const agentRow = (agent: string) =>
  runInDurableObject(agentStub(agent), (_i, state) => state.storage.sql.exec<{ sealed_key: string; config: string }>('SELECT sealed_key, config FROM agent').one());
const sealedHeadersOf = (config: string): StoredMcpServer => (JSON.parse(config) as StoredAgent).mcp_servers!.find((s) => s.id === 'auth')!;

/** Restarts the agent (its opened key and headers are forgotten, as after a deploy) and runs its watchdog. */
async function restartAgent(agent: string): Promise<void> {
  await runInDurableObject(agentStub(agent), (_i, state) => state.abort('simulated restart')).catch(() => undefined);
  await runDurableObjectAlarm(agentStub(agent));
}

/** A run calling `auth__whoami`: the agent opens the prompt with its key, signs the answer, and sends the server's headers. */
async function whoamiOfAgent(agent: string): Promise<{ text: unknown; signer: string }> {
  const c = await NipXxClient.open(agent);
  const p = c.prompt({ ver: 1, message: '/tool auth__whoami {}' });
  await c.send(p);
  const run = await c.collect(p.id);
  c.sock.close();
  return { text: run.terminal.payload.text, signer: run.terminal.event.pubkey };
}

describe('rotating EDGESTR_SECRET: hosted agents', () => {
  it('an agent sealed under S1 keeps working with EDGESTR_SECRET=S2 and EDGESTR_SECRET_PREVIOUS=S1; its watchdog re-seals its key and headers, which then open with S2 alone', async () => {
    const agent = await createTestAgent({ mcp_servers: [{ id: 'auth', url: serverUrl(), headers: HEADERS }] });
    const before = await agentRow(agent);
    // Opened with the previous secret (a store with the rotated secrets, as after a restart, before any watchdog ran).
    await runInDurableObject(agentStub(agent), async (_i, state) => {
      const store = new AgentStore(state.storage.sql, { EDGESTR_SECRET: S2, EDGESTR_SECRET_PREVIOUS: S1 });
      expect(getPublicKey(await store.secretKey())).toBe(agent);
      expect(await store.mcpHeaders(sealedHeadersOf(before.config))).toEqual(HEADERS);
    });
    expect(await agentRow(agent)).toEqual(before);

    warn = vi.spyOn(console, 'warn');
    useSecrets(S2, S1);
    await restartAgent(agent);
    await vi.waitFor(() => expect(resealedBy(`agent ${agent}`)).toBe(2));
    expect(await whoamiOfAgent(agent)).toEqual({ text: WHOAMI, signer: agent });
    const after = await agentRow(agent);
    expect(after.sealed_key).not.toBe(before.sealed_key);
    expect(getPublicKey(await openWith(after.sealed_key, agent, S2))).toBe(agent);
    await expect(openWith(after.sealed_key, agent, S1)).rejects.toThrow('test: EDGESTR_SECRET does not open it');
    expect(headersOf(await openWith(sealedHeadersOf(after.config).sealed_headers!, mcpHeadersBinding(agent, 'auth'), S2))).toEqual(HEADERS);
    // The next pass finds nothing left under the previous secret.
    await runDurableObjectAlarm(agentStub(agent));
    expect(lines(`agent ${agent}:`).at(-1)).toBe(`agent ${agent}: every sealed value opens with EDGESTR_SECRET (0 re-sealed from EDGESTR_SECRET_PREVIOUS by this pass)`);

    expect(resealedBy(`agent ${agent}`)).toBe(2);

    // EDGESTR_SECRET_PREVIOUS removed: the agent still answers (and its watchdog logs no more passes).
    useSecrets(S2);
    const logged = lines(`agent ${agent}:`).length;
    await restartAgent(agent);
    expect(await whoamiOfAgent(agent)).toEqual({ text: WHOAMI, signer: agent });
    expect(lines(`agent ${agent}:`)).toHaveLength(logged);
  });

  it('with S2 alone, a key sealed under S1 does not open, and the error says what to do; a key moved to another agent opens with neither secret', async () => {
    const agent = await createTestAgent();
    const other = await createTestAgent();
    const { sealed_key } = await agentRow(agent);
    useSecrets(S2);
    await runInDurableObject(agentStub(agent), async (_i, state) => {
      await expect(new AgentStore(state.storage.sql, env).secretKey()).rejects.toThrow(
        `the secret key of agent ${agent}: EDGESTR_SECRET does not open it. If EDGESTR_SECRET was changed, set its former value as the secret EDGESTR_SECRET_PREVIOUS until every agent and bridge re-sealed it (docs/OPERATIONS.md, "Rotating EDGESTR_SECRET"); otherwise it was sealed for another record`,
      );
    });
    // The associated data still binds a sealed key to its agent: copied to another one, it opens with neither secret.
    useSecrets(S2, S1);
    await runInDurableObject(agentStub(other), async (_i, state) => {
      state.storage.sql.exec('UPDATE agent SET sealed_key = ?', sealed_key);
      await expect(new AgentStore(state.storage.sql, env).secretKey()).rejects.toThrow(
        `the secret key of agent ${other}: neither EDGESTR_SECRET nor EDGESTR_SECRET_PREVIOUS opens it (sealed with another secret, or for another record)`,
      );
    });
  });
});

describe('rotating EDGESTR_SECRET: bridges', () => {
  it('a bridge sealed under S1 keeps answering with S2 and S1 as the previous secret; its watchdog re-seals its provider key and server headers, which then open with S2 alone', async () => {
    const owner = keys();
    expect((await api(TEST_ADMIN_SK, 'POST', '/api/admin/owners', { pubkey: owner.pk })).status).toBe(201);
    const r = await api(owner.sk, 'POST', '/api/bridge/servers', { id: 'rot', url: serverUrl(), headers: HEADERS, public: false });
    expect(r.status).toBe(201);
    const { provider } = r.json as { provider: string };
    const stub = () => env.BRIDGE.get(env.BRIDGE.idFromName(owner.pk));
    const rows = () =>
      runInDurableObject(stub(), (_i, state) => ({
        key: state.storage.sql.exec<{ sealed_key: string }>('SELECT sealed_key FROM provider').one().sealed_key,
        headers: state.storage.sql.exec<{ sealed_headers: string }>("SELECT sealed_headers FROM servers WHERE id = 'rot'").one().sealed_headers,
      }));
    const restart = async () => {
      await runInDurableObject(stub(), (_i, state) => state.abort('simulated restart')).catch(() => undefined);
      await runDurableObjectAlarm(stub());
    };
    const whoami = async (): Promise<unknown> => {
      await bridgeReady(provider);
      const c = await DvmcpClient.open(provider);
      const a = await c.call('tools/call', { name: 'whoami', arguments: {} }, { s: 'rot' });
      c.close();
      expect(a.event.pubkey).toBe(provider);
      return a.result.ok ? a.result.value.content : a.result;
    };
    const before = await rows();

    await runInDurableObject(stub(), async (_i, state) => {
      const store = new ServerStore(state.storage.sql, { EDGESTR_SECRET: S2, EDGESTR_SECRET_PREVIOUS: S1 });
      expect(getPublicKey(await store.secretKey())).toBe(provider);
      expect(await store.secretHeaders('rot')).toEqual(HEADERS);
    });
    expect(await rows()).toEqual(before);
    warn = vi.spyOn(console, 'warn');
    useSecrets(S2, S1);
    await restart();
    await vi.waitFor(() => expect(resealedBy(`bridge ${provider}`)).toBe(2));
    expect(await whoami()).toEqual([{ type: 'text', text: WHOAMI }]);
    const after = await rows();
    expect(after.key).not.toBe(before.key);
    expect(getPublicKey(await openWith(after.key, provider, S2))).toBe(provider);
    expect(headersOf(await openWith(after.headers, `${provider}/rot`, S2))).toEqual(HEADERS);
    await expect(openWith(after.headers, `${provider}/rot`, S1)).rejects.toThrow('test: EDGESTR_SECRET does not open it');

    useSecrets(S2);
    await restart();
    expect(await whoami()).toEqual([{ type: 'text', text: WHOAMI }]);
  });
});
