// /mcp against strangers' announcements: anyone may announce DVMCP servers on the public shard, so
// the gateway lists this deployment's own bridges first (their provider keys, recorded on the
// public shard when a bridge server is added) and no announcement can push them out of the
// catalog or take their names. Its own file: the gateway caches the catalog per isolate.
import { env, SELF } from 'cloudflare:test';
import { describe, expect, it } from 'vitest';
import type { SocketFactory } from '../../src/shared/relay-client.js';
import { LISTS, listAnnouncement, serverAnnouncement } from '../../src/shared/dvmcp.js';
import { CATALOG_LIMITS } from '../../workers/gateway/catalog.js';
import { shardStub } from '../../workers/common/shards.js';
import { DvmcpResponder } from './dvmcp-client-responder.js';
import { connect, keys, now, randomHex, sign } from './helpers.js';
import { allToolNames, gatewayClient } from './mcp-gateway-helpers.js';

const socket: SocketFactory = async (u) => {
  const res = await SELF.fetch(u.replace(/^ws/, 'http'), { headers: { Upgrade: 'websocket' } });
  const ws = res.webSocket!;
  ws.accept();
  return ws;
};

describe('/mcp and strangers’ announcements', () => {
  it('a deployment bridge stays listed under its own name when strangers announce more servers than the catalog holds, one with its id', async () => {
    const ownId = `gw-own-${randomHex(4)}`;
    const own = new DvmcpResponder('ws://relay.test/', socket, ownId, false);
    await own.start();
    await shardStub(env, null).provisionAgent(own.provider, keys().pk, 'bridge');
    const stranger = keys();
    const init = { protocolVersion: '2025-03-26', capabilities: { tools: {} }, serverInfo: { name: 'junk', version: '1' } };
    const echo = [{ name: 'echo', inputSchema: { type: 'object' } }];
    const later = now() + 5;
    // More servers than the catalog holds, each from a fresh key, all newer than the bridge's; and
    // one key announcing the bridge's id and the prefix that id gets when shared.
    const announcements = [
      ...Array.from({ length: CATALOG_LIMITS.maxServers }, (_, n) => ({ by: keys(), id: `junk-${randomHex(3)}-${n}`, at: later })),
      { by: stranger, id: ownId, at: later + 1 },
      { by: stranger, id: `${own.provider.slice(0, 16)}_${ownId}`, at: later + 1 },
    ];
    let s = await connect('/');
    for (const [n, { by, id, at }] of announcements.entries()) {
      if (n % 40 === 39) {
        s.close(); // under the per-connection burst
        s = await connect('/');
      }
      for (const t of [serverAnnouncement({ id, encryption: false }, init), listAnnouncement(id, LISTS[0], echo)]) {
        expect((await s.publish(sign(by, { ...t, created_at: at }))).slice(2)).toEqual([true, '']);
      }
    }
    s.close();

    const client = await gatewayClient('gateway-trust');
    try {
      const names = await allToolNames(client);
      // The id is shared, so both carry their provider's 16 hex digits; the forged id gets its own.
      const mine = `${own.provider.slice(0, 16)}_${ownId}__echo`;
      expect(names).toContain(mine);
      expect(names).toContain(`${stranger.pk.slice(0, 16)}_${ownId}__echo`);
      expect(names).toContain(`${stranger.pk.slice(0, 16)}_${own.provider.slice(0, 16)}_${ownId}__echo`);
      expect(names.filter((n) => n === mine)).toHaveLength(1);
      const result = await client.callTool({ name: mine, arguments: { text: 'to the real one' } });
      expect((result as { content: Array<{ text: string }> }).content[0]!.text).toBe('to the real one');
      expect(own.requests.at(-1)).toMatchObject({ method: 'tools/call', form: 'plain' });
    } finally {
      await client.close();
      own.close();
    }
  });
});
