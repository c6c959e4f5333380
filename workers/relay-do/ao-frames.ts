// NIP-AO on the relay: admission of kind 24200 frames (tags, freshness, authentication, proven
// agent→owner pair, telemetry rate limit) and the subscription rules that keep frames live-only and
// visible to their recipient alone. Frames never touch storage.

import type { NostrEvent } from '../../src/shared/event.js';
import { reject, type Rejection } from '../../src/shared/errors.js';
import type { Filter } from '../../src/shared/filters.js';
import { AO_KIND, AO_TELEMETRY_RATE, checkFrameEnvelope, frameRoute } from '../../src/shared/nip-ao.js';
import { SlidingWindowLimiter } from './rate-limit.js';

export type FrameVerdict = { action: 'fan-out' } | { action: 'drop' } | { action: 'reject'; rejection: Rejection };

/** History requests are refused; `since` may lag the relay's clock by this much (clock skew). */
export const AO_SINCE_TOLERANCE_SECONDS = 60;

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

/** REQ rules for filters naming kind 24200: `#p` must be an authenticated pubkey, and no history. */
export function checkFrameFilters(filters: readonly Filter[], authed: ReadonlySet<string>, now: number): Rejection | undefined {
  for (const f of filters) {
    if (!f.kinds?.includes(AO_KIND)) continue;
    if (f.ids || f.until !== undefined || (f.since !== undefined && f.since < now - AO_SINCE_TOLERANCE_SECONDS)) {
      return reject('restricted', 'kind 24200 frames are live only: subscribe with since = now, without until or ids');
    }
    if (authed.size === 0) return reject('auth-required', 'kind 24200 frames are only delivered to their authenticated recipient');
    if (!f['#p'] || f['#p'].length === 0 || !f['#p'].every((p) => authed.has(p))) {
      return reject('restricted', 'a kind 24200 subscription must carry #p of a pubkey this connection authenticated as');
    }
  }
  return undefined;
}
