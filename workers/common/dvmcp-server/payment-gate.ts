// The payment gate of the DVMCP bridge: the dispatcher asks it before a call to a priced capability
// (tools/call by tool name, prompts/get by name, resources/read by uri, resource name or template)
// reaches upstream. Verifiers
// (a local one for development and tests, a NIP-57 zap-receipt watcher) implement this interface in
// workers/bridge/payments*.ts. With none configured, priced calls are refused ("payment not configured").

import { err, type Result } from '../../../src/shared/errors.js';
import { RPC, rpcError, type Price, type Requester, type RpcError } from '../../../src/shared/dvmcp.js';
import type { EventTemplate } from '../../../src/shared/relay-types.js';

/** The priced capability a request calls. */
export interface PricedCapability {
  /** The server id (`s`) the capability belongs to. */
  serverId: string;
  /** The request's method: tools/call, prompts/get or resources/read. */
  method: string;
  /** The tool or prompt name, or the uri read. */
  name: string;
}

/** How an admitted call ended: its answer published, or cut off before that (`why`: cancelled by the client, the server changed, its answer refused by the relay…). */
export type CallEnd = { answered: true } | { answered: false; why: string };

/**
 * A call the gate let through, told how it ended. Either way its payment is spent: answered, the
 * same request sent again is refused ("already served"); cut off, no answer went out and none will
 * (the provider records the request handled, so it is not run again when sent again): the gate
 * gives the payment up and tells the operator, who may refund it. A call never told (its Durable
 * Object restarted while it ran) may run again when its client sends the request again while it is
 * fresh; the gate gives that payment up once it no longer can (workers/bridge/payments-gate.ts).
 */
export interface AdmittedCall {
  done(end: CallEnd): void;
}

/** A call with nothing to spend (free). */
export const freeCall: AdmittedCall = { done: () => undefined };

/** What a gate may need while it waits for a payment. */
export interface PaymentContext {
  /** Publishes a notification (e.g. the 21316 payment-required built by `paymentRequiredTemplate`)
   *  to the requester, in the form (plain or gift-wrapped) the request came in, on its relay. */
  notify(t: EventTemplate): Promise<void>;
  /** Aborted when the client cancels the request or the bridge gives up on it. */
  signal: AbortSignal;
  /**
   * Asked before the call waits for a payment (an invoice made for it, or one made before and still
   * unpaid), until `until` (ms) at the latest: undefined, it may; else the refusal its client gets
   * (the bridge's quota for calls waiting for a payment, workers/bridge/metering.ts). Not asked for
   * a call already paid. `invoiced`: the invoice it waits on is recorded already (the bridge counts
   * the open invoices from its payment rows, which a restart keeps); the gate asks so again once it
   * recorded the invoice it made for the call, which only tells that and refuses nothing.
   */
  awaitingPayment?(until: number, invoiced: boolean): RpcError | undefined;
}

export interface PaymentGate {
  /**
   * Resolves ok once `requester` has paid `price` for `capability` (the call then runs, and its
   * caller reports how it ended), or with the JSON-RPC error the client gets (unpaid and expired,
   * unsupported unit, …).
   */
  requirePayment(requester: Requester, capability: PricedCapability, price: Price, ctx: PaymentContext): Promise<Result<AdmittedCall, RpcError>>;
}

/** The gate in force while no verifier is configured: every priced call is refused with a clear error. */
export const noPaymentGate: PaymentGate = {
  requirePayment: async (_requester, capability) =>
    err(rpcError(RPC.INTERNAL_ERROR, `payment not configured: ${capability.name} of ${capability.serverId} is priced and this bridge has no payment verifier`)),
};
