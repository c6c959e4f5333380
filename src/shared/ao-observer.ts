// NIP-AO observer (owner side): subscribes to the owner's kind 24200 telemetry, checks every frame
// (signature, tags, known agent, freshness, decryption, ObserverEvent schema), dedupes, detects seq
// gaps, keeps the last frames in a bounded ring buffer, and sends `cancel_turn` control frames.
// Pure: no Worker or Node APIs, no module-level state. Errors are values: a bad frame is reported
// through `onRejected(reason, event)` (and `handleEvent`'s result), never thrown.
//
// Rules:
// * Checks, in order (the first failure is the reason): kind 24200; id and signature; the NIP-AO
//   tags (`frameRoute`); `frame` = telemetry (an unknown `frame` value is ignored, a control frame
//   rejected); `p` = this owner; `agent` (= event.pubkey, checked by frameRoute) is a known agent;
//   created_at within ±5 min of now (a replay defence on top of the relay's); NIP-44 decryption with
//   the owner key; JSON; ObserverEventSchema (timestamp: RFC 3339 string or integer milliseconds).
// * Dedupe key: (agent, sessionId, seq, timestamp); the last `dedupeSize` (4096) keys are kept.
//   A duplicate is counted and ignored (no callback besides onIgnored).
// * Gaps: per (agent, sessionId) the observer expects seq = last + 1. A higher seq reports the
//   missing count through `onGap` and `stats.gaps`; seq 0 below the expectation is an emitter
//   restart (counted, no gap); another lower seq is a late frame (counted as `reordered`). The first
//   frame seen for a session sets the expectation (the observer may join mid-session). State is
//   kept for the last 1024 sessions.
// * `payload.dropped` (an integer ≥ 1, put there by the emitter) adds to `stats.reportedDrops`.
// * Dispatch: only KNOWN_FRAME_KINDS reach `onFrame` and the ring buffer (AO_RING_SIZE = 800);
//   other kinds are counted (`stats.ignoredKinds`) after dedupe and gap tracking.
// * Subscription: `{kinds: [24200], '#p': [owner], since: now}`. A relay client re-sends a REQ
//   after reconnecting with the original `since`; when the relay refuses it as history
//   (`restricted: … live only …`) the observer subscribes again with a fresh `since` (at most once
//   per 10 s) and reports the CLOSED through `onClosed` either way. A passing CLOSED (`error:`,
//   `rate-limited:`) is the relay client's to send again (`resubscribe`, with a fresh `since`).

import { getPublicKey } from 'nostr-tools/pure';
import { parseRejection } from './errors.js';
import { checkIdAndSignature, describeIssue, type NostrEvent } from './event.js';
import type { Filter } from './filters.js';
import { hexToBytes, isHex64 } from './hex.js';
import { LruMap } from './lru.js';
import {
  AO_FRESHNESS_SECONDS,
  AO_KIND,
  AO_RING_SIZE,
  frameRoute,
  KNOWN_FRAME_KINDS,
  ObserverEventSchema,
  type ObserverEvent,
} from './nip-ao.js';
import { ConversationKeyCache, decrypt } from './nip44.js';
import { nobleVerifier, type SchnorrVerifier } from './verify.js';
import { sendControl } from './ao-control.js';
import type { PublishFn, PublishOutcome } from './paced-publisher.js';

/** The options of a subscription that the observer uses (RelayClient's SubscribeOptions fit). */
export interface ObserverSubscribeOptions {
  onEvent: (event: NostrEvent) => void;
  onClosed?: (message: string) => void;
  /** The filters to send again after a passing CLOSED (`error:`, `rate-limited:`; RelayClient does). */
  resubscribe?: () => Filter[];
}

/** RelayClient.subscribe, or any function of the same shape. */
export type SubscribeFn = (filters: Filter[], opts: ObserverSubscribeOptions) => { close(): void };

export interface ObservedFrame {
  agent: string;
  eventId: string;
  createdAt: number;
  /** When the observer accepted it (ms since the epoch). */
  receivedAt: number;
  frame: ObserverEvent;
}

export interface SeqGap {
  agent: string;
  sessionId: string | null;
  expected: number;
  received: number;
  missing: number;
}

export type FrameOutcome =
  | { status: 'accepted'; frame: ObservedFrame }
  | { status: 'duplicate' }
  | { status: 'ignored'; reason: string }
  | { status: 'rejected'; reason: string };

export interface ObserverOptions {
  /** The owner's secret key (32 bytes or 64 hex). */
  ownerSecretKey: Uint8Array | string;
  /** Agents whose telemetry is accepted (64 hex). */
  agents: Iterable<string>;
  subscribe: SubscribeFn;
  /** Needed by cancelTurn (e.g. RelayClient.publish on a connection authenticated as the owner). */
  publish?: PublishFn;
  verifier?: SchnorrVerifier;
  cache?: ConversationKeyCache;
  /** Milliseconds since the epoch (default Date.now). */
  now?: () => number;
  ringSize?: number;
  dedupeSize?: number;
  onFrame?: (frame: ObservedFrame) => void;
  onRejected?: (reason: string, event: NostrEvent) => void;
  onIgnored?: (reason: string, event: NostrEvent) => void;
  onGap?: (gap: SeqGap) => void;
  /** A `dropped: n` report from an agent (frames it could not deliver). */
  onDropReport?: (agent: string, dropped: number, frame: ObserverEvent) => void;
  onClosed?: (message: string) => void;
}

export interface ObserverStats {
  accepted: number;
  rejected: number;
  duplicates: number;
  ignoredKinds: number;
  ignoredFrames: number;
  /** Frames missing according to seq gaps. */
  gaps: number;
  /** Sum of the `dropped` counts reported by agents. */
  reportedDrops: number;
  restarts: number;
  reordered: number;
}

/** Fixed-capacity FIFO: pushing beyond capacity overwrites the oldest entry. */
export class RingBuffer<T> {
  readonly #items: Array<T | undefined>;
  #start = 0;
  #size = 0;

  constructor(readonly capacity: number) {
    if (!Number.isSafeInteger(capacity) || capacity < 1) throw new RangeError('RingBuffer: capacity must be ≥ 1');
    this.#items = new Array<T | undefined>(capacity);
  }

  get size(): number {
    return this.#size;
  }

  push(item: T): void {
    const end = (this.#start + this.#size) % this.capacity;
    this.#items[end] = item;
    if (this.#size < this.capacity) this.#size++;
    else this.#start = (this.#start + 1) % this.capacity;
  }

  /** Oldest first. */
  toArray(): T[] {
    const out: T[] = [];
    for (let i = 0; i < this.#size; i++) out.push(this.#items[(this.#start + i) % this.capacity] as T);
    return out;
  }

  clear(): void {
    this.#items.fill(undefined);
    this.#start = 0;
    this.#size = 0;
  }
}

const KNOWN: ReadonlySet<string> = new Set(KNOWN_FRAME_KINDS);
const SESSION_STATES = 1024;
const RESUBSCRIBE_MIN_INTERVAL_MS = 10_000;

export class Observer {
  readonly owner: string;
  readonly #sk: Uint8Array;
  readonly #agents = new Set<string>();
  readonly #o: ObserverOptions;
  readonly #verifier: SchnorrVerifier;
  readonly #cache: ConversationKeyCache;
  readonly #now: () => number;
  readonly #ring: RingBuffer<ObservedFrame>;
  /** Frames already seen (oldest forgotten first: `has` does not refresh). */
  readonly #seen: LruMap<string, true>;
  readonly #expected = new LruMap<string, number>(SESSION_STATES);
  #sub: { close(): void } | undefined;
  #subscribedAt = 0;
  readonly #stats: ObserverStats = {
    accepted: 0,
    rejected: 0,
    duplicates: 0,
    ignoredKinds: 0,
    ignoredFrames: 0,
    gaps: 0,
    reportedDrops: 0,
    restarts: 0,
    reordered: 0,
  };

  constructor(o: ObserverOptions) {
    this.#sk = typeof o.ownerSecretKey === 'string' ? hexToBytes(o.ownerSecretKey) : o.ownerSecretKey;
    if (this.#sk.length !== 32) throw new Error('Observer: owner secret key must be 32 bytes');
    this.owner = getPublicKey(this.#sk);
    for (const a of o.agents) this.addAgent(a);
    this.#o = o;
    this.#verifier = o.verifier ?? nobleVerifier;
    this.#cache = o.cache ?? new ConversationKeyCache(64);
    this.#now = o.now ?? Date.now;
    this.#ring = new RingBuffer(o.ringSize ?? AO_RING_SIZE);
    this.#seen = new LruMap(Math.max(1, o.dedupeSize ?? 4096));
  }

  get stats(): ObserverStats {
    return { ...this.#stats };
  }

  get agents(): string[] {
    return [...this.#agents];
  }

  addAgent(agent: string): void {
    if (!isHex64(agent)) throw new Error('Observer: agent must be a 64 lowercase hex pubkey');
    this.#agents.add(agent);
  }

  removeAgent(agent: string): void {
    this.#agents.delete(agent);
  }

  /** The buffered frames, oldest first (at most ringSize). */
  frames(): ObservedFrame[] {
    return this.#ring.toArray();
  }

  /** Subscribes (idempotent) to `{kinds: [24200], '#p': [owner], since: now}`. */
  start(): void {
    if (this.#sub) return;
    this.#subscribe();
  }

  stop(): void {
    const sub = this.#sub;
    this.#sub = undefined;
    sub?.close();
  }

  #subscribe(): void {
    // Live only, from now: also when the relay client sends it again after a passing CLOSED.
    const filters = (): Filter[] => {
      this.#subscribedAt = this.#now();
      return [{ kinds: [AO_KIND], '#p': [this.owner], since: Math.floor(this.#subscribedAt / 1000) }];
    };
    let sub: { close(): void } | undefined;
    sub = this.#o.subscribe(filters(), {
      resubscribe: filters,
      onEvent: (e) => {
        if (this.#sub === sub) this.handleEvent(e);
      },
      onClosed: (message) => {
        if (this.#sub !== sub) return;
        this.#sub = undefined;
        this.#call(() => this.#o.onClosed?.(message));
        const r = parseRejection(message);
        if (r?.prefix === 'restricted' && r.reason.includes('live only') && this.#now() - this.#subscribedAt >= RESUBSCRIBE_MIN_INTERVAL_MS) {
          this.#subscribe();
        }
      },
    });
    this.#sub = sub;
  }

  /** Sends a `cancel_turn` control frame for `channelId` to a known agent. */
  async cancelTurn(agent: string, channelId: string): Promise<{ event?: NostrEvent } & PublishOutcome> {
    if (!this.#agents.has(agent)) return { ok: false, message: `restricted: unknown agent ${agent}: add it to the observer's agents first` };
    const publish = this.#o.publish;
    if (!publish) return { ok: false, message: 'error: this observer was created without a publish function' };
    return sendControl({ ownerSecretKey: this.#sk, agent, channelId, publish, now: this.#now, cache: this.#cache });
  }

  /** Checks one event and dispatches it; the outcome is also reported through the callbacks. */
  handleEvent(e: NostrEvent): FrameOutcome {
    const outcome = this.#check(e);
    switch (outcome.status) {
      case 'accepted':
        this.#stats.accepted++;
        this.#ring.push(outcome.frame);
        this.#call(() => this.#o.onFrame?.(outcome.frame));
        break;
      case 'rejected':
        this.#stats.rejected++;
        this.#call(() => this.#o.onRejected?.(outcome.reason, e));
        break;
      case 'ignored':
        this.#call(() => this.#o.onIgnored?.(outcome.reason, e));
        break;
      case 'duplicate':
        this.#stats.duplicates++;
        this.#call(() => this.#o.onIgnored?.('duplicate frame', e));
        break;
    }
    return outcome;
  }

  #check(e: NostrEvent): FrameOutcome {
    if (e.kind !== AO_KIND) return rejected(`invalid: not a kind ${AO_KIND} frame (kind ${e.kind})`);
    const checked = checkIdAndSignature(e, this.#verifier);
    if (!checked.ok) return rejected(`${checked.error.prefix}: ${checked.error.reason}`);
    const route = frameRoute(e);
    if (!route.ok) return rejected(`${route.error.prefix}: ${route.error.reason}`);
    const { direction, agent, recipient } = route.value;
    if (direction === 'unknown') {
      this.#stats.ignoredFrames++;
      const value = e.tags.find((t) => t[0] === 'frame')?.[1];
      return { status: 'ignored', reason: `unknown "frame" value ${JSON.stringify(value)}` };
    }
    if (direction === 'control') return rejected('restricted: a control frame is addressed to an agent, not to an observer');
    if (recipient !== this.owner) return rejected(`restricted: the frame is addressed to ${recipient}, not to this owner`);
    if (!this.#agents.has(agent)) return rejected(`restricted: unknown agent ${agent}: add it to the observer's agents to accept its frames`);
    const now = Math.floor(this.#now() / 1000);
    if (Math.abs(e.created_at - now) > AO_FRESHNESS_SECONDS) {
      return rejected(`invalid: created_at is more than ${AO_FRESHNESS_SECONDS} seconds from now (stale or replayed frame, or a wrong clock)`);
    }
    let key: Uint8Array;
    try {
      key = this.#cache.get(this.#sk, agent);
    } catch {
      return rejected('invalid: the agent pubkey is not a valid secp256k1 key');
    }
    const opened = decrypt(e.content, key);
    if (!opened.ok) return rejected(`invalid: cannot decrypt the frame (${opened.error}): it was not encrypted by this agent for this owner`);
    let json: unknown;
    try {
      json = JSON.parse(opened.value);
    } catch {
      return rejected('invalid: the decrypted frame is not JSON');
    }
    const parsed = ObserverEventSchema.safeParse(json);
    if (!parsed.success) {
      // The timestamp is a union (string or integer); zod's own message for it says only "Invalid input".
      const why = parsed.error.issues[0]?.path[0] === 'timestamp' ? 'timestamp: must be an RFC 3339 string or integer milliseconds' : describeIssue(parsed.error);
      return rejected(`invalid: the decrypted frame is not an ObserverEvent: ${why}`);
    }
    const frame = parsed.data;

    const dedupeKey = JSON.stringify([agent, frame.sessionId, frame.seq, frame.timestamp]);
    if (this.#seen.has(dedupeKey)) return { status: 'duplicate' };
    this.#seen.set(dedupeKey, true);

    this.#trackSeq(agent, frame);
    const dropped = frame.payload.dropped;
    if (typeof dropped === 'number' && Number.isSafeInteger(dropped) && dropped > 0) {
      this.#stats.reportedDrops += dropped;
      this.#call(() => this.#o.onDropReport?.(agent, dropped, frame));
    }
    if (!KNOWN.has(frame.kind)) {
      this.#stats.ignoredKinds++;
      return { status: 'ignored', reason: `unknown frame kind ${JSON.stringify(frame.kind)}` };
    }
    return { status: 'accepted', frame: { agent, eventId: e.id, createdAt: e.created_at, receivedAt: this.#now(), frame } };
  }

  #trackSeq(agent: string, frame: ObserverEvent): void {
    const key = JSON.stringify([agent, frame.sessionId]);
    const expected = this.#expected.peek(key);
    const seq = frame.seq;
    if (expected === undefined || seq >= expected) {
      if (expected !== undefined && seq > expected) {
        const gap: SeqGap = { agent, sessionId: frame.sessionId, expected, received: seq, missing: seq - expected };
        this.#stats.gaps += gap.missing;
        this.#call(() => this.#o.onGap?.(gap));
      }
      this.#expected.set(key, seq + 1);
    } else if (seq === 0) {
      this.#stats.restarts++;
      this.#expected.set(key, 1);
    } else {
      this.#stats.reordered++;
    }
  }

  /** Runs a caller-supplied callback; its exception must not break frame handling. */
  #call(fn: () => void): void {
    try {
      fn();
    } catch {
      // the caller's bug; the observer keeps going
    }
  }
}

const rejected = (reason: string): FrameOutcome => ({ status: 'rejected', reason });
