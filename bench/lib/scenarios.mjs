// @ts-check
// The bench scenarios, each run from Node against the relay on 127.0.0.1:
// - verifyAndIngest: alternating rounds of (a) the shard's own Wasm verifier timed inside its
//   Durable Object and (b) ingest of pre-signed events over WebSockets, so that both rates see the
//   same machine load; plus Node's own Wasm verification (nostr-wasm) of the same events in each
//   round, noble and id+signature rates, ephemeral (never stored) ingest, and ingest as nosflare's
//   figure was measured (500 events over 4 sockets).
// - fanout: publish → receive latency at every subscriber socket, for 100 and 1,000 subscribers.
// - reqLatency: REQ → EOSE latency over 10k and 100k stored events (seeded through EventStore).
// - memory: workerd's resident memory per idle connection and per subscription.

import {
  Deadline,
  closeSockets,
  fakeEvent,
  latencySummary,
  median,
  nowSeconds,
  openSocket,
  openSockets,
  postJson,
  randomHex,
  sleep,
  waiter,
} from './client.mjs';

/**
 * @typedef {import('./client.mjs').NostrEvent} NostrEvent
 * @typedef {import('ws').WebSocket} WebSocket
 * @typedef {{ sign(t: import('./client.mjs').EventTemplate): NostrEvent, verify(e: NostrEvent): boolean }} Signer
 * @typedef {{ n: number, p50: number, p99: number, max: number }} Latency
 */

/**
 * Events that differ in content (hence id), all valid and fresh.
 * @param {Signer} signer @param {number} n @param {number} kind @param {string} label
 */
function signBatch(signer, n, kind, label) {
  const created = nowSeconds();
  return Array.from({ length: n }, (_, i) => signer.sign({ kind, created_at: created, tags: [], content: `${label} ${i} ${randomHex(8)}` }));
}

/**
 * Times one verification round inside the public shard's Durable Object.
 * @param {string} httpUrl @param {'wasm' | 'noble' | 'wasm+id'} impl @param {NostrEvent[]} events
 * @returns {Promise<{ rate: number, ms: number, n: number, verifier: string }>}
 */
async function verifyRound(httpUrl, impl, events) {
  const r = /** @type {{ n: number, valid: number, ms: number, verifier: string }} */ (
    await postJson(`${httpUrl}/__bench/verify?impl=${encodeURIComponent(impl)}`, events)
  );
  if (r.valid !== r.n) throw new Error(`${impl}: only ${r.valid} of ${r.n} signatures verified`);
  if (!(r.ms > 0)) throw new Error(`${impl}: the Worker clock did not advance during the round (${r.ms} ms)`);
  return { rate: (r.n / r.ms) * 1000, ms: r.ms, n: r.n, verifier: r.verifier };
}

/**
 * Times nostr-wasm's `verifyEvent` (id and signature) over `events` in this Node process.
 * @param {Signer} signer @param {NostrEvent[]} events
 */
function nodeVerifyRound(signer, events) {
  let valid = 0;
  const start = performance.now();
  for (const e of events) if (signer.verify(e)) valid++;
  const ms = performance.now() - start;
  if (valid !== events.length) throw new Error(`Node nostr-wasm: only ${valid} of ${events.length} events verified`);
  return { rate: (events.length / ms) * 1000 };
}

/** Events and sockets of the ingest as nosflare's figure (86 events/s, issue #12) was measured. */
export const NOSFLARE = { events: 500, sockets: 4, rate: 86 };

/**
 * Publishes `events` over `sockets` (round-robin, at most `window` unanswered per socket) and
 * times first send → last OK. Frames are serialized before the clock starts.
 * @param {WebSocket[]} sockets @param {NostrEvent[]} events
 */
async function ingestRound(sockets, events, window = 64, timeoutMs = 120_000) {
  /** @type {string[][]} */
  const shares = sockets.map(() => []);
  events.forEach((e, i) => shares[i % sockets.length]?.push(JSON.stringify(['EVENT', e])));
  let oks = 0;
  let rejected = 0;
  let firstRejection = '';
  const all = waiter(() => oks === events.length, timeoutMs, `OK for ${events.length} events`);
  /** @type {Array<() => void>} */
  const detach = [];
  const start = performance.now();
  let end = start;
  sockets.forEach((ws, k) => {
    const share = shares[k] ?? [];
    let sent = 0;
    let acked = 0;
    const fill = () => {
      while (sent < share.length && sent - acked < window) ws.send(/** @type {string} */ (share[sent++]));
    };
    /** @param {Buffer} data */
    const onMessage = (data) => {
      const frame = JSON.parse(data.toString());
      if (frame[0] !== 'OK') return;
      acked++;
      oks++;
      if (frame[2] !== true) {
        rejected++;
        firstRejection ||= String(frame[3]);
      }
      end = performance.now();
      fill();
      all.poke();
    };
    ws.on('message', onMessage);
    detach.push(() => ws.off('message', onMessage));
    fill();
  });
  try {
    await all.done;
  } finally {
    detach.forEach((d) => d());
  }
  if (rejected) throw new Error(`${rejected} of ${events.length} events rejected, first: ${firstRejection}`);
  const ms = end - start;
  return { n: events.length, ms, rate: (events.length / ms) * 1000 };
}

/**
 * Runs `fn` and returns its result with the workerd CPU time (ms) it took.
 * @template T @param {() => number} cpu @param {() => Promise<T>} fn @returns {Promise<[T, number]>}
 */
async function withCpu(cpu, fn) {
  const before = cpu();
  const r = await fn();
  return [r, cpu() - before];
}

/**
 * @param {{ httpUrl: string, wsUrl: string, signer: Signer, log: (s: string) => void, deadline: Deadline, cpu: () => number,
 *   rounds: number, ingestPerRound: number, verifyPerRound: number, connections: number }} o
 */
export async function verifyAndIngest(o) {
  const { httpUrl, wsUrl, signer, log, deadline } = o;
  log(`signing ${o.verifyPerRound + (2 * o.rounds + 1) * o.ingestPerRound} events with nostr-wasm in Node (not timed)…`);
  const verifySample = signBatch(signer, o.verifyPerRound, 1, 'verify sample');
  const warmup = signBatch(signer, o.ingestPerRound, 1, 'warm-up');
  const stored = Array.from({ length: o.rounds }, (_, r) => signBatch(signer, o.ingestPerRound, 1, `ingest round ${r}`));
  const ephemeral = Array.from({ length: o.rounds }, (_, r) => signBatch(signer, o.ingestPerRound, 20001, `ephemeral round ${r}`));
  const nosflareStyle = Array.from({ length: 3 }, (_, r) => signBatch(signer, NOSFLARE.events, 1, `nosflare-style ${r}`));

  const sockets = await openSockets(`${wsUrl}/`, o.connections, deadline);
  try {
    await verifyRound(httpUrl, 'wasm', verifySample); // warm-up: instantiation and JIT
    await ingestRound(sockets, warmup);
    /** @type {Array<{ verify: number, nodeVerify: number, ingest: number, ephemeral: number, verifyCpu: number, ingestCpu: number, ephemeralCpu: number }>} */
    const rounds = [];
    let verifierName = '';
    for (let r = 0; r < o.rounds; r++) {
      deadline.check();
      const [v, vCpu] = await withCpu(o.cpu, () => verifyRound(httpUrl, 'wasm', verifySample));
      verifierName = v.verifier;
      const nodeVerify = nodeVerifyRound(signer, verifySample).rate;
      const [ing, iCpu] = await withCpu(o.cpu, () => ingestRound(sockets, /** @type {NostrEvent[]} */ (stored[r])));
      const [eph, eCpu] = await withCpu(o.cpu, () => ingestRound(sockets, /** @type {NostrEvent[]} */ (ephemeral[r])));
      rounds.push({
        verify: v.rate,
        nodeVerify,
        ingest: ing.rate,
        ephemeral: eph.rate,
        verifyCpu: (v.n / vCpu) * 1000,
        ingestCpu: (ing.n / iCpu) * 1000,
        ephemeralCpu: (eph.n / eCpu) * 1000,
      });
      log(`  round ${r + 1}/${o.rounds}: wasm verify ${v.rate.toFixed(0)}/s (Node ${nodeVerify.toFixed(0)}/s), ingest ${ing.rate.toFixed(0)}/s, ephemeral ingest ${eph.rate.toFixed(0)}/s (per workerd CPU-second: ${(rounds.at(-1)?.ingestCpu ?? 0).toFixed(0)} ingested, ${(rounds.at(-1)?.verifyCpu ?? 0).toFixed(0)} verified)`);
    }
    const noble = [];
    const withId = [];
    for (let r = 0; r < 3; r++) {
      deadline.check();
      noble.push((await verifyRound(httpUrl, 'noble', verifySample.slice(0, Math.ceil(o.verifyPerRound / 3)))).rate);
      withId.push((await verifyRound(httpUrl, 'wasm+id', verifySample)).rate);
    }
    // As nosflare's figure was measured: 500 events over 4 sockets, three times (median).
    const nosflare = [];
    for (const events of nosflareStyle) {
      deadline.check();
      nosflare.push((await ingestRound(sockets.slice(0, NOSFLARE.sockets), events)).rate);
    }
    const verify = median(rounds.map((x) => x.verify));
    const ingest = median(rounds.map((x) => x.ingest));
    return {
      verifierName,
      rounds,
      verify,
      ingest,
      // Each ingest round is paired with the verification round just before it (same machine load).
      ratio: median(rounds.map((x) => x.ingest / x.verify)),
      roundRatios: rounds.map((x) => x.ingest / x.verify),
      nodeVerify: median(rounds.map((x) => x.nodeVerify)),
      nodeRatio: median(rounds.map((x) => x.ingest / x.nodeVerify)),
      nosflareStyle: median(nosflare),
      ephemeral: median(rounds.map((x) => x.ephemeral)),
      perCpuSecond: {
        verify: median(rounds.map((x) => x.verifyCpu)),
        ingest: median(rounds.map((x) => x.ingestCpu)),
        ephemeral: median(rounds.map((x) => x.ephemeralCpu)),
      },
      noble: median(noble),
      withId: median(withId),
      eventsPerRound: o.ingestPerRound,
      connections: o.connections,
    };
  } finally {
    await closeSockets(sockets);
  }
}

/**
 * One publish being measured: when it was sent, when each subscriber and the publisher's OK saw it.
 * @typedef {{ id: string, t0: number, got: number, okAt: number, error: string, samples: number[], poke: () => void }} InFlight
 * @typedef {{ latency: Latency, ok: Latency, relayCpuMs: number, clientCpuMs: number }} FanoutCell
 */

/** CPU time (user + system) of this Node process in ms. */
const clientCpuMs = () => {
  const u = process.cpuUsage();
  return (u.user + u.system) / 1000;
};

/**
 * @param {{ wsUrl: string, signer: Signer, log: (s: string) => void, deadline: Deadline, cpu: () => number,
 *   subscriberCounts: number[], publishes: number, warmup: number }} o
 */
export async function fanout(o) {
  const { wsUrl, signer, log, deadline } = o;
  const topic = `fanout-${randomHex(8)}`;
  /** @type {InFlight | undefined} */
  let current;
  const publisher = await openSocket(`${wsUrl}/`);
  publisher.on('message', (data) => {
    const frame = JSON.parse(data.toString());
    if (frame[0] !== 'OK' || !current || frame[1] !== current.id) return;
    current.okAt = performance.now();
    if (frame[2] !== true) current.error = `publish rejected: ${frame[3]}`;
    current.poke();
  });
  /** @type {WebSocket[]} */
  const subscribers = [];
  /** @param {Buffer} data */
  const onSubscriberMessage = (data) => {
    const t = performance.now();
    const c = current;
    if (!c) return;
    const s = data.toString();
    if (s.startsWith('["EVENT"') && s.includes(c.id)) {
      c.samples.push(t - c.t0);
      c.got++;
      c.poke();
    }
  };
  /** @type {Record<string, Record<'stored' | 'ephemeral', FanoutCell>>} */
  const results = {};
  try {
    for (const count of o.subscriberCounts) {
      log(`  connecting subscribers: ${subscribers.length} → ${count}…`);
      const added = await openSockets(`${wsUrl}/`, count - subscribers.length, deadline);
      await subscribe(added, topic, deadline);
      for (const ws of added) ws.on('message', onSubscriberMessage);
      subscribers.push(...added);

      /** @type {Partial<Record<'stored' | 'ephemeral', FanoutCell>>} */
      const cells = {};
      for (const [label, kind] of /** @type {Array<['stored' | 'ephemeral', number]>} */ ([['stored', 1], ['ephemeral', 20001]])) {
        const created = nowSeconds();
        const events = Array.from({ length: o.warmup + o.publishes }, (_, i) =>
          signer.sign({ kind, created_at: created, tags: [['t', topic]], content: `fan-out ${label} ${i}` }),
        );
        /** @type {number[]} */
        const latencies = [];
        /** @type {number[]} */
        const oks = [];
        let cpuStart = { relay: 0, client: 0 };
        for (const [i, e] of events.entries()) {
          deadline.check();
          if (i === o.warmup) cpuStart = { relay: o.cpu(), client: clientCpuMs() };
          const frame = JSON.stringify(['EVENT', e]);
          /** @type {InFlight} */
          const m = { id: e.id, t0: 0, got: 0, okAt: 0, error: '', samples: [], poke: () => {} };
          const w = waiter(() => m.error !== '' || (m.got === subscribers.length && m.okAt > 0), 10_000, `fan-out of one event to ${subscribers.length} subscribers`);
          m.poke = w.poke;
          current = m;
          m.t0 = performance.now();
          publisher.send(frame);
          await w.done;
          current = undefined;
          if (m.error) throw new Error(m.error);
          if (i >= o.warmup) {
            latencies.push(...m.samples);
            oks.push(m.okAt - m.t0);
          }
          await sleep(5);
        }
        cells[label] = {
          latency: latencySummary(latencies),
          ok: latencySummary(oks),
          relayCpuMs: (o.cpu() - cpuStart.relay) / o.publishes,
          clientCpuMs: (clientCpuMs() - cpuStart.client) / o.publishes,
        };
      }
      const r = /** @type {Record<'stored' | 'ephemeral', FanoutCell>} */ (cells);
      results[String(count)] = r;
      for (const label of /** @type {const} */ (['stored', 'ephemeral'])) {
        const x = r[label];
        log(`  ${count} subscribers, ${label}: p50 ${x.latency.p50.toFixed(2)} / p99 ${x.latency.p99.toFixed(2)} ms; OK p50 ${x.ok.p50.toFixed(2)} ms; CPU per publish: workerd ${x.relayCpuMs.toFixed(1)} ms, Node ${x.clientCpuMs.toFixed(1)} ms`);
      }
    }
    return { results, publishes: o.publishes };
  } finally {
    current = undefined;
    await closeSockets([publisher, ...subscribers]);
  }
}

/** Sends one REQ per socket and waits for every EOSE. @param {WebSocket[]} sockets @param {string} topic @param {Deadline} deadline */
async function subscribe(sockets, topic, deadline) {
  let eose = 0;
  let refused = '';
  const w = waiter(() => refused !== '' || eose === sockets.length, Math.max(1_000, Math.min(60_000, deadline.left())), `EOSE on ${sockets.length} subscriptions`);
  /** @type {Array<() => void>} */
  const detach = [];
  for (const ws of sockets) {
    /** @param {Buffer} data */
    const onMessage = (data) => {
      const s = data.toString();
      if (s.startsWith('["EOSE"')) eose++;
      else if (s.startsWith('["CLOSED"')) refused ||= s;
      w.poke();
    };
    ws.on('message', onMessage);
    detach.push(() => ws.off('message', onMessage));
    ws.send(JSON.stringify(['REQ', 'fanout', { '#t': [topic] }]));
  }
  try {
    await w.done;
  } finally {
    detach.forEach((d) => d());
  }
  if (refused) throw new Error(`subscription refused: ${refused}`);
}

/**
 * Resident memory of workerd per idle connection and per subscription: opens `connections` sockets
 * to a fresh owner shard (after one that wakes the shard), then `subscriptions` REQs on each (distinct
 * authors, so every subscription has its own index entries), reading VmRSS after each step once it
 * settled. Bytes per connection = RSS growth ÷ connections; per subscription = growth ÷ subscriptions.
 * @param {{ wsUrl: string, log: (s: string) => void, deadline: Deadline, rss: () => number, connections: number, subscriptions: number }} o
 */
export async function memory(o) {
  const { wsUrl, log, deadline } = o;
  const path = `${wsUrl}/r/${randomHex()}`;
  const settle = async () => {
    await sleep(1_000);
    return o.rss();
  };
  const first = await openSockets(path, 1, deadline);
  /** @type {WebSocket[]} */
  let sockets = [];
  try {
    await subscribeEach(first, 1, deadline);
    const base = await settle();
    sockets = await openSockets(path, o.connections, deadline);
    const withConnections = await settle();
    await subscribeEach(sockets, o.subscriptions, deadline);
    const withSubscriptions = await settle();
    const perConnection = (withConnections - base) / o.connections;
    const perSubscription = (withSubscriptions - withConnections) / (o.connections * o.subscriptions);
    log(`  RSS ${(base / 2 ** 20).toFixed(1)} MiB → ${(withConnections / 2 ** 20).toFixed(1)} MiB with ${o.connections} idle connections → ${(withSubscriptions / 2 ** 20).toFixed(1)} MiB with ${o.subscriptions} subscriptions each: ${perConnection.toFixed(0)} B per connection, ${perSubscription.toFixed(0)} B per subscription`);
    return { base, withConnections, withSubscriptions, perConnection, perSubscription, connections: o.connections, subscriptions: o.subscriptions };
  } finally {
    await closeSockets([...first, ...sockets]);
  }
}

/**
 * Opens `n` subscriptions on every socket (`{"authors":[random],"kinds":[1]}` each) and waits for every EOSE.
 * @param {WebSocket[]} sockets @param {number} n @param {Deadline} deadline
 */
async function subscribeEach(sockets, n, deadline) {
  let eose = 0;
  let refused = '';
  const total = sockets.length * n;
  const w = waiter(() => refused !== '' || eose === total, Math.max(1_000, Math.min(120_000, deadline.left())), `EOSE on ${total} subscriptions`);
  /** @type {Array<() => void>} */
  const detach = [];
  for (const ws of sockets) {
    /** @param {Buffer} data */
    const onMessage = (data) => {
      const s = data.toString();
      if (s.startsWith('["EOSE"')) eose++;
      else if (s.startsWith('["CLOSED"')) refused ||= s;
      w.poke();
    };
    ws.on('message', onMessage);
    detach.push(() => ws.off('message', onMessage));
    for (let i = 0; i < n; i++) ws.send(JSON.stringify(['REQ', `m${i}`, { authors: [randomHex()], kinds: [1] }]));
  }
  try {
    await w.done;
  } finally {
    detach.forEach((d) => d());
  }
  if (refused) throw new Error(`subscription refused: ${refused}`);
}

const SEED_BATCH = 2_500;

/** @template T @param {T[]} list @returns {T} */
const pick = (list) => /** @type {T} */ (list[Math.floor(Math.random() * list.length)]);

/**
 * Sends one REQ and times it until EOSE, counting the events received.
 * @param {WebSocket} ws @param {object} filter @returns {Promise<{ ms: number, events: number }>}
 */
function timedReq(ws, filter, timeoutMs = 10_000) {
  return new Promise((resolve, reject) => {
    let events = 0;
    const timer = setTimeout(() => finish(new Error(`no EOSE within ${timeoutMs} ms`)), timeoutMs);
    /** @param {Error | undefined} error */
    const finish = (error, ms = 0) => {
      clearTimeout(timer);
      ws.off('message', onMessage);
      if (error) reject(error);
      else resolve({ ms, events });
    };
    /** @param {Buffer} data */
    const onMessage = (data) => {
      const s = data.toString();
      if (s.startsWith('["EVENT","q"')) events++;
      else if (s.startsWith('["EOSE","q"')) finish(undefined, performance.now() - t0);
      else if (s.startsWith('["CLOSED","q"')) finish(new Error(`REQ refused: ${s}`));
    };
    ws.on('message', onMessage);
    const frame = JSON.stringify(['REQ', 'q', filter]);
    const t0 = performance.now();
    ws.send(frame);
  });
}

/**
 * Seeds an owner shard with stand-in events through the real EventStore (POST /__bench/seed), up
 * to each size in turn, and measures REQ → EOSE for an author+kind and a #p filter.
 * @param {{ httpUrl: string, wsUrl: string, log: (s: string) => void, deadline: Deadline, sizes: number[],
 *   queries: number, warmup: number, limit: number, authors: number, recipients: number }} o
 */
export async function reqLatency(o) {
  const { httpUrl, wsUrl, log, deadline } = o;
  const owner = randomHex();
  const authors = Array.from({ length: o.authors }, () => randomHex());
  const recipients = Array.from({ length: o.recipients }, () => randomHex());
  const now = nowSeconds();
  /** @type {Array<[string, () => object]>} */
  const filters = [
    ['author+kind', () => ({ authors: [pick(authors)], kinds: [1], limit: o.limit })],
    ['#p', () => ({ '#p': [pick(recipients)], limit: o.limit })],
  ];
  /** @type {Record<string, Record<string, Latency & { events: number }>>} */
  const results = {};
  let seeded = 0;
  let seedMs = 0;
  for (const size of o.sizes) {
    while (seeded < size) {
      deadline.check();
      const n = Math.min(SEED_BATCH, size - seeded);
      const batch = Array.from({ length: n }, () =>
        fakeEvent({ author: pick(authors), kind: Math.random() < 0.8 ? 1 : 7, createdAt: now - Math.floor(Math.random() * 30 * 86_400), p: pick(recipients) }),
      );
      const r = /** @type {{ stored: number, duplicate: number, ms: number }} */ (await postJson(`${httpUrl}/__bench/seed?owner=${owner}`, batch));
      if (r.stored + r.duplicate !== n) throw new Error(`seeding stored ${r.stored} of ${n} events`);
      seeded += n;
      seedMs += r.ms;
    }
    const stored = /** @type {{ size: number }} */ (await (await fetch(`${httpUrl}/__bench/size?owner=${owner}`)).json()).size;
    if (stored !== size) throw new Error(`the shard holds ${stored} events, expected ${size}`);
    log(`  ${stored} events stored (seeding ran at ${((seeded / seedMs) * 1000).toFixed(0)} inserts/s inside the shard)`);
    const ws = await openSocket(`${wsUrl}/r/${owner}`);
    try {
      /** @type {Record<string, Latency & { events: number }>} */
      const byFilter = {};
      for (const [label, make] of filters) {
        const lat = [];
        const counts = [];
        for (let i = 0; i < o.warmup + o.queries; i++) {
          deadline.check();
          const { ms, events } = await timedReq(ws, make());
          if (i < o.warmup) continue;
          lat.push(ms);
          counts.push(events);
        }
        const summary = { ...latencySummary(lat), events: median(counts) };
        byFilter[label] = summary;
        log(`  ${size} events, ${label}: p50 ${summary.p50.toFixed(2)} ms, p99 ${summary.p99.toFixed(2)} ms (median ${summary.events} events returned)`);
      }
      results[String(size)] = byFilter;
    } finally {
      await closeSockets([ws]);
    }
  }
  return { results, seedRate: (seeded / seedMs) * 1000, limit: o.limit, authors: o.authors, recipients: o.recipients, queries: o.queries };
}
