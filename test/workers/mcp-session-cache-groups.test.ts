// The bridge's upstream sessions are shared by all its servers (McpSessionCache, 128): strangers
// opening sessions on one server (each fresh key's `initialize` opens one) must not close the
// sessions of another server's clients. With groups (the bridge: the server id of the key), a group
// at `maxPerGroup` closes its own least recently used session; a full cache closes the least
// recently used session of the group holding the most (idle sessions only: see
// mcp-session-leases.test.ts for sessions with calls in flight). Real sessions to the fixture's /mcp-expire
// (?keep=1: sessions kept).
import { describe, expect, inject, it } from 'vitest';
import '../mcp/provided.js';
import { outboundPolicy } from '../../src/shared/outbound-url.js';
import { McpSessionCache } from '../../workers/common/mcp-session-cache.js';
import { randomHex } from './helpers.js';

const LOCAL = outboundPolicy({ EDGESTR_OUTBOUND_ALLOW: '127.0.0.1:*' });
const server = () => ({ url: `${inject('toolsFixtureUrl')}/mcp-expire?keep=1&bucket=${randomHex(8)}` });
const groupOf = (key: string): string => key.slice(0, key.indexOf(':'));

async function open(cache: McpSessionCache, ...keys: string[]): Promise<void> {
  const s = server();
  for (const k of keys) expect((await cache.use(k, s, { policy: LOCAL }, async () => undefined)).ok).toBe(true);
}

describe('McpSessionCache with groups', () => {
  it('a group at maxPerGroup closes its own least recently used session, not another group’s', async () => {
    const cache = new McpSessionCache({ maxSessions: 6, groupOf, maxPerGroup: 3 });
    await open(cache, 'b:1', 'b:2', 'a:1', 'a:2', 'a:3');
    await open(cache, 'a:4', 'a:5', 'a:6', 'a:7'); // strangers on a
    expect(cache.size).toBe(5);
    expect(['b:1', 'b:2'].map((k) => cache.has(k))).toEqual([true, true]);
    expect(['a:1', 'a:2', 'a:3', 'a:4', 'a:5', 'a:6', 'a:7'].map((k) => cache.has(k))).toEqual([false, false, false, false, true, true, true]);
    await cache.closeAll();
  });

  it('a full cache closes the least recently used session of the group holding the most', async () => {
    const cache = new McpSessionCache({ maxSessions: 4, groupOf, maxPerGroup: 3 });
    await open(cache, 'b:1', 'a:1', 'a:2', 'a:3'); // b:1 is the least recently used of all
    await open(cache, 'c:1');
    expect(['b:1', 'a:1', 'a:2', 'a:3', 'c:1'].map((k) => cache.has(k))).toEqual([true, false, true, true, true]);
    await cache.closeAll();
  });

  it('without groups the least recently used session of all is closed (as before)', async () => {
    const cache = new McpSessionCache({ maxSessions: 2 });
    await open(cache, 'b:1', 'a:1', 'a:2');
    expect(['b:1', 'a:1', 'a:2'].map((k) => cache.has(k))).toEqual([false, true, true]);
    await cache.closeAll();
  });
});
