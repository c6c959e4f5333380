// NIP-57 and LNURL-pay core (src/shared/nip57.ts) with fixed vectors: BOLT-11 amounts from the
// human-readable parts of BOLT-11's own example invoices, LUD-01's bech32 LNURL vector, the LNURL
// answers a wallet must refuse, and zap receipts made by nostr-tools' independent NIP-57 code,
// accepted when right and refused, with the exact reason, for each way they can be wrong.
import { describe, expect, it } from 'vitest';
import { finalizeEvent, getPublicKey } from 'nostr-tools/pure';
import { makeZapReceipt, validateZapRequest } from 'nostr-tools/nip57';
import { hexToBytes } from '@noble/hashes/utils.js';
import {
  amountRefusal,
  bolt11Msat,
  encodeLnurl,
  invoiceOf,
  lnurlpUrl,
  validateZapReceipt,
  zapCallbackUrl,
  zapEndpointOf,
  zapRequestTemplate,
  type ZapExpectation,
} from './nip57.js';
import type { NostrEvent } from './event.js';
import { nobleVerifier } from './verify.js';

/** The data part after the separator in BOLT-11's examples (irrelevant to the amount). */
const TAIL = 'pvjluezsp5zyg3zyg3zyg3zyg3zyg3zyg3zyg3zyg3zyg3zyg3zyg3zyg3zyg3zygspp5qqqsyqcyq5rqwzqfqqqsyqcyq5rqwzqfqqqsyqcyq5rqwzqfqypq';

describe('bolt11Msat', () => {
  it.each([
    ['lnbc210n1', 21_000], // the NIP-57 example amount: 21 sats
    ['lnbc2500u1', 250_000_000], // BOLT-11 "1 cup coffee": 250,000 sats
    ['lnbc20m1', 2_000_000_000], // BOLT-11 hashed description: 2,000,000 sats
    ['lntb20m1', 2_000_000_000], // testnet
    ['lnbc25m1', 2_500_000_000],
    ['lnbc9678785340p1', 967_878_534], // BOLT-11 pico-BTC example
    ['lnbcrt10n1', 1_000], // regtest, 1 sat
    ['lntbs1u1', 100_000], // signet
    ['lnbc1m1', 100_000_000],
    ['lnbc21', 200_000_000_000], // no multiplier: whole BTC
  ])('%s… → %d msat', (prefix, msat) => {
    expect(bolt11Msat(`${prefix}${TAIL}`)).toEqual({ ok: true, value: msat });
  });

  it('reads upper-case invoices (BOLT-11 "same, but all upper case")', () => {
    expect(bolt11Msat(`LNBC25M1${TAIL.toUpperCase()}`)).toEqual({ ok: true, value: 2_500_000_000 });
  });

  it.each([
    [`lnbc1${TAIL}`, 'the invoice has no amount'], // BOLT-11 donation invoice
    [`lnbc2500000001p1${TAIL}`, 'a pico-BTC amount must be a whole number of millisatoshis'], // BOLT-11 invalid sub-msat
    [`lnbc2500x1${TAIL}`, 'not a BOLT-11 invoice (expected ln<currency><amount><multiplier>1…)'], // BOLT-11 invalid multiplier
    [`lnxy10n1${TAIL}`, 'not a BOLT-11 invoice (expected ln<currency><amount><multiplier>1…)'],
    ['hello', 'not a BOLT-11 invoice (expected ln<currency><amount><multiplier>1…)'],
    ['', 'not a BOLT-11 invoice (expected ln<currency><amount><multiplier>1…)'],
    [`lnbc0n1${TAIL}`, 'the invoice amount is zero'],
    [`lnbc99999999999999999999m1${TAIL}`, 'the invoice amount is too large'],
    [`lnbc10N1${TAIL}`, 'invoice mixes upper and lower case'],
  ])('refuses %s', (invoice, reason) => {
    expect(bolt11Msat(invoice)).toEqual({ ok: false, error: reason });
  });
});

describe('LNURL-pay', () => {
  it('maps a Lightning address to its LUD-16 endpoint, and takes an http(s) URL as is', () => {
    expect(lnurlpUrl('Bridge@Pay.Example.com')).toEqual({ ok: true, value: 'https://pay.example.com/.well-known/lnurlp/bridge' });
    expect(lnurlpUrl('http://127.0.0.1:9999/.well-known/lnurlp/x')).toEqual({ ok: true, value: 'http://127.0.0.1:9999/.well-known/lnurlp/x' });
    for (const bad of ['nobody', '@example.com', 'a b@example.com', 'x@', 'x@exa mple.com', 'x@example.com:99999']) {
      expect(lnurlpUrl(bad)).toEqual({ ok: false, error: 'a Lightning address is name@domain (or an https:// LNURL-pay URL)' });
    }
  });

  it('encodes LUD-01 test vector', () => {
    expect(encodeLnurl('https://service.com/api?q=3fc3645b439ce8e7f2553a69e5267081d96dcd340693afabe04be7b0ccd178df').toUpperCase()).toBe(
      'LNURL1DP68GURN8GHJ7UM9WFMXJCM99E3K7MF0V9CXJ0M385EKVCENXC6R2C35XVUKXEFCV5MKVV34X5EKZD3EV56NYD3HXQURZEPEXEJXXEPNXSCRVWFNV9NXZCN9XQ6XYEFHVGCXXCMYXYMNSERXFQ5FNS',
    );
  });

  const params = {
    tag: 'payRequest',
    callback: 'https://pay.example.com/lnurlp/bridge/callback',
    minSendable: 1_000,
    maxSendable: 100_000_000,
    metadata: '[["text/plain","bridge"]]',
    allowsNostr: true,
    nostrPubkey: 'a'.repeat(64),
  };

  it('accepts a zap-capable pay endpoint and checks the range', () => {
    const ep = zapEndpointOf(params);
    expect(ep).toEqual({ ok: true, value: { callback: params.callback, nostrPubkey: params.nostrPubkey, minSendable: 1_000, maxSendable: 100_000_000 } });
    if (!ep.ok) return;
    expect(amountRefusal(ep.value, 21_000)).toBeUndefined();
    expect(amountRefusal(ep.value, 999)).toBe('999 msat is outside what the Lightning address accepts (1000–100000000 msat)');
    expect(amountRefusal(ep.value, 100_000_001)).toBe('100000001 msat is outside what the Lightning address accepts (1000–100000000 msat)');
  });

  it.each([
    [{ status: 'ERROR', reason: 'no such user' }, 'the LNURL server refused: no such user'],
    [{ ...params, allowsNostr: undefined }, 'the Lightning address does not support zaps (allowsNostr is not true)'],
    [{ ...params, allowsNostr: false }, 'the Lightning address does not support zaps (allowsNostr is not true)'],
    [{ ...params, nostrPubkey: undefined }, 'the Lightning address has no nostrPubkey to sign zap receipts'],
    [{ ...params, minSendable: 5_000, maxSendable: 1_000 }, 'the LNURL server announces minSendable above maxSendable'],
    [{ ...params, tag: 'withdrawRequest' }, 'not an LNURL-pay answer (tag: Invalid input: expected "payRequest")'],
    [{ ...params, nostrPubkey: 'npub1xyz' }, expect.stringMatching(/^not an LNURL-pay answer \(nostrPubkey: /)],
    ['<html>', expect.stringMatching(/^not an LNURL-pay answer/)],
  ])('refuses pay parameters %#', (raw, reason) => {
    expect(zapEndpointOf(raw)).toEqual({ ok: false, error: reason });
  });

  it('checks the invoice of a callback answer against the amount asked for', () => {
    expect(invoiceOf({ pr: `lnbc210n1${TAIL}`, routes: [] }, 21_000)).toEqual({ ok: true, value: `lnbc210n1${TAIL}` });
    expect(invoiceOf({ pr: `lnbc220n1${TAIL}`, routes: [] }, 21_000)).toEqual({ ok: false, error: "the LNURL callback's invoice is for 22000 msat, not the 21000 msat asked for" });
    expect(invoiceOf({ pr: `lnbc1${TAIL}` }, 21_000)).toEqual({ ok: false, error: "the LNURL callback's invoice is unusable: the invoice has no amount" });
    expect(invoiceOf({ status: 'ERROR', reason: 'amount too small' }, 21_000)).toEqual({ ok: false, error: 'the LNURL server refused: amount too small' });
    expect(invoiceOf({ routes: [] }, 21_000)).toEqual({ ok: false, error: 'the LNURL callback answered without an invoice (pr)' });
  });
});

// ---- Zap request and receipt ----

const PROVIDER_SK = hexToBytes('11'.repeat(32));
const PROVIDER = getPublicKey(PROVIDER_SK);
const LNURL_SK = hexToBytes('22'.repeat(32));
const LNURL_PUBKEY = getPublicKey(LNURL_SK);
const OTHER_SK = hexToBytes('33'.repeat(32));
const REQUEST_ID = 'e'.repeat(64);
const INVOICE = `lnbc210n1${TAIL}`;
const CREATED = 1_780_000_000;

const sign = (t: { kind: number; created_at: number; tags: string[][]; content: string }, sk: Uint8Array): NostrEvent => {
  const { id, pubkey, created_at, kind, tags, content, sig } = finalizeEvent(t, sk);
  return { id, pubkey, created_at, kind, tags, content, sig };
};

const zapRequest = sign(
  { ...zapRequestTemplate({ recipient: PROVIDER, msat: 21_000, relays: ['ws://127.0.0.1:8787/'], eventId: REQUEST_ID, lnurl: encodeLnurl('https://pay.example.com/.well-known/lnurlp/bridge') }), created_at: CREATED },
  PROVIDER_SK,
);
const want: ZapExpectation = { nostrPubkey: LNURL_PUBKEY, bolt11: INVOICE, zapRequest };
/** A receipt as an LNURL server makes it (nostr-tools' NIP-57 code, independent of ours). */
const receiptFor = (request: NostrEvent, bolt11 = INVOICE, sk = LNURL_SK): NostrEvent =>
  sign(makeZapReceipt({ zapRequest: JSON.stringify(request), bolt11, paidAt: new Date(CREATED * 1000 + 5_000) }), sk);

describe('zap request', () => {
  it('is the NIP-57 appendix A shape, accepted by an independent validator', () => {
    expect(zapRequest.kind).toBe(9734);
    expect(zapRequest.tags.slice(0, 4)).toEqual([['relays', 'ws://127.0.0.1:8787/'], ['amount', '21000'], ['p', PROVIDER], ['e', REQUEST_ID]]);
    expect(zapRequest.tags[4]![0]).toBe('lnurl');
    expect(validateZapRequest(JSON.stringify(zapRequest))).toBeNull();
  });

  it('builds the callback URL with amount, nostr and lnurl', () => {
    const url = zapCallbackUrl('https://pay.example.com/cb?user=bridge', 21_000, zapRequest, 'lnurl1xyz');
    expect(url.ok).toBe(true);
    if (!url.ok) return;
    const u = new URL(url.value);
    expect(u.searchParams.get('user')).toBe('bridge');
    expect(u.searchParams.get('amount')).toBe('21000');
    expect(JSON.parse(u.searchParams.get('nostr')!)).toEqual(zapRequest);
    expect(u.searchParams.get('lnurl')).toBe('lnurl1xyz');
    expect(zapCallbackUrl('not a url', 21_000, zapRequest)).toEqual({ ok: false, error: 'the LNURL server gave an invalid callback URL' });
  });
});

describe('validateZapReceipt', () => {
  it('accepts the receipt of our invoice signed by the nostrPubkey', () => {
    expect(validateZapReceipt(receiptFor(zapRequest), want, nobleVerifier)).toEqual({ ok: true, value: undefined });
  });

  const otherRequest = sign({ ...zapRequestTemplate({ recipient: PROVIDER, msat: 21_000, relays: ['ws://127.0.0.1:8787/'], eventId: 'f'.repeat(64) }), created_at: CREATED }, PROVIDER_SK);
  const good = receiptFor(zapRequest);
  const forgedDescription = (() => {
    // Claims our request's id over different fields (a larger `e`): the id no longer matches.
    const d = { ...otherRequest, id: zapRequest.id };
    const tags = good.tags.map((t) => (t[0] === 'description' ? ['description', JSON.stringify(d)] : t));
    return sign({ kind: 9735, created_at: good.created_at, tags, content: '' }, LNURL_SK);
  })();
  const retagged = (name: string, value: string): NostrEvent =>
    sign({ kind: 9735, created_at: good.created_at, tags: good.tags.map((t) => (t[0] === name ? [name, value] : t)), content: '' }, LNURL_SK);

  it.each<[string, NostrEvent, string]>([
    ['signed by another key', receiptFor(zapRequest, INVOICE, OTHER_SK), 'the receipt is not signed by the Lightning address nostrPubkey'],
    ['a bad signature', { ...good, sig: good.sig.replace(/^./, (c) => (c === '0' ? '1' : '0')) }, 'the receipt is invalid: signature verification failed'],
    ['a changed field', { ...good, content: 'x' }, 'the receipt is invalid: event id does not match the event hash'],
    ['another invoice', receiptFor(zapRequest, `lnbc220n1${TAIL}`), 'the receipt is for another invoice'],
    ['another payee', retagged('p', 'b'.repeat(64)), 'the receipt pays someone else'],
    ['another zap request', receiptFor(otherRequest), 'the receipt description is not our zap request'],
    ['a forged description id', forgedDescription, 'the receipt description id does not match its fields'],
    ['a description that is not JSON', retagged('description', '{nope'), 'the receipt description is not JSON'],
    ['a description that is not an event', retagged('description', '{"kind":9734}'), 'the receipt description is not an event (id: Invalid input: expected string, received undefined)'],
    ['another kind', sign({ kind: 9734, created_at: CREATED, tags: good.tags, content: '' }, LNURL_SK), 'kind 9734 is not a zap receipt'],
  ])('refuses %s', (_what, receipt, reason) => {
    expect(validateZapReceipt(receipt, want, nobleVerifier)).toEqual({ ok: false, error: reason });
  });
});
