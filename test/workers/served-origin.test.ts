// Agents and bridges created before the deployment set EDGESTR_PUBLIC_URL keep the origin they were
// created on (the request's: e.g. edgestr.<account>.workers.dev), and with EDGESTR_PUBLIC_URL set
// every other hostname gets 421 (workers/common/served-host.ts). The URLs others dial are built on
// the served origin (workers/common/shards.ts `servedOrigin`): the relays a bridge's zap request
// names (where the wallet's LNURL server publishes the receipt) and an agent's relay list (kind
// 10002, where clients look for it). Before, both named the stored host, which answers 421.
// This file runs as a deployment with EDGESTR_PUBLIC_URL (and a Lightning address): both are set
// on the environment the Worker and its Durable Objects share in this test isolate (as
// bridge-idle.test.ts sets a Lightning address), and put back after. Test mode serves every
// hostname, so the old origin's requests (made before the upgrade) still reach the Worker.
import { env, SELF } from 'cloudflare:test';
import { afterAll, beforeAll, describe, expect, inject, it, vi } from 'vitest';
import '../lnurl/provided.js';
import type { NostrEvent } from '../../src/shared/event.js';
import { KIND } from '../../src/shared/kinds.js';
import { api } from './api-helpers.js';
import { apiWithEnv } from './app-env.js';
import { everythingUrl } from './bridge-helpers.js';
import { keys, now, randomHex, sign, TestSocket } from './helpers.js';
import { TEST_ADMIN_SK, TEST_OWNER, TEST_OWNER_SK } from './test-keys.js';

const PUBLIC = 'https://relay.public.test';
const OLD = 'https://edgestr.old.test';
const LNURL = inject('lnurlUrl');
const shared = env as unknown as Record<string, string | undefined>;
const SET = { EDGESTR_PUBLIC_URL: PUBLIC, EDGESTR_LN_ADDRESS: `${LNURL}/.well-known/lnurlp/bridge`, EDGESTR_PAYMENT_EXPIRY: '600' };
const before: Record<string, string | undefined> = {};

beforeAll(() => {
  for (const [k, v] of Object.entries(SET)) {
    before[k] = shared[k];
    shared[k] = v;
  }
});
afterAll(() => {
  for (const k of Object.keys(SET)) shared[k] = before[k];
});

/** A connection to `path` on the public URL (its NIP-42 relay URL is wss://relay.public.test…). */
async function connectPublic(path: string): Promise<TestSocket> {
  const res = await SELF.fetch(`${PUBLIC}${path}`, { headers: { Upgrade: 'websocket' } });
  const ws = res.webSocket;
  if (!ws) throw new Error(`no websocket: ${res.status} ${await res.text()}`);
  ws.accept();
  const sock = new TestSocket(ws, `${PUBLIC.replace(/^http/, 'ws')}${path}`);
  sock.send(['AUTH']);
  await sock.next((f) => f[0] === 'AUTH').then((f) => sock.frames.unshift(f));
  return sock;
}

describe('an agent or bridge created on another origin, EDGESTR_PUBLIC_URL set since', { timeout: 60_000 }, () => {
  it("the bridge's zap request names the relays at EDGESTR_PUBLIC_URL; the receipt published there runs the paid call", async () => {
    const owner = keys();
    expect((await api(TEST_ADMIN_SK, 'POST', '/api/admin/owners', { pubkey: owner.pk })).status).toBe(201);
    // The provider row as a registration through the old origin stored it (kept for good).
    const bridge = env.BRIDGE.get(env.BRIDGE.idFromName(owner.pk));
    const provider = await bridge.ensureProvider(owner.pk, OLD);
    const id = `moved-${randomHex(4)}`;
    const registered = await api(owner.sk, 'POST', '/api/bridge/servers', { id, url: everythingUrl(), prices: { echo: { price: '21', unit: 'sats' } } });
    expect(registered).toMatchObject({ status: 201, json: { provider } });

    const client = keys();
    const sock = await connectPublic('/');
    try {
      expect((await sock.auth(client))[2]).toBe(true);
      await sock.req('answers', { kinds: [KIND.DVMCP_RESPONSE, KIND.DVMCP_NOTIFICATION], '#p': [client.pk], since: now() - 5 });
      // The bridge may still be connecting (a request is ephemeral): a new one every 2 s until one is asked to pay.
      let request: NostrEvent | undefined;
      let invoice: string | undefined;
      for (let i = 0; i < 10 && invoice === undefined; i++) {
        const r = sign(client, {
          kind: KIND.DVMCP_REQUEST,
          content: JSON.stringify({ method: 'tools/call', params: { name: 'echo', arguments: { message: 'paid on the public URL' } } }),
          tags: [['p', provider], ['method', 'tools/call'], ['s', id]],
        });
        expect((await sock.publish(r))[2]).toBe(true);
        const note = await sock.next((f) => f[0] === 'EVENT' && (f[2] as NostrEvent).tags.some((t) => t[0] === 'e' && t[1] === r.id) && (f[2] as NostrEvent).tags.some((t) => t[0] === 'amount'), 2_000).catch(() => undefined);
        if (note === undefined) continue;
        request = r;
        invoice = (note[2] as NostrEvent).tags.find((t) => t[0] === 'amount')![2];
      }
      expect(invoice).toBeDefined();
      const zapRequests = (await (await fetch(`${LNURL}/test/requests`)).json()) as NostrEvent[];
      const zapRequest = zapRequests.find((z) => z.tags.some((t) => t[0] === 'e' && t[1] === request!.id));
      expect(zapRequest?.tags.find((t) => t[0] === 'relays')).toEqual(['relays', `wss://relay.public.test/r/${owner.pk}`, 'wss://relay.public.test/']);

      // The wallet's LNURL server publishes the receipt where the zap request said: the call runs.
      const paid = (await (await fetch(`${LNURL}/test/pay`, { method: 'POST', body: JSON.stringify({ invoice }) })).json()) as { receipt: NostrEvent };
      const publisher = await connectPublic('/');
      expect((await publisher.publish(paid.receipt)).slice(2)).toEqual([true, '']);
      publisher.close();
      const answer = await sock.next((f) => f[0] === 'EVENT' && (f[2] as NostrEvent).kind === KIND.DVMCP_RESPONSE && (f[2] as NostrEvent).tags.some((t) => t[0] === 'e' && t[1] === request!.id));
      expect(JSON.parse((answer[2] as NostrEvent).content)).toEqual({ content: [{ type: 'text', text: 'Echo: paid on the public URL' }] });
    } finally {
      sock.close();
    }
  });

  it("the agent's relay list (kind 10002) names its shards at EDGESTR_PUBLIC_URL, an extra relay on the old origin too", async () => {
    const other = keys().pk;
    // Created through the old origin before EDGESTR_PUBLIC_URL was set: its origin is https://edgestr.old.test.
    const created = await apiWithEnv({ EDGESTR_PUBLIC_URL: undefined }, TEST_OWNER_SK, 'POST', '/api/agents', { name: 'moved', provider: 'echo', relays: [`wss://edgestr.old.test/r/${other}`] }, OLD);
    expect(created).toMatchObject({ status: 201, json: { relays: [`wss://edgestr.old.test/r/${TEST_OWNER}`, 'wss://edgestr.old.test/', `wss://edgestr.old.test/r/${other}`] } });
    const agent = (created.json as { pubkey: string }).pubkey;
    expect((await api(TEST_OWNER_SK, 'GET', `/api/agents/${agent}`)).json).toMatchObject({ origin: OLD });
    // The origin it was created on stays one of its own hosts (the outbound policy's loop rule).
    expect(await api(TEST_OWNER_SK, 'PATCH', `/api/agents/${agent}`, { mcp_servers: [{ id: 'own', url: `${OLD}/mcp` }] })).toEqual({
      status: 422,
      json: { error: 'invalid agent', issues: [{ path: 'mcp_servers.0.url', message: "refused: edgestr.old.test is this deployment's own host (a loop)" }] },
    });

    const sock = await connectPublic('/');
    try {
      let list: NostrEvent | undefined;
      await vi.waitFor(
        async () => {
          const sub = `l${randomHex(4)}`;
          list = (await sock.req(sub, { kinds: [KIND.RELAY_LIST], authors: [agent] })).events[0];
          sock.send(['CLOSE', sub]);
          expect(list).toBeDefined();
        },
        { timeout: 20_000, interval: 200 },
      );
      expect(list!.tags).toEqual([
        ['r', `wss://relay.public.test/r/${TEST_OWNER}`],
        ['r', 'wss://relay.public.test/'],
        ['r', `wss://relay.public.test/r/${other}`],
      ]);
    } finally {
      sock.close();
    }
  });
});
