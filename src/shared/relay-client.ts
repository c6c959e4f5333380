// Nostr relay client for Workers, Durable Objects and Node: NIP-01 (REQ/EVENT/EOSE/CLOSED/CLOSE,
// OK, NOTICE), NIP-45 COUNT and NIP-42 AUTH over a WebSocket supplied by the caller. It adds
// publish-with-OK (by event id, with a timeout), subscriptions that are re-sent after a reconnect
// (exponential backoff with jitter, stopped by close()), and one retry after authenticating when
// the relay answers `auth-required:`. A challenge is answered whenever it arrives (on connect or,
// as edgestr sends it, with an `auth-required:` answer); authenticate() with none yet asks for one
// with a bare `["AUTH"]`. Nothing is re-published automatically.
//
// The socket factory is the only platform-specific piece:
//   Node 20:   new RelayClient({ url, socket: (u) => new WebSocket(u) })        // `ws` package
//   workerd:   new RelayClient({ url, socket: (u) => new WebSocket(u) })        // global WebSocket
//   workerd:   new RelayClient({ url, socket: async (u) => {                    // fetch upgrade
//                const res = await fetch(u.replace(/^ws/, 'http'), { headers: { Upgrade: 'websocket' } });
//                const ws = res.webSocket; if (!ws) throw new Error(`no upgrade: ${res.status}`);
//                ws.accept(); return ws; } })                                     // already open
// A socket that is already OPEN when the factory returns (an accepted workerd socket) is used as is.

import { parseRejection } from './errors.js';
import { parseEvent, type NostrEvent } from './event.js';
import { matchFilters, type Filter } from './filters.js';
import { KIND } from './kinds.js';
import { CountAnswerSchema, parseRelayMessage } from './messages.js';

/** WebSocket readyState values (identical in the web API, workerd and `ws`). */
export const READY_STATE = { CONNECTING: 0, OPEN: 1, CLOSING: 2, CLOSED: 3 } as const;

/** The fields of open/message/close/error events that the client reads. */
export interface SocketEvent {
  readonly type?: string;
  readonly data?: unknown;
  readonly code?: number;
  readonly reason?: string;
}

/** The part of a WebSocket the client uses: the web API, workerd's WebSocket and `ws` all fit. */
export interface SocketLike {
  readonly readyState: number;
  send(data: string): void;
  close(code?: number, reason?: string): void;
  addEventListener(type: 'open' | 'message' | 'close' | 'error', listener: (event: SocketEvent) => void): void;
}

export type SocketFactory = (url: string) => SocketLike | Promise<SocketLike>;

export interface EventTemplate {
  kind: number;
  created_at: number;
  tags: string[][];
  content: string;
}

/** Signs a NIP-42 AUTH template (kind 22242) with the key the client should authenticate as. */
export type AuthSigner = (template: EventTemplate) => Promise<NostrEvent>;

export interface BackoffOptions {
  /** Delay before the first reconnect attempt (before jitter). */
  initialDelayMs: number;
  /** Upper bound of any delay. */
  maxDelayMs: number;
  /** Growth per failed attempt. */
  factor: number;
}

export const DEFAULT_BACKOFF: BackoffOptions = { initialDelayMs: 250, maxDelayMs: 30_000, factor: 2 };

/**
 * Delay before reconnect attempt `attempt` (0-based): exponential, capped at maxDelayMs, with
 * "equal jitter" (half fixed, half random) so clients dropped together do not return together.
 * `random` returns a number in [0, 1).
 */
export function backoffDelay(attempt: number, o: BackoffOptions, random: () => number): number {
  const capped = Math.min(o.maxDelayMs, o.initialDelayMs * o.factor ** Math.max(0, attempt));
  return Math.round(capped / 2 + (capped / 2) * Math.min(1, Math.max(0, random())));
}

export type ConnectionStatus =
  | 'idle' // not connected and not trying (before the first use, or after a failure with reconnect off)
  | 'connecting'
  | 'open'
  | 'waiting' // disconnected, a reconnect is scheduled
  | 'closed'; // close() was called; terminal

export interface RelayClientOptions {
  /** ws:// or wss:// URL; also the `relay` tag of AUTH events. */
  url: string;
  socket: SocketFactory;
  /** NIP-42 signer. Without it, AUTH challenges are ignored and `auth-required:` is final. */
  auth?: AuthSigner;
  /** 'challenge' (default): answer every AUTH challenge at once, whenever it arrives; 'demand':
   *  only when a publish, REQ or COUNT comes back `auth-required:` (or authenticate() is called). */
  authOn?: 'challenge' | 'demand';
  /** Verifies incoming subscription events (id and signature); false drops the event. */
  verify?: (event: NostrEvent) => boolean;
  onNotice?: (message: string) => void;
  onStatus?: (status: ConnectionStatus, detail: string) => void;
  /** Called when a caller-supplied callback throws (default: console.error). */
  onError?: (error: unknown) => void;
  /** false disables automatic reconnects (the next use connects again). */
  reconnect?: false | Partial<BackoffOptions>;
  /** A connection open at least this long resets the backoff (default 5 s). */
  stableAfterMs?: number;
  /** Give up on a socket that has not opened after this long (default 10 s). */
  connectTimeoutMs?: number;
  /** Time allowed for the AUTH exchange, including waiting for a challenge (default 10 s). */
  authTimeoutMs?: number;
  /** Jitter source in [0, 1) (default Math.random). */
  random?: () => number;
}

/** A relay's answer to EVENT (or AUTH), or the client's own failure (`timeout` when no OK came). */
export interface PublishResult {
  ok: boolean;
  message: string;
  timeout?: boolean;
}

export type CountResult = { ok: true; count: number; approximate: boolean } | { ok: false; message: string; timeout?: boolean };

export interface SubscribeOptions {
  onEvent: (event: NostrEvent) => void;
  /** Called after each EOSE: once per (re)sent REQ, so again after a reconnect. */
  onEose?: () => void;
  /** The relay ended the subscription (CLOSED) with this message; it will not be re-sent. */
  onClosed?: (message: string) => void;
  /** Overrides the client's verify for this subscription. */
  verify?: (event: NostrEvent) => boolean;
  /** Subscription id (default: generated, unique per client). */
  id?: string;
}

export interface Subscription {
  readonly id: string;
  readonly filters: readonly Filter[];
  /** Sends CLOSE and stops delivery; the subscription is not re-sent after a reconnect. */
  close(): void;
}

interface SubState {
  readonly id: string;
  readonly filters: readonly Filter[];
  readonly opts: SubscribeOptions;
  authRetried: boolean;
}

interface Waiter<T> {
  readonly gen: number;
  readonly settle: (result: T) => void;
}

const DEFAULT_TIMEOUT_MS = 10_000;

const isAuthRequired = (message: string): boolean => parseRejection(message)?.prefix === 'auth-required';
const nowSeconds = (): number => Math.floor(Date.now() / 1000);
const describe = (e: unknown): string => (e instanceof Error ? e.message : String(e));

/** The event with `id` first, so a relay refusing an oversized message can still name it in OK. */
const wireEvent = (e: NostrEvent): NostrEvent => ({
  id: e.id,
  pubkey: e.pubkey,
  created_at: e.created_at,
  kind: e.kind,
  tags: e.tags,
  content: e.content,
  sig: e.sig,
});

function messageText(data: unknown): string | undefined {
  if (typeof data === 'string') return data;
  if (data instanceof ArrayBuffer) return new TextDecoder().decode(data);
  if (ArrayBuffer.isView(data)) return new TextDecoder().decode(data);
  return undefined;
}

export class RelayClient {
  readonly url: string;
  readonly #o: RelayClientOptions;
  readonly #backoff: BackoffOptions | undefined;

  #status: ConnectionStatus = 'idle';
  #socket: SocketLike | undefined;
  /** Incremented on every connection attempt and every disconnect; stale events are ignored. */
  #gen = 0;
  #attempt = 0;
  #openedAt = 0;
  #reconnectTimer: ReturnType<typeof setTimeout> | undefined;
  #connectTimer: ReturnType<typeof setTimeout> | undefined;
  #nextId = 0;

  readonly #subs = new Map<string, SubState>();
  readonly #okWaiters = new Map<string, Array<Waiter<PublishResult>>>();
  readonly #countWaiters = new Map<string, Waiter<CountResult>>();
  #openWaiters: Array<(r: PublishResult) => void> = [];

  #challenge: string | undefined;
  /** The connection (#gen) on which the client last asked for a challenge with `["AUTH"]`. */
  #challengeAskedGen = -1;
  #challengeWaiters: Array<() => void> = [];
  #auth: { gen: number; result: Promise<PublishResult> } | undefined;
  #authedAs: string | undefined;

  constructor(options: RelayClientOptions) {
    this.url = options.url;
    this.#o = options;
    this.#backoff = options.reconnect === false ? undefined : { ...DEFAULT_BACKOFF, ...options.reconnect };
  }

  get status(): ConnectionStatus {
    return this.#status;
  }

  /** Pubkey this connection is authenticated as (NIP-42), if any. */
  get authenticatedAs(): string | undefined {
    return this.#authedAs;
  }

  /** The latest AUTH challenge of the current connection. */
  get challenge(): string | undefined {
    return this.#challenge;
  }

  /** Opens the connection (idempotent). Resolves once open, or with ok=false on timeout/close. */
  connect(opts: { timeoutMs?: number } = {}): Promise<PublishResult> {
    return this.#whenOpen(Date.now() + (opts.timeoutMs ?? DEFAULT_TIMEOUT_MS));
  }

  /** Closes the socket, stops reconnecting, ends every subscription and pending request. */
  close(): void {
    if (this.#status === 'closed') return;
    this.#setStatus('closed', 'closed by caller');
    clearTimeout(this.#reconnectTimer);
    clearTimeout(this.#connectTimer);
    const socket = this.#socket;
    this.#socket = undefined;
    this.#gen++;
    this.#failPending('error: client closed');
    this.#subs.clear();
    if (socket) safeClose(socket, 1000, 'client closed');
  }

  subscribe(filters: readonly Filter[], opts: SubscribeOptions): Subscription {
    const id = opts.id ?? `sub:${++this.#nextId}`;
    const state: SubState = { id, filters: [...filters], opts, authRetried: false };
    if (this.#status === 'closed') {
      queueMicrotask(() => this.#endSub(state, 'error: client closed'));
      return { id, filters: state.filters, close: () => undefined };
    }
    this.#subs.set(id, state); // an id reused by the caller replaces the previous subscription
    if (this.#status === 'open') this.#send(['REQ', id, ...state.filters]);
    else this.#ensureConnecting();
    return {
      id,
      filters: state.filters,
      close: () => {
        if (this.#subs.get(id) !== state) return;
        this.#subs.delete(id);
        if (this.#status === 'open') this.#send(['CLOSE', id]);
      },
    };
  }

  /** Sends EVENT and resolves with the relay's OK (retried once after AUTH on `auth-required:`). */
  async publish(event: NostrEvent, opts: { timeoutMs?: number } = {}): Promise<PublishResult> {
    const deadline = Date.now() + (opts.timeoutMs ?? DEFAULT_TIMEOUT_MS);
    const frame = ['EVENT', wireEvent(event)];
    const first = await this.#sendAndWaitOk(frame, event.id, deadline);
    if (first.ok || !isAuthRequired(first.message) || !this.#o.auth) return first;
    const auth = await this.#ensureAuthenticated(deadline);
    if (!auth.ok) return { ...first, message: `${first.message} (authentication failed: ${auth.message})` };
    return this.#sendAndWaitOk(frame, event.id, deadline);
  }

  /** NIP-45 COUNT (retried once after AUTH on `auth-required:`). */
  async count(filters: readonly Filter[], opts: { timeoutMs?: number } = {}): Promise<CountResult> {
    const deadline = Date.now() + (opts.timeoutMs ?? DEFAULT_TIMEOUT_MS);
    const first = await this.#countOnce(filters, deadline);
    if (first.ok || !isAuthRequired(first.message) || !this.#o.auth) return first;
    const auth = await this.#ensureAuthenticated(deadline);
    if (!auth.ok) return { ...first, message: `${first.message} (authentication failed: ${auth.message})` };
    return this.#countOnce(filters, deadline);
  }

  /**
   * Authenticates the current connection. Relays send their challenge on connect or only when
   * authentication is needed (edgestr does the latter): with no challenge yet, the client asks for
   * one with a bare `["AUTH"]` (edgestr answers it with the challenge; other relays ignore or
   * NOTICE it) and uses whichever challenge arrives first.
   */
  authenticate(opts: { timeoutMs?: number } = {}): Promise<PublishResult> {
    return this.#ensureAuthenticated(Date.now() + (opts.timeoutMs ?? this.#o.authTimeoutMs ?? DEFAULT_TIMEOUT_MS));
  }

  // ---- connection lifecycle ----

  #setStatus(status: ConnectionStatus, detail: string): void {
    this.#status = status;
    const cb = this.#o.onStatus;
    if (cb) this.#guard(() => cb(status, detail));
  }

  #ensureConnecting(): void {
    if (this.#status === 'idle') void this.#openSocket();
  }

  async #openSocket(): Promise<void> {
    const gen = ++this.#gen;
    this.#setStatus('connecting', this.url);
    clearTimeout(this.#connectTimer);
    this.#connectTimer = setTimeout(() => {
      if (gen === this.#gen && this.#status === 'connecting') this.#down(gen, 'connect timeout');
    }, this.#o.connectTimeoutMs ?? DEFAULT_TIMEOUT_MS);
    let socket: SocketLike;
    try {
      socket = await this.#o.socket(this.url);
    } catch (e) {
      this.#down(gen, `connect failed: ${describe(e)}`);
      return;
    }
    if (gen !== this.#gen) {
      socket.addEventListener('error', () => undefined); // `ws` throws on an unheard error event
      safeClose(socket, 1000, 'superseded');
      return;
    }
    this.#socket = socket;
    socket.addEventListener('open', () => {
      if (gen === this.#gen && this.#status === 'connecting') this.#opened();
    });
    socket.addEventListener('message', (ev) => {
      if (gen !== this.#gen) return;
      const text = messageText(ev.data);
      if (text !== undefined) this.#onMessage(gen, text);
    });
    socket.addEventListener('close', (ev) => {
      const why = `closed${ev.code !== undefined ? ` (${ev.code}${ev.reason ? ` ${ev.reason}` : ''})` : ''}`;
      this.#down(gen, why);
    });
    socket.addEventListener('error', () => this.#down(gen, 'socket error'));
    if (socket.readyState === READY_STATE.OPEN) this.#opened();
    else if (socket.readyState >= READY_STATE.CLOSING) this.#down(gen, 'socket closed before opening');
  }

  #opened(): void {
    clearTimeout(this.#connectTimer);
    this.#openedAt = Date.now();
    this.#setStatus('open', this.url);
    for (const sub of this.#subs.values()) {
      sub.authRetried = false;
      this.#send(['REQ', sub.id, ...sub.filters]);
    }
    const waiters = this.#openWaiters;
    this.#openWaiters = [];
    for (const w of waiters) w({ ok: true, message: '' });
  }

  /** The current connection is gone (or never came up): fail what it carried, maybe reconnect. */
  #down(gen: number, why: string): void {
    if (gen !== this.#gen || this.#status === 'closed') return;
    this.#gen++;
    clearTimeout(this.#connectTimer);
    const socket = this.#socket;
    this.#socket = undefined;
    if (socket) safeClose(socket, 1000, 'closing');
    const wasOpenFor = this.#status === 'open' ? Date.now() - this.#openedAt : -1;
    this.#failInFlight(`error: connection ${why} before the relay answered`);
    if (!this.#backoff) {
      this.#setStatus('idle', why);
      const waiters = this.#openWaiters;
      this.#openWaiters = [];
      for (const w of waiters) w({ ok: false, message: `error: connection ${why}` });
      return;
    }
    if (wasOpenFor >= (this.#o.stableAfterMs ?? 5_000)) this.#attempt = 0;
    const delay = backoffDelay(this.#attempt++, this.#backoff, this.#o.random ?? Math.random);
    this.#setStatus('waiting', `${why}; reconnecting in ${delay} ms`);
    this.#reconnectTimer = setTimeout(() => {
      if (this.#status === 'waiting') void this.#openSocket();
    }, delay);
  }

  /** Settles everything tied to the current connection (OKs, COUNTs, AUTH state). */
  #failInFlight(message: string): void {
    const oks = [...this.#okWaiters.values()].flat();
    const counts = [...this.#countWaiters.values()];
    this.#okWaiters.clear();
    this.#countWaiters.clear();
    for (const w of oks) w.settle({ ok: false, message });
    for (const w of counts) w.settle({ ok: false, message });
    this.#challenge = undefined;
    this.#auth = undefined;
    this.#authedAs = undefined;
    const cw = this.#challengeWaiters;
    this.#challengeWaiters = [];
    for (const w of cw) w();
  }

  #failPending(message: string): void {
    this.#failInFlight(message);
    const waiters = this.#openWaiters;
    this.#openWaiters = [];
    for (const w of waiters) w({ ok: false, message });
  }

  #whenOpen(deadline: number): Promise<PublishResult> {
    if (this.#status === 'open') return Promise.resolve({ ok: true, message: '' });
    if (this.#status === 'closed') return Promise.resolve({ ok: false, message: 'error: client closed' });
    this.#ensureConnecting();
    return new Promise((resolve) => {
      const timer = setTimeout(() => {
        this.#openWaiters = this.#openWaiters.filter((w) => w !== settle);
        resolve({ ok: false, message: 'error: timed out waiting for the connection', timeout: true });
      }, Math.max(0, deadline - Date.now()));
      const settle = (r: PublishResult): void => {
        clearTimeout(timer);
        resolve(r);
      };
      this.#openWaiters.push(settle);
    });
  }

  #send(frame: unknown[]): boolean {
    const socket = this.#socket;
    if (!socket || this.#status !== 'open' || socket.readyState !== READY_STATE.OPEN) return false;
    try {
      socket.send(JSON.stringify(frame));
      return true;
    } catch {
      return false;
    }
  }

  // ---- requests ----

  async #sendAndWaitOk(frame: unknown[], id: string, deadline: number): Promise<PublishResult> {
    const open = await this.#whenOpen(deadline);
    if (!open.ok) return open;
    return this.#sendNowAndWaitOk(frame, id, deadline);
  }

  #sendNowAndWaitOk(frame: unknown[], id: string, deadline: number): Promise<PublishResult> {
    const ms = Math.max(0, deadline - Date.now());
    return new Promise((resolve) => {
      const waiter: Waiter<PublishResult> = {
        gen: this.#gen,
        settle: (r) => {
          clearTimeout(timer);
          resolve(r);
        },
      };
      const remove = (): void => {
        const list = this.#okWaiters.get(id)?.filter((w) => w !== waiter) ?? [];
        if (list.length) this.#okWaiters.set(id, list);
        else this.#okWaiters.delete(id);
      };
      const timer = setTimeout(() => {
        remove();
        resolve({ ok: false, message: `error: no OK from the relay within ${ms} ms`, timeout: true });
      }, ms);
      this.#okWaiters.set(id, [...(this.#okWaiters.get(id) ?? []), waiter]);
      if (!this.#send(frame)) {
        remove();
        waiter.settle({ ok: false, message: 'error: could not send on the connection' });
      }
    });
  }

  async #countOnce(filters: readonly Filter[], deadline: number): Promise<CountResult> {
    const open = await this.#whenOpen(deadline);
    if (!open.ok) return { ok: false, message: open.message, ...(open.timeout ? { timeout: true } : {}) };
    const id = `count:${++this.#nextId}`;
    const ms = Math.max(0, deadline - Date.now());
    return new Promise((resolve) => {
      const timer = setTimeout(() => {
        this.#countWaiters.delete(id);
        resolve({ ok: false, message: `error: no COUNT from the relay within ${ms} ms`, timeout: true });
      }, ms);
      this.#countWaiters.set(id, {
        gen: this.#gen,
        settle: (r) => {
          clearTimeout(timer);
          resolve(r);
        },
      });
      if (!this.#send(['COUNT', id, ...filters])) {
        this.#countWaiters.delete(id);
        clearTimeout(timer);
        resolve({ ok: false, message: 'error: could not send on the connection' });
      }
    });
  }

  // ---- NIP-42 ----

  async #ensureAuthenticated(deadline: number): Promise<PublishResult> {
    const signer = this.#o.auth;
    if (!signer) return { ok: false, message: 'error: no auth signer configured' };
    const open = await this.#whenOpen(deadline);
    if (!open.ok) return open;
    if (this.#auth && this.#auth.gen === this.#gen) return this.#auth.result;
    const gen = this.#gen;
    if (this.#challenge === undefined && this.#challengeAskedGen !== gen) {
      this.#challengeAskedGen = gen;
      this.#send(['AUTH']);
    }
    const challenge = this.#challenge ?? (await this.#waitForChallenge(deadline));
    if (gen !== this.#gen) return { ok: false, message: 'error: connection lost while authenticating' };
    if (challenge === undefined) return { ok: false, message: 'error: the relay sent no AUTH challenge', timeout: true };
    if (this.#auth && this.#auth.gen === this.#gen) return this.#auth.result;
    return this.#authenticateWith(signer, challenge, deadline);
  }

  #waitForChallenge(deadline: number): Promise<string | undefined> {
    return new Promise((resolve) => {
      const done = (): void => {
        clearTimeout(timer);
        resolve(this.#challenge);
      };
      const timer = setTimeout(() => {
        this.#challengeWaiters = this.#challengeWaiters.filter((w) => w !== done);
        resolve(undefined);
      }, Math.max(0, deadline - Date.now()));
      this.#challengeWaiters.push(done);
    });
  }

  #authenticateWith(signer: AuthSigner, challenge: string, deadline: number): Promise<PublishResult> {
    const gen = this.#gen;
    const result = (async (): Promise<PublishResult> => {
      let signed: NostrEvent;
      try {
        signed = await signer({
          kind: KIND.AUTH,
          created_at: nowSeconds(),
          tags: [
            ['relay', this.url],
            ['challenge', challenge],
          ],
          content: '',
        });
      } catch (e) {
        return { ok: false, message: `error: auth signer failed: ${describe(e)}` };
      }
      if (gen !== this.#gen) return { ok: false, message: 'error: connection lost while authenticating' };
      const r = await this.#sendNowAndWaitOk(['AUTH', wireEvent(signed)], signed.id, deadline);
      if (r.ok && gen === this.#gen) this.#authedAs = signed.pubkey;
      return r;
    })();
    this.#auth = { gen, result };
    return result;
  }

  // ---- incoming ----

  #onMessage(gen: number, text: string): void {
    const msg = parseRelayMessage(text);
    if (!msg) return;
    switch (msg[0]) {
      case 'EVENT':
        this.#onEvent(msg[1], msg[2]);
        return;
      case 'EOSE': {
        const onEose = this.#subs.get(msg[1])?.opts.onEose;
        if (onEose) this.#guard(onEose);
        return;
      }
      case 'CLOSED':
        this.#onClosed(gen, msg[1], msg[2]);
        return;
      case 'OK':
        this.#onOk(msg[1], msg[2], msg[3]);
        return;
      case 'COUNT':
        this.#onCount(msg[1], msg[2]);
        return;
      case 'NOTICE': {
        const onNotice = this.#o.onNotice;
        const message = msg[1];
        if (onNotice) this.#guard(() => onNotice(message));
        return;
      }
      case 'AUTH':
        this.#onChallenge(msg[1]);
        return;
    }
  }

  #onEvent(subId: string, raw: unknown): void {
    const sub = this.#subs.get(subId);
    if (!sub) return;
    const parsed = parseEvent(raw);
    if (!parsed.ok) return;
    const event = parsed.value;
    if (!matchFilters(sub.filters, event)) return;
    const verify = sub.opts.verify ?? this.#o.verify;
    if (verify && !verify(event)) return;
    this.#guard(() => sub.opts.onEvent(event));
  }

  #onClosed(gen: number, id: string, message: string): void {
    const counter = this.#countWaiters.get(id);
    if (counter) {
      this.#countWaiters.delete(id);
      counter.settle({ ok: false, message });
      return;
    }
    const sub = this.#subs.get(id);
    if (!sub) return;
    if (isAuthRequired(message) && this.#o.auth && !sub.authRetried) {
      sub.authRetried = true;
      void this.#ensureAuthenticated(Date.now() + (this.#o.authTimeoutMs ?? DEFAULT_TIMEOUT_MS)).then((auth) => {
        // After a reconnect the REQ has already been re-sent by #opened; nothing to do here.
        if (gen !== this.#gen || this.#subs.get(id) !== sub) return;
        if (auth.ok) this.#send(['REQ', id, ...sub.filters]);
        else this.#endSub(sub, `${message} (authentication failed: ${auth.message})`);
      });
      return;
    }
    this.#endSub(sub, message);
  }

  #endSub(sub: SubState, message: string): void {
    this.#subs.delete(sub.id);
    const onClosed = sub.opts.onClosed;
    if (onClosed) this.#guard(() => onClosed(message));
  }

  #onOk(id: string, accepted: boolean, message: string): void {
    const waiters = this.#okWaiters.get(id);
    if (!waiters) return;
    this.#okWaiters.delete(id);
    for (const w of waiters) if (w.gen === this.#gen) w.settle({ ok: accepted, message });
  }

  #onCount(id: string, payload: unknown): void {
    const w = this.#countWaiters.get(id);
    if (!w) return;
    this.#countWaiters.delete(id);
    const answer = CountAnswerSchema.safeParse(payload);
    if (answer.success) {
      w.settle({ ok: true, count: answer.data.count, approximate: answer.data.approximate === true });
    } else {
      w.settle({ ok: false, message: 'invalid: malformed COUNT answer from the relay' });
    }
  }

  #onChallenge(challenge: string): void {
    // edgestr repeats its challenge before every `auth-required:` answer: a challenge already
    // answered (or being answered) on this connection needs nothing more.
    const repeated = challenge === this.#challenge && this.#auth?.gen === this.#gen;
    this.#challenge = challenge;
    const waiters = this.#challengeWaiters;
    this.#challengeWaiters = [];
    for (const w of waiters) w();
    const signer = this.#o.auth;
    if (signer && !repeated && (this.#o.authOn ?? 'challenge') === 'challenge') {
      void this.#authenticateWith(signer, challenge, Date.now() + (this.#o.authTimeoutMs ?? DEFAULT_TIMEOUT_MS));
    }
  }

  /** Runs a caller-supplied callback without letting its exception break message handling. */
  #guard(fn: () => void): void {
    try {
      fn();
    } catch (e) {
      if (this.#o.onError) this.#o.onError(e);
      else console.error('relay-client: callback threw', e);
    }
  }
}

function safeClose(socket: SocketLike, code: number, reason: string): void {
  try {
    if (socket.readyState === READY_STATE.CONNECTING || socket.readyState === READY_STATE.OPEN) socket.close(code, reason);
  } catch {
    // already closing or closed
  }
}
