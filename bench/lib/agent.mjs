// @ts-check
// The hosted-agent pass of the bench. The fake LLM provider (test/fake-provider/server.ts, bundled
// with esbuild and started in this Node process) is the agent's OpenAI-compatible server
// (OPENAI_BASE_URL); the Worker is served as for the relay passes (bench/lib/server.mjs) with
// EDGESTR_OWNERS = a bench owner and EDGESTR_SECRET set. From this process: the owner creates an
// agent with provider "openai" through the management API (NIP-98), waits for its ai.info (31340),
// then a NIP-XX client authenticated (NIP-42) on /r/<owner> sends prompts one at a time and
// decrypts the agent's events, while the owner's socket receives the NIP-AO frames (24200).
// Per run, all on this process's clock (performance.timeOrigin + performance.now(), the fake
// provider's own clock):
//   overhead = (first 25801 of the run received and decrypted − prompt sent)
//              − (the provider's firstDeltaAt − receivedAt of that run's request)
//            = (prompt sent → provider request arrives) + (provider's first delta → client)
// plus the events per response by kind, the NIP-AO frames per run, and the workerd CPU time
// (/proc) over each series divided by the delta events received. Every loop is bounded by a count
// and a deadline.

import { createHash } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { build } from 'esbuild';
import { decrypt, encrypt, getConversationKey } from 'nostr-tools/nip44';
import { finalizeEvent, generateSecretKey, getPublicKey } from 'nostr-tools/pure';
import WebSocket from 'ws';
import { Deadline, latencySummary, median, nowSeconds, randomHex, sleep, waiter } from './client.mjs';
import { ROOT, startRelay, workerdCpuMeter } from './server.mjs';

/**
 * @typedef {import('./client.mjs').NostrEvent} NostrEvent
 * @typedef {import('../../test/fake-provider/server.js').FakeProvider} FakeProvider
 * @typedef {import('../../test/fake-provider/server.js').RecordedRequest} RecordedRequest
 * @typedef {{ n: number, p50: number, p99: number, max: number }} Latency
 * @typedef {{ name: string, scenario: string, runs: number, warmup: number, what: string }} SeriesConfig
 * @typedef {{ series: SeriesConfig[], slowIntervalMs: number, runTimeoutMs: number, budgetMs: number }} AgentConfig
 */

/** The clock of the fake provider's `receivedAt` / `firstDeltaAt` (epoch ms, sub-ms precision). */
const clock = () => performance.timeOrigin + performance.now();

/** NIP-XX kinds the client receives for a run. */
const STATUS = 25800;
const DELTA = 25801;
const RESPONSE = 25803;
const TOOL_CALL = 25804;
const ERROR = 25805;
const AO_FRAME = 24200;

/**
 * Bundles test/fake-provider/server.ts for Node with esbuild (the one wrangler uses) and starts it
 * on 127.0.0.1 in this process.
 * @param {{ slowIntervalMs?: number }} options @returns {Promise<FakeProvider>}
 */
export async function startFakeProvider(options) {
  const dir = await mkdtemp(join(tmpdir(), 'edgestr-bench-fake-'));
  try {
    const outfile = join(dir, 'fake-provider.mjs');
    await build({
      entryPoints: [join(ROOT, 'test', 'fake-provider', 'server.ts')],
      bundle: true,
      platform: 'node',
      format: 'esm',
      target: 'node20',
      outfile,
      logLevel: 'error',
    });
    /** @type {typeof import('../../test/fake-provider/server.js')} */
    const mod = await import(pathToFileURL(outfile).href);
    return await mod.startFakeProvider(options);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

/**
 * A management API call signed with NIP-98 (as src/shared/nip98.ts `makeHttpAuthHeader` builds it).
 * @param {string} httpUrl @param {Uint8Array} sk @param {string} method @param {string} path @param {unknown} [body]
 */
export async function api(httpUrl, sk, method, path, body) {
  const url = `${httpUrl}${path}`;
  const text = body === undefined ? undefined : JSON.stringify(body);
  const tags = [
    ['u', url],
    ['method', method],
  ];
  if (text !== undefined) tags.push(['payload', createHash('sha256').update(text).digest('hex')]);
  tags.push(['nonce', randomHex(8)]);
  const auth = finalizeEvent({ kind: 27235, created_at: nowSeconds(), tags, content: '' }, sk);
  const res = await fetch(url, {
    method,
    headers: { Authorization: `Nostr ${Buffer.from(JSON.stringify(auth)).toString('base64')}`, 'Content-Type': 'application/json' },
    ...(text !== undefined ? { body: text } : {}),
    signal: AbortSignal.timeout(30_000),
  });
  const raw = await res.text();
  return { status: res.status, json: raw ? JSON.parse(raw) : null };
}

/**
 * @typedef {{ ws: WebSocket, listen: (l: (frame: any[], at: number) => void) => () => void,
 *   next: (pred: (frame: any[]) => boolean, ms: number, what: string) => Promise<any[]> }} Socket
 */

/**
 * Opens a socket to `url` and authenticates (NIP-42) as `sk`. Listeners get each frame with its
 * arrival time on `clock()`.
 * @param {string} url @param {Uint8Array} sk @returns {Promise<Socket>}
 */
export async function authedSocket(url, sk, timeoutMs = 10_000) {
  const ws = new WebSocket(url, { perMessageDeflate: false });
  /** @type {Set<(frame: any[], at: number) => void>} */
  const listeners = new Set();
  ws.on('message', (data) => {
    const at = clock();
    let frame;
    try {
      frame = JSON.parse(data.toString());
    } catch {
      return;
    }
    if (Array.isArray(frame)) for (const l of [...listeners]) l(frame, at);
  });
  /** @type {Socket['listen']} */
  const listen = (l) => {
    listeners.add(l);
    return () => listeners.delete(l);
  };
  /** @type {Socket['next']} */
  const next = (pred, ms, what) =>
    new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        off();
        reject(new Error(`timed out after ${ms} ms: ${what}`));
      }, ms);
      const off = listen((f) => {
        if (!pred(f)) return;
        clearTimeout(timer);
        off();
        resolve(f);
      });
    });
  const opened = new Promise((resolve, reject) => {
    ws.once('open', resolve);
    ws.once('error', reject);
  });
  // The shard sends its NIP-42 challenge lazily: ask for it.
  void opened.then(() => ws.send('["AUTH"]'), () => undefined);
  try {
    const [, challenge] = await Promise.all([opened, next((f) => f[0] === 'AUTH', timeoutMs, `AUTH challenge from ${url}`)]);
    const auth = finalizeEvent({ kind: 22242, created_at: nowSeconds(), tags: [['relay', url], ['challenge', String(challenge[1])]], content: '' }, sk);
    const ok = next((f) => f[0] === 'OK' && f[1] === auth.id, timeoutMs, `OK for AUTH on ${url}`);
    ws.send(JSON.stringify(['AUTH', auth]));
    const answer = await ok;
    if (answer[2] !== true) throw new Error(`AUTH refused on ${url}: ${answer[3]}`);
  } catch (e) {
    ws.terminate();
    throw e;
  }
  return { ws, listen, next };
}

/** Sends a REQ and waits for its EOSE. @param {Socket} s @param {string} id @param {object} filter */
export async function subscribe(s, id, filter, timeoutMs = 10_000) {
  const end = s.next((f) => (f[0] === 'EOSE' || f[0] === 'CLOSED') && f[1] === id, timeoutMs, `EOSE for ${id}`);
  s.ws.send(JSON.stringify(['REQ', id, filter]));
  const f = await end;
  if (f[0] === 'CLOSED') throw new Error(`subscription ${id} refused: ${f[2]}`);
}

/** Closes sockets, bounded. @param {Socket[]} sockets */
export async function closeAll(sockets) {
  await Promise.all(
    sockets.map(
      (s) =>
        new Promise((resolve) => {
          if (s.ws.readyState === WebSocket.CLOSED) return resolve(undefined);
          const timer = setTimeout(() => {
            s.ws.terminate();
            resolve(undefined);
          }, 5_000);
          s.ws.once('close', () => {
            clearTimeout(timer);
            resolve(undefined);
          });
          s.ws.close(1000, 'bench done');
        }),
    ),
  );
}

/**
 * What the client saw of one run.
 * @typedef {{ id: string, marker: string, sentAt: number, okAt: number, okError: string, firstEventAt: number,
 *   firstDeltaAt: number, terminalAt: number, terminalKind: number, terminalCode: string, kinds: Record<number, number>,
 *   seqs: number[], text: string, poke: () => void }} Run
 */

/**
 * One measured run's numbers (ms).
 * @typedef {{ overhead: number, providerTtft: number, toProvider: number, fromProvider: number, firstDelta: number,
 *   firstEvent: number, toTerminal: number, events: number, deltas: number, statuses: number,
 *   tools: number, gaps: number, deltaChars: number, ao: number, aoKinds: Record<string, number> }} RunSample
 */

/**
 * The series' result.
 * @typedef {{ name: string, scenario: string, what: string, n: number, warmup: number, overhead: Latency,
 *   providerTtft: Latency, toProvider: Latency, fromProvider: Latency, firstDelta: Latency, firstEvent: Latency,
 *   toTerminal: Latency, events: number, deltas: number, statuses: number, tools: number,
 *   terminals: number, gaps: number, deltaChars: number, ao: number, aoKinds: Record<string, number>,
 *   cpuMs: number, cpuPerDeltaMs: number, cpuPerRunMs: number, cpuPerEventMs: number, errors: string[] }} SeriesResult
 */

/**
 * Runs the whole agent pass: fake provider, Worker, agent, the series of `config`.
 * @param {{ relayLimits: string, log: (s: string) => void, deadline: Deadline, config: AgentConfig }} o
 */
export async function agentBench(o) {
  const { log, config } = o;
  const deadline = new Deadline(Math.min(config.budgetMs, o.deadline.left()), 'the agent pass');
  const fake = await startFakeProvider({ slowIntervalMs: config.slowIntervalMs });
  log(`fake provider on ${fake.url}`);
  const ownerSk = generateSecretKey();
  const owner = getPublicKey(ownerSk);
  try {
    log('bundling the Worker and starting workerd (agent pass, Durable Object storage under the OS temp dir)…');
    const relay = await startRelay({
      relayLimits: o.relayLimits,
      bindings: {
        OPENAI_BASE_URL: `${fake.url}/v1`,
        OPENAI_API_KEY: 'sk-bench',
        EDGESTR_OWNERS: owner,
        EDGESTR_SECRET: randomHex(32),
      },
    });
    log(`relay on ${relay.httpUrl}`);
    try {
      return await runSeries({ ...o, deadline, fake, httpUrl: relay.httpUrl, wsUrl: relay.wsUrl, ownerSk, owner, cpu: workerdCpuMeter() });
    } finally {
      await relay.stop();
    }
  } finally {
    await fake.close();
  }
}

/**
 * @param {{ log: (s: string) => void, deadline: Deadline, config: AgentConfig, fake: FakeProvider, httpUrl: string,
 *   wsUrl: string, ownerSk: Uint8Array, owner: string, cpu: () => number }} o
 */
async function runSeries(o) {
  const { log, deadline, config, fake, owner } = o;
  const shardUrl = `${o.wsUrl}/r/${owner}`;
  const created = await api(o.httpUrl, o.ownerSk, 'POST', '/api/agents', {
    name: 'bench agent',
    provider: 'openai',
    models: ['gpt-bench'],
    // One sender sends every prompt: the per-sender prompt limit (20 a minute by default) is lifted.
    limits: { prompts_per_minute: 10_000, agent_prompts_per_minute: 100_000, max_session_turns: 100_000 },
  });
  if (created.status !== 201) throw new Error(`POST /api/agents: ${created.status} ${JSON.stringify(created.json)}`);
  const agent = /** @type {string} */ (created.json.pubkey);
  log(`agent ${agent.slice(0, 12)}… created; waiting for its ai.info (31340) on ${shardUrl}…`);

  /** @type {Socket[]} */
  const sockets = [];
  try {
    const ownerSocket = await authedSocket(shardUrl, o.ownerSk);
    sockets.push(ownerSocket);
    const info = ownerSocket.next((f) => f[0] === 'EVENT' && f[1] === 'info', Math.min(30_000, deadline.left()), 'the agent’s ai.info (31340)');
    ownerSocket.ws.send(JSON.stringify(['REQ', 'info', { kinds: [31340], authors: [agent] }]));
    await info;

    // NIP-AO frames to the owner, counted per run (channelId = the prompt id) and kind.
    const aoKey = getConversationKey(o.ownerSk, agent);
    /** @type {Map<string, Record<string, number>>} */
    const aoByRun = new Map();
    ownerSocket.listen((f) => {
      if (f[0] !== 'EVENT' || f[1] !== 'ao') return;
      const e = /** @type {NostrEvent} */ (f[2]);
      if (e.kind !== AO_FRAME || e.pubkey !== agent) return;
      const frame = JSON.parse(decrypt(e.content, aoKey));
      const byKind = aoByRun.get(frame.channelId) ?? {};
      byKind[frame.kind] = (byKind[frame.kind] ?? 0) + 1;
      aoByRun.set(frame.channelId, byKind);
    });
    await subscribe(ownerSocket, 'ao', { kinds: [AO_FRAME], '#p': [owner] });

    const clientSk = generateSecretKey();
    const client = getPublicKey(clientSk);
    const key = getConversationKey(clientSk, agent);
    const clientSocket = await authedSocket(shardUrl, clientSk);
    sockets.push(clientSocket);
    await subscribe(clientSocket, 'run', { kinds: [STATUS, DELTA, RESPONSE, TOOL_CALL, ERROR], '#p': [client], since: nowSeconds() - 5 });

    /** @type {Run | undefined} */
    let current;
    clientSocket.listen((f, at) => {
      const r = current;
      if (!r) return;
      if (f[0] === 'OK' && f[1] === r.id) {
        r.okAt = at;
        if (f[2] !== true) r.okError = String(f[3]);
        return r.poke();
      }
      if (f[0] !== 'EVENT' || f[1] !== 'run') return;
      const e = /** @type {NostrEvent} */ (f[2]);
      if (e.pubkey !== agent || !e.tags.some((t) => t[0] === 'e' && t[1] === r.id)) return;
      const payload = JSON.parse(decrypt(e.content, key));
      const decrypted = clock();
      r.kinds[e.kind] = (r.kinds[e.kind] ?? 0) + 1;
      r.firstEventAt ||= decrypted;
      if (e.kind === DELTA) {
        r.firstDeltaAt ||= decrypted;
        r.seqs.push(Number(payload.seq));
        r.text += String(payload.text);
      } else if (e.kind === RESPONSE || e.kind === ERROR) {
        r.terminalAt = decrypted;
        r.terminalKind = e.kind;
        r.terminalCode = e.kind === ERROR ? `${payload.code}: ${payload.message}` : '';
      }
      r.poke();
    });

    /**
     * Sends one prompt and waits for its terminal event.
     * @param {string} scenario @returns {Promise<Run>}
     */
    const oneRun = async (scenario) => {
      const marker = randomHex(8);
      const content = encrypt(JSON.stringify({ ver: 1, message: `scenario:${scenario} bench run ${marker}` }), key);
      // A session per run: every provider request has the same size (no growing history).
      const prompt = finalizeEvent(
        { kind: 25802, created_at: nowSeconds(), tags: [['p', agent], ['encryption', 'nip44'], ['s', `bench:${marker}`]], content },
        clientSk,
      );
      const frame = JSON.stringify(['EVENT', prompt]);
      /** @type {Run} */
      const run = {
        id: prompt.id,
        marker,
        sentAt: 0,
        okAt: 0,
        okError: '',
        firstEventAt: 0,
        firstDeltaAt: 0,
        terminalAt: 0,
        terminalKind: 0,
        terminalCode: '',
        kinds: {},
        seqs: [],
        text: '',
        poke: () => {},
      };
      const w = waiter(() => run.okError !== '' || (run.terminalAt > 0 && run.okAt > 0), Math.max(1_000, Math.min(config.runTimeoutMs, deadline.left())), `the terminal event of a ${scenario} run`);
      run.poke = w.poke;
      current = run;
      run.sentAt = clock();
      clientSocket.ws.send(frame);
      try {
        await w.done;
      } finally {
        current = undefined;
      }
      if (run.okError) throw new Error(`prompt refused: ${run.okError}`);
      return run;
    };

    /** @type {Record<string, SeriesResult>} */
    const results = {};
    for (const s of config.series) {
      deadline.check();
      log(`  ${s.name}: ${s.warmup} warm-up + up to ${s.runs} runs, ${s.what}…`);
      for (let i = 0; i < s.warmup; i++) await oneRun(s.scenario);
      await sleep(100);
      /** @type {Run[]} */
      const runs = [];
      const cpuStart = o.cpu();
      // Leave room for one more run before the deadline; a series cut short reports how many runs it made.
      while (runs.length < s.runs && deadline.left() > config.runTimeoutMs) {
        runs.push(await oneRun(s.scenario));
        await sleep(20);
      }
      await sleep(500); // the last telemetry frames (paced by the emitter)
      const cpuMs = o.cpu() - cpuStart;
      const r = summarize(s, runs, fake.requests, aoByRun, cpuMs);
      results[s.name] = r;
      log(
        `  ${s.name}: n ${r.n}; overhead p50 ${r.overhead.p50.toFixed(1)} / p99 ${r.overhead.p99.toFixed(1)} ms ` +
          `(send → provider p50 ${r.toProvider.p50.toFixed(1)} ms, provider first token → client p50 ${r.fromProvider.p50.toFixed(1)} ms); ` +
          `events/run ${r.events} (deltas ${r.deltas}); workerd CPU ${r.cpuPerDeltaMs.toFixed(2)} ms/delta, ${r.cpuPerRunMs.toFixed(1)} ms/run; ` +
          `NIP-AO frames/run ${r.ao}${r.errors.length ? `; problems: ${r.errors.slice(0, 3).join('; ')}` : ''}`,
      );
    }
    return { agent, results, slowIntervalMs: config.slowIntervalMs };
  } finally {
    await closeAll(sockets);
  }
}

/**
 * @param {SeriesConfig} s @param {Run[]} runs @param {RecordedRequest[]} requests
 * @param {Map<string, Record<string, number>>} aoByRun @param {number} cpuMs @returns {SeriesResult}
 */
function summarize(s, runs, requests, aoByRun, cpuMs) {
  /** @type {string[]} */
  const errors = [];
  /** @type {RunSample[]} */
  const samples = [];
  for (const r of runs) {
    const recs = requests.filter((q) => q.raw.includes(r.marker));
    const rec = recs[0];
    if (r.terminalKind !== RESPONSE) errors.push(`run ${r.id.slice(0, 8)} ended with ${r.terminalKind}: ${r.terminalCode}`);
    if (recs.length !== 1 || !rec || rec.firstDeltaAt === undefined) {
      errors.push(`run ${r.id.slice(0, 8)}: ${recs.length} provider requests${rec && rec.firstDeltaAt === undefined ? ' without a first delta' : ''}`);
      continue;
    }
    if (!r.firstDeltaAt) {
      errors.push(`run ${r.id.slice(0, 8)}: no delta event`);
      continue;
    }
    const seqs = [...r.seqs].sort((a, b) => a - b);
    const gaps = seqs.length ? /** @type {number} */ (seqs[seqs.length - 1]) + 1 - seqs.length : 0;
    const aoKinds = aoByRun.get(r.id) ?? {};
    const providerTtft = rec.firstDeltaAt - rec.receivedAt;
    samples.push({
      overhead: r.firstDeltaAt - r.sentAt - providerTtft,
      providerTtft,
      toProvider: rec.receivedAt - r.sentAt,
      fromProvider: r.firstDeltaAt - rec.firstDeltaAt,
      firstDelta: r.firstDeltaAt - r.sentAt,
      firstEvent: r.firstEventAt - r.sentAt,
      toTerminal: r.terminalAt - r.sentAt,
      events: Object.values(r.kinds).reduce((a, b) => a + b, 0),
      deltas: r.kinds[DELTA] ?? 0,
      statuses: r.kinds[STATUS] ?? 0,
      tools: r.kinds[TOOL_CALL] ?? 0,
      gaps,
      deltaChars: r.text.length,
      ao: Object.values(aoKinds).reduce((a, b) => a + b, 0),
      aoKinds,
    });
  }
  if (samples.length === 0) throw new Error(`${s.name}: no complete run (${errors.slice(0, 3).join('; ')})`);
  const pick = (/** @type {(x: RunSample) => number} */ f) => samples.map(f);
  const totalDeltas = runs.reduce((a, r) => a + (r.kinds[DELTA] ?? 0), 0);
  // Everything the agent signed and published for these runs: NIP-XX events to the client and NIP-AO frames to the owner.
  const totalEvents = runs.reduce((a, r) => a + Object.values(r.kinds).reduce((x, y) => x + y, 0) + Object.values(aoByRun.get(r.id) ?? {}).reduce((x, y) => x + y, 0), 0);
  /** @type {Record<string, number>} */
  const aoKinds = {};
  for (const k of new Set(samples.flatMap((x) => Object.keys(x.aoKinds)))) aoKinds[k] = median(pick((x) => x.aoKinds[k] ?? 0));
  return {
    name: s.name,
    scenario: s.scenario,
    what: s.what,
    n: samples.length,
    warmup: s.warmup,
    overhead: latencySummary(pick((x) => x.overhead)),
    providerTtft: latencySummary(pick((x) => x.providerTtft)),
    toProvider: latencySummary(pick((x) => x.toProvider)),
    fromProvider: latencySummary(pick((x) => x.fromProvider)),
    firstDelta: latencySummary(pick((x) => x.firstDelta)),
    firstEvent: latencySummary(pick((x) => x.firstEvent)),
    toTerminal: latencySummary(pick((x) => x.toTerminal)),
    events: median(pick((x) => x.events)),
    deltas: median(pick((x) => x.deltas)),
    statuses: median(pick((x) => x.statuses)),
    tools: median(pick((x) => x.tools)),
    terminals: runs.filter((r) => r.terminalAt > 0).length / runs.length,
    gaps: samples.reduce((a, x) => a + x.gaps, 0),
    deltaChars: median(pick((x) => x.deltaChars)),
    ao: median(pick((x) => x.ao)),
    aoKinds,
    cpuMs,
    cpuPerDeltaMs: cpuMs / totalDeltas,
    cpuPerRunMs: cpuMs / runs.length,
    cpuPerEventMs: cpuMs / totalEvents,
    errors,
  };
}
