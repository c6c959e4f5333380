// A hostile upstream MCP server cannot flood the client (and the shard, which verifies every event)
// through the bridge: the fixture's /mcp-flood (test/mcp/fixture-server.ts) answers one tools/call
// with 3,000 notifications before its result. What reaches the client
// (workers/common/dvmcp-server/notification-limits.ts):
//   - list_changed: at most one per (server, client, list) per NOTIFY_WINDOW_MS, the last of a window
//     sent at its end: all 3,000 in one answer → exactly 2 (the first, then one at the window's end);
//   - resources/updated: the same per (server, client, uri): 3,000 over 2 uris → exactly 4;
//   - progress: at most one per PROGRESS_INTERVAL_MS per request, the latest kept, the one pending when
//     the answer comes dropped: 3,000 in one answer → exactly 1;
//   - every notification event of a bridge counts against NOTIFICATIONS_PER_MINUTE, and those of one
//     server against SERVER_NOTIFICATIONS_PER_MINUTE (half); past it they are dropped: 3,000
//     resources/updated of 3,000 uris → exactly SERVER_NOTIFICATIONS_PER_MINUTE (what the other
//     servers of the bridge keep: bridge-upstream-bounds.test.ts).
// The call's answer arrives every time. (A normal progress-reporting tool still passes its progress
// through: bridge-requests.test.ts.)
import { describe, expect, inject, it } from 'vitest';
import { NOTIFY_WINDOW_MS, SERVER_NOTIFICATIONS_PER_MINUTE } from '../../workers/common/dvmcp-server/notification-limits.js';
import { bridgeReady, directBridge, DvmcpClient, received, told } from './bridge-helpers.js';
import { randomHex } from './helpers.js';

const FLOOD = 3000;
const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));
const floodUrl = (bucket: string): string => `${inject('toolsFixtureUrl')}/mcp-flood?bucket=${bucket}`;

/** A fresh bridge (its own notification budget) with the flooding server, and a client of it. */
async function flooded(): Promise<{ client: DvmcpClient; bucket: string }> {
  const bucket = randomHex(8);
  const { provider } = await directBridge([{ id: 'flood', url: floodUrl(bucket), public: false }]);
  await bridgeReady(provider);
  return { client: await DvmcpClient.open(provider), bucket };
}

/** Calls `tool` of the flooding server and checks its answer arrives. */
async function call(client: DvmcpClient, tool: string, args: Record<string, unknown>): Promise<string> {
  const id = await client.send(client.request('tools/call', { name: tool, arguments: args }, { s: 'flood' }));
  const answer = await client.answer(id, 30_000);
  expect(answer.result).toEqual({ ok: true, value: { content: [{ type: 'text', text: 'flooded' }] } });
  return id;
}

describe('bridge: an upstream flooding notifications', () => {
  it(`${FLOOD} tools/list_changed in one answer reach the client as exactly 2 (one now, one at the window's end)`, async () => {
    const { client, bucket } = await flooded();
    try {
      await call(client, 'list_changed', { count: FLOOD });
      await received(client, 'notifications/tools/list_changed', 2);
      await sleep(2 * NOTIFY_WINDOW_MS + 500); // nothing else comes
      const notes = told(client, 'notifications/tools/list_changed');
      expect(notes).toHaveLength(2);
      for (const n of notes) {
        expect(n.tags).toEqual(expect.arrayContaining([['p', client.k.pk], ['s', 'flood']]));
        expect(JSON.parse(n.content)).toEqual({ method: 'notifications/tools/list_changed' });
      }
      // The announcements' refresh is coalesced too: a few listings, not thousands.
      const stats = (await (await fetch(`${inject('toolsFixtureUrl')}/mcp-flood/stats?bucket=${bucket}`)).json()) as { lists: number; calls: number };
      expect(stats.calls).toBe(1);
      expect(stats.lists).toBeLessThanOrEqual(4);
    } finally {
      client.close();
    }
  }, 60_000);

  it(`${FLOOD} resources/updated over 2 uris reach the client as exactly 2 per uri`, async () => {
    const { client } = await flooded();
    try {
      await call(client, 'updated', { count: FLOOD, uris: 2 });
      await received(client, 'notifications/resources/updated', 4);
      await sleep(2 * NOTIFY_WINDOW_MS + 500);
      const uris = told(client, 'notifications/resources/updated').map((n) => (JSON.parse(n.content) as { params: { uri: string } }).params.uri);
      expect(uris.sort()).toEqual(['file:///r0', 'file:///r0', 'file:///r1', 'file:///r1']);
    } finally {
      client.close();
    }
  }, 60_000);

  it(`${FLOOD} progress notifications of one request reach the client as exactly 1 (the one pending at the answer is dropped)`, async () => {
    const { client } = await flooded();
    try {
      const id = await call(client, 'progress', { count: FLOOD });
      await sleep(2 * NOTIFY_WINDOW_MS);
      const progress = told(client, 'notifications/progress');
      expect(progress).toHaveLength(1);
      expect(progress[0]!.tags).toContainEqual(['e', id]);
      expect(JSON.parse(progress[0]!.content)).toEqual({ method: 'notifications/progress', params: { id, progressToken: id, progress: 1, total: FLOOD } });
    } finally {
      client.close();
    }
  }, 60_000);

  it(`${FLOOD} resources/updated of ${FLOOD} uris: exactly SERVER_NOTIFICATIONS_PER_MINUTE reach the client, the rest are dropped`, async () => {
    const { client } = await flooded();
    try {
      await call(client, 'updated', { count: FLOOD, uris: FLOOD });
      await received(client, 'notifications/resources/updated', SERVER_NOTIFICATIONS_PER_MINUTE, 20_000);
      await sleep(2 * NOTIFY_WINDOW_MS + 500);
      expect(told(client, 'notifications/resources/updated')).toHaveLength(SERVER_NOTIFICATIONS_PER_MINUTE);
    } finally {
      client.close();
    }
  }, 60_000);
});
