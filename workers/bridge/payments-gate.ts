// The bridge's PaymentGate over a PaymentVerifier (payment-gate.ts is the interface): a call to a
// priced capability gets an invoice, a 21316 payment-required notification (amount, invoice, `e` =
// the request), a durable row (payments-store.ts), and waits; it runs once the verifier reports the
// invoice paid, or is answered NOT_PAID when the invoice expires (the Durable Object's alarm wakes
// the gate at each expiry: `onAlarm`). A cancelled request (the client's notifications/cancel)
// releases its invoice at once. A payment that still arrives for a cancelled or expired invoice
// (a zap cannot be refused) is recorded and logged for the operator: no call runs for it (the row
// is dropped, `dropped_at`: logged once, never run). Bounded: at most `maxPendingPerClient` pending
// invoices per client, `maxInvoicesPerClient` invoices per client in INVOICE_WINDOW_SECONDS (each
// costs the Lightning address an invoice, cancelled or not), `maxPendingPerServer` per upstream server and
// `maxPendingTotal` per bridge, except that a server holding fewer than `reservedPerServer` is
// never refused by the bridge's cap (keys cost nothing, so many keys can fill a server's cap: that
// blocks the payers of that server, not those of the bridge's other servers). Over a cap the call
// is refused at once, as it is when the bridge's quota for calls waiting for a payment refuses it
// (PaymentContext.awaitingPayment, asked before an invoice is made or an open one waited on).
//
// A paid row is spent on one answered call: a client that re-sends the same request (same event id)
// after paying is served once without paying again; a request waiting in memory when the Durable
// Object restarts is not resumed (its row stays; re-sending the request resumes the wait or runs it
// if paid). The bridge takes a request only while it is fresh (STALE_SECONDS), and edgestr's own
// client publishes each request once: a row paid while nobody waits that no re-sent request ran
// by STALE_SECONDS after its invoice was made is dropped and logged for a refund, at once when the
// payment lands later, else by the alarm then (a request dated ahead, fresh a little longer, is
// refused after that, its payment logged). A paid call runs once at a time; it spends its row when
// its answer is published (`done({answered: true})`: a re-send is refused, "already served"). Cut off
// before that and told so (`done({answered: false, why})`: the client cancelled, the server was
// changed or removed, the owner suspended, the relay refused the answer), it never runs again (the
// bridge records the request handled): its row is dropped and logged once for a refund. A call a
// restart cut off is told nothing: its request re-sent while fresh runs it again (the accepted
// repeat, SECURITY.md); once it cannot be (its row's call went upstream more than the longest call,
// UPSTREAM_MAX_TOTAL_MS, plus STALE_SECONDS ago, and nobody ran it since), the alarm drops and logs it.
//
// A row's capability is the request's tool or prompt name or uri: one with a lone surrogate (JSON
// allows "\ud800") has no UTF-8 form and SQLite would give it back as U+FFFD, so that the request
// re-sent would no longer match its row (a second invoice after paying); such a call is refused
// before any invoice (INVALID_PARAMS). An invoice whose payment-required notification could not be
// sent is released at once, as a cancelled one (it no longer counts against the pending caps; a
// payment that still comes is recorded and logged), unless another copy of the request waits on it.
//
// A call for which the verifier made no invoice is answered -32012 NO_INVOICE, the same for every
// reason: the reason (the Lightning address's provider's own `reason` text, which hosts the
// outbound policy refused and why) is for the operator, told through `GateHost.noInvoice` (the
// bridge counts it in a DropSummary: any client's priced call can cause it, so one line a minute).

import { err, errorMessage, ok, type Result } from '../../src/shared/errors.js';
import { paymentRequiredTemplate, RPC, rpcError, type Price, type Requester, type RpcError } from '../../src/shared/dvmcp.js';
import { hasLoneSurrogate } from '../../src/shared/json-cut.js';
import { freeCall, type AdmittedCall, type PaymentContext, type PaymentGate, type PricedCapability } from '../common/dvmcp-server/payment-gate.js';
import { wakeNoLaterThan } from '../common/alarms.js';
import { STALE_SECONDS } from '../common/dvmcp-server/limits.js';
import type { CallEnd } from '../common/dvmcp-server/payment-gate.js';
import { DROPS, type DropSummary } from '../common/drop-summary.js';
import { INVOICE_WINDOW_SECONDS, PAYMENT_RPC, type PaymentConfig, type PaymentVerifier } from './payments.js';
import { nowSeconds, type PaymentRow, type PaymentStore } from './payments-store.js';
import { UPSTREAM_MAX_TOTAL_MS } from './upstream.js';

/** What the gate needs from its Durable Object. */
export interface GateHost {
  /** Sets the alarm no later than `at` (Unix seconds). */
  wakeAt(at: number): Promise<void>;
  /** An operational line for the operator (without a prefix). */
  log(line: string): void;
  /** Why the verifier made no invoice for a call (the client is told only NO_INVOICE), for the operator. */
  noInvoice(reason: string): void;
}

/** A GateHost over the DO's alarm (keeps an earlier alarm, else sets it to `at`), `log`, and `drops` (DROPS.noInvoice). */
export const alarmHost = (storage: DurableObjectStorage, log: (line: string) => void, drops: DropSummary): GateHost => ({
  wakeAt: (at) => wakeNoLaterThan(storage, at * 1000),
  log,
  noInvoice: (reason) => drops.drop(DROPS.noInvoice, reason),
});

/** What a client is told when no invoice could be had, whatever the reason (see the header). */
export const NO_INVOICE = 'payment unavailable: the Lightning address could not make an invoice';

const MAX_SATS = 1_000_000_000;
/** Paid rows whose request a restart dropped, given up per alarm (the rest at the next). */
const DROP_BATCH = 100;

/** A price in whole sats ("21", unit sats/sat, any case); the JSON-RPC error for anything else. */
export function satsOf(price: Price): Result<number, RpcError> {
  const unit = price.unit.toLowerCase();
  if (unit !== 'sats' && unit !== 'sat') {
    return err(rpcError(PAYMENT_RPC.UNSUPPORTED_PRICE, `unsupported price unit "${price.unit}": this bridge takes payment in sats`));
  }
  if (!/^[0-9]{1,10}$/.test(price.price) || Number(price.price) > MAX_SATS) {
    return err(rpcError(PAYMENT_RPC.UNSUPPORTED_PRICE, `unsupported price "${price.price}": a price is a whole number of sats`));
  }
  return ok(Number(price.price));
}

/** Why a paid row whose waiting call a restart dropped is given up (`#drop`). */
const RESTARTED = 'a restart dropped its request';
/** Why a paid row whose running call a restart cut off is given up (`#cutOff`). */
const RESTARTED_WHILE_RUNNING = 'the bridge restarted while it ran';
/** How long after its call went upstream a paid row may still be running or run again: the longest call, then a re-send's freshness window. */
const LAST_RUN_SECONDS = Math.ceil(UPSTREAM_MAX_TOTAL_MS / 1000) + STALE_SECONDS;

interface Waiter {
  expires: number;
  finish(r: Result<AdmittedCall, RpcError>): void;
}

export class VerifierGate implements PaymentGate {
  readonly #waiters = new Map<string, Waiter[]>();
  /** Paid rows whose call runs in this instance now. */
  readonly #running = new Set<string>();

  constructor(
    private readonly verifier: PaymentVerifier,
    private readonly store: PaymentStore,
    private readonly config: PaymentConfig,
    private readonly host: GateHost,
    private readonly now: () => number = nowSeconds,
  ) {
    verifier.onSettled((id) => this.#settle(id));
  }

  /** Calls waiting for a payment right now. */
  get waiting(): number {
    let n = 0;
    for (const ws of this.#waiters.values()) n += ws.length;
    return n;
  }

  async requirePayment(requester: Requester, capability: PricedCapability, price: Price, ctx: PaymentContext): Promise<Result<AdmittedCall, RpcError>> {
    if (hasLoneSurrogate(capability.name)) {
      const param = capability.method === 'resources/read' ? 'uri' : 'name';
      return err(
        rpcError(
          RPC.INVALID_PARAMS,
          `invalid params: the ${capability.method} ${param} has a lone surrogate (half of a UTF-16 surrogate pair), so no payment can be recorded for it; send it as valid Unicode`,
        ),
      );
    }
    const sats = satsOf(price);
    if (!sats.ok) return sats;
    if (sats.value === 0) return ok(freeCall);
    const name = `${capability.method} ${capability.name}`;
    // Checked before asking the verifier (no invoice for a refused call), and again after its await,
    // right before the insert (a duplicate of the request or another call may have come in meanwhile).
    const before = this.#admit(requester, capability.serverId, name, ctx);
    if (before !== undefined) return before;
    // The bridge's quota for calls waiting for a payment, before any invoice is made (metering.ts).
    const quota = ctx.awaitingPayment?.((this.now() + this.config.expirySeconds) * 1000, false);
    if (quota !== undefined) return err(quota);
    const invoice = await this.verifier.invoice({ sats: sats.value, requestId: requester.requestId, client: requester.client });
    if (!invoice.ok) {
      this.host.noInvoice(invoice.error);
      return err(rpcError(PAYMENT_RPC.UNAVAILABLE, NO_INVOICE));
    }
    const after = this.#admit(requester, capability.serverId, name, ctx);
    if (after !== undefined) return after;
    const row: PaymentRow = {
      id: invoice.value.id,
      invoice: invoice.value.invoice,
      request_id: requester.requestId,
      client: requester.client,
      server: capability.serverId,
      capability: name,
      sats: sats.value,
      created: this.now(),
      expires: invoice.value.expiresAt,
      paid_at: null,
      used_at: null,
      served_at: null,
      proof: invoice.value.proof ?? null,
      cancelled_at: null,
      dropped_at: null,
    };
    this.store.insert(row);
    ctx.awaitingPayment?.(row.expires * 1000, true); // its invoice is recorded: counted so from now on (this refuses nothing)
    await this.host.wakeAt(row.expires);
    return this.#waitAndNotify(row, requester, ctx, true);
  }

  /**
   * The answer for a request that needs no new invoice: its earlier row (paid → run unless answered
   * or running; open → wait for it; expired → NOT_PAID), or a cap refusal. Undefined when a new
   * invoice is needed.
   */
  #admit(requester: Requester, serverId: string, name: string, ctx: PaymentContext): Promise<Result<AdmittedCall, RpcError>> | undefined {
    const now = this.now();
    const previous = this.store.byRequest(requester.requestId, requester.client);
    if (previous !== undefined && previous.server === serverId && previous.capability === name) {
      if (previous.dropped_at !== null) {
        const why =
          previous.used_at === null
            ? "this request's payment arrived after the bridge had given the request up, so it does not run"
            : "this request's call was cut off before its answer was sent, so it does not run again";
        return Promise.resolve(err(rpcError(PAYMENT_RPC.NOT_PAID, `${why}; ask the bridge's operator for a refund, or send a new request`)));
      }
      if (previous.paid_at !== null) {
        return Promise.resolve(this.#run(previous.id));
      }
      if (previous.cancelled_at !== null) return Promise.resolve(err(rpcError(PAYMENT_RPC.NOT_PAID, 'this request was cancelled before its payment arrived; send a new request')));
      if (previous.expires <= now) return Promise.resolve(err(this.#expired()));
      const quota = ctx.awaitingPayment?.(previous.expires * 1000, true);
      return quota === undefined ? this.#waitAndNotify(previous, requester, ctx) : Promise.resolve(err(quota));
    }
    const counts = this.store.pendingCounts(requester.client, now, serverId);
    if (counts.client >= this.config.maxPendingPerClient) {
      return Promise.resolve(err(rpcError(PAYMENT_RPC.TOO_MANY_UNPAID, `too many unpaid invoices: at most ${this.config.maxPendingPerClient} per client; pay one, cancel its request or let it expire`)));
    }
    const made = this.store.createdSince(requester.client, now - INVOICE_WINDOW_SECONDS, this.config.maxInvoicesPerClient);
    if (made.length >= this.config.maxInvoicesPerClient) {
      const wait = made[0]! + INVOICE_WINDOW_SECONDS - now;
      return Promise.resolve(err(rpcError(PAYMENT_RPC.TOO_MANY_UNPAID, `too many invoices: at most ${this.config.maxInvoicesPerClient} per client in ${INVOICE_WINDOW_SECONDS} s; retry in ${wait} s`)));
    }
    if (counts.server >= this.config.maxPendingPerServer) {
      return Promise.resolve(err(rpcError(PAYMENT_RPC.TOO_MANY_UNPAID, `server "${serverId}" has too many unpaid invoices (${this.config.maxPendingPerServer}); try again later`)));
    }
    if (counts.total >= this.config.maxPendingTotal && counts.server >= this.config.reservedPerServer) {
      return Promise.resolve(err(rpcError(PAYMENT_RPC.TOO_MANY_UNPAID, `this bridge has too many unpaid invoices (${this.config.maxPendingTotal}); try again later`)));
    }
    return undefined;
  }

  /**
   * The Durable Object's alarm: answers every waiting call whose invoice expired unpaid, drops the
   * paid rows whose request a restart dropped and that can no longer be re-sent (`#drop`), and those
   * whose call a restart cut off and that can no longer run (`#cutOff`, LAST_RUN_SECONDS after it
   * went upstream; not one running here), prunes old rows, and asks to be woken at the next expiry.
   */
  async onAlarm(): Promise<void> {
    const now = this.now();
    for (const [id, waiters] of [...this.#waiters]) {
      const expired = waiters.filter((w) => w.expires <= now);
      if (expired.length === 0 || this.verifier.settled(id)) continue;
      for (const w of expired) w.finish(err(this.#expired()));
    }
    for (const row of this.store.unrunBefore(now - STALE_SECONDS, DROP_BATCH)) this.#drop(row, RESTARTED);
    for (const row of this.store.cutOffBefore(now - LAST_RUN_SECONDS, DROP_BATCH)) if (!this.#running.has(row.id)) this.#cutOff(row, RESTARTED_WHILE_RUNNING);
    this.store.prune(now);
    const next = this.store.nextExpiry(now);
    if (next !== undefined) await this.host.wakeAt(next);
  }

  #expired(): RpcError {
    return rpcError(PAYMENT_RPC.NOT_PAID, `payment not received within ${this.config.expirySeconds} s: the invoice expired`);
  }

  /**
   * Registers the waiter first (a payment may land while the notification is being sent), then
   * notifies; a notification that cannot be sent ends the wait with UNAVAILABLE, and releases the
   * invoice when this call made it (`made`) and no other copy of the request waits on it.
   */
  async #waitAndNotify(row: PaymentRow, requester: Requester, ctx: PaymentContext, made = false): Promise<Result<AdmittedCall, RpcError>> {
    const waiting = this.#wait(row, ctx.signal);
    if (this.verifier.settled(row.id)) {
      this.#settle(row.id);
    } else {
      try {
        await ctx.notify(paymentRequiredTemplate(requester, row.sats, row.invoice));
      } catch (e) {
        waiting.finish(err(rpcError(PAYMENT_RPC.UNAVAILABLE, `payment unavailable: the payment request could not be sent (${errorMessage(e)})`)));
        if (made && !this.#waiters.has(row.id)) this.store.markCancelled(row.id, this.now());
      }
    }
    return waiting.result;
  }

  #wait(row: PaymentRow, signal: AbortSignal): { result: Promise<Result<AdmittedCall, RpcError>>; finish: Waiter['finish'] } {
    let finish: Waiter['finish'] = () => undefined;
    const result = new Promise<Result<AdmittedCall, RpcError>>((resolve) => {
      const waiter: Waiter = {
        expires: row.expires,
        finish: (r) => {
          const rest = (this.#waiters.get(row.id) ?? []).filter((w) => w !== waiter);
          if (rest.length > 0) this.#waiters.set(row.id, rest);
          else this.#waiters.delete(row.id);
          signal.removeEventListener('abort', onAbort);
          resolve(r);
        },
      };
      finish = waiter.finish;
      // Cancelled (or given up by the bridge): the invoice is released once nobody waits on it.
      const onAbort = (): void => {
        waiter.finish(err(rpcError(PAYMENT_RPC.NOT_PAID, 'the request was cancelled before the payment arrived')));
        if (!this.#waiters.has(row.id)) this.store.markCancelled(row.id, this.now());
      };
      this.#waiters.set(row.id, [...(this.#waiters.get(row.id) ?? []), waiter]);
      if (signal.aborted) onAbort();
      else signal.addEventListener('abort', onAbort, { once: true });
    });
    return { result, finish };
  }

  /** A paid invoice: its first waiting call runs; any duplicate is refused. Nobody waiting: see `#paidForNothing`. */
  #settle(id: string): void {
    const waiters = this.#waiters.get(id) ?? [];
    if (waiters.length === 0) this.#paidForNothing(id);
    for (const w of waiters) w.finish(this.#run(id));
  }

  /**
   * A payment nobody waits for (a zap cannot be refused). For a cancelled or expired invoice, its
   * request was answered or dropped and recorded handled: dropped at once. Else a restart dropped
   * the waiting call: the client's re-sent request runs it while the bridge still takes the request
   * (until STALE_SECONDS after the invoice was made); past that it is dropped, at once when the
   * payment comes later, else by the alarm woken then, unless a re-send ran it meanwhile.
   */
  #paidForNothing(id: string): void {
    const row = this.store.byId(id);
    if (row === undefined) return;
    const now = this.now();
    if (row.cancelled_at !== null) return this.#drop(row, 'its request was cancelled');
    if (row.expires <= now) return this.#drop(row, 'its invoice expired');
    const last = row.created + STALE_SECONDS;
    if (last < now) return this.#drop(row, RESTARTED);
    this.host.wakeAt(last + 1).catch((e: unknown) => this.host.log(`the alarm for paid invoice ${row.id} could not be set (${errorMessage(e)}); the next alarm checks it`));
  }

  /** Gives up paid row `row` (it never runs) and logs it once for the operator, who may refund it. */
  #drop(row: PaymentRow, after: string): void {
    if (!this.store.markDropped(row.id, this.now())) return;
    this.host.log(`payment of ${row.sats} sats for invoice ${row.id} (request ${row.request_id} of client ${row.client}) arrived after ${after}: no call runs for it; refund the client if due`);
  }

  /** Gives up paid row `row`, whose call went upstream and was not answered (`why`), and logs it once for the operator, who may refund it. */
  #cutOff(row: PaymentRow, why: string): void {
    if (!this.store.markCutOff(row.id, this.now())) return;
    this.host.log(`payment of ${row.sats} sats for invoice ${row.id} (request ${row.request_id} of client ${row.client}) arrived before its call was cut off (${why}): no answer was sent; refund the client if due`);
  }

  /**
   * Lets the call of paid row `id` run, unless its answer was published or it runs here already
   * ("already served"); the row is spent when the call ends: served when answered, else given up
   * and logged for a refund (`#cutOff`).
   */
  #run(id: string): Result<AdmittedCall, RpcError> {
    if (this.#running.has(id) || !this.store.markUsed(id, this.now())) return err(rpcError(PAYMENT_RPC.NOT_PAID, 'this paid request was already served; send a new request'));
    this.#running.add(id);
    return ok({
      done: (end: CallEnd) => {
        this.#running.delete(id);
        if (end.answered) return this.store.markServed(id, this.now());
        const row = this.store.byId(id);
        if (row) this.#cutOff(row, end.why);
      },
    });
  }
}
