// Two providers claiming one DVMCP server name, for the client tests of which server a name leads
// to (src/client/tools.test.ts, src/cli/server-choice.test.ts): this deployment's bridge and a
// stranger, each with its own key, and their signed server announcements (31316).
import { finalizeEvent, generateSecretKey, getPublicKey } from 'nostr-tools/pure';
import { serverAnnouncement } from '../../src/shared/dvmcp.js';
import type { NostrEvent } from '../../src/shared/event.js';

export const bridge = generateSecretKey();
export const bridgePk = getPublicKey(bridge);
export const stranger = generateSecretKey();
export const strangerPk = getPublicKey(stranger);
/** An hour ago: the announcements' base date. */
export const T = Math.floor(Date.now() / 1000) - 3600;

const init = { protocolVersion: '2025-03-26', capabilities: { tools: {} }, serverInfo: { name: 's', version: '1' } };

/** A 31316 of `sk` for server `id`, dated `created_at`. */
export const ann = (sk: Uint8Array, id: string, created_at: number, profile: { name?: string } = {}): NostrEvent =>
  finalizeEvent({ ...serverAnnouncement({ id, encryption: false, ...profile }, init), created_at }, sk);
