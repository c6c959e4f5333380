// The owner panel: the caller's agents through /api (create, edit name / provider / model / system
// prompt, delete; an agent naming no provider is listed as following the deployment's, and an edit
// sends the provider and model only when changed, so it never pins what the agent follows) and
// their live NIP-AO telemetry in the log **Telemetry** (turn timeline, acp frames, seq gaps and
// reported drops, via src/shared/ao-observer.ts), with a cancel_turn button per started turn and
// the problems of its tool set (turn_started `tool_problems`), why a tool call failed (tool_detail:
// the tool and its `detail`, for the owner alone), and each finished run's outcome,
// usage and `detail` whole (session_resolved: a provider's text, a limit's figures and what to
// change, why the answer was not delivered), which also refreshes the Usage table (usage.ts).
// Telemetry needs a local key: the observer decrypts frames with the owner's key.

import { Observer, type ObservedFrame, type SeqGap } from '../shared/ao-observer.js';
import { agentProviderLabel, api, AgentViewSchema, deletedStatus, type AgentView } from './api.js';
import { appendLogLine, button, byId, el, short } from './dom.js';
import { shardUrl, type Relays } from './relay.js';
import type { Signer } from './signer.js';
import { OwnerUsageSchema, RunUsageSchema, UsagePanel } from './usage.js';

/** A failed tool call's detail for its log line: the tool and why (for the owner alone), whole. */
const toolDetail = (payload: Record<string, unknown>): string =>
  typeof payload.name === 'string' && typeof payload.detail === 'string' ? ` · ${payload.name} · ${payload.detail}` : '';

/** A started turn's tool problems for its log line (none: nothing). */
const toolProblems = (payload: Record<string, unknown>): string => {
  const problems = payload.tool_problems;
  return Array.isArray(problems) && problems.length > 0 ? ` · tool problems: ${problems.map(String).join('; ')}` : '';
};

export class OwnerPanel {
  readonly #signer: Signer;
  readonly #relays: Relays;
  readonly #onCreated: (a: AgentView) => void;
  readonly #list = byId('agents');
  readonly #form = byId<HTMLFormElement>('agent-form');
  readonly #log = byId('telemetry');
  readonly #stats = byId('telemetry-stats');
  readonly #usage: UsagePanel;
  #agents: AgentView[] = [];
  /** The agent the form edits, as it was read (undefined: the form creates one). */
  #edited: AgentView | undefined;
  #observer: Observer | undefined;

  constructor(signer: Signer, relays: Relays, onCreated: (a: AgentView) => void) {
    this.#signer = signer;
    this.#relays = relays;
    this.#onCreated = onCreated;
    this.#usage = new UsagePanel(signer);
    this.#usage.names = (pubkey) => this.#name(pubkey);
    this.#form.addEventListener('submit', (ev) => {
      ev.preventDefault();
      void this.#save();
    });
    byId('agent-cancel-edit').addEventListener('click', () => this.#editing(undefined));
  }

  show(agents: AgentView[]): void {
    this.#agents = agents;
    this.#renderList();
    void this.#startTelemetry();
    void this.#usage.refresh();
  }

  #renderList(): void {
    this.#list.replaceChildren(
      ...this.#agents.map((a) => {
        const li = el('li');
        li.append(el('span', 'name', a.name), el('span', undefined, `${agentProviderLabel(a)}${a.default_model ? ` · ${a.default_model}` : ''}`));
        li.append(button(`Edit ${a.name}`, () => this.#editing(a), 'secondary'), button(`Delete ${a.name}`, () => void this.#delete(a), 'secondary'));
        li.append(el('code', undefined, a.npub ?? a.pubkey));
        return li;
      }),
    );
    if (this.#agents.length === 0) this.#list.append(el('li', undefined, 'No agents yet: create one below.'));
  }

  #editing(a: AgentView | undefined): void {
    this.#edited = a;
    byId<HTMLInputElement>('edit-pubkey').value = a?.pubkey ?? '';
    byId<HTMLInputElement>('agent-name').value = a?.name ?? '';
    byId<HTMLSelectElement>('agent-provider').value = a?.provider ?? '';
    byId<HTMLInputElement>('agent-model').value = a?.default_model ?? '';
    byId<HTMLTextAreaElement>('agent-system').value = a?.system_prompt ?? '';
    byId('agent-form-title').textContent = a ? `Edit ${a.name}` : 'New agent';
    byId('agent-save').textContent = a ? 'Save agent' : 'Create agent';
    byId('agent-cancel-edit').hidden = !a;
  }

  #status(text: string): void {
    this.#stats.textContent = text;
  }

  async #save(): Promise<void> {
    const editing = byId<HTMLInputElement>('edit-pubkey').value;
    const provider = byId<HTMLSelectElement>('agent-provider').value;
    const model = byId<HTMLInputElement>('agent-model').value.trim();
    const system = byId<HTMLTextAreaElement>('agent-system').value;
    const body: Record<string, unknown> = { name: byId<HTMLInputElement>('agent-name').value.trim() };
    // An edit sends the provider and the model only when changed: the form shows what the agent stores, and sending it back would pin what it follows.
    const before = editing ? this.#edited : undefined;
    // The API has no way to unset them: say so rather than keep them silently.
    if (before?.provider && !provider) return this.#status('saving failed: an agent that names a provider cannot be set back to the deployment default; choose a provider');
    if (before?.default_model && !model) return this.#status('saving failed: an agent’s model cannot be cleared; name a model');
    if (provider && provider !== before?.provider) body.provider = provider;
    if (model && model !== before?.default_model) Object.assign(body, { models: [model], default_model: model });
    if (system || editing) body.system_prompt = system;
    const r = editing ? await api(this.#signer, 'PATCH', `/api/agents/${editing}`, body) : await api(this.#signer, 'POST', '/api/agents', body);
    if (!r.ok) return this.#status(`${editing ? 'saving' : 'creating'} failed: ${r.message}`);
    const pubkey = editing || AgentViewSchema.pick({ pubkey: true }).parse(r.json).pubkey;
    const view = await api(this.#signer, 'GET', `/api/agents/${pubkey}`);
    const parsed = view.ok ? AgentViewSchema.safeParse(view.json) : undefined;
    if (!parsed?.success) return this.#status(`saved, but the agent could not be read back${view.ok ? '' : `: ${view.message}`}`);
    this.#agents = [...this.#agents.filter((a) => a.pubkey !== pubkey), parsed.data];
    if (!editing) this.#onCreated(parsed.data);
    this.#observer?.addAgent(pubkey);
    this.#editing(undefined);
    this.#renderList();
    this.#status(`${parsed.data.name} ${editing ? 'saved' : 'created'}`);
  }

  async #delete(a: AgentView): Promise<void> {
    if (!confirm(`Delete ${a.name}? Its key and history on this deployment are removed.`)) return;
    const r = await api(this.#signer, 'DELETE', `/api/agents/${a.pubkey}`);
    if (!r.ok) return this.#status(`deleting failed: ${r.message}`);
    this.#agents = this.#agents.filter((x) => x.pubkey !== a.pubkey);
    this.#observer?.removeAgent(a.pubkey);
    this.#renderList();
    this.#status(deletedStatus(a.name, r));
  }

  #line(text: string, cls = 'line'): HTMLElement {
    const line = el('div', cls, `${new Date().toLocaleTimeString()} ${text}`);
    appendLogLine(this.#log, line);
    return line;
  }

  #name(agent: string): string {
    return this.#agents.find((a) => a.pubkey === agent)?.name ?? short(agent);
  }

  #frame(f: ObservedFrame): void {
    const { kind, seq, turnId, channelId, payload } = f.frame;
    const detail = kind === 'acp_write' || kind === 'acp_read' ? ` ${JSON.stringify(payload).slice(0, 160)}` : kind === 'session_resolved' ? this.#resolved(payload) : kind === 'turn_started' ? toolProblems(payload) : kind === 'tool_detail' ? toolDetail(payload) : '';
    const line = this.#line(`${this.#name(f.agent)} #${seq} ${kind}${turnId ? ` turn ${turnId.slice(0, 8)}` : ''}${detail}`);
    if (kind === 'turn_started' && channelId) {
      const observer = this.#observer;
      line.append(
        ' ',
        button('cancel_turn', () => {
          if (!observer) return;
          void observer.cancelTurn(f.agent, channelId).then((r) => this.#line(r.ok ? `cancel_turn sent for turn ${channelId.slice(0, 8)}` : `cancel_turn failed: ${r.message}`));
        }, 'secondary'),
      );
    }
    this.#showStats();
  }

  /**
   * A finished run: its outcome (marked when the answer was not delivered), usage and detail (whole)
   * for the log line; the plan figures go to the Usage panel.
   */
  #resolved(payload: Record<string, unknown>): string {
    const owner = OwnerUsageSchema.safeParse(payload.owner_usage);
    this.#usage.runFinished(owner.success ? owner.data : undefined);
    const run = RunUsageSchema.safeParse(payload.usage);
    const outcome = `${typeof payload.outcome === 'string' ? ` ${payload.outcome}` : ''}${payload.delivered === false ? ' (not delivered)' : ''}`;
    const detail = typeof payload.detail === 'string' ? ` · ${payload.detail}` : '';
    return run.success
      ? `${outcome} · ${run.data.model} · ${run.data.input_tokens} in / ${run.data.output_tokens} out tokens · ${run.data.tool_calls} tool calls · ${(run.data.duration_ms / 1000).toFixed(1)} s${detail}`
      : `${outcome}${detail}`;
  }

  #gap(g: SeqGap): void {
    this.#line(`${this.#name(g.agent)} gap: ${g.missing} frame${g.missing === 1 ? '' : 's'} missing (expected #${g.expected}, got #${g.received})`, 'line gap');
    this.#showStats();
  }

  #showStats(): void {
    const s = this.#observer?.stats;
    if (s) this.#status(`frames ${s.accepted} · missing ${s.gaps} · reported drops ${s.reportedDrops} · rejected ${s.rejected}`);
  }

  async #startTelemetry(): Promise<void> {
    const sk = this.#signer.secretKey;
    if (!sk) return this.#status('Live telemetry needs a local key: a NIP-07 extension cannot open NIP-AO frames here.');
    const relay = await this.#relays.get(shardUrl(`/r/${this.#signer.pubkey}`));
    if (!relay.ok) return this.#status(`telemetry unavailable: ${relay.error}`);
    const client = relay.value;
    this.#observer = new Observer({
      ownerSecretKey: sk,
      agents: this.#agents.map((a) => a.pubkey),
      subscribe: (filters, opts) => client.subscribe(filters, opts),
      publish: (e) => client.publish(e),
      onFrame: (f) => this.#frame(f),
      onGap: (g) => this.#gap(g),
      onDropReport: (agent, dropped) => {
        this.#line(`${this.#name(agent)} reports ${dropped} dropped frame${dropped === 1 ? '' : 's'}`, 'line gap');
        this.#showStats();
      },
      onRejected: (reason) => this.#line(`rejected frame: ${reason}`, 'line gap'),
      onClosed: (message) => this.#line(`telemetry subscription closed: ${message}`, 'line gap'),
    });
    this.#observer.start();
    this.#status('watching your agents’ telemetry');
  }
}
