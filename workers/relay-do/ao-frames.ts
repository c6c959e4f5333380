// NIP-AO on the relay: admission of kind 24200 frames (tags, freshness, authentication, proven
// agent→owner pair, telemetry rate limit), a `rejectEvent` hook (policy.ts). Frames never touch
// storage; who may subscribe to them and receive them is the read policy's (read-policy.ts).

import { reject } from '../../src/shared/errors.js';
import { KIND } from '../../src/shared/kinds.js';
import { AO_TELEMETRY_RATE, checkFrameEnvelope, frameRoute } from '../../src/shared/nip-ao.js';
import type { RejectEventHook } from './policy.js';
import { SlidingWindowLimiter } from './rate-limit.js';

/**
 * Decides what happens to a verified kind 24200 event: rejected, dropped (an unknown direction:
 * accepted, not delivered) or passed on to fan-out. Other kinds pass. Telemetry is signed by the
 * agent (its created_at must be covered by the proof too); control frames by the owner.
 */
export function aoFrameAdmission(): RejectEventHook {
  const telemetry = new SlidingWindowLimiter(AO_TELEMETRY_RATE, 1000);
  return (e, ctx) => {
    if (e.kind !== KIND.AO_FRAME) return undefined;
    const route = frameRoute(e);
    if (!route.ok) return route.error;
    if (route.value.direction === 'unknown') return 'drop';
    const envelope = checkFrameEnvelope(e, Math.floor(ctx.nowMs / 1000));
    if (!envelope.ok) return envelope.error;
    if (!ctx.authed.has(e.pubkey)) {
      return reject('auth-required', 'kind 24200 frames are accepted only from a connection authenticated as their signer');
    }
    const { agent, owner, direction } = route.value;
    if (!ctx.isAgentOwner(agent, owner, e.pubkey === agent ? e : undefined)) {
      return reject('restricted', 'no authenticated proof that this agent belongs to this owner (NIP-OA)');
    }
    if (direction === 'telemetry' && !telemetry.take(agent, ctx.nowMs)) {
      return reject('rate-limited', `telemetry is limited to ${AO_TELEMETRY_RATE} frames per second per agent`);
    }
    return undefined;
  };
}
