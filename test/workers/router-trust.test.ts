// The router's trust rules: closed owner shards outside development (EDGESTR_OWNERS, unless
// EDGESTR_OPEN_SHARDS=true), `/r/<owner>/` (NDK's trailing slash) as the same shard, the NIP-42
// relay URL from EDGESTR_PUBLIC_URL, a deployment with EDGESTR_PUBLIC_URL answering on its
// hostname only (421 elsewhere), development mode only for loopback hosts, test mode only for
// loopback and .test hosts, and both only for browser pages (Origin) on such hosts.
// The test run sets EDGESTR_OPEN_SHARDS=true (tests use random owners' shards); the closed
// behaviour is tested through the Worker's fetch with that variable removed.
import { createExecutionContext, env, SELF, waitOnExecutionContext } from 'cloudflare:test';
import app from '../../workers/index.js';
import { describe, expect, it } from 'vitest';
import { npubEncode } from 'nostr-tools/nip19';
import { apiWithEnv, fetchWithEnv, type EnvOverride } from './app-env.js';
import { BASE, connect, freshOwner, keys, randomHex, sign, TestSocket } from './helpers.js';
import { localInvoice } from '../../workers/bridge/payments-local.js';
import { OPEN_SIGNUP, TEST_OWNER, TEST_OWNER_SK } from './test-keys.js';
import { makeHttpAuthHeader } from '../../src/shared/nip98.js';

const CLOSED: EnvOverride = { EDGESTR_OPEN_SHARDS: undefined };
const NIP11 = { Accept: 'application/nostr+json' };
const UPGRADE = { Upgrade: 'websocket' };
const noShard = (hex: string) => ({ error: `no relay shard for ${hex} on this deployment: shards exist only for its owners and this key is not one; ask the operators to add it` });
const DEV_REFUSAL = { error: 'development mode serves only loopback hosts; unset EDGESTR_ENV' };

async function answer(override: EnvOverride, url: string, headers: Record<string, string>) {
  const res = await fetchWithEnv(override, new Request(url, { headers }));
  res.webSocket?.accept();
  res.webSocket?.close(1000, 'done');
  const text = res.status === 101 ? '' : await res.text();
  return { status: res.status, json: text && res.headers.get('Content-Type')?.includes('json') ? (JSON.parse(text) as unknown) : text };
}

async function socketWithEnv(override: EnvOverride, url: string): Promise<TestSocket> {
  const res = await fetchWithEnv(override, new Request(url, { headers: UPGRADE }));
  const ws = res.webSocket;
  if (!ws) throw new Error(`no websocket: ${res.status} ${await res.text()}`);
  ws.accept();
  const sock = new TestSocket(ws, url.replace(/^http/, 'ws'));
  // The relay sends its NIP-42 challenge lazily; ask for it (as connect() in helpers.ts does).
  sock.send(['AUTH']);
  await sock.next((f) => f[0] === 'AUTH').then((f) => sock.frames.unshift(f));
  return sock;
}

describe('closed owner shards outside development', () => {
  it.each([
    ['NIP-11', NIP11],
    ['WebSocket upgrade', UPGRADE],
  ])('404 JSON for a key that is not an owner (%s), by hex and by npub', async (_n, headers) => {
    const stranger = keys();
    expect(await answer(CLOSED, `${BASE}/r/${stranger.pk}`, headers)).toEqual({ status: 404, json: noShard(stranger.pk) });
    expect(await answer(CLOSED, `${BASE}/r/${npubEncode(stranger.pk)}/`, headers)).toEqual({ status: 404, json: noShard(stranger.pk) });
  });

  it('with sign-up open, the 404 tells the key to sign up, and once it has, its shard answers', async () => {
    const stranger = keys();
    const open = { ...CLOSED, ...OPEN_SIGNUP };
    expect(await answer(open, `${BASE}/r/${stranger.pk}`, NIP11)).toEqual({
      status: 404,
      json: { error: `no relay shard for ${stranger.pk} on this deployment: shards exist only for its owners and this key is not one; sign up first (edgestr signup, or POST /api/signup)` },
    });
    const url = `${BASE}/api/signup`;
    const signedUp = await fetchWithEnv(open, new Request(url, { method: 'POST', headers: { Authorization: makeHttpAuthHeader(stranger.sk, url, 'POST'), 'CF-Connecting-IP': '192.0.2.250' } }));
    expect(signedUp.status).toBe(201);
    expect(await answer(open, `${BASE}/r/${stranger.pk}`, NIP11)).toMatchObject({ status: 200, json: { pubkey: stranger.pk } });
  });

  it('an allowed owner has its shard; the public shard stays open', async () => {
    expect(await answer(CLOSED, `${BASE}/r/${TEST_OWNER}`, NIP11)).toMatchObject({ status: 200, json: { pubkey: TEST_OWNER } });
    expect((await answer(CLOSED, `${BASE}/r/${TEST_OWNER}`, UPGRADE)).status).toBe(101);
    expect((await answer(CLOSED, `${BASE}/`, NIP11)).status).toBe(200);
  });

  it('EDGESTR_OPEN_SHARDS=true, or development mode on a loopback host, gives every key a shard', async () => {
    const stranger = keys();
    expect(await answer({ EDGESTR_OPEN_SHARDS: 'true' }, `${BASE}/r/${stranger.pk}`, NIP11)).toMatchObject({ status: 200, json: { pubkey: stranger.pk } });
    expect(await answer({ ...CLOSED, EDGESTR_ENV: 'development' }, `http://127.0.0.1/r/${stranger.pk}`, NIP11)).toMatchObject({
      status: 200,
      json: { pubkey: stranger.pk },
    });
  });
});

describe('/r/<owner>/ (trailing slash) is the same shard', () => {
  it('NIP-11 and WebSocket answer on /r/<owner>/; //-variants are not shards', async () => {
    const owner = freshOwner();
    const doc = await SELF.fetch(`${BASE}/r/${owner.pk}/`, { headers: NIP11 });
    expect(doc.status).toBe(200);
    expect(((await doc.json()) as { pubkey: string }).pubkey).toBe(owner.pk);

    const slash = await connect(`/r/${owner.pk}/`);
    const e = sign(owner, { content: 'via the trailing slash' });
    expect((await slash.publish(e))[2]).toBe(true);
    expect((await slash.auth(owner))[2]).toBe(true);
    const plain = await connect(`/r/${npubEncode(owner.pk)}`);
    expect((await plain.req('same', { ids: [e.id] })).events).toEqual([e]);

    for (const path of [`/r/${owner.pk}//`, `/r//${owner.pk}`, `//r/${owner.pk}`]) {
      const res = await SELF.fetch(`${BASE}${path}`, { headers: UPGRADE });
      expect(res.webSocket, path).toBeNull();
      expect(res.status, path).toBe(404);
    }
  });
});

describe('the NIP-42 relay URL', () => {
  it('comes from EDGESTR_PUBLIC_URL when set: an AUTH naming the request host is refused', async () => {
    const owner = freshOwner();
    const sock = await socketWithEnv({ EDGESTR_PUBLIC_URL: 'https://relay.example.org' }, `${BASE}/r/${owner.pk}`);
    const wrong = await sock.auth(owner, { relay: `ws://relay.test/r/${owner.pk}` });
    expect(wrong.slice(2)).toEqual([false, `auth-required: relay tag does not match this relay (wss://relay.example.org/r/${owner.pk})`]);
    expect((await sock.auth(owner, { relay: `wss://relay.example.org/r/${owner.pk}` }))[2]).toBe(true);
    sock.close();
  });

  it('a malformed EDGESTR_PUBLIC_URL is a clear configuration error', async () => {
    expect(await answer({ EDGESTR_PUBLIC_URL: 'relay.example.org' }, `${BASE}/`, NIP11)).toEqual({
      status: 500,
      json: { error: 'EDGESTR_PUBLIC_URL is not a URL; fix the deployment configuration' },
    });
  });

  it('comes from the request URL otherwise', async () => {
    const owner = freshOwner();
    const sock = await connect(`/r/${owner.pk}`);
    const wrong = await sock.auth(owner, { relay: `wss://relay.example.org/r/${owner.pk}` });
    expect(wrong.slice(2)).toEqual([false, `auth-required: relay tag does not match this relay (ws://relay.test/r/${owner.pk})`]);
    expect((await sock.auth(owner))[2]).toBe(true);
    sock.close();
  });
});

describe('a deployment with EDGESTR_PUBLIC_URL answers on its hostname only', () => {
  // The own-host rule of the outbound policy knows EDGESTR_PUBLIC_URL's host and the hosts a dial
  // saw; a Worker also served under another name (its workers.dev one next to a custom domain)
  // would let an owner's bridge server or web_fetch reach this deployment there (a loop).
  const PUBLIC = 'https://relay.example.org';
  const PRODUCTION: EnvOverride = { EDGESTR_ENV: undefined, EDGESTR_PUBLIC_URL: PUBLIC };
  const ELSEWHERE = { error: `this deployment is served at ${PUBLIC}` };

  it('421 JSON for a management call on another hostname', async () => {
    expect(await apiWithEnv(PRODUCTION, TEST_OWNER_SK, 'GET', '/api/agents', undefined, 'http://other.example')).toEqual({ status: 421, json: ELSEWHERE });
  });

  it.each([
    ['health', '/health', {}],
    ['NIP-11', '/', NIP11],
    ['WebSocket upgrade', `/r/${TEST_OWNER}`, UPGRADE],
    ['management API', '/api/agents', {}],
    ['/mcp', '/mcp', {}],
    ['console', '/console', {}],
  ])('421 JSON on every other hostname, EDGESTR_ENV unset or production (%s)', async (_n, path, headers) => {
    for (const envName of [undefined, 'production']) {
      for (const origin of ['http://other.example', 'https://edgestr.example.workers.dev', 'https://relay.example.org.evil.example', 'https://www.relay.example.org', BASE]) {
        expect(await answer({ ...PRODUCTION, EDGESTR_ENV: envName }, `${origin}${path}`, headers), `${envName} ${origin}`).toEqual({ status: 421, json: ELSEWHERE });
      }
    }
  });

  it('serves its hostname, on any port and in any case', async () => {
    expect(await apiWithEnv(PRODUCTION, TEST_OWNER_SK, 'GET', '/api/agents', undefined, PUBLIC)).toMatchObject({ status: 200 });
    for (const origin of [PUBLIC, 'https://RELAY.example.org:8443', 'http://relay.example.org']) {
      expect(await answer(PRODUCTION, `${origin}/`, NIP11), origin).toMatchObject({ status: 200, json: { supported_nips: expect.any(Array) } });
      expect((await answer(PRODUCTION, `${origin}/r/${TEST_OWNER}`, UPGRADE)).status, origin).toBe(101);
    }
  });

  it('a malformed EDGESTR_PUBLIC_URL fails every request with the configuration error', async () => {
    for (const path of ['/health', '/api/agents', '/']) {
      expect(await answer({ EDGESTR_ENV: undefined, EDGESTR_PUBLIC_URL: 'relay.example.org' }, `https://relay.example.org${path}`, NIP11), path).toEqual({
        status: 500,
        json: { error: 'EDGESTR_PUBLIC_URL is not a URL; fix the deployment configuration' },
      });
    }
  });

  it('without EDGESTR_PUBLIC_URL, and in the local modes, the hostname is not compared (as before)', async () => {
    expect(await answer({ EDGESTR_ENV: undefined }, 'http://other.example/', NIP11)).toMatchObject({ status: 200 });
    // This run is test mode: BASE (http://relay.test) is served although EDGESTR_PUBLIC_URL names another host.
    expect(await answer({ EDGESTR_PUBLIC_URL: PUBLIC }, `${BASE}/`, NIP11)).toMatchObject({ status: 200 });
    expect(await apiWithEnv({ EDGESTR_PUBLIC_URL: PUBLIC }, TEST_OWNER_SK, 'GET', '/api/agents')).toMatchObject({ status: 200 });
    expect(await answer({ EDGESTR_ENV: 'development', EDGESTR_PUBLIC_URL: PUBLIC }, 'http://127.0.0.1:8787/', NIP11)).toMatchObject({ status: 200 });
  });
});

describe('development mode only on loopback hosts', () => {
  const DEV: EnvOverride = { EDGESTR_ENV: 'development' };

  it.each([
    ['health', '/health', {}],
    ['NIP-11', '/', NIP11],
    ['WebSocket upgrade', `/r/${TEST_OWNER}`, UPGRADE],
    ['management API', '/api/agents', {}],
  ])('403 JSON for a non-loopback host (%s)', async (_n, path, headers) => {
    expect(await answer(DEV, `http://relay.test${path}`, headers)).toEqual({ status: 403, json: DEV_REFUSAL });
    expect(await answer(DEV, `https://127.0.0.1.nip.io${path}`, headers)).toEqual({ status: 403, json: DEV_REFUSAL });
  });

  // (/health is not used here: in development it creates the demo agent, whose Durable Object
  // would still be starting when this file ends; api-trust.test.ts covers it.)
  it.each([['http://127.0.0.1:8787'], ['http://localhost:8787'], ['http://[::1]:8787']])('serves %s', async (origin) => {
    expect(await answer(DEV, `${origin}/`, NIP11)).toMatchObject({ status: 200, json: { supported_nips: expect.any(Array) } });
    expect((await answer(DEV, `${origin}/r/${keys().pk}/`, UPGRADE)).status).toBe(101);
  });
});

describe('test mode only on loopback and .test hosts', () => {
  // This run is EDGESTR_ENV=test (vitest.config.ts): free local payments (POST /api/bridge/pay).
  const TEST_REFUSAL = { error: 'test mode serves only loopback and .test hosts; unset EDGESTR_ENV' };

  it.each([
    ['NIP-11', '/', NIP11],
    ['WebSocket upgrade', `/r/${TEST_OWNER}`, UPGRADE],
    ['management API', '/api/agents', {}],
  ])('403 JSON for a host a deployment could have (%s)', async (_n, path, headers) => {
    for (const origin of ['https://edgestr.example.workers.dev', 'https://relay.example.org', 'https://127.0.0.1.nip.io', 'https://relay.test.example']) {
      expect(await answer({}, `${origin}${path}`, headers), origin).toEqual({ status: 403, json: TEST_REFUSAL });
    }
  });

  it('the local pay endpoint is refused on such a host before any invoice is looked up', async () => {
    const pay = (origin: string) =>
      fetchWithEnv({}, new Request(`${origin}/api/bridge/pay`, { method: 'POST', body: JSON.stringify({ invoice: localInvoice(TEST_OWNER, randomHex(16), 21) }) }));
    const refused = await pay('https://edgestr.example.workers.dev');
    expect({ status: refused.status, json: await refused.json() }).toEqual({ status: 403, json: TEST_REFUSAL });
    // On a .test host the request reaches the owner's bridge (which has set up no payments here).
    const served = await pay(BASE);
    expect({ status: served.status, json: await served.json() }).toEqual({ status: 503, json: { error: 'local payments are off' } });
  });

  it.each([['http://relay.test'], ['http://other.test:8787'], ['http://127.0.0.1:8787'], ['http://localhost:8787'], ['http://[::1]:8787']])('serves %s', async (origin) => {
    expect(await answer({}, `${origin}/`, NIP11)).toMatchObject({ status: 200, json: { supported_nips: expect.any(Array) } });
    expect((await answer({}, `${origin}/r/${keys().pk}/`, UPGRADE)).status).toBe(101);
  });

  it('outside development and test, any host is served', async () => {
    for (const env of [undefined, 'production']) {
      expect(await answer({ EDGESTR_ENV: env }, 'https://relay.example.org/', NIP11)).toMatchObject({ status: 200, json: { supported_nips: expect.any(Array) } });
    }
  });
});

describe('development and test mode refuse browser requests from other pages (Origin)', () => {
  // A web page the developer visits can open a WebSocket to the dev server (browsers apply no CORS
  // to WebSockets, and the Host header is loopback) or send it a "simple" POST (no preflight); its
  // Origin header names the page. Clients that are not browsers send none.
  const DEV: EnvOverride = { EDGESTR_ENV: 'development' };
  const LOOPBACK = 'http://127.0.0.1:8787';
  const devRefusal = (origin: string) => ({ error: `development mode accepts browser requests only from loopback pages (Origin ${origin})` });
  const testRefusal = (origin: string) => ({ error: `test mode accepts browser requests only from loopback and .test pages (Origin ${origin})` });
  const MCP_INIT = JSON.stringify({
    jsonrpc: '2.0',
    id: 1,
    method: 'initialize',
    params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'router-trust', version: '1' } },
  });

  /** The three requests a page would send: an upgrade of the public shard, an MCP POST, a local payment (text/plain: no preflight). */
  const requests = (base: string, origin?: string) => {
    const o: Record<string, string> = origin === undefined ? {} : { Origin: origin };
    return {
      upgrade: new Request(`${base}/`, { headers: { ...UPGRADE, ...o } }),
      mcp: new Request(`${base}/mcp`, {
        method: 'POST',
        headers: { 'Content-Type': 'application/json', Accept: 'application/json, text/event-stream', ...o },
        body: MCP_INIT,
      }),
      pay: new Request(`${base}/api/bridge/pay`, {
        method: 'POST',
        headers: { 'Content-Type': 'text/plain;charset=UTF-8', ...o },
        body: JSON.stringify({ invoice: localInvoice(TEST_OWNER, randomHex(16), 21) }),
      }),
    };
  };

  /** The answer, read before the execution context is waited on (/mcp streams its answer, then cleans up in waitUntil). */
  async function outcome(override: EnvOverride, request: Request) {
    const ctx = createExecutionContext();
    const res = await app.fetch(request, { ...env, ...override }, ctx);
    let result: { status: number; json: unknown };
    if (res.webSocket) {
      res.webSocket.accept();
      res.webSocket.close(1000, 'done');
      result = { status: res.status, json: '' };
    } else {
      const text = await res.text();
      const type = res.headers.get('Content-Type') ?? '';
      const json = type.includes('event-stream') ? (text.includes('"serverInfo"') ? 'an initialize result' : text) : type.includes('json') ? (JSON.parse(text) as unknown) : text;
      result = { status: res.status, json };
    }
    await waitOnExecutionContext(ctx);
    return result;
  }

  /** What each request gets when it is served (no payments are set up on TEST_OWNER's bridge). */
  const SERVED = {
    upgrade: { status: 101, json: '' },
    mcp: { status: 200, json: 'an initialize result' },
    pay: { status: 503, json: { error: 'local payments are off' } },
  };

  it.each([['https://evil.example'], ['http://evil.example:8787'], ['null'], ['http://127.0.0.1.nip.io'], ['http://localhost.evil.example'], ['http://relay.test'], ['chrome-extension://abcdef']])(
    'development mode: 403 for an upgrade, an /mcp POST and a local payment from a page at %s',
    async (origin) => {
      const r = requests(LOOPBACK, origin);
      for (const [name, request] of Object.entries(r)) expect(await outcome(DEV, request), name).toEqual({ status: 403, json: devRefusal(origin) });
    },
  );

  it.each([['http://127.0.0.1:8787'], ['http://localhost:3000'], ['http://[::1]:8787'], ['https://127.4.5.6'], [undefined]])(
    'development mode: a page at %s (or a client without Origin) is served',
    async (origin) => {
      const r = requests(LOOPBACK, origin);
      for (const [name, request] of Object.entries(r)) expect(await outcome(DEV, request), name).toEqual(SERVED[name as keyof typeof SERVED]);
    },
  );

  it('test mode: pages on .test hosts and loopback are served, others get 403', async () => {
    for (const origin of ['http://relay.test', 'http://other.test:8787', LOOPBACK, undefined]) {
      const r = requests(BASE, origin);
      for (const [name, request] of Object.entries(r)) expect(await outcome({}, request), `${name} ${origin}`).toEqual(SERVED[name as keyof typeof SERVED]);
    }
    for (const origin of ['https://evil.example', 'https://relay.test.example', 'null']) {
      const r = requests(BASE, origin);
      for (const [name, request] of Object.entries(r)) expect(await outcome({}, request), `${name} ${origin}`).toEqual({ status: 403, json: testRefusal(origin) });
    }
  });

  it('a preflight from another page gets the same 403, without CORS headers (the relay answers others with Access-Control-Allow-Origin: *)', async () => {
    // Without the guard, OPTIONS /mcp and /api/relay/import got the relay's 204 (NIP-11 CORS, any
    // header): Chromium then sent the POST, Authorization (NIP-98 signed with the demo key) included.
    for (const path of ['/mcp', '/api/relay/import']) {
      const preflight = (origin: string) =>
        fetchWithEnv(DEV, new Request(`${LOOPBACK}${path}`, { method: 'OPTIONS', headers: { Origin: origin, 'Access-Control-Request-Method': 'POST', 'Access-Control-Request-Headers': 'authorization, content-type' } }));
      const res = await preflight('https://evil.example');
      expect({ status: res.status, json: await res.json(), cors: res.headers.get('Access-Control-Allow-Origin') }, path).toEqual({ status: 403, json: devRefusal('https://evil.example'), cors: null });
      // The loopback page gets no CORS for them either: only the relay's own paths answer preflights.
      const own = await preflight(LOOPBACK);
      expect({ status: own.status, cors: own.headers.get('Access-Control-Allow-Origin') }, path).toEqual({ status: 404, cors: null });
    }
  });

  it('outside development and test, pages anywhere are served (public relays are used from any web page)', async () => {
    for (const env of [undefined, 'production']) {
      const r = requests('https://relay.example.org', 'https://evil.example');
      expect(await outcome({ EDGESTR_ENV: env }, r.upgrade), `${env}`).toEqual({ status: 101, json: '' });
      expect(await outcome({ EDGESTR_ENV: env }, r.mcp), `${env}`).toEqual({ status: 200, json: 'an initialize result' });
      // The local payment route does not exist there: the route's own 404, not the guard's 403.
      expect(await outcome({ EDGESTR_ENV: env }, r.pay), `${env}`).toEqual({ status: 404, json: { error: 'not found' } });
      const nip11 = await fetchWithEnv({ EDGESTR_ENV: env }, new Request('https://relay.example.org/', { headers: { ...NIP11, Origin: 'https://evil.example' } }));
      expect(nip11.status).toBe(200);
      expect(nip11.headers.get('Access-Control-Allow-Origin')).toBe('*');
      // Preflights: the relay's paths answer them (NIP-11); /api and /mcp do not.
      const preflight = (path: string) =>
        fetchWithEnv({ EDGESTR_ENV: env }, new Request(`https://relay.example.org${path}`, { method: 'OPTIONS', headers: { Origin: 'https://evil.example', 'Access-Control-Request-Method': 'POST', 'Access-Control-Request-Headers': 'authorization' } }));
      for (const path of ['/', `/r/${'a'.repeat(64)}`]) expect((await preflight(path)).headers.get('Access-Control-Allow-Origin'), path).toBe('*');
      for (const [path, status] of [['/api/relay/import', 404], ['/api/agents', 405], ['/mcp', 404]] as const) {
        const res = await preflight(path);
        expect({ status: res.status, cors: res.headers.get('Access-Control-Allow-Origin') }, path).toEqual({ status, cors: null });
      }
    }
  });
});
