// DVMCP requests → backends → answers (../shared/specs/dvmcp-spec-2025-03-26.txt), over the
// DvmcpBackend interface (backend.ts), whatever the transport (plain or gift-wrapped, which relay):
// the caller gives a Reply that publishes in the form and on the relay the request came from.
//
//   ping                       answered {} here (no upstream; admitted as method 'ping': the client's
//                              requests of the minute and the provider's pings, limits.ts)
//   unknown method             -32601 "Method not found: <method>"
//   s names no server          -32602 "Unknown server id <s>"
//   no s                       initialize: every server answers (initializeResponse with its d and
//                              support_encryption), from what it declared to the provider's own
//                              session (`capabilities`) where it has one: a request that reaches
//                              every server opens no session for its client; other methods: the only server, or -32602
//                              naming the choice when there are several. Unlisted (private)
//                              servers are left out: only a request naming one reaches it, and
//                              with only those, the answer is the one for no servers at all
//   errors found before admission (unknown method, no such server): answered as the
//                              errorAnswer hook allows (the bridge's: ErrorAnswers, limits.ts)
//   encrypted request to a server with encryption off: not answered, counted in the caller's
//                              DropSummary (DROPS.encryptionOff: one log line a minute, not one each)
//   limits (limits.ts)         -32029 "rate-limited: … retry in N s"; another RequestAdmission
//                              (a hosted agent's policy) may answer its own error, or drop the
//                              request unanswered (a sender already told in its window)
//   priced capability          tools/call by name, prompts/get by name, resources/read by uri, by
//                              the listed resource's name or by the template the uri expands
//                              (the backend's resourceIndex): the PaymentGate decides (its error
//                              is the answer); an index that cannot be had: -32603 "the price of
//                              <uri> on <id> could not be determined (its resource list failed);
//                              try again later", not served (why stays with the owner: the
//                              backend's own record, e.g. the bridge server's health). On a server
//                              with prices a read is priced and sent upstream in one spelling of
//                              its uri (canonicalUri, src/shared/dvmcp.ts: the one upstream reads);
//                              a uri that does not parse is -32602 "invalid params: the
//                              resources/read uri "<uri>" is not an absolute URI", one neither
//                              listed nor expanded from a template -32602 "invalid params: <uri> is
//                              not a resource of <id> (…)": neither could be priced. Before a
//                              call waits for a payment the gate asks the admission whether it
//                              may (`awaitingPayment`: the bridge's quota of waiting calls)
//                              The gate is told how the call ended: its answer published (the
//                              Reply's send resolved), or cut off and why (cancelled, the server
//                              aborted, its answer not published: a NotPublished); a paid call cut
//                              off is given up and logged for a refund (payment-gate.ts CallEnd)
//   progress                   upstream progress → 21316 notifications/progress with e = request
//                              id, at most one per PROGRESS_INTERVAL_MS (the latest kept, one held
//                              when the answer comes dropped), admitted by the `notifications` hook
//                              (the server's and the bridge's budgets; one that does not fit one
//                              event is dropped and logged, NotificationBudget);
//                              a keep-alive progress when upstream is silent for 10 s (values
//                              always increase, as MCP requires: a keep-alive adds PROGRESS_STEP)
//   cancel                     notifications/cancel (or notifications/cancelled) with e = request
//                              id, from the requester only → the upstream request is aborted
//                              (MCP notifications/cancelled) and nothing is answered
//   too large                  for one answer in the request's form (answer-fit.ts): a result's
//                              text cut to fit, with a note and _meta; a result not text-shaped
//                              -32603 "result too large: …"; an initialize result's instructions
//                              cut likewise, or -32603 "initialize result too large: …"; an error's
//                              message and data cut, with the note (every error answered here)
//   too deep                   an initialize result nesting deeper than MAX_JSON_DEPTH (64,
//                              json-depth.ts), which many JSON readers cannot read: -32603
//                              "server <id>'s initialize result nests deeper than 64 levels"
//                              (a backend checks its other results: the bridge's upstream.ts)
// Client notifications other than cancel (notifications/initialized…) are accepted and ignored.

import { err, errorMessage, ok, type Result } from '../../../src/shared/errors.js';
import { MAX_JSON_DEPTH, nestsWithin } from '../../../src/shared/json-depth.js';
import type { EventTemplate } from '../../../src/shared/relay-types.js';
import {
  initializeResponse,
  isRequestMethod,
  notificationTemplate,
  priceOf,
  readPrice,
  responseTemplate,
  RPC,
  rpcError,
  type DvmcpMessage,
  type Price,
  type Requester,
  type RpcError,
} from '../../../src/shared/dvmcp.js';
import { DVMCP_WRAP_TTL_SECONDS, expiringWraps, type Form } from '../../../src/shared/dvmcp-wrap.js';
import { backendSigner, type EventSigner } from '../../../src/shared/event.js';
import { answerTemplate, errorAnswer, initializeTemplate } from './answer-fit.js';
import type { DvmcpBackend, Progress } from './backend.js';
import { Coalescer, NotificationBudget, PROGRESS_INTERVAL_MS } from './notification-limits.js';
import { DROPS, type DropSummary } from '../drop-summary.js';
import { freeCall, type AdmittedCall, type CallEnd, type PaymentContext, type PaymentGate, type PricedCapability } from './payment-gate.js';

/**
 * The signer of the gift wraps a DVMCP server sends (an answer, a notification, a payment request:
 * a stored 1059): each carries a NIP-40 expiration DVMCP_WRAP_TTL_SECONDS (src/shared/dvmcp-wrap.ts,
 * the /mcp gateway's too) after it is sent. A request is served only while fresh (STALE_SECONDS,
 * limits.ts) and runs at most UPSTREAM_MAX_TOTAL_MS (5 minutes); its client reads the answer as it
 * comes (DvmcpClient waits 120 s in all by default).
 */
export const answerWrapSigner = (backend: Parameters<typeof backendSigner>[0]): EventSigner => expiringWraps(backendSigner(backend), DVMCP_WRAP_TTL_SECONDS);

/**
 * What a Reply's send rejects with when the relay refused the event: the Reply's owner counted it
 * already (its DropSummary), so it is not logged again here.
 */
export class NotPublished extends Error {}

/** Where the answers to one request go. */
export interface Reply {
  /**
   * Publishes a response or notification to the requester (form and relay of the request);
   * resolves once it was published, rejects when it was not (a relay's refusal: NotPublished).
   */
  send(t: EventTemplate): Promise<void>;
  /** How the request came (plain or gift-wrapped): the answers go the same way. */
  form: Form;
}

/** Who may make a request reach a backend (the bridge's Limiter, or a hosted agent's policy). */
export interface RequestAdmission {
  /**
   * Admits one request of `client` for `method` (with `params`, in `form`: a plain request's answer
   * is readable by anyone on the relay) to `serverIds`, holding what it takes until `release`; or refuses it: with `error`, that is the answer; without, it is dropped
   * unanswered. `upstream` is called when the request goes to its servers (after any payment): a
   * priced request never paid, or cancelled before, does not. `awaitingPayment` is the gate's
   * question before the request waits for a payment (PaymentContext.awaitingPayment).
   */
  admit(client: string, serverIds: readonly string[], method: string, params?: Readonly<Record<string, unknown>>, form?: Form): Admitted | { ok: false; error?: RpcError };
}

/** An admitted request (RequestAdmission.admit). */
export interface Admitted {
  ok: true;
  release: () => void;
  upstream?: () => void;
  awaitingPayment?: PaymentContext['awaitingPayment'];
}

export interface DispatcherDeps {
  /** The provider's servers by id, in a stable order. */
  backends(): ReadonlyMap<string, DvmcpBackend>;
  limiter: RequestAdmission;
  gate(): PaymentGate;
  /** Operational log lines (never decrypted content), without a prefix. */
  log(line: string): void;
  /** Where what strangers send that is dropped before admission is counted (logged once a minute, not once each). */
  drops: Pick<DropSummary, 'drop'>;
  /**
   * Whether an error found before admission (unknown method, no such server) is answered to
   * `client`: ok, it is; refused, `error` is the answer instead, or without one nothing is. Without
   * this hook every such error is answered.
   */
  errorAnswer?(client: string): { ok: true } | { ok: false; error?: RpcError };
  /**
   * Whether notification `t` (progress) of server `serverId` goes out now in `form`, counted if so
   * (the bridge's NotificationBudget, notification-limits.ts). Without this hook every one within
   * the progress interval that fits one event is sent (one that does not is dropped, logged).
   */
  notifications?: Pick<NotificationBudget, 'admit'>;
}

/** A progress notification is sent at least this often while a request runs. */
export const KEEPALIVE_MS = 10_000;
/** How far a keep-alive (or a non-increasing upstream value) moves the progress value on. */
export const PROGRESS_STEP = 0.001;

/**
 * MCP: the progress value must increase with each notification. A keep-alive (or an upstream value
 * that does not increase) is sent a small step above the last value sent, without a total it would pass.
 */
export function increasingProgress(p: Progress, lastSent: number | undefined): Progress {
  const value = lastSent === undefined || p.progress > lastSent ? p.progress : lastSent + PROGRESS_STEP;
  const { total, ...rest } = p;
  return total !== undefined && value <= total ? { ...rest, progress: value, total } : { ...rest, progress: value };
}

const CANCEL_METHODS = new Set(['notifications/cancel', 'notifications/cancelled']);

/** The priced capability a request calls, if it calls one. */
function capabilityOf(method: string, params: Record<string, unknown>): string | undefined {
  const key = method === 'resources/read' ? params.uri : method === 'tools/call' || method === 'prompts/get' ? params.name : undefined;
  return typeof key === 'string' ? key : undefined;
}

export class Dispatcher {
  /** Requests in progress by request id: who asked and how to stop it. */
  private readonly active = new Map<string, { client: string; servers: string[]; abort: AbortController }>();
  private readonly notifications: Pick<NotificationBudget, 'admit'>;

  constructor(private readonly deps: DispatcherDeps) {
    this.notifications = deps.notifications ?? new NotificationBudget(Infinity, Infinity, deps.log);
  }

  /** Requests in progress. */
  get inProgress(): number {
    return this.active.size;
  }

  /** Aborts the requests in progress to server `id` (removed or changed). */
  abortServer(id: string, reason: string): void {
    for (const { servers, abort } of this.active.values()) if (servers.includes(id)) abort.abort(new Error(reason));
  }

  async handle(msg: DvmcpMessage, reply: Reply): Promise<void> {
    if (msg.type === 'notification') return this.onNotification(msg);
    const to: Requester = { requestId: msg.requestId, client: msg.client };
    const fail = (e: RpcError): Promise<void> => reply.send(errorAnswer(to, e, reply.form));
    const refuse = (e: RpcError): Promise<void> | undefined => {
      const allowed = this.deps.errorAnswer?.(msg.client) ?? { ok: true };
      if (allowed.ok) return fail(e);
      return allowed.error ? fail(allowed.error) : undefined;
    };
    if (!isRequestMethod(msg.method)) return refuse(rpcError(RPC.METHOD_NOT_FOUND, `Method not found: ${msg.method}`));
    if (msg.method === 'ping') {
      const admitted = this.deps.limiter.admit(msg.client, [], msg.method);
      if (!admitted.ok) return admitted.error ? fail(admitted.error) : undefined;
      admitted.release();
      return reply.send(responseTemplate(to, {}));
    }
    const routed = this.route(msg);
    if (!routed.ok) return refuse(routed.error);
    const targets = routed.targets.filter((b) => b.profile.encryption || reply.form === 'plain');
    if (targets.length < routed.targets.length) {
      const off = routed.targets.filter((b) => !targets.includes(b)).map((b) => b.profile.id);
      this.deps.drops.drop(DROPS.encryptionOff, `${off.length === 1 ? 'server' : 'servers'} ${off.join(', ')}`);
    }
    if (targets.length === 0) return;
    const admitted = this.deps.limiter.admit(msg.client, targets.map((b) => b.profile.id), msg.method, msg.params, reply.form);
    if (!admitted.ok) return admitted.error ? fail(admitted.error) : undefined;
    const abort = new AbortController();
    this.active.set(msg.requestId, { client: msg.client, servers: targets.map((b) => b.profile.id), abort });
    try {
      if (msg.method === 'initialize') {
        admitted.upstream?.();
        const shared = msg.serverId === undefined;
        await Promise.all(targets.map((b) => this.initialize(b, to, reply, abort.signal, shared)));
      } else {
        await this.serve(targets[0]!, msg.method, msg.params, to, reply, abort, admitted);
      }
    } finally {
      this.active.delete(msg.requestId);
      admitted.release();
    }
  }

  private route(msg: Extract<DvmcpMessage, { type: 'request' }>): { ok: true; targets: DvmcpBackend[] } | { ok: false; error: RpcError } {
    const backends = this.deps.backends();
    if (msg.serverId !== undefined) {
      const b = backends.get(msg.serverId);
      return b ? { ok: true, targets: [b] } : { ok: false, error: rpcError(RPC.INVALID_PARAMS, `Unknown server id ${msg.serverId}`) };
    }
    const listed = [...backends.values()].filter((b) => !b.unlisted);
    if (listed.length === 0) return { ok: false, error: rpcError(RPC.INVALID_PARAMS, 'this provider runs no servers') };
    if (msg.method === 'initialize' || listed.length === 1) return { ok: true, targets: msg.method === 'initialize' ? listed : [listed[0]!] };
    return { ok: false, error: rpcError(RPC.INVALID_PARAMS, `this provider runs ${listed.length} servers (${listed.map((b) => b.profile.id).join(', ')}): name one with an s tag`) };
  }

  /** Answers an initialize for server `b`: from its own session's capabilities when `shared` (no s) and it has them, else the client's session. */
  private async initialize(b: DvmcpBackend, to: Requester, reply: Reply, signal: AbortSignal, shared: boolean): Promise<void> {
    const info = shared && b.capabilities ? await b.capabilities() : await b.initialize(to.client, signal);
    const tooDeep = info.ok && !nestsWithin(info.value);
    const answer = tooDeep
      ? err(rpcError(RPC.INTERNAL_ERROR, `server ${b.profile.id}'s initialize result nests deeper than ${MAX_JSON_DEPTH} levels`))
      : info.ok
        ? initializeTemplate(initializeResponse(to, b.profile, info.value), reply.form)
        : info;
    if (answer.ok) return reply.send(answer.value);
    // With several servers answering, the error names its server as the initialize answer does.
    return reply.send(errorAnswer(to, answer.error, reply.form, [['d', b.profile.id]]));
  }

  private async serve(b: DvmcpBackend, method: string, asked: Record<string, unknown>, to: Requester, reply: Reply, abort: AbortController, admitted: Admitted): Promise<void> {
    const serverId = b.profile.id;
    const priced = await this.priceOf(b, method, asked);
    if (!priced.ok) return reply.send(errorAnswer(to, priced.error, reply.form));
    const { params, price } = priced.value;
    let call: AdmittedCall = freeCall;
    if (price !== undefined) {
      const capability: PricedCapability = { serverId, method, name: price.name };
      const ctx: PaymentContext = { notify: (t) => reply.send(t), signal: abort.signal, ...(admitted.awaitingPayment ? { awaitingPayment: admitted.awaitingPayment } : {}) };
      const paid = await this.deps.gate().requirePayment(to, capability, price.price, ctx);
      if (!paid.ok) return abort.signal.aborted ? undefined : reply.send(errorAnswer(to, paid.error, reply.form));
      call = paid.value;
    }
    let end: CallEnd = { answered: false, why: 'it failed' };
    try {
      end = await this.run(b, method, params, to, reply, abort, () => admitted.upstream?.());
    } catch (e) {
      end = { answered: false, why: e instanceof NotPublished ? `its answer was not published: ${e.message}` : `it failed (${errorMessage(e)})` };
      throw e;
    } finally {
      call.done(end);
    }
  }

  /** Runs an admitted (and paid) call upstream and publishes its answer: answered, or why not (cancelled); throws when its answer was not published. */
  private async run(b: DvmcpBackend, method: string, params: Record<string, unknown>, to: Requester, reply: Reply, abort: AbortController, upstream: () => void): Promise<CallEnd> {
    const serverId = b.profile.id;
    // Progress notifications are published in order, and before the answer: at most one per
    // PROGRESS_INTERVAL_MS (the latest kept; one still held when the answer comes is dropped), each
    // as `notifications` admits it (it fits one event, within the budgets).
    let chain = Promise.resolve();
    let last: Progress = { progress: 0 };
    let lastHeard = Date.now();
    let sentValue: number | undefined;
    const publish = (p: Progress): void => {
      const sent = increasingProgress(p, sentValue);
      const t = notificationTemplate(to.client, 'notifications/progress', { id: to.requestId, progressToken: to.requestId, ...sent }, { requestId: to.requestId, serverId });
      if (!this.notifications.admit(serverId, t, reply.form)) return;
      sentValue = sent.progress;
      chain = chain.then(() => reply.send(t)).catch((e: unknown) => {
        if (!(e instanceof NotPublished)) this.deps.log(`progress for ${to.requestId} not delivered: ${String(e)}`);
      });
    };
    const throttle = new Coalescer<string, Progress>(PROGRESS_INTERVAL_MS, (_, p) => publish(p), 1);
    const progress = (p: Progress): void => {
      last = p;
      lastHeard = Date.now();
      throttle.offer(to.requestId, p);
    };
    const keepAlive = setInterval(() => {
      if (Date.now() - lastHeard >= KEEPALIVE_MS) progress({ ...last, message: `waiting for ${serverId}` });
    }, KEEPALIVE_MS / 5);
    let result: Awaited<ReturnType<DvmcpBackend['request']>>;
    upstream();
    try {
      result = await b.request(method, params, { requester: to, form: reply.form, signal: abort.signal, onProgress: progress });
    } finally {
      clearInterval(keepAlive);
      throttle.cancel(to.requestId);
    }
    await chain;
    if (abort.signal.aborted) {
      this.deps.log(`${method} ${to.requestId} cancelled, not answered`);
      return { answered: false, why: errorMessage(abort.signal.reason) };
    }
    await reply.send(result.ok ? answerTemplate(to, result.value, reply.form) : errorAnswer(to, result.error, reply.form));
    return { answered: true };
  }

  /**
   * The params to send upstream, and the capability the request calls with its price when it has
   * one: by name (tools/call, prompts/get) or, for resources/read on a server with prices, by
   * readPrice over the backend's resource index, the uri sent in the spelling priced (canonicalUri).
   * A read the index cannot price (upstream does not list) is not served: it might be priced; nor is
   * one of a uri that does not parse, or that the server neither lists nor expands from a template
   * (-32602).
   */
  private async priceOf(b: DvmcpBackend, method: string, params: Record<string, unknown>): Promise<Result<{ params: Record<string, unknown>; price?: { name: string; price: Price } }, RpcError>> {
    const name = capabilityOf(method, params);
    if (name === undefined) {
      // On a server with prices, what names the capability must be a string: another value would reach upstream unpriced (one that coerces it would serve it).
      const field = method === 'resources/read' ? 'uri' : method === 'tools/call' || method === 'prompts/get' ? 'name' : undefined;
      if (field !== undefined && Object.keys(b.prices).length > 0) return err(rpcError(RPC.INVALID_PARAMS, `invalid params: the ${method} ${field} must be a string`));
      return ok({ params });
    }
    if (method !== 'resources/read' || Object.keys(b.prices).length === 0) {
      const direct = priceOf(b.prices, name);
      return ok(direct ? { params, price: { name, price: direct } } : { params });
    }
    const index = b.resourceIndex ? await b.resourceIndex() : undefined;
    if (index && !index.ok) return err(rpcError(RPC.INTERNAL_ERROR, `the price of ${name} on ${b.profile.id} could not be determined (its resource list failed); try again later`));
    const read = readPrice(name, b.prices, index?.value);
    if (!read.ok) {
      const refusal = read.error;
      const why = refusal.kind === 'not-a-uri' ? refusal.reason : `${refusal.uri} is not a resource of ${b.profile.id} (it lists no resource with that uri and no resource template that expands to it)`;
      return err(rpcError(RPC.INVALID_PARAMS, `invalid params: ${why}`));
    }
    const sent = { ...params, uri: read.value.uri };
    return ok(read.value.price ? { params: sent, price: { name: read.value.uri, price: read.value.price } } : { params: sent });
  }

  private onNotification(msg: Extract<DvmcpMessage, { type: 'notification' }>): void {
    if (!CANCEL_METHODS.has(msg.method)) return;
    // The request: its `e` tag, else params.requestId (MCP's notifications/cancelled), else params.id (the DVMCP spec's Cancel).
    const named = [msg.params.requestId, msg.params.id].find((v): v is string => typeof v === 'string');
    const target = msg.refersTo ?? named;
    const running = target === undefined ? undefined : this.active.get(target);
    // Only the requester may cancel its request.
    if (running && running.client === msg.client) running.abort.abort(new Error('cancelled by the client'));
  }
}
