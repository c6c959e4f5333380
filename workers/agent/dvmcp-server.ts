// A hosted agent exposed as a DVMCP server (docs/AGENTS.md "The agent as a DVMCP server"): DVMCP
// requests to the agent (plain 25910/21316, or the rumors of gift wraps) go through the common
// DVMCP dispatcher (workers/common/dvmcp-server) to one backend whose only tool is `ask`. An ask
// is a run of the agent (run-driver.ts) in the conversation `dvmcp:<client>:<session>`, its text
// streamed as coalesced notifications/progress, its result the final text as MCP content (a
// failed run: `isError` content "<NIP-XX code>: <message>", the message as the asker is told it:
// the agent's owner gets the failure's `detail`, cut by ownerDetail, anyone else the generic
// message, told-to.ts, as for NIP-XX prompts), cut with a note and `_meta` by the
// dispatcher when it does not fit one answer in the request's form (as every DVMCP answer,
// workers/common/dvmcp-server/answer-fit.ts). The agent's sender policy and
// budget decide first (admission.ts), on a copy of the owner's account fetched again first when
// stale, as for a prompt (`ready`, owner-copy.ts forAdmission): refusals are JSON-RPC errors,
// answered once per sender per window like NIP-XX refusals; an ask that validates is then reserved
// at Accounts when the owner's plan sets runs_per_day (`reserve`: its refusal is the same -32029 as
// one at admission). Resources, prompts and completions: -32601 (the agent declares
// tools only). The bridge's rules hold too: a private server (public: false) is reached only by a
// request naming it in `s`; an error found before admission (not JSON, unknown method or server)
// counts as one of the client's requests of the minute, a rate-limited refusal is answered once per
// client until its retry time, and error answers in all are capped (ErrorAnswers, limits.ts); pings
// take one of the provider's a minute (Limiter); the progress of all asks together is held to the
// bridge's NotificationBudget; gift-wrapped answers expire (answerWrapSigner, dispatcher.ts). Every
// answer, also the error to a request that cannot be read (which may echo its method tag), is held
// to one DVMCP message in the request's form (answer-fit.ts: an error's message cut with the note).

import type { NostrEvent } from '../../src/shared/event.js';
import { ok, err, type Result } from '../../src/shared/errors.js';
import { KIND } from '../../src/shared/kinds.js';
import { parseMessage, RPC, rpcError, type Incoming, type InitializeInfo, type RpcError, type ServerProfile } from '../../src/shared/dvmcp.js';
import { wrapDvmcp, type Form } from '../../src/shared/dvmcp-wrap.js';
import type { ConversationKeyCache } from '../../src/shared/nip44.js';
import { NIPXX_VERSION, type Prompt } from '../../src/shared/nip-xx.js';
import type { EventTemplate } from '../../src/shared/relay-types.js';
import { errorAnswer } from '../common/dvmcp-server/answer-fit.js';
import type { DvmcpBackend, RequestContext } from '../common/dvmcp-server/backend.js';
import { answerWrapSigner, Dispatcher, type Reply, type RequestAdmission } from '../common/dvmcp-server/dispatcher.js';
import { ErrorAnswers, Limiter, releaseOnce } from '../common/dvmcp-server/limits.js';
import { NOTIFICATIONS_PER_MINUTE, NotificationBudget, SERVER_NOTIFICATIONS_PER_MINUTE } from '../common/dvmcp-server/notification-limits.js';
import { relayVerifier } from '../common/verifier.js';
import type { DropSummary } from '../common/drop-summary.js';
import { noPaymentGate } from '../common/dvmcp-server/payment-gate.js';
import type { AdmissionResult, Refusal } from './admission.js';
import type { DvmcpSettings, StoredAgent } from './config.js';
import { ASK_TOOL, AskArgsSchema, askTool, initializeInfo, serverProfile } from './dvmcp-profile.js';
import { checkPrompt } from './prompt-check.js';
import type { RunOutput } from './run-driver.js';
import type { EffectiveAgent } from './effective.js';
import type { RunSink, Terminal } from './runtime.js';
import type { SessionKey } from './sessions.js';
import { ownerDetail, toldTo } from './told-to.js';

/** At most one progress notification per this many milliseconds (the latest text wins). */
export const PROGRESS_INTERVAL_MS = 300;
/** A progress message carries at most the last this-many characters of the text so far. */
export const MAX_PROGRESS_CHARS = 1000;
/** JSON-RPC error of a request refused by the agent's sender policy (the message starts with the NIP-XX code). */
export const REFUSED_BY_POLICY = -32001;

const RUMOR_KINDS: ReadonlySet<number> = new Set([KIND.DVMCP_REQUEST, KIND.DVMCP_NOTIFICATION, KIND.PRIVATE_DM]);
/** Whether a gift wrap's rumor is a DVMCP message (to the agent's DVMCP server, not a NIP-XX prompt). */
export const isDvmcpRumor = (kind: number): boolean => RUMOR_KINDS.has(kind);

export interface AgentDvmcpDeps {
  config(): StoredAgent | undefined;
  effective(c: StoredAgent): EffectiveAgent;
  keys: ConversationKeyCache;
  secretKey(): Promise<Uint8Array>;
  sign(t: EventTemplate, sk: Uint8Array): Promise<NostrEvent>;
  /** Publishes on relay `url` (the answer goes where the request came from); a refusal is counted there, not thrown. */
  publish(url: string, e: NostrEvent, c: StoredAgent): Promise<void>;
  /** Where the agent counts what strangers send that is dropped (the dispatcher's drops before admission). */
  drops: Pick<DropSummary, 'drop'>;
  /**
   * The agent's admission of `sender` (admission.ts admitSender) with `reserved` DVMCP runs besides
   * its NIP-XX runs; for a run, `ask` is the JSON of the ask's arguments (what its first model call
   * will send besides the system prompt and the history).
   */
  admit(sender: string, what: 'run' | 'request', reserved: number, ask: string | undefined, reader: string): AdmissionResult;
  /** What every request waits for before its admission (the owner's copy fetched again when stale: owner-copy.ts forAdmission). */
  ready(): Promise<void>;
  /** Reserves ask `runId` of `sender` at Accounts when the owner's plan sets runs_per_day (agent-do.ts reserveRun): the refusal, if refused. */
  reserve(runId: string, sender: string): Promise<Result<void, Refusal>>;
  /** Completed turns of a conversation (for SESSION_LIMIT). */
  turns(k: SessionKey): number;
  /** One run of the agent (run-driver.ts runPrompt with the agent's deps). */
  run(out: RunOutput, runId: string, c: EffectiveAgent, prompt: Prompt, model: string, conversation: SessionKey, abort: AbortController): Promise<void>;
}

/** A refusal of the agent's policy as the JSON-RPC error the client gets. */
export function refusalError(r: Refusal): RpcError {
  if (r.code === 'RATE_LIMIT') return rpcError(RPC.RATE_LIMITED, `rate-limited: ${r.message}; retry in ${r.retry_after ?? 1} s`);
  return rpcError(REFUSED_BY_POLICY, `${r.code}: ${r.message}`);
}

/** The conversation of an ask: per client, per session argument. */
export const askConversation = (client: string, session: string | undefined): SessionKey => ({ sender: client, session: `dvmcp:${client}:${session ?? 'default'}` });

/** A run's MCP result: the final text, or `isError` content naming the NIP-XX error. */
export function toolResult(t: Terminal): { content: [{ type: 'text'; text: string }]; isError?: true } {
  if (t.type === 'response') return { content: [{ type: 'text', text: t.text }] };
  const retry = t.retry_after ? ` (retry in ${t.retry_after} s)` : '';
  return { content: [{ type: 'text', text: `${t.code}: ${t.message}${retry}` }], isError: true };
}

/**
 * The run's deltas and status as progress: the text so far (its tail) or a short status, at most
 * one notification per PROGRESS_INTERVAL_MS (a pending one is sent when the interval ends), the
 * progress value counting the notifications (MCP wants it increasing).
 */
class ProgressRelay {
  private text = '';
  private sent = 0;
  private lastAt = 0;
  private pending: string | undefined;
  private timer: ReturnType<typeof setTimeout> | undefined;

  constructor(private readonly ctx: RequestContext) {}

  readonly sink: RunSink = {
    status: async (state, _progress, info) => {
      if (state === 'thinking' && this.text === '') this.post('thinking');
      else if (state === 'tool_use') this.post(`using tools${info ? `: ${info}` : ''}`);
    },
    delta: async (text) => {
      this.text += text;
      this.post(this.text.length > MAX_PROGRESS_CHARS ? `…${this.text.slice(-MAX_PROGRESS_CHARS)}` : this.text);
    },
    toolCall: async () => undefined,
  };

  private post(message: string): void {
    this.pending = message;
    const wait = this.lastAt + PROGRESS_INTERVAL_MS - Date.now();
    if (wait <= 0) this.flush();
    else this.timer ??= setTimeout(() => this.flush(), wait);
  }

  private flush(): void {
    this.timer = undefined;
    if (this.pending === undefined || this.ctx.signal.aborted) return;
    this.lastAt = Date.now();
    this.ctx.onProgress({ progress: ++this.sent, message: this.pending });
    this.pending = undefined;
  }

  /** The run ended: nothing more is sent (the answer follows). */
  stop(): void {
    clearTimeout(this.timer);
    this.timer = undefined;
    this.pending = undefined;
  }
}

/** The agent's one DVMCP backend: initialize, tools/list and tools/call ask. */
class AgentBackend implements DvmcpBackend {
  readonly prices = {};
  readonly profile: ServerProfile;
  /** A private server: only requests naming it in `s` reach it. */
  readonly unlisted: boolean;

  constructor(
    private readonly deps: AgentDvmcpDeps,
    private readonly agent: StoredAgent,
    settings: DvmcpSettings,
    private readonly runs: Map<string, AbortController>,
  ) {
    this.profile = serverProfile(agent, settings);
    this.unlisted = !settings.public;
  }

  async initialize(): Promise<Result<InitializeInfo, RpcError>> {
    return ok(initializeInfo(this.agent));
  }

  async request(method: string, params: Record<string, unknown>, ctx: RequestContext): Promise<Result<Record<string, unknown>, RpcError>> {
    if (method === 'tools/list') return ok({ tools: [askTool(this.agent)] });
    if (method !== 'tools/call') return err(rpcError(RPC.METHOD_NOT_FOUND, `Method not found: ${method} (this agent offers the tool "${ASK_TOOL}" only)`));
    if (params.name !== ASK_TOOL) return err(rpcError(RPC.INVALID_PARAMS, `Unknown tool: ${String(params.name)} (this agent offers "${ASK_TOOL}")`));
    const args = AskArgsSchema.safeParse(params.arguments ?? {});
    if (!args.success) {
      const issue = args.error.issues[0];
      return err(rpcError(RPC.INVALID_PARAMS, `Invalid arguments for ${ASK_TOOL}: ${issue?.path.join('.') || 'arguments'}: ${issue?.message ?? 'invalid'}`));
    }
    const reader = readerOf(ctx.requester.client, ctx.form);
    const t = await this.ask(args.data.message, args.data.session, ctx);
    // Refused by Accounts (the owner's runs_per_day): the JSON-RPC error of a refusal at admission, as its reader is told it.
    if (!t.ok) return err(refusalError(toldTo(t.error, reader, this.agent.owner)));
    // The owner is told the failure's detail in an encrypted answer, cut as in its 25805 (told-to.ts); anyone else the message.
    const v = t.value;
    return ok(toolResult(v.type === 'error' && v.detail !== undefined ? toldTo({ ...v, detail: ownerDetail(v.detail) }, reader, this.agent.owner) : v));
  }

  /** One run of the agent for an ask, reserved first (`reserve`); its terminal outcome, or Accounts' refusal of the run. */
  private async ask(message: string, session: string | undefined, ctx: RequestContext): Promise<Result<Terminal, Refusal>> {
    const c = this.deps.effective(this.agent);
    const conversation = askConversation(ctx.requester.client, session);
    const checked = checkPrompt(ok(JSON.stringify({ ver: NIPXX_VERSION, message })), c, () => this.deps.turns(conversation));
    if (!checked.ok) return ok({ type: 'error', ...checked.error });
    const runId = ctx.requester.requestId;
    const abort = new AbortController();
    const onCancel = (): void => abort.abort(ctx.signal.reason);
    ctx.signal.addEventListener('abort', onCancel);
    const progress = new ProgressRelay(ctx);
    let terminal: Terminal = { type: 'error', code: 'INTERNAL_ERROR', message: 'unexpected agent failure; please retry', retry_after: 5 };
    // Registered before the reservation's wait: a cancel, the owner's revocation or the agent's removal meanwhile ends the run at once.
    this.runs.set(runId, abort);
    try {
      const reserved = await this.deps.reserve(runId, ctx.requester.client);
      if (!reserved.ok) return reserved;
      await this.deps.run({ sink: progress.sink, finish: async (t) => void (terminal = t) }, runId, c, checked.value.prompt, checked.value.model, conversation, abort);
    } finally {
      progress.stop();
      this.runs.delete(runId);
      ctx.signal.removeEventListener('abort', onCancel);
    }
    return ok(terminal);
  }
}

/**
 * Who reads the answer to `client`'s request in `form`: the client when it is encrypted to it; a
 * plain answer is public on the relay (kind 26910 is readable by anyone), so nobody in particular
 * (`''`): the owner's detail (told-to.ts) goes only into an encrypted answer.
 */
const readerOf = (client: string, form: Form | undefined): string => (form === undefined || form === 'plain' ? '' : client);

export class AgentDvmcp {
  private readonly dispatcher: Dispatcher;
  /** Requests of other methods than tools/call, and error answers, per client (the bridge's limits). */
  private readonly limiter = new Limiter();
  /** Which error answers and refusals go out (the bridge's rule). */
  private readonly errors = new ErrorAnswers();
  /** Progress notifications of all asks together per minute, each fitting one event (the bridge's budget; the agent is one server). */
  private readonly notifyBudget = new NotificationBudget(NOTIFICATIONS_PER_MINUTE, SERVER_NOTIFICATIONS_PER_MINUTE, (line) => console.warn(`agent dvmcp: ${line}`));
  /** Asks admitted and not yet finished (they count as runs for max_concurrent_runs). */
  private reserved = 0;
  /** Asks running, by request id: NIP-AO control frames, the agent's removal and its owner's revocation abort them. */
  private readonly runs = new Map<string, AbortController>();
  /** Called when the last admitted ask has been answered. */
  private idle: Array<() => void> = [];

  constructor(private readonly deps: AgentDvmcpDeps) {
    const admission: RequestAdmission = { admit: (client, ids, method, params, form) => this.admit(client, ids, method, params, form) };
    this.dispatcher = new Dispatcher({
      backends: () => this.backends(),
      limiter: admission,
      gate: () => noPaymentGate,
      log: (line) => console.log(`agent dvmcp: ${line}`),
      drops: deps.drops,
      errorAnswer: (client) => this.errorAnswer(client),
      notifications: this.notifyBudget,
    });
  }

  /** Asks in progress. */
  get inProgress(): number {
    return this.reserved;
  }

  /** Aborts the ask with request id `runId` (a NIP-AO control frame from the owner); whether there was one. */
  abortRun(runId: string): boolean {
    const abort = this.runs.get(runId);
    abort?.abort(new Error('cancelled by the owner'));
    return abort !== undefined;
  }

  /** Resolves once every admitted ask has been answered (at once when there are none). */
  whenIdle(): Promise<void> {
    return this.reserved === 0 ? Promise.resolve() : new Promise((r) => this.idle.push(r));
  }

  /** Aborts every ask (the agent is removed, its DVMCP server changed, or its owner is no longer allowed: a RunStopped `reason` is the ask's answer). */
  abortAll(reason: Error): void {
    for (const abort of this.runs.values()) abort.abort(reason);
  }

  /** A plain 25910/21316 to the agent from `relay` (id and signature already checked, claimed once, fresh: agent-do.ts keptIfFresh). */
  async onEvent(e: NostrEvent, relay: string): Promise<void> {
    return this.receive(e, 'plain', relay);
  }

  /** The DVMCP rumor of a 1059 to the agent (naming the agent alone, claimed once, fresh: agent-do.ts onEvent, keptIfFresh). */
  async onRumor(r: Incoming & { created_at: number }, relay: string): Promise<void> {
    return this.receive(r, r.kind === KIND.PRIVATE_DM ? 'wrapped-dm' : 'wrapped', relay);
  }

  private async receive(m: Incoming, form: Form, relay: string): Promise<void> {
    const c = this.deps.config();
    if (!c?.dvmcp?.enabled) return;
    const reply = this.replyFor(relay, m.pubkey, form, c);
    const parsed = parseMessage(m);
    if (!parsed.ok) {
      // A bad notification is dropped; a bad request gets the error, as errorAnswer allows.
      if (m.kind === KIND.DVMCP_NOTIFICATION) return;
      const allowed = this.errorAnswer(m.pubkey);
      const error = allowed.ok ? parsed.error : allowed.error;
      if (error) await reply.send(errorAnswer({ requestId: m.id, client: m.pubkey }, error, form));
      return;
    }
    // A request's admission decides on a copy of the owner's account no older than a prompt's.
    if (parsed.value.type === 'request') await this.deps.ready();
    await this.dispatcher.handle(parsed.value, reply);
  }

  private replyFor(url: string, client: string, form: Form, c: StoredAgent): Reply {
    const send = async (t: EventTemplate): Promise<void> => {
      const sk = await this.deps.secretKey();
      const e = form === 'plain' ? await this.deps.sign(t, sk) : wrapDvmcp(t, sk, c.pubkey, client, this.deps.keys, form, answerWrapSigner(await relayVerifier()));
      await this.deps.publish(url, e, c);
    };
    return { send, form };
  }

  /** The one backend while the server is enabled, with the agent's current settings. */
  private backends(): ReadonlyMap<string, DvmcpBackend> {
    const c = this.deps.config();
    if (!c?.dvmcp?.enabled) return new Map();
    return new Map([[c.dvmcp.server_id, new AgentBackend(this.deps, c, c.dvmcp, this.runs)]]);
  }

  /**
   * Whether an error found before admission (a bad request, an unknown method or server) is answered
   * to `client`: it counts as one of the client's requests of the minute (and is refused as one past
   * them), and within ErrorAnswers' cap for all clients.
   */
  private errorAnswer(client: string): { ok: true } | { ok: false; error?: RpcError } {
    const admitted = this.limiter.admit(client, []);
    if (!admitted.ok) return this.errors.refusal(client, admitted.error, admitted.retryMs);
    admitted.release();
    return this.errors.allow() ? { ok: true } : { ok: false };
  }

  /**
   * The agent's policy first (owner, block and allow lists; for tools/call also the prompt windows,
   * concurrency and the token budget), then, for the other methods, the per-client request limits.
   */
  private admit(client: string, serverIds: readonly string[], method: string, params?: Readonly<Record<string, unknown>>, form?: Form): ReturnType<RequestAdmission['admit']> {
    const run = method === 'tools/call';
    const verdict = this.deps.admit(client, run ? 'run' : 'request', this.reserved, run ? JSON.stringify(params?.arguments ?? {}) : undefined, readerOf(client, form));
    if (verdict.verdict === 'drop') return { ok: false };
    if (verdict.verdict === 'answer') return { ok: false, error: refusalError(verdict.refusal) };
    if (!run) {
      const admitted = this.limiter.admit(client, serverIds, method);
      return admitted.ok ? admitted : this.errors.refusal(client, admitted.error, admitted.retryMs);
    }
    this.reserved++;
    return {
      ok: true,
      release: releaseOnce(() => {
        if (--this.reserved > 0) return;
        for (const r of this.idle.splice(0)) r();
      }),
    };
  }
}
