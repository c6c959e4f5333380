// The plaintext envelope of a NIP-AO telemetry frame and its sizing: what the emitter builds
// before encrypting, how many bytes it takes, and how a payload too big for one frame is cut into
// split parts. Pure: no Worker or Node APIs, no state.

import { chunkForJson, type Payload, type SplitPart } from './ao-payloads.js';
import { AO_MAX_PAYLOAD_BYTES } from './nip-ao.js';
import { utf8Bytes } from './json-cut.js';

/** Correlation ids of a frame once defaults are applied. */
export interface ResolvedIds {
  agentIndex: number | null;
  channelId: string | null;
  sessionId: string | null;
  turnId: string | null;
}

/** Room kept in every plaintext for `,"dropped":<n>`. */
const DROPPED_RESERVE = 32;
/** Stand-in for seq and split numbers when sizing an envelope (as wide as they can be). */
const WIDEST = Number.MAX_SAFE_INTEGER;


/** The ObserverEvent a frame decrypts to. */
export const envelope = (seq: number, timestamp: string, kind: string, ids: ResolvedIds, payload: Payload) => ({
  seq,
  timestamp,
  kind,
  agentIndex: ids.agentIndex,
  channelId: ids.channelId,
  sessionId: ids.sessionId,
  turnId: ids.turnId,
  payload,
});

/** Plaintext bytes of a frame at its widest seq, with room for a `dropped` report. */
export const envelopeBytes = (timestamp: string, kind: string, ids: ResolvedIds, payload: Payload): number =>
  utf8Bytes(JSON.stringify(envelope(WIDEST, timestamp, kind, ids, payload))) + DROPPED_RESERVE;

/** The split parts (`split` still -1) of a payload too big for one frame; undefined when it fits. */
export function splitParts(timestamp: string, kind: string, ids: ResolvedIds, payload: Payload, bytes = envelopeBytes(timestamp, kind, ids, payload)): Payload[] | undefined {
  if (bytes <= AO_MAX_PAYLOAD_BYTES) return undefined;
  const empty: SplitPart = { split: WIDEST, part: WIDEST, parts: WIDEST, chunk: '' };
  const chunks = chunkForJson(JSON.stringify(payload), AO_MAX_PAYLOAD_BYTES - envelopeBytes(timestamp, kind, ids, { ...empty }));
  return chunks.map((chunk, part) => ({ split: -1, part, parts: chunks.length, chunk }));
}
