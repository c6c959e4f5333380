// Payments inside the Bridge Durable Object: the PaymentGate the dispatcher asks (payment-gate.ts),
// built on first use once the bridge has its provider key, over the verifier the configuration
// chooses (payments.ts `verifierKind`): the NIP-57 zap verifier for a Lightning address, the local
// verifier in development and test, or none (priced calls refused, `noPaymentGate`). The bridge
// calls `onAlarm` from its alarm (expiry of unpaid calls), asks `awaitingPayment` before it goes
// idle (bridge-do.ts) and `openInvoices` for its quota (metering.ts), subscribes its relays with
// `receiptFilters()` and hands kind 9735 events to `onReceipt`, and serves the development
// endpoint POST /api/bridge/pay through `payLocal`. Why a Lightning address made no invoice is
// logged in this object's DropSummary (DROPS.noInvoice: one line a minute, written by the next such
// call or by `onAlarm`), never told to the client (payments-gate.ts).

import { err, ok, type Result } from '../../src/shared/errors.js';
import type { NostrEvent } from '../../src/shared/event.js';
import type { Filter } from '../../src/shared/filters.js';
import type { Price, Requester, RpcError } from '../../src/shared/dvmcp.js';
import { outboundPolicy, type OutboundEnv } from '../../src/shared/outbound-url.js';
import type { EventTemplate } from '../../src/shared/relay-types.js';
import type { SchnorrVerifier } from '../../src/shared/verify.js';
import { DropSummary } from '../common/drop-summary.js';
import { noPaymentGate, type AdmittedCall, type PaymentContext, type PaymentGate, type PricedCapability } from '../common/dvmcp-server/payment-gate.js';
import { paymentConfig, verifierKind, type PaymentEnv } from './payments.js';
import type { OpenInvoices } from './metering.js';
import { alarmHost, VerifierGate } from './payments-gate.js';
import { LocalVerifier } from './payments-local.js';
import { nowSeconds, PaymentStore } from './payments-store.js';
import { ZapVerifier } from './payments-zap.js';

export interface BridgePaymentsDeps {
  storage: DurableObjectStorage;
  env: PaymentEnv & OutboundEnv;
  /** The bridge's keys once it has them: its provider key and its owner (the Durable Object's name). */
  identity(): { provider: string; owner: string } | undefined;
  /** The relays the bridge listens on (where zap receipts must be published). */
  relays(): string[];
  /** Signs with the provider key. */
  sign(t: EventTemplate): Promise<NostrEvent>;
  verifier(): Promise<SchnorrVerifier>;
}

interface Built {
  gate: VerifierGate;
  local?: LocalVerifier;
  zap?: ZapVerifier;
}

export class BridgePayments implements PaymentGate {
  readonly #store: PaymentStore;
  /** undefined: not built yet; null: no verifier configured. */
  #built: Built | null | undefined;
  /** Calls answered without an invoice, with the reasons (see the header). */
  readonly #drops = new DropSummary((line) => console.warn(`bridge: provider ${this.deps.identity()?.provider ?? ''}: ${line}`));

  constructor(private readonly deps: BridgePaymentsDeps) {
    this.#store = new PaymentStore(deps.storage.sql);
  }

  async #build(): Promise<Built | null | undefined> {
    if (this.#built !== undefined) return this.#built;
    const id = this.deps.identity();
    if (id === undefined) return undefined;
    const kind = verifierKind(this.deps.env);
    if (kind === undefined) return (this.#built = null);
    const config = paymentConfig(this.deps.env);
    const host = alarmHost(this.deps.storage, (line) => console.warn(`bridge: ${line}`), this.#drops);
    if (kind.kind === 'local') {
      const local = new LocalVerifier(id.owner, this.#store, config.expirySeconds);
      return (this.#built = { gate: new VerifierGate(local, this.#store, config, host), local });
    }
    const zap = new ZapVerifier({
      provider: id.provider,
      address: kind.address,
      relays: this.deps.relays(),
      sign: this.deps.sign,
      policy: outboundPolicy(this.deps.env),
      store: this.#store,
      verifier: await this.deps.verifier(),
      expirySeconds: config.expirySeconds,
    });
    return (this.#built = { gate: new VerifierGate(zap, this.#store, config, host), zap });
  }

  async requirePayment(requester: Requester, capability: PricedCapability, price: Price, ctx: PaymentContext): Promise<Result<AdmittedCall, RpcError>> {
    const built = await this.#build();
    return (built ? built.gate : noPaymentGate).requirePayment(requester, capability, price, ctx);
  }

  /** From the bridge's alarm: unpaid calls whose invoice expired are answered; the next expiry is scheduled; a summary line due is written. */
  async onAlarm(): Promise<void> {
    this.#drops.flush();
    const built = await this.#build();
    await built?.gate.onAlarm();
  }

  /** The unpaid invoices open at `now` (ms), not cancelled, per side: `owner`'s key, the other clients (the bridge's quota counts them, metering.ts). */
  openInvoices(owner: string, now: number): OpenInvoices[] {
    return this.#store.openInvoices(owner, Math.floor(now / 1000)).map((o) => ({ side: o.owner ? 'owner' : 'others', calls: o.count, ends: o.first * 1000 }));
  }

  /** Whether a payment may still come for an invoice this bridge handed out (one unpaid and not expired, cancelled or not): the bridge keeps listening for its receipt. */
  awaitingPayment(): boolean {
    return this.#store.awaitingPayment(nowSeconds());
  }

  /** Extra subscriptions for the bridge's relays: zap receipts paying the provider (zap verifier only). */
  async receiptFilters(): Promise<Filter[]> {
    const built = await this.#build();
    return built?.zap ? [built.zap.receiptFilter()] : [];
  }

  /** A kind 9735 event from a relay: the invoice it pays, or why it was ignored. */
  async onReceipt(e: NostrEvent): Promise<Result<string, string>> {
    const built = await this.#build();
    return built?.zap ? built.zap.onReceipt(e) : err('this bridge does not take zaps');
  }

  /**
   * The development endpoint: pays a local invoice of this bridge. Errors: 'local payments are off'
   * (a Lightning address is configured, or not development/test), or the verifier's reason.
   */
  async payLocal(invoice: string): Promise<Result<{ sats: number; request_id: string }, string>> {
    const built = await this.#build();
    if (!built?.local) return err('local payments are off');
    const paid = built.local.pay(invoice);
    return paid.ok ? ok({ sats: paid.value.sats, request_id: paid.value.request_id }) : paid;
  }
}
