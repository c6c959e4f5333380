// @ts-check
// Client-side helpers of the bench (Node): `ws` sockets to the relay on 127.0.0.1, event signing
// with libsecp256k1 in Wasm (nostr-wasm), fake events for seeding, deadlines, and percentiles.

import { randomBytes } from 'node:crypto';
import WebSocket from 'ws';
import { initNostrWasm } from 'nostr-wasm';

export const sleep = (/** @type {number} */ ms) => new Promise((r) => setTimeout(r, ms));
export const nowSeconds = () => Math.floor(Date.now() / 1000);
export const randomHex = (bytes = 32) => randomBytes(bytes).toString('hex');

/** Throws once `ms` have passed; every bench loop checks one of these. */
export class Deadline {
  /** @param {number} ms @param {string} what */
  constructor(ms, what) {
    this.at = Date.now() + ms;
    this.what = what;
  }
  left() {
    return this.at - Date.now();
  }
  check() {
    if (Date.now() > this.at) throw new Error(`time budget exhausted: ${this.what}`);
  }
}

/**
 * Resolves when `pred()` holds, checking after each call of the returned `poke`; rejects after `ms`.
 * @param {() => boolean} pred @param {number} ms @param {string} what
 */
export function waiter(pred, ms, what) {
  /** @type {() => void} */
  let poke = () => {};
  const done = new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`timed out after ${ms} ms: ${what}`)), ms);
    poke = () => {
      if (pred()) {
        clearTimeout(timer);
        resolve(undefined);
      }
    };
  });
  return { done, poke: () => poke() };
}

/**
 * @typedef {{ id: string, pubkey: string, created_at: number, kind: number, tags: string[][], content: string, sig: string }} NostrEvent
 * @typedef {{ kind: number, created_at: number, tags: string[][], content: string }} EventTemplate
 */

/** Signs events with nostr-wasm (libsecp256k1) using `keyCount` fresh keys, round-robin; also verifies them the same way. */
export async function makeSigner(keyCount = 64) {
  const nw = await initNostrWasm();
  const keys = Array.from({ length: keyCount }, () => nw.generateSecretKey());
  let next = 0;
  return {
    /** @param {EventTemplate} t @returns {NostrEvent} */
    sign(t) {
      const e = { ...t, id: '', pubkey: '', sig: '' };
      nw.finalizeEvent(e, /** @type {Uint8Array} */ (keys[next++ % keys.length]));
      return e;
    },
    /** nostr-wasm's check of an event in this process (id and signature); false when invalid. @param {NostrEvent} e */
    verify(e) {
      try {
        nw.verifyEvent(e);
        return true;
      } catch {
        return false;
      }
    },
  };
}

/**
 * An unsigned stand-in event for seeding storage directly (queries never look at id or sig).
 * @param {{ author: string, kind: number, createdAt: number, p: string }} f @returns {NostrEvent}
 */
export function fakeEvent({ author, kind, createdAt, p }) {
  return {
    id: randomHex(),
    pubkey: author,
    created_at: createdAt,
    kind,
    tags: [
      ['p', p],
      ['e', randomHex()],
      ['t', 'bench'],
    ],
    content: `seeded event ${randomHex(40)}`,
    sig: randomHex(64),
  };
}

/**
 * Opens a socket and waits until the relay answers on it: the shard sends its NIP-42 challenge
 * lazily, so the socket asks for it with a bare ["AUTH"] once open.
 * @param {string} url @param {number} timeoutMs @returns {Promise<WebSocket>}
 */
export function openSocket(url, timeoutMs = 10_000) {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(url, { perMessageDeflate: false });
    const timer = setTimeout(() => {
      ws.terminate();
      reject(new Error(`connect to ${url}: no AUTH challenge within ${timeoutMs} ms`));
    }, timeoutMs);
    ws.once('error', (e) => {
      clearTimeout(timer);
      reject(e);
    });
    ws.once('open', () => ws.send('["AUTH"]'));
    ws.once('message', (data) => {
      clearTimeout(timer);
      const frame = JSON.parse(data.toString());
      if (Array.isArray(frame) && frame[0] === 'AUTH') resolve(ws);
      else reject(new Error(`expected AUTH first, got ${data.toString().slice(0, 200)}`));
    });
  });
}

/**
 * Opens `n` sockets, `parallel` at a time.
 * @param {string} url @param {number} n @param {Deadline} deadline @returns {Promise<WebSocket[]>}
 */
export async function openSockets(url, n, deadline, parallel = 50) {
  /** @type {WebSocket[]} */
  const out = [];
  for (let i = 0; i < n; i += parallel) {
    deadline.check();
    const batch = Math.min(parallel, n - i);
    out.push(...(await Promise.all(Array.from({ length: batch }, () => openSocket(url)))));
  }
  return out;
}

/** Closes sockets and waits (bounded) until they are closed. @param {WebSocket[]} sockets */
export async function closeSockets(sockets, timeoutMs = 5_000) {
  await Promise.all(
    sockets.map(
      (ws) =>
        new Promise((resolve) => {
          if (ws.readyState === WebSocket.CLOSED) return resolve(undefined);
          const timer = setTimeout(() => {
            ws.terminate();
            resolve(undefined);
          }, timeoutMs);
          ws.once('close', () => {
            clearTimeout(timer);
            resolve(undefined);
          });
          ws.close(1000, 'bench done');
        }),
    ),
  );
}

/**
 * POSTs JSON to the relay and returns the JSON answer. Only for idempotent routes: a request that
 * fails at the connection level (e.g. a pooled keep-alive connection closed by the server) is sent
 * once more.
 * @param {string} url @param {unknown} body @param {number} timeoutMs
 */
export async function postJson(url, body, timeoutMs = 120_000) {
  const text = JSON.stringify(body);
  for (let attempt = 1; ; attempt++) {
    let res;
    try {
      res = await fetch(url, { method: 'POST', body: text, signal: AbortSignal.timeout(timeoutMs) });
    } catch (e) {
      if (attempt < 2 && e instanceof TypeError) continue; // undici's "fetch failed": no HTTP answer
      throw e;
    }
    if (!res.ok) throw new Error(`POST ${url}: ${res.status} ${(await res.text()).slice(0, 500)}`);
    return res.json();
  }
}

/** Nearest-rank percentile of an ascending array. @param {number[]} sorted @param {number} p */
export function percentile(sorted, p) {
  if (sorted.length === 0) return NaN;
  const rank = Math.ceil((p / 100) * sorted.length);
  return /** @type {number} */ (sorted[Math.min(sorted.length, Math.max(1, rank)) - 1]);
}

/** @param {number[]} values */
export function median(values) {
  return percentile([...values].sort((a, b) => a - b), 50);
}

/** @param {number[]} samples */
export function latencySummary(samples) {
  const sorted = [...samples].sort((a, b) => a - b);
  return {
    n: sorted.length,
    p50: percentile(sorted, 50),
    p99: percentile(sorted, 99),
    max: sorted.length ? /** @type {number} */ (sorted[sorted.length - 1]) : NaN,
  };
}
