// The router's trust rules: closed owner shards outside development (EDGESTR_OWNERS, unless
// EDGESTR_OPEN_SHARDS=true), `/r/<owner>/` (NDK's trailing slash) as the same shard, the NIP-42
// relay URL from EDGESTR_PUBLIC_URL, development mode only for loopback hosts, and test mode only
// for loopback and .test hosts.
// The test run sets EDGESTR_OPEN_SHARDS=true (tests use random owners' shards); the closed
// behaviour is tested through the Worker's fetch with that variable removed.
import { SELF } from 'cloudflare:test';
import { describe, expect, it } from 'vitest';
import { npubEncode } from 'nostr-tools/nip19';
import { fetchWithEnv, type EnvOverride } from './app-env.js';
import { BASE, connect, freshOwner, keys, randomHex, sign, TestSocket } from './helpers.js';
import { localInvoice } from '../../workers/bridge/payments-local.js';
import { TEST_OWNER } from './test-keys.js';

const CLOSED: EnvOverride = { EDGESTR_OPEN_SHARDS: undefined };
const NIP11 = { Accept: 'application/nostr+json' };
const UPGRADE = { Upgrade: 'websocket' };
const noShard = (hex: string) => ({ error: `no relay shard for ${hex} on this deployment (shards exist only for owners in EDGESTR_OWNERS)` });
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
