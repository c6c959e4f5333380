// What a run sends to its client: each event encrypted with NIP-44 (gift-wrapped when the prompt
// was) and signed; the run's non-terminal events published in order with bounded retries (one
// OrderedQueue per run, PacedPublisher from src/shared/paced-publisher.ts); and its one durable
// terminal event (persisted before it is published, re-sent by the watchdog until the relay
// accepts it, for a day at most and a bounded batch per alarm; a refusal for good, e.g. `blocked:`
// for a client that asked to vanish, ends the re-sending and is recorded on the run). An event not
// delivered after its attempts, or refused for good, is counted in the agent's DropSummary (one log
// line a minute, not one per event: a client chooses how its relay treats what it is sent). A
// terminal event refused with `restricted:` (e.g. the owner shard's storage quota: its inbox share
// full, where the smaller prompt still fitted) is followed by one short 25805 INTERNAL_ERROR (one
// attempt), so that the client stops waiting: in an ephemeral gift wrap (21059, stored nowhere, so
// no quota) when the run is wrapped, else plain, stored and counted like any answer (about 1.3 KB of
// the inbox share with its tags: it fits where that much is left, which a long answer did not).
// deliver() answers what became of the terminal event (Delivery), for the owner's NIP-AO.
// An error's message is as the client is told it (told-to.ts): the agent's owner gets the failure's
// `detail` (a provider's text, a limit's figures) as the message of its own runs' 25805 (at most
// OWNER_MESSAGE_MAX_BYTES of it, told-to.ts ownerDetail), anyone else the generic message. A terminal event to a client
// other than the agent's owner carries a NIP-40 expiration (on the gift wrap when wrapped):
// a response a day, an error or refusal 10 minutes (`terminalTtl`); one that expired unsent is not
// sent again. The owner's answers keep none (its history).

import { getPublicKey } from 'nostr-tools/pure';
import { backendSigner, expirationOf, type NostrEvent } from '../../src/shared/event.js';
import { relayVerifier } from '../common/verifier.js';
import { KIND } from '../../src/shared/kinds.js';
import { encrypt, MAX_PLAINTEXT_BYTES, type ConversationKeyCache } from '../../src/shared/nip44.js';
import { giftWrap, makeRumor, wrapRoom } from '../../src/shared/nip59.js';
import { NIPXX_VERSION, runTags } from '../../src/shared/nip-xx.js';
import { OrderedQueue, PacedPublisher, defaultTimers, type Settle } from '../../src/shared/paced-publisher.js';
import type { EventTemplate, PublishResult, RelayClient } from '../../src/shared/relay-client.js';
import { relayLabel, type StoredAgent } from './config.js';
import type { RunAddress, RunStore } from './run-store.js';
import type { Terminal } from './runtime.js';
import { errorMessage, isRefusedForGood, parseRejection } from '../../src/shared/errors.js';
import { fitResponse } from './event-fit.js';
import { ownerDetail, toldTo } from './told-to.js';
import { DROPS, type DropSummary } from '../common/drop-summary.js';

/** Attempts to publish one non-terminal run event, PUBLISH_RETRY_MS × n apart (200, 400 ms). */
const PUBLISH_ATTEMPTS = 3;
const PUBLISH_RETRY_MS = 200;
/** A terminal event not accepted is sent again by the watchdog while its run finished at most this long ago: a day. */
export const RESEND_WINDOW_MS = 24 * 3600 * 1000;
/** Terminal events one watchdog alarm sends again at most (together). */
export const RESEND_BATCH = 20;
/**
 * How long (NIP-40, seconds) a terminal event to a client other than the agent's owner is stored.
 * A response: a day, the time the agent itself re-sends it (RESEND_WINDOW_MS); each costs the
 * owner's token budget, so what strangers can have stored is a day of what the owner's plan lets
 * them run. An error (a refusal without a run, or a run's error, which a stranger can cause
 * cheaply): 10 minutes; a client reads it as it comes (the CLI and the client library wait 120 s
 * for an answer by default).
 */
export const RESPONSE_TTL_SECONDS = RESEND_WINDOW_MS / 1000;
export const ERROR_TTL_SECONDS = 600;

/** The TTL of a terminal event of `kind` to `client`, or undefined for the agent's `owner` (kept: its history). */
export function terminalTtl(kind: number, client: string, owner: string): number | undefined {
  if (client === owner) return undefined;
  return kind === KIND.AI_RESPONSE ? RESPONSE_TTL_SECONDS : ERROR_TTL_SECONDS;
}
/** What a terminal event that expired before a relay took it is recorded with (it is not sent again). */
const EXPIRED_UNSENT = 'expired: its NIP-40 expiration passed before a relay took it';

/** What a client other than the owner is told when its run's answer was refused with `restricted:`. */
export const ANSWER_NOT_STORED = 'the answer could not be stored on this relay; the agent owner can see why';

/**
 * What became of a run's terminal event when it was sent: accepted, or not, with why for the
 * agent's owner (the relay's answer, whether the watchdog sends it again, what the client was told).
 */
export type Delivery = { delivered: true } | { delivered: false; detail: string };

/** Every refusal is retried; `duplicate:` means the relay already has the event. */
const settle: Settle = (r) => (r.ok || r.message.startsWith('duplicate:') ? 'delivered' : 'retry');

/** One queued non-terminal event and where it goes. */
interface Pending {
  event: NostrEvent;
  relay: string;
  c: StoredAgent;
}

export interface OutboxDeps {
  runs: RunStore;
  keys: ConversationKeyCache;
  secretKey(): Promise<Uint8Array>;
  sign(t: EventTemplate, sk: Uint8Array): Promise<NostrEvent>;
  /** The (current) connection to `relay`. */
  client(relay: string, c: StoredAgent): RelayClient;
  config(): StoredAgent | undefined;
  /** Where the events a relay did not take are counted (DROPS.refusedByRelay). */
  drops: Pick<DropSummary, 'drop'>;
}

/**
 * The encrypted payload of a terminal event to `client` of an agent of `owner`, within `room` bytes:
 * a response text that does not fit is cut and marked (event-fit.ts); an error's message is as
 * `client` is told it (told-to.ts: the owner gets `detail`, cut by ownerDetail).
 */
function terminalPayload(t: Terminal, room: number, client: string, owner: string): object {
  if (t.type === 'response') return fitResponse({ ver: NIPXX_VERSION, text: t.text, timestamp: Math.floor(Date.now() / 1000), usage: t.usage }, room);
  const told = toldTo(t, client, owner);
  const message = told.message === t.message ? t.message : ownerDetail(told.message);
  return { ver: NIPXX_VERSION, code: t.code, message, ...(t.retry_after ? { retry_after: t.retry_after } : {}), ...(t.details ? { details: t.details } : {}) };
}

export class Outbox {
  /** Non-terminal run events that could not be published after every attempt. */
  undelivered = 0;
  /** Runs with an undelivered event (their later events get one attempt). */
  private readonly undeliverable = new Set<string>();
  /** The ordered queue of each active run's non-terminal publishes. */
  private readonly inFlight = new Map<string, OrderedQueue<Pending>>();
  /** Runs whose terminal event is being written by this instance. */
  private readonly finishing = new Set<string>();

  constructor(private readonly deps: OutboxDeps) {}

  /** Whether this instance is writing the terminal event of `runId`. */
  isFinishing(runId: string): boolean {
    return this.finishing.has(runId);
  }

  /**
   * Publishes a non-terminal run event without making the run wait: the run's events form one chain
   * (each sent after the previous one's OK, so the relay sees them in order); finish() waits for the
   * chain before the terminal event. A refused or lost publish is retried (on the current connection
   * to that relay) up to PUBLISH_ATTEMPTS times, then counted in `undelivered` and in the drops.
   */
  async emit(runId: string, kind: number, payload: object, extraTags: string[][] = []): Promise<void> {
    const run = this.deps.runs.get(runId);
    if (!run) throw new Error(`run ${runId} has no row`);
    const c = this.deps.config();
    if (!c) return;
    const event = await this.build(run, kind, payload, extraTags);
    let queue = this.inFlight.get(runId);
    if (!queue) {
      queue = new OrderedQueue<Pending>(
        (p) => this.publishWithRetry(runId, p),
        // unreachable by design (PacedPublisher.publish never throws); never lose an event silently
        (p, e) => console.error(`agent: run ${runId}: event ${p.event.id} could not be published: ${errorMessage(e)}`),
      );
      this.inFlight.set(runId, queue);
    }
    queue.add({ event, relay: run.relay, c });
    queue.run();
  }

  /** Persists the one terminal event of a run, then publishes it (deliver, when what became of it matters). */
  async finish(runId: string, c: StoredAgent, t: Terminal): Promise<void> {
    await this.deliver(runId, c, t);
  }

  /**
   * Persists the one terminal event of a run, then publishes it: what became of it. A run that
   * already ended is left alone (undefined).
   */
  async deliver(runId: string, c: StoredAgent, t: Terminal): Promise<Delivery | undefined> {
    // Exactly one finisher per run: claimed before any await (the watchdog may look meanwhile).
    if (this.finishing.has(runId)) return undefined;
    const run = this.deps.runs.get(runId);
    if (!run || run.state === 'done') return undefined;
    this.finishing.add(runId);
    try {
      await this.inFlight.get(runId)?.idle();
      this.inFlight.delete(runId);
      this.undeliverable.delete(runId);
      const kind = t.type === 'response' ? KIND.AI_RESPONSE : KIND.AI_ERROR;
      const event = await this.build(run, kind, terminalPayload(t, this.roomOf(run, kind), run.client, c.owner), [], undefined, terminalTtl(kind, run.client, c.owner));
      this.deps.runs.finish(runId, t.type === 'response' ? 'response' : t.code, event);
      return await this.publishTerminal(run, event, c);
    } finally {
      this.finishing.delete(runId);
    }
  }

  /**
   * Re-sends the stored terminal events the relay has neither accepted nor refused for good: those of
   * runs finished within RESEND_WINDOW_MS of `now` (ms), the newest RESEND_BATCH at once (so one
   * watchdog alarm waits one publish timeout at most, however many answers a failing relay has left
   * behind). One whose expiration passed is recorded as such, never sent.
   */
  async resendTerminals(c: StoredAgent, now: number): Promise<void> {
    const runs = this.deps.runs.unpublished(now - RESEND_WINDOW_MS, RESEND_BATCH);
    await Promise.all(
      runs.map((r) => {
        if (!r.terminal) return undefined;
        const event = JSON.parse(r.terminal) as NostrEvent;
        const expiration = expirationOf(event);
        if (expiration !== null && expiration <= Math.floor(now / 1000)) return this.deps.runs.markRefused(r.id, EXPIRED_UNSENT);
        return this.publishTerminal(r, event, c);
      }),
    );
  }

  /**
   * Publishes a terminal event for a prompt that got no run row (not persisted, not retried), in the
   * form the prompt came: a prompt in an ephemeral gift wrap (21059) is refused in one, which no
   * relay stores (nothing is kept to replay it from anyway, and the prompt itself was not stored);
   * otherwise plain or in a 1059 as the prompt was.
   */
  async answerWithoutRun(to: RunAddress, c: StoredAgent, t: Terminal, wrapKind?: number): Promise<void> {
    await this.publishWithoutRun(to, c, t, wrapKind);
  }

  /** answerWithoutRun, with the relay's answer. */
  private async publishWithoutRun(to: RunAddress, c: StoredAgent, t: Terminal, wrapKind?: number): Promise<PublishResult> {
    const wrapAs = wrapKind === KIND.EPHEMERAL_GIFT_WRAP ? KIND.EPHEMERAL_GIFT_WRAP : undefined;
    const event = await this.build(to, KIND.AI_ERROR, terminalPayload(t, this.roomOf(to, KIND.AI_ERROR), to.client, c.owner), [], wrapAs, terminalTtl(KIND.AI_ERROR, to.client, c.owner));
    return this.deps.client(to.relay, c).publish(event, { timeoutMs: 10_000 });
  }

  /**
   * One attempt at a run's terminal event (each run answers on the one relay its prompt came from).
   * Accepted (or `duplicate:`, the relay has it): done. Refused for good: recorded and counted in
   * the drops, never sent again; when `restricted:`, the client is sent the short 25805 of the
   * header (one attempt). Anything else (`rate-limited:`, `error:`, no answer): the watchdog sends
   * it again until retention removes the run.
   */
  private async publishTerminal(run: RunAddress, event: NostrEvent, c: StoredAgent): Promise<Delivery> {
    const result = await this.deps.client(run.relay, c).publish(event, { timeoutMs: 10_000 });
    if (result.ok || result.message.startsWith('duplicate:')) {
      this.deps.runs.markPublished(run.id);
      return { delivered: true };
    }
    const why = `${relayLabel(run.relay)}: ${result.message}`;
    if (!isRefusedForGood(result.message)) return { delivered: false, detail: `the relay has not accepted the answer yet (${why}); it is sent again for ${RESEND_WINDOW_MS / 3_600_000} hours at most` };
    this.deps.runs.markRefused(run.id, result.message);
    this.deps.drops.drop(DROPS.refusedByRelay, why);
    const refused = `the relay refused the answer for good (${why})`;
    if (parseRejection(result.message)?.prefix !== 'restricted') return { delivered: false, detail: refused };
    const notice: Terminal = { type: 'error', code: 'INTERNAL_ERROR', message: ANSWER_NOT_STORED, detail: `the answer could not be stored on this relay: ${result.message}` };
    const told = await this.publishWithoutRun(run, c, notice, KIND.EPHEMERAL_GIFT_WRAP);
    return { delivered: false, detail: told.ok ? `${refused}; the client was told INTERNAL_ERROR` : `${refused}; the INTERNAL_ERROR to tell the client was not accepted either (${told.message})` };
  }

  private async publishWithRetry(runId: string, { event, relay, c }: Pending): Promise<void> {
    // Once an event of the run could not be delivered, the relay is unreachable: later events get
    // one attempt each, so a long outage does not hold the run's terminal event back for minutes.
    const attempts = this.undeliverable.has(runId) ? 1 : PUBLISH_ATTEMPTS;
    const publisher = new PacedPublisher({
      publish: (e) => this.deps.client(relay, c).publish(e, { timeoutMs: 5000 }),
      now: Date.now,
      timers: defaultTimers,
      maxPerSecond: Infinity,
      marginMs: 0,
      maxAttempts: attempts,
      backoff: { initialMs: PUBLISH_RETRY_MS, factor: 2, maxMs: PUBLISH_RETRY_MS * (PUBLISH_ATTEMPTS - 1) },
      settle,
    });
    const r = await publisher.publish(event);
    if (r.ok) return;
    this.undeliverable.add(runId);
    this.undelivered++;
    this.deps.drops.drop(DROPS.refusedByRelay, `${relayLabel(relay)}: ${r.message}`);
  }

  /** The most bytes of JSON payload an event of `kind` of run `runId` (with `extraTags`) can carry. */
  room(runId: string, kind: number, extraTags: string[][] = []): number {
    const run = this.deps.runs.get(runId);
    if (!run) throw new Error(`run ${runId} has no row`);
    return this.roomOf(run, kind, extraTags);
  }

  /** One NIP-44 message; inside a gift wrap, what still fits once the seal and the wrap encrypt it again. */
  private roomOf(run: RunAddress, kind: number, extraTags: string[][] = []): number {
    if (!run.wrapped) return MAX_PLAINTEXT_BYTES;
    return wrapRoom({ kind, created_at: Math.floor(Date.now() / 1000), tags: runTags(run.client, run.id, run.session, extraTags) });
  }

  /**
   * An encrypted run event for the client (gift-wrapped when the prompt was: in a `wrapAs` wrap when
   * given, with the real time), expiring `ttl` seconds after it is written when given (the tag on a
   * plain event, on the wrap of a wrapped one).
   */
  private async build(run: RunAddress, kind: number, payload: object, extraTags: string[][] = [], wrapAs?: number, ttl?: number): Promise<NostrEvent> {
    const sk = await this.deps.secretKey();
    const content = encrypt(JSON.stringify(payload), this.deps.keys.get(sk, run.client));
    const template = { kind, created_at: Math.floor(Date.now() / 1000), tags: runTags(run.client, run.id, run.session, extraTags), content };
    const expiration = ttl === undefined ? undefined : template.created_at + ttl;
    if (!run.wrapped) return this.deps.sign(expiration === undefined ? template : { ...template, tags: [...template.tags, ['expiration', String(expiration)]] }, sk);
    const form = wrapAs === undefined ? {} : { kind: wrapAs, exactTime: true };
    return giftWrap(makeRumor({ ...template, pubkey: getPublicKey(sk) }), sk, run.client, this.deps.keys, template.created_at, { sign: backendSigner(await relayVerifier()), ...form, ...(expiration === undefined ? {} : { expiration }) });
  }
}
