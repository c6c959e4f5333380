// Replayed DVMCP requests: anyone can read a plain 25910 on the public shard and publish it again
// while it is fresh. The bridge must run each request once, also after it restarted (its in-memory
// state gone, as after an eviction), against a counting upstream (the fixture's /mcp-expire); the
// record of handled ids (workers/common/seen-ids.ts) is pruned past the freshness window, and a
// request dated ahead of it (kept for later use) is not run. A request that a restart interrupted
// (a priced call waiting for its payment) still runs once when its client sends it again, and so
// does a paid call whose answer a restart kept from being published (the accepted repeat); paid
// once the request is too old to be sent again (the clock moved on), it runs nothing and the
// operator is told once to refund it, as for a paid call a restart cut off upstream that nobody sent
// again (once it can no longer run), one its client cancelled while it ran upstream, and one whose
// answer the relay refused (that call is not served; sent again, it does not run). Gift
// wraps are read from two days back (their dates are randomized into the past): one the bridge
// answered comes back on each resubscription and is not run again.
import { env, runDurableObjectAlarm, runInDurableObject, SELF } from 'cloudflare:test';
import { beforeAll, describe, expect, inject, it, vi } from 'vitest';
import type { NostrEvent } from '../../src/shared/event.js';
import { KIND } from '../../src/shared/kinds.js';
import { ConversationKeyCache } from '../../src/shared/nip44.js';
import { giftWrap, makeRumor } from '../../src/shared/nip59.js';
import { SeenIds } from '../../workers/common/seen-ids.js';
import { bridgeReady, directBridge, DvmcpClient, everythingUrl, restartBridge as restartBridgeOf, whilePublicShardRefuses } from './bridge-helpers.js';
import { BASE, now, randomHex } from './helpers.js';

const fixtureUrl = (): string => inject('toolsFixtureUrl');
const bucket = `bridge-replay-${randomHex(4)}`;

/** The tools/call requests the upstream received. */
async function upstreamCalls(): Promise<number> {
  return ((await (await fetch(`${fixtureUrl()}/mcp-expire/stats?bucket=${bucket}`)).json()) as { calls: number }).calls;
}

let provider: string;
let owner: string;

const bridgeStub = () => env.BRIDGE.get(env.BRIDGE.idFromName(owner));

/** The ids in the bridge's record of handled requests. */
const handledIds = (): Promise<string[]> => runInDurableObject(bridgeStub(), (_i, state) => state.storage.sql.exec<{ id: string }>('SELECT id FROM seen').toArray().map((r) => r.id));

/** Waits (at most ~2 s) until request `id` is recorded as handled (when its handling ended, just after its answer). */
async function recorded(id: string): Promise<void> {
  for (let i = 0; i < 100 && !(await handledIds()).includes(id); i++) await new Promise((r) => setTimeout(r, 20));
  expect(await handledIds()).toContain(id);
}

/** An eviction: in-memory state is gone, storage stays; the watchdog reconnects. */
const restartBridge = (): Promise<void> => restartBridgeOf(owner, provider);

type PaymentTimes = { paid_at: number | null; used_at: number | null; served_at: number | null; dropped_at: number | null };
/** The payment row of request `id`: when it was paid, spent on a call, that call answered, or the payment given up (logged for a refund). */
const paymentOf = (id: string): Promise<PaymentTimes | undefined> =>
  runInDurableObject(bridgeStub(), (_i, state) => state.storage.sql.exec<PaymentTimes>('SELECT paid_at, used_at, served_at, dropped_at FROM payments WHERE request_id = ?', id).toArray()[0]);

/** Sets the bridge's EDGESTR_PAYMENT_EXPIRY (read when its payments are built, after a restart); the value it had. */
const setPaymentExpiry = (value: string | undefined): Promise<string | undefined> =>
  runInDurableObject(bridgeStub(), (i) => {
    const e = (i as unknown as { env: Record<string, string | undefined> }).env;
    const before = e.EDGESTR_PAYMENT_EXPIRY;
    e.EDGESTR_PAYMENT_EXPIRY = value;
    return before;
  });

/** The invoice of the payment-required notification to request `id`. */
async function invoiceFor(c: DvmcpClient, id: string): Promise<string> {
  const note = await c.sock.next((f) => f[0] === 'EVENT' && (f[2] as NostrEvent).kind === KIND.DVMCP_NOTIFICATION && (f[2] as NostrEvent).tags.some((t) => t[0] === 'e' && t[1] === id));
  return (note[2] as NostrEvent).tags.find((t) => t[0] === 'amount')![2]!;
}

/** 26910 answers to request `id` still in the frames of `c` (not yet taken by answer()). */
const answersLeft = (c: DvmcpClient, id: string): unknown[] =>
  c.sock.frames.filter((f) => f[0] === 'EVENT' && (f[2] as NostrEvent).kind === KIND.DVMCP_RESPONSE && (f[2] as NostrEvent).tags.some((t) => t[0] === 'e' && t[1] === id));

beforeAll(async () => {
  ({ provider, owner } = await directBridge([
    { id: 'count', url: `${fixtureUrl()}/mcp-expire?bucket=${bucket}&keep=1`, public: false },
    { id: 'priced', url: everythingUrl(), public: false, prices: { echo: { price: '21', unit: 'sats' } } },
    { id: 'slow', url: `${fixtureUrl()}/mcp-paged`, public: false, prices: { slow: { price: '21', unit: 'sats' } } },
  ]));
  await bridgeReady(provider);
});

describe('bridge: replayed requests', () => {
  it('a plain tools/call published again after the bridge restarted does not run again', async () => {
    const victim = await DvmcpClient.open(provider);
    const call = victim.request('tools/call', { name: 'ping', arguments: {} }, { s: 'count' });
    const first = await victim.answer(await victim.send(call));
    expect(first.result.ok).toBe(true);
    expect(await upstreamCalls()).toBe(1);
    await recorded(call.id);
    await restartBridge();

    // The attacker publishes the victim's event again, then a call of its own (the sentinel: once it is answered, the replay was handled).
    const attacker = await DvmcpClient.open(provider);
    const replayed = await attacker.sock.publish(call);
    expect(replayed[2]).toBe(true);
    const own = await attacker.answer(await attacker.send(attacker.request('tools/call', { name: 'ping', arguments: {} }, { s: 'count' })));
    expect(own.result.ok).toBe(true);
    expect(await upstreamCalls()).toBe(2);
    // The victim got no second answer (its first was taken by answer()).
    expect(answersLeft(victim, call.id)).toEqual([]);
    victim.close();
    attacker.close();
  });

  it('a gift-wrapped call whose wrap is dated an hour back is answered once: the two-day lookback brings it back after a restart and it does not run again', async () => {
    const c = await DvmcpClient.open(provider);
    const before = await upstreamCalls();
    const call = c.request('tools/call', { name: 'ping', arguments: {} }, { s: 'count' });
    const rumor = makeRumor({ pubkey: c.k.pk, created_at: call.created_at, kind: call.kind, tags: call.tags, content: call.content });
    const wrap = giftWrap(rumor, c.k.sk, provider, new ConversationKeyCache(4), now() - 3600, { kind: KIND.GIFT_WRAP, exactTime: true });
    expect((await c.sock.publish(wrap))[2]).toBe(true);
    expect((await c.answer(rumor.id)).result.ok).toBe(true);
    expect(await upstreamCalls()).toBe(before + 1);
    await recorded(rumor.id);
    await restartBridge();

    // The sentinel: once it is answered, the replayed wrap was handled (the stored wrap came first).
    const own = await c.answer(await c.send(c.request('tools/call', { name: 'ping', arguments: { sentinel: true } }, { s: 'count' })));
    expect(own.result.ok).toBe(true);
    expect(await upstreamCalls()).toBe(before + 2);
    // No second answer (the first was taken by answer()).
    const wrappedAnswers = c.sock.frames.filter((f) => f[0] === 'EVENT' && (f[2] as NostrEvent).kind === KIND.GIFT_WRAP && c.opened(f[2] as NostrEvent)?.tags.some((t) => t[0] === 'e' && t[1] === rumor.id));
    expect(wrappedAnswers).toEqual([]);
    c.close();
  });

  it('a request dated more than a minute ahead is not run (it could be replayed until that date)', async () => {
    const c = await DvmcpClient.open(provider);
    const before = await upstreamCalls();
    const ahead = c.request('tools/call', { name: 'ping', arguments: {} }, { s: 'count', created_at: now() + 600 });
    await c.send(ahead);
    const sentinel = await c.call('tools/call', { name: 'ping', arguments: { n: 1 } }, { s: 'count' });
    expect(sentinel.result.ok).toBe(true);
    expect(await upstreamCalls()).toBe(before + 1);
    expect(await handledIds()).not.toContain(ahead.id);
    c.close();
  });

  it('handled ids are pruned past the window: two by each new request, the rest by the watchdog', async () => {
    const t = now();
    await runInDurableObject(bridgeStub(), (_i, state) => {
      const seen = new SeenIds(state.storage.sql);
      for (let i = 0; i < 5; i++) seen.add(`expired-${i}`, t - 121 - i);
      seen.add('in-window', t - 100);
    });
    const expired = async (): Promise<number> => (await handledIds()).filter((id) => id.startsWith('expired-')).length;
    expect(await expired()).toBe(5);
    const c = await DvmcpClient.open(provider);
    const id = await c.send(c.request('ping', { n: 2 }, { s: 'count' }));
    expect((await c.answer(id)).content).toBe('{}');
    await recorded(id);
    expect(await expired()).toBe(3);
    await runDurableObjectAlarm(bridgeStub());
    expect(await expired()).toBe(0);
    expect(await handledIds()).toEqual(expect.arrayContaining(['in-window', id]));
    c.close();
  });

  it('a priced call a restart interrupted while it waited for payment runs once when its client sends it again', async () => {
    const c = await DvmcpClient.open(provider);
    const call = c.request('tools/call', { name: 'echo', arguments: { message: 'paid once' } }, { s: 'priced' });
    await c.send(call);
    const note = await c.sock.next((f) => f[0] === 'EVENT' && (f[2] as NostrEvent).kind === KIND.DVMCP_NOTIFICATION && (f[2] as NostrEvent).tags.some((t) => t[0] === 'e' && t[1] === call.id));
    const invoice = (note[2] as NostrEvent).tags.find((t) => t[0] === 'amount')![2]!;
    await restartBridge();
    const paid = await SELF.fetch(`${BASE}/api/bridge/pay`, { method: 'POST', body: JSON.stringify({ invoice }) });
    expect(paid.status).toBe(200);
    await c.send(call);
    const answer = await c.answer(call.id);
    expect(answer.result.ok && answer.result.value.content).toEqual([{ type: 'text', text: 'Echo: paid once' }]);
    // Once more: it was handled, so it is ignored (the gate would answer "already served"); a ping after it is answered.
    await recorded(call.id);
    await c.send(call);
    expect((await c.call('ping', { n: 3 }, { s: 'priced' })).content).toBe('{}');
    expect(answersLeft(c, call.id)).toEqual([]);
    c.close();
  });

  it('a priced call a restart dropped, paid 90 s later (too late to send the request again): no answer, and the operator is told once to refund it', async () => {
    // Invoices live 600 s, as by default (the tests' 5 s would expire it first), from the payments the restart builds.
    const expiry = await setPaymentExpiry('600');
    await restartBridge();
    vi.useFakeTimers({ toFake: ['Date'] }); // the bridge's clock too (same isolate): moved on 90 s below
    vi.setSystemTime(Date.now());
    const warn = vi.spyOn(console, 'warn');
    const c = await DvmcpClient.open(provider);
    try {
      const call = c.request('tools/call', { name: 'echo', arguments: { message: 'paid too late' } }, { s: 'priced' });
      await c.send(call);
      const invoice = await invoiceFor(c, call.id);
      await restartBridge();
      vi.setSystemTime(Date.now() + 90_000);
      const paid = await SELF.fetch(`${BASE}/api/bridge/pay`, { method: 'POST', body: JSON.stringify({ invoice }) });
      expect(paid.status).toBe(200);
      const id = await runInDurableObject(bridgeStub(), (_i, state) => state.storage.sql.exec<{ id: string }>('SELECT id FROM payments WHERE request_id = ?', call.id).one().id);
      const line = `bridge: payment of 21 sats for invoice ${id} (request ${call.id} of client ${c.k.pk}) arrived after a restart dropped its request: no call runs for it; refund the client if due`;
      const refundLines = (): string[] => warn.mock.calls.map((args) => String(args[0])).filter((l) => l.includes(`request ${call.id}`));
      expect(refundLines()).toEqual([line]);
      // Sent again now, it is ignored (older than 60 s); a ping after it is answered, and nothing answers the call.
      await c.send(call);
      expect((await c.call('ping', { n: 5 }, { s: 'priced' })).content).toBe('{}');
      expect(answersLeft(c, call.id)).toEqual([]);
      await runDurableObjectAlarm(bridgeStub());
      expect(refundLines()).toEqual([line]);
      expect(await paymentOf(call.id)).toMatchObject({ paid_at: expect.any(Number), used_at: null, served_at: null, dropped_at: expect.any(Number) });
    } finally {
      c.close();
      warn.mockRestore();
      vi.useRealTimers();
      await setPaymentExpiry(expiry);
      await restartBridge();
    }
  });

  it('a paid call a restart cut off upstream runs again when its client sends it again; once answered, a re-send is ignored', async () => {
    const c = await DvmcpClient.open(provider);
    const call = c.request('tools/call', { name: 'slow', arguments: { ms: 4000 } }, { s: 'slow' });
    await c.send(call);
    const paid = await SELF.fetch(`${BASE}/api/bridge/pay`, { method: 'POST', body: JSON.stringify({ invoice: await invoiceFor(c, call.id) }) });
    expect(paid.status).toBe(200);
    await new Promise((r) => setTimeout(r, 800));
    // Paid and gone upstream, not answered: the restart loses the answer.
    expect(await paymentOf(call.id)).toMatchObject({ paid_at: expect.any(Number), used_at: expect.any(Number), served_at: null });
    await restartBridge();
    expect(answersLeft(c, call.id)).toEqual([]);
    await c.send(call);
    const answer = await c.answer(call.id);
    expect(answer.result.ok && answer.result.value.content).toEqual([{ type: 'text', text: 'finally' }]);
    await recorded(call.id);
    expect(await paymentOf(call.id)).toMatchObject({ served_at: expect.any(Number) });
    // Answered: sent again (after another restart too) it is ignored; a ping after it is answered.
    await restartBridge();
    await c.send(call);
    expect((await c.call('ping', { n: 4 }, { s: 'slow' })).content).toBe('{}');
    expect(answersLeft(c, call.id)).toEqual([]);
    c.close();
  }, 30_000);

  it('a paid call a restart cut off upstream, never sent again: once it can no longer run (its longest call and the freshness window after it went upstream), the operator is told once to refund it', async () => {
    vi.useFakeTimers({ toFake: ['Date'] }); // the bridge's clock too (same isolate): moved on 361 s below
    vi.setSystemTime(Date.now());
    const warn = vi.spyOn(console, 'warn');
    const c = await DvmcpClient.open(provider);
    try {
      const call = c.request('tools/call', { name: 'slow', arguments: { ms: 4000 } }, { s: 'slow' });
      await c.send(call);
      const paid = await SELF.fetch(`${BASE}/api/bridge/pay`, { method: 'POST', body: JSON.stringify({ invoice: await invoiceFor(c, call.id) }) });
      expect(paid.status).toBe(200);
      await new Promise((r) => setTimeout(r, 800));
      expect(await paymentOf(call.id)).toMatchObject({ used_at: expect.any(Number), served_at: null });
      await restartBridge();
      const id = await runInDurableObject(bridgeStub(), (_i, state) => state.storage.sql.exec<{ id: string }>('SELECT id FROM payments WHERE request_id = ?', call.id).one().id);
      const line = `bridge: payment of 21 sats for invoice ${id} (request ${call.id} of client ${c.k.pk}) arrived before its call was cut off (the bridge restarted while it ran): no answer was sent; refund the client if due`;
      const refundLines = (): string[] => warn.mock.calls.map((args) => String(args[0])).filter((l) => l.includes(`request ${call.id}`));
      await runDurableObjectAlarm(bridgeStub());
      expect(refundLines()).toEqual([]); // a re-send could still run it
      vi.setSystemTime(Date.now() + 361_000);
      await runDurableObjectAlarm(bridgeStub());
      await runDurableObjectAlarm(bridgeStub());
      expect(refundLines()).toEqual([line]);
      expect(await paymentOf(call.id)).toMatchObject({ served_at: null, dropped_at: expect.any(Number) });
      expect(answersLeft(c, call.id)).toEqual([]);
    } finally {
      c.close();
      warn.mockRestore();
      vi.useRealTimers();
      await restartBridge();
    }
  }, 30_000);

  it('a paid call its client cancels while it runs upstream: no answer, the operator is told once to refund it, and sent again it does not run', async () => {
    const warn = vi.spyOn(console, 'warn');
    const c = await DvmcpClient.open(provider);
    try {
      const call = c.request('tools/call', { name: 'slow', arguments: { ms: 2000 } }, { s: 'slow' });
      await c.send(call);
      const paid = await SELF.fetch(`${BASE}/api/bridge/pay`, { method: 'POST', body: JSON.stringify({ invoice: await invoiceFor(c, call.id) }) });
      expect(paid.status).toBe(200);
      await vi.waitFor(async () => expect(await paymentOf(call.id)).toMatchObject({ used_at: expect.any(Number) }), { timeout: 5000, interval: 50 });
      await c.send(c.sign21316('notifications/cancel', call.id));
      const id = await runInDurableObject(bridgeStub(), (_i, state) => state.storage.sql.exec<{ id: string }>('SELECT id FROM payments WHERE request_id = ?', call.id).one().id);
      const line = `bridge: payment of 21 sats for invoice ${id} (request ${call.id} of client ${c.k.pk}) arrived before its call was cut off (cancelled by the client): no answer was sent; refund the client if due`;
      const refundLines = (): string[] => warn.mock.calls.map((args) => String(args[0])).filter((l) => l.includes(`request ${call.id}`));
      await vi.waitFor(() => expect(refundLines()).toEqual([line]), { timeout: 5000, interval: 50 });
      expect(await paymentOf(call.id)).toMatchObject({ served_at: null, dropped_at: expect.any(Number) });
      await recorded(call.id);
      await c.send(call);
      expect((await c.call('ping', { n: 6 }, { s: 'slow' })).content).toBe('{}');
      await new Promise((r) => setTimeout(r, 2500)); // past the slow call's 2 s
      await runDurableObjectAlarm(bridgeStub());
      expect(refundLines()).toEqual([line]);
      expect(answersLeft(c, call.id)).toEqual([]);
    } finally {
      c.close();
      warn.mockRestore();
    }
  }, 30_000);

  it('a paid call whose answer the relay refuses is not served: the operator is told once to refund it', async () => {
    const c = await DvmcpClient.open(provider);
    try {
      const call = c.request('tools/call', { name: 'slow', arguments: { ms: 1500 } }, { s: 'slow' });
      await c.send(call);
      const paid = await SELF.fetch(`${BASE}/api/bridge/pay`, { method: 'POST', body: JSON.stringify({ invoice: await invoiceFor(c, call.id) }) });
      expect(paid.status).toBe(200);
      const refundLines = (lines: string[]): string[] => lines.filter((l) => l.includes(`request ${call.id}`));
      const logged = await whilePublicShardRefuses((sofar) => vi.waitFor(() => expect(refundLines(sofar())).toHaveLength(1), { timeout: 10_000, interval: 50 }));
      const id = await runInDurableObject(bridgeStub(), (_i, state) => state.storage.sql.exec<{ id: string }>('SELECT id FROM payments WHERE request_id = ?', call.id).one().id);
      const relay = `${BASE.replace(/^http/, 'ws')}/`; // the public shard, where the request came from
      expect(refundLines(logged)).toEqual([
        `bridge: payment of 21 sats for invoice ${id} (request ${call.id} of client ${c.k.pk}) arrived before its call was cut off (its answer was not published: ${relay} refused it: invalid: created_at is too far in the future): no answer was sent; refund the client if due`,
      ]);
      expect(await paymentOf(call.id)).toMatchObject({ used_at: expect.any(Number), served_at: null, dropped_at: expect.any(Number) });
      expect(answersLeft(c, call.id)).toEqual([]);
    } finally {
      c.close();
    }
  }, 30_000);
});
