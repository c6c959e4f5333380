// The one outbound-URL policy (src/shared/outbound-url.ts) and where it applies: MCP servers
// (first URL and every redirect hop of the transport), safeFetch (hops, headers), an agent's
// external relays (openSocket: checked, redirects not followed), and the management API, which
// refuses such URLs at create and update with a 422 naming the field; an agent's relay URLs are
// published, so one with a query string or fragment is refused too (one stored before: dialled,
// left out of the relay list).
// The test bindings list 127.0.0.1 in EDGESTR_OUTBOUND_ALLOW (the fixture and MCP servers run
// there); everything else is production policy (EDGESTR_ENV=test).
import { env, runDurableObjectAlarm, runInDurableObject } from 'cloudflare:test';
import { describe, expect, it, inject } from 'vitest';
import '../mcp/provided.js';
import type { NostrEvent } from '../../src/shared/event.js';
import { outboundPolicy, outboundRefusal, safeFetch, STRICT_OUTBOUND, type OutboundKind } from '../../src/shared/outbound-url.js';
import type { StoredAgent } from '../../workers/agent/config.js';
import { connectMcpServer } from '../../workers/agent/tools/mcp.js';
import { openRelaySocket } from '../../workers/common/relay-sockets.js';
import { api } from './api-helpers.js';
import { createTestAgent } from './agent-helpers.js';
import { connect } from './helpers.js';
import { TEST_OWNER, TEST_OWNER_SK } from './test-keys.js';

declare module 'vitest' {
  export interface ProvidedContext {
    floodRelayUrl: string;
  }
}

const FIXTURE = inject('toolsFixtureUrl');
const EVERYTHING = inject('mcpEverythingUrl');
const FIXTURE_PORT = new URL(FIXTURE).port;
const LOCAL_SERVERS = outboundPolicy({ EDGESTR_OUTBOUND_ALLOW: '127.0.0.1' });
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
  const both = outboundPolicy({ EDGESTR_OUTBOUND_ALLOW: '127.0.0.1,localhost' });
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
  const config = { origin: 'http://relay.test', owner: 'f'.repeat(64) } as StoredAgent;
  const open = (url: string, connectTimeoutMs?: number) =>
    runInDurableObject(env.AGENT.get(env.AGENT.idFromName('outbound-probe')), async () => {
      try {
        await Promise.race([openRelaySocket(env, url, config, connectTimeoutMs), sleep(8_000).then(() => Promise.reject(new Error('still waiting after 8 s')))]);
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
