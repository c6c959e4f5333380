import { describe, expect, it } from 'vitest';
import { finalizeEvent, generateSecretKey, getPublicKey } from 'nostr-tools/pure';
import type { Tag } from './event.js';
import { base64Encode } from './hex.js';
import {
  HTTP_AUTH_WINDOW_SECONDS,
  MemoryReplayGuard,
  makeHttpAuthHeader,
  sha256Hex,
  verifyHttpAuth,
  type HttpAuthRequest,
} from './nip98.js';
import { nobleVerifier } from './verify.js';

const NOW = 1_750_000_000;
const URL_ = 'https://edgestr.example.com/api/agents';
const BODY = '{"name":"helper"}';
const sk = generateSecretKey();
const pk = getPublicKey(sk);
const utf8 = new TextEncoder();

const headerOf = (tags: Tag[], over: { kind?: number; created_at?: number } = {}) =>
  `Nostr ${base64Encode(utf8.encode(JSON.stringify(finalizeEvent({ kind: over.kind ?? 27235, created_at: over.created_at ?? NOW, tags, content: '' }, sk))))}`;

function run(req: Partial<HttpAuthRequest> & { authorization: string | null }, replay = new MemoryReplayGuard({ clock: () => NOW })) {
  const r = verifyHttpAuth({ url: URL_, method: 'POST', body: BODY, ...req }, { verifier: nobleVerifier, now: NOW, replay });
  return r.ok ? r.value.pubkey : `${r.error.status} ${r.error.reason}`;
}

describe('verifyHttpAuth', () => {
  it('accepts a header made by makeHttpAuthHeader, with string or byte bodies', () => {
    expect(run({ authorization: makeHttpAuthHeader(sk, URL_, 'post', BODY, NOW) })).toBe(pk);
    expect(run({ authorization: makeHttpAuthHeader(sk, URL_, 'POST', utf8.encode(BODY), NOW), body: utf8.encode(BODY) })).toBe(pk);
    const r = verifyHttpAuth(
      { authorization: makeHttpAuthHeader(sk, URL_, 'GET', undefined, NOW), url: URL_, method: 'GET' },
      { verifier: nobleVerifier, now: NOW, replay: new MemoryReplayGuard({ clock: () => NOW }) },
    );
    expect(r.ok && r.value.event.kind).toBe(27235);
    expect(r.ok && r.value.event.tags).toEqual([['u', URL_], ['method', 'GET'], ['nonce', expect.stringMatching(/^[0-9a-f]{16}$/)]]);
  });

  it('rejects a missing or empty header', () => {
    expect(run({ authorization: null })).toBe('401 missing Authorization header');
    expect(run({ authorization: '  ' })).toBe('401 missing Authorization header');
  });

  it('rejects other schemes, non-base64 and non-JSON tokens, and oversized headers', () => {
    const good = makeHttpAuthHeader(sk, URL_, 'POST', BODY, NOW);
    expect(run({ authorization: good.replace('Nostr ', 'Bearer ') })).toBe('401 Authorization header must be "Nostr <base64 event>"');
    expect(run({ authorization: 'Nostr' })).toBe('401 Authorization header must be "Nostr <base64 event>"');
    expect(run({ authorization: good.replace('Nostr ', 'nostr ') })).toBe(pk); // scheme is case-insensitive
    expect(run({ authorization: 'Nostr !!!notbase64!!!' })).toBe('401 Authorization token is not valid base64');
    expect(run({ authorization: good.slice(0, -3) })).toBe('401 Authorization token is not valid base64');
    expect(run({ authorization: `Nostr ${base64Encode(utf8.encode('{not json'))}` })).toBe('401 Authorization token is not a JSON event');
    expect(run({ authorization: `Nostr ${'A'.repeat(20000)}` })).toBe('401 Authorization header is too large');
  });

  it('rejects an event with a bad signature or a bad shape', () => {
    const e = finalizeEvent({ kind: 27235, created_at: NOW, tags: [['u', URL_], ['method', 'POST']], content: '' }, sk);
    const badSig = { ...e, sig: (e.sig[0] === '0' ? '1' : '0') + e.sig.slice(1) };
    const enc = (o: unknown) => `Nostr ${base64Encode(utf8.encode(JSON.stringify(o)))}`;
    expect(run({ authorization: enc(badSig), body: undefined })).toBe('401 invalid event: signature verification failed');
    expect(run({ authorization: enc({ ...e, content: 'x' }), body: undefined })).toBe('401 invalid event: event id does not match the event hash');
    expect(run({ authorization: enc({ ...e, kind: 'x' }), body: undefined })).toBe('401 invalid event: kind must be a number');
  });

  it('rejects a wrong kind', () => {
    expect(run({ authorization: headerOf([['u', URL_], ['method', 'GET']], { kind: 27236 }), method: 'GET', body: undefined })).toBe(
      '401 event kind must be 27235',
    );
  });

  it('accepts created_at exactly ±60 s from now and rejects 61 s', () => {
    const at = (t: number) => run({ authorization: makeHttpAuthHeader(sk, URL_, 'POST', BODY, t) });
    expect(at(NOW - HTTP_AUTH_WINDOW_SECONDS)).toBe(pk);
    expect(at(NOW + HTTP_AUTH_WINDOW_SECONDS)).toBe(pk);
    expect(at(NOW - HTTP_AUTH_WINDOW_SECONDS - 1)).toBe('401 event created_at is more than 60 seconds from now');
    expect(at(NOW + HTTP_AUTH_WINDOW_SECONDS + 1)).toBe('401 event created_at is more than 60 seconds from now');
  });

  it('rejects a missing or wrong u tag, comparing URLs exactly after normalisation', () => {
    const mismatch = `401 u tag does not match the request URL (${URL_})`;
    expect(run({ authorization: makeHttpAuthHeader(sk, URL_ + '/', 'POST', BODY, NOW) })).toBe(mismatch);
    expect(run({ authorization: makeHttpAuthHeader(sk, URL_ + '?x=1', 'POST', BODY, NOW) })).toBe(mismatch);
    expect(run({ authorization: makeHttpAuthHeader(sk, 'http://edgestr.example.com/api/agents', 'POST', BODY, NOW) })).toBe(mismatch);
    expect(run({ authorization: makeHttpAuthHeader(sk, '/api/agents', 'POST', BODY, NOW) })).toBe(mismatch);
    // Only differences that new URL().href removes are tolerated.
    expect(run({ authorization: makeHttpAuthHeader(sk, 'HTTPS://EDGESTR.example.com:443/api/agents', 'POST', BODY, NOW) })).toBe(pk);
    expect(run({ authorization: headerOf([['method', 'POST'], ['payload', sha256Hex(utf8.encode(BODY))]]) })).toBe('401 missing u tag');
  });

  it('rejects a missing or wrong method tag (compared case-insensitively)', () => {
    expect(run({ authorization: makeHttpAuthHeader(sk, URL_, 'PUT', BODY, NOW) })).toBe('401 method tag does not match the request method (POST)');
    expect(run({ authorization: makeHttpAuthHeader(sk, URL_, 'post', BODY, NOW), method: 'Post' })).toBe(pk);
    expect(run({ authorization: headerOf([['u', URL_], ['payload', sha256Hex(utf8.encode(BODY))]]) })).toBe('401 missing method tag');
  });

  it('checks the payload tag against the body', () => {
    expect(run({ authorization: makeHttpAuthHeader(sk, URL_, 'POST', BODY, NOW), body: BODY + ' ' })).toBe(
      '401 payload tag does not match the SHA-256 of the body',
    );
    expect(run({ authorization: headerOf([['u', URL_], ['method', 'POST']]) })).toBe(
      '401 missing payload tag (required when the request has a body)',
    );
    // A payload tag with no body must be the hash of the empty body.
    expect(run({ authorization: makeHttpAuthHeader(sk, URL_, 'POST', '', NOW), body: undefined })).toBe(pk);
    expect(run({ authorization: makeHttpAuthHeader(sk, URL_, 'POST', BODY, NOW), body: undefined })).toBe(
      '401 payload tag does not match the SHA-256 of the body',
    );
    // No body and no payload tag is fine; uppercase hex in the tag is accepted.
    expect(run({ authorization: headerOf([['u', URL_], ['method', 'POST']]), body: new Uint8Array(0) })).toBe(pk);
    const upper = sha256Hex(utf8.encode(BODY)).toUpperCase();
    expect(run({ authorization: headerOf([['u', URL_], ['method', 'POST'], ['payload', upper]]) })).toBe(pk);
  });

  it('accepts an event id once', () => {
    const guard = new MemoryReplayGuard({ clock: () => NOW });
    const h = makeHttpAuthHeader(sk, URL_, 'POST', BODY, NOW);
    expect(run({ authorization: h }, guard)).toBe(pk);
    expect(run({ authorization: h }, guard)).toBe('401 event was already used (each NIP-98 event is accepted once)');
    // A fresh event for the same request is fine.
    expect(run({ authorization: makeHttpAuthHeader(sk, URL_, 'POST', BODY, NOW - 1) }, guard)).toBe(pk);
  });

  it('does not burn an id on a request that fails another check', () => {
    const guard = new MemoryReplayGuard({ clock: () => NOW });
    const h = makeHttpAuthHeader(sk, URL_, 'POST', BODY, NOW);
    expect(run({ authorization: h, method: 'PUT' }, guard)).toMatch(/^401 method tag/);
    expect(guard.size).toBe(0);
    expect(run({ authorization: h }, guard)).toBe(pk);
  });
});

describe('MemoryReplayGuard', () => {
  it('remembers ids until they expire (inclusive), then forgets them', () => {
    let now = 100;
    const g = new MemoryReplayGuard({ clock: () => now });
    expect(g.seen('a', 160)).toBe(false);
    expect(g.seen('a', 160)).toBe(true);
    now = 160;
    expect(g.seen('a', 160)).toBe(true);
    now = 161;
    expect(g.seen('b', 221)).toBe(false); // purges a
    expect(g.size).toBe(1);
    expect(g.seen('a', 160)).toBe(false);
  });

  it('is bounded: the oldest ids are evicted when full', () => {
    const g = new MemoryReplayGuard({ maxEntries: 3, clock: () => 0 });
    for (const id of ['a', 'b', 'c', 'd']) expect(g.seen(id, 1000)).toBe(false);
    expect(g.size).toBe(3);
    expect(g.seen('d', 1000)).toBe(true);
    expect(g.seen('a', 1000)).toBe(false); // was evicted
    expect(() => new MemoryReplayGuard({ maxEntries: 0 })).toThrow(RangeError);
  });
});
