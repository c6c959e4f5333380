// The NIP-57 payment verifier: for a configured Lightning address (EDGESTR_LN_ADDRESS), each
// invoice is a zap invoice. LNURL-pay: GET the address's endpoint, check allowsNostr, nostrPubkey
// and the amount range, then GET its callback with the amount (msat) and a zap request (9734)
// signed by the provider key (p = the provider, relays = where the bridge listens, `e` = the DVMCP
// request, content = ZAP_REQUEST_CONTENT) → the BOLT-11 invoice, checked to be for that amount.
// The zap request is public: the LNURL server publishes it as the receipt's `description` to those
// relays, the public shard among them, where anyone reads kind 9735. So it names neither the
// server (a private server's id is its secret), nor the method, nor the capability (a tool's name,
// a resource's uri): the same content for every call. Both URLs
// go through the outbound policy (safeFetch), every hop under nip57.ts lnurlDialRefusal: the
// operator's exceptions (EDGESTR_OUTBOUND_ALLOW) on the pay endpoint's own origin only, not on a
// callback or redirect elsewhere that the LNURL server (a third party) chose. The invoice is paid when a valid zap receipt (9735)
// for it arrives on the relays: the bridge subscribes with `receiptFilter()` and hands each receipt
// to `onReceipt` (signed by the nostrPubkey, bolt11 equal to ours, description = our zap request).

import { z } from 'zod';
import { err, errorMessage, ok, type Result } from '../../src/shared/errors.js';
import { parseEvent, tagValue, type NostrEvent } from '../../src/shared/event.js';
import { KIND } from '../../src/shared/kinds.js';
import type { Filter } from '../../src/shared/filters.js';
import { safeFetch, type OutboundPolicy } from '../../src/shared/outbound-url.js';
import type { EventTemplate } from '../../src/shared/relay-types.js';
import type { SchnorrVerifier } from '../../src/shared/verify.js';
import {
  amountRefusal,
  encodeLnurl,
  invoiceOf,
  lnurlDialRefusal,
  lnurlpUrl,
  validateZapReceipt,
  zapCallbackUrl,
  zapEndpointOf,
  zapRequestTemplate,
  type ZapEndpoint,
} from '../../src/shared/nip57.js';
import type { Invoice, InvoiceRequest, PaymentVerifier } from './payments.js';
import { nowSeconds, type PaymentStore } from './payments-store.js';

/** An LNURL server answer larger than this is refused. */
const MAX_ANSWER_BYTES = 64 * 1024;
/** How long the pay endpoint's parameters are reused before they are fetched again. */
const ENDPOINT_TTL_SECONDS = 600;
const DEFAULT_TIMEOUT_MS = 10_000;
/** The content of every zap request: the same generic text whatever was called (see the header). */
export const ZAP_REQUEST_CONTENT = 'DVMCP payment';

export interface ZapVerifierOptions {
  /** The payee: the bridge's provider key (`p` of the zap request and of the receipt). */
  provider: string;
  /** A Lightning address (name@domain) or an LNURL-pay URL. */
  address: string;
  /** Relays where the LNURL server publishes receipts and the bridge listens for them. */
  relays: readonly string[];
  /** Signs with the provider key. */
  sign(t: EventTemplate): Promise<NostrEvent>;
  policy: OutboundPolicy;
  store: PaymentStore;
  verifier: SchnorrVerifier;
  expirySeconds: number;
  now?: () => number;
  timeoutMs?: number;
}

/** What the pending row keeps to check a receipt later (also after the Durable Object restarted). */
const ProofSchema = z.object({ nostrPubkey: z.string(), zapRequest: z.unknown() });

async function readJson(response: Response): Promise<Result<unknown, string>> {
  if (response.status !== 200) {
    await response.body?.cancel();
    return err(`the LNURL server answered HTTP ${response.status}`);
  }
  if (response.body === null) return err('the LNURL server answered with no body');
  const reader = response.body.getReader();
  const chunks: Uint8Array[] = [];
  let bytes = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    bytes += value.byteLength;
    if (bytes > MAX_ANSWER_BYTES) {
      await reader.cancel();
      return err(`the LNURL server answer is over ${MAX_ANSWER_BYTES} bytes`);
    }
    chunks.push(value);
  }
  const all = new Uint8Array(bytes);
  let at = 0;
  for (const c of chunks) {
    all.set(c, at);
    at += c.byteLength;
  }
  const text = new TextDecoder().decode(all);
  try {
    return ok(JSON.parse(text));
  } catch {
    return err('the LNURL server did not answer JSON');
  }
}

export class ZapVerifier implements PaymentVerifier {
  readonly #o: ZapVerifierOptions;
  readonly #now: () => number;
  #endpoint: { value: ZapEndpoint; lnurl: string; url: URL; at: number } | undefined;
  #listener: ((id: string) => void) | undefined;

  constructor(options: ZapVerifierOptions) {
    this.#o = options;
    this.#now = options.now ?? nowSeconds;
  }

  /** GETs `url` for the Lightning address whose pay endpoint is `endpoint` (each hop: lnurlDialRefusal). */
  async #get(url: string, endpoint: URL): Promise<Result<unknown, string>> {
    const policy = this.#o.policy;
    const init = { headers: { accept: 'application/json' }, signal: AbortSignal.timeout(this.#o.timeoutMs ?? DEFAULT_TIMEOUT_MS) };
    try {
      const res = await safeFetch(url, init, policy, { check: (hop) => lnurlDialRefusal(hop, endpoint, policy) });
      if (!res.ok) return err(`the LNURL server may not be dialled: ${res.error}`);
      return await readJson(res.value.response);
    } catch (e) {
      return err(`the LNURL server could not be reached: ${errorMessage(e)}`);
    }
  }

  async #endpointOf(): Promise<Result<{ value: ZapEndpoint; lnurl: string; url: URL }, string>> {
    const cached = this.#endpoint;
    if (cached !== undefined && this.#now() - cached.at < ENDPOINT_TTL_SECONDS) return ok(cached);
    const url = lnurlpUrl(this.#o.address);
    if (!url.ok) return url;
    const endpoint = new URL(url.value); // lnurlpUrl answers the href of a URL that parses
    const raw = await this.#get(url.value, endpoint);
    if (!raw.ok) return raw;
    const ep = zapEndpointOf(raw.value);
    if (!ep.ok) return ep;
    this.#endpoint = { value: ep.value, lnurl: encodeLnurl(url.value), url: endpoint, at: this.#now() };
    return ok(this.#endpoint);
  }

  async invoice(req: InvoiceRequest): Promise<Result<Invoice, string>> {
    const msat = req.sats * 1000;
    const ep = await this.#endpointOf();
    if (!ep.ok) return ep;
    const refused = amountRefusal(ep.value.value, msat);
    if (refused !== undefined) return err(refused);
    const zapRequest = await this.#o.sign(
      zapRequestTemplate({ recipient: this.#o.provider, msat, relays: this.#o.relays, eventId: req.requestId, lnurl: ep.value.lnurl, content: ZAP_REQUEST_CONTENT }),
    );
    const url = zapCallbackUrl(ep.value.value.callback, msat, zapRequest, ep.value.lnurl);
    if (!url.ok) return url;
    const answer = await this.#get(url.value, ep.value.url);
    const pr = answer.ok ? invoiceOf(answer.value, msat) : answer;
    if (!pr.ok) {
      this.#endpoint = undefined; // fetch the parameters again next time
      return pr;
    }
    return ok({
      invoice: pr.value,
      id: zapRequest.id,
      expiresAt: this.#now() + this.#o.expirySeconds,
      proof: JSON.stringify({ nostrPubkey: ep.value.value.nostrPubkey, zapRequest }),
    });
  }

  settled(id: string): boolean {
    return this.#o.store.isPaid(id);
  }

  onSettled(listener: (id: string) => void): void {
    this.#listener = listener;
  }

  /** The subscription the bridge keeps on its relays: receipts paying the provider since `since`. */
  receiptFilter(since = this.#now() - this.#o.expirySeconds - 60): Filter {
    return { kinds: [KIND.ZAP_RECEIPT], '#p': [this.#o.provider], since };
  }

  /**
   * A receipt from the relays (its signature checked here too): marks the invoice it pays as paid
   * and tells the gate. The id of the invoice paid, or why the receipt was ignored.
   */
  onReceipt(receipt: NostrEvent): Result<string, string> {
    const bolt11 = tagValue(receipt, 'bolt11');
    const row = bolt11 === undefined ? undefined : this.#o.store.byInvoice(bolt11);
    if (row === undefined || row.proof === null) return err('the receipt is not for an invoice of this bridge');
    if (row.paid_at !== null) return err('the invoice is already paid');
    let proof: z.infer<typeof ProofSchema>;
    try {
      proof = ProofSchema.parse(JSON.parse(row.proof));
    } catch (e) {
      return err(`the invoice's stored zap request is unreadable: ${errorMessage(e)}`);
    }
    const zapRequest = parseEvent(proof.zapRequest);
    if (!zapRequest.ok) return err(`the invoice's stored zap request is unreadable: ${zapRequest.error.reason}`);
    const valid = validateZapReceipt(receipt, { nostrPubkey: proof.nostrPubkey, bolt11: row.invoice, zapRequest: zapRequest.value }, this.#o.verifier);
    if (!valid.ok) return valid;
    if (this.#o.store.markPaid(row.id, this.#now())) this.#listener?.(row.id);
    return ok(row.id);
  }
}
