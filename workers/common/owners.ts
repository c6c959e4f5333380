// Who may own agents and bridge servers on this deployment (EDGESTR_OWNERS) and the local demo
// keys. Shared by the router (closed shards), the management API and the Agent Durable Object,
// which checks at prompt time that its owner is still allowed.

import { sha256 } from '@noble/hashes/sha2.js';
import { getPublicKey } from 'nostr-tools/pure';
import { parsePubkey } from '../../src/shared/keys.js';
import { isDevelopment, type SecretEnv } from './secrets.js';

export interface OwnerEnv extends SecretEnv {
  EDGESTR_OWNERS?: string;
}

const seed = (label: string) => sha256(new TextEncoder().encode(label));

/** The local demo keys: derived from public labels, so they are known to everyone — development only. */
export const DEMO_OWNER_SK = seed('edgestr demo owner (local development only)');
export const DEMO_AGENT_SK = seed('edgestr demo agent (local development only)');
export const DEMO_OWNER = getPublicKey(DEMO_OWNER_SK);
export const DEMO_AGENT = getPublicKey(DEMO_AGENT_SK);

/** The owners allowed on this deployment: EDGESTR_OWNERS (64-hex or npub, comma-separated), plus the demo owner in development. */
export function allowedOwners(env: OwnerEnv): Set<string> {
  const out = new Set<string>();
  for (const part of (env.EDGESTR_OWNERS ?? '').split(',')) {
    const hex = parsePubkey(part.trim());
    if (hex) out.add(hex);
  }
  if (isDevelopment(env)) out.add(DEMO_OWNER);
  return out;
}

/** The management API's 403 reason for a pubkey that may not own (see allowedOwners), or undefined. */
export const notAnOwner = (env: OwnerEnv, pubkey: string): string | undefined =>
  allowedOwners(env).has(pubkey) ? undefined : 'this pubkey may not own agents on this deployment (EDGESTR_OWNERS)';
