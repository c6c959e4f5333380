// NIP-AO telemetry emitter (agent side). Pure: no Worker or Node APIs, no module-level state;
// everything lives in the instances. Works in workerd and Node. Payload shapes: ao-payloads.ts;
// envelope and splitting: ao-frame.ts; control frames: ao-control.ts; ordered queue, pacing and
// retries: paced-publisher.ts; options and stats types: ao-emitter-types.ts.
//
// What the emitter does with a frame (the rules observers and docs rely on):
//
// * Envelope. Every frame decrypts to an ObserverEvent `{seq, timestamp, kind, agentIndex,
//   channelId, sessionId, turnId, payload}`. `timestamp` is RFC 3339 UTC with milliseconds
//   (`new Date(now()).toISOString()`), taken when the frame is emitted (for a coalesced frame: when
//   its first item was emitted). Unknown ids are `null`. `seq` counts per session (`sessionId`,
//   null being a session of its own), starts at 0 and is assigned, in emission order, to every
//   frame the emitter builds, so a frame that is never delivered leaves a gap in `seq`.
//   The emitter remembers the counters of the last `maxSessions` (1024) sessions.
//
// * Coalescing. Frames of a coalescible kind (default: `acp_read` only, the model's streamed
//   output) are buffered: a frame joins the open batch when it has the same kind and the same ids
//   and is emitted less than `coalesceMs` (default 50 ms) after the batch's first frame. The batch
//   becomes one frame when that window ends, when a frame of another kind or other ids is emitted
//   (so order across kinds is preserved), when it holds `maxCoalesced` (64) items, when the next
//   item would push the plaintext over 65,535 bytes, or on flush()/close(). A batch of one keeps its
//   payload unchanged; a batch of n ≥ 2 has the payload `{coalesced: [p1, …, pn]}`, items in
//   emission order (`coalescedItems()` undoes either form).
//
// * Splitting. A frame whose plaintext would exceed 65,535 bytes is sent as n consecutive frames
//   (consecutive seqs, same kind and ids, same timestamp) with payloads
//   `{split, part, parts, chunk}`: `split` = the seq of part 0 (groups the parts), `part` = 0..n-1,
//   `parts` = n, `chunk` = a slice of `JSON.stringify(payload)`; concatenating the chunks in part
//   order and JSON-parsing gives the payload back (`joinSplit()`). Chunks never cut a UTF-16
//   surrogate pair, and each part's plaintext (with room for `dropped`) is ≤ 65,535 bytes.
//
// * Pacing and retries (PacedPublisher, paced-publisher.ts). One frame is in flight at a time, so
//   frames reach the relay in seq order, at most `maxFramesPerSecond` (100, the relay's limit)
//   attempts per 1000 + `pacingMarginMs` (50) ms; `rate-limited:`/`error:` answers are retried
//   (`maxAttempts` 5, backoff 250 ms ×2 ≤ 4 s). A retry whose first attempt did arrive shows up
//   twice; observers dedupe by (agent, sessionId, seq, timestamp).
//
// * Drops are never silent. A frame that finally cannot be delivered (answers above, a full queue
//   — `maxQueuedFrames`, 1000 frames, or `maxQueuedBytes`, 8 MiB of plaintext, beyond which a new
//   payload's frames are all dropped — or a build failure) is
//   counted in `stats.dropped`, passed to `onDrop`, and reported to the owner: the next frame that
//   is sent carries `dropped: n` in its payload, n = frames lost since the last delivered report
//   (observers add them up). If that carrier is lost too, its count rolls over to the next frame.
//   A caller payload that already has a `dropped` key is left alone; the report waits for the
//   next frame. `stats.droppedUnreported` is what has not been reported yet.

import { getPublicKey } from 'nostr-tools/pure';
import { signEvent, toSecretBytes } from './ao-keys.js';
import { envelope, envelopeBytes, splitParts, type ResolvedIds } from './ao-frame.js';
import { utf8Bytes } from './json-cut.js';
import { isPlainObject, type Payload } from './ao-payloads.js';
import { errorMessage, type Result } from './errors.js';
import type { EventTemplate, NostrEvent } from './event.js';
import { isHex64 } from './hex.js';
import { LruMap } from './lru.js';
import { AO_MAX_PAYLOAD_BYTES, AO_TELEMETRY_RATE, frameTemplate } from './nip-ao.js';
import { ConversationKeyCache, encrypt } from './nip44.js';
import { DEFAULT_RETRY_BACKOFF, OrderedQueue, PacedPublisher, defaultTimers, type EmitterTimers } from './paced-publisher.js';
import type { DroppedFrame, EmitterStats, FrameIds, TelemetryEmitterOptions } from './ao-emitter-types.js';

export type * from './ao-emitter-types.js';

/** Plaintext bytes of frames waiting, at most (default of `maxQueuedBytes`): a run's model requests are telemetry too, and may be megabytes each. */
export const MAX_QUEUED_BYTES = 8 * 1024 * 1024;

interface QueuedFrame {
  seq: number;
  timestamp: string;
  kind: string;
  ids: ResolvedIds;
  payload: Payload;
  /** Its share of the payload's plaintext bytes, counted in `queuedBytes` while it waits. */
  bytes: number;
}

interface Batch {
  kind: string;
  ids: ResolvedIds;
  idsKey: string;
  startedAt: number;
  items: Payload[];
  /** Plaintext bytes of the batch as a coalesced frame (including the `dropped` reserve). */
  bytes: number;
  cancelTimer: () => void;
}

export class TelemetryEmitter {
  readonly agent: string;
  readonly owner: string;
  readonly #sk: Uint8Array;
  readonly #sign: (template: EventTemplate) => NostrEvent;
  readonly #publisher: PacedPublisher;
  readonly #now: () => number;
  readonly #timers: EmitterTimers;
  readonly #cache: ConversationKeyCache;
  readonly #agentIndex: number | null;
  readonly #coalesceKinds: ReadonlySet<string>;
  readonly #coalesceMs: number;
  readonly #maxCoalesced: number;
  readonly #maxQueued: number;
  readonly #onDrop: ((d: DroppedFrame) => void) | undefined;

  readonly #seqs: LruMap<string, number>;
  readonly #queue: OrderedQueue<QueuedFrame>;
  readonly #maxQueuedBytes: number;
  #queuedBytes = 0;
  #batch: Batch | undefined;
  #closed = false;
  readonly #stats = { emitted: 0, frames: 0, sent: 0, dropped: 0, droppedUnreported: 0, coalescedItems: 0, splitPayloads: 0 };

  constructor(o: TelemetryEmitterOptions) {
    this.#sk = toSecretBytes(o.agentSecretKey);
    this.#sign = o.sign ?? ((t) => signEvent(t, this.#sk));
    if (this.#sk.length !== 32) throw new Error('TelemetryEmitter: agent secret key must be 32 bytes');
    if (!isHex64(o.owner)) throw new Error('TelemetryEmitter: owner must be a 64 lowercase hex pubkey');
    this.agent = getPublicKey(this.#sk);
    this.owner = o.owner;
    this.#now = o.now ?? Date.now;
    this.#timers = o.timers ?? defaultTimers;
    this.#publisher = new PacedPublisher({
      publish: o.publish,
      now: this.#now,
      timers: this.#timers,
      maxPerSecond: o.maxFramesPerSecond ?? AO_TELEMETRY_RATE,
      marginMs: o.pacingMarginMs ?? 50,
      maxAttempts: o.maxAttempts ?? 5,
      backoff: { ...DEFAULT_RETRY_BACKOFF, ...o.backoff },
    });
    this.#cache = o.cache ?? new ConversationKeyCache(16);
    this.#cache.get(this.#sk, this.owner); // fails fast on a bad owner key (not on the curve)
    this.#agentIndex = o.agentIndex ?? null;
    this.#coalesceKinds = new Set(o.coalesceKinds ?? ['acp_read']);
    this.#coalesceMs = o.coalesceMs ?? 50;
    this.#maxCoalesced = Math.max(1, o.maxCoalesced ?? 64);
    this.#maxQueued = Math.max(1, o.maxQueuedFrames ?? 1000);
    this.#maxQueuedBytes = Math.max(1, o.maxQueuedBytes ?? MAX_QUEUED_BYTES);
    this.#seqs = new LruMap(Math.max(1, o.maxSessions ?? 1024));
    this.#onDrop = o.onDrop;
    // A throwing delivery is unreachable by design; never lose a frame silently.
    this.#queue = new OrderedQueue(
      (f) => this.#deliver(f).finally(() => (this.#queuedBytes -= f.bytes)),
      (f, e) => this.#dropped(f, `error: ${errorMessage(e)}`),
    );
  }

  get stats(): EmitterStats {
    return { ...this.#stats, retries: this.#publisher.retries, queued: this.#queue.length, queuedBytes: this.#queuedBytes };
  }

  /**
   * Queues a frame of `kind` (returns at once; delivery is asynchronous, see flush()). An error
   * value when the emitter is closed or the payload is not a JSON-serialisable object.
   */
  emit(kind: string, payload: Payload, ids: FrameIds = {}): Result<true, string> {
    if (this.#closed) return { ok: false, error: 'emitter is closed' };
    if (typeof kind !== 'string' || kind === '') return { ok: false, error: 'kind must be a non-empty string' };
    if (!isPlainObject(payload)) return { ok: false, error: 'payload must be a JSON object' };
    let json: string;
    try {
      json = JSON.stringify(payload);
    } catch (e) {
      return { ok: false, error: `payload is not JSON-serialisable: ${errorMessage(e)}` };
    }
    // Freeze the payload as JSON now: later mutation by the caller must not change the frame.
    const frozen = JSON.parse(json) as Payload;
    const resolved: ResolvedIds = {
      agentIndex: ids.agentIndex === undefined ? this.#agentIndex : ids.agentIndex,
      channelId: ids.channelId ?? null,
      sessionId: ids.sessionId ?? null,
      turnId: ids.turnId ?? null,
    };
    const at = this.#now();
    this.#stats.emitted++;
    if (this.#coalesceKinds.has(kind)) this.#addToBatch(kind, frozen, utf8Bytes(json), resolved, at);
    else {
      this.#flushBatch();
      this.#enqueue(kind, frozen, resolved, at);
    }
    this.#queue.run();
    return { ok: true, value: true };
  }

  turnStarted(payload: Payload = {}, ids: FrameIds = {}): Result<true, string> {
    return this.emit('turn_started', payload, ids);
  }

  acpWrite(payload: Payload, ids: FrameIds = {}): Result<true, string> {
    return this.emit('acp_write', payload, ids);
  }

  acpRead(payload: Payload, ids: FrameIds = {}): Result<true, string> {
    return this.emit('acp_read', payload, ids);
  }

  /** A tool call's failure as the owner alone is told it (edgestr's extension, nip-ao.ts KNOWN_FRAME_KINDS). */
  toolDetail(payload: Payload, ids: FrameIds = {}): Result<true, string> {
    return this.emit('tool_detail', payload, ids);
  }

  sessionResolved(payload: Payload = {}, ids: FrameIds = {}): Result<true, string> {
    return this.emit('session_resolved', payload, ids);
  }

  /** Closes the open batch and resolves once every queued frame is sent or dropped. */
  async flush(): Promise<void> {
    this.#flushBatch();
    this.#queue.run();
    await this.#queue.idle();
  }

  /** Refuses further frames, then delivers what is queued (like flush()). */
  async close(): Promise<void> {
    this.#closed = true;
    await this.flush();
  }

  // ---- coalescing ----

  #addToBatch(kind: string, payload: Payload, bytes: number, ids: ResolvedIds, at: number): void {
    const idsKey = JSON.stringify([ids.agentIndex, ids.channelId, ids.sessionId, ids.turnId]);
    const b = this.#batch;
    if (
      b &&
      b.kind === kind &&
      b.idsKey === idsKey &&
      at - b.startedAt < this.#coalesceMs &&
      b.items.length < this.#maxCoalesced &&
      b.bytes + 1 + bytes <= AO_MAX_PAYLOAD_BYTES
    ) {
      b.items.push(payload);
      b.bytes += 1 + bytes;
      if (b.items.length >= this.#maxCoalesced) this.#flushBatch();
      return;
    }
    this.#flushBatch();
    const timestamp = new Date(at).toISOString();
    const base = envelopeBytes(timestamp, kind, ids, { coalesced: [] });
    if (base + bytes > AO_MAX_PAYLOAD_BYTES || this.#maxCoalesced === 1) {
      this.#enqueue(kind, payload, ids, at); // too big to share a frame: on its own (maybe split)
      return;
    }
    const batch: Batch = { kind, ids, idsKey, startedAt: at, items: [payload], bytes: base + bytes, cancelTimer: () => undefined };
    batch.cancelTimer = this.#timers.after(this.#coalesceMs, () => {
      if (this.#batch === batch) {
        this.#flushBatch();
        this.#queue.run();
      }
    });
    this.#batch = batch;
  }

  #flushBatch(): void {
    const b = this.#batch;
    if (!b) return;
    this.#batch = undefined;
    b.cancelTimer();
    if (b.items.length === 1) this.#enqueue(b.kind, b.items[0]!, b.ids, b.startedAt);
    else {
      this.#stats.coalescedItems += b.items.length;
      this.#enqueue(b.kind, { coalesced: b.items }, b.ids, b.startedAt);
    }
  }

  // ---- building frames ----

  #nextSeq(sessionId: string | null): number {
    const key = sessionId === null ? '\u0000null' : `s:${sessionId}`;
    const seq = this.#seqs.peek(key) ?? 0;
    this.#seqs.set(key, seq + 1);
    return seq;
  }

  /** Turns one payload into one frame, or into split parts, each with its seq. */
  #enqueue(kind: string, payload: Payload, ids: ResolvedIds, at: number): void {
    const timestamp = new Date(at).toISOString();
    const bytes = envelopeBytes(timestamp, kind, ids, payload);
    const parts = splitParts(timestamp, kind, ids, payload, bytes);
    if (parts) this.#stats.splitPayloads++;
    const payloads = parts ?? [payload];
    const share = Math.ceil(bytes / payloads.length);
    const frames = payloads.map((p): QueuedFrame => ({ seq: this.#nextSeq(ids.sessionId), timestamp, kind, ids, payload: p, bytes: share }));
    if (frames.length > 1) for (const f of frames) f.payload.split = frames[0]!.seq;
    this.#stats.frames += frames.length;
    if (this.#queue.length + frames.length > this.#maxQueued) {
      for (const f of frames) this.#dropped(f, `send queue full (${this.#maxQueued} frames waiting)`);
      return;
    }
    if (this.#queuedBytes + share * frames.length > this.#maxQueuedBytes) {
      for (const f of frames) this.#dropped(f, `send queue full (at most ${this.#maxQueuedBytes} bytes of frames waiting)`);
      return;
    }
    this.#queuedBytes += share * frames.length;
    this.#queue.add(...frames);
  }

  #dropped(f: QueuedFrame, reason: string): void {
    this.#stats.dropped++;
    this.#stats.droppedUnreported++;
    const cb = this.#onDrop;
    if (cb) {
      try {
        cb({ seq: f.seq, kind: f.kind, sessionId: f.ids.sessionId, reason });
      } catch {
        // a throwing callback must not stop delivery
      }
    }
  }

  // ---- delivery ----

  async #deliver(f: QueuedFrame): Promise<void> {
    const carried = this.#stats.droppedUnreported > 0 && !Object.hasOwn(f.payload, 'dropped') ? this.#stats.droppedUnreported : 0;
    const payload = carried > 0 ? { ...f.payload, dropped: carried } : f.payload;
    let event: NostrEvent;
    try {
      const plaintext = JSON.stringify(envelope(f.seq, f.timestamp, f.kind, f.ids, payload));
      const size = utf8Bytes(plaintext);
      if (size > AO_MAX_PAYLOAD_BYTES) return this.#dropped(f, `plaintext of ${size} bytes exceeds ${AO_MAX_PAYLOAD_BYTES}`);
      const content = encrypt(plaintext, this.#cache.get(this.#sk, this.owner));
      event = this.#sign(
        frameTemplate({ direction: 'telemetry', agent: this.agent, recipient: this.owner, content, created_at: Math.floor(this.#now() / 1000) }),
      );
    } catch (e) {
      return this.#dropped(f, `could not build the frame: ${errorMessage(e)}`);
    }
    const answer = await this.#publisher.publish(event);
    if (answer.ok) {
      this.#stats.sent++;
      this.#stats.droppedUnreported -= carried;
    } else this.#dropped(f, answer.message);
  }
}
