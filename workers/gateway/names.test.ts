// The /mcp naming rule (names.ts) and the index built on it (catalog.ts): prefixes, the provider
// prefix on shared server ids, dvmcp:// uris both ways, first owner of a repeated name, items the
// SDK's schemas refuse left out.
import { describe, expect, it } from 'vitest';
import type { Catalog, CatalogServer } from '../../src/shared/dvmcp-discovery.js';
import { GatewayIndex } from './catalog.js';
import { originalUri, serverPrefixes } from './names.js';

const P1 = '1'.repeat(64);
const P2 = '2'.repeat(64);
const P3 = '3'.repeat(64);
const server = (provider: string, id: string, extra: Partial<CatalogServer> = {}): CatalogServer => ({
  provider,
  id,
  encryption: false,
  capabilities: {},
  tools: [],
  resources: [],
  resourceTemplates: [],
  prompts: [],
  ...extra,
});

describe('/mcp names', () => {
  it('prefix = server id; a server id used by two providers gets "<provider 16 hex>_<id>" on both', () => {
    const catalog: Catalog = { servers: [server(P1, 'a'), server(P1, 'b'), server(P2, 'b')] };
    expect([...serverPrefixes(catalog).values()]).toEqual(['a', '1111111111111111_b', '2222222222222222_b']);
  });

  it('no server id can take another server’s prefix: an id of the qualified form is qualified itself', () => {
    // P1 and P2 share "weather", so P1's is "<P1 16 hex>_weather"; a stranger announcing that very id gets its own.
    const forged = `${P1.slice(0, 16)}_weather`;
    const catalog: Catalog = { servers: [server(P1, 'weather'), server(P2, 'weather'), server(P3, forged)] };
    const prefixes = [...serverPrefixes(catalog).values()];
    expect(prefixes).toEqual([forged, `${P2.slice(0, 16)}_weather`, `${P3.slice(0, 16)}_${forged}`]);
    expect(new Set(prefixes).size).toBe(3);
  });

  it('originalUri takes back only known prefixes', () => {
    expect(originalUri('dvmcp://a/test://x/1', ['a'])).toEqual({ prefix: 'a', uri: 'test://x/1' });
    expect(originalUri('dvmcp://z/test://x/1', ['a'])).toBeUndefined();
    expect(originalUri('test://x/1', ['a'])).toBeUndefined();
    expect(originalUri('dvmcp:///x', [''])).toBeUndefined();
  });

  it('a name two servers claim goes to the one a preferred provider (this deployment’s bridge) announced, else to neither', () => {
    const tool = (name: string) => ({ name, inputSchema: { type: 'object' as const } });
    // "a" + "b__c" and "a__b" + "c" are both exposed as "a__b__c".
    const own = server(P1, 'a', { tools: [tool('b__c'), tool('mine')], preferred: true });
    const stranger = server(P2, 'a__b', { tools: [tool('c'), tool('theirs')] });
    const index = new GatewayIndex({ servers: [stranger, own] });
    expect(index.tool('a__b__c')).toEqual({ server: own, original: 'b__c' });
    expect(index.tools.map((t) => t.name).sort()).toEqual(['a__b__c', 'a__b__theirs', 'a__mine']);
    // Two strangers: neither gets the contested name; the rest of each stays.
    const other = server(P3, 'a__b', { tools: [tool('c')] });
    const contested = new GatewayIndex({ servers: [server(P1, 'a', { tools: [tool('b__c'), tool('x')] }), other] });
    expect(contested.tool('a__b__c')).toBeUndefined();
    expect(contested.tools.map((t) => t.name)).toEqual(['a__x']);
  });

  it('the index exposes prefixed tools, prompts, resources and templates and routes them back', () => {
    const s = server(P1, 'a', {
      tools: [
        { name: 'echo', inputSchema: { type: 'object' }, price: { price: '1', unit: 'sats' } },
        { name: 'echo', inputSchema: { type: 'object' }, description: 'second' },
        { name: 'bad', inputSchema: { type: 'array' } },
      ],
      prompts: [{ name: 'p' }],
      resources: [{ name: 'R', uri: 'test://r/1' }],
      resourceTemplates: [{ name: 'T', uriTemplate: 'test://r/{id}' }],
    });
    const index = new GatewayIndex({ servers: [s] });
    expect(index.tools).toEqual([{ name: 'a__echo', inputSchema: { type: 'object' } }]);
    expect(index.tool('a__echo')).toEqual({ server: s, original: 'echo' });
    expect(index.tool('a__bad')).toBeUndefined();
    expect(index.prompt('a__p')).toEqual({ server: s, original: 'p' });
    expect(index.resources).toEqual([{ name: 'a__R', uri: 'dvmcp://a/test://r/1' }]);
    expect(index.resourceTemplates).toEqual([{ name: 'a__T', uriTemplate: 'dvmcp://a/test://r/{id}' }]);
    expect(index.resource('dvmcp://a/test://r/7')).toEqual({ server: s, original: 'test://r/7' });
    expect(index.exposeUri(s, 'test://r/7')).toBe('dvmcp://a/test://r/7');
  });
});
