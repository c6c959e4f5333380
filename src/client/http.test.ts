import { describe, expect, it } from 'vitest';
import { generateSecretKey } from 'nostr-tools/pure';
import { MemoryReplayGuard, verifyHttpAuth } from '../shared/nip98.js';
import { nobleVerifier } from '../shared/verify.js';
import { httpBase, nip98Header, wsUrl } from './http.js';
import { keyPair, parseSecretKey } from './keys.js';
import { nsecEncode } from 'nostr-tools/nip19';

const key = keyPair(generateSecretKey());
const URL_ = 'http://127.0.0.1:8787/api/agents';

describe('nip98Header', () => {
  it('two identical calls in the same second are distinct events, both accepted once (random nonce)', () => {
    const now = Math.floor(Date.now() / 1000);
    const replay = new MemoryReplayGuard({ clock: () => now });
    const a = nip98Header(key, URL_, 'GET');
    const b = nip98Header(key, URL_, 'GET');
    expect(a).not.toBe(b);
    const check = (h: string) => verifyHttpAuth({ authorization: h, url: URL_, method: 'GET' }, { verifier: nobleVerifier, now, replay });
    expect(check(a)).toMatchObject({ ok: true, value: { pubkey: key.pk } });
    expect(check(b)).toMatchObject({ ok: true, value: { pubkey: key.pk } });
    expect(check(a)).toMatchObject({ ok: false, error: { status: 401 } });
  });

  it('signs the body: a different body is refused', () => {
    const now = Math.floor(Date.now() / 1000);
    const h = nip98Header(key, URL_, 'POST', '{"name":"a"}');
    const r = verifyHttpAuth({ authorization: h, url: URL_, method: 'POST', body: '{"name":"b"}' }, { verifier: nobleVerifier, now, replay: new MemoryReplayGuard({ clock: () => now }) });
    expect(r.ok).toBe(false);
  });
});

describe('deployment URLs and keys', () => {
  it('http and ws forms of a deployment URL', () => {
    expect(httpBase('ws://h:1/')).toBe('http://h:1');
    expect(httpBase('https://h/')).toBe('https://h');
    expect(wsUrl('https://h', '/r/abc')).toBe('wss://h/r/abc');
    expect(wsUrl('http://127.0.0.1:8787/', '/')).toBe('ws://127.0.0.1:8787/');
  });

  it('secret keys as nsec or hex; anything else is refused', () => {
    const hex = Buffer.from(key.sk).toString('hex');
    expect(parseSecretKey(` ${hex.toUpperCase()}\n`)).toEqual({ ok: true, value: key.sk });
    expect(parseSecretKey(nsecEncode(key.sk))).toEqual({ ok: true, value: key.sk });
    for (const bad of ['', 'nsec1xyz', hex.slice(2), 'npub1abc']) {
      expect(parseSecretKey(bad)).toEqual({ ok: false, error: 'not a secret key (expected an nsec or 64 hex characters)' });
    }
  });
});
