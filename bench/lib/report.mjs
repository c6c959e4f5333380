// @ts-check
// Renders bench results: the summary table (printed at the end of `npm run bench`) and the whole
// docs/BENCHMARKS.md (machine facts, method, the RELAY_LIMITS override, per-round details, the
// hosted-agent pass, the DVMCP bridge pass, the per-hop costs of the edge design and their
// projection). Only the passes that ran (BENCH_ONLY) get rows.

import { PROJECTED_SUBSCRIBERS, PROJECTION_BATCH, projectEdges } from './edges.mjs';

import { NOSFLARE } from './scenarios.mjs';

/**
 * @typedef {{ n: number, p50: number, p99: number, max: number }} Latency
 * @typedef {{ verifierName: string, rounds: Array<{ verify: number, nodeVerify: number, ingest: number, ephemeral: number, verifyCpu: number, ingestCpu: number, ephemeralCpu: number }>,
 *   verify: number, ingest: number, ratio: number, roundRatios: number[], nodeVerify: number, nodeRatio: number, nosflareStyle: number,
 *   ephemeral: number, noble: number, withId: number,
 *   perCpuSecond: { verify: number, ingest: number, ephemeral: number }, eventsPerRound: number, connections: number }} IngestResult
 * @typedef {{ latency: Latency, ok: Latency, relayCpuMs: number, clientCpuMs: number }} FanoutCell
 * @typedef {{ results: Record<string, { stored: FanoutCell, ephemeral: FanoutCell }>, publishes: number }} FanoutResult
 * @typedef {{ results: Record<string, Record<string, Latency & { events: number }>>, seedRate: number, limit: number,
 *   authors: number, recipients: number, queries: number }} ReqResult
 * @typedef {{ base: number, withConnections: number, withSubscriptions: number, perConnection: number, perSubscription: number,
 *   connections: number, subscriptions: number }} MemoryResult
 * @typedef {import('./edges.mjs').Hops} Hops
 * @typedef {{ ingest?: IngestResult, fanout?: FanoutResult, req?: ReqResult, memory?: MemoryResult, hops?: Hops }} PassResult
 * @typedef {import('./agent.mjs').SeriesResult} AgentSeries
 * @typedef {{ agent: string, results: Record<string, AgentSeries>, slowIntervalMs: number }} AgentResult
 * @typedef {import('./bridge.mjs').BridgeResult} BridgeResult
 * @typedef {{ facts: Record<string, string | number>, config: typeof import('../run.mjs').CONFIG, relayLimits: string,
 *   storage: { disk: string, tmpfs: string }, passes: string[], disk?: PassResult, tmpfs?: PassResult, agent?: AgentResult,
 *   bridge?: BridgeResult, errors: Record<string, string>, previous?: Previous }} Report
 * @typedef {{ date: string, values: Map<string, string> }} Previous
 */

const int = (/** @type {number} */ x) => (Number.isFinite(x) ? Math.round(x).toLocaleString('en-US') : 'n/a');
const ms = (/** @type {number} */ x) => (Number.isFinite(x) ? `${x < 10 ? x.toFixed(2) : x.toFixed(1)} ms` : 'n/a');
const us = (/** @type {number} */ x) => (Number.isFinite(x) ? `${Math.round(x).toLocaleString('en-US')} µs` : 'n/a');
const pct = (/** @type {number} */ x) => (Number.isFinite(x) ? `${Math.round(x * 100)} %` : 'n/a');
const met = (/** @type {boolean | undefined} */ ok) => (ok === undefined ? 'n/a' : ok ? 'yes' : '**no**');
const p50p99 = (/** @type {Latency | undefined} */ l) => (l ? `p50 ${ms(l.p50)} · p99 ${ms(l.p99)}` : 'failed');
const sizeLabel = (/** @type {string} */ n) => `${Number(n) / 1000}k`;
const num = (/** @type {number} */ x) => (Number.isFinite(x) ? String(Math.round(x * 10) / 10) : 'n/a');
const mib = (/** @type {number} */ x) => (Number.isFinite(x) ? `${(x / 2 ** 20).toFixed(1)} MiB` : 'n/a');

/** Targets of issue #12: ingest ÷ the shard's own verification, ÷ Node's Wasm verification, × nosflare's 86/s. */
export const INGEST_TARGETS = { ofVerify: 0.85, ofNodeVerify: 0.5, overNosflare: 20 };

/** Target of the hosted-agent overhead (time to first delta minus the provider's own TTFT), p50. */
export const AGENT_OVERHEAD_TARGET_MS = 25;
/** Target of the DVMCP bridge overhead (p50 through relay + bridge minus p50 of the direct MCP call). */
export const BRIDGE_OVERHEAD_TARGET_MS = 20;

/** The bridge's sequential series, labelled. @param {Report} r */
const bridgeForms = (r) =>
  /** @type {Array<[string, import('./bridge.mjs').SequentialResult | undefined]>} */ ([
    ['plain (25910 → 26910)', r.bridge?.plain],
    ['gift-wrapped (1059 → 1059, seal signed by the client)', r.bridge?.wrapped],
  ]);

/** Overhead p50 of a bridge series over the direct call of the same run. @param {Report} r @param {import('./bridge.mjs').SequentialResult | undefined} s */
const bridgeOverhead = (r, s) => (s && r.bridge ? s.latency.p50 - r.bridge.direct.p50 : undefined);

/** The agent series of the config with their results (undefined when the pass failed). @param {Report} r */
const agentSeries = (r) => r.config.agent.series.map((s) => /** @type {[typeof s, AgentSeries | undefined]} */ ([s, r.agent?.results[s.name]]));

/** "20 (25800 × 2, 25801 × 17, 25803 × 1)": medians per run. @param {AgentSeries} a */
const eventsLabel = (a) =>
  `${num(a.events)} (25800 × ${num(a.statuses)}, 25801 × ${num(a.deltas)}${a.tools ? `, 25804 × ${num(a.tools)}` : ''}, 25803 × 1)`;

/** @param {string[]} header @param {string[][]} rows */
function table(header, rows) {
  return [`| ${header.join(' | ')} |`, `| ${header.map(() => '---').join(' | ')} |`, ...rows.map((r) => `| ${r.join(' | ')} |`)].join('\n');
}

/**
 * The figures of the report this run replaces (docs/BENCHMARKS.md as it was): its run's date and
 * the value of each row of its Results and per-hop tables, by the row's first cell.
 * @param {string} markdown @returns {Previous}
 */
export function previousFigures(markdown) {
  const date = /comes from the run of\s+(\d{4}-\d\d-\d\dT[\d:.]+Z)/.exec(markdown)?.[1] ?? 'unknown date';
  /** @type {Map<string, string>} */
  const values = new Map();
  /** Column of the value in the table being read; -1: not a table of figures (or outside any table). */
  let column = -1;
  let header = false;
  for (const line of markdown.split('\n')) {
    if (!line.startsWith('| ') || !line.endsWith(' |')) {
      header = false;
      column = -1;
      continue;
    }
    const cells = line.slice(2, -2).split(' | ');
    if (!header) {
      header = true;
      column = cells[0] === 'metric' ? cells.indexOf('value') : cells[0] === 'hop' ? cells.indexOf('cost') : -1;
    } else if (column > 0 && cells[0] !== '---') {
      values.set(cells[0] ?? '', cells[column] ?? '');
    }
  }
  return { date, values };
}

/**
 * `rows` with the previous run's figure of each row after its value (column 2), and the header with
 * that column, when there is a previous report.
 * @param {string[]} header @param {string[][]} rows @param {Previous | undefined} previous @returns {[string[], string[][]]}
 */
function withPrevious(header, rows, previous) {
  if (!previous) return [header, rows];
  const add = (/** @type {string[]} */ row, /** @type {string} */ cell) => [...row.slice(0, 2), cell, ...row.slice(2)];
  return [add(header, `previous run (${previous.date})`), rows.map((row) => add(row, previous.values.get(row[0] ?? '') ?? '—'))];
}

/** The required metrics: [metric, value, target, met, where measured]. @param {Report} r */
function metricRows(r) {
  /** @type {string[][]} */
  const rows = [];
  const passes = /** @type {Array<[string, PassResult | undefined]>} */ ([
    ['disk', r.disk],
    ['tmpfs', r.tmpfs],
  ]);
  for (const [storage, pass] of passes) {
    const i = pass?.ingest;
    if (!pass) continue;
    const where = storage === 'disk' ? 'DO storage on disk (as `wrangler dev`)' : 'DO storage on tmpfs';
    const t = INGEST_TARGETS;
    if (!i) {
      rows.push([`Ingest vs. raw verification, ${where}`, 'failed', `ingest ≥ ${pct(t.ofVerify)} of raw verify`, 'n/a', '']);
      continue;
    }
    rows.push([`Ingest into one shard (kind 1: verify, store, OK), ${where}`, `${int(i.ingest)} events/s`, '', '', 'client (Node)']);
    rows.push([`Raw signature verification, libsecp256k1 Wasm (the shard's own verifier), same pass`, `${int(i.verify)} /s`, '', '', 'inside the shard DO']);
    rows.push([`**Ingest ÷ raw verification** (median of per-round ratios), ${where}`, `**${pct(i.ratio)}**`, `≥ ${pct(t.ofVerify)}`, met(i.ratio >= t.ofVerify), '']);
    rows.push([`Wasm verification in Node (nostr-wasm \`verifyEvent\`: id + signature, same events), same pass`, `${int(i.nodeVerify)} /s`, '', '', 'client (Node)']);
    rows.push([`**Ingest ÷ Node's Wasm verification** (median of per-round ratios), ${where}`, `**${pct(i.nodeRatio)}**`, `≥ ${pct(t.ofNodeVerify)}`, met(i.nodeRatio >= t.ofNodeVerify), '']);
    rows.push([
      `**Ingest of ${NOSFLARE.events} events over ${NOSFLARE.sockets} sockets ÷ nosflare's ${NOSFLARE.rate} events/s** (nosflare's figure is quoted from issue #12, not measured in this run), ${where}`,
      `**${int(i.nosflareStyle)} events/s = ${num(i.nosflareStyle / NOSFLARE.rate)}×**`,
      `≥ ${t.overNosflare}× (≥ ${int(t.overNosflare * NOSFLARE.rate)} events/s)`,
      met(i.nosflareStyle >= t.overNosflare * NOSFLARE.rate),
      'client (Node)',
    ]);
  }
  const noble = r.disk?.ingest?.noble;
  if (r.disk) rows.push(['Raw signature verification, noble (pure JS), context', noble ? `${int(noble)} /s` : 'failed', '', '', 'inside the shard DO']);
  for (const [storage, pass] of passes) {
    if (!pass) continue;
    for (const count of r.config.fanout.subscriberCounts) {
      const f = pass.fanout?.results[String(count)];
      const target = count === 1000 ? 'p99 < 50 ms' : '';
      rows.push([
        `Publish → receive, ${int(count)} subscribers on one shard (kind 1), ${storage === 'disk' ? 'disk' : 'tmpfs'}`,
        p50p99(f?.stored.latency),
        target,
        target ? met(f ? f.stored.latency.p99 < 50 : undefined) : '',
        'client (Node)',
      ]);
    }
  }
  if (r.disk) {
    const m = r.disk.memory;
    const what = m ? `${int(m.connections)} connections, ${m.subscriptions} subscriptions each` : 'failed';
    rows.push([`Memory per idle connection (workerd RSS growth ÷ connections; ${what})`, m ? `${int(m.perConnection)} bytes` : 'failed', '', '', '/proc VmRSS of the workerd process']);
    rows.push([`Memory per subscription (RSS growth ÷ subscriptions; ${what})`, m ? `${int(m.perSubscription)} bytes` : 'failed', '', '', '/proc VmRSS of the workerd process']);
  }
  const req = r.disk?.req;
  for (const size of r.disk ? r.config.req.sizes : []) {
    for (const filter of ['author+kind', '#p']) {
      const l = req?.results[String(size)]?.[filter];
      const target = size === 100_000 ? 'p50 < 10 ms' : '';
      rows.push([
        `REQ → EOSE, ${filter} filter, ${sizeLabel(String(size))} stored events`,
        p50p99(l),
        target,
        target ? met(l ? l.p50 < 10 : undefined) : '',
        'client (Node)',
      ]);
    }
  }
  for (const [s, a] of r.passes.includes('agent') ? agentSeries(r) : []) {
    rows.push([
      `**Hosted agent: time to first delta at the client − the fake provider's own time to first token**, ${s.what}`,
      a ? `**${p50p99(a.overhead)}**` : 'failed',
      `p50 ≤ ${AGENT_OVERHEAD_TARGET_MS} ms`,
      met(a ? a.overhead.p50 <= AGENT_OVERHEAD_TARGET_MS : undefined),
      'client (Node) and fake provider, one clock',
    ]);
    rows.push([`Hosted agent: events per response at the client (median per run), ${s.what}`, a ? eventsLabel(a) : 'failed', '', '', 'client (Node)']);
    rows.push([`Hosted agent: workerd CPU time per delta event, ${s.what}`, a ? ms(a.cpuPerDeltaMs) : 'failed', '', '', '/proc CPU time of the workerd process']);
  }
  if (r.passes.includes('bridge')) rows.push(...bridgeRows(r));
  return rows;
}

/** The DVMCP bridge's required metrics. @param {Report} r */
function bridgeRows(r) {
  const b = r.bridge;
  const c = r.config.bridge;
  /** @type {string[][]} */
  const rows = [['DVMCP bridge baseline: direct MCP HTTP tools/call `echo` to server-everything (official SDK `Client`, sequential)', p50p99(b?.direct), '', '', 'client (Node)']];
  for (const [label, s] of bridgeForms(r)) {
    const overhead = bridgeOverhead(r, s);
    rows.push([`DVMCP bridge: tools/call \`echo\` through relay + bridge, ${label}, sequential`, p50p99(s?.latency), '', '', 'client (Node)']);
    rows.push([
      `**DVMCP bridge overhead: p50 through relay + bridge − p50 direct**, ${label}`,
      overhead === undefined ? 'failed' : `**${ms(overhead)}**`,
      `p50 ≤ ${BRIDGE_OVERHEAD_TARGET_MS} ms`,
      met(overhead === undefined ? undefined : overhead <= BRIDGE_OVERHEAD_TARGET_MS),
      'client (Node), same run',
    ]);
  }
  const calls = `${c.callsPerClient} ${c.callsPerClient === 1 ? 'call' : 'calls'} each`;
  const throughput = (/** @type {import('./bridge.mjs').ConcurrentResult | undefined} */ k) => (k ? `${num(k.throughput)} calls/s · ${p50p99(k.latency)}` : 'failed');
  rows.push([`DVMCP bridge baseline: ${c.concurrentClients} concurrent direct MCP clients (each its own session, ${calls}): throughput and latency`, throughput(b?.directConcurrent), '', '', 'client (Node)']);
  rows.push([`DVMCP bridge: ${c.concurrentClients} concurrent clients through relay + bridge (each its own key and socket, ${calls}, plain): throughput and latency`, throughput(b?.concurrent), '', '', 'client (Node)']);
  return rows;
}

/** Contextual numbers that explain the required ones. @param {Report} r */
function contextRows(r) {
  /** @type {string[][]} */
  const rows = [];
  for (const [storage, pass] of /** @type {Array<[string, PassResult | undefined]>} */ ([['disk', r.disk], ['tmpfs', r.tmpfs]])) {
    const i = pass?.ingest;
    if (!i) continue;
    rows.push([`${storage}: id + signature check (sha256 of the serialized event, hex decoding, Wasm verify)`, `${int(i.withId)} /s`, 'inside the shard DO']);
    rows.push([`${storage}: ingest of ephemeral kind 20001 (verified, never stored)`, `${int(i.ephemeral)} events/s`, 'client (Node)']);
    rows.push([
      `${storage}: workerd CPU time per event: verification only / ingest kind 1 / ingest kind 20001`,
      `${us(1e6 / i.perCpuSecond.verify)} / ${us(1e6 / i.perCpuSecond.ingest)} / ${us(1e6 / i.perCpuSecond.ephemeral)}`,
      '/proc CPU time of the workerd process',
    ]);
    for (const [count, f] of Object.entries(pass?.fanout?.results ?? {})) {
      const n = int(Number(count));
      rows.push([`${storage}: publish → receive, ${n} subscribers, ephemeral kind 20001`, p50p99(f.ephemeral.latency), 'client (Node)']);
      rows.push([`${storage}: publish → OK at the publisher, ${n} subscribers, kind 1 / kind 20001`, `p50 ${ms(f.stored.ok.p50)} / ${ms(f.ephemeral.ok.p50)}`, 'client (Node)']);
      rows.push([
        `${storage}: CPU time per published event, ${n} subscribers, kind 1: workerd (relay) / Node (publisher + all subscribers)`,
        `${ms(f.stored.relayCpuMs)} / ${ms(f.stored.clientCpuMs)}`,
        '/proc, process.cpuUsage()',
      ]);
    }
    const counts = Object.keys(pass?.fanout?.results ?? {}).map(Number);
    const [few, many] = [Math.min(...counts), Math.max(...counts)];
    const cpuFew = pass?.fanout?.results[String(few)]?.stored.relayCpuMs;
    const cpuMany = pass?.fanout?.results[String(many)]?.stored.relayCpuMs;
    if (cpuFew !== undefined && cpuMany !== undefined && many > few) {
      rows.push([
        `${storage}: workerd CPU time per additional subscriber, kind 1 (difference between ${int(many)} and ${int(few)} subscribers)`,
        us(((cpuMany - cpuFew) * 1000) / (many - few)),
        '/proc CPU time of the workerd process',
      ]);
    }
  }
  for (const [s, a] of agentSeries(r)) {
    if (!a) continue;
    const name = `agent, ${s.name}`;
    rows.push([`${name}: runs measured (after ${a.warmup} warm-up), runs that ended with 25803, delta seq gaps`, `${a.n} · ${pct(a.terminals)} · ${a.gaps}`, 'client (Node)']);
    rows.push([`${name}: prompt sent → the provider request arrives`, p50p99(a.toProvider), 'client and fake provider']);
    rows.push([`${name}: the provider's first token written → first delta received and decrypted`, p50p99(a.fromProvider), 'client and fake provider']);
    rows.push([`${name}: the fake provider's own time to first token (firstDeltaAt − receivedAt)`, p50p99(a.providerTtft), 'fake provider']);
    rows.push([`${name}: prompt sent → first event of the run (25800 thinking)`, p50p99(a.firstEvent), 'client (Node)']);
    rows.push([`${name}: prompt sent → first delta`, p50p99(a.firstDelta), 'client (Node)']);
    rows.push([`${name}: prompt sent → 25803 response`, p50p99(a.toTerminal), 'client (Node)']);
    rows.push([`${name}: answer text per run / delta events per run (coalescing: 256 characters or 50 ms)`, `${num(a.deltaChars)} characters / ${num(a.deltas)}`, 'client (Node)']);
    const ao = Object.entries(a.aoKinds).map(([k, v]) => `${k} × ${num(v)}`).join(', ');
    rows.push([`${name}: NIP-AO frames (24200) per run to the owner (median)`, `${num(a.ao)} (${ao})`, 'owner socket (Node)']);
    rows.push([
      `${name}: workerd CPU time per run / per event the agent published (NIP-XX events + NIP-AO frames)`,
      `${ms(a.cpuPerRunMs)} / ${ms(a.cpuPerEventMs)}`,
      '/proc CPU time of the workerd process',
    ]);
    if (a.errors.length) rows.push([`${name}: problems`, a.errors.slice(0, 5).join('; '), '']);
  }
  const req = r.disk?.req;
  if (req) {
    rows.push(['disk: seeding through `EventStore.insert` (a `transactionSync` per event, 2,500 events per request)', `${int(req.seedRate)} inserts/s`, 'inside the shard DO']);
    for (const [size, byFilter] of Object.entries(req.results)) {
      for (const [filter, l] of Object.entries(byFilter)) {
        rows.push([`disk: events returned per REQ, ${filter}, ${sizeLabel(size)} (median; limit ${req.limit})`, String(l.events), '']);
      }
    }
  }
  if (r.bridge) rows.push(...bridgeContextRows(r.bridge, r.config.bridge));
  return rows;
}

/** @param {BridgeResult} b @param {import('./bridge.mjs').BridgeConfig} c */
function bridgeContextRows(b, c) {
  /** @type {string[][]} */
  const rows = [[`bridge: direct calls measured (after ${c.warmup} warm-up)`, String(b.direct.n), 'client (Node)']];
  for (const [form, s] of /** @type {const} */ ([['plain', b.plain], ['gift-wrapped', b.wrapped]])) {
    if (!s) continue;
    rows.push([`bridge, ${form}: calls measured · client keys used (${c.warmup} warm-up calls each, at most ${c.callsPerKey} calls each) · failed calls`, `${s.latency.n} · ${s.keys} · ${s.errors.length}`, 'client (Node)']);
    if (form === 'gift-wrapped') rows.push(['bridge, gift-wrapped: of the round trip, the client unwrapping the answer (two NIP-44 decryptions, one ECDH, the seal\'s signature check with noble)', p50p99(s.unwrap), 'client (Node)']);
    rows.push([`bridge, ${form}: workerd CPU time per call (relay + Bridge DO; all ${s.calls} calls of the series, warm-ups included)`, ms(s.cpuPerCallMs), '/proc CPU time of the workerd process']);
    if (s.errors.length) rows.push([`bridge, ${form}: problems`, s.errors.slice(0, 5).join('; '), '']);
  }
  const k = b.concurrent;
  if (k) {
    rows.push([`bridge, concurrent: calls answered · failed · wall time (first send → last answer)`, `${k.latency.n} · ${k.errors.length} · ${ms(k.durationMs)}`, 'client (Node)']);
    rows.push(['bridge, concurrent: workerd CPU time per call (relay + Bridge DO)', ms(k.cpuPerCallMs), '/proc CPU time of the workerd process']);
    if (k.errors.length) rows.push(['bridge, concurrent: problems', k.errors.slice(0, 5).join('; '), '']);
  }
  return rows;
}

/** @param {Report} r */
function roundRows(r) {
  /** @type {string[][]} */
  const rows = [];
  for (const [storage, pass] of /** @type {Array<[string, PassResult | undefined]>} */ ([['disk', r.disk], ['tmpfs', r.tmpfs]])) {
    pass?.ingest?.rounds.forEach((x, k) =>
      rows.push([storage, String(k + 1), int(x.verify), int(x.nodeVerify), int(x.ingest), pct(x.ingest / x.verify), pct(x.ingest / x.nodeVerify), int(x.ephemeral), int(x.verifyCpu), int(x.ingestCpu)]),
    );
  }
  return rows;
}

/** Per-hop costs of the edge design (docs/SCALING.md): [hop, cost]. @param {Hops} h */
function hopRows(h) {
  /** @type {string[][]} */
  const rows = [
    ['id + signature check (Wasm), per event', us(h.verifyUs)],
    ['EventStore insert, per event', us(h.storeUs)],
    [`socket write of a live EVENT with its read check, per subscriber, JS side (${h.sockets} sockets)`, us(h.socketUs)],
    ['workerd CPU per additional subscriber of a fan-out (the runtime\'s socket work included; fan-out scenario)', us(h.subscriberCpuUs)],
    ['one object (K = 1): ingest over the wire · ingest per workerd CPU-second (verifyAndIngest)', `${int(h.ingestPerSecond)} · ${int(h.ingestPerCpuSecond)} events/s`],
  ];
  for (const n of h.sizes) {
    const rpc = h.rpcMs[n] ?? NaN;
    const batch = h.edgeBatchMs[n] ?? NaN;
    rows.push([`DO → DO RPC carrying ${n} events (round trip), per batch · per event`, `${ms(rpc)} · ${us((rpc * 1000) / n)}`]);
    rows.push([`primary's edgeBatch of ${n} events (RPC + write path), per batch · write path per event`, `${ms(batch)} · ${us(((batch - rpc) * 1000) / n)}`]);
  }
  return rows;
}

/** The projection of the hops for K = 1, 4, 16, 64: [K, ingest, bound, fan-out…]. @param {Hops} h */
function projectionRows(h) {
  return projectEdges(h).map((p) => [
    String(p.k),
    `${int(p.ingest)} events/s (${p.bound})`,
    ...PROJECTED_SUBSCRIBERS.map((n) => {
      const f = p.fanout[n];
      return f ? `${int(f.events)} events/s = ${int(f.deliveries)} deliveries/s (${f.bound})` : 'n/a';
    }),
    `${int(p.targeted.events)} events/s (${p.targeted.bound})`,
  ]);
}

const METRIC_HEADER = ['metric', 'value', 'target', 'met', 'measured at'];
const projectionHeader = [
  'K',
  'ingest (no subscribers)',
  ...PROJECTED_SUBSCRIBERS.map((n) => `fan-out to ${int(n)} subscribers`),
  'targeted events (one subscriber each)',
];

/** The summary printed at the end of a run. @param {Report} r */
export function renderTable(r) {
  const f = r.facts;
  const head = `edgestr relay bench — ${f.date} — nproc ${f.nproc} (${f.cpu}), Node ${f.node}, load average ${f.loadStart} → ${f.loadEnd}`;
  const errors = Object.entries(r.errors).map(([k, v]) => `FAILED ${k}: ${v}`);
  const hops = r.disk?.hops;
  const edges = hops
    ? ['', 'Edge design (docs/SCALING.md): per-hop costs inside workerd', '', table(...withPrevious(['hop', 'cost'], hopRows(hops), r.previous)), '', `Projected (batch of ${PROJECTION_BATCH})`, '', table(projectionHeader, projectionRows(hops))]
    : [];
  return [head, '', table(...withPrevious(METRIC_HEADER, metricRows(r), r.previous)), ...edges, ...(errors.length ? ['', ...errors] : [])].join('\n');
}

/** @param {BridgeResult | undefined} b */
const bridgeLimits = (b) =>
  b
    ? `${b.limits.clientPerMinute} requests a minute and ${b.limits.clientConcurrent} in progress per client key and ${b.limits.serverPerMinute} requests a minute per server`
    : 'a number of requests per client key and per server (the pass failed in this run)';

/** docs/BENCHMARKS.md. @param {Report} r */
export function renderReport(r) {
  const f = r.facts;
  const c = r.config;
  const req = r.disk?.req;
  return `# Benchmarks

Written by \`npm run bench\` (bench/run.mjs); every number below comes from the run of
${f.date}. Performance is never asserted in tests, only measured here.

**Reproduce:** \`npm ci && npm run bench\` (about ${Math.ceil(Number(f.durationS) / 60)} minutes here; rewrites this file
and prints the table; \`BENCH_QUICK=1 npm run bench\` is a small smoke run that writes nothing;
\`BENCH_ONLY=bridge\` (any of \`relay\`, \`tmpfs\`, \`agent\`, \`bridge\`, comma-separated) runs only those passes
and writes nothing).

## Results
${r.previous ? `\nEach figure is shown next to the previous run's (the report this run replaced), measured on whatever\nthe machine was doing then: compare ratios rather than rates, and both with their targets.\n` : ''}
${table(...withPrevious(METRIC_HEADER, metricRows(r), r.previous))}
${Object.keys(r.errors).length ? `\nFailed scenarios:\n\n${Object.entries(r.errors).map(([k, v]) => `- ${k}: ${v}`).join('\n')}\n` : ''}
Context:

${table(['measurement', 'value', 'measured at'], contextRows(r))}

## Machine

${table(
  ['fact', 'value'],
  [
    ['date', String(f.date)],
    ['`nproc`', String(f.nproc)],
    ['CPU', String(f.cpu)],
    ['memory', `${f.memGiB} GiB`],
    ['OS', String(f.os)],
    ['Node', String(f.node)],
    ['wrangler / miniflare / workerd', `${f.wrangler} / ${f.miniflare} / ${f.workerd}`],
    ['relay code', `git ${f.commit}`],
    ['load average (1 / 5 / 15 min) at start → end', `${f.loadStart} → ${f.loadEnd}`],
    ['bench duration', `${f.durationS} s`],
  ],
)}

The machine is shared (other test runs may be active, see the load average); workerd, the relay's
single thread, and this Node client compete for ${f.nproc} cores. Wall-clock rates drop under load; the
verify and ingest rounds therefore alternate, so that the ratio compares rates measured under the
same load, and the context table adds rates per second of workerd CPU time.

## How it is measured

**Relay.** \`bench/workerd/entry.ts\` — the production router and \`RelayShard\` plus \`/__bench/\` routes
that run inside the shard's Durable Object (timed verification, seeding through \`EventStore\`) — is
bundled with \`wrangler.toml\` by \`wrangler deploy --dry-run\` and served by Miniflare (the runner
inside \`wrangler dev\`, configured from \`wrangler.toml\` as vitest-pool-workers does it), i.e. one
workerd process listening on 127.0.0.1, without the proxy process \`wrangler dev\` puts in front. The run is done twice: with the Durable
Objects' SQLite files on disk (${r.storage.disk}, as \`wrangler dev\` keeps them) and on tmpfs
(${r.storage.tmpfs}), which removes the cost of SQLite's fsync per committed write.
Local workerd is not Cloudflare's production storage; the two passes bracket what the relay's own
code costs.

**Rate limits.** The relay's default token buckets would throttle the bench (20 events/s per
connection), so the relay runs with \`RELAY_LIMITS\` =
\`${r.relayLimits}\`;
all other limits are the defaults.

**Client.** This Node process (\`ws\`, no compression), all traffic to 127.0.0.1. Events are signed
with libsecp256k1 (\`nostr-wasm\`) before any clock starts.

- **Raw verification** (inside the shard DO): \`performance.now()\` around
  \`verify(sig, id, pubkey)\` of \`relayVerifier()\` — the instance that verifies every EVENT — over
  ${int(c.ingest.verifyPerRound)} pre-signed events, bytes decoded beforehand. Noble: the same loop with
  \`nobleVerifier\`. "id + signature": \`checkIdAndSignature\` (what the shard runs per EVENT).
- **Ingest** (client side): ${c.ingest.connections} WebSocket connections to \`/\` (the public shard), each
  with at most 64 unanswered EVENTs; ${int(c.ingest.ingestPerRound)} kind-1 events per round, signed by 64 keys in
  turn; time from the first send to the last OK. Includes message parsing, verification, the write
  policy, the SQLite insert and commit, the OK, and the loopback wire. ${c.ingest.rounds} rounds, each right
  after a verification round; the rates are medians over rounds, the ratio is the median of the
  per-round ratios (ingest round ÷ the verification round just before it). The ephemeral rounds
  (kind 20001) take the same path without storage. The shard stores verified EVENTs in batches
  (\`ingest_batch_max\` / \`ingest_batch_window_ms\`, defaults: docs/ARCHITECTURE.md "Batched ingest").
- **Node's Wasm verification** (client side, each round, right after the shard's): nostr-wasm's
  \`verifyEvent\` (sha256 of the serialized event + libsecp256k1 verify) over the same
  ${int(c.ingest.verifyPerRound)} events in this Node process; "ingest ÷ Node's Wasm verification" is
  the median of the per-round ratios.
- **As nosflare's figure** (client side): after the rounds, ${NOSFLARE.events} fresh kind-1 events over
  ${NOSFLARE.sockets} of the sockets above (at most 64 unanswered each), first send → last OK, three
  times (median). nosflare's ${NOSFLARE.rate} events/s is the figure issue #12 quotes for the same
  shape of run; it is not measured here.
- **Memory** (disk pass, right after the ingest rounds and before the fan-out pass, whose sockets
  would leave memory behind for these to reuse): a fresh owner shard is woken by one connection with one subscription,
  then ${int(c.memory.connections)} idle connections are opened, then ${c.memory.subscriptions} subscriptions on each
  (\`{"authors":[random],"kinds":[1]}\`, so each has its own fan-out index entry); VmRSS of the workerd
  process is read from \`/proc\` 1 s after each step. Bytes per connection = growth ÷ connections;
  per subscription = growth ÷ subscriptions. RSS includes everything workerd holds for them (socket
  buffers, the Connection objects and their rate buckets, the SQLite pages of \`conn_subs\`), and
  is noisy by a few hundred kB (allocator and GC timing).
- **CPU time** (context): user + system time of the workerd process (all its threads) from
  \`/proc\`, 10 ms ticks, over each round; for fan-out, also this Node process's own CPU time.
- **Publish → receive** (client side): N subscriber sockets, each with \`REQ {"#t":[topic]}\`, and one
  publisher socket that sends one event at a time (${c.fanout.warmup} warm-up + ${c.fanout.publishes} measured per kind,
  5 ms apart). Latency = arrival of the EVENT at each subscriber socket (\`performance.now()\` on
  'message' in this process) − send time; p50/p99 over N × ${c.fanout.publishes} samples. The Node client
  receives all N frames on one thread, so its own processing is included: at 1,000 subscribers the
  p99 is an upper bound of the relay's share. Each publish contributes N samples, so the p99 is
  decided by the slowest 1 % of publishes (one pause of either process moves it); it varies
  noticeably between runs on a shared machine.
- **REQ** (client side): REQ → EOSE on one socket to an owner shard, sequential, ${c.req.queries} queries per
  cell after ${c.req.warmup} warm-ups. Filters \`{"authors":[a],"kinds":[1],"limit":${c.req.limit}}\` (a: one of
  ${c.req.authors} authors) and \`{"#p":[p],"limit":${c.req.limit}}\` (p: one of ${c.req.recipients} recipients). The shard is seeded
  with stand-in events (random id and sig; kind 1 (80 %) or 7; created_at spread over 30 days;
  tags p, e, t) inserted by \`EventStore.insert\` inside the DO — the relay's storage code, without
  signature checks, which queries never look at. At 100k: ~${int((0.8 * 100_000) / c.req.authors)} kind-1 events per author,
  ~${int(100_000 / c.req.recipients)} events per recipient.${req ? '' : ' (failed in this run)'}

- **Hosted agent** (client side and the fake provider, both in this Node process, one clock:
  \`performance.timeOrigin + performance.now()\`). A third workerd is started as above (storage on
  disk, the same \`RELAY_LIMITS\`) with \`OPENAI_BASE_URL\` = the fake LLM provider of
  \`test/fake-provider/server.ts\` (bundled with esbuild and started in this process on 127.0.0.1; it
  speaks the OpenAI Chat Completions SSE format), \`EDGESTR_OWNERS\` = a bench owner and
  \`EDGESTR_SECRET\` set. The owner creates an agent with provider \`openai\` through \`POST /api/agents\`
  (NIP-98; \`prompts_per_minute\` lifted, since one sender sends every prompt) and waits for its
  ai.info (31340). A client authenticated (NIP-42) on \`/r/<owner>\` subscribes to
  \`{"kinds":[25800,25801,25803,25804,25805],"#p":[client]}\` and sends prompts (25802, NIP-44) one
  at a time, each in a session of its own (same request size every run), after
  ${c.agent.series[0]?.warmup ?? 0} warm-up runs per series; the owner's socket subscribes to its NIP-AO
  frames. Per run: **overhead** = (first 25801 of the run received and decrypted − prompt sent) −
  (the fake provider's \`firstDeltaAt − receivedAt\` for that run's request, found by a marker in the
  prompt text) = (prompt sent → provider request arrives) + (provider's first token → first delta at
  the client). It includes the relay's ingest of the prompt, its delivery to the Agent Durable Object,
  the agent's checks, the 25800 status, the provider request, SSE parsing, the delta coalescing
  (256 characters or 50 ms), encrypting, signing and publishing the delta, the relay's fan-out and
  the client's decryption. Series: ${c.agent.series.map((s) => `${s.what}, up to ${s.runs} runs`).join('; ')}.
  **Events per response**: the client's events of the run, by kind (median per run).
  **CPU per delta**: user + system time of the whole workerd process (relay shards, router and Agent
  Durable Object) from the first measured prompt to 0.5 s after the last 25803, divided by the delta
  events received; it therefore includes everything else the runs cost: the prompt's ingest, the
  status and response events, the NIP-AO frames the agent sends its owner (signed and encrypted,
  verified by the shard), and the provider stream's parsing. The fake provider runs in this
  Node process, not in workerd.

- **DVMCP bridge** (client side, \`performance.now()\` in this Node process). The real
  \`@modelcontextprotocol/server-everything\` (\`mcp-server-everything streamableHttp\`, started as
  \`test/mcp/global-setup.ts\` does) listens on 127.0.0.1; a fourth workerd is started as above with
  \`EDGESTR_OWNERS\` = a bench owner, \`EDGESTR_SECRET\` set and \`EDGESTR_OUTBOUND_ALLOW=127.0.0.1:*\`.
  The owner registers server-everything through \`POST /api/bridge/servers\` (NIP-98) under three
  server ids (one per series below, same upstream URL) and waits for their 31316 on the public
  shard. **Direct** (the baseline, same run): the official MCP SDK \`Client\` over Streamable HTTP
  calls \`tools/call echo\` ${c.bridge.calls} times one at a time after ${c.bridge.warmup} warm-ups; the time is
  the \`callTool\` promise. **Through relay + bridge**: a Nostr client (\`ws\`, NIP-42 as its own key on
  \`/\`, subscribed to the 26910 and 1059 that p-tag it) publishes a 25910 \`tools/call echo\` to the
  provider with \`s\` = the server id; the time runs from sending the EVENT frame (signed, or
  gift-wrapped, before the clock starts) to the arrival of the 26910 with \`e\` = the request id
  (then parsed and checked: \`Echo: <message>\`); gift-wrapped: the request is a 1059 around a seal signed
  by the client around the 25910 (\`src/shared/dvmcp-wrap.ts\`, bundled with esbuild), and the
  answer's 1059 is unwrapped and its seal verified (noble) before the clock stops. The path includes
  the relay's ingest and fan-out of the request to the bridge's subscription, the Bridge Durable
  Object's checks and limits, its upstream MCP call (one session per client key and server), the
  answer's signing (and wrapping), and the relay's fan-out back. **Overhead** = p50 through relay +
  bridge − p50 direct. **Concurrent**: ${c.bridge.concurrentClients} clients, each its own key and socket, ${c.bridge.warmup} warm-up calls
  each (all together), then ${c.bridge.callsPerClient} plain calls each, one at a time per client, all clients at
  once; throughput = calls answered ÷ (last answer − first send); its baseline is the same with
  ${c.bridge.concurrentClients} direct SDK clients (each its own MCP session), i.e. what server-everything alone
  sustains here. **Bridge limits**: the bridge allows ${bridgeLimits(r.bridge)}
  (\`workers/bridge/limits.ts\`); it has no binding to raise them, so the bench stays under them: each key makes at most ${c.bridge.callsPerKey} calls (${c.bridge.warmup} warm-up calls first, which open its upstream session;
  the sequential series use fresh keys in turn), one at a time, and each series has its own server id.

## Edge design: per-hop costs

What a shard split into K edge objects (\`RELAY_EDGES\`, [SCALING.md](SCALING.md)) pays per hop,
timed inside workerd (\`/__bench/hops\` and \`/__bench/sockets\` of bench/workerd/entry.ts, disk pass): ${
    r.disk?.hops
      ? `${r.disk.hops.rounds} edgeBatch calls and ${r.disk.hops.rounds * 10} RPCs per batch size, each series after one unmeasured call.`
      : 'the scenario failed in this run.'
  }
The RPC is one Durable Object calling another's method with a batch of events and awaiting the
answer; on one local workerd both ends run on the same thread, so its time is the work of both.

${r.disk?.hops ? table(...withPrevious(['hop', 'cost'], hopRows(r.disk.hops), r.previous)) : 'n/a'}

Projected from these costs and the ingest measured above (formulas in bench/lib/edges.mjs, batches
of ${PROJECTION_BATCH} events). One local workerd runs every object on one thread, so a gain from K > 1 is
not measured here: this is a projection, assuming each object gets its own thread as Durable Objects do.

${r.disk?.hops ? table(projectionHeader, projectionRows(r.disk.hops)) : 'n/a'}

## Per-round ingest

${table(['storage', 'round', 'wasm verify /s', 'Node wasm verify /s', 'ingest /s', 'ratio', 'ratio to Node', 'ephemeral ingest /s', 'verify per CPU-s', 'ingest per CPU-s'], roundRows(r))}
`;
}
