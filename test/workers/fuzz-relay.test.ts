// Bounded fuzz run (issue 7): random and mutated frames on the WebSocket endpoints (the public shard
// and an owner shard, unauthenticated and authenticated connections), random requests on
// /api/agents and on the router's own paths (shards, NIP-11, upgrades, unknown paths). Asserts that nothing crashes (a thrown error or unhandled rejection in the Worker
// fails the run; sockets stay open), every answer is a standard frame with a standard prefix,
// every 4xx is JSON with an `error`, and a bystander connection on the same shard keeps getting
// its REQ answered (EOSE) within 1 s throughout.
//
// Budget: 3 seeds per endpoint in `npm test` (a few seconds); `npm run fuzz` runs for FUZZ_SECONDS
// (default 120) from FUZZ_SEED (default 1), passed into workerd as VITE_FUZZ_SECONDS and
// VITE_FUZZ_SEED. Seeds are deterministic (one per round: the first, then +1); a failure names
// its seed and frame, and `FUZZ_SEED=<seed> FUZZ_SECONDS=1 npm run fuzz` replays that round first.

import { SELF } from 'cloudflare:test';
import { describe, expect, it } from 'vitest';
import fc from 'fast-check';
import { generateSecretKey, getPublicKey } from 'nostr-tools/pure';
import { apiRequest, frame, routerRequest, type FuzzKeys } from '../fuzz/generators.js';
import { BASE, connect, sign, type TestSocket } from './helpers.js';
import { TEST_OWNER, TEST_OWNER_SK } from './test-keys.js';

const env = (import.meta as unknown as { env: Record<string, string | undefined> }).env;
const SECONDS = Number(env.VITE_FUZZ_SECONDS ?? 0);
const FIRST_SEED = Number(env.VITE_FUZZ_SEED ?? 1);
/** In `npm test`: this many rounds per endpoint (each round is FRAMES_PER_ROUND frames on a fresh connection). */
const ROUNDS = SECONDS > 0 ? Number.POSITIVE_INFINITY : 3;
const FRAMES_PER_ROUND = 40;
const API_PER_ROUND = 25;
const BYSTANDER_BOUND_MS = 1000;

const VERBS = new Set(['OK', 'CLOSED', 'NOTICE', 'EOSE', 'EVENT', 'COUNT', 'AUTH']);
const PREFIX = /^(invalid|restricted|auth-required|rate-limited|blocked|duplicate|error): \S/;

const owner: FuzzKeys = { sk: TEST_OWNER_SK, pk: TEST_OWNER };
const signers: FuzzKeys[] = [owner, ...Array.from({ length: 3 }, () => {
  const sk = generateSecretKey();
  return { sk, pk: getPublicKey(sk) };
})];

/** Rounds to run: a fixed count, or until the deadline of `npm run fuzz`. */
function* rounds(): Generator<number> {
  const deadline = Date.now() + SECONDS * 1000;
  for (let r = 0; r < ROUNDS; r++) {
    if (SECONDS > 0 && Date.now() > deadline) return;
    yield FIRST_SEED + r;
  }
}

/** What is wrong with one relay frame, or undefined when it is a standard answer. */
function problemWith(f: unknown[]): string | undefined {
  const [verb, a, b, c] = f;
  if (typeof verb !== 'string' || !VERBS.has(verb)) return `unknown verb ${JSON.stringify(verb)}`;
  switch (verb) {
    case 'OK':
      if (typeof a !== 'string' || typeof b !== 'boolean' || typeof c !== 'string') return 'OK must be [OK, id, bool, message]';
      if (!b && !PREFIX.test(c)) return `OK false without a standard prefix: ${c}`;
      if (b && c !== '' && !PREFIX.test(c)) return `OK true with a non-standard message: ${c}`;
      return undefined;
    case 'CLOSED':
      return typeof a === 'string' && typeof b === 'string' && PREFIX.test(b) ? undefined : `CLOSED without a standard prefix: ${JSON.stringify(f)}`;
    case 'NOTICE':
      return typeof a === 'string' && PREFIX.test(a) ? undefined : `NOTICE without a standard prefix: ${JSON.stringify(f)}`;
    case 'EOSE':
      return typeof a === 'string' ? undefined : 'EOSE without a subscription id';
    case 'EVENT':
      return typeof a === 'string' && typeof b === 'object' && b !== null ? undefined : 'EVENT must be [EVENT, subId, event]';
    case 'COUNT':
      return typeof a === 'string' && typeof (b as { count?: unknown })?.count === 'number' ? undefined : 'COUNT must be [COUNT, subId, {count}]';
    default:
      return typeof a === 'string' ? undefined : 'AUTH must carry a challenge';
  }
}

/** The bystander asks for a REQ round trip; returns the milliseconds it took. */
async function bystanderRoundTrip(b: TestSocket, n: number): Promise<number> {
  const started = Date.now();
  const res = await b.req(`b${n}`, { kinds: [1], limit: 1 });
  const took = Date.now() - started;
  expect(res.closed, 'the bystander REQ was refused').toBeUndefined();
  b.send(['CLOSE', `b${n}`]);
  return took;
}

/** A paced fuzz round on one connection: frames in small batches, each batch closed by a barrier REQ. */
async function fuzzRound(path: string, seed: number, authenticate: boolean, bystander: TestSocket, probe: { n: number; worst: number }) {
  const ip = `198.18.${seed % 250}.${Math.floor(Math.random() * 250)}`;
  const s = await connect(path, { 'CF-Connecting-IP': ip });
  if (authenticate) expect((await s.auth(owner))[2]).toBe(true);
  const frames = fc.sample(frame(signers, { challenge: s.challenge, relayUrl: s.url }), { seed, numRuns: FRAMES_PER_ROUND });
  const where = (i: number) => `seed ${seed} (${path}, ${authenticate ? 'authenticated' : 'anonymous'}), frame #${i}: ${frames[i]!.slice(0, 300)}`;
  for (let i = 0; i < frames.length; i += 8) {
    for (const f of frames.slice(i, i + 8)) s.send(f);
    // The barrier: the shard answers one connection's messages in order.
    const barrier = `barrier-${i}`;
    s.send(['REQ', barrier, { limit: 0 }]);
    try {
      await s.next((f) => (f[0] === 'EOSE' || f[0] === 'CLOSED') && f[1] === barrier, 20_000);
    } catch (error) {
      throw new Error(`${where(i)}: no answer to the barrier (${String(error)})`);
    }
    for (const f of s.frames.splice(0)) {
      const problem = problemWith(f);
      if (problem) throw new Error(`${where(i)}: ${problem}; frame ${JSON.stringify(f).slice(0, 300)}`);
    }
    expect(s.closed, where(i)).toBeUndefined();
    const took = await bystanderRoundTrip(bystander, probe.n++);
    probe.worst = Math.max(probe.worst, took);
    expect(took, `${where(i)}: the bystander waited ${took} ms`).toBeLessThan(BYSTANDER_BOUND_MS);
  }
  s.send(['CLOSE', 'x']);
  s.close();
}

describe('fuzz: relay WebSocket endpoints', () => {
  for (const [name, path] of [
    ['the public shard', '/'],
    ['an owner shard', `/r/${TEST_OWNER}`],
  ] as const) {
    it(`${name}: random and mutated frames get standard answers; a bystander is answered within ${BYSTANDER_BOUND_MS} ms`, async () => {
      const bystander = await connect(path, { 'CF-Connecting-IP': '198.19.0.1' });
      const probe = { n: 0, worst: 0 };
      let count = 0;
      for (const seed of rounds()) {
        await fuzzRound(path, seed, count % 3 === 1, bystander, probe);
        count++;
      }
      expect(count).toBeGreaterThan(0);
      // The bystander's connection is still usable at the end, and its stored history is intact.
      const e = sign({ sk: TEST_OWNER_SK, pk: TEST_OWNER }, { content: `after the fuzz ${FIRST_SEED}` });
      expect(await bystander.publish(e)).toEqual(['OK', e.id, true, '']);
      expect((await bystander.req('end', { ids: [e.id] })).events).toEqual([e]);
      console.log(`fuzz ${name}: ${count} rounds of ${FRAMES_PER_ROUND} frames from seed ${FIRST_SEED}; bystander worst ${probe.worst} ms`);
      bystander.close();
    }, Math.max(120_000, SECONDS * 1000 + 60_000));
  }
});

describe('fuzz: /api/agents', () => {
  it('random methods, paths, headers and bodies: no 5xx, every error is JSON with an error field', async () => {
    let count = 0;
    for (const seed of rounds()) {
      const requests = fc.sample(apiRequest(BASE, owner, signers[1]!.pk), { seed, numRuns: API_PER_ROUND });
      for (const [i, r] of requests.entries()) {
        const where = `seed ${seed}, request #${i}: ${r.method} ${r.path} ${JSON.stringify(r.headers).slice(0, 200)} ${(r.body ?? '').slice(0, 200)}`;
        const res = await SELF.fetch(`${BASE}${r.path}`, { method: r.method, headers: r.headers, ...(r.body !== undefined ? { body: r.body } : {}) });
        const text = await res.text();
        expect(res.status, where).toBeLessThan(500);
        if (res.status >= 400 && r.method !== 'HEAD') {
          let json: unknown;
          expect(() => (json = JSON.parse(text)), `${where}: not JSON: ${text.slice(0, 200)}`).not.toThrow();
          expect(typeof (json as { error?: unknown }).error, `${where}: ${text.slice(0, 200)}`).toBe('string');
        }
      }
      count++;
    }
    expect(count).toBeGreaterThan(0);
  }, Math.max(120_000, SECONDS * 1000 + 60_000));
});

describe('fuzz: router paths', () => {
  it('random paths, methods, upgrades and Accept headers: no 5xx, every error is JSON with an error field, upgrades give a socket', async () => {
    let count = 0;
    for (const seed of rounds()) {
      for (const [i, r] of fc.sample(routerRequest(TEST_OWNER), { seed, numRuns: API_PER_ROUND }).entries()) {
        const where = `seed ${seed}, request #${i}: ${r.method} ${r.path} ${JSON.stringify(r.headers)}`;
        const res = await SELF.fetch(`${BASE}${r.path}`, { method: r.method, headers: r.headers });
        expect(res.status, where).toBeLessThan(500);
        if (res.status === 101) {
          const ws = res.webSocket;
          expect(ws, where).toBeTruthy();
          ws!.accept();
          ws!.close(1000, 'fuzz');
          continue;
        }
        const text = await res.text();
        if (res.status >= 400 && r.method !== 'HEAD') {
          let json: unknown;
          expect(() => (json = JSON.parse(text)), `${where}: not JSON: ${text.slice(0, 200)}`).not.toThrow();
          // /mcp speaks MCP: its HTTP errors are JSON-RPC error responses ({jsonrpc, error: {code, message}, id}).
          const error = (json as { error?: unknown }).error;
          const message = /^\/mcp(\?|$)/.test(r.path) ? (error as { message?: unknown } | undefined)?.message : error;
          expect(typeof message, `${where}: ${text.slice(0, 200)}`).toBe('string');
        }
      }
      count++;
    }
    expect(count).toBeGreaterThan(0);
  }, Math.max(120_000, SECONDS * 1000 + 60_000));
});
