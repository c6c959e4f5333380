// NIP-42 pieces of the relay client: the AUTH event template, the `auth-required:` test, and the
// wire order of a signed event.

import { parseRejection } from './errors.js';
import type { NostrEvent } from './event.js';
import { KIND } from './kinds.js';
import type { EventTemplate } from './relay-types.js';

/** Whether a relay's OK or CLOSED message asks the client to authenticate first. */
export const isAuthRequired = (message: string): boolean => parseRejection(message)?.prefix === 'auth-required';

/** The kind 22242 template answering `challenge` from the relay at `url`. */
export const authTemplate = (url: string, challenge: string): EventTemplate => ({
  kind: KIND.AUTH,
  created_at: Math.floor(Date.now() / 1000),
  tags: [
    ['relay', url],
    ['challenge', challenge],
  ],
  content: '',
});

/** The event with `id` first, so a relay refusing an oversized message can still name it in OK. */
export const wireEvent = (e: NostrEvent): NostrEvent => ({
  id: e.id,
  pubkey: e.pubkey,
  created_at: e.created_at,
  kind: e.kind,
  tags: e.tags,
  content: e.content,
  sig: e.sig,
});
