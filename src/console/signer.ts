// Who the console acts as: a NIP-07 browser extension (window.nostr) when present, or a local key
// generated in (or imported into) this browser and kept in localStorage. Both sign events and
// encrypt/decrypt NIP-44; only a local key can read NIP-AO telemetry (the observer needs the key).

import { decode } from 'nostr-tools/nip19';
import { generateSecretKey, getPublicKey } from 'nostr-tools/pure';
import { err, errorMessage, ok, type Result } from '../shared/errors.js';
import { parseEvent, type EventTemplate, type NostrEvent } from '../shared/event.js';
import { bytesToHex, hexToBytes, isHex64 } from '../shared/hex.js';
import { signEvent } from '../shared/ao-keys.js';
import { ConversationKeyCache, decrypt, encrypt } from '../shared/nip44.js';

export interface Signer {
  readonly via: 'local' | 'nip07';
  readonly pubkey: string;
  /** The secret key (local keys only). */
  readonly secretKey?: Uint8Array;
  sign(template: EventTemplate): Promise<NostrEvent>;
  encrypt(peer: string, plaintext: string): Promise<string>;
  decrypt(peer: string, payload: string): Promise<Result<string, string>>;
}

/** The part of a NIP-07 extension the console uses. */
interface Nip07 {
  getPublicKey(): Promise<string>;
  signEvent(template: EventTemplate): Promise<unknown>;
  nip44?: { encrypt(peer: string, plaintext: string): Promise<string>; decrypt(peer: string, payload: string): Promise<string> };
}

const STORAGE_KEY = 'edgestr.console.key';
const cache = new ConversationKeyCache(64);

export function localSigner(sk: Uint8Array): Signer {
  return {
    via: 'local',
    pubkey: getPublicKey(sk),
    secretKey: sk,
    sign: (t) => Promise.resolve(signEvent(t, sk)),
    encrypt: (peer, text) => Promise.resolve(encrypt(text, cache.get(sk, peer))),
    decrypt: (peer, payload) => {
      const r = decrypt(payload, cache.get(sk, peer));
      return Promise.resolve(r.ok ? ok(r.value) : err(`cannot decrypt: ${r.error}`));
    },
  };
}

/** A secret key from "nsec1…" or 64 hex, or why the text is not one. */
export function parseSecretKey(text: string): Result<Uint8Array, string> {
  const s = text.trim().toLowerCase();
  if (isHex64(s)) return ok(hexToBytes(s));
  if (s.startsWith('nsec1')) {
    try {
      const d = decode(s as `nsec1${string}`);
      if (d.type === 'nsec') return ok(d.data);
    } catch (e) {
      return err(`not a valid nsec: ${errorMessage(e)}`);
    }
  }
  return err('a secret key is an nsec1… string or 64 hex digits');
}

/** The local key stored in this browser, if any. */
export function storedSigner(): Signer | undefined {
  const hex = localStorage.getItem(STORAGE_KEY);
  return hex && isHex64(hex) ? localSigner(hexToBytes(hex)) : undefined;
}

/** Keeps `sk` in this browser (a fresh key when absent) and returns its signer. */
export function keepLocalKey(sk: Uint8Array = generateSecretKey()): Signer {
  localStorage.setItem(STORAGE_KEY, bytesToHex(sk));
  return localSigner(sk);
}

export const forgetLocalKey = (): void => localStorage.removeItem(STORAGE_KEY);

const extension = (): Nip07 | undefined => (window as unknown as { nostr?: Nip07 }).nostr;

export const hasNip07 = (): boolean => extension() !== undefined;

/** The NIP-07 extension as a signer, or why it cannot be used. */
export async function nip07Signer(): Promise<Result<Signer, string>> {
  const ext = extension();
  if (!ext) return err('no NIP-07 extension in this browser');
  const nip44 = ext.nip44;
  if (!nip44) return err('this NIP-07 extension has no nip44 support, which agent messages need: use a local key');
  let pubkey: string;
  try {
    pubkey = (await ext.getPublicKey()).toLowerCase();
  } catch (e) {
    return err(`the extension refused: ${errorMessage(e)}`);
  }
  if (!isHex64(pubkey)) return err('the extension returned no valid public key');
  return ok({
    via: 'nip07',
    pubkey,
    async sign(t) {
      const parsed = parseEvent(await ext.signEvent(t));
      if (!parsed.ok || parsed.value.pubkey !== pubkey) throw new Error('the extension returned an invalid event');
      return parsed.value;
    },
    encrypt: (peer, text) => nip44.encrypt(peer, text),
    async decrypt(peer, payload) {
      try {
        return ok(await nip44.decrypt(peer, payload));
      } catch (e) {
        return err(`cannot decrypt: ${errorMessage(e)}`);
      }
    },
  });
}
