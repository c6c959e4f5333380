// Fixed keys shared by the test configuration (Node side) and the tests (workerd side).
import { sha256 } from '@noble/hashes/sha2.js';
import { getPublicKey } from 'nostr-tools/pure';

/** The owner listed in EDGESTR_OWNERS for in-runtime tests. */
export const TEST_OWNER_SK = sha256(new TextEncoder().encode('edgestr test owner'));
export const TEST_OWNER = getPublicKey(TEST_OWNER_SK);
