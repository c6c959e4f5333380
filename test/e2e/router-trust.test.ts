// The router's trust rules under real `wrangler dev`: closed owner shards on a deployment that is
// not in development (the "agents" instance: EDGESTR_ENV=test, EDGESTR_OWNERS = the e2e owner),
// NDK's trailing slash, and the development instance refusing a non-loopback Host and browser
// requests from pages elsewhere (Origin).
import { request } from 'node:http';
import { describe, expect, inject, it } from 'vitest';
import WebSocket from 'ws';
import { generateSecretKey, getPublicKey } from 'nostr-tools/pure';
import { E2E_OWNER } from './e2e-keys.js';

const NIP11 = { Accept: 'application/nostr+json' };

/** A GET with an explicit Host header (fetch does not let a caller set one). */
function getWithHost(url: string, host: string): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = request(url, { headers: { Host: host, ...NIP11 } }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (c: string) => (body += c));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
    });
    req.on('error', reject);
    req.end();
  });
}

describe('closed shards (not development)', () => {
  const base = inject('agentHttpUrl');

  it('404 JSON for a key that is not an owner; the owner’s shard answers, with or without a trailing slash', async () => {
    const stranger = getPublicKey(generateSecretKey());
    const refused = await fetch(`${base}/r/${stranger}`, { headers: NIP11 });
    expect(refused.status).toBe(404);
    expect(await refused.json()).toEqual({
      error: `no relay shard for ${stranger} on this deployment: shards exist only for its owners and this key is not one; ask the operators to add it`,
    });
    for (const path of [`/r/${E2E_OWNER}`, `/r/${E2E_OWNER}/`]) {
      const doc = await fetch(`${base}${path}`, { headers: NIP11 });
      expect(doc.status, path).toBe(200);
      expect(((await doc.json()) as { pubkey: string }).pubkey, path).toBe(E2E_OWNER);
    }
  });
});

describe('development mode only on loopback', () => {
  const base = inject('httpUrl');

  it('refuses a request whose Host is not loopback, serves 127.0.0.1', async () => {
    const port = new URL(base).port;
    expect(await getWithHost(`${base}/`, `relay.example.org:${port}`)).toEqual({
      status: 403,
      body: JSON.stringify({ error: 'development mode serves only loopback hosts; unset EDGESTR_ENV' }),
    });
    expect((await getWithHost(`${base}/`, `127.0.0.1:${port}`)).status).toBe(200);
  });
});

describe('development mode only for loopback pages (Origin)', () => {
  const base = inject('httpUrl');
  const refusal = (origin: string) => ({ error: `development mode accepts browser requests only from loopback pages (Origin ${origin})` });

  /** The HTTP status of a WebSocket handshake with `origin` (101 when it opens). */
  const upgrade = (origin?: string) =>
    new Promise<{ status: number; body: string }>((resolve, reject) => {
      const ws = new WebSocket(`${base.replace(/^http/, 'ws')}/`, origin === undefined ? {} : { origin });
      ws.once('open', () => {
        ws.close();
        resolve({ status: 101, body: '' });
      });
      ws.once('unexpected-response', (_req, res) => {
        let body = '';
        res.setEncoding('utf8');
        res.on('data', (c: string) => (body += c));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
      });
      ws.once('error', reject);
    });

  /** A "simple" cross-site POST (text/plain: no preflight) to the local payment route. */
  const pay = async (origin?: string) => {
    const res = await fetch(`${base}/api/bridge/pay`, {
      method: 'POST',
      headers: { 'Content-Type': 'text/plain;charset=UTF-8', ...(origin === undefined ? {} : { Origin: origin }) },
      body: JSON.stringify({ invoice: 'lnbc1' }),
    });
    return { status: res.status, json: (await res.json()) as unknown };
  };

  it('a page elsewhere gets 403 for a WebSocket and a local payment; a loopback page and a client without Origin are served', async () => {
    expect(await upgrade('https://evil.example')).toEqual({ status: 403, body: JSON.stringify(refusal('https://evil.example')) });
    expect(await pay('https://evil.example')).toEqual({ status: 403, json: refusal('https://evil.example') });
    for (const origin of [base, 'http://localhost:5173', undefined]) {
      expect((await upgrade(origin)).status, `${origin}`).toBe(101);
      // Served: the route itself answers (the invoice is not a local one).
      expect((await pay(origin)).status, `${origin}`).toBe(422);
    }
  });
});
