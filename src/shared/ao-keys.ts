// Key material and event signing shared by the NIP-AO emitter (agent key) and control frames
// (owner key). Pure: no Worker or Node APIs, no state.

import { finalizeEvent } from 'nostr-tools/pure';
import type { EventTemplate, NostrEvent } from './event.js';
import { hexToBytes } from './hex.js';

/** A secret key given as 32 bytes or 64 hex, as bytes. */
export const toSecretBytes = (sk: Uint8Array | string): Uint8Array => (typeof sk === 'string' ? hexToBytes(sk) : sk);

/** A signed event as a plain object (nostr-tools marks its events with a symbol). */
export function signEvent(template: EventTemplate, sk: Uint8Array): NostrEvent {
  const { id, pubkey, created_at, kind, tags, content, sig } = finalizeEvent(template, sk);
  return { id, pubkey, created_at, kind, tags, content, sig };
}
