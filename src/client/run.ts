// NIP-XX runs from the client side: a conversation with one agent over its relay (authenticated up
// front, so the first answer cannot be missed), prompts (25802, NIP-44, optionally gift-wrapped),
// deltas (25801) handed out in seq order, status (25800) and tool calls (25804) as they come, cancel
// (25806) and the terminal event (25803 response or 25805 error). The session is the `s` tag.
// An agent may send more than one terminal for a run; NIP-XX: "clients MUST keep only the terminal
// event with the highest created_at and highest id as tie-breaker". A run's `done` settles
// TERMINAL_SETTLE_MS after its first terminal, with the highest (created_at, id) received by then
// (a gift-wrapped one's rumor's); one arriving later is not seen (`done` has settled). From the
// first terminal on, the run's deltas, status and tool calls reach no handler (NIP-XX: "Clients MUST
// NOT apply deltas after a terminal event has been accepted"); the answer to show is the terminal's
// text, not the deltas (which may have gaps, or differ from an answer cut to fit an event).
//
// What a stranger or a hostile agent can make it do is bounded:
// - Gift wraps addressed to the user are heard only from the first wrapped prompt on (the `edgestr`
//   command never sends one), and opened only while a wrapped prompt waits: anyone may store
//   1059s for the user's key, each costing a signature check and a key agreement to open. The
//   stored ones the subscription's two-day look-back returns come before the prompt is sent and
//   are not opened; a wrap is looked at once (ids remembered in an LRU of SEEN_WRAPS), also when
//   a reconnection replays it. Plain events are decrypted only for a run that waits.
// - Deltas are put in order by DeltaOrder (src/shared/delta-order.ts): at most MAX_EARLY_DELTAS
//   wait for an earlier one, at most MAX_RUN_OUTPUT_CHARS characters in all.
// - `problems` keeps the newest MAX_PROBLEMS_KEPT; `problemCount` counts them all.
// - A relay cannot hold the conversation for ever (it is the one the agent's relay list names,
//   which a stranger's agent chooses): each subscription (the run kinds at open, the gift wraps at
//   the first wrapped prompt) waits for its EOSE at most OPEN_STEP_MS (open's `timeoutMs`, for a
//   wrapped prompt at most its own), then is closed and fails: "subscription refused by <url>: no
//   EOSE within 10000 ms" (a failed gift wrap subscription is asked again at the next wrapped
//   prompt). A CLOSED after the EOSE for a passing reason (`rate-limited:`, `error:`) sends the
//   subscription again after the relay client's backoff, from the oldest waiting run's prompt on
//   (its stored terminal is heard); any other ends the runs it served at once ({ kind: 'closed' },
//   "subscription closed by <url>: <the relay's message>"), and a closed run-kinds subscription
//   fails every later prompt with that message.
import { finalizeEvent } from 'nostr-tools/pure';
import { DeltaOrder } from '../shared/delta-order.js';
import type { NostrEvent } from '../shared/event.js';
import type { Filter } from '../shared/filters.js';
import { err, errorMessage, ok, type Result } from '../shared/errors.js';
import { KIND } from '../shared/kinds.js';
import { LruMap } from '../shared/lru.js';
import { ConversationKeyCache, decrypt, encrypt } from '../shared/nip44.js';
import { giftWrap, makeRumor, unwrap, WRAP_LOOKBACK_SECONDS, type Rumor } from '../shared/nip59.js';
import { DeltaSchema, ErrorSchema, NIPXX_VERSION, ResponseSchema, StatusSchema, ToolCallSchema, type Status } from '../shared/nip-xx.js';
import type { PublishResult, RelayClient } from '../shared/relay-client.js';
import { nobleVerifier } from '../shared/verify.js';
import type { KeyPair } from './keys.js';
import { relayClient, verifyEvent } from './relay.js';

export type ToolCall = ReturnType<typeof ToolCallSchema.parse>;

export type RunOutcome =
  | { kind: 'response'; text: string; usage?: { input_tokens: number; output_tokens: number } }
  | { kind: 'error'; code: string; message: string }
  | { kind: 'timeout' }
  /** The relay ended the subscription the run's answers come on, for good: "subscription closed by <url>: <its message>". */
  | { kind: 'closed'; message: string };

export interface RunHandlers {
  onDelta?: (text: string, seq: number) => void;
  onStatus?: (status: Status) => void;
  onToolCall?: (call: ToolCall) => void;
}

export interface PromptOptions extends RunHandlers {
  model?: string;
  /** The `s` tag (default: the agent's default session for this sender). */
  session?: string;
  /** Send the prompt gift-wrapped (NIP-59) instead of as a plain 25802. */
  wrap?: boolean;
  /** Give up waiting for the terminal event after this long (default 120 s). */
  timeoutMs?: number;
}

export interface RunHandle {
  /** The run id: the prompt's event id (the rumor's when wrapped). */
  readonly id: string;
  /** Sends the 25806 cancel (gift-wrapped when the prompt was). */
  cancel(): Promise<PublishResult>;
  readonly done: Promise<RunOutcome>;
}

export interface OpenOptions {
  /** How long each step of opening may wait: the connection, AUTH, the subscription's EOSE (default OPEN_STEP_MS). */
  timeoutMs?: number;
}

interface Opened {
  /** The event's id and created_at (the rumor's when gift-wrapped). */
  id: string;
  createdAt: number;
  kind: number;
  payload: unknown;
}

interface ActiveRun {
  handlers: RunHandlers;
  /** The prompt was gift-wrapped: the answers come wrapped. */
  wrapped: boolean;
  /** The prompt's created_at. */
  createdAt: number;
  deltas: DeltaOrder;
  /** The terminal kept so far and the timer that settles the run with it. */
  terminal?: { id: string; createdAt: number; outcome: RunOutcome };
  settle?: ReturnType<typeof setTimeout>;
  finish: (o: RunOutcome) => void;
}

/** How long a run waits after its first terminal event for one that supersedes it, in ms. */
export const TERMINAL_SETTLE_MS = 300;
/** Problems kept in `problems` (the newest). */
export const MAX_PROBLEMS_KEPT = 20;
/** How long each step of opening waits by default (as the relay client's connect and AUTH), in ms. */
export const OPEN_STEP_MS = 10_000;
/** Gift wrap ids remembered as looked at. */
const SEEN_WRAPS = 8192;

const RUN_KINDS = [KIND.AI_STATUS, KIND.AI_DELTA, KIND.AI_RESPONSE, KIND.AI_TOOL_CALL, KIND.AI_ERROR];
const nowSeconds = (): number => Math.floor(Date.now() / 1000);
const rootOf = (tags: string[][]): string | undefined => (tags.find((t) => t[0] === 'e' && t[3] === 'root') ?? tags.find((t) => t[0] === 'e'))?.[1];

export class AgentConversation {
  readonly #cache = new ConversationKeyCache(16);
  readonly #runs = new Map<string, ActiveRun>();
  /** The newest MAX_PROBLEMS_KEPT problems with events for this conversation (undecryptable, malformed, dropped deltas), for diagnostics. */
  readonly problems: string[] = [];
  #problemCount = 0;
  readonly #seenWraps = new LruMap<string, true>(SEEN_WRAPS);
  /** The subscription to gift wraps, made at the first wrapped prompt (again after it failed or was closed). */
  #wraps: Promise<Result<true, string>> | undefined;
  /** Why the relay ended the run-kinds subscription for good: every later prompt fails with it. */
  #closed: string | undefined;

  private constructor(
    readonly relay: RelayClient,
    readonly key: KeyPair,
    readonly agent: string,
    private readonly stepMs: number,
  ) {}

  /** Connects to `relayUrl`, authenticates as `key` and subscribes to what `agent` sends it. */
  static async open(relayUrl: string, agent: string, key: KeyPair, opts: OpenOptions = {}): Promise<Result<AgentConversation, string>> {
    const stepMs = opts.timeoutMs ?? OPEN_STEP_MS;
    const relay = relayClient(relayUrl, key, { reconnect: true });
    const c = new AgentConversation(relay, key, agent, stepMs);
    const fail = (message: string): Result<never, string> => {
      relay.close();
      return err(message);
    };
    const connected = await relay.connect({ timeoutMs: stepMs });
    if (!connected.ok) return fail(`cannot connect to ${relayUrl}: ${connected.message}`);
    const authed = await relay.authenticate({ timeoutMs: stepMs });
    if (!authed.ok) return fail(`authentication refused by ${relayUrl}: ${authed.message}`);
    const filter = (since: number): Filter => ({ kinds: RUN_KINDS, '#p': [key.pk], authors: [agent], since });
    const subscribed = await c.#subscribe({
      filter: filter(nowSeconds() - 5),
      again: () => filter(c.#oldestWaiting(false) - 5),
      waitMs: stepMs,
      onGone: (message) => {
        c.#closed = message;
        c.#endRuns(false, message);
      },
    });
    if (!subscribed.ok) return fail(subscribed.error);
    return ok(c);
  }

  /** How many problems there were in all (`problems` keeps the newest). */
  get problemCount(): number {
    return this.#problemCount;
  }

  #problem(message: string): void {
    this.#problemCount++;
    this.problems.push(message);
    if (this.problems.length > MAX_PROBLEMS_KEPT) this.problems.shift();
  }

  /**
   * Subscribes to `filter`, resolving at its EOSE, or with the reason ("subscription refused by
   * <url>: …") at a CLOSED or when no EOSE came within `waitMs` (the subscription is closed then).
   * Once confirmed, a CLOSED for a passing reason sends it again with `again()` (the relay client's
   * backoff), any other calls `onGone` with "subscription closed by <url>: <message>".
   */
  #subscribe(s: { filter: Filter; again: () => Filter; waitMs: number; onGone: (message: string) => void; verify?: (e: NostrEvent) => boolean }): Promise<Result<true, string>> {
    return new Promise((resolve) => {
      let confirmed = false;
      const timer = setTimeout(() => {
        sub.close();
        resolve(err(`subscription refused by ${this.relay.url}: no EOSE within ${s.waitMs} ms`));
      }, s.waitMs);
      const sub = this.relay.subscribe([s.filter], {
        onEvent: (e) => this.#take(e),
        onEose: () => {
          clearTimeout(timer);
          confirmed = true;
          resolve(ok(true));
        },
        onClosed: (m) => {
          clearTimeout(timer);
          if (confirmed) s.onGone(`subscription closed by ${this.relay.url}: ${m}`);
          else resolve(err(`subscription refused by ${this.relay.url}: ${m}`));
        },
        resubscribe: () => [s.again()],
        ...(s.verify ? { verify: s.verify } : {}),
      });
    });
  }

  /** Subscribes to the gift wraps addressed to the user (once while it lives), resolving at its EOSE or within `waitMs`. */
  #listenToWraps(waitMs: number): Promise<Result<true, string>> {
    if (this.#wraps) return this.#wraps;
    // Gift wraps are signed by one-time keys and may be backdated by up to two days. Their
    // signatures are checked in #takeWrap, after the cheap checks.
    const filter = (): Filter => ({ kinds: [KIND.GIFT_WRAP, KIND.EPHEMERAL_GIFT_WRAP], '#p': [this.key.pk], since: nowSeconds() - 5 - WRAP_LOOKBACK_SECONDS });
    const wraps = this.#subscribe({
      filter: filter(),
      again: filter,
      waitMs,
      verify: () => true,
      onGone: (message) => {
        if (this.#wraps === wraps) this.#wraps = undefined;
        this.#endRuns(true, message);
      },
    });
    this.#wraps = wraps;
    void wraps.then((r) => {
      if (!r.ok && this.#wraps === wraps) this.#wraps = undefined;
    });
    return wraps;
  }

  /** The created_at of the oldest waiting run whose answers come wrapped (or not), else now. */
  #oldestWaiting(wrapped: boolean): number {
    return Math.min(nowSeconds(), ...[...this.#runs.values()].filter((r) => r.wrapped === wrapped).map((r) => r.createdAt));
  }

  /** Ends the waiting runs whose answers come wrapped (or not): the relay stopped serving them. */
  #endRuns(wrapped: boolean, message: string): void {
    for (const run of [...this.#runs.values()]) if (run.wrapped === wrapped) run.finish({ kind: 'closed', message });
  }

  /** The run an event's (or rumor's) `e` root names, when it waits. */
  #runOf(tags: string[][]): ActiveRun | undefined {
    const id = rootOf(tags);
    return id === undefined ? undefined : this.#runs.get(id);
  }

  /** The payload of an event (or rumor) from the agent, or a problem noted. */
  #read(inner: Pick<Rumor, 'id' | 'created_at' | 'kind' | 'content'>): Opened | undefined {
    const text = decrypt(inner.content, this.#cache.get(this.key.sk, this.agent));
    if (!text.ok) return void this.#problem(`cannot decrypt kind ${inner.kind}: ${text.error}`);
    try {
      return { id: inner.id, createdAt: inner.created_at, kind: inner.kind, payload: JSON.parse(text.value) as unknown };
    } catch (e2) {
      return void this.#problem(`kind ${inner.kind} is not JSON: ${errorMessage(e2)}`);
    }
  }

  #take(e: NostrEvent): void {
    if (e.kind === KIND.GIFT_WRAP || e.kind === KIND.EPHEMERAL_GIFT_WRAP) return this.#takeWrap(e);
    const run = this.#runOf(e.tags);
    if (!run || e.pubkey !== this.agent) return;
    const o = this.#read(e);
    if (o) this.#handle(run, o);
  }

  /** Cheapest checks first: a wrap looked at before, or one while no wrapped prompt waits, is not opened. */
  #takeWrap(e: NostrEvent): void {
    if (this.#seenWraps.has(e.id)) return;
    this.#seenWraps.set(e.id, true);
    if (![...this.#runs.values()].some((r) => r.wrapped)) return;
    if (!verifyEvent(e)) return this.#problem(`gift wrap ${e.id}: bad id or signature`);
    const u = unwrap(e, this.key.sk, this.#cache, nobleVerifier);
    if (!u.ok) return this.#problem(`cannot unwrap ${e.id}: ${u.error}`);
    const rumor = u.value.rumor;
    const run = this.#runOf(rumor.tags);
    if (!run || rumor.pubkey !== this.agent) return;
    const o = this.#read(rumor);
    if (o) this.#handle(run, o);
  }

  #handle(run: ActiveRun, o: Opened): void {
    // NIP-XX: no delta is applied once a terminal is accepted (status and tool calls are ignored
    // too); only a terminal that supersedes it still counts during the settle time.
    if (run.terminal && o.kind !== KIND.AI_RESPONSE && o.kind !== KIND.AI_ERROR) return;
    switch (o.kind) {
      case KIND.AI_DELTA: {
        const d = DeltaSchema.safeParse(o.payload);
        if (!d.success) return this.#problem('malformed delta');
        const taken = run.deltas.push(d.data.seq ?? run.deltas.next, d.data.text);
        if (taken.dropped) this.#problem(taken.dropped);
        for (const { seq, text } of taken.ready) run.handlers.onDelta?.(text, seq);
        return;
      }
      case KIND.AI_STATUS: {
        const s = StatusSchema.safeParse(o.payload);
        if (s.success) run.handlers.onStatus?.(s.data);
        return;
      }
      case KIND.AI_TOOL_CALL: {
        const t = ToolCallSchema.safeParse(o.payload);
        if (t.success) run.handlers.onToolCall?.(t.data);
        return;
      }
      case KIND.AI_RESPONSE: {
        const r = ResponseSchema.safeParse(o.payload);
        if (!r.success) return this.#terminal(run, o, { kind: 'error', code: 'PARSE_ERROR', message: 'the agent sent a malformed response' });
        return this.#terminal(run, o, { kind: 'response', text: r.data.text, ...(r.data.usage ? { usage: r.data.usage } : {}) });
      }
      case KIND.AI_ERROR: {
        const x = ErrorSchema.safeParse(o.payload);
        return this.#terminal(run, o, x.success ? { kind: 'error', code: x.data.code, message: x.data.message } : { kind: 'error', code: 'PARSE_ERROR', message: 'the agent sent a malformed error' });
      }
    }
  }

  /** Keeps terminal `o` unless the one kept has a higher (created_at, id); the first starts the settle timer. */
  #terminal(run: ActiveRun, o: Opened, outcome: RunOutcome): void {
    const kept = run.terminal;
    if (kept && (kept.createdAt > o.createdAt || (kept.createdAt === o.createdAt && kept.id >= o.id))) return;
    run.terminal = { id: o.id, createdAt: o.createdAt, outcome };
    run.settle ??= setTimeout(() => run.finish(run.terminal!.outcome), TERMINAL_SETTLE_MS);
  }

  #encrypted(kind: number, payload: object, tags: string[][], wrapped: boolean): { event: NostrEvent; id: string; createdAt: number } {
    const content = encrypt(JSON.stringify(payload), this.#cache.get(this.key.sk, this.agent));
    const template = { kind, created_at: nowSeconds(), tags, content };
    if (!wrapped) {
      const event = finalizeEvent(template, this.key.sk);
      return { event, id: event.id, createdAt: template.created_at };
    }
    const rumor = makeRumor({ ...template, pubkey: this.key.pk });
    return { event: giftWrap(rumor, this.key.sk, this.agent, this.#cache), id: rumor.id, createdAt: template.created_at };
  }

  /** Publishes a prompt; the handle's `done` settles with the run's terminal event (or a timeout). */
  async prompt(message: string, opts: PromptOptions = {}): Promise<Result<RunHandle, string>> {
    const tags = [['p', this.agent], ['encryption', 'nip44'], ...(opts.session ? [['s', opts.session]] : [])];
    const payload = { ver: NIPXX_VERSION, message, ...(opts.model ? { model: opts.model } : {}) };
    const wrapped = opts.wrap ?? false;
    const timeoutMs = opts.timeoutMs ?? 120_000;
    if (this.#closed !== undefined) return err(this.#closed);
    if (wrapped) {
      // Heard before the prompt is sent, so that its answers cannot be missed; what the look-back
      // returns comes before the run waits, and is not opened.
      const listening = await this.#listenToWraps(Math.min(this.stepMs, timeoutMs));
      if (!listening.ok) return listening;
    }
    const { event, id, createdAt } = this.#encrypted(KIND.AI_PROMPT, payload, tags, wrapped);
    let finish!: (o: RunOutcome) => void;
    const done = new Promise<RunOutcome>((resolve) => (finish = resolve));
    const timer = setTimeout(() => finish({ kind: 'timeout' }), timeoutMs);
    const run: ActiveRun = {
      handlers: opts,
      wrapped,
      createdAt,
      deltas: new DeltaOrder(),
      finish: (o) => {
        clearTimeout(timer);
        clearTimeout(run.settle);
        this.#runs.delete(id);
        finish(o);
      },
    };
    this.#runs.set(id, run);
    const published = await this.relay.publish(event);
    if (!published.ok) {
      // Registered before publishing (answers may overtake the OK); settle it so its timer stops.
      this.#runs.get(id)?.finish({ kind: 'timeout' });
      return err(`the relay refused the prompt: ${published.message}`);
    }
    const cancel = (): Promise<PublishResult> => {
      const tagsC = [['p', this.agent], ['e', id, '', 'root'], ['encryption', 'nip44']];
      return this.relay.publish(this.#encrypted(KIND.AI_CANCEL, { ver: NIPXX_VERSION, reason: 'user_cancel' }, tagsC, wrapped).event);
    };
    return ok({ id, cancel, done });
  }

  close(): void {
    for (const run of [...this.#runs.values()]) run.finish({ kind: 'timeout' });
    this.relay.close();
  }
}
