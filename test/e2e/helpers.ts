// Helpers for the end-to-end tests: `ws` sockets for the relay client (with optional frame
// recording or dropping), keys and signed events, and polling.

import WebSocket from 'ws';
import { finalizeEvent, generateSecretKey, getPublicKey } from 'nostr-tools/pure';
import type { NostrEvent } from '../../src/shared/event.js';
import { makeHttpAuthHeader } from '../../src/shared/nip98.js';
import { RelayClient, type AuthSigner, type RelayClientOptions, type SocketEvent, type SocketLike } from '../../src/shared/relay-client.js';

export interface Key {
  sk: Uint8Array;
  pk: string;
}

export const newKey = (): Key => {
  const sk = generateSecretKey();
  return { sk, pk: getPublicKey(sk) };
};

export const nowSeconds = (): number => Math.floor(Date.now() / 1000);

export function signed(key: Key, kind: number, content: string, tags: string[][] = [], createdAt = nowSeconds()): NostrEvent {
  return finalizeEvent({ kind, content, tags, created_at: createdAt }, key.sk);
}

export const signer =
  (key: Key): AuthSigner =>
  async (template) =>
    finalizeEvent(template, key.sk);

export const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

export async function waitFor(cond: () => boolean, what: string, timeoutMs = 10_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!cond()) {
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await sleep(10);
  }
}

/** One socket the client opened: the raw `ws` socket and every frame the client sent on it. */
export interface OpenedSocket {
  ws: WebSocket;
  sent: string[];
  /** When true, frames are recorded but never reach the relay (a black-holed connection). */
  drop: (frame: string) => boolean;
}

/** A `ws` socket seen through SocketLike, recording (and optionally dropping) outgoing frames. */
function wrap(opened: OpenedSocket): SocketLike {
  const { ws } = opened;
  return {
    get readyState() {
      return ws.readyState;
    },
    send(data: string) {
      opened.sent.push(data);
      if (!opened.drop(data)) ws.send(data);
    },
    close: (code?: number, reason?: string) => ws.close(code, reason),
    addEventListener: (type: 'open' | 'message' | 'close' | 'error', listener: (event: SocketEvent) => void) =>
      ws.addEventListener(type, listener),
  };
}

export interface TestClient {
  client: RelayClient;
  sockets: OpenedSocket[];
  /** Message types ("REQ", "AUTH", ...) the client sent, over all its sockets. */
  sentTypes: () => string[];
}

/**
 * Creates clients that are all closed by closeAll(). `drop(frame, socketIndex)` decides which
 * outgoing frames are swallowed (default: none).
 */
export function clientFactory() {
  const made: RelayClient[] = [];
  const create = (
    url: string,
    options: Partial<RelayClientOptions> = {},
    drop: (frame: string, socketIndex: number) => boolean = () => false,
  ): TestClient => {
    const sockets: OpenedSocket[] = [];
    const client = new RelayClient({
      url,
      socket: (u) => {
        const index = sockets.length;
        const opened: OpenedSocket = { ws: new WebSocket(u), sent: [], drop: (f) => drop(f, index) };
        sockets.push(opened);
        return wrap(opened);
      },
      ...options,
    });
    made.push(client);
    const sentTypes = () => sockets.flatMap((s) => s.sent.map((f) => (JSON.parse(f) as unknown[])[0] as string));
    return { client, sockets, sentTypes };
  };
  const closeAll = () => {
    for (const c of made.splice(0)) c.close();
  };
  return { create, closeAll };
}

/** Runs a REQ to EOSE and returns the ids received, in order. */
export async function fetchIds(client: RelayClient, filters: Parameters<RelayClient['subscribe']>[0]): Promise<string[]> {
  const ids: string[] = [];
  await new Promise<void>((resolve, reject) => {
    const sub = client.subscribe(filters, {
      onEvent: (e) => ids.push(e.id),
      onEose: () => {
        sub.close();
        resolve();
      },
      onClosed: (m) => reject(new Error(`subscription closed: ${m}`)),
    });
  });
  return ids;
}

/** A management API caller on `base`, every call signed NIP-98 by `sk` (the JSON answer, or null for an empty body). */
export const signedApi =
  (base: string, sk: Uint8Array) =>
  async (method: string, path: string, body?: unknown): Promise<{ status: number; json: unknown }> => {
    const url = `${base}${path}`;
    const text = body === undefined ? undefined : JSON.stringify(body);
    const res = await fetch(url, {
      method,
      headers: { Authorization: makeHttpAuthHeader(sk, url, method, text), ...(text ? { 'Content-Type': 'application/json' } : {}) },
      ...(text !== undefined ? { body: text } : {}),
    });
    const raw = await res.text();
    return { status: res.status, json: raw ? (JSON.parse(raw) as unknown) : null };
  };
