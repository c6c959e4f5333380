import { describe, expect, it } from 'vitest';
import { finalizeEvent, generateSecretKey, getPublicKey } from 'nostr-tools/pure';
import { formatRejection } from './errors.js';
import { validateEvent, type NostrEvent, type Tag } from './event.js';
import { AUTH_WINDOW_SECONDS, makeAuthEvent, normalizeRelayUrl, validateAuthEvent } from './nip42.js';
import { nobleVerifier } from './verify.js';

const NOW = 1_750_000_000;
const RELAY = 'wss://relay.example.com/r/abc';
const CHALLENGE = 'c-7f3a9e';
const sk = generateSecretKey();
const pk = getPublicKey(sk);

function signed(template: { kind: number; created_at: number; tags: Tag[]; content: string }): NostrEvent {
  const v = validateEvent(finalizeEvent(template, sk), nobleVerifier);
  if (!v.ok) throw new Error(formatRejection(v.error));
  return v.value;
}

const authEvent = (over: { relay?: string; challenge?: string; now?: number; tags?: Tag[] } = {}) =>
  signed(makeAuthEvent({ relay: over.relay ?? RELAY, challenge: over.challenge ?? CHALLENGE, now: over.now ?? NOW, tags: over.tags }));

const check = (e: NostrEvent, relayUrl = RELAY) => {
  const r = validateAuthEvent(e, { challenge: CHALLENGE, relayUrl, now: NOW });
  return r.ok ? r.value : formatRejection(r.error);
};

describe('makeAuthEvent', () => {
  it('builds an unsigned kind 22242 template with relay and challenge tags', () => {
    const t = makeAuthEvent({ relay: RELAY, challenge: CHALLENGE, now: NOW, tags: [['auth', 'x', '', 'y']] });
    expect(t).toEqual({
      kind: 22242,
      created_at: NOW,
      tags: [['relay', RELAY], ['challenge', CHALLENGE], ['auth', 'x', '', 'y']],
      content: '',
    });
    const live = makeAuthEvent({ relay: RELAY, challenge: CHALLENGE });
    expect(Math.abs(live.created_at - Date.now() / 1000)).toBeLessThan(5);
  });
});

describe('validateAuthEvent', () => {
  it('accepts a matching AUTH event and returns the pubkey', () => {
    expect(check(authEvent())).toBe(pk);
  });

  it('rejects a wrong kind', () => {
    const e = signed({ kind: 1, created_at: NOW, tags: [['relay', RELAY], ['challenge', CHALLENGE]], content: '' });
    expect(check(e)).toBe('invalid: AUTH event must be kind 22242');
  });

  it('accepts created_at exactly ±600 s from now and rejects one second beyond', () => {
    expect(check(authEvent({ now: NOW - AUTH_WINDOW_SECONDS }))).toBe(pk);
    expect(check(authEvent({ now: NOW + AUTH_WINDOW_SECONDS }))).toBe(pk);
    expect(check(authEvent({ now: NOW - AUTH_WINDOW_SECONDS - 1 }))).toBe('invalid: AUTH event is more than 10 minutes from now');
    expect(check(authEvent({ now: NOW + AUTH_WINDOW_SECONDS + 1 }))).toBe('invalid: AUTH event is more than 10 minutes from now');
  });

  it('rejects a different challenge, and a missing challenge tag', () => {
    expect(check(authEvent({ challenge: 'other' }))).toBe('auth-required: challenge does not match');
    const e = signed({ kind: 22242, created_at: NOW, tags: [['relay', RELAY]], content: '' });
    expect(check(e)).toBe('invalid: AUTH event has no challenge tag');
  });

  it('rejects a different relay, and a missing relay tag', () => {
    expect(check(authEvent({ relay: 'wss://relay.example.com/r/other' }))).toBe(
      'auth-required: relay tag does not match this relay (wss://relay.example.com/r/abc)',
    );
    expect(check(authEvent({ relay: 'wss://evil.example.com/r/abc' }))).toMatch(/^auth-required: relay tag does not match/);
    expect(check(authEvent({ relay: 'not a url' }))).toMatch(/^auth-required: relay tag does not match/);
    const e = signed({ kind: 22242, created_at: NOW, tags: [['challenge', CHALLENGE]], content: '' });
    expect(check(e)).toBe('invalid: AUTH event has no relay tag');
  });

  it('compares relay URLs after normalisation', () => {
    expect(check(authEvent({ relay: 'wss://RELAY.Example.com/r/abc/' }))).toBe(pk);
    expect(check(authEvent({ relay: 'wss://relay.example.com:443/r/abc' }))).toBe(pk);
    expect(check(authEvent({ relay: 'wss://relay.example.com' }), 'https://relay.example.com/')).toBe(pk);
    // Path is case-sensitive, scheme matters.
    expect(check(authEvent({ relay: 'wss://relay.example.com/R/ABC' }))).toMatch(/^auth-required:/);
    expect(check(authEvent({ relay: 'ws://relay.example.com/r/abc' }))).toMatch(/^auth-required:/);
  });

  it('throws when the relay itself passes a URL that is not a relay URL (programmer error)', () => {
    expect(() => check(authEvent(), 'ftp://x')).toThrow(/relayUrl/);
  });
});

describe('normalizeRelayUrl', () => {
  it('normalises scheme, host, port and trailing slash', () => {
    expect(normalizeRelayUrl('wss://Relay.Example.COM/')).toBe('wss://relay.example.com');
    expect(normalizeRelayUrl('wss://relay.example.com')).toBe('wss://relay.example.com');
    expect(normalizeRelayUrl('https://relay.example.com/r/x/?q=1#f')).toBe('wss://relay.example.com/r/x');
    expect(normalizeRelayUrl('http://localhost:8787/r/x')).toBe('ws://localhost:8787/r/x');
    expect(normalizeRelayUrl('ws://localhost:80/')).toBe('ws://localhost');
    expect(normalizeRelayUrl('wss://h:8443/a')).toBe('wss://h:8443/a');
    expect(normalizeRelayUrl('ftp://h/')).toBeUndefined();
    expect(normalizeRelayUrl('nope')).toBeUndefined();
  });
});
