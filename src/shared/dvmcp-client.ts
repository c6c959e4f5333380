// DVMCP client (../shared/specs/dvmcp-spec-2025-03-26.txt): sends MCP requests (25910, plain or
// gift-wrapped) to a DVMCP server over one or more relays and waits for the answer. Used by the
// /mcp gateway (workers/gateway) and by hosted agents' `dvmcp` tools (workers/agent/tools/dvmcp.ts).
//
// - Private by default: a plain 25910 and its 26910 answer can be read by anyone on the relay (the
//   server id, the method, the arguments, the result), so a target without `encrypt` is
//   gift-wrapped (NIP-59); only `encrypt: false` sends plain. Before the first such request to a
//   server (again after ANNOUNCEMENT_TTL_MS) its announcement (31316) is read on the client's relays
//   (dvmcp-discovery.ts announcedEncryption, one REQ closed at EOSE, at most subscribeTimeoutMs):
//   one that does not say `support_encryption` ends the request, unsent, with "<server> does not
//   support encryption; set encrypt: false to call it in public" (kind 'encryption'); none found (a
//   private server) sends it gift-wrapped, and its timeout then says so and how to call in public
//   (the spec's "attempt encryption first"; never a silent fall back to plain). `encrypt: true`
//   gift-wraps without reading the announcement (the caller has read it: /mcp, the CLI, the console).
// - One set of subscriptions per client, opened on the first request and reused: 26910 + 21316,
//   `#p` = our key, `since` = the time they are opened, and 1059, `#p` = our key, `since` = two days
//   10 min back (WRAP_LOOKBACK_SECONDS: wraps are dated up to two days in the past, NIP-59, and
//   relays apply `since` to live events too). The stored wraps that look-back returns are not opened
//   while no encrypted request waits (none does while the first subscribe runs); an old answer can
//   match no waiting request (ids are new). The 1059 filter needs NIP-42 AUTH on
//   edgestr relays (give the RelayClient an `auth` signer for our key); without it only plain
//   requests can be answered and an encrypted one fails at once with the relay's reason.
// - The spec's answer templates carry only `e` (no `p`): a third subscription per relay hears
//   26910 + 21316 by `#e` = the waiting plain requests' ids and `authors` = their providers. It is
//   sent again under the same id (the relay replaces it) for each plain request, and the request is
//   published only once the relay confirmed it (EOSE; confirmed-subscription.ts: one REQ in flight,
//   the requests of a burst share the next), so a relay holds 3 subscriptions of a client whatever
//   its load (and, while an announcement is read, one per server read); its filter has at most
//   `maxPending` ids. Ids of requests that ended stay in it until
//   the next plain request (their answers, if any come, are dropped before any signature check).
// - Answers are matched by their `e` tag to the request id (the rumor id for wrapped requests) and
//   must come from the request's provider: the event's signature is checked (plain), or the seal's
//   author is (wrapped, dvmcp-wrap.ts). Anything else is ignored. Each event is handled once, even
//   when it arrives on several relays.
// - notifications/progress (21316 with that `e`) goes to onProgress and restarts the idle timer
//   (servers send progress so that clients do not time out).
// - payment-required (21316 with status/amount/e) goes to onPaymentRequired once per request: true
//   means the caller paid and the request keeps waiting; false, a throw or no handler ends it with
//   "payment required: N sats" (and the invoice), and a notifications/cancel is sent. One whose
//   BOLT-11 invoice charges another amount than the sats it states (or none) ends the request the
//   same way without asking the handler (parsePaymentRequired): caps count what a wallet would pay.
//   spendCap(maxSats) is a handler that declines once the cumulative total would exceed the cap.
// - Aborting the signal sends notifications/cancel (21316, `e` = request id, `s`, `p` = provider, in
//   the request's form) and ends the request with "cancelled".
// Failures are values (DvmcpFailure). At most `maxPending` requests wait at once. Warnings (a relay
// refused a subscription or a cancel, a caller's handler threw) go to console.warn on one line, with
// the control characters of the relay's words shown as escapes (visible-controls.ts): a program
// using the library, or a Worker's log, gets no escape sequence of a relay's.

import { getPublicKey } from 'nostr-tools/pure';
import { cancelTemplate, parsePaymentRequired, parseResponse, requestTemplate, type Incoming, type PaymentRequired } from './dvmcp.js';
import { announcedEncryption } from './dvmcp-discovery.js';
import { unwrapDvmcp, wrapDvmcpWithId } from './dvmcp-wrap.js';
import { messageSize } from './dvmcp-size.js';
import { err, errorMessage, ok, type Result } from './errors.js';
import { ConfirmedSubscription } from './confirmed-subscription.js';
import { checkIdAndSignature, type EventSigner, type NostrEvent } from './event.js';
import { KIND } from './kinds.js';
import { LruMap } from './lru.js';
import type { ConversationKeyCache } from './nip44.js';
import { WRAP_LOOKBACK_SECONDS } from './nip59.js';
import type { Filter } from './filters.js';
import { RelayClient, type EventTemplate, type Subscription } from './relay-client.js';
import type { SchnorrVerifier } from './verify.js';
import { visibleControls } from './visible-controls.js';

/** A warning on console.warn, on one line and with control characters shown as escapes (it quotes relays). */
const warn = (text: string): void => console.warn(visibleControls(`dvmcp-client: ${text}`, { singleLine: true }));

/** Which server a request goes to. */
export interface DvmcpTarget {
  /** The provider's public key (hex). */
  provider: string;
  /** The server id (`s`); absent: the provider's only server. */
  serverId?: string;
  /**
   * How the request travels. Absent (the default): gift-wrapped, refused when the server's
   * announcement says it does not support encryption (see the header). true: gift-wrapped without
   * looking. false: plain, readable by anyone on the relay.
   */
  encrypt?: boolean;
}

/** Whether requests to `target` go gift-wrapped (everything but an explicit `encrypt: false`). */
export const isWrapped = (target: Pick<DvmcpTarget, 'encrypt'>): boolean => target.encrypt !== false;

export type DvmcpFailure =
  | { kind: 'protocol'; code: number; message: string; data?: unknown }
  | { kind: 'timeout'; message: string }
  | { kind: 'cancelled'; message: string }
  | { kind: 'payment'; message: string; sats: number; invoice: string }
  | { kind: 'relay'; message: string }
  | { kind: 'busy'; message: string }
  | { kind: 'encryption'; message: string };

/** Decides a payment request: true once paid (the request keeps waiting), false to decline. */
export type PaymentHandler = (request: PaymentRequired & { target: DvmcpTarget; method: string }) => boolean | Promise<boolean>;

export interface DvmcpRequestOptions {
  /** Longest wait without an answer or a progress notification, in ms (default 30,000). */
  timeoutMs?: number;
  /** Longest wait in all, in ms (default 120,000). */
  maxTotalMs?: number;
  signal?: AbortSignal;
  /** The params of each notifications/progress for this request. */
  onProgress?: (params: Record<string, unknown>) => void;
  onPaymentRequired?: PaymentHandler;
}

export interface DvmcpClientOptions {
  /** The relays requests are published to and answers are read from. */
  relays: RelayClient | readonly RelayClient[];
  secretKey: Uint8Array;
  keys: ConversationKeyCache;
  /** Signs a template with `secretKey`. */
  sign: (t: EventTemplate) => Promise<NostrEvent>;
  /** Checks answers' signatures (and seals). */
  verifier: SchnorrVerifier;
  /** Signs the seals and one-time wraps of encrypted requests (default @noble/curves; Workers pass the Wasm signer). */
  wrapSign?: EventSigner;
  /** Most requests waiting at once (default 64). */
  maxPending?: number;
  /** How long the first request waits for the subscriptions to be in place, and a plain request for the relay to confirm its id is heard, in ms (default 5,000). */
  subscribeTimeoutMs?: number;
}

export const DVMCP_CLIENT_DEFAULTS = { timeoutMs: 30_000, maxTotalMs: 120_000, maxPending: 64, subscribeTimeoutMs: 5_000, publishTimeoutMs: 5_000 } as const;

/** How long a server's announced encryption support is taken as read (see the header). */
export const ANNOUNCEMENT_TTL_MS = 5 * 60_000;

/** How a request names its server in a failure. */
const serverLabel = (t: DvmcpTarget): string => t.serverId ?? `the DVMCP server of ${t.provider}`;

/** How far back a subscription sent again after a passing CLOSED reads (well past a request's default maxTotalMs). */
const RESENT_WINDOW_SECONDS = 600;

type Outcome = Result<Record<string, unknown>, DvmcpFailure>;

interface Pending {
  readonly target: DvmcpTarget;
  readonly method: string;
  readonly opts: DvmcpRequestOptions;
  paymentAsked: boolean;
  touch(): void;
  finish(outcome: Outcome): void;
}

/** The state of our subscriptions on one relay. */
interface Listening {
  relay: RelayClient;
  /** When the subscriptions were opened (their `since`). */
  since: number;
  plain: Subscription;
  wraps: Subscription;
  /** 26910 + 21316 naming the waiting plain requests by `e` (answers without `p`); sent with the first plain request. */
  byRequest: ConfirmedSubscription;
  /** Why the relay ended the 1059 subscription (encrypted answers cannot arrive there). */
  wrapsClosed?: string;
  plainClosed?: string;
}

const payFailure = (p: PaymentRequired): DvmcpFailure => ({
  kind: 'payment',
  message: `payment required: ${p.sats} sats${p.invoice ? ` (invoice ${p.invoice})` : ''}`,
  sats: p.sats,
  invoice: p.invoice,
});

/** An onPaymentRequired handler that accepts while the cumulative total stays within `maxSats`. */
export function spendCap(maxSats: number, pay: (p: PaymentRequired) => boolean | Promise<boolean> = () => true): PaymentHandler & { readonly spent: () => number } {
  let spent = 0;
  const handler = async (p: PaymentRequired): Promise<boolean> => {
    if (spent + p.sats > maxSats) return false;
    spent += p.sats; // reserved before paying, so concurrent requests cannot pass the cap together
    const paid = await pay(p);
    if (!paid) spent -= p.sats;
    return paid;
  };
  return Object.assign(handler, { spent: () => spent });
}

export class DvmcpClient {
  readonly pubkey: string;
  readonly #o: DvmcpClientOptions;
  readonly #relays: readonly RelayClient[];
  readonly #pending = new Map<string, Pending>();
  readonly #seen = new LruMap<string, true>(4096);
  /** `<provider>:<server id>` → what its announcement said of encryption (announcedEncryption), and when it was read. */
  readonly #announced = new LruMap<string, { at: number; supports: Promise<boolean | undefined> }>(256);
  #listening: Promise<Listening[]> | undefined;
  readonly #cancelling = new Set<Promise<void>>();
  #closed = false;

  constructor(options: DvmcpClientOptions) {
    this.#o = options;
    const relays = options.relays;
    this.#relays = relays instanceof RelayClient ? [relays] : [...relays];
    this.pubkey = getPublicKey(options.secretKey);
  }

  /** Requests waiting for an answer. */
  get pending(): number {
    return this.#pending.size;
  }

  /** Sends `method` with `params` to `target` and waits for the result object (see the header). */
  async request(target: DvmcpTarget, method: string, params: Record<string, unknown> | undefined, opts: DvmcpRequestOptions = {}): Promise<Outcome> {
    if (this.#closed) return err({ kind: 'cancelled', message: 'cancelled: the DVMCP client is closed' });
    if (opts.signal?.aborted) return err({ kind: 'cancelled', message: 'cancelled' });
    const maxPending = this.#o.maxPending ?? DVMCP_CLIENT_DEFAULTS.maxPending;
    if (this.#pending.size >= maxPending) return err({ kind: 'busy', message: `too many DVMCP requests in flight (at most ${maxPending})` });

    const wrap = isWrapped(target);
    const [listening, announced] = await Promise.all([this.#listen(), target.encrypt === undefined ? this.#announcedEncryption(target) : undefined]);
    if (announced === false) return err({ kind: 'encryption', message: `${serverLabel(target)} does not support encryption; set encrypt: false to call it in public` });
    const timeoutNote =
      target.encrypt === undefined && announced === undefined
        ? ` (the request was gift-wrapped and ${serverLabel(target)} is not announced: if it does not support encryption, set encrypt: false to call it in public)`
        : '';
    const usable = listening.filter((l) => (wrap ? l.wrapsClosed === undefined : l.plainClosed === undefined));
    if (usable.length === 0) {
      const why = listening.map((l) => (wrap ? l.wrapsClosed : l.plainClosed)).join('; ');
      return err({ kind: 'relay', message: `cannot receive ${wrap ? 'encrypted ' : ''}DVMCP answers: ${why}` });
    }

    // Identical requests in the same second would get the same id (and their answers too): the
    // later one moves a second on.
    // One that does not fit one event would be refused by the relay (or could not be wrapped): said now.
    const form = wrap ? 'wrapped' : 'plain';
    const fits = messageSize(requestTemplate(target.provider, method, params, target.serverId), form);
    if (fits.size > fits.room) {
      return err({ kind: 'relay', message: `request too large for one DVMCP message: ${fits.size} bytes, at most ${fits.room}${wrap ? ' gift-wrapped' : ''}` });
    }
    let event: NostrEvent;
    let requestId: string;
    for (let bump = 0; ; bump++) {
      const t = requestTemplate(target.provider, method, params, target.serverId);
      t.created_at += bump;
      if (wrap) {
        const wrapped = wrapDvmcpWithId(t, this.#o.secretKey, this.pubkey, target.provider, this.#o.keys, 'wrapped', this.#o.wrapSign);
        event = wrapped.wrap;
        requestId = wrapped.rumorId;
      } else {
        event = await this.#o.sign(t);
        requestId = event.id;
      }
      if (this.#firstTime(`request:${requestId}`)) break;
    }
    // Checked again: other requests may have started (or close() run) while this one was prepared.
    if (this.#closed) return err({ kind: 'cancelled', message: 'cancelled: the DVMCP client is closed' });
    if (this.#pending.size >= maxPending) return err({ kind: 'busy', message: `too many DVMCP requests in flight (at most ${maxPending})` });
    const answer = this.#register(requestId, target, method, opts, timeoutNote);
    if (!wrap) {
      await Promise.all(usable.map((l) => l.byRequest.update()));
      if (!this.#pending.has(requestId)) return answer; // ended meanwhile (cancelled, timed out, closed): not sent
    }
    const published = await this.#publish(event);
    if (!published.ok) this.#pending.get(requestId)?.finish(err({ kind: 'relay', message: `request not delivered: ${published.error}` }));
    return answer;
  }

  /**
   * Ends every waiting request ("cancelled", with a notifications/cancel), waits for the cancels
   * still being published (each bounded by the publish timeout), then ends the subscriptions.
   */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    for (const [id, p] of [...this.#pending]) {
      this.#sendCancel(id, p.target, 'the client closed');
      p.finish(err({ kind: 'cancelled', message: 'cancelled: the DVMCP client is closed' }));
    }
    await Promise.all(this.#cancelling);
    for (const l of (await this.#listening) ?? []) {
      l.plain.close();
      l.wraps.close();
      l.byRequest.close();
    }
  }

  // ---- requests ----

  /** Waits for the answer to `requestId`; `timeoutNote` ends its timeout messages. */
  #register(requestId: string, target: DvmcpTarget, method: string, opts: DvmcpRequestOptions, timeoutNote: string): Promise<Outcome> {
    const timeoutMs = opts.timeoutMs ?? DVMCP_CLIENT_DEFAULTS.timeoutMs;
    const maxTotalMs = opts.maxTotalMs ?? DVMCP_CLIENT_DEFAULTS.maxTotalMs;
    return new Promise<Outcome>((resolve) => {
      let idle: ReturnType<typeof setTimeout> | undefined;
      const onIdle = (): void => finish(err({ kind: 'timeout', message: `timed out: no answer from the DVMCP server in ${timeoutMs} ms${timeoutNote}` }));
      const total = setTimeout(() => finish(err({ kind: 'timeout', message: `timed out: the DVMCP request took over ${maxTotalMs} ms${timeoutNote}` })), maxTotalMs);
      const onAbort = (): void => {
        this.#sendCancel(requestId, target, 'cancelled by the client');
        finish(err({ kind: 'cancelled', message: 'cancelled' }));
      };
      const finish = (outcome: Outcome): void => {
        if (this.#pending.get(requestId) !== pending) return;
        this.#pending.delete(requestId);
        clearTimeout(idle);
        clearTimeout(total);
        opts.signal?.removeEventListener('abort', onAbort);
        resolve(outcome);
      };
      const pending: Pending = {
        target,
        method,
        opts,
        paymentAsked: false,
        touch: () => {
          clearTimeout(idle);
          idle = setTimeout(onIdle, timeoutMs);
        },
        finish,
      };
      this.#pending.set(requestId, pending);
      pending.touch();
      opts.signal?.addEventListener('abort', onAbort, { once: true });
    });
  }

  /** Publishes to every relay; ok when at least one accepted it. */
  async #publish(event: NostrEvent): Promise<Result<void, string>> {
    const results = await Promise.all(this.#relays.map((r) => r.publish(event, { timeoutMs: DVMCP_CLIENT_DEFAULTS.publishTimeoutMs })));
    if (results.some((r) => r.ok)) return ok(undefined);
    return err(results.map((r, i) => `${this.#relays[i]!.url}: ${r.message}`).join('; '));
  }

  /** notifications/cancel for `requestId`, in the request's form; best effort (logged when undelivered). */
  #sendCancel(requestId: string, target: DvmcpTarget, reason: string): void {
    const t = cancelTemplate(target.provider, requestId, target.serverId, reason);
    const event = isWrapped(target) ? Promise.resolve(wrapDvmcpWithId(t, this.#o.secretKey, this.pubkey, target.provider, this.#o.keys, 'wrapped', this.#o.wrapSign).wrap) : this.#o.sign(t);
    const sent: Promise<void> = event
      .then((e) => this.#publish(e))
      .then((r) => {
        if (!r.ok) warn(`cancel of ${requestId} not delivered: ${r.error}`);
      })
      .catch((e: unknown) => warn(`cancel of ${requestId} failed: ${errorMessage(e)}`))
      .finally(() => this.#cancelling.delete(sent));
    this.#cancelling.add(sent);
  }

  /** What `target`'s announcement says of encryption, read at most once per ANNOUNCEMENT_TTL_MS (concurrent requests share the read). */
  #announcedEncryption(target: DvmcpTarget): Promise<boolean | undefined> {
    const key = `${target.provider}:${target.serverId ?? ''}`;
    const kept = this.#announced.get(key);
    if (kept && Date.now() - kept.at < ANNOUNCEMENT_TTL_MS) return kept.supports;
    const supports = announcedEncryption(this.#relays, target, this.#o.verifier, this.#o.subscribeTimeoutMs ?? DVMCP_CLIENT_DEFAULTS.subscribeTimeoutMs);
    this.#announced.set(key, { at: Date.now(), supports });
    return supports;
  }

  // ---- subscriptions ----

  #listen(): Promise<Listening[]> {
    this.#listening ??= Promise.all(this.#relays.map((r) => this.#listenOn(r)));
    return this.#listening;
  }

  /** Subscribes on one relay and waits for both EOSEs (or CLOSED, or the subscribe timeout). */
  #listenOn(relay: RelayClient): Promise<Listening> {
    const since = Math.floor(Date.now() / 1000);
    // Sent again after a passing CLOSED (live events lost on the way): what came meanwhile, from the
    // last RESENT_WINDOW_SECONDS at most (answers already seen are skipped).
    const resentSince = (): number => Math.max(since, Math.floor(Date.now() / 1000) - RESENT_WINDOW_SECONDS);
    const wrapsSince = (): number => Math.floor(Date.now() / 1000) - WRAP_LOOKBACK_SECONDS;
    const me = [this.pubkey];
    return new Promise((resolve) => {
      let waiting = 2;
      const done = (): void => {
        if (--waiting === 0) {
          clearTimeout(timer);
          resolve(listening);
        }
      };
      const timer = setTimeout(() => {
        waiting = 0;
        resolve(listening);
      }, this.#o.subscribeTimeoutMs ?? DVMCP_CLIENT_DEFAULTS.subscribeTimeoutMs);
      const once = (): (() => void) => {
        let called = false;
        return () => {
          if (called || waiting <= 0) return;
          called = true;
          done();
        };
      };
      const plainDone = once();
      const wrapsDone = once();
      const listening: Listening = {
        relay,
        since,
        plain: relay.subscribe([{ kinds: [KIND.DVMCP_RESPONSE, KIND.DVMCP_NOTIFICATION], '#p': me, since }], {
          resubscribe: () => [{ kinds: [KIND.DVMCP_RESPONSE, KIND.DVMCP_NOTIFICATION], '#p': me, since: resentSince() }],
          onEvent: (e) => this.#onPlain(e),
          onEose: plainDone,
          onClosed: (m) => {
            listening.plainClosed = `${relay.url}: ${m}`;
            plainDone();
          },
        }),
        wraps: relay.subscribe([{ kinds: [KIND.GIFT_WRAP], '#p': me, since: wrapsSince() }], {
          resubscribe: () => [{ kinds: [KIND.GIFT_WRAP], '#p': me, since: wrapsSince() }],
          onEvent: (e) => this.#onWrap(e),
          onEose: wrapsDone,
          onClosed: (m) => {
            listening.wrapsClosed = `${relay.url}: ${m}`;
            wrapsDone();
          },
        }),
        byRequest: new ConfirmedSubscription(relay, {
          filter: () => this.#byRequestFilter(since),
          onEvent: (e) => this.#onPlain(e),
          // Refused (e.g. the relay's subscription cap): answers that carry `p` still arrive on `plain`.
          onRefused: (m) => warn(`${relay.url} refused the subscription to answers by request id: ${m}`),
          timeoutMs: this.#o.subscribeTimeoutMs ?? DVMCP_CLIENT_DEFAULTS.subscribeTimeoutMs,
        }),
      };
    });
  }

  /** The filter of the `byRequest` subscriptions: the waiting plain requests (undefined: none waits). */
  #byRequestFilter(since: number): Filter | undefined {
    const plain = [...this.#pending].filter(([, p]) => !isWrapped(p.target));
    if (plain.length === 0) return undefined;
    const authors = [...new Set(plain.map(([, p]) => p.target.provider))];
    return { kinds: [KIND.DVMCP_RESPONSE, KIND.DVMCP_NOTIFICATION], authors, '#e': plain.map(([id]) => id), since };
  }

  // ---- answers ----

  #firstTime(id: string): boolean {
    if (this.#seen.has(id)) return false;
    this.#seen.set(id, true);
    return true;
  }

  // An id counts as seen only once the event is authentic: a forgery reusing a real answer's id
  // must not hide the real one.
  #onPlain(e: NostrEvent): void {
    if (!this.#pendingFor(e) || this.#seen.has(e.id)) return; // cheap filters before the signature check
    if (!checkIdAndSignature(e, this.#o.verifier).ok) return;
    if (this.#firstTime(e.id)) this.#onMessage(e);
  }

  #onWrap(e: NostrEvent): void {
    // Cheap filters before opening it: only an encrypted request gets a wrapped answer.
    if (this.#seen.has(e.id) || ![...this.#pending.values()].some((p) => isWrapped(p.target))) return;
    const opened = unwrapDvmcp(e, this.#o.secretKey, this.#o.keys, this.#o.verifier);
    if (!opened.ok) return; // not for us, or not authentic
    this.#seen.set(e.id, true);
    // Rumor ids have their own namespace: a rumor can have the id of a plain event with the same fields.
    if (this.#firstTime(`rumor:${opened.value.message.id}`)) this.#onMessage(opened.value.message);
  }

  #pendingFor(m: Pick<Incoming, 'tags' | 'pubkey'>): [string, Pending] | undefined {
    const requestId = m.tags.find((t) => t[0] === 'e')?.[1];
    const pending = requestId === undefined ? undefined : this.#pending.get(requestId);
    if (!pending || pending.target.provider !== m.pubkey) return undefined; // not ours, or not from the provider
    return [requestId!, pending];
  }

  #onMessage(m: Incoming): void {
    const found = this.#pendingFor(m);
    if (!found) return;
    const [requestId, pending] = found;
    const payment = parsePaymentRequired(m);
    if (payment?.ok) {
      void this.#onPayment(requestId, pending, payment.value);
      return;
    }
    if (payment) {
      this.#refusePayment(requestId, pending, payment.error);
      return;
    }
    if (m.kind === KIND.DVMCP_RESPONSE || (m.kind === KIND.PRIVATE_DM && !isNotification(m.content))) {
      const result = parseResponse(m.content);
      pending.finish(result.ok ? result : err({ kind: 'protocol', ...result.error }));
      return;
    }
    if (m.kind !== KIND.DVMCP_NOTIFICATION && m.kind !== KIND.PRIVATE_DM) return;
    const note = notificationOf(m.content);
    if (note?.method !== 'notifications/progress') return;
    pending.touch();
    const onProgress = pending.opts.onProgress;
    if (!onProgress) return;
    try {
      onProgress(note.params);
    } catch (e) {
      warn(`onProgress threw: ${errorMessage(e)}`);
    }
  }

  async #onPayment(requestId: string, pending: Pending, payment: PaymentRequired): Promise<void> {
    if (pending.paymentAsked) return;
    pending.paymentAsked = true;
    pending.touch();
    const handler = pending.opts.onPaymentRequired;
    let paid = false;
    if (handler) {
      try {
        paid = await handler({ ...payment, target: pending.target, method: pending.method });
      } catch (e) {
        warn(`payment handler failed: ${errorMessage(e)}`);
      }
    }
    if (paid) {
      pending.touch();
      return;
    }
    if (this.#pending.get(requestId) !== pending) return;
    this.#sendCancel(requestId, pending.target, 'payment declined');
    pending.finish(err(payFailure(payment)));
  }

  /** A payment request whose invoice does not charge what it states: the handler is never asked; the request ends. */
  #refusePayment(requestId: string, pending: Pending, payment: PaymentRequired & { reason: string }): void {
    if (pending.paymentAsked) return;
    pending.paymentAsked = true;
    this.#sendCancel(requestId, pending.target, 'payment refused: the invoice does not match the amount');
    pending.finish(err({ ...payFailure(payment), message: `${payFailure(payment).message}: ${payment.reason}; nothing was paid` }));
  }
}

const isRecord = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

/** {method, params} of a notification's content, when it is one. */
function notificationOf(content: string): { method: string; params: Record<string, unknown> } | undefined {
  let raw: unknown;
  try {
    raw = JSON.parse(content);
  } catch {
    return undefined;
  }
  if (!isRecord(raw) || typeof raw.method !== 'string') return undefined;
  return { method: raw.method, params: isRecord(raw.params) ? raw.params : {} };
}

/** A kind-14 rumor carries a notification when its content has a notifications/… method. */
const isNotification = (content: string): boolean => notificationOf(content)?.method.startsWith('notifications/') === true;
