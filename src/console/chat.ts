// Chat with one agent over NIP-XX: prompts (25802) in the session `sender:<me>`, the run's events
// (25800 status, 25801 deltas, 25804 tool calls, 25803/25805 terminal) read after NIP-42 AUTH,
// Stop as a 25806 cancel, and the conversation restored with the spec's session-recovery queries
// (the stored prompts of the session, then the terminal events of those prompts; a prompt with no
// terminal event yet is resumed live).

import type { z } from 'zod';
import type { NostrEvent } from '../shared/event.js';
import { KIND } from '../shared/kinds.js';
import { DeltaSchema, ErrorSchema, PromptSchema, ResponseSchema, StatusSchema, ToolCallSchema, NIPXX_VERSION } from '../shared/nip-xx.js';
import type { RelayClient, Subscription } from '../shared/relay-client.js';
import type { AnswerView, ConversationView } from './conversation-view.js';
import { query, type Relays } from './relay.js';
import type { Signer } from './signer.js';

export interface AgentTarget {
  pubkey: string;
  /** ws(s) URL of a relay the agent listens on. */
  relay: string;
}

export interface ChatUi {
  view: ConversationView;
  status(text: string): void;
  /** A run started (true) or ended (false): shows Stop, disables Send. */
  running(active: boolean): void;
}

const RUN_KINDS = [KIND.AI_STATUS, KIND.AI_DELTA, KIND.AI_RESPONSE, KIND.AI_TOOL_CALL, KIND.AI_ERROR];
const HISTORY_LIMIT = 50;
/** A run with no terminal event after this long is reported as unanswered. */
const RUN_TIMEOUT_MS = 180_000;

const newest = (a: NostrEvent, b: NostrEvent): NostrEvent => (b.created_at > a.created_at || (b.created_at === a.created_at && b.id > a.id) ? b : a);

export class Chat {
  readonly #signer: Signer;
  readonly #relays: Relays;
  readonly #ui: ChatUi;
  #agent: AgentTarget | undefined;
  #client: RelayClient | undefined;
  #run: { id: string; sub: Subscription; timer: ReturnType<typeof setTimeout> } | undefined;
  /** Bumped on every agent switch, so late answers of an old agent's queries are dropped. */
  #epoch = 0;
  /** created_at of the session's newest prompt: a new prompt is dated at least a second later, so
   *  the restored conversation keeps its order (created_at has a resolution of one second). */
  #lastPromptAt = 0;

  constructor(signer: Signer, relays: Relays, ui: ChatUi) {
    this.#signer = signer;
    this.#relays = relays;
    this.#ui = ui;
  }

  get session(): string {
    return `sender:${this.#signer.pubkey}`;
  }

  /** Switches to `agent` and shows the session's history. */
  async open(agent: AgentTarget): Promise<void> {
    const epoch = ++this.#epoch;
    this.#endRun();
    this.#agent = agent;
    this.#client = undefined;
    this.#lastPromptAt = 0;
    this.#ui.view.clear();
    this.#ui.status('connecting…');
    const client = await this.#relays.get(agent.relay);
    if (epoch !== this.#epoch) return;
    if (!client.ok) return this.#ui.status(client.error);
    this.#client = client.value;
    await this.#restore(client.value, agent.pubkey, epoch);
  }

  async #decrypt<S extends z.ZodType>(e: NostrEvent, peer: string, schema: S): Promise<z.infer<S> | string> {
    const text = await this.#signer.decrypt(peer, e.content);
    if (!text.ok) return text.error;
    let json: unknown;
    try {
      json = JSON.parse(text.value);
    } catch {
      return 'content is not JSON';
    }
    const parsed = schema.safeParse(json);
    return parsed.success ? parsed.data : `unexpected content: ${parsed.error.issues[0]?.message ?? 'invalid'}`;
  }

  async #restore(client: RelayClient, agent: string, epoch: number): Promise<void> {
    const me = this.#signer.pubkey;
    const prompts = await query(client, [{ kinds: [KIND.AI_PROMPT], authors: [me], '#p': [agent], '#s': [this.session], limit: HISTORY_LIMIT }]);
    if (epoch !== this.#epoch) return;
    if (!prompts.ok) return this.#ui.status(`history unavailable: ${prompts.error}`);
    const ordered = [...prompts.value].sort((a, b) => a.created_at - b.created_at || (a.id < b.id ? -1 : 1));
    this.#lastPromptAt = ordered[ordered.length - 1]?.created_at ?? 0;
    const terminals = new Map<string, NostrEvent>();
    if (ordered.length > 0) {
      const ends = await query(client, [{ kinds: [KIND.AI_RESPONSE, KIND.AI_ERROR], authors: [agent], '#p': [me], '#e': ordered.map((p) => p.id) }]);
      if (epoch !== this.#epoch) return;
      if (!ends.ok) return this.#ui.status(`history unavailable: ${ends.error}`);
      for (const e of ends.value) {
        const run = e.tags.find((t) => t[0] === 'e')?.[1];
        if (!run) continue;
        const had = terminals.get(run);
        terminals.set(run, had ? newest(had, e) : e);
      }
    }
    let pending: { id: string; answer: AnswerView } | undefined;
    for (const p of ordered) {
      const prompt = await this.#decrypt(p, agent, PromptSchema);
      if (epoch !== this.#epoch) return;
      this.#ui.view.user(typeof prompt === 'string' ? `(unreadable prompt: ${prompt})` : prompt.message);
      const answer = this.#ui.view.answer();
      const end = terminals.get(p.id);
      if (end) await this.#terminal(end, agent, answer);
      else pending = { id: p.id, answer };
    }
    if (epoch !== this.#epoch) return;
    this.#ui.status(ordered.length > 0 ? `${ordered.length} earlier message${ordered.length === 1 ? '' : 's'} restored` : 'new conversation');
    // The newest prompt without a terminal event may still be running: resume it live.
    if (pending && ordered[ordered.length - 1]?.id === pending.id) this.#follow(client, agent, pending.id, pending.answer);
  }

  /** Renders a terminal event; true when it was one. */
  async #terminal(e: NostrEvent, agent: string, answer: AnswerView): Promise<boolean> {
    if (e.kind === KIND.AI_RESPONSE) {
      const r = await this.#decrypt(e, agent, ResponseSchema);
      if (typeof r === 'string') answer.error('UNREADABLE', r);
      else answer.final(r.text);
      return true;
    }
    if (e.kind === KIND.AI_ERROR) {
      const r = await this.#decrypt(e, agent, ErrorSchema);
      if (typeof r === 'string') answer.error('UNREADABLE', r);
      else answer.error(r.code, r.message);
      return true;
    }
    return false;
  }

  /** Subscribes to the run's events and renders them until its terminal event. */
  #follow(client: RelayClient, agent: string, runId: string, answer: AnswerView): void {
    const me = this.#signer.pubkey;
    this.#ui.running(true);
    const timer = setTimeout(() => {
      answer.error('TIMEOUT', `no answer from the agent within ${RUN_TIMEOUT_MS / 1000} s`);
      this.#endRun();
    }, RUN_TIMEOUT_MS);
    const sub = client.subscribe([{ kinds: RUN_KINDS, authors: [agent], '#p': [me], '#e': [runId] }], {
      onEvent: (e) => void this.#onRunEvent(e, agent, runId, answer),
      onClosed: (message) => {
        if (this.#run?.id !== runId) return;
        answer.error('RELAY', message);
        this.#endRun();
      },
    });
    this.#run = { id: runId, sub, timer };
  }

  async #onRunEvent(e: NostrEvent, agent: string, runId: string, answer: AnswerView): Promise<void> {
    if (this.#run?.id !== runId) return;
    switch (e.kind) {
      case KIND.AI_STATUS: {
        const s = await this.#decrypt(e, agent, StatusSchema);
        if (typeof s !== 'string') this.#ui.status(`${s.state}${s.progress !== undefined ? ` ${s.progress}%` : ''}${s.info ? `: ${s.info}` : ''}`);
        return;
      }
      case KIND.AI_DELTA: {
        const d = await this.#decrypt(e, agent, DeltaSchema);
        if (typeof d !== 'string') answer.delta(d.seq ?? e.created_at, d.text);
        return;
      }
      case KIND.AI_TOOL_CALL: {
        const t = await this.#decrypt(e, agent, ToolCallSchema);
        if (typeof t !== 'string') answer.tool(t);
        return;
      }
      default:
        if (await this.#terminal(e, agent, answer)) {
          if (this.#run?.id !== runId) return;
          this.#ui.status(e.kind === KIND.AI_RESPONSE ? 'done' : 'ended with an error');
          this.#endRun();
        }
    }
  }

  #runId(): string | undefined {
    return this.#run?.id;
  }

  #endRun(): void {
    const run = this.#run;
    this.#run = undefined;
    if (!run) return;
    clearTimeout(run.timer);
    run.sub.close();
    this.#ui.running(false);
  }

  #tags(extra: string[][] = []): string[][] {
    return [['p', this.#agent?.pubkey ?? ''], ...extra, ['s', this.session], ['encryption', 'nip44']];
  }

  /** Sends a prompt and follows its run. */
  async send(message: string): Promise<void> {
    const agent = this.#agent;
    const client = this.#client;
    if (!agent || !client) return this.#ui.status('pick an agent first');
    if (this.#run) return this.#ui.status('a run is active: wait for it or press Stop');
    const content = await this.#signer.encrypt(agent.pubkey, JSON.stringify({ ver: NIPXX_VERSION, message }));
    const createdAt = Math.max(Math.floor(Date.now() / 1000), this.#lastPromptAt + 1);
    this.#lastPromptAt = createdAt;
    const prompt = await this.#signer.sign({ kind: KIND.AI_PROMPT, created_at: createdAt, tags: this.#tags(), content });
    this.#ui.view.user(message);
    const answer = this.#ui.view.answer();
    this.#follow(client, agent.pubkey, prompt.id, answer);
    this.#ui.status('sending…');
    const sent = await client.publish(prompt);
    if (!sent.ok && this.#runId() === prompt.id) {
      answer.error('NOT_SENT', sent.message);
      this.#ui.status('the prompt was not accepted by the relay');
      this.#endRun();
    }
  }

  /** Asks the agent to cancel the active run (25806); its CANCELLED error ends the run. */
  async stop(): Promise<void> {
    const agent = this.#agent;
    const client = this.#client;
    const run = this.#run;
    if (!agent || !client || !run) return;
    const content = await this.#signer.encrypt(agent.pubkey, JSON.stringify({ ver: NIPXX_VERSION, reason: 'user_cancel' }));
    const cancel = await this.#signer.sign({
      kind: KIND.AI_CANCEL,
      created_at: Math.floor(Date.now() / 1000),
      tags: this.#tags([['e', run.id, '', 'root']]),
      content,
    });
    this.#ui.status('stopping…');
    const sent = await client.publish(cancel);
    if (!sent.ok) this.#ui.status(`the cancel was not accepted: ${sent.message}`);
  }
}
