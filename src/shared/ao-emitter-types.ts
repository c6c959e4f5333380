// Public types of the NIP-AO telemetry emitter (ao-emitter.ts): its options, the ids of a frame, a
// dropped frame as reported to `onDrop`, and its counters. Re-exported by ao-emitter.ts.

import type { EventTemplate, NostrEvent } from './event.js';
import type { ConversationKeyCache } from './nip44.js';
import type { BackoffPolicy, EmitterTimers, PublishFn } from './paced-publisher.js';

/** Correlation ids of a frame; anything not given is sent as `null`. */
export interface FrameIds {
  agentIndex?: number | null;
  channelId?: string | null;
  sessionId?: string | null;
  turnId?: string | null;
}

export interface DroppedFrame {
  seq: number;
  kind: string;
  sessionId: string | null;
  /** The relay's last answer, or why the frame could not be sent. */
  reason: string;
}

export interface TelemetryEmitterOptions {
  /** The agent's secret key (32 bytes or 64 hex). */
  agentSecretKey: Uint8Array | string;
  /** The owner's pubkey (64 hex): the `p` tag and the NIP-44 peer. */
  owner: string;
  /** Publishes one event and resolves with the relay's OK (e.g. RelayClient.publish). */
  publish: PublishFn;
  /** Milliseconds since the epoch (default Date.now). */
  now?: () => number;
  timers?: EmitterTimers;
  /** Shared conversation-key cache (default: one per emitter). */
  cache?: ConversationKeyCache;
  /** Default `agentIndex` of every frame (default null). */
  agentIndex?: number | null;
  coalesceKinds?: readonly string[];
  coalesceMs?: number;
  maxCoalesced?: number;
  maxFramesPerSecond?: number;
  pacingMarginMs?: number;
  maxAttempts?: number;
  backoff?: Partial<BackoffPolicy>;
  maxQueuedFrames?: number;
  /** Bytes of frames (their plaintext) waiting at most (default 8 MiB); a payload that would pass it is dropped whole. */
  maxQueuedBytes?: number;
  maxSessions?: number;
  /** Signs frames (e.g. the relay's Wasm backend, several times faster); default: nostr-tools. */
  sign?: (template: EventTemplate) => NostrEvent;
  /** Called for every frame that is finally dropped. */
  onDrop?: (drop: DroppedFrame) => void;
}

export interface EmitterStats {
  /** emit() calls accepted. */
  emitted: number;
  /** Frames built (each has a seq): sent + dropped + queued. */
  frames: number;
  /** Frames the relay accepted. */
  sent: number;
  /** Frames finally dropped. */
  dropped: number;
  /** Dropped frames not yet reported in a delivered frame's payload. */
  droppedUnreported: number;
  /** Publish attempts beyond the first, over all frames. */
  retries: number;
  /** Items that went into multi-item (coalesced) frames. */
  coalescedItems: number;
  /** Payloads sent as several frames. */
  splitPayloads: number;
  /** Frames waiting to be sent (including the one in flight). */
  queued: number;
  /** Their plaintext bytes. */
  queuedBytes: number;
}
