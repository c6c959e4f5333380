// What strangers may make the bridge do: requests per client pubkey per minute, requests in progress
// per client, requests per server per minute, and pings (answered by the provider itself, each an
// event to sign and publish) per provider per minute, as many as a server's requests (fixed
// one-minute windows, in memory: an evicted bridge starts with fresh windows). A refusal is a JSON-RPC error RATE_LIMITED whose message
// starts `rate-limited:` and says how many seconds to wait. Which error answers go out at all:
// ErrorAnswers.

import { LruMap } from '../../../src/shared/lru.js';
import { RPC, rpcError, type RpcError } from '../../../src/shared/dvmcp.js';

export interface BridgeLimits {
  clientPerMinute: number;
  clientConcurrent: number;
  serverPerMinute: number;
}

export const DEFAULT_BRIDGE_LIMITS: BridgeLimits = { clientPerMinute: 30, clientConcurrent: 4, serverPerMinute: 300 };

/** Requests older than this (created_at, seconds) are ignored, never answered. */
export const STALE_SECONDS = 60;

/**
 * Whether a request dated `createdAt` is fresh at `now` (both in seconds): at most STALE_SECONDS old
 * and at most as far ahead, so that a signed request cannot be kept for later use.
 */
export const isFresh = (createdAt: number, now: number): boolean => createdAt >= now - STALE_SECONDS && createdAt <= now + STALE_SECONDS;

const WINDOW_MS = 60_000;
/** Client pubkeys tracked at once (the least recently seen are forgotten). */
const MAX_CLIENTS = 4096;

interface Window {
  start: number;
  count: number;
}

interface ClientState extends Window {
  active: number;
}

const waitSeconds = (w: Window, now: number): number => Math.max(1, Math.ceil((w.start + WINDOW_MS - now) / 1000));

/** A refusal: its answer, and in how many ms the client may try again (what the answer says). */
export interface Refusal {
  ok: false;
  error: RpcError;
  retryMs: number;
}

const refusal = (message: string, seconds: number): Refusal => ({ ok: false, error: rpcError(RPC.RATE_LIMITED, `${message}; retry in ${seconds} s`), retryMs: seconds * 1000 });

/** A release that takes effect once, however often it is called (an admission's slot is freed once). */
export function releaseOnce(free: () => void): () => void {
  let released = false;
  return () => {
    if (released) return;
    released = true;
    free();
  };
}

export class Limiter {
  private readonly clients = new LruMap<string, ClientState>(MAX_CLIENTS);
  private readonly servers = new Map<string, Window>();
  /** The provider's pings this minute. */
  private pings: Window | undefined;
  now: () => number = () => Date.now();

  constructor(readonly limits: BridgeLimits = DEFAULT_BRIDGE_LIMITS) {}

  /**
   * Admits one request of `client` for `method` to `serverIds` (every server it goes to), or says
   * why not: a ping also takes one of the provider's serverPerMinute pings of the minute. An
   * admitted request holds one of the client's concurrent slots until `release`.
   */
  admit(client: string, serverIds: readonly string[], method?: string): { ok: true; release: () => void } | Refusal {
    const now = this.now();
    const c = this.clients.get(client) ?? { start: now, count: 0, active: 0 };
    if (now - c.start >= WINDOW_MS) {
      c.start = now;
      c.count = 0;
    }
    this.clients.set(client, c);
    if (c.count >= this.limits.clientPerMinute) {
      return refusal(`rate-limited: more than ${this.limits.clientPerMinute} requests a minute from your key`, waitSeconds(c, now));
    }
    if (c.active >= this.limits.clientConcurrent) {
      return refusal(`rate-limited: ${this.limits.clientConcurrent} of your requests are in progress`, 1);
    }
    for (const id of serverIds) {
      const w = this.serverWindow(id, now);
      if (w.count >= this.limits.serverPerMinute) {
        return refusal(`rate-limited: server ${id} took ${this.limits.serverPerMinute} requests this minute`, waitSeconds(w, now));
      }
    }
    if (method === 'ping') {
      if (!this.pings || now - this.pings.start >= WINDOW_MS) this.pings = { start: now, count: 0 };
      if (this.pings.count >= this.limits.serverPerMinute) {
        return refusal(`rate-limited: this provider answered ${this.limits.serverPerMinute} pings this minute`, waitSeconds(this.pings, now));
      }
      this.pings.count += 1;
    }
    for (const id of serverIds) this.serverWindow(id, now).count += 1;
    c.count += 1;
    c.active += 1;
    return { ok: true, release: releaseOnce(() => (c.active -= 1)) };
  }

  private serverWindow(id: string, now: number): Window {
    let w = this.servers.get(id);
    if (!w || now - w.start >= WINDOW_MS) {
      w = { start: now, count: 0 };
      this.servers.set(id, w);
    }
    return w;
  }

  forgetServer(id: string): void {
    this.servers.delete(id);
  }
}

/** Error answers sent in all per minute, by default. */
export const ERROR_ANSWERS_PER_MINUTE = 300;

/**
 * Which error answers go out. Requests refused before any upstream call cost the server an event
 * to sign and publish each, so a flood of them is bounded: at most `perMinute` error answers a
 * minute in all, and of one client's refusals (rate-limited, quota) only the first until the retry
 * time it gave; the rest are dropped unanswered (as the agent's prompt refusals, workers/agent/budget.ts).
 */
export class ErrorAnswers {
  /** Per client: until when its further refusals are dropped (ms). */
  private readonly told = new LruMap<string, number>(MAX_CLIENTS);
  private window: Window | undefined;
  now: () => number = () => Date.now();

  constructor(readonly perMinute = ERROR_ANSWERS_PER_MINUTE) {}

  /** Whether one more error answer may go out now (counted if so). */
  allow(): boolean {
    const now = this.now();
    if (!this.window || now - this.window.start >= WINDOW_MS) this.window = { start: now, count: 0 };
    if (this.window.count >= this.perMinute) return false;
    this.window.count += 1;
    return true;
  }

  /** A refusal of `client` asking it to wait `retryMs`: answered with `error` if it is the first since the last one's retry time and allow() agrees; else dropped. */
  refusal(client: string, error: RpcError, retryMs: number): { ok: false; error?: RpcError } {
    const now = this.now();
    const until = this.told.get(client);
    if ((until !== undefined && until > now) || !this.allow()) return { ok: false };
    this.told.set(client, now + retryMs);
    return { ok: false, error };
  }
}
