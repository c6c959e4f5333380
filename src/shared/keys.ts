// Public key notation: 64-hex or NIP-19 npub, normalised to lowercase hex.

import { decode, npubEncode } from 'nostr-tools/nip19';
import { isHex64 } from './hex.js';

/** The hex pubkey named by `s` (64-hex in any case, or npub1…), or undefined when it names none. */
export function parsePubkey(s: string): string | undefined {
  const lower = s.toLowerCase();
  if (isHex64(lower)) return lower;
  if (!lower.startsWith('npub1')) return undefined;
  try {
    const decoded = decode(lower as `npub1${string}`);
    return decoded.type === 'npub' ? decoded.data : undefined;
  } catch {
    // A malformed bech32 string names no key; the caller reports that to the user.
    return undefined;
  }
}

export const toNpub = (hex: string): string => npubEncode(hex);
