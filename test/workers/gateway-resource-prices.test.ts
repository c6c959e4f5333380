// /mcp reading a priced resource of a real bridge (server-everything, `architecture.md` priced 13
// sats by its name) under another spelling of its uri: the gateway passes any uri under a server's
// prefix on to the bridge, and upstream (the MCP SDK) reads `new URL(uri).toString()`, so the
// scheme in capitals or a ./ segment reached the priced resource without an invoice, with no key
// at all. Now the bridge prices the uri as upstream will read it (src/shared/dvmcp.ts canonicalUri):
// every spelling gets the exact one's -32603 "payment required: 13 sats …". Its own file: the
// gateway caches the catalog per isolate.
import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { KIND } from '../../src/shared/kinds.js';
import { announcements, bridgeReady, directBridge, everythingUrl } from './bridge-helpers.js';
import { randomHex } from './helpers.js';
import { gatewayClient } from './mcp-gateway-helpers.js';

const id = `gwprice${randomHex(3)}`;
let client: Client;

beforeAll(async () => {
  const { provider } = await directBridge([{ id, url: everythingUrl(), public: true, prices: { 'architecture.md': { price: '13', unit: 'sats' } } }]);
  await bridgeReady(provider);
  await announcements(provider, [KIND.DVMCP_RESOURCES], (es) => es.filter((e) => e.tags.some((t) => t[0] === 's' && t[1] === id)).length === 2);
  client = await gatewayClient('gateway-resource-prices');
});

afterAll(() => client.close());

/** The error /mcp answers a read of `uri` with (undefined when it is read). */
const readError = (uri: string): Promise<{ code: number; message: string } | undefined> =>
  client.readResource({ uri }).then(
    () => undefined,
    (e: unknown) => e as { code: number; message: string },
  );

describe('/mcp and a priced resource spelled another way', () => {
  it('the exact uri, the scheme in capitals and a ./ segment all get -32603 payment required: 13 sats', async () => {
    const { resources } = await client.listResources();
    expect(resources.map((r) => r.uri)).toContain(`dvmcp://${id}/demo://resource/static/document/architecture.md`);
    for (const spelling of ['demo://resource/static/document/architecture.md', 'DEMO://resource/static/document/architecture.md', 'demo://resource/static/document/./architecture.md']) {
      const e = await readError(`dvmcp://${id}/${spelling}`);
      expect({ spelling, code: e?.code }).toEqual({ spelling, code: -32603 });
      expect(e?.message).toMatch(/^MCP error -32603: payment required: 13 sats \(invoice lnbcrt130n1edgestrdev\S+\); the \/mcp gateway does not pay, call this server with a DVMCP client that can$/);
    }
  });
});
