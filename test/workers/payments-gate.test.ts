// The payment gate (workers/bridge/payments-gate.ts) over the local verifier (payments-local.ts),
// on a real Durable Object SQLite store (a fresh object of the ApiState class hosts the payments
// table): payment-required → paid → the call runs; expiry answered NOT_PAID when the alarm runs;
// caps per client and per bridge; a paid row spent once; rows that survive a restart, and a
// payment after a restart dropped its call (run when re-sent in time, else logged once for a
// refund); a paid call cut off before its answer was published (logged once for a refund: at once
// when its end is told, by the alarm when a restart cut it off); prices the gate refuses; capability names it cannot store (a lone surrogate);
// cancellation, and the release of an invoice whose payment request could not be sent. The
// Bridge's own alarm and dispatcher are exercised in
// payments-bridge.test.ts; here the gate's host records the wake-ups it asks for. Pure parts
// (invoice format, configuration, prices) are workers/bridge/payments.test.ts.
import { env, runInDurableObject } from 'cloudflare:test';
import { describe, expect, it } from 'vitest';
import { KIND } from '../../src/shared/kinds.js';
import type { EventTemplate } from '../../src/shared/relay-types.js';
import { RPC, type Price, type Requester } from '../../src/shared/dvmcp.js';
import { PaymentStore, type PaymentRow } from '../../workers/bridge/payments-store.js';
import { LocalVerifier } from '../../workers/bridge/payments-local.js';
import { VerifierGate, type GateHost } from '../../workers/bridge/payments-gate.js';
import { DEFAULT_PAYMENT_CONFIG, PAYMENT_RPC, type PaymentConfig } from '../../workers/bridge/payments.js';
import type { CallEnd, PaymentContext, PricedCapability } from '../../workers/common/dvmcp-server/payment-gate.js';
import { randomHex } from './helpers.js';

const OWNER = 'a1'.repeat(32);
const CAP: PricedCapability = { serverId: 'everything', method: 'tools/call', name: 'echo' };
const SATS: Price = { price: '21', unit: 'sats' };

/** A gate, its verifier and store on a fresh Durable Object's SQLite, a settable clock, and what it asked for. */
async function withGate<T>(config: Partial<PaymentConfig>, body: (g: Harness) => Promise<T>, logs?: string[]): Promise<T> {
  const stub = env.API_STATE.get(env.API_STATE.idFromName(`payments-test-${randomHex(8)}`));
  return runInDurableObject(stub, async (_instance, state) => body(harness(state.storage.sql, { ...DEFAULT_PAYMENT_CONFIG, ...config }, undefined, logs)));
}

interface Harness {
  gate: VerifierGate;
  local: LocalVerifier;
  store: PaymentStore;
  clock: { now: number };
  wakes: number[];
  /** A new gate over the same storage (what a restarted Durable Object builds). */
  restart(): Harness;
  call(requester: Requester, price?: Price, capability?: PricedCapability): { result: ReturnType<VerifierGate['requirePayment']>; sent: EventTemplate[]; abort: AbortController };
}

/** The gate's log lines go to `logs` when given; without, any line fails the test. */
function harness(sql: SqlStorage, config: PaymentConfig, clock = { now: 1_800_000_000 }, logs?: string[]): Harness {
  const store = new PaymentStore(sql);
  const local = new LocalVerifier(OWNER, store, config.expirySeconds, () => clock.now);
  const wakes: number[] = [];
  const host: GateHost = {
    wakeAt: async (at) => void wakes.push(at),
    log: (line) => (logs ? void logs.push(line) : expect.unreachable(line)),
    noInvoice: (reason) => expect.unreachable(reason), // the local verifier always makes one
  };
  const gate = new VerifierGate(local, store, config, host, () => clock.now);
  return {
    gate,
    local,
    store,
    clock,
    wakes,
    restart: () => harness(sql, config, clock, logs),
    call(requester, price = SATS, capability = CAP) {
      const sent: EventTemplate[] = [];
      const abort = new AbortController();
      const ctx: PaymentContext = { notify: async (t) => void sent.push(t), signal: abort.signal };
      return { result: gate.requirePayment(requester, capability, price, ctx), sent, abort };
    },
  };
}

const requester = (client = randomHex()): Requester => ({ requestId: randomHex(), client });
/** Lets the gate's awaits (invoice, insert, wake, notify) run. */
const settle = async (): Promise<void> => {
  for (let i = 0; i < 5; i++) await Promise.resolve();
};
const invoiceOf = (t: EventTemplate): string => t.tags.find((x) => x[0] === 'amount')![2]!;
/** A call let through (its caller then reports how it ended). */
const RUNS = { ok: true, value: { done: expect.any(Function) } };
/** A re-sent request whose payment was given up and logged for a refund. */
const DROPPED = "this request's payment arrived after the bridge had given the request up, so it does not run; ask the bridge's operator for a refund, or send a new request";
const ALREADY_SERVED = { ok: false, error: { code: PAYMENT_RPC.NOT_PAID, message: 'this paid request was already served; send a new request' } };
/** A re-sent request whose paid call was cut off before its answer was published, and logged for a refund. */
const CUT_OFF = "this request's call was cut off before its answer was sent, so it does not run again; ask the bridge's operator for a refund, or send a new request";
/** The line a paid call cut off (`why`) before its answer was published is logged with, once. */
const cutOffLine = (row: PaymentRow, who: Requester, why: string): string =>
  `payment of ${row.sats} sats for invoice ${row.id} (request ${who.requestId} of client ${who.client}) arrived before its call was cut off (${why}): no answer was sent; refund the client if due`;
/** Ends the call a result let through: answered, or cut off for `why`. */
function ended(r: Awaited<ReturnType<VerifierGate['requirePayment']>>, end: CallEnd): void {
  if (!r.ok) throw new Error(`the call was refused: ${r.error.message}`);
  r.value.done(end);
}
const ANSWERED: CallEnd = { answered: true };

describe('VerifierGate with the local verifier', () => {
  it('sends payment-required, keeps a durable row, and lets the call run once paid', async () => {
    await withGate({}, async (h) => {
      const who = requester();
      const { result, sent } = h.call(who);
      await settle();
      expect(sent).toHaveLength(1);
      const note = sent[0]!;
      expect(note.kind).toBe(KIND.DVMCP_NOTIFICATION);
      expect(note.content).toBe('');
      const invoice = invoiceOf(note);
      expect(note.tags).toEqual([['status', 'payment-required'], ['amount', '21', invoice], ['e', who.requestId], ['p', who.client]]);
      const row = h.store.byInvoice(invoice)!;
      expect(row).toMatchObject({ request_id: who.requestId, client: who.client, server: 'everything', capability: 'tools/call echo', sats: 21, created: h.clock.now, expires: h.clock.now + 600, paid_at: null, used_at: null });
      expect(h.wakes).toEqual([h.clock.now + 600]);
      expect(h.gate.waiting).toBe(1);

      h.clock.now += 5;
      expect(h.local.pay(invoice).ok).toBe(true);
      expect(await result).toEqual(RUNS);
      expect(h.store.byId(row.id)).toMatchObject({ paid_at: h.clock.now, used_at: h.clock.now });
      expect(h.local.pay(invoice)).toEqual({ ok: false, error: 'invoice already paid' });
      // Another invoice: the last character changed (to one it is not: 1 invoice in 32 ends in q).
      const other = `${invoice.slice(0, -1)}${invoice.endsWith('q') ? 'p' : 'q'}`;
      expect(h.local.pay(other)).toEqual({ ok: false, error: 'unknown invoice' });
    });
  });

  it('answers an unpaid call NOT_PAID when its invoice expires, and refuses to pay it after', async () => {
    await withGate({ expirySeconds: 2 }, async (h) => {
      const { result, sent } = h.call(requester());
      await settle();
      const invoice = invoiceOf(sent[0]!);
      h.clock.now += 1;
      await h.gate.onAlarm(); // not yet
      expect(h.gate.waiting).toBe(1);
      h.clock.now += 1;
      await h.gate.onAlarm();
      expect(await result).toEqual({ ok: false, error: { code: PAYMENT_RPC.NOT_PAID, message: 'payment not received within 2 s: the invoice expired' } });
      expect(h.gate.waiting).toBe(0);
      expect(h.local.pay(invoice)).toEqual({ ok: false, error: 'invoice expired' });
    });
  });

  it('wakes at the next expiry and prunes rows a day after they expired', async () => {
    await withGate({ expirySeconds: 10 }, async (h) => {
      const first = h.call(requester());
      await settle();
      h.clock.now += 4;
      const second = h.call(requester());
      await settle();
      h.clock.now += 6; // the first expires
      await h.gate.onAlarm();
      expect((await first.result).ok).toBe(false);
      expect(h.wakes.at(-1)).toBe(h.clock.now + 4); // the second's expiry
      second.abort.abort();
      await second.result;
      const rows = (): number => [first, second].filter((c) => h.store.byInvoice(invoiceOf(c.sent[0]!)) !== undefined).length;
      expect(rows()).toBe(2);
      h.clock.now += 24 * 3600 + 10;
      await h.gate.onAlarm();
      expect(rows()).toBe(0);
    });
  });

  it('caps unpaid invoices per client and per bridge', async () => {
    // No room reserved per server: the bridge's cap applies to the one server at once.
    await withGate({ maxPendingPerClient: 2, maxPendingTotal: 3, reservedPerServer: 0 }, async (h) => {
      const alice = randomHex();
      const a1 = h.call(requester(alice));
      const a2 = h.call(requester(alice));
      await settle();
      const a3 = h.call(requester(alice));
      expect(await a3.result).toEqual({ ok: false, error: { code: PAYMENT_RPC.TOO_MANY_UNPAID, message: 'too many unpaid invoices: at most 2 per client; pay one, cancel its request or let it expire' } });
      expect(a3.sent).toEqual([]);
      const b1 = h.call(requester());
      await settle();
      const c1 = h.call(requester());
      expect(await c1.result).toEqual({ ok: false, error: { code: PAYMENT_RPC.TOO_MANY_UNPAID, message: 'this bridge has too many unpaid invoices (3); try again later' } });
      // Paying one frees a place for its client.
      h.local.pay(invoiceOf(a1.sent[0]!));
      expect((await a1.result).ok).toBe(true);
      const a4 = h.call(requester(alice));
      await settle();
      expect(a4.sent).toHaveLength(1);
      for (const c of [a2, b1, a4]) c.abort.abort();
    });
  });

  it('spends a paid row on one call: a duplicate of the request is refused, a re-sent one after a restart runs once', async () => {
    await withGate({}, async (h) => {
      const who = requester();
      const first = h.call(who);
      const dup = h.call(who); // the same request delivered twice (two relays)
      await settle();
      expect(invoiceOf(dup.sent[0]!)).toBe(invoiceOf(first.sent[0]!)); // one invoice
      h.local.pay(invoiceOf(first.sent[0]!));
      const results = [await first.result, await dup.result];
      expect(results.filter((r) => r.ok)).toHaveLength(1);
      expect(results.find((r) => !r.ok)).toEqual({ ok: false, error: { code: PAYMENT_RPC.NOT_PAID, message: 'this paid request was already served; send a new request' } });

      // Paid while nobody waited (the Durable Object restarted): re-sending the request runs it.
      const later = requester();
      const waiting = h.call(later);
      await settle();
      const invoice = invoiceOf(waiting.sent[0]!);
      const after = h.restart(); // the first gate's waiter is gone with its memory
      expect(after.local.pay(invoice).ok).toBe(true);
      const resent = after.call(later);
      const running = await resent.result;
      expect(running).toEqual(RUNS);
      expect(resent.sent).toEqual([]);
      ended(running, ANSWERED);
      expect(await after.call(later).result).toEqual(ALREADY_SERVED);
    });
  });

  it('spends a paid row when its answer is published: a call a restart cut off before that (no end reported) runs again when re-sent', async () => {
    await withGate({}, async (h) => {
      const who = requester();
      const first = h.call(who);
      await settle();
      const invoice = invoiceOf(first.sent[0]!);
      const row = h.store.byInvoice(invoice)!;
      h.local.pay(invoice);
      const running = await first.result;
      expect(running).toEqual(RUNS);
      expect(h.store.byId(row.id)).toMatchObject({ used_at: h.clock.now, served_at: null });
      // Running here: the same request again is refused, not run twice at once.
      expect(await h.call(who).result).toEqual(ALREADY_SERVED);
      // A restart while it runs (no end reported): re-sent to the new instance, it runs.
      h.clock.now += 3;
      const after = h.restart();
      const again = await after.call(who).result;
      expect(again).toEqual(RUNS);
      expect(after.store.byId(row.id)).toMatchObject({ used_at: h.clock.now, served_at: null });
      ended(again, ANSWERED);
      expect(after.store.byId(row.id)).toMatchObject({ served_at: h.clock.now });
      expect(await after.call(who).result).toEqual(ALREADY_SERVED);
      expect(await h.call(who).result).toEqual(ALREADY_SERVED);
      expect(first.sent).toHaveLength(1);
    });
  });

  it('a paid call cut off before its answer was published (done unanswered) is logged once for a refund and dropped: re-sent, it does not run again', async () => {
    const logs: string[] = [];
    await withGate({}, async (h) => {
      const who = requester();
      const first = h.call(who);
      await settle();
      const invoice = invoiceOf(first.sent[0]!);
      const row = h.store.byInvoice(invoice)!;
      h.local.pay(invoice);
      const running = await first.result;
      expect(running).toEqual(RUNS);
      h.clock.now += 2;
      ended(running, { answered: false, why: 'cancelled by the client' });
      ended(running, { answered: false, why: 'cancelled by the client' }); // told twice: still one line
      expect(logs).toEqual([cutOffLine(row, who, 'cancelled by the client')]);
      expect(h.store.byId(row.id)).toMatchObject({ used_at: h.clock.now - 2, served_at: null, dropped_at: h.clock.now });
      expect(await h.call(who).result).toEqual({ ok: false, error: { code: PAYMENT_RPC.NOT_PAID, message: CUT_OFF } });
      await h.gate.onAlarm();
      expect(logs).toHaveLength(1);
      expect(h.store.awaitingPayment(h.clock.now)).toBe(false);
    }, logs);
  });

  it('a paid call a restart cut off and nobody sent again is logged once for a refund when it can no longer run: its longest call and the freshness window after it went upstream', async () => {
    const logs: string[] = [];
    await withGate({}, async (h) => {
      const who = requester();
      const first = h.call(who);
      await settle();
      const invoice = invoiceOf(first.sent[0]!);
      const row = h.store.byInvoice(invoice)!;
      h.local.pay(invoice);
      expect(await first.result).toEqual(RUNS); // never ends: the instance is gone
      const used = h.clock.now;
      const after = h.restart();
      // The bridge keeps its alarm for it (an idle bridge would skip the pass that logs it).
      expect(after.store.awaitingPayment(used + 100)).toBe(true);
      h.clock.now = used + 360; // 300 s (UPSTREAM_MAX_TOTAL_MS) + 60 s (STALE_SECONDS): a re-send could still be running it
      await after.gate.onAlarm();
      expect(logs).toEqual([]);
      h.clock.now = used + 361;
      await h.gate.onAlarm(); // the first instance still runs it (in memory): not given up there
      expect(logs).toEqual([]);
      await after.gate.onAlarm();
      await after.gate.onAlarm();
      expect(logs).toEqual([cutOffLine(row, who, 'the bridge restarted while it ran')]);
      expect(after.store.byId(row.id)).toMatchObject({ used_at: used, served_at: null, dropped_at: used + 361 });
      expect(after.store.awaitingPayment(h.clock.now)).toBe(false);
      expect(await after.call(who).result).toEqual({ ok: false, error: { code: PAYMENT_RPC.NOT_PAID, message: CUT_OFF } });
    }, logs);
  });

  it('a payment that lands after a restart dropped its request, too late for the request to be sent again, is logged once for a refund', async () => {
    const logs: string[] = [];
    await withGate({}, async (h) => {
      const who = requester();
      const first = h.call(who);
      await settle();
      const invoice = invoiceOf(first.sent[0]!);
      const row = h.store.byInvoice(invoice)!;
      const after = h.restart(); // the waiting call is gone with the first gate's memory
      h.clock.now += 90; // the bridge ignores the request now (older than 60 s): nobody can run it
      expect(after.local.pay(invoice).ok).toBe(true);
      expect(logs).toEqual([
        `payment of 21 sats for invoice ${row.id} (request ${who.requestId} of client ${who.client}) arrived after a restart dropped its request: no call runs for it; refund the client if due`,
      ]);
      expect(after.store.byId(row.id)).toMatchObject({ paid_at: h.clock.now, used_at: null, served_at: null, dropped_at: h.clock.now });
      await after.gate.onAlarm();
      expect(logs).toHaveLength(1);
      // Given up and logged for a refund, it never runs (had a copy of the request still reached the gate).
      const resent = after.call(who);
      expect(await resent.result).toEqual({ ok: false, error: { code: PAYMENT_RPC.NOT_PAID, message: DROPPED } });
      expect(resent.sent).toEqual([]);
      expect(after.store.byId(row.id)).toMatchObject({ used_at: null });
    }, logs);
  });

  it('a payment that lands after a restart while the request may still be sent again: re-sent, it runs; never re-sent, it is logged once when it no longer can be', async () => {
    const logs: string[] = [];
    await withGate({}, async (h) => {
      const start = h.clock.now;
      const resends = requester();
      const never = requester();
      const calls = [h.call(resends), h.call(never)];
      await settle();
      const [resendsRow, neverRow] = calls.map((c) => h.store.byInvoice(invoiceOf(c.sent[0]!))!) as [PaymentRow, PaymentRow];
      const after = h.restart();
      h.clock.now += 30;
      for (const c of calls) expect(after.local.pay(invoiceOf(c.sent[0]!)).ok).toBe(true);
      expect(logs).toEqual([]);
      // Woken when the requests can no longer be sent again (both were made at `start`).
      expect(after.wakes).toEqual([start + 61, start + 61]);
      // The client that re-sends its request within the window gets its call run.
      const running = await after.call(resends).result;
      expect(running).toEqual(RUNS);
      ended(running, ANSWERED);
      h.clock.now = start + 60; // still fresh: a re-send would run it
      await after.gate.onAlarm();
      expect(logs).toEqual([]);
      // Its invoices all paid, the bridge still waits for that row (an idle bridge would skip the alarm that logs it).
      expect(after.store.awaitingPayment(h.clock.now)).toBe(true);
      h.clock.now = start + 61;
      await after.gate.onAlarm();
      await after.gate.onAlarm();
      expect(after.store.awaitingPayment(h.clock.now)).toBe(false);
      expect(logs).toEqual([
        `payment of 21 sats for invoice ${neverRow.id} (request ${never.requestId} of client ${never.client}) arrived after a restart dropped its request: no call runs for it; refund the client if due`,
      ]);
      expect(after.store.byId(neverRow.id)).toMatchObject({ used_at: null, dropped_at: start + 61 });
      expect(after.store.byId(resendsRow.id)).toMatchObject({ served_at: start + 30, dropped_at: null });
      expect(await after.call(never).result).toEqual({ ok: false, error: { code: PAYMENT_RPC.NOT_PAID, message: DROPPED } });
    }, logs);
  });

  it('re-sent while unpaid: the same invoice again, and the call runs when it is paid', async () => {
    await withGate({}, async (h) => {
      const who = requester();
      const first = h.call(who);
      await settle();
      // The Durable Object restarted while the call waited: the re-sent request waits on the same invoice.
      const again = h.restart().call(who);
      await settle();
      expect(invoiceOf(again.sent[0]!)).toBe(invoiceOf(first.sent[0]!));
      expect(h.store.pendingCounts(who.client, h.clock.now).client).toBe(1);
      again.abort.abort();
    });
  });

  it('a cancel releases its invoice at once: the slot is free, and the request re-sent is told to send a new one', async () => {
    await withGate({ maxPendingPerClient: 1, maxPendingTotal: 2 }, async (h) => {
      const who = requester();
      const first = h.call(who);
      await settle();
      expect(h.store.pendingCounts(who.client, h.clock.now, CAP.serverId)).toEqual({ client: 1, server: 1, total: 1 });
      const second = h.call(requester(who.client));
      expect(await second.result).toEqual({ ok: false, error: { code: PAYMENT_RPC.TOO_MANY_UNPAID, message: 'too many unpaid invoices: at most 1 per client; pay one, cancel its request or let it expire' } });
      first.abort.abort();
      expect(await first.result).toEqual({ ok: false, error: { code: PAYMENT_RPC.NOT_PAID, message: 'the request was cancelled before the payment arrived' } });
      expect(h.store.pendingCounts(who.client, h.clock.now, CAP.serverId)).toEqual({ client: 0, server: 0, total: 0 });
      const third = h.call(requester(who.client));
      await settle();
      expect(third.sent).toHaveLength(1);
      expect(await h.call(who).result).toEqual({ ok: false, error: { code: PAYMENT_RPC.NOT_PAID, message: 'this request was cancelled before its payment arrived; send a new request' } });
      expect(h.gate.waiting).toBe(1);
      // Its invoice cannot be paid after (the bridge never runs a cancelled request again).
      expect(h.local.pay(invoiceOf(first.sent[0]!))).toEqual({ ok: false, error: 'invoice cancelled' });
      third.abort.abort();
    });
  });

  it('many requesters leaving invoices and cancelling them do not keep a fresh client from paying', async () => {
    // The /mcp gateway: a fresh key per POST, its request cancelled on payment-required.
    await withGate({ maxPendingTotal: 6 }, async (h) => {
      for (let i = 0; i < 20; i++) {
        const c = h.call(requester());
        await settle();
        expect(c.sent).toHaveLength(1);
        c.abort.abort();
        await c.result;
      }
      expect(h.store.pendingCounts('x', h.clock.now).total).toBe(0);
      const fresh = h.call(requester());
      await settle();
      expect(fresh.sent[0]!.tags[0]).toEqual(['status', 'payment-required']);
      h.local.pay(invoiceOf(fresh.sent[0]!));
      expect(await fresh.result).toEqual(RUNS);
    });
  });

  it('one client gets at most 3 unpaid invoices and 10 invoices per 10 minutes, cancelled or not', async () => {
    await withGate({}, async (h) => {
      const alice = randomHex();
      const waiting = [h.call(requester(alice)), h.call(requester(alice)), h.call(requester(alice))];
      await settle();
      expect(await h.call(requester(alice)).result).toEqual({ ok: false, error: { code: PAYMENT_RPC.TOO_MANY_UNPAID, message: 'too many unpaid invoices: at most 3 per client; pay one, cancel its request or let it expire' } });
      for (const w of waiting) w.abort.abort();
      for (let i = 0; i < 7; i++) {
        h.clock.now += 10;
        const c = h.call(requester(alice));
        await settle();
        expect(c.sent).toHaveLength(1);
        c.abort.abort();
      }
      h.clock.now += 10;
      const eleventh = h.call(requester(alice));
      // The first three were made 80 s ago: the window frees one in 520 s.
      expect(await eleventh.result).toEqual({ ok: false, error: { code: PAYMENT_RPC.TOO_MANY_UNPAID, message: 'too many invoices: at most 10 per client in 600 s; retry in 520 s' } });
      expect(eleventh.sent).toEqual([]);
      h.clock.now += 520;
      const later = h.call(requester(alice));
      await settle();
      expect(later.sent).toHaveLength(1);
      later.abort.abort();
    });
  });

  it('keys flooding one server fill its 100 pending invoices; its next client gets the exact refusal, a payer of another server its invoice', async () => {
    expect([DEFAULT_PAYMENT_CONFIG.maxPendingPerServer, DEFAULT_PAYMENT_CONFIG.maxPendingTotal, DEFAULT_PAYMENT_CONFIG.reservedPerServer]).toEqual([100, 500, 10]);
    await withGate({}, async (h) => {
      const a: PricedCapability = { serverId: 'a', method: 'tools/call', name: 'echo' };
      const b: PricedCapability = { serverId: 'b', method: 'tools/call', name: 'echo' };
      // 34 keys (fresh keys cost nothing), 3 waiting calls each: the first 100 get invoices.
      const flood = Array.from({ length: 34 }, () => randomHex());
      const calls = flood.flatMap((k) => [0, 1, 2].map(() => h.call(requester(k), SATS, a)));
      await settle();
      expect(calls.filter((c) => c.sent.length === 1)).toHaveLength(100);
      const refusal = { ok: false, error: { code: PAYMENT_RPC.TOO_MANY_UNPAID, message: 'server "a" has too many unpaid invoices (100); try again later' } };
      for (const c of calls.slice(100)) expect(await c.result).toEqual(refusal);
      const next = h.call(requester(), SATS, a);
      expect(await next.result).toEqual(refusal);
      expect(next.sent).toEqual([]);
      // Server b's payer: invoice, payment, the call runs.
      const payer = h.call(requester(), SATS, b);
      await settle();
      expect(payer.sent[0]!.tags[0]).toEqual(['status', 'payment-required']);
      h.local.pay(invoiceOf(payer.sent[0]!));
      expect(await payer.result).toEqual(RUNS);
      for (const c of calls) c.abort.abort();
    });
  });

  it('five flooded servers fill the bridge’s 500; every other server keeps room for its first 10', async () => {
    await withGate({}, async (h) => {
      const cap = (serverId: string): PricedCapability => ({ serverId, method: 'tools/call', name: 'echo' });
      const calls: Array<ReturnType<Harness['call']>> = [];
      for (const server of ['a', 'b', 'c', 'd', 'e']) {
        for (let i = 0; i < 34; i++) {
          const k = randomHex();
          for (let j = 0; j < 3; j++) calls.push(h.call(requester(k), SATS, cap(server)));
        }
      }
      await settle();
      expect(h.store.pendingCounts('x', h.clock.now).total).toBe(500);
      const f = Array.from({ length: 11 }, () => h.call(requester(), SATS, cap('f')));
      await settle();
      expect(f.slice(0, 10).every((c) => c.sent.length === 1)).toBe(true);
      expect(await f[10]!.result).toEqual({ ok: false, error: { code: PAYMENT_RPC.TOO_MANY_UNPAID, message: 'this bridge has too many unpaid invoices (500); try again later' } });
      expect(h.store.pendingCounts('x', h.clock.now).total).toBe(510);
      for (const c of [...calls, ...f]) c.abort.abort();
    });
  });

  it('ends the wait with UNAVAILABLE when the payment request cannot be sent, and releases its invoice (it counted against the caps until it expired)', async () => {
    await withGate({ maxPendingPerClient: 1 }, async (h) => {
      const who = requester();
      const ctx: PaymentContext = { notify: async () => Promise.reject(new Error('relay refused')), signal: new AbortController().signal };
      const result = await h.gate.requirePayment(who, CAP, SATS, ctx);
      expect(result).toEqual({ ok: false, error: { code: PAYMENT_RPC.UNAVAILABLE, message: 'payment unavailable: the payment request could not be sent (relay refused)' } });
      expect(h.gate.waiting).toBe(0);
      expect(h.store.pendingCounts(who.client, h.clock.now, CAP.serverId)).toEqual({ client: 0, server: 0, total: 0 });
      // The row stays, released (a payment that still comes is recorded and logged), and counts in the invoice window.
      expect(h.store.byRequest(who.requestId, who.client)).toMatchObject({ paid_at: null, cancelled_at: h.clock.now });
      expect(h.store.createdSince(who.client, h.clock.now - 1, 10)).toEqual([h.clock.now]);
      // The client's one pending place is free: its next request gets its invoice.
      const next = h.call(requester(who.client));
      await settle();
      expect(next.sent).toHaveLength(1);
      next.abort.abort();
    });
  });

  it('a duplicate whose payment request cannot be sent leaves the invoice pending while the first copy waits on it', async () => {
    await withGate({}, async (h) => {
      const who = requester();
      const first = h.call(who);
      await settle();
      const ctx: PaymentContext = { notify: async () => Promise.reject(new Error('relay refused')), signal: new AbortController().signal };
      expect(await h.gate.requirePayment(who, CAP, SATS, ctx)).toEqual({ ok: false, error: { code: PAYMENT_RPC.UNAVAILABLE, message: 'payment unavailable: the payment request could not be sent (relay refused)' } });
      expect(h.store.pendingCounts(who.client, h.clock.now, CAP.serverId)).toEqual({ client: 1, server: 1, total: 1 });
      h.local.pay(invoiceOf(first.sent[0]!));
      expect(await first.result).toEqual(RUNS);
    });
  });

  it.each<[string, PricedCapability]>([
    ['name', { serverId: 'everything', method: 'tools/call', name: 'echo\ud800' }],
    ['name', { serverId: 'everything', method: 'prompts/get', name: '\udc00greet' }],
    ['uri', { serverId: 'everything', method: 'resources/read', name: 'file:///notes/\ud83d.txt' }],
  ])('refuses a priced call whose %s has a lone surrogate (stored, it would read back as U+FFFD: a re-sent paid request got a second invoice): no invoice, no row', async (param, capability) => {
    await withGate({}, async (h) => {
      const who = requester();
      const c = h.call(who, SATS, capability);
      await settle();
      expect(c.sent).toEqual([]);
      expect(await c.result).toEqual({
        ok: false,
        error: { code: RPC.INVALID_PARAMS, message: `invalid params: the ${capability.method} ${param} has a lone surrogate (half of a UTF-16 surrogate pair), so no payment can be recorded for it; send it as valid Unicode` },
      });
      expect(h.store.byRequest(who.requestId, who.client)).toBeUndefined();
    });
  });

  it('a name with U+FFFD itself is a capability of its own: paid once, its request re-sent after a restart is served without a second invoice', async () => {
    await withGate({}, async (h) => {
      const capability: PricedCapability = { serverId: 'everything', method: 'tools/call', name: 'echo\ufffd' };
      const who = requester();
      const first = h.call(who, SATS, capability);
      await settle();
      h.local.pay(invoiceOf(first.sent[0]!));
      expect(await first.result).toEqual(RUNS);
      const again = h.restart().call(who, SATS, capability);
      expect(await again.result).toEqual(RUNS);
      expect(again.sent).toEqual([]);
    });
  });

  it.each<[Price, number, string]>([
    [{ price: '5', unit: 'usd' }, PAYMENT_RPC.UNSUPPORTED_PRICE, 'unsupported price unit "usd": this bridge takes payment in sats'],
    [{ price: '1.5', unit: 'sats' }, PAYMENT_RPC.UNSUPPORTED_PRICE, 'unsupported price "1.5": a price is a whole number of sats'],
    [{ price: '-1', unit: 'sats' }, PAYMENT_RPC.UNSUPPORTED_PRICE, 'unsupported price "-1": a price is a whole number of sats'],
    [{ price: '99999999999', unit: 'sats' }, PAYMENT_RPC.UNSUPPORTED_PRICE, 'unsupported price "99999999999": a price is a whole number of sats'],
  ])('refuses price %j', async (price, code, message) => {
    await withGate({}, async (h) => {
      const c = h.call(requester(), price);
      expect(await c.result).toEqual({ ok: false, error: { code, message } });
      expect(c.sent).toEqual([]);
    });
  });

  it('lets a zero price through without an invoice; "sat" and "SATS" are sats', async () => {
    await withGate({}, async (h) => {
      const free = h.call(requester(), { price: '0', unit: 'sats' });
      expect(await free.result).toEqual(RUNS);
      expect(free.sent).toEqual([]);
      for (const unit of ['sat', 'SATS']) {
        const c = h.call(requester(), { price: '3', unit });
        await settle();
        expect(c.sent[0]!.tags[1]!.slice(0, 2)).toEqual(['amount', '3']);
        c.abort.abort();
      }
    });
  });
});
