// The DVMCP client and the /mcp gateway against the real bridge (workers/bridge) serving the real
// @modelcontextprotocol/server-everything, through the public shard: discovery of its
// announcements, plain and gift-wrapped calls, progress of the long-running tool, cancel, protocol
// errors; and /mcp with the SDK Client listing and calling the bridge's tools.
import { SELF } from 'cloudflare:test';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { CfWorkerJsonSchemaValidator } from '@modelcontextprotocol/sdk/validation/cfworker';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DvmcpClient, spendCap } from '../../src/shared/dvmcp-client.js';
import { discover } from '../../src/shared/dvmcp-discovery.js';
import { ConversationKeyCache } from '../../src/shared/nip44.js';
import { RelayClient } from '../../src/shared/relay-client.js';
import { nobleVerifier } from '../../src/shared/verify.js';
import { announcements, bridgeReady, directBridge, everythingUrl } from './bridge-helpers.js';
import { BASE, keys, randomHex, sign } from './helpers.js';

const id = `ev${randomHex(3)}`;
const priced = `${id}-priced`;
const me = keys();
let provider: string;
let relay: RelayClient;
let dvmcp: DvmcpClient;

beforeAll(async () => {
  ({ provider } = await directBridge([
    { id, url: everythingUrl(), name: 'Everything', public: true, encryption: true },
    { id: priced, url: everythingUrl(), public: true, prices: { echo: { price: '21', unit: 'sats' } } },
  ]));
  await bridgeReady(provider);
  await announcements(provider, [31316, 31317], (es) => es.length >= 2);
  relay = new RelayClient({
    url: 'ws://relay.test/',
    socket: async (u) => {
      const res = await SELF.fetch(u.replace(/^ws/, 'http'), { headers: { Upgrade: 'websocket' } });
      const ws = res.webSocket!;
      ws.accept();
      return ws;
    },
    auth: async (t) => sign(me, t),
    reconnect: false,
  });
  dvmcp = new DvmcpClient({ relays: relay, secretKey: me.sk, keys: new ConversationKeyCache(), sign: async (t) => sign(me, t), verifier: nobleVerifier });
});

afterAll(async () => {
  await dvmcp.close();
  relay.close();
});

const text = (r: unknown): string | undefined => ((r as { content?: Array<{ text?: string }> }).content ?? [])[0]?.text;

describe('DvmcpClient against the bridge', () => {
  it('discovers the bridge server and its tools from its announcements', async () => {
    const catalog = await discover(relay, { verifier: nobleVerifier, providers: [provider] });
    const server = catalog.ok ? catalog.value.servers.find((s) => s.id === id) : undefined;
    expect(server).toMatchObject({ provider, id, name: 'Everything', encryption: true });
    expect(server!.tools.map((t) => t.name)).toEqual(expect.arrayContaining(['echo', 'get-sum', 'trigger-long-running-operation']));
  });

  it('calls a tool plain and gift-wrapped', async () => {
    for (const encrypt of [false, true]) {
      const r = await dvmcp.request({ provider, serverId: id, encrypt }, 'tools/call', { name: 'echo', arguments: { message: `hi ${encrypt}` } });
      expect(r.ok && text(r.value)).toBe(`Echo: hi ${encrypt}`);
    }
  });

  it('passes the long-running tool’s progress to onProgress', async () => {
    const progress: Array<Record<string, unknown>> = [];
    const r = await dvmcp.request({ provider, serverId: id, encrypt: true }, 'tools/call', { name: 'trigger-long-running-operation', arguments: { duration: 2, steps: 4 } }, { onProgress: (p) => progress.push(p) });
    expect(r.ok && text(r.value)).toMatch(/^Long running operation completed/);
    expect(progress.length).toBeGreaterThanOrEqual(3);
    expect(progress[0]).toMatchObject({ progress: expect.any(Number), total: 4 });
  });

  it('cancels a running call; the bridge reports protocol errors with their code', async () => {
    const abort = new AbortController();
    const pending = dvmcp.request({ provider, serverId: id }, 'tools/call', { name: 'trigger-long-running-operation', arguments: { duration: 3, steps: 3 } }, { signal: abort.signal });
    setTimeout(() => abort.abort(), 300);
    expect(await pending).toEqual({ ok: false, error: { kind: 'cancelled', message: 'cancelled' } });
    expect(await dvmcp.request({ provider, serverId: 'nope' }, 'tools/list', {})).toEqual({ ok: false, error: { kind: 'protocol', code: -32602, message: 'Unknown server id nope' } });
  });
});

describe('payments against the bridge (local verifier)', () => {
  it('spendCap pays through the bridge’s local pay endpoint and the call is answered; the call past the cap is declined', async () => {
    const paid: string[] = [];
    const cap = spendCap(30, async (p) => {
      const res = await SELF.fetch(`${BASE}/api/bridge/pay`, { method: 'POST', body: JSON.stringify({ invoice: p.invoice }) });
      paid.push(p.invoice);
      return res.status === 200;
    });
    const call = (message: string) => dvmcp.request({ provider, serverId: priced }, 'tools/call', { name: 'echo', arguments: { message } }, { onPaymentRequired: cap });
    const first = await call('paid');
    expect(first.ok && text(first.value)).toBe('Echo: paid');
    expect(cap.spent()).toBe(21);
    const second = await call('too much');
    expect(second.ok ? undefined : second.error).toMatchObject({ kind: 'payment', sats: 21, message: expect.stringMatching(/^payment required: 21 sats \(invoice lnbcrt210n1edgestrdev/) });
    expect(paid).toHaveLength(1);
  });
});

describe('/mcp against the bridge', () => {
  let client: Client;
  beforeAll(async () => {
    client = new Client({ name: 'gateway-bridge-test', version: '1.0.0' }, { jsonSchemaValidator: new CfWorkerJsonSchemaValidator() });
    await client.connect(new StreamableHTTPClientTransport(new URL('http://relay.test/mcp'), { fetch: (u, init) => SELF.fetch(u, init) }));
  });
  afterAll(() => client.close());

  it('lists server-everything’s tools prefixed by the server id and calls one with progress', async () => {
    const { tools } = await client.listTools();
    expect(tools.map((t) => t.name)).toEqual(expect.arrayContaining([`${id}__echo`, `${id}__get-sum`, `${id}__trigger-long-running-operation`]));
    expect(text(await client.callTool({ name: `${id}__get-sum`, arguments: { a: 2, b: 40 } }))).toBe('The sum of 2 and 40 is 42.');
    const progress: number[] = [];
    const r = await client.callTool({ name: `${id}__trigger-long-running-operation`, arguments: { duration: 2, steps: 4 } }, undefined, { onprogress: (p) => progress.push(p.progress) });
    expect(text(r)).toMatch(/^Long running operation completed/);
    expect(progress.length).toBeGreaterThanOrEqual(3);
  });

  it('a priced tool is a -32603 error carrying the amount and invoice (the gateway pays nothing)', async () => {
    const e = await client.callTool({ name: `${priced}__echo`, arguments: { message: 'x' } }).then(
      () => undefined,
      (x: unknown) => x as { code: number; message: string; data: unknown },
    );
    expect(e?.code).toBe(-32603);
    expect(e?.message).toMatch(/^MCP error -32603: payment required: 21 sats \(invoice lnbcrt210n1edgestrdev\S+\); the \/mcp gateway does not pay/);
    expect(e?.data).toEqual({ payment_required: { sats: 21, invoice: expect.stringMatching(/^lnbcrt210n1edgestrdev/) } });
  });

  it('reads a resource through its dvmcp:// uri', async () => {
    const { resources } = await client.listResources();
    const first = resources.find((r) => r.uri.startsWith(`dvmcp://${id}/`));
    expect(first).toBeDefined();
    const read = await client.readResource({ uri: first!.uri });
    expect(read.contents[0]!.uri).toBe(first!.uri);
  });
});
