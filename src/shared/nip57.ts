// NIP-57 Lightning zaps and the LNURL-pay steps they ride on (LUD-06, LUD-16), pure: the amount of
// a BOLT-11 invoice from its human-readable part, the zap request (9734) a payee asks an LNURL
// server to put in an invoice, the checks on the LNURL server's answers, and the validation of the
// zap receipt (9735) that proves the invoice was paid. The bridge's ZapVerifier
// (workers/bridge/payments-zap.ts) does the fetching and the watching.
//
// Who is who here: the bridge is the payee. It signs the zap request itself (p = its own provider
// key, `e` = the DVMCP request being paid for), gets an invoice for it, and hands the invoice to the
// client. The LNURL server signs the receipt with its `nostrPubkey` once the invoice is paid.
//
// The LNURL server is a third party (the wallet provider behind the operator's Lightning address):
// the operator chose the pay endpoint, the provider chooses its `callback` and its redirects. So
// the operator's outbound exceptions (EDGESTR_OUTBOUND_ALLOW) apply on the endpoint's own origin
// only; any other URL the provider names is dialled as a public one (lnurlDialRefusal).

import { z } from 'zod';
import { bech32 } from '@scure/base';
import { KIND } from './kinds.js';
import { HEX64 } from './hex.js';
import { err, ok, type Result } from './errors.js';
import { checkIdAndSignature, computeEventId, describeIssue, parseEvent, tagValue, type NostrEvent } from './event.js';
import type { EventTemplate } from './relay-types.js';
import type { SchnorrVerifier } from './verify.js';
import { outboundRefusal, type OutboundPolicy } from './outbound-url.js';

// ---- BOLT-11 amounts ----

/** Currency prefixes of BOLT-11 (mainnet, testnet, regtest, signet, simnet); longest first. */
const HRP = /^ln(bcrt|bc|tbs|tb|sb)([0-9]{0,20})([munp]?)$/;
/** Millisatoshis per unit of each multiplier (1 BTC = 10^11 msat); `p` is a tenth of a msat. */
const MSAT_PER: Record<string, bigint> = { '': 100_000_000_000n, m: 100_000_000n, u: 100_000n, n: 100n };

/**
 * The amount of a BOLT-11 invoice in millisatoshis, read from its human-readable part (everything
 * before the last `1`): `ln` + currency + amount + multiplier (m = 10^-3, u = 10^-6, n = 10^-9,
 * p = 10^-12 BTC). `lnbc210n1…` → 21,000 msat (21 sats). Errors: not an invoice, no amount (an
 * amount-less invoice cannot pay a fixed price), a `p` amount that is not a whole msat (BOLT-11
 * says to refuse it), an amount beyond 2^53 msat.
 */
export function bolt11Msat(invoice: string): Result<number, string> {
  const lower = invoice.toLowerCase();
  if (lower !== invoice && invoice.toUpperCase() !== invoice) return err('invoice mixes upper and lower case');
  const sep = lower.lastIndexOf('1');
  const m = sep > 0 ? HRP.exec(lower.slice(0, sep)) : null;
  if (!m) return err('not a BOLT-11 invoice (expected ln<currency><amount><multiplier>1…)');
  const [, , digits, multiplier] = m as unknown as [string, string, string, string];
  if (digits === '') return err('the invoice has no amount');
  const n = BigInt(digits);
  let msat: bigint;
  if (multiplier === 'p') {
    if (n % 10n !== 0n) return err('a pico-BTC amount must be a whole number of millisatoshis');
    msat = n / 10n;
  } else {
    msat = n * MSAT_PER[multiplier]!;
  }
  if (msat === 0n) return err('the invoice amount is zero');
  if (msat > BigInt(Number.MAX_SAFE_INTEGER)) return err('the invoice amount is too large');
  return ok(Number(msat));
}

// ---- LNURL-pay (LUD-06, LUD-16) ----

const LUD16_NAME = /^[a-z0-9\-_.+]{1,64}$/;

/**
 * The LNURL-pay endpoint of a Lightning address: `name@domain` →
 * `https://domain/.well-known/lnurlp/name` (LUD-16). An http(s) URL is taken as the endpoint itself
 * (the outbound policy decides later whether it may be dialled). Either way the href of a URL that
 * parses.
 */
export function lnurlpUrl(address: string): Result<string, string> {
  const a = address.trim();
  if (/^https?:\/\//i.test(a)) {
    try {
      return ok(new URL(a).href);
    } catch {
      return err('invalid LNURL-pay URL');
    }
  }
  const at = a.lastIndexOf('@');
  const name = a.slice(0, at).toLowerCase();
  const domain = a.slice(at + 1).toLowerCase();
  const shape = 'a Lightning address is name@domain (or an https:// LNURL-pay URL)';
  if (at <= 0 || !LUD16_NAME.test(name) || !/^[a-z0-9.-]+(:[0-9]{1,5})?$/.test(domain)) return err(shape);
  try {
    return ok(new URL(`https://${domain}/.well-known/lnurlp/${name}`).href);
  } catch {
    return err(shape); // e.g. a port over 65535
  }
}

/** The LUD-01 bech32 form of an LNURL (`lnurl1…`), as the zap request's `lnurl` tag carries it. */
export const encodeLnurl = (url: string): string => bech32.encode('lnurl', bech32.toWords(new TextEncoder().encode(url)), 2000);

const LnurlErrorSchema = z.object({ status: z.literal('ERROR'), reason: z.string().max(500) });

/** LUD-06 pay parameters with the NIP-57 extension (allowsNostr, nostrPubkey). */
export const PayParamsSchema = z.object({
  tag: z.literal('payRequest'),
  callback: z.string().max(2048),
  minSendable: z.number().int().positive(),
  maxSendable: z.number().int().positive(),
  metadata: z.string().max(10_000),
  allowsNostr: z.boolean().optional(),
  nostrPubkey: z.string().regex(HEX64).optional(),
});
export type PayParams = z.infer<typeof PayParamsSchema>;

/** What a zap-capable LNURL server told us: where to ask for invoices, who signs the receipts, the range. */
export interface ZapEndpoint {
  callback: string;
  nostrPubkey: string;
  minSendable: number;
  maxSendable: number;
}

const lnurlError = (raw: unknown): string | undefined => {
  const e = LnurlErrorSchema.safeParse(raw);
  return e.success ? `the LNURL server refused: ${e.data.reason}` : undefined;
};

/** Checks an LNURL-pay answer for zaps (NIP-57 step 1): payRequest, allowsNostr, a valid nostrPubkey. */
export function zapEndpointOf(raw: unknown): Result<ZapEndpoint, string> {
  const refused = lnurlError(raw);
  if (refused !== undefined) return err(refused);
  const p = PayParamsSchema.safeParse(raw);
  if (!p.success) return err(`not an LNURL-pay answer (${describeIssue(p.error)})`);
  if (p.data.allowsNostr !== true) return err('the Lightning address does not support zaps (allowsNostr is not true)');
  if (p.data.nostrPubkey === undefined) return err('the Lightning address has no nostrPubkey to sign zap receipts');
  if (p.data.minSendable > p.data.maxSendable) return err('the LNURL server announces minSendable above maxSendable');
  return ok({ callback: p.data.callback, nostrPubkey: p.data.nostrPubkey, minSendable: p.data.minSendable, maxSendable: p.data.maxSendable });
}

/** Whether `msat` is within the endpoint's range; the reason when it is not. */
export function amountRefusal(ep: ZapEndpoint, msat: number): string | undefined {
  if (msat < ep.minSendable || msat > ep.maxSendable) {
    return `${msat} msat is outside what the Lightning address accepts (${ep.minSendable}–${ep.maxSendable} msat)`;
  }
  return undefined;
}

/**
 * Why `url` may not be dialled for the Lightning address whose LNURL-pay endpoint is `endpoint`
 * (asked of the endpoint, of its callback and of every redirect hop of either), or undefined: on the
 * endpoint's origin (scheme, host and port), under `policy` with its exceptions; on any other
 * origin, which the LNURL server chose, under `policy` without EDGESTR_OUTBOUND_ALLOW (a public
 * host over https in production), so that a provider's callback cannot point the bridge at a host
 * the operator listed for something else.
 */
export function lnurlDialRefusal(url: URL, endpoint: URL, policy: OutboundPolicy): string | undefined {
  return outboundRefusal(url, 'http', url.origin === endpoint.origin ? policy : { ...policy, allow: [] });
}

/** The callback URL asking for a zap invoice (NIP-57 appendix B): amount (msat), nostr (the zap request JSON), lnurl; dialled under lnurlDialRefusal. */
export function zapCallbackUrl(callback: string, msat: number, zapRequest: NostrEvent, lnurl?: string): Result<string, string> {
  let url: URL;
  try {
    url = new URL(callback);
  } catch {
    return err('the LNURL server gave an invalid callback URL');
  }
  url.searchParams.set('amount', String(msat));
  url.searchParams.set('nostr', JSON.stringify(zapRequest));
  if (lnurl !== undefined) url.searchParams.set('lnurl', lnurl);
  return ok(url.href);
}

/**
 * The longest invoice taken from a callback, in characters. A BOLT-11 invoice is a few hundred to
 * about 2,000 characters (route hints make it longer). This cap is also what keeps the bridge's
 * payment-required notification within one DVMCP message in every form: an invoice is never cut
 * (a cut one cannot be paid), and 4096 characters, each escaped to at most 6 bytes, are 24,576
 * bytes, within the 40,557 a gift-wrapped 21316 carries besides its other tags.
 */
const MAX_INVOICE_CHARS = 4096;

const CallbackAnswerSchema = z.object({ pr: z.string().min(1) });

/** The invoice in a callback answer (LUD-06 `pr`), checked to be for exactly `msat` (as LUD-06 tells wallets to). */
export function invoiceOf(raw: unknown, msat: number): Result<string, string> {
  const refused = lnurlError(raw);
  if (refused !== undefined) return err(refused);
  const a = CallbackAnswerSchema.safeParse(raw);
  if (!a.success) return err('the LNURL callback answered without an invoice (pr)');
  if (a.data.pr.length > MAX_INVOICE_CHARS) return err(`the LNURL callback's invoice is ${a.data.pr.length} characters; an invoice is at most ${MAX_INVOICE_CHARS}`);
  const amount = bolt11Msat(a.data.pr);
  if (!amount.ok) return err(`the LNURL callback's invoice is unusable: ${amount.error}`);
  if (amount.value !== msat) return err(`the LNURL callback's invoice is for ${amount.value} msat, not the ${msat} msat asked for`);
  return ok(a.data.pr);
}

// ---- Zap request (9734) and receipt (9735) ----

export interface ZapRequestInput {
  /** Who is paid: the `p` tag (here the bridge's provider key). */
  recipient: string;
  msat: number;
  /** Where the LNURL server publishes the receipt. */
  relays: readonly string[];
  /** The event paid for (`e`): here the DVMCP request id. */
  eventId?: string;
  /** The bech32 LNURL of the recipient (`lnurl` tag, recommended by NIP-57). */
  lnurl?: string;
  content?: string;
}

/** The zap request template (NIP-57 appendix A); the caller signs it. */
export function zapRequestTemplate(i: ZapRequestInput): EventTemplate {
  const tags: string[][] = [['relays', ...i.relays], ['amount', String(i.msat)], ['p', i.recipient]];
  if (i.eventId !== undefined) tags.push(['e', i.eventId]);
  if (i.lnurl !== undefined) tags.push(['lnurl', i.lnurl]);
  return { kind: KIND.ZAP_REQUEST, created_at: Math.floor(Date.now() / 1000), tags, content: i.content ?? '' };
}

/** What a receipt must match: the receipt signer, our invoice, and our signed zap request. */
export interface ZapExpectation {
  nostrPubkey: string;
  bolt11: string;
  zapRequest: NostrEvent;
}

/**
 * Validates a zap receipt (NIP-57 appendix F) for one invoice: kind 9735, a valid id and signature
 * by the LNURL server's `nostrPubkey`, `bolt11` equal to the invoice we handed out, `p` = the
 * payee, and a `description` that is our zap request (its id recomputed from its fields, so the
 * JSON cannot claim an id it does not have, and equal to ours: same amount, `p` and `e`).
 */
export function validateZapReceipt(receipt: NostrEvent, want: ZapExpectation, verifier: SchnorrVerifier): Result<void, string> {
  if (receipt.kind !== KIND.ZAP_RECEIPT) return err(`kind ${receipt.kind} is not a zap receipt`);
  if (receipt.pubkey !== want.nostrPubkey) return err('the receipt is not signed by the Lightning address nostrPubkey');
  const signed = checkIdAndSignature(receipt, verifier);
  if (!signed.ok) return err(`the receipt is invalid: ${signed.error.reason}`);
  if (tagValue(receipt, 'bolt11') !== want.bolt11) return err('the receipt is for another invoice');
  const payee = tagValue(want.zapRequest, 'p');
  if (tagValue(receipt, 'p') !== payee) return err('the receipt pays someone else');
  const description = tagValue(receipt, 'description');
  if (description === undefined) return err('the receipt has no description');
  let raw: unknown;
  try {
    raw = JSON.parse(description);
  } catch {
    return err('the receipt description is not JSON');
  }
  const zr = parseEvent(raw);
  if (!zr.ok) return err(`the receipt description is not an event (${zr.error.reason})`);
  if (computeEventId(zr.value) !== zr.value.id) return err('the receipt description id does not match its fields');
  // Equal ids over recomputed fields: the same amount, p, e and relays as the request we signed.
  if (zr.value.id !== want.zapRequest.id) return err('the receipt description is not our zap request');
  return ok(undefined);
}
