// Which DVMCP server a name leads to (tools.ts): anyone may announce a server on the public shard,
// under any id and name, so the servers of this deployment's bridges (named by the public shard's
// NIP-11 `bridge_providers`) are read first and win a name other keys claim too; a name that
// servers of several providers claim, none of them (or several) this deployment's, is refused.
// listTools against a fake relay serving NIP-11 and signed announcements, and against a relay that
// sends a frame past the client's limit.
import type { IncomingMessage, ServerResponse } from 'node:http';
import { createServer } from 'node:http';
import { afterEach, describe, expect, it } from 'vitest';
import { WebSocketServer } from 'ws';
import { generateSecretKey, getPublicKey } from 'nostr-tools/pure';
import { fakeRelay, type FakeRelay } from '../../test/helpers-node/fake-relay.js';
import { ann, bridge, bridgePk, stranger, strangerPk, T } from '../../test/helpers-node/contested-servers.js';
import { buildCatalog } from '../shared/dvmcp-discovery.js';
import type { NostrEvent } from '../shared/event.js';
import { findServer, listTools, lookupServer } from './tools.js';
import { MAX_FRAME_BYTES } from './relay.js';


/** The bridge's `weather` and a stranger's newer `zz` that calls itself weather. */
const contested = (): NostrEvent[] => [ann(bridge, 'weather', T), ann(stranger, 'zz', T + 1, { name: 'weather' })];
/** 100 newer announcements of the stranger (the catalog keeps 100 servers). */
const flood = (): NostrEvent[] => Array.from({ length: 100 }, (_, n) => ann(stranger, `s${n}`, T + 10 + n));

describe('lookupServer / findServer', () => {
  it("a name a stranger's newer server also claims goes to this deployment's bridge", () => {
    const catalog = buildCatalog(contested(), {}, new Set([bridgePk]));
    expect(lookupServer(catalog, 'weather')).toMatchObject({ ok: true, value: { provider: bridgePk, id: 'weather', preferred: true } });
    expect(findServer(catalog, 'weather')).toMatchObject({ provider: bridgePk, id: 'weather' });
    // The same when the stranger takes the id itself.
    const sameId = buildCatalog([ann(bridge, 'weather', T), ann(stranger, 'weather', T + 1)], {}, new Set([bridgePk]));
    expect(lookupServer(sameId, 'weather')).toMatchObject({ ok: true, value: { provider: bridgePk } });
  });

  it('without a preferred provider the name is refused as ambiguous, naming every candidate as <provider>:<id>', () => {
    const catalog = buildCatalog(contested());
    expect(lookupServer(catalog, 'weather')).toEqual({
      ok: false,
      error: {
        reason: 'ambiguous',
        message: `weather names DVMCP servers of 2 providers, none of them this deployment's bridge; name one as <provider>:<id>: ${strangerPk}:zz, ${bridgePk}:weather`,
      },
    });
    expect(findServer(catalog, 'weather')).toBeUndefined();
  });

  it('two bridges of this deployment claiming the name: refused too', () => {
    const other = generateSecretKey();
    const catalog = buildCatalog([ann(bridge, 'weather', T), ann(other, 'weather', T + 1)], {}, new Set([bridgePk, getPublicKey(other)]));
    expect(lookupServer(catalog, 'weather')).toMatchObject({
      ok: false,
      error: { reason: 'ambiguous', message: expect.stringMatching(/^weather names DVMCP servers of 2 providers, 2 of them this deployment's bridges; name one as <provider>:<id>: /) as unknown },
    });
  });

  it('<provider>:<id> picks exactly that server, a stranger’s too; one provider’s own servers: its id before a name; unknown names', () => {
    const catalog = buildCatalog(contested(), {}, new Set([bridgePk]));
    expect(lookupServer(catalog, `${strangerPk}:zz`)).toMatchObject({ ok: true, value: { provider: strangerPk, id: 'zz' } });
    expect(lookupServer(catalog, 'zz')).toMatchObject({ ok: true, value: { provider: strangerPk, id: 'zz' } });
    const own = buildCatalog([ann(stranger, 'a', T + 2, { name: 'b' }), ann(stranger, 'b', T)]);
    expect(lookupServer(own, 'b')).toMatchObject({ ok: true, value: { id: 'b' } });
    expect(lookupServer(catalog, 'nothing')).toEqual({ ok: false, error: { reason: 'unknown', message: 'no DVMCP server nothing is announced' } });
    expect(lookupServer(catalog, `${strangerPk}:weather`)).toMatchObject({ ok: false, error: { reason: 'unknown' } });
  });

  it("100 newer announcements of a stranger do not push this deployment's bridge out", () => {
    const events = [ann(bridge, 'weather', T), ...flood()];
    expect(buildCatalog(events).servers.some((s) => s.provider === bridgePk)).toBe(false);
    const catalog = buildCatalog(events, {}, new Set([bridgePk]));
    expect(catalog.servers).toHaveLength(100);
    expect(lookupServer(catalog, 'weather')).toMatchObject({ ok: true, value: { provider: bridgePk, preferred: true } });
  });
});

describe('listTools', () => {
  let relay: FakeRelay | undefined;
  afterEach(async () => {
    await relay?.close();
    relay = undefined;
  });

  /** NIP-11 of the public shard with `doc`, anything else 404. */
  const nip11 =
    (doc: unknown) =>
    (req: IncomingMessage, res: ServerResponse): void => {
      if (req.url === '/' && req.headers.accept === 'application/nostr+json') res.writeHead(200, { 'content-type': 'application/nostr+json' }).end(JSON.stringify(doc));
      else res.writeHead(404).end();
    };

  it("reads this deployment's bridges from the public shard's NIP-11 (bridge_providers) and lists their servers first", async () => {
    relay = await fakeRelay({ onHttp: nip11({ name: 'edgestr public shard', bridge_providers: [bridgePk, 'not a key'] }) });
    relay.stored.push(ann(bridge, 'weather', T), ann(stranger, 'zz', T + 1, { name: 'weather' }), ...flood());
    const catalog = await listTools(relay.url);
    if (!catalog.ok) throw new Error(catalog.error);
    expect(catalog.value.servers[0]).toMatchObject({ provider: bridgePk, id: 'weather', preferred: true });
    expect(lookupServer(catalog.value, 'weather')).toMatchObject({ ok: true, value: { provider: bridgePk } });
  });

  it('a relay whose NIP-11 names no bridges: no server is preferred, so a contested name is refused', async () => {
    relay = await fakeRelay({ onHttp: nip11({ name: 'some relay' }) });
    relay.stored.push(...contested());
    const catalog = await listTools(relay.url);
    if (!catalog.ok) throw new Error(catalog.error);
    expect(catalog.value.servers.map((s) => s.preferred)).toEqual([undefined, undefined]);
    expect(lookupServer(catalog.value, 'weather')).toMatchObject({ ok: false, error: { reason: 'ambiguous' } });
  });

  it('no NIP-11 document: an error naming it', async () => {
    relay = await fakeRelay();
    const port = new URL(relay.url).port;
    expect(await listTools(relay.url)).toEqual({ ok: false, error: `cannot read this deployment's bridges from the NIP-11 document of ws://127.0.0.1:${port}/: HTTP 404` });
  });

  it("a frame past the client's limit ends the discovery at once with the reason", async () => {
    const http = createServer(nip11({ bridge_providers: [] }));
    const wss = new WebSocketServer({ server: http });
    wss.on('connection', (socket) => socket.on('message', () => socket.send(`["NOTICE","${'x'.repeat(MAX_FRAME_BYTES)}"]`)));
    await new Promise<void>((resolve) => http.listen(0, '127.0.0.1', () => resolve()));
    const port = (http.address() as { port: number }).port;
    try {
      const started = Date.now();
      expect(await listTools(`http://127.0.0.1:${port}`)).toEqual({
        ok: false,
        error: `discovery on ws://127.0.0.1:${port}/ failed: connection closed (1009 a message over ${MAX_FRAME_BYTES} bytes, this client's limit)`,
      });
      expect(Date.now() - started).toBeLessThan(4_000);
    } finally {
      for (const c of wss.clients) c.terminate();
      wss.close();
      http.closeAllConnections();
      await new Promise((resolve) => http.close(resolve));
    }
  });
});
