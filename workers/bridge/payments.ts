// Payments of the DVMCP bridge: the verifier interface that invoices and confirms payments (a local
// verifier for development and tests, payments-local.ts; a NIP-57 zap-receipt watcher for a
// Lightning address, payments-zap.ts), the JSON-RPC errors a client gets, and the configuration.
// The gate that makes priced calls wait for a payment is payments-gate.ts; the durable rows
// (invoices, who asked, paid or not) are payments-store.ts.

import { z } from 'zod';
import type { Result } from '../../src/shared/errors.js';
import { localMode } from '../../src/shared/env-mode.js';

/**
 * What a verifier is asked to invoice. Nothing names the server, the method or the capability: a
 * zap invoice's zap request ends up in a public receipt (payments-zap.ts).
 */
export interface InvoiceRequest {
  sats: number;
  /** The DVMCP request paid for (its event or rumor id). */
  requestId: string;
  /** The paying client's pubkey. */
  client: string;
}

export interface Invoice {
  /** The BOLT-11 invoice (or the local verifier's invoice) the client pays. */
  invoice: string;
  /** The verifier's id for this invoice (the pending row's key). */
  id: string;
  /** Unix seconds after which the invoice is no longer honoured. */
  expiresAt: number;
  /** What the verifier needs later to confirm the payment (kept in the pending row). */
  proof?: string;
}

/**
 * Invoices and confirms payments. The gate inserts the pending row of each invoice; the verifier
 * marks it paid in the store (payments-store.ts) and tells its listener.
 */
export interface PaymentVerifier {
  invoice(req: InvoiceRequest): Promise<Result<Invoice, string>>;
  /** Whether the invoice with this id is paid. */
  settled(id: string): boolean;
  /** The gate's listener, told of each invoice id once it is paid. */
  onSettled(listener: (id: string) => void): void;
}

/**
 * JSON-RPC errors of priced calls (the implementation-defined server range, -32000 to -32099):
 * - NOT_PAID: the invoice expired unpaid ("payment not received within N s"), or the request was
 *   cancelled while it waited;
 * - TOO_MANY_UNPAID: the client (or the whole bridge) has too many unpaid invoices, or the client
 *   asked for too many invoices lately;
 * - UNAVAILABLE: no invoice could be had (the Lightning address is down or refused);
 * - UNSUPPORTED_PRICE: the capability's price is not in sats (or not a whole number).
 */
export const PAYMENT_RPC = {
  NOT_PAID: -32010,
  TOO_MANY_UNPAID: -32011,
  UNAVAILABLE: -32012,
  UNSUPPORTED_PRICE: -32013,
} as const;

export interface PaymentConfig {
  /** Seconds an invoice (and the call waiting for it) stays open. */
  expirySeconds: number;
  /** Pending invoices (unpaid, not cancelled, unexpired) one client may have at once. */
  maxPendingPerClient: number;
  /** Pending invoices for one upstream server at once (a flood aimed at one server stops there). */
  maxPendingPerServer: number;
  /**
   * Pending invoices the bridge (one provider) keeps at once, over all its servers: far more than
   * one client's, more than one server's. Not applied to a server holding fewer than reservedPerServer.
   */
  maxPendingTotal: number;
  /** Pending invoices each server may hold whatever the others hold (its share of the bridge). */
  reservedPerServer: number;
  /** Invoices one client may have made in INVOICE_WINDOW_SECONDS, whatever became of them. */
  maxInvoicesPerClient: number;
}

/** The window of maxInvoicesPerClient. */
export const INVOICE_WINDOW_SECONDS = 600;

export const DEFAULT_PAYMENT_CONFIG: PaymentConfig = {
  expirySeconds: 600,
  maxPendingPerClient: 3,
  maxPendingPerServer: 100,
  maxPendingTotal: 500,
  reservedPerServer: 10,
  maxInvoicesPerClient: 10,
};

export interface PaymentEnv {
  EDGESTR_ENV?: string;
  /** A Lightning address (name@domain) or LNURL-pay URL: payments are verified by NIP-57 zap receipts. */
  EDGESTR_LN_ADDRESS?: string;
  /** Seconds an invoice stays open (default 600, at least 1). */
  EDGESTR_PAYMENT_EXPIRY?: string;
}

const Seconds = z.coerce.number().int().min(1).max(86_400);

/** The configuration in force: EDGESTR_PAYMENT_EXPIRY when it is a whole number of seconds (1–86400), else the default. */
export function paymentConfig(env: PaymentEnv): PaymentConfig {
  const expiry = Seconds.safeParse(env.EDGESTR_PAYMENT_EXPIRY);
  return { ...DEFAULT_PAYMENT_CONFIG, expirySeconds: env.EDGESTR_PAYMENT_EXPIRY !== undefined && expiry.success ? expiry.data : DEFAULT_PAYMENT_CONFIG.expirySeconds };
}

/**
 * Which verifier a bridge uses: 'zap' when EDGESTR_LN_ADDRESS is set; 'local' without it in
 * development or test; none otherwise (priced calls are then refused, payment-gate.ts `noPaymentGate`).
 */
export function verifierKind(env: PaymentEnv): { kind: 'zap'; address: string } | { kind: 'local' } | undefined {
  const address = env.EDGESTR_LN_ADDRESS?.trim() ?? '';
  if (address !== '') return { kind: 'zap', address };
  return localMode(env) !== undefined ? { kind: 'local' } : undefined;
}
