// @ts-check
// The DVMCP bridge pass of the bench. The real @modelcontextprotocol/server-everything runs on a
// free 127.0.0.1 port (started by test/mcp/global-setup.ts `startEverything`); the Worker is served
// as for the agent pass (bench/lib/server.mjs) with EDGESTR_OWNERS = a bench owner, EDGESTR_SECRET
// set and EDGESTR_OUTBOUND_ALLOW=127.0.0.1:*. The owner registers server-everything through
// POST /api/bridge/servers (NIP-98) under one server id per series and waits for their 31316 on the
// public shard. Then, all on this process's clock (performance.now()):
//   direct:     the official MCP SDK Client calls `echo` over Streamable HTTP, one call at a time;
//   plain:      a Nostr client (its own key, NIP-42 on the public shard) publishes a 25910
//               tools/call `echo` to the provider and waits for the 26910 with `e` = request id;
//   wrapped:    the same request gift-wrapped (1059 around a seal signed by the client around the
//               DVMCP event; src/shared/dvmcp-wrap.ts, bundled with esbuild), the 1059 answer
//               unwrapped and its seal verified;
//   concurrent: 50 clients, each its own key and socket, a bounded number of calls each, next to
//               50 direct SDK clients (each its own MCP session) doing the same.
// The bridge's limits (workers/common/dvmcp-server/limits.ts) have no override binding, so the bench stays
// under them: each key makes at most `callsPerKey` calls (30 a minute allowed), one at a time (4 in
// progress allowed); each series has its own server id (300 calls a minute allowed per server).
// Every call is prepared (signed, wrapped) before its clock starts; the clock stops when the
// answer has been received (a gift wrap: unwrapped, its seal verified), which is then parsed and
// checked (the client's unwrap time is also recorded alone). The workerd process's CPU time (/proc) over each series is divided by the calls made.
// Every loop is bounded by a count and a deadline.

import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { build } from 'esbuild';
import { finalizeEvent, generateSecretKey, getPublicKey } from 'nostr-tools/pure';
import { api, authedSocket, closeAll, subscribe } from './agent.mjs';
import { Deadline, latencySummary, nowSeconds, randomHex } from './client.mjs';
import { startRelay, workerdCpuMeter, ROOT } from './server.mjs';

/**
 * @typedef {import('./client.mjs').NostrEvent} NostrEvent
 * @typedef {{ n: number, p50: number, p99: number, max: number }} Latency
 * @typedef {'plain' | 'wrapped'} Form
 * @typedef {{ calls: number, warmup: number, callsPerKey: number, concurrentClients: number, callsPerClient: number,
 *   callTimeoutMs: number, budgetMs: number }} BridgeConfig
 * @typedef {{ latency: Latency, unwrap: Latency, keys: number, calls: number, cpuPerCallMs: number, errors: string[] }} SequentialResult
 * @typedef {{ clients: number, callsPerClient: number, latency: Latency, throughput: number, durationMs: number,
 *   cpuPerCallMs: number, errors: string[] }} ConcurrentResult
 * @typedef {import('../../workers/common/dvmcp-server/limits.js').BridgeLimits} BridgeLimits
 * @typedef {{ provider: string, limits: BridgeLimits, direct: Latency, plain?: SequentialResult, wrapped?: SequentialResult,
 *   directConcurrent?: ConcurrentResult, concurrent?: ConcurrentResult, errors: Record<string, string> }} BridgeResult
 */

/**
 * The project's code the client side uses, bundled for Node with esbuild (the one wrangler uses).
 * @typedef {typeof import('../../src/shared/dvmcp-wrap.js') & typeof import('../../src/shared/nip59.js')
 *   & typeof import('../../src/shared/dvmcp.js') & typeof import('../../src/shared/verify.js')
 *   & typeof import('../../src/shared/nip44.js') & typeof import('../../workers/common/dvmcp-server/limits.js')
 *   & typeof import('../../test/mcp/global-setup.js')} Helpers
 */

const DVMCP_REQUEST = 25910;
const DVMCP_RESPONSE = 26910;
const GIFT_WRAP = 1059;

/** Bundles the helpers; startEverything finds server-everything from its own file's location. @returns {Promise<Helpers>} */
async function loadHelpers() {
  const dir = await mkdtemp(join(tmpdir(), 'edgestr-bench-bridge-'));
  try {
    const outfile = join(dir, 'helpers.mjs');
    await build({
      stdin: {
        contents: [
          "export { wrapDvmcp, unwrapDvmcp } from './src/shared/dvmcp-wrap.js';",
          "export { makeRumor } from './src/shared/nip59.js';",
          "export { parseResponse } from './src/shared/dvmcp.js';",
          "export { nobleVerifier } from './src/shared/verify.js';",
          "export { ConversationKeyCache } from './src/shared/nip44.js';",
          "export { DEFAULT_BRIDGE_LIMITS } from './workers/common/dvmcp-server/limits.js';",
          "export { startEverything, stop } from './test/mcp/global-setup.js';",
        ].join('\n'),
        resolveDir: ROOT,
        loader: 'ts',
        sourcefile: 'bench-bridge-helpers.ts',
      },
      define: { 'import.meta.url': JSON.stringify(pathToFileURL(join(ROOT, 'test', 'mcp', 'global-setup.ts')).href) },
      bundle: true,
      platform: 'node',
      format: 'esm',
      target: 'node20',
      outfile,
      logLevel: 'error',
    });
    return await import(pathToFileURL(outfile).href);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

/** Refuses a config the bridge's limits would throttle. @param {BridgeConfig} c @param {BridgeLimits} limits */
function checkAgainstLimits(c, limits) {
  if (c.callsPerKey <= c.warmup) throw new Error(`callsPerKey ${c.callsPerKey} leaves no measured call after ${c.warmup} warm-up calls`);
  if (Math.max(c.callsPerKey, c.warmup + c.callsPerClient) > limits.clientPerMinute) {
    throw new Error(`a key would make ${Math.max(c.callsPerKey, c.warmup + c.callsPerClient)} calls; the bridge allows ${limits.clientPerMinute} a minute per key`);
  }
  const keys = Math.ceil(c.calls / (c.callsPerKey - c.warmup));
  const perServer = Math.max(c.calls + keys * c.warmup, c.concurrentClients * (c.warmup + c.callsPerClient));
  if (perServer > limits.serverPerMinute) throw new Error(`a series would send ${perServer} requests to one server; the bridge allows ${limits.serverPerMinute} a minute`);
}

/**
 * Runs the whole bridge pass: server-everything, Worker, registration, the series.
 * @param {{ relayLimits: string, log: (s: string) => void, deadline: Deadline, config: BridgeConfig }} o
 * @returns {Promise<BridgeResult>}
 */
export async function bridgeBench(o) {
  const { log, config } = o;
  const deadline = new Deadline(Math.min(config.budgetMs, o.deadline.left()), 'the bridge pass');
  const h = await loadHelpers();
  checkAgainstLimits(config, h.DEFAULT_BRIDGE_LIMITS);
  const everything = await h.startEverything('streamableHttp');
  log(`server-everything on ${everything.url}`);
  try {
    const ownerSk = generateSecretKey();
    const owner = getPublicKey(ownerSk);
    log('bundling the Worker and starting workerd (bridge pass, Durable Object storage under the OS temp dir)…');
    const relay = await startRelay({
      relayLimits: o.relayLimits,
      // Test mode: this deployment's own host is then its host and port (in production its hostname,
      // any port: 127.0.0.1 would be refused as a loop), so server-everything on another port of it is allowed.
      bindings: { EDGESTR_OWNERS: owner, EDGESTR_SECRET: randomHex(32), EDGESTR_OUTBOUND_ALLOW: '127.0.0.1:*', EDGESTR_ENV: 'test' },
    });
    log(`relay on ${relay.httpUrl}`);
    try {
      return await runSeries({ h, log, deadline, config, upstream: everything.url, httpUrl: relay.httpUrl, wsUrl: relay.wsUrl, ownerSk, cpu: workerdCpuMeter() });
    } finally {
      await relay.stop();
    }
  } finally {
    await h.stop(everything.child);
  }
}

/**
 * @param {{ h: Helpers, log: (s: string) => void, deadline: Deadline, config: BridgeConfig, upstream: string,
 *   httpUrl: string, wsUrl: string, ownerSk: Uint8Array, cpu: () => number }} o
 * @returns {Promise<BridgeResult>}
 */
async function runSeries(o) {
  const { h, log, deadline, config } = o;
  const publicUrl = `${o.wsUrl}/`;
  /** One server id per series: each has its own per-server window. */
  const servers = { plain: 'bench-plain', wrapped: 'bench-wrapped', concurrent: 'bench-concurrent' };
  let provider = '';
  for (const id of Object.values(servers)) {
    const reg = await api(o.httpUrl, o.ownerSk, 'POST', '/api/bridge/servers', { id, url: o.upstream, name: `server-everything (${id})` });
    if (reg.status !== 201) throw new Error(`POST /api/bridge/servers ${id}: ${reg.status} ${JSON.stringify(reg.json)}`);
    provider = String(reg.json.provider);
  }
  log(`provider ${provider.slice(0, 12)}… with ${Object.values(servers).join(', ')}; waiting for their 31316 on ${publicUrl}…`);
  await announced(o.ownerSk, publicUrl, provider, Object.values(servers), Math.min(30_000, deadline.left()));

  const direct = await directSeries(o.upstream, config, deadline);
  log(`  direct MCP HTTP: n ${direct.n}; p50 ${direct.p50.toFixed(2)} / p99 ${direct.p99.toFixed(2)} ms`);

  /** @type {Record<string, string>} */
  const errors = {};
  const ctx = { h, deadline, config, publicUrl, provider, cpu: o.cpu };
  /** A series that fails is recorded in `errors`, and the next one runs. @template T @param {string} name @param {() => Promise<T>} run @param {(r: T) => string} line */
  const series = async (name, run, line) => {
    try {
      const r = await run();
      log(`  ${name}: ${line(r)}`);
      return r;
    } catch (e) {
      errors[name] = e instanceof Error ? e.message : String(e);
      log(`  ${name} FAILED: ${errors[name]}`);
      return undefined;
    }
  };
  /** @param {SequentialResult} r */
  const sequentialLine = (r) =>
    `n ${r.latency.n} over ${r.keys} keys; p50 ${r.latency.p50.toFixed(2)} / p99 ${r.latency.p99.toFixed(2)} ms; ` +
    `overhead p50 ${(r.latency.p50 - direct.p50).toFixed(2)} ms; client unwrap p50 ${r.unwrap.p50.toFixed(2)} ms; ` +
    `workerd CPU ${r.cpuPerCallMs.toFixed(2)} ms/call${problems(r.errors)}`;
  /** @param {ConcurrentResult} r */
  const concurrentLine = (r) =>
    `${r.clients} clients × ${r.callsPerClient} calls; ${r.throughput.toFixed(1)} calls/s; p50 ${r.latency.p50.toFixed(2)} / p99 ${r.latency.p99.toFixed(2)} ms` +
    `${Number.isFinite(r.cpuPerCallMs) ? `; workerd CPU ${r.cpuPerCallMs.toFixed(2)} ms/call` : ''}${problems(r.errors)}`;
  return {
    provider,
    limits: h.DEFAULT_BRIDGE_LIMITS,
    direct,
    plain: await series('plain', () => sequentialSeries(ctx, servers.plain, 'plain'), sequentialLine),
    wrapped: await series('wrapped', () => sequentialSeries(ctx, servers.wrapped, 'wrapped'), sequentialLine),
    directConcurrent: await series('direct concurrent', () => directConcurrentSeries(o.upstream, config, deadline), concurrentLine),
    concurrent: await series('concurrent', () => concurrentSeries(ctx, servers.concurrent), concurrentLine),
    errors,
  };
}

const problems = (/** @type {string[]} */ errors) => (errors.length ? `; ${errors.length} problems: ${errors.slice(0, 3).join('; ')}` : '');

/**
 * Waits until the provider's 31316 for every id is on the relay at `url`.
 * @param {Uint8Array} sk @param {string} url @param {string} provider @param {string[]} ids @param {number} ms
 */
async function announced(sk, url, provider, ids, ms) {
  const socket = await authedSocket(url, sk);
  try {
    /** @type {Set<string>} */
    const seen = new Set();
    const all = socket.next(
      (f) => {
        if (f[0] !== 'EVENT' || f[1] !== 'ann') return false;
        const d = /** @type {NostrEvent} */ (f[2]).tags.find((t) => t[0] === 'd')?.[1];
        if (d) seen.add(d);
        return ids.every((id) => seen.has(id));
      },
      ms,
      `the 31316 of ${ids.join(', ')}`,
    );
    socket.ws.send(JSON.stringify(['REQ', 'ann', { kinds: [31316], authors: [provider] }]));
    await all;
  } finally {
    await closeAll([socket]);
  }
}

/** The echo every call sends, and what server-everything answers. */
const echo = () => {
  const message = `bench ${randomHex(8)}`;
  return { message, expected: `Echo: ${message}` };
};

/** @param {unknown} result @returns {string | undefined} the first text content */
function firstText(result) {
  const content = /** @type {{ content?: Array<{ type?: string, text?: string }> }} */ (result).content;
  return content?.[0]?.type === 'text' ? content[0].text : undefined;
}

/**
 * A direct MCP client: the official SDK Client over Streamable HTTP, connected (initialized).
 * `call` sends one `echo` and resolves with its round trip (ms).
 * @param {string} url @param {BridgeConfig} config @returns {Promise<{ call: () => Promise<number>, close: () => Promise<void> }>}
 */
async function directCaller(url, config) {
  const client = new Client({ name: 'edgestr-bench', version: '1.0.0' });
  await client.connect(new StreamableHTTPClientTransport(new URL(url)));
  const call = async () => {
    const { message, expected } = echo();
    const started = performance.now();
    const result = await client.callTool({ name: 'echo', arguments: { message } }, undefined, { timeout: config.callTimeoutMs });
    const took = performance.now() - started;
    if (firstText(result) !== expected) throw new Error(`direct echo answered ${JSON.stringify(result).slice(0, 200)}`);
    return took;
  };
  return { call, close: () => client.close() };
}

/**
 * Direct MCP calls, one at a time, after `warmup`.
 * @param {string} url @param {BridgeConfig} config @param {Deadline} deadline @returns {Promise<Latency>}
 */
async function directSeries(url, config, deadline) {
  const caller = await directCaller(url, config);
  try {
    /** @type {number[]} */
    const samples = [];
    for (let i = 0; i < config.warmup + config.calls && deadline.left() > config.callTimeoutMs; i++) {
      const took = await caller.call();
      if (i >= config.warmup) samples.push(took);
    }
    if (samples.length === 0) throw new Error('direct MCP HTTP: no call measured before the deadline');
    return latencySummary(samples);
  } finally {
    await caller.close();
  }
}

/**
 * Opens `n` callers, 10 at a time; `warmup` calls each (all callers together).
 * @template {{ close: () => Promise<void> }} C
 * @param {number} n @param {() => Promise<C>} open @param {(c: C) => Promise<unknown>} warm @param {BridgeConfig} config
 * @param {Deadline} deadline @param {C[]} into  filled as callers open (the caller closes them, also on failure)
 */
async function openWarm(n, open, warm, config, deadline, into) {
  for (let i = 0; i < n; i += 10) {
    deadline.check();
    into.push(...(await Promise.all(Array.from({ length: Math.min(10, n - i) }, open))));
  }
  await Promise.all(into.map(async (c) => {
    for (let i = 0; i < config.warmup; i++) await warm(c);
  }));
}

/**
 * Every caller makes `callsPerClient` calls, one at a time, all callers at once.
 * Throughput = calls answered ÷ (last answer − first send).
 * @template C @param {C[]} callers @param {(c: C) => Promise<number>} call @param {BridgeConfig} config @param {Deadline} deadline
 * @returns {Promise<{ latency: Latency, throughput: number, durationMs: number, attempts: number, errors: string[] }>}
 */
async function concurrently(callers, call, config, deadline) {
  /** @type {number[]} */
  const samples = [];
  /** @type {string[]} */
  const errors = [];
  const started = performance.now();
  await Promise.all(
    callers.map(async (c) => {
      for (let i = 0; i < config.callsPerClient && deadline.left() > config.callTimeoutMs; i++) {
        try {
          samples.push(await call(c));
        } catch (e) {
          errors.push(e instanceof Error ? e.message : String(e));
        }
      }
    }),
  );
  const durationMs = performance.now() - started;
  if (samples.length === 0) throw new Error(`concurrent: no call answered (${errors.slice(0, 3).join('; ') || 'deadline'})`);
  return { latency: latencySummary(samples), throughput: samples.length / (durationMs / 1000), durationMs, attempts: samples.length + errors.length, errors };
}

/**
 * `concurrentClients` direct MCP clients at once (each its own session), as the bridge's
 * concurrent series: what server-everything alone sustains on this machine.
 * @param {string} url @param {BridgeConfig} config @param {Deadline} deadline @returns {Promise<ConcurrentResult>}
 */
async function directConcurrentSeries(url, config, deadline) {
  /** @type {Array<Awaited<ReturnType<typeof directCaller>>>} */
  const callers = [];
  try {
    await openWarm(config.concurrentClients, () => directCaller(url, config), (c) => c.call(), config, deadline, callers);
    const r = await concurrently(callers, (c) => c.call(), config, deadline);
    return { clients: callers.length, callsPerClient: config.callsPerClient, latency: r.latency, throughput: r.throughput, durationMs: r.durationMs, cpuPerCallMs: NaN, errors: r.errors };
  } finally {
    await Promise.all(callers.map((c) => c.close()));
  }
}

/**
 * @typedef {{ h: Helpers, deadline: Deadline, config: BridgeConfig, publicUrl: string, provider: string, cpu: () => number }} Ctx
 * @typedef {{ ms: number, unwrapMs: number }} CallTime  the round trip; of it, the client's unwrap of the answer
 * @typedef {{ call: (serverId: string, form: Form) => Promise<CallTime>, close: () => Promise<void> }} NostrCaller
 */

/**
 * A DVMCP client: a fresh key, its socket on the public shard (NIP-42 as that key), subscribed to
 * the 26910 and 1059 addressed to it. `call` sends one `echo` and resolves with its round trip (ms).
 * @param {Ctx} ctx @returns {Promise<NostrCaller>}
 */
async function nostrCaller(ctx) {
  const { h, provider, config } = ctx;
  const sk = generateSecretKey();
  const pk = getPublicKey(sk);
  const keys = new h.ConversationKeyCache(4);
  const socket = await authedSocket(ctx.publicUrl, sk);
  /** Pending calls by the request (or rumor) id. @type {Map<string, (content: string, at: number, unwrapMs: number) => void>} */
  const pending = new Map();
  /** Why the last gift wrap addressed to this key could not be opened (told when a call times out). */
  let unwrapProblem = '';
  socket.listen((f) => {
    if (f[0] !== 'EVENT' || (f[1] !== 'answers' && f[1] !== 'wraps')) return;
    const arrived = performance.now();
    const e = /** @type {NostrEvent} */ (f[2]);
    /** @type {{ tags: string[][], content: string } | undefined} */
    let answer;
    if (e.kind === DVMCP_RESPONSE && e.pubkey === provider) answer = e;
    else if (e.kind === GIFT_WRAP) {
      const opened = h.unwrapDvmcp(e, sk, keys, h.nobleVerifier);
      if (!opened.ok) unwrapProblem = `; a gift wrap could not be opened: ${opened.error}`;
      else if (opened.value.message.pubkey === provider && opened.value.message.kind === DVMCP_RESPONSE) answer = opened.value.message;
    }
    const requestId = answer?.tags.find((t) => t[0] === 'e')?.[1];
    const done = requestId === undefined ? undefined : pending.get(requestId);
    const at = performance.now();
    if (answer && done) done(answer.content, at, e.kind === GIFT_WRAP ? at - arrived : 0);
  });
  await subscribe(socket, 'answers', { kinds: [DVMCP_RESPONSE], '#p': [pk], since: nowSeconds() - 5 });
  await subscribe(socket, 'wraps', { kinds: [GIFT_WRAP], '#p': [pk], since: nowSeconds() - 5 });

  /** @type {NostrCaller['call']} */
  const call = async (serverId, form) => {
    const { message, expected } = echo();
    const t = {
      kind: DVMCP_REQUEST,
      created_at: nowSeconds(),
      tags: [['p', provider], ['method', 'tools/call'], ['s', serverId]],
      content: JSON.stringify({ method: 'tools/call', params: { name: 'echo', arguments: { message } } }),
    };
    const event = form === 'plain' ? finalizeEvent(t, sk) : h.wrapDvmcp(t, sk, pk, provider, keys);
    const requestId = form === 'plain' ? event.id : h.makeRumor({ pubkey: pk, ...t }).id;
    const frame = JSON.stringify(['EVENT', event]);
    const ms = Math.max(1_000, Math.min(config.callTimeoutMs, ctx.deadline.left()));
    /** @type {Promise<{ content: string, at: number, unwrapMs: number }>} */
    const answered = new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        pending.delete(requestId);
        off();
        reject(new Error(`no ${form} answer within ${ms} ms${unwrapProblem}`));
      }, ms);
      const off = socket.listen((f) => {
        if (f[0] !== 'OK' || f[1] !== event.id || f[2] === true) return;
        clearTimeout(timer);
        pending.delete(requestId);
        off();
        reject(new Error(`request refused by the relay: ${f[3]}`));
      });
      pending.set(requestId, (content, at, unwrapMs) => {
        clearTimeout(timer);
        pending.delete(requestId);
        off();
        resolve({ content, at, unwrapMs });
      });
    });
    const started = performance.now();
    socket.ws.send(frame);
    const { content, at, unwrapMs } = await answered;
    const parsed = h.parseResponse(content);
    if (!parsed.ok) throw new Error(`${form} call answered error ${parsed.error.code}: ${parsed.error.message}`);
    if (firstText(parsed.value) !== expected) throw new Error(`${form} call answered ${content.slice(0, 200)}`);
    return { ms: at - started, unwrapMs };
  };
  return { call, close: () => closeAll([socket]) };
}

/**
 * `config.calls` measured calls one at a time, by fresh keys in turn (each: `warmup` unmeasured
 * calls, which open its upstream session, then measured ones up to `callsPerKey` in all).
 * @param {Ctx} ctx @param {string} serverId @param {Form} form @returns {Promise<SequentialResult>}
 */
async function sequentialSeries(ctx, serverId, form) {
  const { config, deadline } = ctx;
  /** @type {CallTime[]} */
  const samples = [];
  /** @type {string[]} */
  const errors = [];
  let keys = 0;
  let attempts = 0;
  let calls = 0;
  const cpuStart = ctx.cpu();
  while (samples.length < config.calls && attempts < config.calls * 2 && deadline.left() > config.callTimeoutMs) {
    const caller = await nostrCaller(ctx);
    keys += 1;
    try {
      for (let i = 0; i < config.warmup; i++) {
        calls += 1;
        await caller.call(serverId, form);
      }
      for (let i = config.warmup; i < config.callsPerKey && samples.length < config.calls && deadline.left() > config.callTimeoutMs; i++) {
        attempts += 1;
        calls += 1;
        try {
          samples.push(await caller.call(serverId, form));
        } catch (e) {
          errors.push(e instanceof Error ? e.message : String(e));
        }
      }
    } finally {
      await caller.close();
    }
  }
  const cpuMs = ctx.cpu() - cpuStart;
  if (samples.length === 0) throw new Error(`${form}: no call measured (${errors.slice(0, 3).join('; ') || 'deadline'})`);
  return {
    latency: latencySummary(samples.map((x) => x.ms)),
    unwrap: latencySummary(samples.map((x) => x.unwrapMs)),
    keys,
    calls,
    cpuPerCallMs: cpuMs / calls,
    errors,
  };
}

/**
 * `concurrentClients` clients at once, each its own key and socket: `warmup` calls each (all
 * clients together), then `callsPerClient` plain calls each, one at a time per client.
 * @param {Ctx} ctx @param {string} serverId @returns {Promise<ConcurrentResult>}
 */
async function concurrentSeries(ctx, serverId) {
  const { config, deadline } = ctx;
  /** @type {NostrCaller[]} */
  const callers = [];
  try {
    await openWarm(config.concurrentClients, () => nostrCaller(ctx), (c) => c.call(serverId, 'plain'), config, deadline, callers);
    const cpuStart = ctx.cpu();
    const r = await concurrently(callers, async (c) => (await c.call(serverId, 'plain')).ms, config, deadline);
    const cpuMs = ctx.cpu() - cpuStart;
    return { clients: callers.length, callsPerClient: config.callsPerClient, latency: r.latency, throughput: r.throughput, durationMs: r.durationMs, cpuPerCallMs: cpuMs / r.attempts, errors: r.errors };
  } finally {
    await Promise.all(callers.map((c) => c.close()));
  }
}
