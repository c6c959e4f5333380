// NIP-57 payments end to end, from Node against `wrangler dev` configured with a Lightning address
// (EDGESTR_LN_ADDRESS = the local LNURL-pay server of test/lnurl): a priced tools/call gets 21316
// payment-required with a BOLT-11 invoice from the LNURL server; the server's pay hook publishes
// the signed zap receipt (9735) to the relay named in the zap request; the bridge, subscribed to
// receipts paying its provider, sees it and runs the call. A forged receipt settles nothing.
// This file starts its own wrangler instance (the shared ones have no Lightning address), the
// LNURL server and the fixture MCP server (test/mcp/fixture-server.ts).

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import WebSocket from 'ws';
import { finalizeEvent, generateSecretKey } from 'nostr-tools/pure';
import type { NostrEvent } from '../../src/shared/event.js';
import { makeHttpAuthHeader } from '../../src/shared/nip98.js';
import { startLnurlServer, type LnurlServer } from '../lnurl/server.js';
import { startFixtureServer, type FixtureServer } from '../mcp/fixture-server.js';
import { startWrangler, type RunningWorker } from './global-setup.js';
import { E2E_OWNER, E2E_OWNER_SK, E2E_SECRET } from './e2e-keys.js';
import { newKey, nowSeconds, signed, waitFor, type Key } from './helpers.js';

let lnurl: LnurlServer;
let fixture: FixtureServer;
let worker: RunningWorker;
let provider: string;
const SERVER = 'zapped';

/** A raw relay connection that keeps every frame. */
class Sock {
  readonly frames: unknown[][] = [];
  private constructor(readonly ws: WebSocket) {
    ws.on('message', (d) => this.frames.push(JSON.parse(String(d)) as unknown[]));
  }
  static async open(url: string): Promise<Sock> {
    const ws = new WebSocket(url);
    await new Promise<void>((resolve, reject) => {
      ws.once('open', () => resolve());
      ws.once('error', reject);
    });
    return new Sock(ws);
  }
  send(frame: unknown[]): void {
    this.ws.send(JSON.stringify(frame));
  }
  async next(pred: (f: unknown[]) => boolean, what: string, timeoutMs = 15_000): Promise<unknown[]> {
    await waitFor(() => this.frames.some(pred), what, timeoutMs);
    return this.frames.find(pred)!;
  }
  close(): void {
    this.ws.close();
  }
}

const relayUrl = (): string => `${worker.httpUrl.replace(/^http/, 'ws')}/`;

beforeAll(async () => {
  lnurl = await startLnurlServer();
  fixture = await startFixtureServer();
  worker = await startWrangler('payments', [
    `EDGESTR_OWNERS:${E2E_OWNER}`,
    `EDGESTR_SECRET:${E2E_SECRET}`,
    'EDGESTR_ENV:test',
    'EDGESTR_OUTBOUND_ALLOW:127.0.0.1:*',
    `EDGESTR_LN_ADDRESS:${lnurl.url}/.well-known/lnurlp/bridge`,
  ]);
  const url = `${worker.httpUrl}/api/bridge/servers`;
  const body = JSON.stringify({ id: SERVER, url: `${fixture.url}/mcp-paged`, prices: { whoami: { price: '21', unit: 'sats' } } });
  const res = await fetch(url, { method: 'POST', body, headers: { authorization: makeHttpAuthHeader(E2E_OWNER_SK, url, 'POST', body), 'content-type': 'application/json' } });
  expect(res.status).toBe(201);
  provider = ((await res.json()) as { provider: string }).provider;
  // The tool list is announced after the bridge subscribed on the same connection: requests sent now reach it.
  const watch = await Sock.open(relayUrl());
  for (let i = 0; i < 100; i++) {
    watch.send(['REQ', `a${i}`, { kinds: [31317], authors: [provider] }]);
    await watch.next((f) => f[0] === 'EOSE' && f[1] === `a${i}`, 'EOSE');
    if (watch.frames.some((f) => f[0] === 'EVENT' && (f[2] as NostrEvent).tags.some((t) => t[0] === 's' && t[1] === SERVER))) break;
    await new Promise((r) => setTimeout(r, 100));
  }
  watch.close();
}, 120_000);

afterAll(async () => {
  await worker?.cleanup();
  await fixture?.close();
  await lnurl?.close();
});

/** A client subscribed to its answers; sends a priced whoami and returns the request id and invoice. */
async function pricedCall(k: Key): Promise<{ sock: Sock; id: string; invoice: string }> {
  const sock = await Sock.open(relayUrl());
  sock.send(['REQ', 'answers', { kinds: [26910, 21316], '#p': [k.pk], since: nowSeconds() - 5 }]);
  await sock.next((f) => f[0] === 'EOSE', 'EOSE');
  const request = signed(k, 25910, JSON.stringify({ method: 'tools/call', params: { name: 'whoami', arguments: {} } }), [['p', provider], ['method', 'tools/call'], ['s', SERVER]]);
  sock.send(['EVENT', request]);
  const frame = await sock.next((f) => f[0] === 'EVENT' && (f[2] as NostrEvent).tags.some((t) => t[0] === 'status' && t[1] === 'payment-required'), 'payment-required');
  const note = frame[2] as NostrEvent;
  expect(note.tags).toContainEqual(['e', request.id]);
  const amount = note.tags.find((t) => t[0] === 'amount')!;
  expect(amount.slice(0, 2)).toEqual(['amount', '21']);
  return { sock, id: request.id, invoice: amount[2]! };
}

const answerTo = (id: string) => (f: unknown[]): boolean => f[0] === 'EVENT' && (f[2] as NostrEvent).kind === 26910 && (f[2] as NostrEvent).tags.some((t) => t[0] === 'e' && t[1] === id);

describe('NIP-57 payments through wrangler dev', () => {
  it('payment-required with a zap invoice → the LNURL server publishes the receipt → the call runs', async () => {
    const { sock, id, invoice } = await pricedCall(newKey());
    expect(invoice).toMatch(/^lnbc210n1/);
    const zapRequests = (await (await fetch(`${lnurl.url}/test/requests`)).json()) as NostrEvent[];
    const zr = zapRequests.find((r) => r.tags.some((t) => t[0] === 'e' && t[1] === id))!;
    expect(zr.pubkey).toBe(provider);
    expect(zr.tags.find((t) => t[0] === 'relays')).toContain(relayUrl());

    const paid = await fetch(`${lnurl.url}/test/pay`, { method: 'POST', body: JSON.stringify({ invoice, relays: [relayUrl()] }) });
    const { published } = (await paid.json()) as { published: Array<{ ok: boolean; message: string }> };
    expect(published).toEqual([{ relay: relayUrl(), ok: true, message: '' }]);
    const answer = (await sock.next(answerTo(id), 'the answer'))[2] as NostrEvent;
    expect(JSON.parse(answer.content)).toEqual({ content: [{ type: 'text', text: 'authorization: (none)' }] });
    sock.close();
  });

  it('a receipt signed by another key settles nothing', async () => {
    const { sock, id, invoice } = await pricedCall(newKey());
    const real = await fetch(`${lnurl.url}/test/pay`, { method: 'POST', body: JSON.stringify({ invoice }) });
    const { receipt } = (await real.json()) as { receipt: NostrEvent };
    const forged = finalizeEvent({ kind: 9735, created_at: receipt.created_at, tags: receipt.tags, content: '' }, generateSecretKey());
    sock.send(['EVENT', forged]);
    await sock.next((f) => f[0] === 'OK' && f[1] === forged.id, 'OK');
    // The bridge answers other requests after the forged receipt; this one is still waiting.
    const probe = signed(newKey(), 25910, JSON.stringify({ method: 'ping' }), [['p', provider], ['method', 'ping']]);
    const other = await Sock.open(relayUrl());
    other.send(['REQ', 'answers', { kinds: [26910], '#e': [probe.id] }]);
    await other.next((f) => f[0] === 'EOSE', 'EOSE');
    other.send(['EVENT', probe]);
    await other.next(answerTo(probe.id), 'the ping answer');
    expect(sock.frames.some(answerTo(id))).toBe(false);
    // The genuine receipt still pays it.
    sock.send(['EVENT', receipt]);
    await sock.next(answerTo(id), 'the answer');
    other.close();
    sock.close();
  });
});
