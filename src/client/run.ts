// NIP-XX runs from the client side: a conversation with one agent over its relay (authenticated up
// front, so the first answer cannot be missed), prompts (25802, NIP-44, optionally gift-wrapped),
// deltas (25801) handed out in seq order, status (25800) and tool calls (25804) as they come, cancel
// (25806) and the terminal event (25803 response or 25805 error). The session is the `s` tag.
// An agent may send more than one terminal for a run; NIP-XX: "clients MUST keep only the terminal
// event with the highest created_at and highest id as tie-breaker". A run's `done` settles
// TERMINAL_SETTLE_MS after its first terminal, with the highest (created_at, id) received by then
// (a gift-wrapped one's rumor's); one arriving later is not seen (`done` has settled).
import { finalizeEvent } from 'nostr-tools/pure';
import type { NostrEvent } from '../shared/event.js';
import { err, errorMessage, ok, type Result } from '../shared/errors.js';
import { KIND } from '../shared/kinds.js';
import { ConversationKeyCache, decrypt, encrypt } from '../shared/nip44.js';
import { giftWrap, makeRumor, unwrap, WRAP_LOOKBACK_SECONDS } from '../shared/nip59.js';
import { DeltaSchema, ErrorSchema, NIPXX_VERSION, ResponseSchema, StatusSchema, ToolCallSchema, type Status } from '../shared/nip-xx.js';
import type { PublishResult, RelayClient } from '../shared/relay-client.js';
import { nobleVerifier } from '../shared/verify.js';
import type { KeyPair } from './keys.js';
import { relayClient } from './relay.js';

export type ToolCall = ReturnType<typeof ToolCallSchema.parse>;

export type RunOutcome =
  | { kind: 'response'; text: string; usage?: { input_tokens: number; output_tokens: number } }
  | { kind: 'error'; code: string; message: string }
  | { kind: 'timeout' };

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

interface Opened {
  /** The event's id and created_at (the rumor's when gift-wrapped). */
  id: string;
  createdAt: number;
  kind: number;
  tags: string[][];
  payload: unknown;
}

interface ActiveRun {
  handlers: RunHandlers;
  nextSeq: number;
  early: Map<number, string>;
  /** The terminal kept so far and the timer that settles the run with it. */
  terminal?: { id: string; createdAt: number; outcome: RunOutcome };
  settle?: ReturnType<typeof setTimeout>;
  finish: (o: RunOutcome) => void;
}

/** How long a run waits after its first terminal event for one that supersedes it, in ms. */
export const TERMINAL_SETTLE_MS = 300;

const RUN_KINDS = [KIND.AI_STATUS, KIND.AI_DELTA, KIND.AI_RESPONSE, KIND.AI_TOOL_CALL, KIND.AI_ERROR];
const nowSeconds = (): number => Math.floor(Date.now() / 1000);
const rootOf = (tags: string[][]): string | undefined => (tags.find((t) => t[0] === 'e' && t[3] === 'root') ?? tags.find((t) => t[0] === 'e'))?.[1];

export class AgentConversation {
  readonly #cache = new ConversationKeyCache(16);
  readonly #runs = new Map<string, ActiveRun>();
  /** Problems with events from the agent (undecryptable, malformed), for diagnostics. */
  readonly problems: string[] = [];

  private constructor(
    readonly relay: RelayClient,
    readonly key: KeyPair,
    readonly agent: string,
  ) {}

  /** Connects to `relayUrl`, authenticates as `key` and subscribes to what `agent` sends it. */
  static async open(relayUrl: string, agent: string, key: KeyPair): Promise<Result<AgentConversation, string>> {
    const relay = relayClient(relayUrl, key, { reconnect: true });
    const c = new AgentConversation(relay, key, agent);
    const fail = (message: string): Result<never, string> => {
      relay.close();
      return err(message);
    };
    const connected = await relay.connect();
    if (!connected.ok) return fail(`cannot connect to ${relayUrl}: ${connected.message}`);
    const authed = await relay.authenticate();
    if (!authed.ok) return fail(`authentication refused by ${relayUrl}: ${authed.message}`);
    const since = nowSeconds() - 5;
    const subscribed = await Promise.all([
      c.#subscribe({ kinds: RUN_KINDS, '#p': [key.pk], authors: [agent], since }),
      // Gift wraps are signed by one-time keys and may be backdated by up to two days.
      c.#subscribe({ kinds: [KIND.GIFT_WRAP, KIND.EPHEMERAL_GIFT_WRAP], '#p': [key.pk], since: since - WRAP_LOOKBACK_SECONDS }),
    ]);
    const refused = subscribed.find((r) => !r.ok);
    if (refused && !refused.ok) return fail(`subscription refused by ${relayUrl}: ${refused.error}`);
    return ok(c);
  }

  #subscribe(filter: Parameters<RelayClient['subscribe']>[0][number]): Promise<Result<true, string>> {
    return new Promise((resolve) => {
      this.relay.subscribe([filter], {
        onEvent: (e) => this.#take(e),
        onEose: () => resolve(ok(true)),
        onClosed: (m) => resolve(err(m)),
      });
    });
  }

  #open(e: NostrEvent): Opened | undefined {
    let inner: Pick<NostrEvent, 'id' | 'created_at' | 'kind' | 'tags' | 'content' | 'pubkey'> = e;
    if (e.kind === KIND.GIFT_WRAP || e.kind === KIND.EPHEMERAL_GIFT_WRAP) {
      const u = unwrap(e, this.key.sk, this.#cache, nobleVerifier);
      if (!u.ok) return void this.problems.push(`cannot unwrap ${e.id}: ${u.error}`);
      inner = u.value.rumor;
    }
    if (inner.pubkey !== this.agent) return undefined;
    const text = decrypt(inner.content, this.#cache.get(this.key.sk, this.agent));
    if (!text.ok) return void this.problems.push(`cannot decrypt kind ${inner.kind}: ${text.error}`);
    try {
      return { id: inner.id, createdAt: inner.created_at, kind: inner.kind, tags: inner.tags, payload: JSON.parse(text.value) as unknown };
    } catch (e2) {
      return void this.problems.push(`kind ${inner.kind} is not JSON: ${errorMessage(e2)}`);
    }
  }

  #take(e: NostrEvent): void {
    const o = this.#open(e);
    const runId = o && rootOf(o.tags);
    const run = runId === undefined ? undefined : this.#runs.get(runId);
    if (!o || !run) return;
    switch (o.kind) {
      case KIND.AI_DELTA: {
        const d = DeltaSchema.safeParse(o.payload);
        if (!d.success) return void this.problems.push('malformed delta');
        run.early.set(d.data.seq ?? run.nextSeq, d.data.text);
        for (let t = run.early.get(run.nextSeq); t !== undefined; t = run.early.get(run.nextSeq)) {
          run.early.delete(run.nextSeq);
          run.handlers.onDelta?.(t, run.nextSeq++);
        }
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

  #encrypted(kind: number, payload: object, tags: string[][], wrapped: boolean): { event: NostrEvent; id: string } {
    const content = encrypt(JSON.stringify(payload), this.#cache.get(this.key.sk, this.agent));
    const template = { kind, created_at: nowSeconds(), tags, content };
    if (!wrapped) {
      const event = finalizeEvent(template, this.key.sk);
      return { event, id: event.id };
    }
    const rumor = makeRumor({ ...template, pubkey: this.key.pk });
    return { event: giftWrap(rumor, this.key.sk, this.agent, this.#cache), id: rumor.id };
  }

  /** Publishes a prompt; the handle's `done` settles with the run's terminal event (or a timeout). */
  async prompt(message: string, opts: PromptOptions = {}): Promise<Result<RunHandle, string>> {
    const tags = [['p', this.agent], ['encryption', 'nip44'], ...(opts.session ? [['s', opts.session]] : [])];
    const payload = { ver: NIPXX_VERSION, message, ...(opts.model ? { model: opts.model } : {}) };
    const { event, id } = this.#encrypted(KIND.AI_PROMPT, payload, tags, opts.wrap ?? false);
    let finish!: (o: RunOutcome) => void;
    const done = new Promise<RunOutcome>((resolve) => (finish = resolve));
    const timer = setTimeout(() => finish({ kind: 'timeout' }), opts.timeoutMs ?? 120_000);
    const run: ActiveRun = {
      handlers: opts,
      nextSeq: 0,
      early: new Map(),
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
      return this.relay.publish(this.#encrypted(KIND.AI_CANCEL, { ver: NIPXX_VERSION, reason: 'user_cancel' }, tagsC, opts.wrap ?? false).event);
    };
    return ok({ id, cancel, done });
  }

  close(): void {
    for (const run of [...this.#runs.values()]) run.finish({ kind: 'timeout' });
    this.relay.close();
  }
}
