// The local payment verifier (development and tests; chosen when no Lightning address is configured
// and EDGESTR_ENV is development or test): invoices that look like BOLT-11 but are clearly local,
// paid by the development-only endpoint POST /api/bridge/pay {invoice} (payments-route.ts).
//
// Local invoice format: `lnbcrt<10 × sats>n1edgestrdev<77 characters>`:
//   - `lnbcrt` + amount in nano-BTC + `1`: a regtest BOLT-11 human-readable part, so the amount
//     reads as BOLT-11 (`bolt11Msat`) and no mainnet wallet could ever pay it;
//   - `edgestrdev`: the marker of a local invoice;
//   - 77 characters of the bech32 alphabet: the bridge's owner key (32 bytes; the Bridge Durable
//     Object is named by it) then the invoice id (16 bytes), so the endpoint knows which bridge
//     holds it.
// There is no checksum or signature: it is not a Lightning invoice and nothing but the endpoint pays it.

import { bech32 } from '@scure/base';
import { bytesToHex, hexToBytes } from '../../src/shared/hex.js';
import { bolt11Msat } from '../../src/shared/nip57.js';
import { err, ok, type Result } from '../../src/shared/errors.js';
import type { Invoice, InvoiceRequest, PaymentVerifier } from './payments.js';
import { nowSeconds, type PaymentRow, type PaymentStore } from './payments-store.js';

const ALPHABET = 'qpzry9x8gf2tvdw0s3jn54khce6mua7l';
const MARKER = 'edgestrdev';
const LOCAL = /^lnbcrt([1-9][0-9]{0,14})n1edgestrdev([qpzry9x8gf2tvdw0s3jn54khce6mua7l]{77})$/;

/** The local invoice of `sats` for invoice `id` (32 hex) held by the bridge of `owner`. */
export function localInvoice(owner: string, id: string, sats: number): string {
  const bytes = new Uint8Array([...hexToBytes(owner), ...hexToBytes(id)]);
  const data = bech32.toWords(bytes).map((w) => ALPHABET[w]).join('');
  return `lnbcrt${sats * 10}n1${MARKER}${data}`;
}

/** Reads a local invoice: its bridge's owner, invoice id and amount; the reason when it is not one. */
export function parseLocalInvoice(invoice: string): Result<{ owner: string; id: string; sats: number }, string> {
  const m = LOCAL.exec(invoice);
  if (!m) return err('not a local invoice of this deployment (lnbcrt…n1edgestrdev…)');
  const msat = bolt11Msat(invoice);
  if (!msat.ok || msat.value % 1000 !== 0) return err('a local invoice is for a whole number of sats');
  let bytes: Uint8Array;
  try {
    bytes = bech32.fromWords([...m[2]!].map((c) => ALPHABET.indexOf(c)));
  } catch {
    return err('not a local invoice of this deployment (lnbcrt…n1edgestrdev…)');
  }
  return ok({ owner: bytesToHex(bytes.slice(0, 32)), id: bytesToHex(bytes.slice(32)), sats: msat.value / 1000 });
}

export class LocalVerifier implements PaymentVerifier {
  #listener: ((id: string) => void) | undefined;

  constructor(
    /** The owner of the bridge (what names its Durable Object). */
    private readonly owner: string,
    private readonly store: PaymentStore,
    private readonly expirySeconds: number,
    private readonly now: () => number = nowSeconds,
  ) {}

  async invoice(req: InvoiceRequest): Promise<Result<Invoice, string>> {
    const id = bytesToHex(crypto.getRandomValues(new Uint8Array(16)));
    return ok({ invoice: localInvoice(this.owner, id, req.sats), id, expiresAt: this.now() + this.expirySeconds });
  }

  settled(id: string): boolean {
    return this.store.isPaid(id);
  }

  onSettled(listener: (id: string) => void): void {
    this.#listener = listener;
  }

  /**
   * Pays a local invoice of this bridge (the development endpoint). Errors: 'unknown invoice',
   * 'invoice already paid', 'invoice cancelled' (its request was cancelled: it never runs),
   * 'invoice expired' (its call was answered with NOT_PAID).
   */
  pay(invoice: string): Result<PaymentRow, 'unknown invoice' | 'invoice already paid' | 'invoice cancelled' | 'invoice expired'> {
    const row = this.store.byInvoice(invoice);
    if (row === undefined) return err('unknown invoice');
    if (row.paid_at !== null) return err('invoice already paid');
    if (row.cancelled_at !== null) return err('invoice cancelled');
    const now = this.now();
    if (row.expires <= now) return err('invoice expired');
    this.store.markPaid(row.id, now);
    this.#listener?.(row.id);
    return ok({ ...row, paid_at: now });
  }
}
