// Fixed keys shared by the e2e global setup (which lists the owner in EDGESTR_OWNERS of the agent
// instance) and the e2e tests (which sign NIP-98 management calls and NIP-AO frames with it).
import { sha256 } from '@noble/hashes/sha2.js';
import { getPublicKey } from 'nostr-tools/pure';

/** The owner listed in EDGESTR_OWNERS of the second `wrangler dev` instance (inject('agentHttpUrl')). */
export const E2E_OWNER_SK = sha256(new TextEncoder().encode('edgestr e2e owner'));
export const E2E_OWNER = getPublicKey(E2E_OWNER_SK);

/** EDGESTR_SECRET of the agent instance: a test value, not a secret. */
export const E2E_SECRET = 'edgestr-e2e-secret-0123456789abcdef';
