// DVMCP discovery (dvmcp-discovery.ts): the catalog rules — newest event per address, malformed
// content, bad server ids, bad items and orphan lists skipped, resources vs templates by content
// key, prices from cap tags, size and depth bounds, preferred providers first.
import { describe, expect, it } from 'vitest';
import { finalizeEvent, generateSecretKey } from 'nostr-tools/pure';
import { buildCatalog } from './dvmcp-discovery.js';
import { LISTS, listAnnouncement, serverAnnouncement } from './dvmcp.js';
import type { NostrEvent } from './event.js';
import { MAX_JSON_DEPTH } from './json-depth.js';

const sk = generateSecretKey();
const at = (t: { kind: number; tags: string[][]; content: string }, created_at: number): NostrEvent => finalizeEvent({ ...t, created_at }, sk);
const init = { protocolVersion: '2025-03-26', capabilities: { tools: {} }, serverInfo: { name: 's', version: '1' } };
const TOOLS = LISTS[0];
const RESOURCES = LISTS[1];
const TEMPLATES = LISTS[2];
const PROMPTS = LISTS[3];

describe('buildCatalog', () => {
  it('newest per address wins (equal times: the lower id); the server keeps its profile, capabilities and serverInfo', () => {
    const old = at(serverAnnouncement({ id: 'a', name: 'old', encryption: false }, init), 100);
    const cur = at(serverAnnouncement({ id: 'a', name: 'new', about: 'x', encryption: true }, init), 200);
    const { servers } = buildCatalog([cur, old]);
    expect(servers).toEqual([
      expect.objectContaining({ provider: cur.pubkey, id: 'a', name: 'new', about: 'x', encryption: true, protocolVersion: '2025-03-26', capabilities: { tools: {} }, serverInfo: { name: 's', version: '1' } }),
    ]);
    const tie1 = at(listAnnouncement('a', TOOLS, [{ name: 'one', inputSchema: { type: 'object' } }]), 300);
    const tie2 = at(listAnnouncement('a', TOOLS, [{ name: 'two', inputSchema: { type: 'object' } }]), 300);
    const lower = tie1.id < tie2.id ? 'one' : 'two';
    expect(buildCatalog([cur, tie1, tie2]).servers[0]!.tools.map((t) => t.name)).toEqual([lower]);
  });

  it('skips malformed content, bad server ids, bad items and lists of servers that never announced', () => {
    const server = at(serverAnnouncement({ id: 'a', encryption: false }, init), 200);
    const badId = at(serverAnnouncement({ id: 'bad id!', encryption: false }, init), 200);
    const notJson = at({ kind: 31316, tags: [['d', 'b']], content: 'not json' }, 200);
    const tools = at(listAnnouncement('a', TOOLS, [{ name: 't1', inputSchema: { type: 'object' } }, { name: 42 }, { name: 't2' }, { name: 't3', inputSchema: { type: 'object' } }]), 200);
    const brokenList = at({ kind: 31319, tags: [['d', 'a/prompts/list'], ['s', 'a']], content: '{"prompts": ' }, 200);
    const orphan = at(listAnnouncement('zzz', TOOLS, [{ name: 'x', inputSchema: { type: 'object' } }]), 200);
    const { servers } = buildCatalog([server, badId, notJson, tools, brokenList, orphan]);
    expect(servers.map((s) => s.id)).toEqual(['a']);
    expect(servers[0]!.tools.map((t) => t.name)).toEqual(['t1', 't3']);
    expect(servers[0]!.prompts).toEqual([]);
  });

  it('reads resources and resource templates from 31318 by content key, prompts from 31319, prices from cap tags', () => {
    const server = at(serverAnnouncement({ id: 'a', encryption: false }, init), 200);
    const resources = at(listAnnouncement('a', RESOURCES, [{ name: 'R', uri: 'test://r/1' }], { 'test://r/1': { price: '5', unit: 'sats' } }), 200);
    const templates = at(listAnnouncement('a', TEMPLATES, [{ name: 'T', uriTemplate: 'test://r/{id}' }]), 200);
    const prompts = at(listAnnouncement('a', PROMPTS, [{ name: 'p', arguments: [] }], { p: { price: '3', unit: 'sats' } }), 200);
    const s = buildCatalog([server, resources, templates, prompts]).servers[0]!;
    expect(s.resources).toEqual([{ name: 'R', uri: 'test://r/1', price: { price: '5', unit: 'sats' } }]);
    expect(s.resourceTemplates).toEqual([{ name: 'T', uriTemplate: 'test://r/{id}' }]);
    expect(s.prompts).toEqual([{ name: 'p', arguments: [], price: { price: '3', unit: 'sats' } }]);
  });

  it('keeps at most maxServers servers (newest first) and maxItems items per list', () => {
    const a = at(serverAnnouncement({ id: 'a', encryption: false }, init), 100);
    const b = at(serverAnnouncement({ id: 'b', encryption: false }, init), 200);
    const tools = at(listAnnouncement('b', TOOLS, Array.from({ length: 5 }, (_, i) => ({ name: `t${i}`, inputSchema: { type: 'object' } }))), 200);
    const { servers } = buildCatalog([a, b, tools], { maxServers: 1, maxItems: 2 });
    expect(servers.map((s) => s.id)).toEqual(['b']);
    expect(servers[0]!.tools.map((t) => t.name)).toEqual(['t0', 't1']);
  });

  it('lists the servers of preferred providers first, marked, whatever newer servers others announced', () => {
    const own = generateSecretKey();
    const mine = finalizeEvent({ ...serverAnnouncement({ id: 'mine', encryption: false }, init), created_at: 100 }, own);
    const others = Array.from({ length: 3 }, (_, n) => at(serverAnnouncement({ id: `other-${n}`, encryption: false }, init), 200 + n));
    const { servers } = buildCatalog([...others, mine], { maxServers: 2 }, new Set([mine.pubkey]));
    expect(servers.map((s) => [s.id, s.preferred])).toEqual([
      ['mine', true],
      ['other-2', undefined],
    ]);
    expect(buildCatalog([...others, mine], { maxServers: 2 }).servers.map((s) => s.id)).toEqual(['other-2', 'other-1']);
  });

  it('skips an event whose content is over the size bound', () => {
    const server = at(serverAnnouncement({ id: 'a', encryption: false }, init), 200);
    const huge = at({ kind: 31317, tags: [['d', 'a/tools/list'], ['s', 'a']], content: JSON.stringify({ tools: [{ name: 'x', inputSchema: {}, description: 'y'.repeat(300_000) }] }) }, 200);
    expect(buildCatalog([server, huge]).servers[0]!.tools).toEqual([]);
  });

  it(`skips items, and servers, that nest deeper than ${MAX_JSON_DEPTH} levels (6,000 levels: 12 KB that JSON.stringify cannot write)`, () => {
    const nest = (n: number): string => `${'['.repeat(n)}${']'.repeat(n)}`;
    // An item is 1 level and its member `x`, 63 arrays nested, levels 2 to 64: the deepest kept.
    const item = (name: string, n: number, extra: string): string => `{"name":"${name}",${extra},"x":${nest(n)}}`;
    const lists = [
      [TOOLS, '"inputSchema":{}'],
      [RESOURCES, '"uri":"test://r"'],
      [TEMPLATES, '"uriTemplate":"test://r/{id}"'],
      [PROMPTS, '"arguments":[]'],
    ] as const;
    const server = at(serverAnnouncement({ id: 'a', encryption: false }, init), 200);
    const events = lists.map(([list, extra]) =>
      at({ kind: list.kind, tags: [['d', `a/${list.key}`], ['s', 'a']], content: `{"${list.key}":[${item('deep', 6000, extra)},${item('deepest kept', 63, extra)},${item('one too deep', 64, extra)}]}` }, 200),
    );
    const s = buildCatalog([server, ...events]).servers[0]!;
    for (const items of [s.tools, s.resources, s.resourceTemplates, s.prompts]) expect(items.map((i) => i.name)).toEqual(['deepest kept']);
    const deepServer = at({ kind: 31316, tags: [['d', 'b']], content: `{"capabilities":{"tools":{}},"serverInfo":{"name":"s","x":${nest(6000)}}}` }, 200);
    expect(buildCatalog([server, deepServer]).servers.map((x) => x.id)).toEqual(['a']);
    expect(() => JSON.stringify(buildCatalog([server, deepServer, ...events]))).not.toThrow();
  });
});
