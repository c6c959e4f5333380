// Public types of the relay client: its options, the results of publish/count/authenticate, and
// subscriptions. Re-exported by relay-client.ts, where callers import them.

import type { EventTemplate, NostrEvent } from './event.js';
import type { Filter } from './filters.js';
import type { BackoffOptions, SocketFactory } from './relay-socket.js';

export type { EventTemplate };

/** Signs a NIP-42 AUTH template (kind 22242) with the key the client should authenticate as. */
export type AuthSigner = (template: EventTemplate) => Promise<NostrEvent>;

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
  /**
   * For a subscription meant to last: when the relay closes it for a passing reason (`error:`,
   * e.g. an overloaded relay or live events lost on the way; `rate-limited:`), it is sent again
   * after a backoff (RESUBSCRIBE_BACKOFF: growing while it is closed again soon after) with the filters this returns (a
   * fresh `since`), and onClosed is not called. Any other CLOSED ends it as without this.
   */
  resubscribe?: () => readonly Filter[];
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
