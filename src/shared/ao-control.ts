// NIP-AO control frames (owner → agent): building and sending a `cancel_turn` on the owner side,
// checking and opening one on the agent side. Pure: no Worker or Node APIs, no module-level state.

import { getPublicKey } from 'nostr-tools/pure';
import { signEvent, toSecretBytes } from './ao-keys.js';
import { checkIdAndSignature, type NostrEvent } from './event.js';
import { isHex64 } from './hex.js';
import { AO_FRESHNESS_SECONDS, AO_KIND, ControlFrameSchema, frameRoute, frameTemplate, type ControlFrame } from './nip-ao.js';
import { ConversationKeyCache, decrypt, encrypt } from './nip44.js';
import { type PublishFn, type PublishOutcome } from './paced-publisher.js';
import { nobleVerifier, type SchnorrVerifier } from './verify.js';
import { errorMessage } from './errors.js';

export interface CancelTurn {
  type: 'cancel_turn';
  channelId: string;
}

export interface ControlFrameArgs {
  /** The owner's secret key (32 bytes or 64 hex). */
  ownerSecretKey: Uint8Array | string;
  /** The agent the frame targets (64 hex). */
  agent: string;
  control: CancelTurn;
  /** Milliseconds since the epoch (default Date.now). */
  now?: () => number;
  cache?: ConversationKeyCache;
}

/** Builds, encrypts (owner sk → agent pk) and signs a control frame. Throws on bad key material. */
export function buildControlFrame(a: ControlFrameArgs): NostrEvent {
  const sk = toSecretBytes(a.ownerSecretKey);
  if (!isHex64(a.agent)) throw new Error('buildControlFrame: agent must be a 64 lowercase hex pubkey');
  const key = (a.cache ?? new ConversationKeyCache(1)).get(sk, a.agent);
  const content = encrypt(JSON.stringify({ type: a.control.type, channelId: a.control.channelId }), key);
  const created_at = Math.floor((a.now ?? Date.now)() / 1000);
  return signEvent(frameTemplate({ direction: 'control', agent: a.agent, recipient: a.agent, content, created_at }), sk);
}

/** Builds a `cancel_turn` control frame for `channelId` and publishes it. Never throws. */
export async function sendControl(
  a: Omit<ControlFrameArgs, 'control'> & { channelId: string; publish: PublishFn },
): Promise<{ event?: NostrEvent } & PublishOutcome> {
  let event: NostrEvent;
  try {
    event = buildControlFrame({ ...a, control: { type: 'cancel_turn', channelId: a.channelId } });
  } catch (e) {
    return { ok: false, message: `error: could not build the control frame: ${errorMessage(e)}` };
  }
  try {
    const r = await a.publish(event);
    return { event, ok: r.ok, message: r.message };
  } catch (e) {
    return { event, ok: false, message: `error: publish failed: ${errorMessage(e)}` };
  }
}

export type ControlOutcome =
  | { status: 'accepted'; owner: string; control: ControlFrame }
  | { status: 'ignored'; reason: string }
  | { status: 'rejected'; reason: string };

export interface ReadControlOptions {
  agentSecretKey: Uint8Array | string;
  /** Owners whose control frames this agent obeys. */
  owners: Iterable<string>;
  verifier?: SchnorrVerifier;
  cache?: ConversationKeyCache;
  /** Milliseconds since the epoch (default Date.now); frames outside ±5 min are refused. */
  now?: () => number;
}

/**
 * Agent side: checks and opens a control frame received through a `#p` = agent subscription.
 * Unknown `frame` values and unknown control `type`s are ignored (NIP-AO); everything that is not
 * a fresh, authentic control frame from a known owner to this agent is rejected with a reason.
 */
export function readControlFrame(e: NostrEvent, o: ReadControlOptions): ControlOutcome {
  const sk = toSecretBytes(o.agentSecretKey);
  const agent = getPublicKey(sk);
  if (e.kind !== AO_KIND) return { status: 'rejected', reason: `invalid: not a kind ${AO_KIND} frame (kind ${e.kind})` };
  const checked = checkIdAndSignature(e, o.verifier ?? nobleVerifier);
  if (!checked.ok) return { status: 'rejected', reason: `${checked.error.prefix}: ${checked.error.reason}` };
  const route = frameRoute(e);
  if (!route.ok) return { status: 'rejected', reason: `${route.error.prefix}: ${route.error.reason}` };
  if (route.value.direction === 'unknown') return { status: 'ignored', reason: 'unknown "frame" value' };
  if (route.value.direction !== 'control') return { status: 'rejected', reason: 'restricted: a telemetry frame is addressed to an owner, not to an agent' };
  if (route.value.agent !== agent) return { status: 'rejected', reason: `restricted: the frame targets agent ${route.value.agent}, not this agent` };
  if (![...o.owners].includes(e.pubkey)) return { status: 'rejected', reason: `restricted: ${e.pubkey} is not an owner of this agent` };
  const now = Math.floor((o.now ?? Date.now)() / 1000);
  if (Math.abs(e.created_at - now) > AO_FRESHNESS_SECONDS) {
    return { status: 'rejected', reason: `invalid: created_at is more than ${AO_FRESHNESS_SECONDS} seconds from now (stale or replayed frame)` };
  }
  const opened = decrypt(e.content, (o.cache ?? new ConversationKeyCache(1)).get(sk, e.pubkey));
  if (!opened.ok) return { status: 'rejected', reason: `invalid: cannot decrypt the frame (${opened.error}): it was not encrypted by this owner for this agent` };
  let json: unknown;
  try {
    json = JSON.parse(opened.value);
  } catch {
    return { status: 'rejected', reason: 'invalid: the decrypted control frame is not JSON' };
  }
  const parsed = ControlFrameSchema.safeParse(json);
  if (!parsed.success) return { status: 'rejected', reason: 'invalid: the decrypted control frame is not {type, channelId?}' };
  if (parsed.data.type !== 'cancel_turn') return { status: 'ignored', reason: `unknown control type ${JSON.stringify(parsed.data.type)}` };
  return { status: 'accepted', owner: e.pubkey, control: parsed.data };
}
