// An upstream answering with JSON nested deeper than MAX_JSON_DEPTH (64, src/shared/json-depth.ts),
// through a real bridge: the fixture's /hostile/deep (test/mcp/hostile-upstreams.ts) answering
// tools/call `deep` with 50,000 levels in structuredContent (100 KB, within a plain answer's 120,000
// bytes; 15,000 gift-wrapped), 70 in a content item's _meta, an error whose data nests 50,000 or 70,
// and (?deep-init=70, a private server: never announced) an initialize result of 70 levels. Before,
// the bridge passed each on whole: the client got JSON that many readers cannot read (a recursive
// parser, JSON.stringify outside V8's deep stack; vitest's comparison overflows its stack on it).
// Now the client gets -32603 "upstream <id>'s result nests deeper than 64 levels" ("server <id>'s
// initialize result nests deeper than 64 levels", dispatcher.ts), a deep error keeps its code and
// message without its data; the call is metered as a failed call, the server's health is unchanged
// and no check is booked (a stranger's call says nothing of the server, as an answer over the byte
// cap), and the next call is answered. A result of 64 levels passes whole.
import { env } from 'cloudflare:test';
import { beforeAll, describe, expect, inject, it } from 'vitest';
import type { Form } from '../../src/shared/dvmcp-wrap.js';
import { nestsWithin } from '../../src/shared/json-depth.js';
import { REFRESH_MS } from '../../workers/bridge/bridge-do.js';
import { bridgeReady, directBridge, DvmcpClient, healthWhen, refreshAt } from './bridge-helpers.js';
import { randomHex } from './helpers.js';

const id = `deep-${randomHex(4)}`;
const deepInit = `deepinit-${randomHex(4)}`;
const INIT = { protocolVersion: '2025-03-26', capabilities: {}, clientInfo: { name: 't', version: '1' } };
let owner: string;
let client: DvmcpClient;
const bridge = () => env.BRIDGE.get(env.BRIDGE.idFromName(owner));
const today = () => new Date().toISOString().slice(0, 10);
const calls = async (): Promise<number> => (await bridge().usage(today(), today())).find((r) => r.server === id && r.method === 'tools/call')?.calls ?? 0;

beforeAll(async () => {
  const made = await directBridge([
    { id, url: `${inject('toolsFixtureUrl')}/hostile/deep?bucket=${randomHex(8)}`, public: false },
    { id: deepInit, url: `${inject('toolsFixtureUrl')}/hostile/deep?bucket=${randomHex(8)}&deep-init=70`, public: false },
  ]);
  owner = made.owner;
  await healthWhen(owner, id, (h) => h.ok === true && h.tools === 2);
  await healthWhen(owner, deepInit, (h) => h.ok === true && h.tools === 2);
  await bridgeReady(made.provider);
  client = await DvmcpClient.open(made.provider);
});

describe('bridge: an upstream result nested deeper than 64 levels', () => {
  it.each([
    ['plain', 'structured', 50_000],
    ['wrapped', 'structured', 15_000],
    ['plain', 'content', 70],
    ['wrapped-dm', 'content', 70],
  ] as const)('%s, %s nesting %d levels: -32603 naming the limit, metered, health unchanged, no check booked; the next call is answered', async (form: Form, where, levels) => {
    const before = await calls();
    // (each case's arguments differ: two requests alike in the same second have one id, and the second is ignored as a replay)
    const deep = await client.call('tools/call', { name: 'deep', arguments: { levels, where, form } }, { s: id, form, timeoutMs: 10_000 });
    expect(deep.result.ok).toBe(false); // (a deep result would overflow the stack of the comparison below)
    expect(deep.result).toEqual({ ok: false, error: { code: -32603, message: `upstream ${id}'s result nests deeper than 64 levels` } });
    expect(await calls()).toBe(before + 1);
    expect((await bridge().view(id))?.health).toMatchObject({ ok: true, error: null, tools: 2 });
    expect(await refreshAt(owner, id)).toBeGreaterThan(Date.now() + REFRESH_MS - 60_000);
    const small = await client.call('tools/call', { name: 'small', arguments: { form, where, levels } }, { s: id, form });
    expect(small.result.ok && small.result.value.content).toEqual([{ type: 'text', text: 'small' }]);
  });

  it('a result of 64 levels is answered whole', async () => {
    const a = await client.call('tools/call', { name: 'deep', arguments: { levels: 64, where: 'structured' } }, { s: id });
    expect(a.result.ok).toBe(true);
    const value = (a.result as { ok: true; value: Record<string, unknown> }).value;
    expect(nestsWithin(value, 64)).toBe(true);
    expect(nestsWithin(value, 63)).toBe(false);
  });

  it.each([50_000, 70])('an upstream error whose data nests %d levels keeps its code and message, without the data', async (levels) => {
    const a = await client.call('tools/call', { name: 'deep', arguments: { levels, where: 'error' } }, { s: id, timeoutMs: 10_000 });
    expect(!a.result.ok && 'data' in a.result.error).toBe(false); // (deep data would overflow the stack of the comparison below)
    expect(a.result).toEqual({ ok: false, error: { code: -32000, message: 'deep' } });
  });

  it('an initialize result nesting 70 levels is -32603 naming the limit, with the server’s d', async () => {
    const init = await client.call('initialize', INIT, { s: deepInit });
    expect(init.tags).toContainEqual(['d', deepInit]);
    expect(init.result.ok).toBe(false);
    expect(init.result).toEqual({ ok: false, error: { code: -32603, message: `server ${deepInit}'s initialize result nests deeper than 64 levels` } });
  });
});
