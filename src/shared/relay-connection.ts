// One relay client's connection: opens the caller's socket, tracks its status and generation (a
// number bumped on every attempt and every loss, so that late events of an old socket are ignored),
// times out a socket that does not open, reconnects with backoff, and lets callers wait until open.
// What the connection carried (subscriptions, pending requests, AUTH) is the client's: it is told
// through the handlers.

import { backoffDelay, messageText, READY_STATE, safeClose, type BackoffOptions, type SocketFactory, type SocketLike } from './relay-socket.js';
import type { ConnectionStatus, PublishResult } from './relay-types.js';
import { errorMessage } from './errors.js';

export interface ConnectionOptions {
  url: string;
  socket: SocketFactory;
  /** undefined: no automatic reconnect (the next use connects again). */
  backoff: BackoffOptions | undefined;
  stableAfterMs: number;
  connectTimeoutMs: number;
  random: () => number;
}

export interface ConnectionHandlers {
  onStatus(status: ConnectionStatus, detail: string): void;
  /** The socket is open (first time or after a reconnect). */
  onOpen(): void;
  /** The socket is gone (or never opened); `message` explains it to the requests in flight. */
  onLost(message: string): void;
  onMessage(gen: number, text: string): void;
}


export class RelayConnection {
  readonly #o: ConnectionOptions;
  readonly #h: ConnectionHandlers;
  #status: ConnectionStatus = 'idle';
  #socket: SocketLike | undefined;
  #gen = 0;
  #attempt = 0;
  #openedAt = 0;
  #reconnectTimer: ReturnType<typeof setTimeout> | undefined;
  #connectTimer: ReturnType<typeof setTimeout> | undefined;
  #openWaiters: Array<(r: PublishResult) => void> = [];

  constructor(options: ConnectionOptions, handlers: ConnectionHandlers) {
    this.#o = options;
    this.#h = handlers;
  }

  get status(): ConnectionStatus {
    return this.#status;
  }

  /** Incremented on every connection attempt and every disconnect. */
  get gen(): number {
    return this.#gen;
  }

  /** Resolves once open, or with ok=false at the deadline, on close(), or on a loss without reconnect. */
  whenOpen(deadline: number): Promise<PublishResult> {
    if (this.#status === 'open') return Promise.resolve({ ok: true, message: '' });
    if (this.#status === 'closed') return Promise.resolve({ ok: false, message: 'error: client closed' });
    this.ensureConnecting();
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

  ensureConnecting(): void {
    if (this.#status === 'idle') void this.#openSocket();
  }

  /** Sends a frame if the socket is open; false when it could not. */
  send(frame: unknown[]): boolean {
    const socket = this.#socket;
    if (!socket || this.#status !== 'open' || socket.readyState !== READY_STATE.OPEN) return false;
    try {
      socket.send(JSON.stringify(frame));
      return true;
    } catch {
      return false;
    }
  }

  /** Terminal: closes the socket, stops reconnecting, fails the waits for open. */
  close(): void {
    if (this.#status === 'closed') return;
    this.#setStatus('closed', 'closed by caller');
    clearTimeout(this.#reconnectTimer);
    clearTimeout(this.#connectTimer);
    const socket = this.#socket;
    this.#socket = undefined;
    this.#gen++;
    this.#settleOpenWaiters({ ok: false, message: 'error: client closed' });
    if (socket) safeClose(socket, 1000, 'client closed');
  }

  #setStatus(status: ConnectionStatus, detail: string): void {
    this.#status = status;
    this.#h.onStatus(status, detail);
  }

  #settleOpenWaiters(r: PublishResult): void {
    const waiters = this.#openWaiters;
    this.#openWaiters = [];
    for (const w of waiters) w(r);
  }

  async #openSocket(): Promise<void> {
    const gen = ++this.#gen;
    this.#setStatus('connecting', this.#o.url);
    clearTimeout(this.#connectTimer);
    this.#connectTimer = setTimeout(() => {
      if (gen === this.#gen && this.#status === 'connecting') this.#down(gen, 'connect timeout');
    }, this.#o.connectTimeoutMs);
    let socket: SocketLike;
    try {
      socket = await this.#o.socket(this.#o.url);
    } catch (e) {
      this.#down(gen, `connect failed: ${errorMessage(e)}`);
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
      if (text !== undefined) this.#h.onMessage(gen, text);
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
    this.#setStatus('open', this.#o.url);
    this.#h.onOpen();
    this.#settleOpenWaiters({ ok: true, message: '' });
  }

  /** The current connection is gone (or never came up): report it, maybe reconnect. */
  #down(gen: number, why: string): void {
    if (gen !== this.#gen || this.#status === 'closed') return;
    this.#gen++;
    clearTimeout(this.#connectTimer);
    const socket = this.#socket;
    this.#socket = undefined;
    if (socket) safeClose(socket, 1000, 'closing');
    const wasOpenFor = this.#status === 'open' ? Date.now() - this.#openedAt : -1;
    this.#h.onLost(`error: connection ${why} before the relay answered`);
    const backoff = this.#o.backoff;
    if (!backoff) {
      this.#setStatus('idle', why);
      this.#settleOpenWaiters({ ok: false, message: `error: connection ${why}` });
      return;
    }
    if (wasOpenFor >= this.#o.stableAfterMs) this.#attempt = 0;
    const delay = backoffDelay(this.#attempt++, backoff, this.#o.random);
    this.#setStatus('waiting', `${why}; reconnecting in ${delay} ms`);
    this.#reconnectTimer = setTimeout(() => {
      if (this.#status === 'waiting') void this.#openSocket();
    }, delay);
  }
}
