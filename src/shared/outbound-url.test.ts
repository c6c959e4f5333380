// The outbound policy's rule against loops (src/shared/outbound-url.ts): a dial for an owner never
// goes to the deployment's own host (EDGESTR_PUBLIC_URL's, and the origins the dialler knows): in
// production its hostname on any port, in the local modes (development, test) that host and port
// only, whatever EDGESTR_OUTBOUND_ALLOW lists; the deployment's own configuration dials are not
// concerned. safeFetch refuses such a URL first and as a redirect hop (a real local server).
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { checkOutboundUrl, outboundPolicy, outboundRefusal, safeFetch, type OutboundKind, type OutboundPolicy } from './outbound-url.js';

const OWN = (host: string): string => `${host} is this deployment's own host (a loop)`;
const PUBLIC = { EDGESTR_PUBLIC_URL: 'https://relay.example.org' };

describe("the deployment's own host is never dialled for an owner", () => {
  const production = outboundPolicy(PUBLIC, { vetted: true });
  // The management API also names the host the request came in on (here its workers.dev name).
  const seenAt = outboundPolicy(PUBLIC, { vetted: false, origins: ['https://edgestr.acct.workers.dev'] });
  const listed = outboundPolicy({ ...PUBLIC, EDGESTR_OUTBOUND_ALLOW: 'relay.example.org, 127.0.0.1' }, { vetted: true });
  const development = outboundPolicy({ EDGESTR_ENV: 'development' }, { vetted: true, origins: ['http://127.0.0.1:8787'] });
  const test = outboundPolicy({ EDGESTR_ENV: 'test', EDGESTR_OUTBOUND_ALLOW: '127.0.0.1:*' }, { vetted: true, origins: ['http://127.0.0.1:8787'] });
  // A bare host in EDGESTR_OUTBOUND_ALLOW is its scheme's default port only.
  const bare = outboundPolicy({ EDGESTR_ENV: 'test', EDGESTR_OUTBOUND_ALLOW: '127.0.0.1' }, { vetted: true, origins: ['http://127.0.0.1:8787'] });

  it.each<[string, OutboundKind, OutboundPolicy, string | undefined]>([
    // Production: the hostname, on any port, for HTTP and relays, in any spelling the URL parser normalises.
    ['https://relay.example.org/mcp', 'http', production, OWN('relay.example.org')],
    ['https://relay.example.org:8443/mcp', 'http', production, OWN('relay.example.org:8443')],
    ['http://relay.example.org/r/abc', 'http', production, OWN('relay.example.org')],
    ['wss://relay.example.org:444/', 'relay', production, OWN('relay.example.org:444')],
    ['https://RELAY.Example.org./api/agents', 'http', production, OWN('relay.example.org.')],
    ['https://edgestr.acct.workers.dev/mcp', 'http', seenAt, OWN('edgestr.acct.workers.dev')],
    ['https://relay.example.org/mcp', 'http', seenAt, OWN('relay.example.org')],
    // Other hosts are unaffected.
    ['https://api.example.org/mcp', 'http', production, undefined],
    ['https://mcp.relay.example.org/mcp', 'http', production, undefined],
    ['https://edgestr.acct.workers.dev/mcp', 'http', production, undefined],
    // EDGESTR_OUTBOUND_ALLOW does not make a loop allowed.
    ['https://relay.example.org/mcp', 'http', listed, OWN('relay.example.org')],
    ['http://relay.example.org:8080/mcp', 'http', listed, OWN('relay.example.org:8080')],
    // Local modes: the same host and port only (local servers on other ports keep working).
    ['http://127.0.0.1:8787/mcp', 'http', development, OWN('127.0.0.1:8787')],
    ['ws://127.0.0.1:8787/', 'relay', development, OWN('127.0.0.1:8787')],
    ['http://2130706433:8787/mcp', 'http', development, OWN('127.0.0.1:8787')],
    ['http://127.0.0.1:9000/mcp', 'http', development, undefined],
    ['http://127.0.0.1/mcp', 'http', development, undefined],
    ['http://127.0.0.1:8787/mcp', 'http', test, OWN('127.0.0.1:8787')],
    ['http://127.0.0.1:9000/mcp', 'http', test, undefined],
    ['http://127.0.0.1:8787/mcp', 'http', bare, OWN('127.0.0.1:8787')],
    ['http://127.0.0.1/mcp', 'http', bare, undefined],
    ['https://127.0.0.1/mcp', 'http', bare, undefined],
    ['http://127.0.0.1:9000/mcp', 'http', bare, 'EDGESTR_OUTBOUND_ALLOW lists 127.0.0.1 on its default port only, not 9000'],
    ['https://127.0.0.1:80/mcp', 'http', bare, 'EDGESTR_OUTBOUND_ALLOW lists 127.0.0.1 on its default port only, not 80'],
    // The scheme and credential rules speak first.
    ['ftp://relay.example.org/', 'http', production, 'only http and https URLs are allowed'],
  ])('%s (%s)', (raw, kind, policy, refusal) => {
    expect(outboundRefusal(new URL(raw), kind, policy)).toBe(refusal);
  });

  it('is answered "refused: <reason>" by checkOutboundUrl', () => {
    expect(checkOutboundUrl('https://relay.example.org/mcp', 'http', production)).toEqual({ ok: false, error: `refused: ${OWN('relay.example.org')}` });
  });

  it("does not concern the deployment's own configuration (no dialler), nor a deployment with no known origin", () => {
    const lightning = new URL('https://relay.example.org/.well-known/lnurlp/operator');
    expect(outboundRefusal(lightning, 'http', outboundPolicy(PUBLIC))).toBeUndefined();
    expect(outboundRefusal(lightning, 'http', outboundPolicy({}, { vetted: true }))).toBeUndefined();
  });

  it('ignores an EDGESTR_PUBLIC_URL or origin that is not a URL', () => {
    const policy = outboundPolicy({ EDGESTR_PUBLIC_URL: 'relay.example.org' }, { vetted: true, origins: ['not a url', 'https://own.example'] });
    expect(outboundRefusal(new URL('https://relay.example.org/'), 'http', policy)).toBeUndefined();
    expect(outboundRefusal(new URL('https://own.example/'), 'http', policy)).toBe(OWN('own.example'));
  });
});

describe("safeFetch and the deployment's own host", () => {
  let server: Server;
  let base: string;
  let own: string;
  beforeAll(async () => {
    // Stands in for the deployment (own) and for a server elsewhere that redirects to it.
    server = createServer((req, res) => {
      const to = new URL(req.url ?? '/', 'http://x').searchParams.get('to');
      if (to !== null) res.writeHead(302, { location: to }).end();
      else res.writeHead(200, { 'content-type': 'text/plain' }).end('reached');
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    own = 'http://127.0.0.1:1';
  });
  afterAll(() => new Promise<void>((r) => server.close(() => r())));

  it('refuses the own host as the first URL and as a redirect hop', async () => {
    const policy = outboundPolicy({ EDGESTR_ENV: 'development' }, { vetted: true, origins: [own] });
    expect(await safeFetch(`${own}/mcp`, {}, policy)).toEqual({ ok: false, error: `refused: ${OWN('127.0.0.1:1')}` });
    expect(await safeFetch(`${base}/?to=${encodeURIComponent(`${own}/mcp`)}`, {}, policy)).toEqual({ ok: false, error: `redirect refused: ${OWN('127.0.0.1:1')}` });
    const fetched = await safeFetch(`${base}/?to=${encodeURIComponent(`${base}/text`)}`, {}, policy);
    expect(fetched.ok && (await fetched.value.response.text())).toBe('reached');
  });
});
