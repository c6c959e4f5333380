// @ts-check
// `npm run bench`: measures the relay and the hosted agents on this machine and writes
// docs/BENCHMARKS.md. Starts the relay (bench/lib/server.mjs: wrangler bundle served by
// Miniflare/workerd on 127.0.0.1 with a RELAY_LIMITS override), runs the scenarios of
// bench/lib/scenarios.mjs from this Node process and the per-hop costs of the edge design
// (bench/lib/edges.mjs, docs/SCALING.md), stops the relay; then again with the Durable
// Object storage on tmpfs (ingest and fan-out only); then the agent pass (bench/lib/agent.mjs: the
// Worker with the fake LLM provider of test/fake-provider as its OpenAI server, prompts from a
// NIP-XX client); renders the report (bench/lib/report.mjs). All traffic stays on 127.0.0.1; every
// loop is bounded by a count and a deadline; the whole run by BUDGET_MS, the agent pass by
// CONFIG.agent.budgetMs; then the DVMCP bridge pass (bench/lib/bridge.mjs: the real
// server-everything called directly with the MCP SDK and through relay + bridge from Nostr
// clients), bounded by CONFIG.bridge.budgetMs.
// BENCH_QUICK=1 runs small sizes and prints the table without writing the report.
// BENCH_ONLY=relay,tmpfs,agent,bridge (any of them) runs only those passes, prints the table and
// does not write the report.

import { existsSync } from 'node:fs';
import { readFile, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { agentBench } from './lib/agent.mjs';
import { bridgeBench } from './lib/bridge.mjs';
import { Deadline, makeSigner } from './lib/client.mjs';
import { machineFacts } from './lib/facts.mjs';
import { previousFigures, renderReport, renderTable } from './lib/report.mjs';
import { fanout, memory, reqLatency, verifyAndIngest } from './lib/scenarios.mjs';
import { edgeHops } from './lib/edges.mjs';
import { ROOT, startRelay, workerdCpuMeter, workerdRssMeter } from './lib/server.mjs';

const QUICK = process.env.BENCH_QUICK === '1';
const PASSES = ['relay', 'tmpfs', 'agent', 'bridge'];
const ONLY = (process.env.BENCH_ONLY ?? '').split(',').map((p) => p.trim()).filter((p) => p !== '');
const unknownPass = ONLY.find((p) => !PASSES.includes(p));
if (unknownPass) throw new Error(`BENCH_ONLY: unknown pass ${unknownPass} (passes: ${PASSES.join(', ')})`);
const runs = (/** @type {string} */ pass) => ONLY.length === 0 || ONLY.includes(pass);
const BUDGET_MS = 10 * 60_000;
const REPORT = join(ROOT, 'docs', 'BENCHMARKS.md');
/** Memory-backed filesystem for the second pass, which separates SQLite's fsync cost from the relay's own work. */
const TMPFS = '/dev/shm';

/** Rate limits, per-address budgets and the connection and held-filter caps lifted so that the bench measures the relay, not its throttling; all other limits are the defaults. */
export const BENCH_LIMITS = {
  events_per_second_per_connection: 1_000_000,
  events_burst_per_connection: 1_000_000,
  reqs_per_second_per_connection: 1_000_000,
  reqs_burst_per_connection: 1_000_000,
  events_per_second_per_pubkey: 1_000_000,
  events_burst_per_pubkey: 1_000_000,
  events_per_second_per_ip: 1_000_000,
  events_burst_per_ip: 1_000_000,
  // The fan-out pass holds 1,000 subscribers and a publisher on the public shard, all from 127.0.0.1.
  max_connections: 2_000,
  max_connections_per_ip: 2_000,
  connections_per_second_per_ip: 1_000_000,
  connections_burst_per_ip: 1_000_000,
  deliveries_per_second_per_ip: 1_000_000_000,
  deliveries_burst_per_ip: 1_000_000_000,
  scan_rows_per_second_per_ip: 1_000_000_000,
  scan_rows_burst_per_ip: 1_000_000_000,
  read_bytes_per_second_per_ip: 1_000_000_000,
  read_bytes_burst_per_ip: 1_000_000_000,
  inbound_bytes_per_second_per_ip: 1_000_000_000,
  inbound_bytes_burst_per_ip: 1_000_000_000,
  frames_per_second_per_ip: 1_000_000,
  frames_burst_per_ip: 1_000_000,
  // The memory pass holds 1,000 connections × 32 subscriptions, past the held-filter caps.
  max_subscription_memory_per_connection: 1_000_000_000,
  max_subscription_memory: 1_000_000_000,
};

/**
 * The agent pass: a streaming answer (the fake provider's `slow` scenario, its chunks
 * SLOW_INTERVAL_MS apart) and a short one (`text`: 4 chunks 2 ms apart), prompts one at a time.
 * @param {number} streamRuns @param {number} shortRuns @param {number} warmup
 * @returns {import('./lib/agent.mjs').AgentConfig}
 */
function agentConfig(streamRuns, shortRuns, warmup) {
  const SLOW_INTERVAL_MS = 20;
  return {
    series: [
      { name: 'stream', scenario: 'slow', runs: streamRuns, warmup, what: `streaming answer: 50 chunks ${SLOW_INTERVAL_MS} ms apart (\`slow\`)` },
      { name: 'short', scenario: 'text', runs: shortRuns, warmup, what: 'short answer: 4 chunks 2 ms apart (`text`)' },
    ],
    slowIntervalMs: SLOW_INTERVAL_MS,
    runTimeoutMs: 15_000,
    budgetMs: 120_000,
  };
}

/**
 * The bridge pass: `calls` sequential calls per series (direct, plain, gift-wrapped), each Nostr key
 * making at most `callsPerKey` (the bridge allows 30 a minute per key), `warmup` unmeasured first;
 * then `concurrentClients` clients making `callsPerClient` calls each.
 * @param {number} calls @param {number} callsPerClient @returns {import('./lib/bridge.mjs').BridgeConfig}
 */
function bridgeConfig(calls, callsPerClient) {
  return { calls, warmup: 2, callsPerKey: 25, concurrentClients: 50, callsPerClient, callTimeoutMs: 15_000, budgetMs: 150_000 };
}

export const CONFIG = QUICK
  ? {
      ingest: { rounds: 2, ingestPerRound: 500, verifyPerRound: 300, connections: 4 },
      fanout: { subscriberCounts: [10, 100], publishes: 10, warmup: 2 },
      req: { sizes: [2_000, 5_000], queries: 30, warmup: 5, limit: 100, authors: 500, recipients: 100 },
      memory: { connections: 200, subscriptions: 10 },
      hops: { sizes: [1, 16, 64], rounds: 5, subscribers: 50, socketRounds: 10 },
      agent: agentConfig(5, 5, 1),
      bridge: bridgeConfig(20, 1),
    }
  : {
      ingest: { rounds: 5, ingestPerRound: 2_000, verifyPerRound: 1_000, connections: 4 },
      fanout: { subscriberCounts: [100, 1_000], publishes: 100, warmup: 5 },
      req: { sizes: [10_000, 100_000], queries: 200, warmup: 20, limit: 100, authors: 500, recipients: 100 },
      memory: { connections: 1_000, subscriptions: 20 },
      hops: { sizes: [1, 16, 64, 256], rounds: 20, subscribers: 500, socketRounds: 20 },
      agent: agentConfig(40, 50, 3),
      bridge: bridgeConfig(100, 3),
    };

const log = (/** @type {string} */ s) => console.log(`[bench] ${s}`);

/**
 * workerd CPU per additional subscriber of a stored event's fan-out: the difference between the
 * largest and smallest subscriber counts of the fan-out scenario (NaN when it failed).
 * @param {{ results: Record<string, { stored: { relayCpuMs: number } }> } | undefined} f
 */
function cpuPerSubscriberUs(f) {
  const counts = Object.keys(f?.results ?? {}).map(Number);
  const [few, many] = [Math.min(...counts), Math.max(...counts)];
  const a = f?.results[String(few)]?.stored.relayCpuMs;
  const b = f?.results[String(many)]?.stored.relayCpuMs;
  return a === undefined || b === undefined || many <= few ? NaN : ((b - a) * 1000) / (many - few);
}

/**
 * Runs one scenario; a failure is recorded for the report instead of ending the run.
 * @template T @param {string} name @param {() => Promise<T>} fn @param {Record<string, string>} errors
 * @returns {Promise<T | undefined>}
 */
async function attempt(name, fn, errors) {
  const started = Date.now();
  log(`${name}…`);
  try {
    const r = await fn();
    log(`${name} done in ${((Date.now() - started) / 1000).toFixed(1)} s`);
    return r;
  } catch (e) {
    const cause = e instanceof Error && e.cause instanceof Error ? ` (${e.cause.message})` : '';
    errors[name] = `${e instanceof Error ? e.message : String(e)}${cause}`;
    log(`${name} FAILED: ${errors[name]}`);
    return undefined;
  }
}

/**
 * @typedef {{ httpUrl: string, wsUrl: string, signer: Awaited<ReturnType<typeof makeSigner>>, log: typeof log,
 *   deadline: Deadline, cpu: () => number, rss: () => number }} Common
 */

/**
 * Starts a relay whose Durable Object storage lives under `storageRoot`, runs `scenarios` on it, stops it.
 * @template T @param {string} storageRoot @param {Common['signer']} signer @param {Deadline} deadline
 * @param {(common: Common) => Promise<T>} scenarios @returns {Promise<T>}
 */
async function withRelay(storageRoot, signer, deadline, scenarios) {
  log(`bundling the Worker and starting workerd (Durable Object storage under ${storageRoot})…`);
  const relay = await startRelay({ relayLimits: JSON.stringify(BENCH_LIMITS), storageRoot, bindings: { EDGESTR_OPEN_SHARDS: 'true' } });
  log(`relay on ${relay.httpUrl}`);
  try {
    return await scenarios({ httpUrl: relay.httpUrl, wsUrl: relay.wsUrl, signer, log, deadline, cpu: workerdCpuMeter(), rss: workerdRssMeter() });
  } finally {
    await relay.stop();
  }
}

async function main() {
  const deadline = new Deadline(BUDGET_MS, 'the whole bench');
  const facts = await machineFacts();
  log(`${facts.nproc} CPUs (${facts.cpu}), Node ${facts.node}, load average ${facts.loadStart}`);
  /** @type {Record<string, string>} */
  const errors = {};
  const started = Date.now();
  const signer = await makeSigner();
  const disk = runs('relay')
    ? await withRelay(tmpdir(), signer, deadline, async (common) => {
        const ingest = await attempt('disk: ingest vs. raw verification', () => verifyAndIngest({ ...common, ...CONFIG.ingest }), errors);
        // Memory before the fan-out pass: its 1,000 sockets would leave memory for the next ones to reuse.
        const memoryUse = await attempt('disk: memory per connection and subscription', () => memory({ ...common, ...CONFIG.memory }), errors);
        const fanned = await attempt('disk: publish → receive fan-out', () => fanout({ ...common, ...CONFIG.fanout }), errors);
        const req = await attempt('disk: REQ latency', () => reqLatency({ ...common, ...CONFIG.req }), errors);
        const baseline = {
          ingestPerSecond: ingest?.ingest ?? NaN,
          ingestPerCpuSecond: ingest?.perCpuSecond.ingest ?? NaN,
          subscriberCpuUs: cpuPerSubscriberUs(fanned),
        };
        const hops = await attempt('disk: per-hop costs of the edge design', () => edgeHops({ ...common, ...CONFIG.hops, baseline }), errors);
        return { ingest, fanout: fanned, req, hops, memory: memoryUse };
      })
    : undefined;
  const tmpfs = runs('tmpfs') && existsSync(TMPFS)
    ? await withRelay(TMPFS, signer, deadline, async (common) => ({
        ingest: await attempt('tmpfs: ingest vs. raw verification', () => verifyAndIngest({ ...common, ...CONFIG.ingest }), errors),
        fanout: await attempt('tmpfs: publish → receive fan-out', () => fanout({ ...common, ...CONFIG.fanout }), errors),
      }))
    : undefined;
  const agent = runs('agent')
    ? await attempt(
        'agent: time to first delta, events per response, CPU per delta',
        () => agentBench({ relayLimits: JSON.stringify(BENCH_LIMITS), log, deadline, config: CONFIG.agent }),
        errors,
      )
    : undefined;
  const bridge = runs('bridge')
    ? await attempt(
        'bridge: tools/call through relay + bridge vs. direct MCP HTTP',
        () => bridgeBench({ relayLimits: JSON.stringify(BENCH_LIMITS), log, deadline, config: CONFIG.bridge }),
        errors,
      )
    : undefined;
  for (const [series, e] of Object.entries(bridge?.errors ?? {})) errors[`bridge: ${series}`] = e;
  const report = {
    facts: { ...facts, loadEnd: (await machineFacts()).loadStart, durationS: Math.round((Date.now() - started) / 1000) },
    config: CONFIG,
    relayLimits: JSON.stringify(BENCH_LIMITS),
    storage: { disk: tmpdir(), tmpfs: TMPFS },
    passes: PASSES.filter(runs),
    disk,
    tmpfs,
    agent,
    bridge,
    errors,
    previous: existsSync(REPORT) ? previousFigures(await readFile(REPORT, 'utf8')) : undefined,
  };
  if (QUICK || ONLY.length > 0) {
    log(QUICK ? 'BENCH_QUICK=1: small sizes, report not written' : `BENCH_ONLY=${ONLY.join(',')}: report not written`);
  } else {
    await writeFile(REPORT, renderReport(report));
    log(`wrote ${REPORT}`);
  }
  console.log(`\n${renderTable(report)}`);
  return Object.keys(errors).length === 0;
}

const watchdog = setTimeout(() => {
  console.error(`[bench] still running after ${(BUDGET_MS + 90_000) / 1000} s; giving up`);
  process.exit(2);
}, BUDGET_MS + 90_000);

main().then(
  (ok) => {
    clearTimeout(watchdog);
    process.exit(ok ? 0 : 1);
  },
  (e) => {
    clearTimeout(watchdog);
    console.error('[bench] failed:', e instanceof Error ? e.stack : e);
    process.exit(1);
  },
);
