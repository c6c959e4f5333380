// Nostr relay client for Workers, Durable Objects and Node: NIP-01 (REQ/EVENT/EOSE/CLOSED/CLOSE,
// OK, NOTICE), NIP-45 COUNT and NIP-42 AUTH over a WebSocket supplied by the caller. It adds
// publish-with-OK (by event id, with a timeout), subscriptions that are re-sent after a reconnect
// (exponential backoff with jitter, stopped by close()), and one retry after authenticating when
// the relay answers `auth-required:`. A challenge is answered whenever it arrives (on connect or,
// as edgestr sends it, with an `auth-required:` answer), up to AUTO_AUTH_PER_CONNECTION distinct
// ones per connection (each is a signature: a relay must not have the client sign without end);
// authenticate() with none yet asks for one with a bare `["AUTH"]`. Nothing is re-published
// automatically.
//
// The socket factory (relay-socket.ts, with examples for Node and workerd) is the only
// platform-specific piece.
//
// Beside it: relay-connection.ts (socket, status, reconnects), relay-socket.ts (socket shape,
// backoff), relay-pending.ts (requests awaiting OK/COUNT), relay-auth.ts (NIP-42 template) and
// relay-types.ts (public types, re-exported here).

import { parseEvent, type NostrEvent } from './event.js';
import { matchFilters, type Filter } from './filters.js';
import { parseRelayMessage } from './messages.js';
import { authTemplate, ChallengeSlot, isAuthRequired, wireEvent } from './relay-auth.js';
import { PendingRequests } from './relay-pending.js';
import { RelayConnection } from './relay-connection.js';
import { backoffDelay, DEFAULT_BACKOFF, type BackoffOptions } from './relay-socket.js';
import type {
  AuthSigner,
  ConnectionStatus,
  CountResult,
  PublishResult,
  RelayClientOptions,
  SubscribeOptions,
  Subscription,
} from './relay-types.js';
import { errorMessage, isTransient } from './errors.js';

export { backoffDelay, DEFAULT_BACKOFF, READY_STATE } from './relay-socket.js';
export type { BackoffOptions, SocketEvent, SocketFactory, SocketLike } from './relay-socket.js';
export type * from './relay-types.js';

interface SubState {
  readonly id: string;
  filters: readonly Filter[];
  readonly opts: SubscribeOptions;
  authRetried: boolean;
  /** Passing CLOSEDs in a row (SubscribeOptions.resubscribe), when its last EOSE came, and the timer of the next REQ. */
  closes: number;
  eoseAt: number;
  retry: ReturnType<typeof setTimeout> | undefined;
}

/**
 * Delays before sending again a subscription the relay closed for a passing reason
 * (SubscribeOptions.resubscribe). They grow with each CLOSED in a row and start over only once the
 * subscription stayed open RESUBSCRIBE_STABLE_MS after an EOSE, so a relay that answers EOSE and
 * closes at once cannot make the client send it again faster and faster.
 */
export const RESUBSCRIBE_BACKOFF: BackoffOptions = { initialDelayMs: 1_000, maxDelayMs: 60_000, factor: 2 };
export const RESUBSCRIBE_STABLE_MS = 60_000;

const DEFAULT_TIMEOUT_MS = 10_000;

/**
 * Distinct challenges of one connection answered on arrival, at most. A relay sends one (edgestr
 * repeats the same one), or a new one now and then; past this a connection's new challenges are
 * recorded (`challenge`) but not signed.
 */
export const AUTO_AUTH_PER_CONNECTION = 4;


export class RelayClient {
  readonly url: string;
  readonly #o: RelayClientOptions;
  readonly #conn: RelayConnection;
  #nextId = 0;

  readonly #subs = new Map<string, SubState>();
  readonly #pending = new PendingRequests();

  readonly #challenge = new ChallengeSlot();
  /** The connection (#gen) on which the client last asked for a challenge with `["AUTH"]`. */
  #challengeAskedGen = -1;
  #auth: { gen: number; result: Promise<PublishResult> } | undefined;
  #authedAs: string | undefined;
  /** Challenges answered on arrival on the connection #gen (AUTO_AUTH_PER_CONNECTION). */
  #autoAuths = { gen: -1, count: 0 };

  constructor(options: RelayClientOptions) {
    this.url = options.url;
    this.#o = options;
    this.#conn = new RelayConnection(
      {
        url: options.url,
        socket: options.socket,
        backoff: options.reconnect === false ? undefined : { ...DEFAULT_BACKOFF, ...options.reconnect },
        stableAfterMs: options.stableAfterMs ?? 5_000,
        connectTimeoutMs: options.connectTimeoutMs ?? DEFAULT_TIMEOUT_MS,
        random: options.random ?? Math.random,
      },
      {
        onStatus: (status, detail) => {
          const cb = this.#o.onStatus;
          if (cb) this.#guard(() => cb(status, detail));
        },
        onOpen: () => this.#resubscribe(),
        onLost: (message) => this.#failInFlight(message),
        onMessage: (gen, text) => this.#onMessage(gen, text),
      },
    );
  }

  get status(): ConnectionStatus {
    return this.#conn.status;
  }

  /** Pubkey this connection is authenticated as (NIP-42), if any. */
  get authenticatedAs(): string | undefined {
    return this.#authedAs;
  }

  /** The latest AUTH challenge of the current connection. */
  get challenge(): string | undefined {
    return this.#challenge.value;
  }

  /** Opens the connection (idempotent). Resolves once open, or with ok=false on timeout/close. */
  connect(opts: { timeoutMs?: number } = {}): Promise<PublishResult> {
    return this.#conn.whenOpen(Date.now() + (opts.timeoutMs ?? DEFAULT_TIMEOUT_MS));
  }

  /** Closes the socket, stops reconnecting, ends every subscription and pending request. */
  close(): void {
    if (this.#conn.status === 'closed') return;
    this.#conn.close();
    this.#failInFlight('error: client closed');
    for (const sub of this.#subs.values()) clearTimeout(sub.retry);
    this.#subs.clear();
  }

  subscribe(filters: readonly Filter[], opts: SubscribeOptions): Subscription {
    const id = opts.id ?? `sub:${++this.#nextId}`;
    const state: SubState = { id, filters: [...filters], opts, authRetried: false, closes: 0, eoseAt: 0, retry: undefined };
    if (this.#conn.status === 'closed') {
      queueMicrotask(() => this.#endSub(state, 'error: client closed'));
      return { id, filters: state.filters, close: () => undefined };
    }
    this.#subs.set(id, state); // an id reused by the caller replaces the previous subscription
    if (this.#conn.status === 'open') this.#conn.send(['REQ', id, ...state.filters]);
    else this.#conn.ensureConnecting();
    return {
      id,
      get filters() {
        return state.filters;
      },
      close: () => {
        if (this.#subs.get(id) !== state) return;
        clearTimeout(state.retry);
        this.#subs.delete(id);
        if (this.#conn.status === 'open') this.#conn.send(['CLOSE', id]);
      },
    };
  }

  /** Sends EVENT and resolves with the relay's OK (retried once after AUTH on `auth-required:`). */
  publish(event: NostrEvent, opts: { timeoutMs?: number } = {}): Promise<PublishResult> {
    const frame = ['EVENT', wireEvent(event)];
    return this.#onceMoreAfterAuth((deadline) => this.#sendAndWaitOk(frame, event.id, deadline), opts.timeoutMs);
  }

  /** NIP-45 COUNT (retried once after AUTH on `auth-required:`). */
  count(filters: readonly Filter[], opts: { timeoutMs?: number } = {}): Promise<CountResult> {
    return this.#onceMoreAfterAuth((deadline) => this.#countOnce(filters, deadline), opts.timeoutMs);
  }

  /** Runs a request; an `auth-required:` answer (with a signer) authenticates and runs it once more, within the same deadline. */
  async #onceMoreAfterAuth<R extends { ok: true } | { ok: false; message: string }>(request: (deadline: number) => Promise<R>, timeoutMs = DEFAULT_TIMEOUT_MS): Promise<R> {
    const deadline = Date.now() + timeoutMs;
    const first = await request(deadline);
    if (first.ok || !isAuthRequired(first.message) || !this.#o.auth) return first;
    const auth = await this.#ensureAuthenticated(deadline);
    if (!auth.ok) return { ...first, message: `${first.message} (authentication failed: ${auth.message})` };
    return request(deadline);
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

  // ---- connection (relay-connection.ts) ----

  #resubscribe(): void {
    for (const sub of this.#subs.values()) {
      sub.authRetried = false;
      this.#conn.send(['REQ', sub.id, ...sub.filters]);
    }
  }

  /** Settles everything tied to the current connection (OKs, COUNTs, AUTH state). */
  #failInFlight(message: string): void {
    this.#pending.failAll(message);
    this.#challenge.set(undefined);
    this.#auth = undefined;
    this.#authedAs = undefined;
  }

  // ---- requests ----

  async #sendAndWaitOk(frame: unknown[], id: string, deadline: number): Promise<PublishResult> {
    const open = await this.#conn.whenOpen(deadline);
    if (!open.ok) return open;
    return this.#sendNowAndWaitOk(frame, id, deadline);
  }

  #sendNowAndWaitOk(frame: unknown[], id: string, deadline: number): Promise<PublishResult> {
    return this.#pending.waitOk(id, this.#conn.gen, Math.max(0, deadline - Date.now()), () => this.#conn.send(frame));
  }

  async #countOnce(filters: readonly Filter[], deadline: number): Promise<CountResult> {
    const open = await this.#conn.whenOpen(deadline);
    if (!open.ok) return { ok: false, message: open.message, ...(open.timeout ? { timeout: true } : {}) };
    const id = `count:${++this.#nextId}`;
    return this.#pending.waitCount(id, this.#conn.gen, Math.max(0, deadline - Date.now()), () => this.#conn.send(['COUNT', id, ...filters]));
  }

  // ---- NIP-42 ----

  async #ensureAuthenticated(deadline: number): Promise<PublishResult> {
    const signer = this.#o.auth;
    if (!signer) return { ok: false, message: 'error: no auth signer configured' };
    const open = await this.#conn.whenOpen(deadline);
    if (!open.ok) return open;
    if (this.#auth && this.#auth.gen === this.#conn.gen) return this.#auth.result;
    const gen = this.#conn.gen;
    if (this.#challenge.value === undefined && this.#challengeAskedGen !== gen) {
      this.#challengeAskedGen = gen;
      this.#conn.send(['AUTH']);
    }
    const challenge = this.#challenge.value ?? (await this.#challenge.wait(deadline));
    if (gen !== this.#conn.gen) return { ok: false, message: 'error: connection lost while authenticating' };
    if (challenge === undefined) return { ok: false, message: 'error: the relay sent no AUTH challenge', timeout: true };
    if (this.#auth && this.#auth.gen === this.#conn.gen) return this.#auth.result;
    return this.#authenticateWith(signer, challenge, deadline);
  }

  #authenticateWith(signer: AuthSigner, challenge: string, deadline: number): Promise<PublishResult> {
    const gen = this.#conn.gen;
    const result = (async (): Promise<PublishResult> => {
      let signed: NostrEvent;
      try {
        signed = await signer(authTemplate(this.url, challenge));
      } catch (e) {
        return { ok: false, message: `error: auth signer failed: ${errorMessage(e)}` };
      }
      if (gen !== this.#conn.gen) return { ok: false, message: 'error: connection lost while authenticating' };
      const r = await this.#sendNowAndWaitOk(['AUTH', wireEvent(signed)], signed.id, deadline);
      if (r.ok && gen === this.#conn.gen) this.#authedAs = signed.pubkey;
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
        const sub = this.#subs.get(msg[1]);
        if (sub) sub.eoseAt = Date.now();
        const onEose = sub?.opts.onEose;
        if (onEose) this.#guard(onEose);
        return;
      }
      case 'CLOSED':
        this.#onClosed(gen, msg[1], msg[2]);
        return;
      case 'OK':
        this.#pending.onOk(msg[1], msg[2], msg[3], this.#conn.gen);
        return;
      case 'COUNT':
        this.#pending.onCount(msg[1], msg[2]);
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
    if (this.#pending.onClosed(id, message)) return;
    const sub = this.#subs.get(id);
    if (!sub) return;
    if (isAuthRequired(message) && this.#o.auth && !sub.authRetried) {
      sub.authRetried = true;
      void this.#ensureAuthenticated(Date.now() + (this.#o.authTimeoutMs ?? DEFAULT_TIMEOUT_MS)).then((auth) => {
        // After a reconnect the REQ has already been re-sent by #opened; nothing to do here.
        if (gen !== this.#conn.gen || this.#subs.get(id) !== sub) return;
        if (auth.ok) this.#conn.send(['REQ', id, ...sub.filters]);
        else this.#endSub(sub, `${message} (authentication failed: ${auth.message})`);
      });
      return;
    }
    if (sub.opts.resubscribe && isTransient(message)) {
      if (sub.eoseAt > 0 && Date.now() - sub.eoseAt >= RESUBSCRIBE_STABLE_MS) sub.closes = 0;
      return this.#resubscribeLater(sub, sub.opts.resubscribe);
    }
    this.#endSub(sub, message);
  }

  /** Sends `sub` again after its backoff, with fresh filters, unless it was closed or replaced meanwhile. */
  #resubscribeLater(sub: SubState, filters: () => readonly Filter[]): void {
    clearTimeout(sub.retry);
    sub.retry = setTimeout(() => {
      sub.retry = undefined;
      if (this.#subs.get(sub.id) !== sub) return;
      sub.filters = [...filters()];
      if (this.#conn.status === 'open') this.#conn.send(['REQ', sub.id, ...sub.filters]);
    }, backoffDelay(sub.closes++, RESUBSCRIBE_BACKOFF, this.#o.random ?? Math.random));
  }

  #endSub(sub: SubState, message: string): void {
    this.#subs.delete(sub.id);
    const onClosed = sub.opts.onClosed;
    if (onClosed) this.#guard(() => onClosed(message));
  }

  #onChallenge(challenge: string): void {
    // edgestr repeats its challenge before every `auth-required:` answer: a challenge already
    // answered (or being answered) on this connection needs nothing more.
    const repeated = challenge === this.#challenge.value && this.#auth?.gen === this.#conn.gen;
    this.#challenge.set(challenge);
    const signer = this.#o.auth;
    if (!signer || repeated || (this.#o.authOn ?? 'challenge') !== 'challenge') return;
    if (this.#autoAuths.gen !== this.#conn.gen) this.#autoAuths = { gen: this.#conn.gen, count: 0 };
    if (this.#autoAuths.count++ >= AUTO_AUTH_PER_CONNECTION) return;
    void this.#authenticateWith(signer, challenge, Date.now() + (this.#o.authTimeoutMs ?? DEFAULT_TIMEOUT_MS));
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
