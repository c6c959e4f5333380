// /mcp (workers/gateway): the official SDK Client over Streamable HTTP against the Worker, with
// DVMCP server peers (dvmcp-client-responder.ts) announcing on the public shard: prefixed names
// (and the provider prefix when two providers share a server id), calls forwarded plain or
// gift-wrapped as announced, progress passed through, unknown names, payment-required, protocol
// errors, methods other than POST; the per-address limits of /mcp; the relay connections of calls
// held to their caller's per-address limits on the public shard, their wraps expiring.
import { env, SELF } from 'cloudflare:test';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { CfWorkerJsonSchemaValidator } from '@modelcontextprotocol/sdk/validation/cfworker';
import { McpError } from '@modelcontextprotocol/sdk/types.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { SocketFactory } from '../../src/shared/relay-client.js';
import { DvmcpResponder } from './dvmcp-client-responder.js';
import { connect, keys, now, randomHex, sign } from './helpers.js';
import { LISTS, listAnnouncement, serverAnnouncement } from '../../src/shared/dvmcp.js';
import { KIND } from '../../src/shared/kinds.js';
import { BATCH_REFUSED, handleMcp, MAX_BODY_BYTES, MAX_OPEN_PER_ADDRESS } from '../../workers/gateway/route.js';

const socket: SocketFactory = async (u) => {
  const res = await SELF.fetch(u.replace(/^ws/, 'http'), { headers: { Upgrade: 'websocket' } });
  const ws = res.webSocket!;
  ws.accept();
  return ws;
};

const id = `gw-${randomHex(4)}`;
const shared = `gw-shared-${randomHex(4)}`;
let wrapped: DvmcpResponder;
let plain: DvmcpResponder;
let twinA: DvmcpResponder;
let twinB: DvmcpResponder;
let client: Client;

beforeAll(async () => {
  wrapped = new DvmcpResponder('ws://relay.test/', socket, id, true);
  plain = new DvmcpResponder('ws://relay.test/', socket, `${id}-plain`, false);
  twinA = new DvmcpResponder('ws://relay.test/', socket, shared, false);
  twinB = new DvmcpResponder('ws://relay.test/', socket, shared, false);
  await Promise.all([wrapped, plain, twinA, twinB].map((r) => r.start()));
  await announceMany();
  client = new Client({ name: 'gateway-test', version: '1.0.0' }, { jsonSchemaValidator: new CfWorkerJsonSchemaValidator() });
  await client.connect(new StreamableHTTPClientTransport(new URL('http://relay.test/mcp'), { fetch: (u, init) => SELF.fetch(u, init) }));
});

afterAll(async () => {
  await client.close();
  for (const r of [wrapped, plain, twinA, twinB]) r.close();
});

const many = `gw-many-${randomHex(4)}`;

/** A server announcing 150 tools (more than one page of the gateway). */
async function announceMany(): Promise<void> {
  const k = keys();
  const s = await connect('/');
  const init = { protocolVersion: '2025-03-26', capabilities: { tools: {} }, serverInfo: { name: 'many', version: '1' } };
  const tools = Array.from({ length: 150 }, (_, i) => ({ name: `t${i}`, inputSchema: { type: 'object' } }));
  for (const t of [serverAnnouncement({ id: many, encryption: false }, init), listAnnouncement(many, LISTS[0], tools)]) {
    const ok = await s.publish(sign(k, t));
    if (!ok[2]) throw new Error(`announcement refused: ${JSON.stringify(ok)}`);
  }
  s.close();
}

/** Every tool, page after page. */
async function allTools(): Promise<Awaited<ReturnType<Client['listTools']>>['tools']> {
  const tools = [];
  let cursor: string | undefined;
  do {
    const page = await client.listTools(cursor === undefined ? {} : { cursor });
    tools.push(...page.tools);
    cursor = page.nextCursor;
  } while (cursor !== undefined);
  return tools;
}

const firstText = (r: unknown): string | undefined => ((r as { content?: Array<{ text?: string }> }).content ?? [])[0]?.text;

/** An MCP client of http://relay.test/mcp whose requests come from client address `address`. */
async function clientFrom(address: string): Promise<Client> {
  const c = new Client({ name: 'gateway-test', version: '1.0.0' }, { jsonSchemaValidator: new CfWorkerJsonSchemaValidator() });
  const fetchFrom = (u: string | URL, init?: RequestInit): Promise<Response> => {
    const headers = new Headers(init?.headers);
    headers.set('CF-Connecting-IP', address);
    return SELF.fetch(u, { ...init, headers });
  };
  await c.connect(new StreamableHTTPClientTransport(new URL('http://relay.test/mcp'), { fetch: fetchFrom }));
  return c;
}

/** Waits until `done` holds, looking every 50 ms, 200 times at most (then the test's assertion fails). */
async function until(done: () => boolean | Promise<boolean>): Promise<void> {
  for (let i = 0; i < 200 && !(await done()); i++) await new Promise((r) => setTimeout(r, 50));
}

async function callError(p: Promise<unknown>): Promise<McpError> {
  const e = await p.then(
    () => undefined,
    (x: unknown) => x,
  );
  expect(e).toBeInstanceOf(McpError);
  return e as McpError;
}

describe('/mcp gateway', () => {
  it('lists the announced tools under <server>__<tool>, with a provider prefix when two providers share a server id', async () => {
    const tools = await allTools();
    const names = tools.map((t) => t.name);
    expect(names).toEqual(expect.arrayContaining([`${id}__echo`, `${id}__slow`, `${id}-plain__echo`]));
    expect(names).toEqual(expect.arrayContaining([`${twinA.provider.slice(0, 16)}_${shared}__echo`, `${twinB.provider.slice(0, 16)}_${shared}__echo`]));
    expect(names).not.toContain(`${shared}__echo`);
    expect(tools.find((t) => t.name === `${id}__echo`)).toMatchObject({ description: 'Echoes text', inputSchema: { type: 'object', required: ['text'] } });
  });

  it('calls a tool gift-wrapped when the server announces encryption, plain otherwise', async () => {
    expect(firstText(await client.callTool({ name: `${id}__echo`, arguments: { text: 'secret' } }))).toBe('secret');
    expect(wrapped.requests.at(-1)).toMatchObject({ method: 'tools/call', form: 'wrapped' });
    expect(firstText(await client.callTool({ name: `${id}-plain__echo`, arguments: { text: 'open' } }))).toBe('open');
    expect(plain.requests.at(-1)).toMatchObject({ method: 'tools/call', form: 'plain' });
    expect(firstText(await client.callTool({ name: `${twinB.provider.slice(0, 16)}_${shared}__echo`, arguments: { text: 'b' } }))).toBe('b');
    expect(twinB.requests).toHaveLength(1);
    expect(twinA.requests).toHaveLength(0);
  });

  it('passes progress through as notifications/progress for the request’s progressToken', async () => {
    const progress: Array<{ progress: number; total?: number; message?: string }> = [];
    const r = await client.callTool({ name: `${id}__slow`, arguments: { steps: 3, ms: 50 } }, undefined, { onprogress: (p) => progress.push(p) });
    expect(firstText(r)).toBe('done');
    expect(progress).toEqual([1, 2, 3].map((i) => ({ progress: i, total: 3, message: `step ${i}` })));
  });

  it('an unknown tool is a -32602 error', async () => {
    const e = await callError(client.callTool({ name: `${id}__nope`, arguments: {} }));
    expect(e.code).toBe(-32602);
    expect(e.message).toBe(`MCP error -32602: Unknown tool: ${id}__nope`);
  });

  it('payment-required is a clear -32603 error with the amount and invoice (the gateway pays nothing)', async () => {
    const e = await callError(client.callTool({ name: `${id}__paid`, arguments: {} }));
    expect(e.code).toBe(-32603);
    expect(e.message).toBe('MCP error -32603: payment required: 21 sats (invoice lnbc210n1test); the /mcp gateway does not pay, call this server with a DVMCP client that can');
    expect(e.data).toEqual({ payment_required: { sats: 21, invoice: 'lnbc210n1test' } });
  });

  it('a protocol error of the DVMCP server keeps its code and message', async () => {
    const e = await callError(client.getPrompt({ name: `${id}__anything` }));
    expect(e.code).toBe(-32602);
    expect(e.message).toBe(`MCP error -32602: Unknown prompt: ${id}__anything`);
    const r = await callError(client.readResource({ uri: 'test://nope' }));
    expect(r.message).toBe('MCP error -32602: Unknown resource: test://nope (gateway uris are dvmcp://<server>/<uri>)');
  });

  it('lists in pages of 100 with nextCursor = the offset; every page together has every tool once', async () => {
    const first = await client.listTools();
    expect(first.tools).toHaveLength(100);
    expect(first.nextCursor).toBe('100');
    const names = (await allTools()).map((t) => t.name);
    const mine = names.filter((n) => n.startsWith(`${many}__`));
    expect(new Set(mine).size).toBe(150);
    expect(mine).toHaveLength(150);
  });

  it('GET and DELETE are 405 (stateless: no SSE stream, no sessions); a bad cursor is -32602', async () => {
    for (const method of ['GET', 'DELETE']) {
      const res = await SELF.fetch('http://relay.test/mcp', { method, headers: { Accept: 'text/event-stream' } });
      expect(res.status).toBe(405);
      expect(res.headers.get('Allow')).toBe('POST');
    }
    const e = await callError(client.listTools({ cursor: 'x' }));
    expect(e.message).toBe('MCP error -32602: Invalid cursor: x');
  });
});

describe('/mcp takes one message per POST', () => {
  const post = (body: string) =>
    SELF.fetch('http://relay.test/mcp', {
      method: 'POST',
      headers: { 'CF-Connecting-IP': `192.0.2.${Math.floor(Math.random() * 250) + 1}`, 'Content-Type': 'application/json', Accept: 'application/json, text/event-stream' },
      body,
    });

  it('a JSON-RPC batch is refused before any DVMCP request (each message would be a request past the per-POST limits)', async () => {
    const before = plain.requests.length;
    const batch = Array.from({ length: 100 }, (_, i) => ({ jsonrpc: '2.0', id: i, method: 'tools/call', params: { name: `${id}-plain__echo`, arguments: { text: `batched ${i}` } } }));
    const res = await post(JSON.stringify(batch));
    expect(res.status).toBe(400);
    expect(await res.json()).toEqual({ jsonrpc: '2.0', error: { code: -32600, message: BATCH_REFUSED }, id: null });
    // The same call sent alone is answered (and is one request at the server).
    const single = await post(JSON.stringify(batch[0]));
    expect(single.status).toBe(200);
    expect(await single.text()).toContain('batched 0');
    expect(plain.requests.slice(before).map((r) => r.method)).toEqual(['tools/call']);
  });

  it(`a body over ${MAX_BODY_BYTES} bytes is 413, and one that is not JSON 400 -32700`, async () => {
    const big = await post(JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/list', params: { pad: 'x'.repeat(MAX_BODY_BYTES) } }));
    expect(big.status).toBe(413);
    expect(await big.json()).toEqual({ jsonrpc: '2.0', error: { code: -32000, message: `request body too large (max ${MAX_BODY_BYTES} bytes)` }, id: null });
    const junk = await post('{not json');
    expect(junk.status).toBe(400);
    expect(await junk.json()).toEqual({ jsonrpc: '2.0', error: { code: -32700, message: 'Parse error: Invalid JSON' }, id: null });
  });
});

describe('/mcp per client address', () => {
  const post = (address: string, body = '{not json') =>
    SELF.fetch('http://relay.test/mcp', {
      method: 'POST',
      headers: { 'CF-Connecting-IP': address, 'Content-Type': 'application/json', Accept: 'application/json, text/event-stream' },
      body,
    });

  it('at most 8 requests open at once: the 9th is 429 while they run; when they end, requests pass again', async () => {
    const address = `192.0.2.${Math.floor(Math.random() * 250) + 1}`;
    // Each call runs about 1.6 s (two progress steps 800 ms apart) on its SSE stream.
    const call = (i: number) => JSON.stringify({ jsonrpc: '2.0', id: i, method: 'tools/call', params: { name: `${id}-plain__slow`, arguments: { steps: 2, ms: 800 } } });
    const running = await Promise.all(Array.from({ length: 8 }, (_, i) => post(address, call(i))));
    expect(running.map((r) => r.status)).toEqual(Array(8).fill(200));
    const refused = await post(address);
    expect(refused.status).toBe(429);
    expect(refused.headers.get('Retry-After')).toBe('5');
    expect(await refused.json()).toEqual({ jsonrpc: '2.0', error: { code: -32029, message: 'rate-limited: at most 8 /mcp requests open at once per address; retry in 5 s' }, id: null });
    const answers = await Promise.all(running.map((r) => r.text()));
    expect(answers.every((a) => a.includes('done'))).toBe(true);
    let after = await post(address);
    for (let i = 0; i < 40 && after.status === 429; i++) {
      await new Promise((r) => setTimeout(r, 50));
      after = await post(address);
    }
    expect(after.status).toBe(400);
    await after.body?.cancel();
  });

  it('120 requests a minute pass (each answered by the MCP server); the 121st is 429 before any work; another address is not limited', async () => {
    const address = `198.51.100.${Math.floor(Math.random() * 250) + 1}`;
    // The binding counts in windows aligned to the minute (Miniflare: a count per
    // floor(now / 60 s)); 120 requests that cross a boundary start a new count and the 121st passes.
    // Start in a window with at least 15 s left (the 121 requests take a few seconds).
    const left = 60_000 - (Date.now() % 60_000);
    if (left < 15_000) await new Promise((r) => setTimeout(r, left + 100));
    const windowStart = Math.floor(Date.now() / 60_000);
    const statuses = new Set<number>();
    for (let i = 0; i < 120; i++) {
      const res = await post(address);
      statuses.add(res.status);
      await res.body?.cancel();
    }
    expect([...statuses]).toEqual([400]); // the SDK's parse error: the request got through
    const refused = await post(address);
    expect(Math.floor(Date.now() / 60_000)).toBe(windowStart); // else the window, not the limit, decided
    expect(refused.status).toBe(429);
    expect(refused.headers.get('Retry-After')).toBe('60');
    expect(await refused.json()).toEqual({ jsonrpc: '2.0', error: { code: -32029, message: 'rate-limited: too many /mcp requests from this address; retry in 60 s' }, id: null });
    const other = await post(`203.0.113.${Math.floor(Math.random() * 250) + 1}`);
    expect(other.status).toBe(400);
    await other.body?.cancel();
  }, 40_000);
});

describe('/mcp: the relay connections of calls are their caller’s', () => {
  it('with 30 sockets of the caller’s /64 open on the public shard, a call gets the shard’s refusal of a 31st (not a connection of edgestr’s own)', async () => {
    const net = `2001:db8:${randomHex(2)}:7`;
    const held = [];
    for (let i = 0; i < 30; i++) held.push(await connect('/', { 'CF-Connecting-IP': `${net}::1` }));
    const caller = await clientFrom(`${net}::2`);
    try {
      const e = await callError(caller.callTool({ name: `${id}-plain__echo`, arguments: { text: 'one more' } }));
      expect(e.code).toBe(-32603);
      expect(e.message).toBe(
        'MCP error -32603: cannot reach the relay: error: connection connect failed: relay ws://relay.test/ did not accept a WebSocket (HTTP 429): too many connections from your address (max 30); close one first',
      );
      // Another address's call passes.
      const other = await clientFrom(`198.51.100.${Math.floor(Math.random() * 250) + 1}`);
      expect(firstText(await other.callTool({ name: `${id}-plain__echo`, arguments: { text: 'elsewhere' } }))).toBe('elsewhere');
      await other.close();
    } finally {
      await caller.close();
      for (const s of held) s.close();
    }
  });

  it('the gift wraps of a call and of its cancel carry a NIP-40 expiration 600 s after they were sent, and the server takes them', async () => {
    const since = now() - 1;
    expect(firstText(await client.callTool({ name: `${id}__echo`, arguments: { text: 'expiring' } }))).toBe('expiring');
    // A payment request the gateway declines is cancelled (notifications/cancel, gift-wrapped as the call).
    const cancels = wrapped.cancels.length;
    await callError(client.callTool({ name: `${id}__paid`, arguments: {} }));
    await until(() => wrapped.cancels.length > cancels);
    expect(wrapped.cancels.slice(cancels)).toEqual([wrapped.requests.at(-1)!.id]);
    const reader = await connect('/');
    await reader.auth({ sk: wrapped.sk, pk: wrapped.provider });
    const stored = await reader.req('wraps', { kinds: [KIND.GIFT_WRAP], '#p': [wrapped.provider], since });
    reader.close();
    expect(stored.events.length).toBe(3); // the echo, the paid call and its cancel
    for (const e of stored.events) expect(e.tags).toEqual([['p', wrapped.provider], ['expiration', String(e.created_at + 600)]]);
  });
});

describe('/mcp open requests per address', () => {
  it(`requests arriving together are admitted ${MAX_OPEN_PER_ADDRESS} at most (each is counted before the rate limit is asked)`, async () => {
    const address = `203.0.113.${Math.floor(Math.random() * 250) + 1}`;
    // Bodies that are not JSON: each admitted request is answered 400 at once (and is no longer open).
    const answers = await Promise.all(
      Array.from({ length: 16 }, () =>
        handleMcp(new Request('http://relay.test/mcp', { method: 'POST', headers: { 'CF-Connecting-IP': address }, body: '{not json' }), env, () => undefined),
      ),
    );
    const statuses = answers.map((r) => r.status);
    await Promise.all(answers.map((r) => r.body?.cancel()));
    expect(statuses.filter((s) => s === 400)).toHaveLength(MAX_OPEN_PER_ADDRESS);
    expect(statuses.filter((s) => s === 429)).toHaveLength(16 - MAX_OPEN_PER_ADDRESS);
  });
});
