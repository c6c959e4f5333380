// Keys, signed events and random ids for tests, with no runtime dependency: used by the Node unit
// tests beside the source (src/**/*.test.ts, workers/**/*.test.ts) and by the workerd tests.

import { finalizeEvent, generateSecretKey, getPublicKey } from 'nostr-tools/pure';
import type { NostrEvent } from '../../src/shared/event.js';
import { bytesToHex } from '../../src/shared/hex.js';

export interface Keys {
  sk: Uint8Array;
  pk: string;
}

export function keys(): Keys {
  const sk = generateSecretKey();
  return { sk, pk: getPublicKey(sk) };
}

export const now = () => Math.floor(Date.now() / 1000);

export function sign(
  k: Keys,
  t: { kind?: number; content?: string; tags?: string[][]; created_at?: number } = {},
): NostrEvent {
  const { id, pubkey, created_at, kind, tags, content, sig } = finalizeEvent(
    { kind: t.kind ?? 1, content: t.content ?? 'hello', tags: t.tags ?? [], created_at: t.created_at ?? now() },
    k.sk,
  );
  // A plain object (nostr-tools marks signed events with a symbol that would break deep equality).
  return { id, pubkey, created_at, kind, tags, content, sig };
}

/** A random owner shard path (each test gets an isolated shard). */
export const freshOwner = (): Keys => keys();

export const randomHex = (n = 32) => bytesToHex(crypto.getRandomValues(new Uint8Array(n)));
