import { createServer, type Server } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { generateSecretKey } from 'nostr-tools/pure';
import { MemoryReplayGuard, verifyHttpAuth } from '../shared/nip98.js';
import { nobleVerifier } from '../shared/verify.js';
import { deploymentUrl, HTTP_TIMEOUT_MS, httpBase, MAX_RESPONSE_BYTES, nip98Header, relayInfo, requestJson, wsUrl } from './http.js';
import { AgentListSchema } from './schemas.js';
import { keyPair, parseSecretKey } from './keys.js';
import { nsecEncode } from 'nostr-tools/nip19';

const key = keyPair(generateSecretKey());
const URL_ = 'http://127.0.0.1:8787/api/agents';

describe('nip98Header', () => {
  it('two identical calls in the same second are distinct events, both accepted once (random nonce)', () => {
    const now = Math.floor(Date.now() / 1000);
    const replay = new MemoryReplayGuard({ clock: () => now });
    const a = nip98Header(key, URL_, 'GET');
    const b = nip98Header(key, URL_, 'GET');
    expect(a).not.toBe(b);
    const check = (h: string) => verifyHttpAuth({ authorization: h, url: URL_, method: 'GET' }, { verifier: nobleVerifier, now, replay });
    expect(check(a)).toMatchObject({ ok: true, value: { pubkey: key.pk } });
    expect(check(b)).toMatchObject({ ok: true, value: { pubkey: key.pk } });
    expect(check(a)).toMatchObject({ ok: false, error: { status: 401 } });
  });

  it('signs the body: a different body is refused', () => {
    const now = Math.floor(Date.now() / 1000);
    const h = nip98Header(key, URL_, 'POST', '{"name":"a"}');
    const r = verifyHttpAuth({ authorization: h, url: URL_, method: 'POST', body: '{"name":"b"}' }, { verifier: nobleVerifier, now, replay: new MemoryReplayGuard({ clock: () => now }) });
    expect(r.ok).toBe(false);
  });
});

describe('deployment URLs and keys', () => {
  it('http and ws forms of a deployment URL', () => {
    expect(httpBase('ws://h:1/')).toBe('http://h:1');
    expect(httpBase('https://h/')).toBe('https://h');
    expect(wsUrl('https://h', '/r/abc')).toBe('wss://h/r/abc');
    expect(wsUrl('http://127.0.0.1:8787/', '/')).toBe('ws://127.0.0.1:8787/');
  });

  it('secret keys as nsec or hex; anything else is refused', () => {
    const hex = Buffer.from(key.sk).toString('hex');
    expect(parseSecretKey(` ${hex.toUpperCase()}\n`)).toEqual({ ok: true, value: key.sk });
    expect(parseSecretKey(nsecEncode(key.sk))).toEqual({ ok: true, value: key.sk });
    for (const bad of ['', 'nsec1xyz', hex.slice(2), 'npub1abc']) {
      expect(parseSecretKey(bad)).toEqual({ ok: false, error: 'not a secret key (expected an nsec or 64 hex characters)' });
    }
  });
});

describe('answers are read within a size and a time bound', () => {
  let server: Server;
  let base: string;
  beforeAll(async () => {
    const chunk = Buffer.alloc(64 * 1024, 0x20);
    server = createServer((req, res) => {
      if (req.url === '/endless') {
        res.writeHead(200, { 'content-type': 'application/json' });
        const pump = (): void => {
          while (!res.destroyed && res.write(chunk));
          if (!res.destroyed) res.once('drain', pump);
        };
        pump();
      } else if (req.url === '/declared') {
        res.writeHead(200, { 'content-type': 'application/json', 'content-length': String(MAX_RESPONSE_BYTES + 1) });
        res.write('{');
      } else if (req.url === '/stalled') {
        res.writeHead(200, { 'content-type': 'application/json' });
        res.write('{"ok":');
      } else if (req.url === '/fine') {
        res.writeHead(200, { 'content-type': 'application/json' }).end('{"ok":true}');
      } else if (req.url === '/portal') {
        res.writeHead(200, { 'content-type': 'text/html; charset=utf-8' }).end('<html>sign in</html>');
      } else if (req.url === '/bad-issues') {
        res.writeHead(422, { 'content-type': 'application/json' }).end('{"error":"invalid agent","issues":[null]}');
      } // anything else: never answered
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', () => resolve()));
    base = `http://127.0.0.1:${(server.address() as { port: number }).port}`;
  });
  afterAll(async () => {
    server.closeAllConnections();
    await new Promise((resolve) => server.close(resolve));
  });

  it('a body that never ends is dropped past MAX_RESPONSE_BYTES; a declared length past it is not read at all', async () => {
    const started = Date.now();
    expect(await requestJson(base, 'GET', '/endless')).toEqual({
      ok: false,
      error: { status: 0, message: `the answer of ${base} to GET /endless is over ${MAX_RESPONSE_BYTES} bytes, this client's limit` },
    });
    expect(Date.now() - started).toBeLessThan(HTTP_TIMEOUT_MS);
    expect(await requestJson(base, 'GET', '/declared')).toEqual({
      ok: false,
      error: { status: 0, message: `the answer of ${base} to GET /declared is over ${MAX_RESPONSE_BYTES} bytes, this client's limit` },
    });
  });

  it('an answer that never comes, or never ends, fails at the timeout', async () => {
    for (const path of ['/silent', '/stalled']) {
      const started = Date.now();
      expect(await requestJson(base, 'GET', path, { timeoutMs: 300 })).toEqual({
        ok: false,
        error: { status: 0, message: `no whole answer from ${base} to GET ${path} within 0.3 s` },
      });
      expect(Date.now() - started).toBeLessThan(2_000);
    }
    expect(await requestJson(base, 'GET', '/fine', { timeoutMs: 300 })).toEqual({ ok: true, value: { ok: true } });
  });

  it('a 200 page is not JSON; JSON is read as the shape asked for; malformed error issues are not a TypeError', async () => {
    expect(await requestJson(base, 'GET', '/portal')).toEqual({ ok: false, error: { status: 0, message: `${base} answered GET /portal with text/html, not the edgestr API: is --url right?` } });
    expect(await requestJson(base, 'GET', '/fine', { shape: AgentListSchema })).toEqual({
      ok: false,
      error: { status: 0, message: `${base} answered GET /fine with JSON of another shape (agents: Invalid input: expected array, received undefined), not the edgestr API: is --url right?` },
    });
    expect(await requestJson(base, 'POST', '/bad-issues')).toEqual({ ok: false, error: { status: 422, message: 'HTTP 422', body: { error: 'invalid agent', issues: [null] } } });
  });
});

describe('URLs that are not a deployment, answers that are not the API', () => {
  it('deploymentUrl: http(s) and ws(s) with a host, nothing else', () => {
    for (const good of ['http://h', 'https://h:8443/', 'ws://127.0.0.1:8787', 'WSS://H/r/x']) expect(deploymentUrl(good), good).toBeInstanceOf(URL);
    for (const bad of ['edgestr.example.com', 'localhost:8787', 'ftp://h/', 'http://u:p@h/', 'https://h/?q', 'https://h/#f', 'https://', '']) expect(deploymentUrl(bad), bad).toBeUndefined();
  });

  it('requestJson and relayInfo of a string that is not a URL fail as values (they threw TypeError: Invalid URL)', async () => {
    expect(await requestJson('edgestr.example.com', 'GET', '/api/agents')).toEqual({ ok: false, error: { status: 0, message: 'edgestr.example.com is not a deployment URL: use https://host or wss://host' } });
    expect(await relayInfo('notaurl')).toEqual({ ok: false, error: { status: 0, message: 'notaurl is not a relay URL: use wss://host or https://host' } });
  });
});
