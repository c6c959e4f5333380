// The NIP-57 verifier (workers/bridge/payments-zap.ts) against the local LNURL-pay server
// (test/lnurl/server.ts, real LUD-06 JSON, zap requests checked by nostr-tools): the pay endpoint
// and callback, the zap request it receives, a real signed receipt published to a relay shard and
// read back with the verifier's own filter, the gate's call running once it is paid; receipts that
// must not settle anything; endpoints that cannot be used: the client gets one generic error, the
// operator the reason; a callback on another origin than the pay endpoint, dialled without the
// operator's outbound exceptions;
// the bridge's payments (payments-bridge.ts) choosing the zap verifier, or none, from the configuration;
// the receipts of a private server's paid calls, read by a stranger on the public shard, naming
// nothing of what was called.
import { env, runInDurableObject } from 'cloudflare:test';
import { describe, expect, inject, it, vi } from 'vitest';
import { finalizeEvent, generateSecretKey, getPublicKey } from 'nostr-tools/pure';
import '../lnurl/provided.js';
import type { NostrEvent } from '../../src/shared/event.js';
import type { EventTemplate } from '../../src/shared/relay-types.js';
import { bolt11Msat } from '../../src/shared/nip57.js';
import { outboundPolicy } from '../../src/shared/outbound-url.js';
import { nobleVerifier } from '../../src/shared/verify.js';
import type { Requester } from '../../src/shared/dvmcp.js';
import { PaymentStore, type PaymentRow } from '../../workers/bridge/payments-store.js';
import { ZapVerifier } from '../../workers/bridge/payments-zap.js';
import { NO_INVOICE, VerifierGate, type GateHost } from '../../workers/bridge/payments-gate.js';
import { DEFAULT_PAYMENT_CONFIG, PAYMENT_RPC } from '../../workers/bridge/payments.js';
import { BridgePayments } from '../../workers/bridge/payments-bridge.js';
import { connect, randomHex } from './helpers.js';

const LNURL = inject('lnurlUrl');
const RELAY = 'ws://relay.test/';
const PROVIDER_SK = generateSecretKey();
const PROVIDER = getPublicKey(PROVIDER_SK);

const plain = (e: NostrEvent): NostrEvent => ({ id: e.id, pubkey: e.pubkey, created_at: e.created_at, kind: e.kind, tags: e.tags, content: e.content, sig: e.sig });

function zapVerifier(sql: SqlStorage, name = 'bridge', address = `${LNURL}/.well-known/lnurlp/${name}`): { zap: ZapVerifier; store: PaymentStore } {
  const store = new PaymentStore(sql);
  const zap = new ZapVerifier({
    provider: PROVIDER,
    address,
    relays: [RELAY],
    sign: async (t: EventTemplate) => plain(finalizeEvent(t, PROVIDER_SK)),
    policy: outboundPolicy(env),
    store,
    verifier: nobleVerifier,
    expirySeconds: 600,
  });
  return { zap, store };
}

/** Runs `body` with a fresh Durable Object's SQLite (an ApiState object hosts the payments table). */
const inObject = <T>(body: (sql: SqlStorage) => Promise<T>): Promise<T> =>
  runInDurableObject(env.API_STATE.get(env.API_STATE.idFromName(`payments-zap-${randomHex(8)}`)), (_i, state) => body(state.storage.sql));

/** The LNURL server's test hook: "this invoice was paid" → its signed zap receipt. */
async function pay(invoice: string): Promise<NostrEvent> {
  const res = await fetch(`${LNURL}/test/pay`, { method: 'POST', body: JSON.stringify({ invoice }) });
  expect(res.status).toBe(200);
  return ((await res.json()) as { receipt: NostrEvent }).receipt;
}

const requester = (): Requester => ({ requestId: randomHex(), client: randomHex() });

/** A gate host that sets no alarm; its log lines and no-invoice reasons go to the arrays given (else dropped). */
const host = (logs?: string[], noInvoice?: string[]): GateHost => ({
  wakeAt: async () => undefined,
  log: (line) => void logs?.push(line),
  noInvoice: (reason) => void noInvoice?.push(reason),
});

const PLAIN_HTTP = 'plain http:// is allowed only in development or for hosts in EDGESTR_OUTBOUND_ALLOW; use https://';
/** Requests that reached the LNURL server's `aside` listener (another origin, an internal service). */
const asideHits = async (): Promise<number> => ((await (await fetch(`${LNURL}/test/aside`)).json()) as { hits: number }).hits;

// Each test waits up to 15 s for its invoices (LNURL round trips and signed zap requests, slow on a
// loaded machine), so its own time is longer than the default 20 s.
describe('ZapVerifier', { timeout: 60_000 }, () => {
  it('gets a zap invoice for the amount with a zap request naming the provider, the request and the relays', async () => {
    await inObject(async (sql) => {
      const { zap } = zapVerifier(sql);
      const who = requester();
      const inv = await zap.invoice({ sats: 21, ...who });
      expect(inv.ok).toBe(true);
      if (!inv.ok) return;
      expect(bolt11Msat(inv.value.invoice)).toEqual({ ok: true, value: 21_000 });
      const proof = JSON.parse(inv.value.proof!) as { nostrPubkey: string; zapRequest: NostrEvent };
      expect(proof.zapRequest.id).toBe(inv.value.id);
      expect(proof.zapRequest.pubkey).toBe(PROVIDER);
      expect(proof.zapRequest.tags).toEqual(
        expect.arrayContaining([['relays', RELAY], ['amount', '21000'], ['p', PROVIDER], ['e', who.requestId]]),
      );
      const seen = (await (await fetch(`${LNURL}/test/requests`)).json()) as NostrEvent[];
      expect(seen.map((r) => r.id)).toContain(inv.value.id);
    });
  });

  it('settles the call when the LNURL server\'s receipt, published to a relay shard, arrives through the verifier\'s filter', async () => {
    await inObject(async (sql) => {
      const { zap, store } = zapVerifier(sql);
      const gate = new VerifierGate(zap, store, DEFAULT_PAYMENT_CONFIG, host());
      const sent: EventTemplate[] = [];
      const who = requester();
      const call = gate.requirePayment(who, { serverId: 'everything', method: 'tools/call', name: 'echo' }, { price: '21', unit: 'sats' }, {
        notify: async (t) => void sent.push(t),
        signal: new AbortController().signal,
      });
      const watcher = await connect('/');
      const sub = await watcher.req('receipts', zap.receiptFilter());
      expect(sub.closed).toBeUndefined();
      await vi.waitFor(() => expect(sent.length).toBeGreaterThan(0), { timeout: 15_000, interval: 20 });
      const invoice = sent[0]!.tags.find((t) => t[0] === 'amount')![2]!;
      expect(sent[0]!.tags[1]).toEqual(['amount', '21', invoice]);

      const receipt = await pay(invoice);
      const publisher = await connect('/');
      expect((await publisher.publish(receipt))[2]).toBe(true);
      const frame = await watcher.next((f) => f[0] === 'EVENT' && f[1] === 'receipts');
      expect(zap.onReceipt(frame[2] as NostrEvent)).toEqual({ ok: true, value: store.byInvoice(invoice)!.id });
      expect(await call).toEqual({ ok: true, value: { done: expect.any(Function) } });
      expect(zap.settled(store.byInvoice(invoice)!.id)).toBe(true);
      expect(zap.onReceipt(receipt)).toEqual({ ok: false, error: 'the invoice is already paid' });
      watcher.close();
      publisher.close();
    });
  });

  it('ignores receipts that are not for our invoice, not by the nostrPubkey, or not of our zap request', async () => {
    await inObject(async (sql) => {
      const { zap, store } = zapVerifier(sql);
      const gate = new VerifierGate(zap, store, DEFAULT_PAYMENT_CONFIG, host());
      const invoices: string[] = [];
      const ctx = { notify: async (t: EventTemplate) => void invoices.push(t.tags[1]![2]!), signal: new AbortController().signal };
      const cap = { serverId: 's', method: 'tools/call', name: 't' };
      const call = gate.requirePayment(requester(), cap, { price: '5', unit: 'sats' }, ctx);
      void gate.requirePayment(requester(), cap, { price: '5', unit: 'sats' }, ctx);
      // Each invoice is an LNURL round trip and a signed zap request: under load, well over a second.
      await vi.waitFor(() => expect(invoices).toHaveLength(2), { timeout: 15_000, interval: 20 });
      const [mine, other] = invoices as [string, string];
      const id = store.byInvoice(mine)!.id;

      const receipt = await pay(mine);
      const forger = generateSecretKey();
      const forged = plain(finalizeEvent({ kind: 9735, created_at: receipt.created_at, tags: receipt.tags, content: '' }, forger));
      expect(zap.onReceipt(forged)).toEqual({ ok: false, error: 'the receipt is not signed by the Lightning address nostrPubkey' });
      // The other invoice's receipt, relabelled with ours, is no longer signed by the server.
      const otherReceipt = await pay(other);
      const relabelled = { ...otherReceipt, tags: otherReceipt.tags.map((t) => (t[0] === 'bolt11' ? ['bolt11', mine] : t)) };
      expect(zap.onReceipt(relabelled)).toEqual({ ok: false, error: 'the receipt is invalid: event id does not match the event hash' });
      const stranger = plain(finalizeEvent({ kind: 9735, created_at: receipt.created_at, tags: [['bolt11', 'lnbc10n1qqqq']], content: '' }, forger));
      expect(zap.onReceipt(stranger)).toEqual({ ok: false, error: 'the receipt is not for an invoice of this bridge' });
      expect(zap.settled(id)).toBe(false);
      expect(gate.waiting).toBe(2);

      expect(zap.onReceipt(receipt)).toEqual({ ok: true, value: id });
      expect(await call).toEqual({ ok: true, value: { done: expect.any(Function) } });
      // A restarted bridge reads the zap request back from the row.
      const again = zapVerifier(sql).zap;
      expect(again.onReceipt(otherReceipt)).toEqual({ ok: true, value: store.byInvoice(other)!.id });
    });
  });

  it('a receipt after the request was cancelled or its invoice expired is recorded, and the operator told that nothing runs for it', async () => {
    await inObject(async (sql) => {
      const clock = { skew: 0 };
      const { zap, store } = zapVerifier(sql);
      const logs: string[] = [];
      const gate = new VerifierGate(zap, store, DEFAULT_PAYMENT_CONFIG, host(logs), () => Math.floor(Date.now() / 1000) + clock.skew);
      const invoices: string[] = [];
      const cap = { serverId: 's', method: 'tools/call', name: 't' };
      const call = (who: Requester, signal: AbortSignal) => gate.requirePayment(who, cap, { price: '5', unit: 'sats' }, { notify: async (t) => void invoices.push(t.tags[1]![2]!), signal });
      const cancelledBy = requester();
      const abort = new AbortController();
      const cancelled = call(cancelledBy, abort.signal);
      const expiredFor = requester();
      const expired = call(expiredFor, new AbortController().signal);
      await vi.waitFor(() => expect(invoices).toHaveLength(2), { timeout: 15_000, interval: 20 });
      abort.abort();
      expect(await cancelled).toEqual({ ok: false, error: { code: PAYMENT_RPC.NOT_PAID, message: 'the request was cancelled before the payment arrived' } });
      clock.skew = 601;
      await gate.onAlarm();
      expect(await expired).toEqual({ ok: false, error: { code: PAYMENT_RPC.NOT_PAID, message: 'payment not received within 600 s: the invoice expired' } });

      const [first, second] = invoices.map((i) => store.byInvoice(i)!) as [PaymentRow, PaymentRow];
      const [one, other] = first.request_id === cancelledBy.requestId ? [first, second] : [second, first];
      // The money arrived: it cannot be refused, so it is recorded, and the operator can refund it.
      expect(zap.onReceipt(await pay(one.invoice))).toEqual({ ok: true, value: one.id });
      expect(zap.onReceipt(await pay(other.invoice))).toEqual({ ok: true, value: other.id });
      expect(store.byId(one.id)).toMatchObject({ paid_at: expect.any(Number), cancelled_at: expect.any(Number), used_at: null });
      expect(store.byId(other.id)).toMatchObject({ paid_at: expect.any(Number), used_at: null });
      expect(logs).toEqual([
        `payment of 5 sats for invoice ${one.id} (request ${cancelledBy.requestId} of client ${cancelledBy.client}) arrived after its request was cancelled: no call runs for it; refund the client if due`,
        `payment of 5 sats for invoice ${other.id} (request ${expiredFor.requestId} of client ${expiredFor.client}) arrived after its invoice expired: no call runs for it; refund the client if due`,
      ]);
    });
  });

  // The client is told one generic reason (the LNURL server is a third party: its own `reason`
  // text, and which hosts the outbound policy refused, are not for strangers); the operator the rest.
  it.each<[string, string | undefined, number, string]>([
    ['plain', undefined, 21, 'the Lightning address does not support zaps (allowsNostr is not true)'],
    ['liar', undefined, 21, "the LNURL callback's invoice is for 22000 msat, not the 21000 msat asked for"],
    ['huge', undefined, 21, "the LNURL callback's invoice is 50000 characters; an invoice is at most 4096"],
    ['down', undefined, 21, 'the LNURL server answered HTTP 503'],
    ['nobody', undefined, 21, 'the LNURL server answered HTTP 404'],
    ['bridge', undefined, 200_000_000, '200000000000 msat is outside what the Lightning address accepts (1000–100000000000 msat)'],
    ['internal', 'http://10.1.2.3/.well-known/lnurlp/x', 21, `the LNURL server may not be dialled: refused: ${PLAIN_HTTP}`],
    ['metadata', 'https://169.254.169.254/.well-known/lnurlp/x', 21, expect.stringMatching(/^the LNURL server may not be dialled: refused: /) as unknown as string],
    ['no address', 'not an address', 21, 'a Lightning address is name@domain (or an https:// LNURL-pay URL)'],
  ])('refuses the call when the Lightning address is %s', async (name, address, sats, reason) => {
    await inObject(async (sql) => {
      const { zap, store } = zapVerifier(sql, name, address);
      const noInvoice: string[] = [];
      const gate = new VerifierGate(zap, store, DEFAULT_PAYMENT_CONFIG, host(undefined, noInvoice));
      const sent: EventTemplate[] = [];
      const result = await gate.requirePayment(requester(), { serverId: 's', method: 'tools/call', name: 't' }, { price: String(sats), unit: 'sats' }, {
        notify: async (t) => void sent.push(t),
        signal: new AbortController().signal,
      });
      expect(result).toEqual({ ok: false, error: { code: PAYMENT_RPC.UNAVAILABLE, message: 'payment unavailable: the Lightning address could not make an invoice' } });
      expect(noInvoice).toEqual([reason]);
      expect(sent).toEqual([]);
      expect(store.pendingCounts('x', 0).total).toBe(0);
    });
  });

  it("dials a callback on another origin than the pay endpoint without the operator's exceptions: a listed internal host is not reached, the client learns nothing of it", async () => {
    await inObject(async (sql) => {
      const before = await asideHits();
      // The pay endpoint (127.0.0.1, listed as 127.0.0.1:*) names a callback on another port of
      // 127.0.0.1: listed too, but chosen by the LNURL server, not by the operator.
      const { zap, store } = zapVerifier(sql, 'aside');
      const noInvoice: string[] = [];
      const gate = new VerifierGate(zap, store, DEFAULT_PAYMENT_CONFIG, host(undefined, noInvoice));
      const result = await gate.requirePayment(requester(), { serverId: 's', method: 'tools/call', name: 't' }, { price: '21', unit: 'sats' }, {
        notify: async () => expect.unreachable('no invoice'),
        signal: new AbortController().signal,
      });
      expect(result).toEqual({ ok: false, error: { code: PAYMENT_RPC.UNAVAILABLE, message: NO_INVOICE } });
      expect(NO_INVOICE).toBe('payment unavailable: the Lightning address could not make an invoice');
      expect(noInvoice).toEqual([`the LNURL server may not be dialled: refused: ${PLAIN_HTTP}`]);
      expect(await asideHits()).toBe(before);
      // On the endpoint's own origin the exceptions apply: the same server's `bridge` address works.
      expect((await zapVerifier(sql).zap.invoice({ sats: 21, ...requester() })).ok).toBe(true);
    });
  });
});

describe('BridgePayments with a Lightning address', { timeout: 60_000 }, () => {
  it('chooses the zap verifier, subscribes to receipts paying the provider, and settles the call through one', async () => {
    const stub = env.API_STATE.get(env.API_STATE.idFromName(`payments-bridge-${randomHex(8)}`));
    await runInDurableObject(stub, async (_i, state) => {
      const payments = new BridgePayments({
        storage: state.storage,
        env: { ...env, EDGESTR_LN_ADDRESS: `${LNURL}/.well-known/lnurlp/bridge`, EDGESTR_PAYMENT_EXPIRY: '600' },
        identity: () => ({ provider: PROVIDER, owner: randomHex() }),
        relays: () => [RELAY],
        sign: async (t) => plain(finalizeEvent(t, PROVIDER_SK)),
        verifier: async () => nobleVerifier,
      });
      expect(await payments.receiptFilters()).toEqual([{ kinds: [9735], '#p': [PROVIDER], since: expect.any(Number) }]);
      const sent: EventTemplate[] = [];
      const call = payments.requirePayment(requester(), { serverId: 's', method: 'tools/call', name: 't' }, { price: '21', unit: 'sats' }, {
        notify: async (t) => void sent.push(t),
        signal: new AbortController().signal,
      });
      await vi.waitFor(() => expect(sent.length).toBeGreaterThan(0), { timeout: 15_000, interval: 20 });
      const invoice = sent[0]!.tags[1]![2]!;
      expect(invoice).toMatch(/^lnbc210n1/);
      expect(await payments.payLocal(invoice)).toEqual({ ok: false, error: 'local payments are off' });
      expect((await payments.onReceipt(await pay(invoice))).ok).toBe(true);
      expect(await call).toEqual({ ok: true, value: { done: expect.any(Function) } });
      await state.storage.deleteAlarm();
    });
  });

  it("a paid call's public receipt names neither the server, nor the method, nor the capability (what a private server's client called)", async () => {
    // The bridge's own provider key and a private server's id (its only secret, BRIDGE.md): a
    // stranger reads the provider from the public shard's NIP-11 (bridge_providers).
    const sk = generateSecretKey();
    const provider = getPublicKey(sk);
    const serverId = `acme-${randomHex(8)}`;
    const stub = env.API_STATE.get(env.API_STATE.idFromName(`payments-private-${randomHex(8)}`));
    await runInDurableObject(stub, async (_i, state) => {
      const payments = new BridgePayments({
        storage: state.storage,
        env: { ...env, EDGESTR_LN_ADDRESS: `${LNURL}/.well-known/lnurlp/bridge`, EDGESTR_PAYMENT_EXPIRY: '600' },
        identity: () => ({ provider, owner: randomHex() }),
        relays: () => [RELAY],
        sign: async (t) => plain(finalizeEvent(t, sk)),
        verifier: async () => nobleVerifier,
      });
      // What the dispatcher hands the gate for a wrapped call (the rumor's id) to the private server:
      // a tool by its name, a resource by the exact uri the client sent.
      const calls = [
        { method: 'tools/call', name: 'lookup' },
        { method: 'resources/read', name: 'file:///deals/acquisition-target.md' },
      ];
      for (const capability of calls) {
        const sent: EventTemplate[] = [];
        const call = payments.requirePayment(requester(), { serverId, ...capability }, { price: '21', unit: 'sats' }, {
          notify: async (t) => void sent.push(t),
          signal: new AbortController().signal,
        });
        await vi.waitFor(() => expect(sent.length).toBeGreaterThan(0), { timeout: 15_000, interval: 20 });
        // The LNURL server publishes the receipt to the zap request's relays, the public shard among them.
        const receipt = await pay(sent[0]!.tags[1]![2]!);
        const publisher = await connect('/');
        expect((await publisher.publish(receipt))[2]).toBe(true);
        publisher.close();
        expect((await payments.onReceipt(receipt)).ok).toBe(true);
        expect(await call).toEqual({ ok: true, value: { done: expect.any(Function) } });
      }
      // A stranger, unauthenticated, on the public shard.
      const stranger = await connect('/');
      const found = await stranger.req('receipts', { kinds: [9735], '#p': [provider] });
      stranger.close();
      expect(found.closed).toBeUndefined();
      expect(found.events).toHaveLength(2);
      for (const receipt of found.events) {
        const description = receipt.tags.find((t) => t[0] === 'description')![1]!;
        expect(JSON.parse(description)).toMatchObject({ kind: 9734, pubkey: provider, content: 'DVMCP payment' });
        for (const secret of [serverId, 'lookup', 'file:///deals/acquisition-target.md', 'acquisition', 'tools/call', 'resources/read']) {
          expect(description).not.toContain(secret);
        }
      }
      await state.storage.deleteAlarm();
    });
  });

  it('tells the operator why the Lightning address made no invoice in one line a minute; each client only NO_INVOICE', async () => {
    const stub = env.API_STATE.get(env.API_STATE.idFromName(`payments-no-invoice-${randomHex(8)}`));
    const warn = vi.spyOn(console, 'warn');
    try {
      await runInDurableObject(stub, async (_i, state) => {
        const payments = new BridgePayments({
          storage: state.storage,
          env: { ...env, EDGESTR_LN_ADDRESS: `${LNURL}/.well-known/lnurlp/aside`, EDGESTR_PAYMENT_EXPIRY: '600' },
          identity: () => ({ provider: PROVIDER, owner: randomHex() }),
          relays: () => [RELAY],
          sign: async (t) => plain(finalizeEvent(t, PROVIDER_SK)),
          verifier: async () => nobleVerifier,
        });
        for (let i = 0; i < 3; i++) {
          const result = await payments.requirePayment(requester(), { serverId: 's', method: 'tools/call', name: 't' }, { price: '21', unit: 'sats' }, {
            notify: async () => expect.unreachable('no invoice'),
            signal: new AbortController().signal,
          });
          expect(result).toEqual({ ok: false, error: { code: PAYMENT_RPC.UNAVAILABLE, message: NO_INVOICE } });
        }
        await payments.onAlarm(); // the next line is due a minute after the first
        const reason = JSON.stringify(`the LNURL server may not be dialled: refused: ${PLAIN_HTTP}`);
        expect(warn.mock.calls.map((c) => String(c[0])).filter((line) => line.startsWith(`bridge: provider ${PROVIDER}: `))).toEqual([
          `bridge: provider ${PROVIDER}: 1 priced call answered "the Lightning address could not make an invoice" since the last report (1 ${reason}); reported at most once a minute`,
        ]);
        await state.storage.deleteAlarm();
      });
    } finally {
      warn.mockRestore();
    }
  });

  it('refuses priced calls when no verifier is configured (production, no Lightning address)', async () => {
    const stub = env.API_STATE.get(env.API_STATE.idFromName(`payments-none-${randomHex(8)}`));
    await runInDurableObject(stub, async (_i, state) => {
      const payments = new BridgePayments({
        storage: state.storage,
        env: { EDGESTR_ENV: 'production' },
        identity: () => ({ provider: PROVIDER, owner: randomHex() }),
        relays: () => [RELAY],
        sign: async (t) => plain(finalizeEvent(t, PROVIDER_SK)),
        verifier: async () => nobleVerifier,
      });
      const result = await payments.requirePayment(requester(), { serverId: 's', method: 'tools/call', name: 't' }, { price: '21', unit: 'sats' }, {
        notify: async () => undefined,
        signal: new AbortController().signal,
      });
      expect(result).toEqual({ ok: false, error: { code: -32603, message: 'payment not configured: t of s is priced and this bridge has no payment verifier' } });
      expect(await payments.receiptFilters()).toEqual([]);
      const receipt = plain(finalizeEvent({ kind: 9735, created_at: 1_800_000_000, tags: [['p', PROVIDER]], content: '' }, generateSecretKey()));
      expect(await payments.onReceipt(receipt)).toEqual({ ok: false, error: 'this bridge does not take zaps' });
      expect(await payments.payLocal('lnbcrt210n1x')).toEqual({ ok: false, error: 'local payments are off' });
    });
  });
});
