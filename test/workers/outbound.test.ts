// The one outbound-URL policy (src/shared/outbound-url.ts) and where it applies: MCP servers
// (first URL and every redirect hop of the transport), safeFetch (hops, headers), an agent's
// external relays (openSocket: checked, redirects not followed), and the management API, which
// refuses such URLs at create and update with a 422 naming the field; an agent's relay URLs are
// published, so one with a query string or fragment is refused too (one stored before: dialled,
// left out of the relay list).
// The test bindings list 127.0.0.1:* in EDGESTR_OUTBOUND_ALLOW (the fixture and MCP servers run
// there, on ports chosen at start); everything else is production policy (EDGESTR_ENV=test).
import { env, runDurableObjectAlarm, runInDurableObject } from 'cloudflare:test';
import { describe, expect, it, inject } from 'vitest';
import '../mcp/provided.js';
import type { NostrEvent } from '../../src/shared/event.js';
import { parseAllowlist } from '../../src/shared/host-policy.js';
import { outboundPolicy, outboundRefusal, safeFetch, STRICT_OUTBOUND, type OutboundKind } from '../../src/shared/outbound-url.js';
import { connectMcpServer } from '../../workers/agent/tools/mcp.js';
import { openRelaySocket, type SocketOwner } from '../../workers/common/relay-sockets.js';
import { McpSessionCache } from '../../workers/common/mcp-session-cache.js';
import { makeHttpAuthHeader } from '../../src/shared/nip98.js';
import { api } from './api-helpers.js';
import { apiWithEnv, fetchWithEnv } from './app-env.js';
import { createTestAgent, NipXxClient } from './agent-helpers.js';
import { BASE, connect, keys, type Keys } from './helpers.js';
import { OPEN_SIGNUP, TEST_ADMIN_SK, TEST_OWNER, TEST_OWNER_SK } from './test-keys.js';

declare module 'vitest' {
  export interface ProvidedContext {
    floodRelayUrl: string;
  }
}

const FIXTURE = inject('toolsFixtureUrl');
const EVERYTHING = inject('mcpEverythingUrl');
const FIXTURE_PORT = new URL(FIXTURE).port;
const LOCAL_SERVERS = outboundPolicy({ EDGESTR_OUTBOUND_ALLOW: '127.0.0.1:*' });
const DEVELOPMENT = outboundPolicy({ EDGESTR_ENV: 'development' });
const PLAIN_HTTP = 'plain http:// is allowed only in development or for hosts in EDGESTR_OUTBOUND_ALLOW; use https://';
const PLAIN_WS = 'plain ws:// is allowed only in development or for hosts in EDGESTR_OUTBOUND_ALLOW; use wss://';
const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

describe('outboundRefusal', () => {
  const LISTED = outboundPolicy({ EDGESTR_OUTBOUND_ALLOW: ' 10.0.0.5 , *.corp.example, bad/entry' });
  it.each<[string, OutboundKind, string | undefined, string | undefined, string | undefined]>([
    // url, kind, production, development, with EDGESTR_OUTBOUND_ALLOW
    ['https://api.example.com/mcp', 'http', undefined, undefined, undefined],
    ['wss://relay.damus.io/', 'relay', undefined, undefined, undefined],
    ['http://api.example.com/mcp', 'http', PLAIN_HTTP, undefined, PLAIN_HTTP],
    ['ws://relay.example.com/', 'relay', PLAIN_WS, undefined, PLAIN_WS],
    ['wss://relay.example.com/', 'http', 'only http and https URLs are allowed', 'only http and https URLs are allowed', 'only http and https URLs are allowed'],
    ['https://relay.example.com/', 'relay', 'only ws and wss URLs are allowed', 'only ws and wss URLs are allowed', 'only ws and wss URLs are allowed'],
    ['https://u:p@api.example.com/', 'http', 'URLs with credentials are not allowed', 'URLs with credentials are not allowed', 'URLs with credentials are not allowed'],
    ['https://127.0.0.1/', 'http', '127.0.0.1 is a loopback address', undefined, '127.0.0.1 is a loopback address'],
    ['https://2130706433/', 'http', '127.0.0.1 is a loopback address', undefined, '127.0.0.1 is a loopback address'],
    ['https://0177.0.0.1/', 'http', '127.0.0.1 is a loopback address', undefined, '127.0.0.1 is a loopback address'],
    ['wss://localhost:7777/', 'relay', 'localhost is a local name', undefined, 'localhost is a local name'],
    ['wss://[::1]/', 'relay', '[::1] is a loopback address', undefined, '[::1] is a loopback address'],
    ['https://[::ffff:127.0.0.1]/', 'http', '[::ffff:7f00:1] is an IPv4-mapped form of 127.0.0.1, a loopback address', undefined, '[::ffff:7f00:1] is an IPv4-mapped form of 127.0.0.1, a loopback address'],
    ['https://10.0.0.5/', 'http', '10.0.0.5 is a private address', undefined, undefined],
    ['http://10.0.0.5/', 'http', PLAIN_HTTP, undefined, undefined],
    // An entry without a port allows its scheme's default port only.
    ['http://10.0.0.5:9200/_cat/indices', 'http', PLAIN_HTTP, undefined, 'EDGESTR_OUTBOUND_ALLOW lists 10.0.0.5 on its default port only, not 9200'],
    ['https://10.0.0.5:80/', 'http', '10.0.0.5 is a private address', undefined, 'EDGESTR_OUTBOUND_ALLOW lists 10.0.0.5 on its default port only, not 80'],
    ['https://192.168.1.1/', 'http', '192.168.1.1 is a private address', undefined, '192.168.1.1 is a private address'],
    ['https://[fd00::1]/', 'http', '[fd00::1] is a private address', undefined, '[fd00::1] is a private address'],
    ['ws://mcp.corp.example/', 'relay', PLAIN_WS, undefined, undefined],
    // Never allowed without an explicit entry, not even in development:
    ['http://169.254.169.254/latest/meta-data/', 'http', PLAIN_HTTP, '169.254.169.254 is a link-local address', PLAIN_HTTP],
    ['https://169.254.169.254/', 'http', '169.254.169.254 is a link-local address', '169.254.169.254 is a link-local address', '169.254.169.254 is a link-local address'],
    ['https://[fe80::1]/', 'http', '[fe80::1] is a link-local address', '[fe80::1] is a link-local address', '[fe80::1] is a link-local address'],
    ['https://100.64.0.1/', 'http', '100.64.0.1 is a carrier-grade NAT address', '100.64.0.1 is a carrier-grade NAT address', '100.64.0.1 is a carrier-grade NAT address'],
    ['https://0.0.0.0/', 'http', '0.0.0.0 is an unspecified address', '0.0.0.0 is an unspecified address', '0.0.0.0 is an unspecified address'],
  ])('%s (%s)', (raw, kind, production, development, listed) => {
    const url = new URL(raw);
    expect(outboundRefusal(url, kind, STRICT_OUTBOUND)).toBe(production);
    expect(outboundRefusal(url, kind, DEVELOPMENT)).toBe(development);
    expect(outboundRefusal(url, kind, LISTED)).toBe(listed);
  });
});

describe('EDGESTR_OUTBOUND_ALLOW: for the deployment and the owners it vetted, on the listed port', () => {
  const ALLOW = {
    EDGESTR_OUTBOUND_ALLOW: '10.0.0.5:8080, mcp.internal.example, *.corp.example:8443, [fd00::7]:3000, 10.0.0.6:0, 10.0.0.6:65536, ::1:80, 10.0.0.7, 10.0.0.8:*, *.lab.example:*, 10.0.0.9, 10.0.0.9:8080, 10.0.0.9:8443',
  };
  const VETTED = outboundPolicy(ALLOW, { vetted: true });
  const UNVETTED = outboundPolicy(ALLOW, { vetted: false });
  it.each<[string, OutboundKind, string | undefined, string | undefined]>([
    // url, kind, dialled for a vetted owner (or the deployment itself), for an owner that signed itself up
    ['http://10.0.0.5:8080/mcp', 'http', undefined, PLAIN_HTTP],
    ['ws://10.0.0.5:8080/', 'relay', undefined, PLAIN_WS],
    // An owner that signed itself up is told the rules' own reason: nothing says the host is listed.
    ['https://10.0.0.5:8080/mcp', 'http', undefined, '10.0.0.5 is a private address'],
    ['http://10.0.0.5/mcp', 'http', 'EDGESTR_OUTBOUND_ALLOW lists 10.0.0.5 on port 8080 only, not 80', PLAIN_HTTP],
    ['https://10.0.0.5:9000/', 'http', 'EDGESTR_OUTBOUND_ALLOW lists 10.0.0.5 on port 8080 only, not 9000', '10.0.0.5 is a private address'],
    // An entry without a port: its scheme's default port only (80 for http/ws, 443 for https/wss).
    // The operator listed 10.0.0.7 for its service on :80; an owner naming the host does not reach
    // the host's other services.
    ['http://mcp.internal.example/', 'http', undefined, PLAIN_HTTP],
    ['http://mcp.internal.example:80/', 'http', undefined, PLAIN_HTTP],
    ['ws://mcp.internal.example/', 'relay', undefined, PLAIN_WS],
    ['http://mcp.internal.example:1234/', 'http', 'EDGESTR_OUTBOUND_ALLOW lists mcp.internal.example on its default port only, not 1234', PLAIN_HTTP],
    ['http://mcp.internal.example:443/', 'http', 'EDGESTR_OUTBOUND_ALLOW lists mcp.internal.example on its default port only, not 443', PLAIN_HTTP],
    ['http://10.0.0.7/', 'http', undefined, PLAIN_HTTP],
    ['https://10.0.0.7/', 'http', undefined, '10.0.0.7 is a private address'],
    ['https://10.0.0.7:8443/', 'http', 'EDGESTR_OUTBOUND_ALLOW lists 10.0.0.7 on its default port only, not 8443', '10.0.0.7 is a private address'],
    ['http://10.0.0.7:9200/_cat/indices', 'http', 'EDGESTR_OUTBOUND_ALLOW lists 10.0.0.7 on its default port only, not 9200', PLAIN_HTTP],
    ['http://10.0.0.7:2375/containers/json', 'http', 'EDGESTR_OUTBOUND_ALLOW lists 10.0.0.7 on its default port only, not 2375', PLAIN_HTTP],
    ['http://10.0.0.9:9200/', 'http', 'EDGESTR_OUTBOUND_ALLOW lists 10.0.0.9 on its default port and ports 8080, 8443 only, not 9200', PLAIN_HTTP],
    ['http://10.0.0.9:8443/', 'http', undefined, PLAIN_HTTP],
    // "host:*": every port.
    ['http://10.0.0.8:9200/', 'http', undefined, PLAIN_HTTP],
    ['ws://a.b.lab.example:7777/', 'relay', undefined, PLAIN_WS],
    ['http://a.corp.example:8443/', 'http', undefined, PLAIN_HTTP],
    ['http://a.corp.example/', 'http', 'EDGESTR_OUTBOUND_ALLOW lists a.corp.example on port 8443 only, not 80', PLAIN_HTTP],
    // A URL the rules allow anyway needs no exception.
    ['https://a.corp.example:8443/', 'http', undefined, undefined],
    ['https://a.corp.example/', 'http', undefined, undefined],
    ['http://[fd00::7]:3000/', 'http', undefined, PLAIN_HTTP],
    // Entries that are not valid are ignored.
    ['http://10.0.0.6/', 'http', PLAIN_HTTP, PLAIN_HTTP],
    ['https://[::1]/', 'http', '[::1] is a loopback address', '[::1] is a loopback address'],
  ])('%s (%s)', (raw, kind, vetted, unvetted) => {
    const url = new URL(raw);
    expect(outboundRefusal(url, kind, VETTED)).toBe(vetted);
    expect(outboundRefusal(url, kind, outboundPolicy(ALLOW))).toBe(vetted);
    expect(outboundRefusal(url, kind, UNVETTED)).toBe(unvetted);
  });

  it('reads host:port (1–65535, IPv6 in brackets) and host:* entries, a bare host as its default port; a web_fetch allowlist takes none', () => {
    const entries = ['10.0.0.5:8080', '*.corp.example:8443', '[fd00::7]:3000', 'mcp.internal.example', '10.0.0.8:*', '*.lab.example:*', '[fd00::8]:*', '10.0.0.6:0', '10.0.0.6:65536', '::1:80', 'host:', '*:*', 'host:**'];
    expect(parseAllowlist(entries, { ports: true })).toEqual({
      patterns: [
        { pattern: '10.0.0.5:8080', exact: '10.0.0.5', port: 8080 },
        { pattern: '*.corp.example:8443', suffix: '.corp.example', port: 8443 },
        { pattern: '[fd00::7]:3000', exact: '[fd00::7]', port: 3000 },
        { pattern: 'mcp.internal.example', exact: 'mcp.internal.example', port: 'default' },
        { pattern: '10.0.0.8:*', exact: '10.0.0.8' },
        { pattern: '*.lab.example:*', suffix: '.lab.example' },
        { pattern: '[fd00::8]:*', exact: '[fd00::8]' },
      ],
      invalid: ['10.0.0.6:0', '10.0.0.6:65536', '::1:80', 'host:', '*:*', 'host:**'],
    });
    expect(parseAllowlist(['10.0.0.5:8080', '10.0.0.8:*', 'example.com'])).toEqual({ patterns: [{ pattern: 'example.com', exact: 'example.com' }], invalid: ['10.0.0.5:8080', '10.0.0.8:*'] });
  });
});

// (First: the agents this creates start connecting while the rest of the file runs.)
describe('the management API validates outbound URLs', () => {
  const invalid = (path: string, message: string) => ({ status: 422, json: { error: 'invalid agent', issues: [{ path, message }] } });

  it('422 naming the field at create', async () => {
    expect(await api(TEST_OWNER_SK, 'POST', '/api/agents', { name: 'x', relays: ['wss://relay.damus.io/', 'wss://localhost/'] })).toEqual(
      invalid('relays.1', 'refused: localhost is a local name'),
    );
    expect(await api(TEST_OWNER_SK, 'POST', '/api/agents', { name: 'x', mcp_servers: [{ id: 'm', url: 'https://169.254.169.254/mcp' }] })).toEqual(
      invalid('mcp_servers.0.url', 'refused: 169.254.169.254 is a link-local address'),
    );
    expect(await api(TEST_OWNER_SK, 'POST', '/api/agents', { name: 'x', mcp_servers: [{ id: 'm', url: 'https://user:pw@mcp.example.com/' }] })).toEqual(
      invalid('mcp_servers.0.url', 'refused: URLs with credentials are not allowed'),
    );
  });

  it('422 naming the field at update; this deployment’s own shards and allowed hosts are fine', async () => {
    const created = await api(TEST_OWNER_SK, 'POST', '/api/agents', {
      name: 'ok',
      relays: ['ws://relay.test/', `ws://127.0.0.1:${FIXTURE_PORT}/`], // (no relay outside this machine)
      mcp_servers: [{ id: 'local', url: EVERYTHING }],
    });
    expect(created.status).toBe(201);
    const pk = (created.json as { pubkey: string }).pubkey;
    expect(await api(TEST_OWNER_SK, 'PATCH', `/api/agents/${pk}`, { relays: ['ws://10.1.2.3:7777/'] })).toEqual(invalid('relays.0', `refused: ${PLAIN_WS}`));
    expect(await api(TEST_OWNER_SK, 'PATCH', `/api/agents/${pk}`, { relays: ['ws://relay.test/api/agents'] })).toEqual(
      invalid('relays.0', 'not a relay shard of this deployment (/ or /r/<owner>)'),
    );
    expect(await api(TEST_OWNER_SK, 'PATCH', `/api/agents/${pk}`, { mcp_servers: [{ id: 'm', url: 'http://[::1]:8080/mcp' }] })).toEqual(
      invalid('mcp_servers.0.url', `refused: ${PLAIN_HTTP}`),
    );
  });
});

describe("an agent's relay URLs are public: no query string or fragment", () => {
  const invalid = (path: string, message: string) => ({ status: 422, json: { error: 'invalid agent', issues: [{ path, message }] } });
  const PUBLISHED = "relays may not have a query string or fragment (?… or #…): an agent's relays are published in its relay list (kind 10002), which anyone can read";
  const flooder = inject('floodRelayUrl');
  const stubOf = (agent: string) => env.AGENT.get(env.AGENT.idFromName(agent));
  const dialled = async (tag: string) => ((await (await fetch(`${flooder.replace(/^ws/, 'http')}/stats?tag=${tag}`)).json()) as { connections: number }).connections;
  /** The agent's newest relay list (10002) on its owner's shard dated after `after`, polled (at most ~10 s). */
  async function relayListAfter(agent: string, after: number): Promise<NostrEvent | undefined> {
    const s = await connect(`/r/${TEST_OWNER}`);
    let list: NostrEvent | undefined;
    for (let i = 0; i < 100 && !(list && list.created_at > after); i++) {
      if (i > 0) await sleep(100);
      list = (await s.req(`l${i}`, { kinds: [10002], authors: [agent] })).events[0];
    }
    s.close();
    return list && list.created_at > after ? list : undefined;
  }

  it('422 at create and update: a token in the URL would be published', async () => {
    expect(await api(TEST_OWNER_SK, 'POST', '/api/agents', { name: 'x', relays: ['wss://relay.damus.io/', 'wss://relay.example.com/?token=s3cret'] })).toEqual(
      invalid('relays.1', PUBLISHED),
    );
    const created = await api(TEST_OWNER_SK, 'POST', '/api/agents', { name: 'ok', relays: ['ws://relay.test/'] });
    expect(created.status).toBe(201);
    const pk = (created.json as { pubkey: string }).pubkey;
    expect(await api(TEST_OWNER_SK, 'PATCH', `/api/agents/${pk}`, { relays: ['wss://relay.example.com/#s3cret'] })).toEqual(invalid('relays.0', PUBLISHED));
    expect(await api(TEST_OWNER_SK, 'PATCH', `/api/agents/${pk}`, { relays: ['wss://relay.example.com/?'] })).toEqual(invalid('relays.0', PUBLISHED));
  });

  it('a config stored before the rule keeps its URL: the agent still dials it, its relay list leaves it out', async () => {
    const tag = `legacy-${Math.random().toString(36).slice(2)}`;
    const external = `${flooder}/${tag}/0`;
    const legacy = `${external}?token=s3cret-${tag}#more`;
    const agent = await createTestAgent({ relays: [external] });
    const first = await relayListAfter(agent, 0);
    expect(first?.tags).toEqual([['r', `ws://relay.test/r/${TEST_OWNER}`], ['r', 'ws://relay.test/'], ['r', external]]);
    const dials = await dialled(tag);
    expect(dials).toBeGreaterThan(0);
    await sleep(1100); // the next relay list is dated later
    // What an agent created before the rule holds; the object restarts (storage stays) and its watchdog reconnects.
    await runInDurableObject(stubOf(agent), (_i, state) => {
      const row = state.storage.sql.exec<{ config: string }>('SELECT config FROM agent WHERE k = 1').one();
      state.storage.sql.exec('UPDATE agent SET config = ? WHERE k = 1', JSON.stringify({ ...(JSON.parse(row.config) as object), relays: [legacy] }));
    });
    await runInDurableObject(stubOf(agent), (_i, state) => state.abort('simulated restart')).catch(() => undefined);
    await runDurableObjectAlarm(stubOf(agent));
    const list = await relayListAfter(agent, first!.created_at);
    expect(list?.tags).toEqual([['r', `ws://relay.test/r/${TEST_OWNER}`], ['r', 'ws://relay.test/']]);
    expect(JSON.stringify(list)).not.toContain('s3cret');
    expect(await dialled(tag)).toBeGreaterThan(dials);
  });
});

describe('safeFetch', () => {
  const both = outboundPolicy({ EDGESTR_OUTBOUND_ALLOW: '127.0.0.1:*,localhost:*' });
  const headersAt = async (path: string): Promise<Record<string, string>> => {
    const r = await safeFetch(`${FIXTURE}${path}`, { headers: { authorization: 'Bearer s3cret', 'x-api-key': 'k', 'user-agent': 'edgestr-test' } }, both);
    if (!r.ok) throw new Error(r.error);
    return (await r.value.response.json()) as Record<string, string>;
  };

  it('checks the first URL and every hop, with a bounded number of hops', async () => {
    expect(await safeFetch(`${FIXTURE}/text`, {}, STRICT_OUTBOUND)).toEqual({ ok: false, error: `refused: ${PLAIN_HTTP}` });
    const to = (target: string) => `${FIXTURE}/redirect?to=${encodeURIComponent(target)}`;
    expect(await safeFetch(to('http://169.254.169.254/latest/meta-data/'), {}, LOCAL_SERVERS)).toEqual({ ok: false, error: `redirect refused: ${PLAIN_HTTP}` });
    expect(await safeFetch(to('https://169.254.169.254/latest/meta-data/'), {}, LOCAL_SERVERS)).toEqual({
      ok: false,
      error: 'redirect refused: 169.254.169.254 is a link-local address',
    });
    expect(await safeFetch(to(`http://localhost:${FIXTURE_PORT}/text`), {}, LOCAL_SERVERS)).toEqual({ ok: false, error: `redirect refused: ${PLAIN_HTTP}` });
    expect(await safeFetch(`${FIXTURE}/chain/3`, {}, LOCAL_SERVERS, { maxRedirects: 2 })).toEqual({ ok: false, error: 'too many redirects (max 2)' });
    const followed = await safeFetch(`${FIXTURE}/chain/3`, {}, LOCAL_SERVERS);
    expect(followed.ok && { status: followed.value.response.status, url: followed.value.url.href, hops: followed.value.hops }).toEqual({
      status: 200,
      url: `${FIXTURE}/text`,
      hops: 3,
    });
  });

  it('keeps headers on the same origin and drops credentials and custom headers on another', async () => {
    expect(await headersAt('/redirect?to=/echo-headers')).toMatchObject({ authorization: 'Bearer s3cret', 'x-api-key': 'k' });
    const moved = await headersAt(`/redirect?to=${encodeURIComponent(`http://localhost:${FIXTURE_PORT}/echo-headers`)}`);
    expect(moved['user-agent']).toBe('edgestr-test');
    expect(moved.authorization).toBeUndefined();
    expect(moved['x-api-key']).toBeUndefined();
  });
});

describe('MCP servers under the policy', () => {
  it('refuses a loopback or metadata server in production, before connecting', async () => {
    expect(await connectMcpServer({ id: 'x', url: EVERYTHING })).toEqual({ ok: false, error: `MCP server x: refused: ${PLAIN_HTTP}` });
    expect(await connectMcpServer({ id: 'x', url: 'https://127.0.0.1:1/mcp' })).toEqual({ ok: false, error: 'MCP server x: refused: 127.0.0.1 is a loopback address' });
    expect(await connectMcpServer({ id: 'x', url: 'https://169.254.169.254/mcp' }, { policy: DEVELOPMENT })).toEqual({
      ok: false,
      error: 'MCP server x: refused: 169.254.169.254 is a link-local address',
    });
  });

  it('follows an allowed redirect (307 repeats the POST) and refuses a hop to a forbidden host', async () => {
    const via = `${FIXTURE}/redirect?status=307&to=${encodeURIComponent(EVERYTHING)}`;
    const connected = await connectMcpServer({ id: 'moved', url: via }, { policy: LOCAL_SERVERS });
    if (!connected.ok) throw new Error(connected.error);
    expect(connected.value.tools.map((t) => t.definition.name)).toContain('moved__echo');
    await connected.value.close();

    const toMetadata = `${FIXTURE}/redirect?status=307&to=${encodeURIComponent('https://169.254.169.254/latest/meta-data/')}`;
    const refused = await connectMcpServer({ id: 'evil', url: toMetadata }, { policy: LOCAL_SERVERS });
    expect(refused.ok).toBe(false);
    expect(!refused.ok && refused.error).toMatch(/^MCP server evil: .*redirect refused: 169\.254\.169\.254 is a link-local address/);
  });
});

describe("an agent's external relays (openSocket)", () => {
  // An agent of an owner the operators vetted: EDGESTR_OUTBOUND_ALLOW (127.0.0.1) applies.
  const vetted = { origin: 'http://relay.test', owner: 'f'.repeat(64), outbound: async () => outboundPolicy(env, { vetted: true }) };
  const open = (url: string, connectTimeoutMs?: number, who: SocketOwner = vetted) =>
    runInDurableObject(env.AGENT.get(env.AGENT.idFromName('outbound-probe')), async () => {
      try {
        await Promise.race([openRelaySocket(env, url, who, connectTimeoutMs), sleep(8_000).then(() => Promise.reject(new Error('still waiting after 8 s')))]);
        return 'opened';
      } catch (e) {
        return e instanceof Error ? e.message : String(e);
      }
    });
  /** The hostile server's connection counts of `bucket`, once none is open (polled, at most ~5 s). */
  const settled = async (bucket: string): Promise<{ open: number; closed: number }> => {
    const stats = async () => (await (await fetch(`${FIXTURE}/hostile/stats?bucket=${bucket}`)).json()) as { open: number; closed: number };
    let s = await stats();
    for (let i = 0; i < 100 && s.open > 0; i++) {
      await sleep(50);
      s = await stats();
    }
    return s;
  };

  it('refuses relays the policy forbids, before dialling', async () => {
    expect(await open('wss://localhost:7777/')).toBe('relay wss://localhost:7777/: refused: localhost is a local name');
    expect(await open('wss://169.254.169.254/')).toBe('relay wss://169.254.169.254/: refused: 169.254.169.254 is a link-local address');
    expect(await open('ws://relay.example.com/')).toBe(`relay ws://relay.example.com/: refused: ${PLAIN_WS}`);
    // This deployment's own host: only its shards, reached through their Durable Objects.
    expect(await open('ws://relay.test/elsewhere')).toBe('relay ws://relay.test/elsewhere: not a relay shard of this deployment (/ or /r/<owner>)');
    // A listed host, for an owner that signed itself up (or a dial that names no owner's policy).
    const listed = `ws://127.0.0.1:${FIXTURE_PORT}/`;
    const refused = `relay ${listed}: refused: ${PLAIN_WS}`;
    expect(await open(listed, undefined, { ...vetted, outbound: async () => outboundPolicy(env, { vetted: false }) })).toBe(refused);
    expect(await open(listed, undefined, { origin: vetted.origin, owner: vetted.owner })).toBe(refused);
  });

  it('does not follow redirects', async () => {
    const url = `ws://127.0.0.1:${FIXTURE_PORT}/redirect?to=/text`;
    expect(await open(url)).toBe(`relay ${url} did not accept a WebSocket (HTTP 302)`);
  });

  it('gives up an upgrade unanswered within the connect timeout, closing its connection; a refusal’s endless body is not left open', async () => {
    const bucket = `relay-${Math.random().toString(36).slice(2)}`;
    const hanging = `ws://127.0.0.1:${FIXTURE_PORT}/hostile/relay-hang?bucket=${bucket}`;
    expect(await open(hanging, 300)).toBe(`relay ${hanging}: no answer to the WebSocket upgrade within 300 ms`);
    expect(await settled(bucket)).toMatchObject({ open: 0, closed: 1 });
    const refusing = `ws://127.0.0.1:${FIXTURE_PORT}/hostile/relay-refuse?bucket=${bucket}`;
    expect(await open(refusing)).toBe(`relay ${refusing} did not accept a WebSocket (HTTP 403)`);
    expect(await settled(bucket)).toMatchObject({ open: 0, closed: 2 });
  });
});

describe('EDGESTR_OUTBOUND_ALLOW for the owners the operators vetted only: the management API and the dials', () => {
  const EVERYTHING_PORT = new URL(EVERYTHING).port;
  const EVERYTHING_REFUSED = `refused: ${PLAIN_HTTP}`;
  const invalidAgent = (path: string, message: string) => ({ status: 422, json: { error: 'invalid agent', issues: [{ path, message }] } });
  const invalidServer = (message: string) => ({ status: 422, json: { error: 'invalid server', issues: [{ path: 'url', message }] } });
  const stubOf = (agent: string) => env.AGENT.get(env.AGENT.idFromName(agent));

  let addresses = 0;
  /** A key that signs itself up (EDGESTR_SIGNUP=open): an owner, not vetted. */
  async function signUp(): Promise<Keys> {
    const k = keys();
    const url = `${BASE}/api/signup`;
    const headers = { Authorization: makeHttpAuthHeader(k.sk, url, 'POST'), 'CF-Connecting-IP': `203.0.113.${++addresses}` };
    expect((await fetchWithEnv(OPEN_SIGNUP, new Request(url, { method: 'POST', headers }))).status).toBe(201);
    return k;
  }

  /** The terminal payload of a run of `agent` (owned by `owner`) calling `<server>__echo`. */
  async function echoTool(agent: string, owner: string, server: string): Promise<Record<string, unknown>> {
    const c = await NipXxClient.open(agent, keys(), `/r/${owner}`);
    const p = c.prompt({ ver: 1, message: `/tool ${server}__echo {"message":"hi"}` });
    await c.send(p);
    const run = await c.collect(p.id);
    c.sock.close();
    return run.terminal.payload;
  }

  it('a key that signed itself up: an MCP server or relay of its agents, or a bridge server, on a listed host is 422 with the reason; vetted, it is taken', async () => {
    const k = await signUp();
    expect(await api(k.sk, 'POST', '/api/agents', { name: 'x', provider: 'echo', mcp_servers: [{ id: 'm', url: EVERYTHING }] })).toEqual(
      invalidAgent('mcp_servers.0.url', EVERYTHING_REFUSED),
    );
    expect(await api(k.sk, 'POST', '/api/agents', { name: 'x', provider: 'echo', relays: [`ws://127.0.0.1:${FIXTURE_PORT}/`] })).toEqual(
      invalidAgent('relays.0', `refused: ${PLAIN_WS}`),
    );
    expect(await api(k.sk, 'POST', '/api/bridge/servers', { id: 'internal', url: EVERYTHING, public: false })).toEqual(invalidServer(EVERYTHING_REFUSED));
    const created = await api(k.sk, 'POST', '/api/agents', { name: 'x', provider: 'echo' });
    expect(created.status).toBe(201);
    const agent = (created.json as { pubkey: string }).pubkey;
    expect(await api(k.sk, 'PATCH', `/api/agents/${agent}`, { mcp_servers: [{ id: 'm', url: EVERYTHING }] })).toEqual(invalidAgent('mcp_servers.0.url', EVERYTHING_REFUSED));

    expect((await api(TEST_ADMIN_SK, 'PATCH', `/api/admin/owners/${k.pk}`, { vetted: true })).status).toBe(200);
    expect((await api(k.sk, 'PATCH', `/api/agents/${agent}`, { mcp_servers: [{ id: 'm', url: EVERYTHING }] })).status).toBe(200);
    expect((await api(k.sk, 'POST', '/api/bridge/servers', { id: 'internal', url: EVERYTHING, public: false })).status).toBe(201);
  });

  it('a vetted owner: an entry with a port allows that port only, one without its default port only', async () => {
    const only = { EDGESTR_OUTBOUND_ALLOW: `127.0.0.1:${EVERYTHING_PORT}` };
    expect(await apiWithEnv(only, TEST_OWNER_SK, 'POST', '/api/bridge/servers', { id: 'other-port', url: `${FIXTURE}/mcp-paged`, public: false })).toEqual(
      invalidServer(`refused: EDGESTR_OUTBOUND_ALLOW lists 127.0.0.1 on port ${EVERYTHING_PORT} only, not ${FIXTURE_PORT}`),
    );
    expect((await apiWithEnv(only, TEST_OWNER_SK, 'POST', '/api/bridge/servers', { id: 'listed-port', url: EVERYTHING, public: false })).status).toBe(201);
    // Listed for a service on :80, the host's other services stay out of reach.
    const bare = { EDGESTR_OUTBOUND_ALLOW: '127.0.0.1' };
    expect(await apiWithEnv(bare, TEST_OWNER_SK, 'POST', '/api/bridge/servers', { id: 'bare-host', url: EVERYTHING, public: false })).toEqual(
      invalidServer(`refused: EDGESTR_OUTBOUND_ALLOW lists 127.0.0.1 on its default port only, not ${EVERYTHING_PORT}`),
    );
  });

  it('an MCP session kept under a vetted owner’s policy is not used under another: the key opens anew (refused), the old one is closed', async () => {
    const cache = new McpSessionCache();
    const server = { url: EVERYTHING };
    const kept = await cache.use('k', server, { policy: outboundPolicy(env, { vetted: true }) }, async (session) => session);
    if (!kept.ok) throw new Error(kept.error.message);
    expect(await cache.use('k', server, { policy: outboundPolicy(env, { vetted: false }) }, async () => 'used')).toEqual({
      ok: false,
      error: { kind: 'open', message: EVERYTHING_REFUSED },
    });
    expect(kept.value.closed).toBe(true);
    await cache.closeAll();
  });

  it('at dial time: a server its bridge stored before the rule is not dialled for a self-signed-up owner (health says why)', async () => {
    const k = await signUp();
    // Its bridge, with a listed server as the API took it before the rule.
    const bridge = env.BRIDGE.get(env.BRIDGE.idFromName(k.pk));
    await bridge.ensureProvider(k.pk, BASE);
    expect((await bridge.addServer({ id: 'internal', url: EVERYTHING, public: false })).ok).toBe(true);
    await runDurableObjectAlarm(bridge); // its refresh (unless it ran already)
    let health = (await bridge.view('internal'))?.health;
    for (let i = 0; i < 100 && health?.checked_at === null; i++) {
      await sleep(50);
      health = (await bridge.view('internal'))?.health;
    }
    expect(health).toMatchObject({ ok: false, error: EVERYTHING_REFUSED });
  });

  it('at dial time: an MCP server its agent stored before the rule is not dialled for a self-signed-up owner; for a vetted owner it is', async () => {
    const k = await signUp();
    // Its agent, whose stored config names a listed server (as the API took it before the rule), restarted over it.
    const created = await api(k.sk, 'POST', '/api/agents', { name: 'internal', provider: 'echo' });
    expect(created.status).toBe(201);
    const agent = (created.json as { pubkey: string }).pubkey;
    await runInDurableObject(stubOf(agent), (_i, state) => {
      const row = state.storage.sql.exec<{ config: string }>('SELECT config FROM agent WHERE k = 1').one();
      state.storage.sql.exec('UPDATE agent SET config = ? WHERE k = 1', JSON.stringify({ ...(JSON.parse(row.config) as object), mcp_servers: [{ id: 'internal', url: EVERYTHING }] }));
    });
    await runInDurableObject(stubOf(agent), (_i, state) => state.abort('simulated restart')).catch(() => undefined);
    await runDurableObjectAlarm(stubOf(agent));
    // Not connected: a call of its tool fails naming the server (registry.ts; the refusal is the owner's to read), which echo answers with.
    expect(await echoTool(agent, k.pk, 'internal')).toMatchObject({ text: "error: tool internal__echo is unavailable: its server internal could not be used for this run (the agent's owner can see why)" });

    // The same server for an owner listed in EDGESTR_OWNERS.
    const vetted = await createTestAgent({ mcp_servers: [{ id: 'internal', url: EVERYTHING }] });
    expect(await echoTool(vetted, TEST_OWNER, 'internal')).toMatchObject({ text: 'Echo: hi' });
  });
});

describe("this deployment's own host: never dialled for an owner (a loop)", () => {
  // The tests' deployment is reached at BASE (http://relay.test); EDGESTR_ENV=test compares host and port.
  const OWN = (host: string): string => `refused: ${host} is this deployment's own host (a loop)`;
  const invalidAgent = (path: string, message: string) => ({ status: 422, json: { error: 'invalid agent', issues: [{ path, message }] } });
  const invalidServer = (message: string) => ({ status: 422, json: { error: 'invalid server', issues: [{ path: 'url', message }] } });

  it("422 at the API: a bridge server or an agent's MCP server at the deployment's own /mcp, even listed in EDGESTR_OUTBOUND_ALLOW", async () => {
    expect(await api(TEST_OWNER_SK, 'POST', '/api/bridge/servers', { id: 'loop', url: `${BASE}/mcp` })).toEqual(invalidServer(OWN('relay.test')));
    const listed = { EDGESTR_OUTBOUND_ALLOW: '127.0.0.1:*,relay.test' };
    expect(await apiWithEnv(listed, TEST_OWNER_SK, 'POST', '/api/bridge/servers', { id: 'loop', url: `${BASE}/mcp`, public: false })).toEqual(invalidServer(OWN('relay.test')));
    expect((await api(TEST_OWNER_SK, 'POST', '/api/bridge/servers', { id: 'not-a-loop', url: EVERYTHING, public: false })).status).toBe(201);
    expect(await api(TEST_OWNER_SK, 'PATCH', '/api/bridge/servers/not-a-loop', { url: `${BASE}/mcp` })).toEqual(invalidServer(OWN('relay.test')));

    expect(await api(TEST_OWNER_SK, 'POST', '/api/agents', { name: 'loop', mcp_servers: [{ id: 'self', url: `${BASE}/mcp` }] })).toEqual(
      invalidAgent('mcp_servers.0.url', OWN('relay.test')),
    );
    const created = await api(TEST_OWNER_SK, 'POST', '/api/agents', { name: 'loop', relays: ['ws://relay.test/'] }); // its own shard is fine
    expect(created.status).toBe(201);
    const pk = (created.json as { pubkey: string }).pubkey;
    expect(await apiWithEnv(listed, TEST_OWNER_SK, 'PATCH', `/api/agents/${pk}`, { mcp_servers: [{ id: 'self', url: `${BASE}/mcp` }] })).toEqual(
      invalidAgent('mcp_servers.0.url', OWN('relay.test')),
    );
  });

  it('422 at the API: the host of EDGESTR_PUBLIC_URL and the host the call came in on; in production on any port', async () => {
    const pub = { EDGESTR_PUBLIC_URL: 'https://relay.example.org' };
    expect(await apiWithEnv(pub, TEST_OWNER_SK, 'POST', '/api/bridge/servers', { id: 'loop', url: 'https://relay.example.org/mcp' })).toEqual(
      invalidServer(OWN('relay.example.org')),
    );
    expect(await apiWithEnv(pub, TEST_OWNER_SK, 'POST', '/api/agents', { name: 'loop', mcp_servers: [{ id: 'self', url: `${BASE}/mcp` }] })).toEqual(
      invalidAgent('mcp_servers.0.url', OWN('relay.test')),
    );
    // A deployment with EDGESTR_PUBLIC_URL is called on its hostname only (workers/common/served-host.ts).
    const production = { ...pub, EDGESTR_ENV: undefined };
    const PUBLIC = 'https://relay.example.org';
    expect(await apiWithEnv(production, TEST_OWNER_SK, 'POST', '/api/agents', { name: 'loop', relays: ['wss://relay.example.org:8443/'] }, PUBLIC)).toEqual(
      invalidAgent('relays.0', OWN('relay.example.org:8443')),
    );
    expect(await apiWithEnv(production, TEST_OWNER_SK, 'POST', '/api/bridge/servers', { id: 'loop', url: 'https://relay.example.org:8443/mcp' }, PUBLIC)).toEqual(
      invalidServer(OWN('relay.example.org:8443')),
    );
  });

  it('at dial time: a bridge server stored at the own host before the rule is not dialled (health says why)', async () => {
    const owner = keys();
    expect((await api(TEST_ADMIN_SK, 'POST', '/api/admin/owners', { pubkey: owner.pk })).status).toBe(201);
    // Its bridge, with a server at the deployment's own /mcp as the API took it before the rule.
    const bridge = env.BRIDGE.get(env.BRIDGE.idFromName(owner.pk));
    await bridge.ensureProvider(owner.pk, BASE);
    expect((await bridge.addServer({ id: 'loop', url: `${BASE}/mcp`, public: false })).ok).toBe(true);
    await runDurableObjectAlarm(bridge); // its refresh (unless it ran already)
    let health = (await bridge.view('loop'))?.health;
    for (let i = 0; i < 100 && health?.checked_at === null; i++) {
      await sleep(50);
      health = (await bridge.view('loop'))?.health;
    }
    expect(health).toMatchObject({ ok: false, error: OWN('relay.test') });
  });

  it("at dial time: an agent's web_fetch to the own host is refused; a local server on another port is fetched", async () => {
    const agent = await createTestAgent({ tools: ['web_fetch'], web_fetch_hosts: ['relay.test', '127.0.0.1'] });
    const fetchOnce = async (url: string) => {
      const c = await NipXxClient.open(agent);
      const p = c.prompt({ ver: 1, message: `/tool web_fetch {"url":"${url}"}` });
      await c.send(p);
      const run = await c.collect(p.id);
      c.sock.close();
      return run.tools.find((t) => t['phase'] === 'result');
    };
    expect(await fetchOnce(`${BASE}/health`)).toMatchObject({ name: 'web_fetch', success: false, output: { stderr: OWN('relay.test') } });
    expect(await fetchOnce(`${FIXTURE}/text`)).toMatchObject({ name: 'web_fetch', success: true });
  });

  it("at dial time: a relay on the own hostname's other port is refused in production, before dialling", async () => {
    const production = { ...env, EDGESTR_ENV: undefined };
    const opened = await runInDurableObject(env.AGENT.get(env.AGENT.idFromName('outbound-probe')), async () =>
      openRelaySocket(production, 'wss://relay.test:8443/', { origin: 'https://relay.test', owner: 'f'.repeat(64) }).then(
        () => 'opened',
        (e: unknown) => (e instanceof Error ? e.message : String(e)),
      ),
    );
    expect(opened).toBe(`relay wss://relay.test:8443/: ${OWN('relay.test:8443')}`);
  });
});
