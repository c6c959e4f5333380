// /mcp against strangers' announcements: anyone may announce DVMCP servers on the public shard, so
// the gateway lists this deployment's own bridges first (their provider keys, recorded on the
// public shard when a bridge server is added) and no announcement can push them out of the
// catalog or take their names. And against other clients: a client that goes away does not end
// the catalog discovery other requests wait for. Its own file: the gateway caches the catalog per
// isolate.
import { env, runInDurableObject, SELF } from 'cloudflare:test';
import { describe, expect, it } from 'vitest';
import type { SocketFactory } from '../../src/shared/relay-client.js';
import { LISTS, listAnnouncement, serverAnnouncement } from '../../src/shared/dvmcp.js';
import { CATALOG_LIMITS } from '../../workers/gateway/catalog.js';
import { handleMcp } from '../../workers/gateway/route.js';
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

describe('/mcp catalog discovery and other clients', () => {
  // handleMcp is called here as the Worker calls it, so that the test can end a response as a client
  // that goes away does (SELF.fetch does not pass a cancelled body on to the Worker).
  const request = (host: string, address: string, body: string) =>
    new Request(`http://${host}/mcp`, {
      method: 'POST',
      headers: { 'CF-Connecting-IP': address, 'Content-Type': 'application/json', Accept: 'application/json, text/event-stream' },
      body,
    });

  it('a discovery another request waits for outlives the client that started it going away', async () => {
    // A fresh origin: nothing of its catalog is cached. The public shard is held still meanwhile,
    // so that the discovery is still under way when its first client goes away.
    const host = `gw-${randomHex(4)}.test`;
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    let holding!: () => void;
    const held = new Promise<void>((r) => (holding = r));
    const still = runInDurableObject(shardStub(env, null), (_i, state) =>
      state.blockConcurrencyWhile(async () => {
        holding();
        await gate;
      }),
    );
    await held;
    const list = JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/list' });
    const firstLeft: Array<Promise<unknown>> = [];
    let waiting: Response;
    try {
      const first = await handleMcp(request(host, `192.0.2.${Math.floor(Math.random() * 250) + 1}`, list), env, (p) => firstLeft.push(p));
      expect(first.status).toBe(200);
      waiting = await handleMcp(request(host, `198.51.100.${Math.floor(Math.random() * 250) + 1}`, list), env, () => undefined);
      expect(waiting.status).toBe(200);
      // The first client goes away, and its request ends: of what it left running, only its response
      // can settle while the shard is held (not the discovery it started).
      await first.body?.cancel();
      await Promise.race(firstLeft);
    } finally {
      release();
      await still;
    }
    // The SSE stream's one message: the list (not "DVMCP discovery failed: …").
    const data = (await waiting.text()).split('\n').find((l) => l.startsWith('data: '));
    expect(JSON.parse(data!.slice('data: '.length))).toMatchObject({ jsonrpc: '2.0', id: 1, result: { tools: expect.any(Array) } });
  });
});
