// Pure parts of the bridge's payments, in Node: the local invoice format (payments-local.ts), which
// verifier a configuration chooses and the expiry setting (payments.ts), and price parsing
// (payments-gate.ts `satsOf`).
import { describe, expect, it } from 'vitest';
import { bolt11Msat } from '../../src/shared/nip57.js';
import { localInvoice, parseLocalInvoice } from './payments-local.js';
import { paymentConfig, PAYMENT_RPC, verifierKind } from './payments.js';
import { satsOf } from './payments-gate.js';

const OWNER = 'a1'.repeat(32);

describe('local invoices and configuration', () => {
  it('read as a regtest BOLT-11 amount and name their bridge (its owner) and id', () => {
    const id = 'c3'.repeat(16);
    const inv = localInvoice(OWNER, id, 21);
    expect(inv).toMatch(/^lnbcrt210n1edgestrdev[qpzry9x8gf2tvdw0s3jn54khce6mua7l]{77}$/);
    expect(bolt11Msat(inv)).toEqual({ ok: true, value: 21_000 });
    expect(parseLocalInvoice(inv)).toEqual({ ok: true, value: { owner: OWNER, id, sats: 21 } });
  });

  it.each(['lnbc210n1edgestrdevqqqq', `lnbcrt210n1${'q'.repeat(87)}`, 'hello', `lnbcrt210n1edgestrdev${'l'.repeat(77)}`])('refuses %s', (s) => {
    expect(parseLocalInvoice(s)).toEqual({ ok: false, error: 'not a local invoice of this deployment (lnbcrt…n1edgestrdev…)' });
  });

  it('is chosen with no Lightning address in development and test only', () => {
    expect(verifierKind({ EDGESTR_ENV: 'test' })).toEqual({ kind: 'local' });
    expect(verifierKind({ EDGESTR_ENV: 'development' })).toEqual({ kind: 'local' });
    expect(verifierKind({})).toBeUndefined();
    expect(verifierKind({ EDGESTR_ENV: 'production' })).toBeUndefined();
    expect(verifierKind({ EDGESTR_ENV: 'test', EDGESTR_LN_ADDRESS: 'bridge@pay.example.com' })).toEqual({ kind: 'zap', address: 'bridge@pay.example.com' });
    expect(verifierKind({ EDGESTR_LN_ADDRESS: ' env@pay.example.com ' })).toEqual({ kind: 'zap', address: 'env@pay.example.com' });
    expect(verifierKind({ EDGESTR_ENV: 'test', EDGESTR_LN_ADDRESS: '  ' })).toEqual({ kind: 'local' });
  });

  it('expiry is configurable, whole seconds only', () => {
    expect(paymentConfig({}).expirySeconds).toBe(600);
    expect(paymentConfig({ EDGESTR_PAYMENT_EXPIRY: '30' }).expirySeconds).toBe(30);
    for (const bad of ['0', '-5', '1.5', 'soon', '', '999999']) expect(paymentConfig({ EDGESTR_PAYMENT_EXPIRY: bad }).expirySeconds).toBe(600);
  });
});

describe('satsOf', () => {
  it('reads whole sats in unit sats or sat, any case', () => {
    expect(satsOf({ price: '21', unit: 'sats' })).toEqual({ ok: true, value: 21 });
    expect(satsOf({ price: '0', unit: 'SAT' })).toEqual({ ok: true, value: 0 });
    expect(satsOf({ price: '1000000000', unit: 'Sats' })).toEqual({ ok: true, value: 1_000_000_000 });
  });

  it.each([
    [{ price: '5', unit: 'usd' }, 'unsupported price unit "usd": this bridge takes payment in sats'],
    [{ price: '5', unit: 'msat' }, 'unsupported price unit "msat": this bridge takes payment in sats'],
    [{ price: '1000000001', unit: 'sats' }, 'unsupported price "1000000001": a price is a whole number of sats'],
    [{ price: '', unit: 'sats' }, 'unsupported price "": a price is a whole number of sats'],
    [{ price: '2e3', unit: 'sats' }, 'unsupported price "2e3": a price is a whole number of sats'],
  ])('refuses %j', (price, message) => {
    expect(satsOf(price)).toEqual({ ok: false, error: { code: PAYMENT_RPC.UNSUPPORTED_PRICE, message } });
  });
});
