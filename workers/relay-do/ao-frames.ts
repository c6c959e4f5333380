// NIP-AO on the relay: admission of kind 24200 frames (tags, freshness, authentication, proven
// agent→owner pair, telemetry rate limit). Frames never touch storage; who may subscribe to them
// and receive them is the read policy's (read-policy.ts).

import type { NostrEvent } from '../../src/shared/event.js';
import { reject, type Rejection } from '../../src/shared/errors.js';
import { AO_TELEMETRY_RATE, checkFrameEnvelope, frameRoute } from '../../src/shared/nip-ao.js';
import { SlidingWindowLimiter } from './rate-limit.js';

export type FrameVerdict = { action: 'fan-out' } | { action: 'drop' } | { action: 'reject'; rejection: Rejection };

export class AoFrameGate {
  private readonly telemetry = new SlidingWindowLimiter(AO_TELEMETRY_RATE, 1000);

  /** `isAgentOwner` decides whether the shard holds a proof of agent → owner valid for this frame. */
  constructor(private readonly isAgentOwner: (agent: string, owner: string, frame: NostrEvent) => boolean) {}

  /** Decides what happens to a verified kind 24200 event published on a connection authenticated as `authed`. */
  admit(e: NostrEvent, authed: ReadonlySet<string>, nowMs: number): FrameVerdict {
    const route = frameRoute(e);
    if (!route.ok) return { action: 'reject', rejection: route.error };
    if (route.value.direction === 'unknown') return { action: 'drop' };
    const envelope = checkFrameEnvelope(e, Math.floor(nowMs / 1000));
    if (!envelope.ok) return { action: 'reject', rejection: envelope.error };
    if (!authed.has(e.pubkey)) {
      return { action: 'reject', rejection: reject('auth-required', 'kind 24200 frames are accepted only from a connection authenticated as their signer') };
    }
    const { agent, owner, direction } = route.value;
    if (!this.isAgentOwner(agent, owner, e)) {
      return { action: 'reject', rejection: reject('restricted', 'no authenticated proof that this agent belongs to this owner (NIP-OA)') };
    }
    if (direction === 'telemetry' && !this.telemetry.take(agent, nowMs)) {
      return { action: 'reject', rejection: reject('rate-limited', `telemetry is limited to ${AO_TELEMETRY_RATE} frames per second per agent`) };
    }
    return { action: 'fan-out' };
  }
}
