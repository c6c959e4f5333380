// What answers at --url may not be edgestr at all: a captive portal or a proxy answering every
// request with a 200 HTML page, another service answering JSON of other shapes, a 404 page. Each
// command that reads the management API, /health or NIP-11 ends with exit 5 and one line saying so
// (never a TypeError, never the page printed as fields, never an attestation signed for a key that
// is not one), and an error page is quoted only as a short excerpt, escaped.
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { generateSecretKey } from 'nostr-tools/pure';
import { runCli } from '../../test/helpers-node/run-cli.js';
import { bytesToHex } from '../shared/hex.js';

const KEY = { EDGESTR_KEY: bytesToHex(generateSecretKey()) };
const AGENT = 'ab'.repeat(32);
const PORTAL = '<!DOCTYPE html><html><head><title>Sign in to Airport Wi-Fi</title></head><body>Accept the terms</body></html>';
/** A 404 page of 100 kB with escape sequences (window title, clear screen) near its start. */
const PAGE_404 = `<!DOCTYPE html>\n<html>\n  <head><title>404 \x1b]0;pwned\x07Not Found\x1b[2J</title></head>\n  <body>${'lost '.repeat(20_000)}</body>\n</html>\n`;

/** JSON answers of another service, by method and path. */
function otherJson(req: IncomingMessage): unknown {
  if (req.url === '/health') return { status: 'up' };
  if (req.url === '/') return [1, 2, 3];
  if (req.url === '/api/agents' && req.method === 'GET') return { agents: 'none' };
  if (req.url === '/api/agents' && req.method === 'POST') return { pubkey: 'not-a-key', npub: 'npub1x', owner: 'me', relays: [] };
  if (req.method === 'DELETE') return { ok: true };
  return 'just a string';
}

let mode: 'portal' | 'json' | '404' = 'portal';
const seen: string[] = [];
let server: Server;
let base = '';
beforeAll(async () => {
  server = createServer((req: IncomingMessage, res: ServerResponse) => {
    seen.push(`${req.method} ${req.url}`);
    if (mode === 'portal') res.writeHead(200, { 'content-type': 'text/html; charset=utf-8' }).end(PORTAL);
    else if (mode === '404') res.writeHead(404, { 'content-type': 'text/html' }).end(PAGE_404);
    else res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(otherJson(req)));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', () => resolve()));
  base = `http://127.0.0.1:${(server.address() as { port: number }).port}`;
});
afterAll(() => new Promise((resolve) => server.close(resolve)));
beforeEach(() => void seen.splice(0));

const run = (argv: string[]) => runCli([...argv, '--url', base], KEY);
const notApi = (request: string, what: string) => ({ code: 5, stdout: '', stderr: `edgestr: ${base} answered ${request} with ${what}, not the edgestr API: is --url right?\n` });

describe('a 200 HTML page (a captive portal) for everything', () => {
  beforeEach(() => void (mode = 'portal'));

  it('agent list, list --json, observe, show, update, delete, create: exit 5 naming the request and what came', async () => {
    expect(await run(['agent', 'list'])).toEqual(notApi('GET /api/agents', 'text/html'));
    expect(await run(['agent', 'list', '--json'])).toEqual(notApi('GET /api/agents', 'text/html'));
    expect(await run(['observe'])).toEqual(notApi('GET /api/agents', 'text/html'));
    expect(await run(['agent', 'show', AGENT])).toEqual(notApi(`GET /api/agents/${AGENT}`, 'text/html'));
    expect(await run(['agent', 'update', AGENT, '--name', 'x'])).toEqual(notApi(`PATCH /api/agents/${AGENT}`, 'text/html'));
    expect(await run(['agent', 'delete', AGENT])).toEqual(notApi(`DELETE /api/agents/${AGENT}`, 'text/html'));
    expect(await run(['agent', 'create', '--name', 'x'])).toEqual(notApi('POST /api/agents', 'text/html'));
  });

  it('ask demo (/health), relay info and tools (NIP-11): exit 5 with the reason', async () => {
    expect(await run(['ask', 'demo', 'hi'])).toEqual(notApi('GET /health', 'text/html'));
    expect(await run(['relay', 'info'])).toEqual({ code: 5, stdout: '', stderr: `edgestr: ${base} answered GET / with text/html, not a NIP-11 document\n` });
    const ws = `${base.replace(/^http/, 'ws')}/`;
    expect(await run(['tools'])).toEqual({ code: 5, stdout: '', stderr: `edgestr: cannot read this deployment's bridges from the NIP-11 document of ${ws}: ${base} answered GET / with text/html, not a NIP-11 document\n` });
  });
});

describe('JSON of other shapes', () => {
  beforeEach(() => void (mode = 'json'));
  const shape = (request: string, issue: string) => notApi(request, `JSON of another shape (${issue})`);

  it('agent list, show, delete: exit 5 naming what does not fit', async () => {
    expect(await run(['agent', 'list'])).toEqual(shape('GET /api/agents', 'agents: Invalid input: expected array, received string'));
    expect(await run(['agent', 'show', AGENT])).toEqual(shape(`GET /api/agents/${AGENT}`, 'Invalid input: expected object, received string'));
    expect(await run(['agent', 'delete', AGENT])).toEqual(shape(`DELETE /api/agents/${AGENT}`, 'revoked: Invalid input: expected string, received undefined'));
  });

  it('agent create with a pubkey that is not a key: exit 5, and no attestation signed or sent', async () => {
    expect(await run(['agent', 'create', '--name', 'x'])).toEqual(shape('POST /api/agents', 'pubkey: not 64 lowercase hex'));
    expect(seen).toEqual(['POST /api/agents']);
  });

  it('/health and a NIP-11 document that is not an object', async () => {
    expect(await run(['ask', 'demo', 'hi'])).toEqual(shape('GET /health', 'ok: Invalid input: expected boolean, received undefined'));
    expect(await run(['relay', 'info'])).toEqual({ code: 5, stdout: '', stderr: `edgestr: ${base} answered GET / with JSON of another shape (Invalid input: expected record, received array), not a NIP-11 document\n` });
  });
});

describe('an HTML error page', () => {
  beforeEach(() => void (mode = '404'));

  it('is quoted as its first 120 characters on one line, escaped, not whole', async () => {
    const r = await run(['agent', 'list']);
    const excerpt = String.raw`<!DOCTYPE html> <html> <head><title>404 \u001b]0;pwned\u0007Not Found\u001b[2J</title></head> <body>lost lost lost lost lost lost lost …`;
    expect(r).toEqual({ code: 5, stdout: '', stderr: `edgestr: ${base} answered GET /api/agents with HTTP 404 text/html, not the edgestr API: is --url right? It said: "${excerpt}"\n` });
  });
});
