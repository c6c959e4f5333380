// NIP-AO "Agent Observability" (kind 24200): frame tags and direction, the decrypted payload
// schemas (telemetry ObserverEvent, control frames), and event builders. Used by the relay (tag
// and freshness checks), the agent (telemetry emitter), and observers (CLI, console).

import { z } from 'zod';
import type { NostrEvent } from './event.js';
import { isHex64 } from './hex.js';
import { err, ok, reject, type Result } from './errors.js';
import { KIND } from './kinds.js';
import { looksLikeNip44v2 } from './nip44.js';

export const AO_KIND = KIND.AO_FRAME;
/** Frames outside ±5 minutes of the relay's clock are refused (replay protection). */
export const AO_FRESHNESS_SECONDS = 300;
/** Relays limit telemetry to this many frames per second per agent. */
export const AO_TELEMETRY_RATE = 100;
/** Decrypted payloads (and NIP-44 plaintexts) are at most this many bytes. */
export const AO_MAX_PAYLOAD_BYTES = 65_535;
/** Observers keep at most this many frames. */
export const AO_RING_SIZE = 800;

export type FrameDirection = 'telemetry' | 'control';

/** Routing facts of a frame, read from its cleartext tags. */
export interface FrameRoute {
  /** 'unknown' for an unrecognised `frame` value: relays answer OK and drop it; clients ignore it. */
  direction: FrameDirection | 'unknown';
  agent: string;
  owner: string;
  /** The `p` tag: who may receive the frame. */
  recipient: string;
}

const single = (e: Pick<NostrEvent, 'tags'>, name: string): Result<string> => {
  const found = e.tags.filter((t) => t[0] === name);
  if (found.length !== 1) return err(reject('invalid', `kind 24200 needs exactly one "${name}" tag (found ${found.length})`));
  const value = found[0]![1];
  return value === undefined ? err(reject('invalid', `the "${name}" tag has no value`)) : ok(value);
};

/** Checks the tags of a kind 24200 event and derives its direction (NIP-AO "Event Structure"). */
export function frameRoute(e: Pick<NostrEvent, 'pubkey' | 'tags'>): Result<FrameRoute> {
  const p = single(e, 'p');
  if (!p.ok) return p;
  const agent = single(e, 'agent');
  if (!agent.ok) return agent;
  const frame = single(e, 'frame');
  if (!frame.ok) return frame;
  if (!isHex64(p.value) || !isHex64(agent.value)) return err(reject('invalid', 'the "p" and "agent" tags must be 64-hex pubkeys'));
  if (frame.value === 'telemetry') {
    if (e.pubkey !== agent.value) return err(reject('invalid', 'a telemetry frame must be signed by the agent named in its "agent" tag'));
    return ok({ direction: 'telemetry', agent: agent.value, owner: p.value, recipient: p.value });
  }
  if (frame.value === 'control') {
    if (p.value !== agent.value) return err(reject('invalid', 'a control frame must p-tag the agent named in its "agent" tag'));
    return ok({ direction: 'control', agent: agent.value, owner: e.pubkey, recipient: p.value });
  }
  return ok({ direction: 'unknown', agent: agent.value, owner: p.value, recipient: p.value });
}

/** Relay-side checks of a frame beyond its tags: freshness and NIP-44 v2 shaped content. */
export function checkFrameEnvelope(e: Pick<NostrEvent, 'created_at' | 'content'>, now: number): Result<true> {
  if (Math.abs(e.created_at - now) > AO_FRESHNESS_SECONDS) {
    return err(reject('invalid', `kind 24200 created_at must be within ±${AO_FRESHNESS_SECONDS} seconds of now`));
  }
  if (!looksLikeNip44v2(e.content)) return err(reject('invalid', 'kind 24200 content must be NIP-44 v2 ciphertext'));
  return ok(true);
}

/** RFC 3339 with sub-second precision, or integer milliseconds (accepted from older emitters). */
const Timestamp = z.union([
  z.string().regex(/^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$/, 'timestamp must be RFC 3339'),
  z.number().int().nonnegative(),
]);

export const ObserverEventSchema = z.object({
  seq: z.number().int().nonnegative(),
  timestamp: Timestamp,
  kind: z.string().min(1),
  agentIndex: z.number().int().nullable().optional().default(null),
  channelId: z.string().nullable().optional().default(null),
  sessionId: z.string().nullable().optional().default(null),
  turnId: z.string().nullable().optional().default(null),
  payload: z.record(z.string(), z.unknown()),
});
export type ObserverEvent = z.infer<typeof ObserverEventSchema>;

/**
 * The frame kinds this implementation understands; others are ignored by observers. `tool_detail`
 * is edgestr's extension (docs/PROTOCOL.md: what the owner alone is told of a tool call's failure);
 * the spec's readers ignore it as an unknown kind.
 */
export const KNOWN_FRAME_KINDS = ['turn_started', 'acp_write', 'acp_read', 'tool_detail', 'session_resolved'] as const;

export const ControlFrameSchema = z.object({
  type: z.string(),
  channelId: z.string().optional(),
});
export type ControlFrame = z.infer<typeof ControlFrameSchema>;

/** Milliseconds since the epoch of a telemetry timestamp. */
export const timestampMillis = (t: ObserverEvent['timestamp']): number => (typeof t === 'number' ? t : Date.parse(t));

/** The unsigned kind 24200 template for a frame (content already encrypted). */
export function frameTemplate(args: {
  direction: FrameDirection;
  agent: string;
  recipient: string;
  content: string;
  created_at: number;
}) {
  return {
    kind: AO_KIND,
    created_at: args.created_at,
    content: args.content,
    tags: [
      ['p', args.recipient],
      ['agent', args.agent],
      ['frame', args.direction],
    ],
  };
}
