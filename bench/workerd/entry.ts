// Bench-only Worker entry (bundled with wrangler.toml by bench/lib/server.mjs): the production router and RelayShard,
// unchanged, plus three routes under /__bench/ that run inside the shard's Durable Object:
//   POST /__bench/verify?impl=wasm|noble|wasm+id  times the shard's own verifier over given events
//   POST /__bench/seed                              inserts prepared events through the real EventStore
//                                                   (idempotent: a repeated batch comes back as duplicates)
//   GET  /__bench/size                              number of stored events
//   POST /__bench/sockets                           times one frame sent to every socket the shard holds
//                                                   (with the read-policy check of a live delivery)
//   POST /__bench/hops                              per-hop costs of the edge design (docs/SCALING.md), in a
//                                                   bench object of its own: id + signature check, a DO → DO
//                                                   RPC carrying a batch of n events, the primary's edgeBatch
//                                                   of n events (write path), EventStore inserts
// `?owner=<hex>` picks an owner shard (default: the public shard). Never deployed.

import app, { RelayShard as ProductionShard, type Env } from '../../workers/index.js';

// Every other export of the production entry (the other Durable Object classes) unchanged; the
// RelayShard declared below takes precedence over the re-exported one.
export * from '../../workers/index.js';
import { shardStub } from '../../workers/common/shards.js';
import { EventStore } from '../../workers/relay-do/store.js';
import { relayVerifier } from '../../workers/common/verifier.js';
import { checkIdAndSignature, type NostrEvent } from '../../src/shared/event.js';
import { hexToBytes } from '../../src/shared/hex.js';
import { nobleVerifier, type SchnorrVerifier } from '../../src/shared/verify.js';
import { relayMessage } from '../../src/shared/messages.js';
import { delivers } from '../../workers/relay-do/read-policy.js';
import type { EdgeOp } from '../../workers/relay-do/edge-wire.js';

const BENCH_PREFIX = '/__bench/';

/** Result of a timed verification round: how many checks passed and how long the loop took. */
interface VerifyResult {
  impl: string;
  verifier: string;
  n: number;
  valid: number;
  ms: number;
}

async function readEvents(request: Request): Promise<NostrEvent[]> {
  const body: unknown = await request.json();
  if (!Array.isArray(body)) throw new Error('body must be a JSON array of events');
  return body as NostrEvent[];
}

/** Times `verifier.verify` (bytes prepared beforehand) or, for wasm+id, the full id + signature check. */
function timeVerify(impl: string, verifier: SchnorrVerifier, events: NostrEvent[]): VerifyResult {
  let valid = 0;
  if (impl === 'wasm+id') {
    const start = performance.now();
    for (const e of events) if (checkIdAndSignature(e, verifier).ok) valid++;
    return { impl, verifier: verifier.name, n: events.length, valid, ms: performance.now() - start };
  }
  const inputs = events.map((e) => [hexToBytes(e.sig), hexToBytes(e.id), hexToBytes(e.pubkey)] as const);
  const start = performance.now();
  for (const [sig, msg, pub] of inputs) if (verifier.verify(sig, msg, pub)) valid++;
  return { impl, verifier: verifier.name, n: events.length, valid, ms: performance.now() - start };
}

/** What /__bench/hops is asked to time: `events` (fresh, distinct), batch `sizes`, `rounds` per size. */
interface HopsRequest {
  events: NostrEvent[];
  sizes: number[];
  rounds: number;
}

/** Milliseconds per call of `fn`, over `rounds` calls (one unmeasured call first). */
async function msPerCall(rounds: number, fn: (round: number) => Promise<unknown>): Promise<number> {
  await fn(-1);
  const start = performance.now();
  for (let r = 0; r < rounds; r++) await fn(r);
  return (performance.now() - start) / rounds;
}

export class RelayShard extends ProductionShard {
  /** Bench RPC: receives a batch of events and answers its size (the transport cost of one edge → primary batch). */
  benchEcho(events: NostrEvent[]): number {
    return events.length;
  }

  /** The hops of the edge design, timed in this object; `/__bench/hops` documents them. */
  private async hops(body: HopsRequest): Promise<Response> {
    const { events, sizes, rounds } = body;
    const verifier = await relayVerifier();
    const v0 = performance.now();
    let valid = 0;
    for (const e of events) if (checkIdAndSignature(e, verifier).ok) valid++;
    const verifyUs = ((performance.now() - v0) * 1000) / events.length;
    if (valid !== events.length) throw new Error(`only ${valid} of ${events.length} events verified`);

    const ns = this.env.RELAY_SHARD as unknown as DurableObjectNamespace<RelayShard>;
    const peer = ns.get(ns.idFromName(`bench:hops-peer`));
    const rpcMs: Record<number, number> = {};
    // Ten times the rounds: one call takes about as long as the clock's resolution here.
    for (const n of sizes) rpcMs[n] = await msPerCall(rounds * 10, () => peer.benchEcho(events.slice(0, n)));

    // A fresh primary per request (a resent request must not meet its own events as duplicates).
    const primary = ns.get(ns.idFromName(`bench:hops-primary-${crypto.randomUUID()}`));
    const origin = { authed: [], ip: 'bench', internal: false, relayUrl: 'ws://bench.invalid/' };
    let next = 0;
    const edgeBatchMs: Record<number, number> = {};
    for (const n of sizes) {
      edgeBatchMs[n] = await msPerCall(rounds, async () => {
        const ops: EdgeOp[] = events.slice(next, next + n).map((event) => ({ op: 'event', event, origin }));
        next += n;
        if (ops.length < n) throw new Error(`not enough events for a batch of ${n} (${events.length} sent)`);
        const answers = await primary.edgeBatch('public', ops);
        const refused = answers.find((a) => a.op !== 'ok' || !a.accepted);
        if (refused) throw new Error(`the primary refused a bench event: ${JSON.stringify(refused)}`);
      });
    }

    const store = new EventStore(this.ctx.storage.sql);
    const s0 = performance.now();
    for (const e of events) store.insert(e, JSON.stringify(e), this.ctx.storage);
    const storeUs = ((performance.now() - s0) * 1000) / events.length;
    return Response.json({ n: events.length, verifyUs, rpcMs, edgeBatchMs, storeUs });
  }

  /** One live-delivery frame sent `rounds` times to every socket of this shard, with the read check; µs per send. */
  private sockets(event: NostrEvent, rounds: number): Response {
    const sockets = this.ctx.getWebSockets();
    const frame = relayMessage.event('bench', JSON.stringify(event));
    const filters = [{ kinds: [event.kind] }];
    const readers = new Set<string>();
    const start = performance.now();
    for (let r = 0; r < rounds; r++) {
      for (const ws of sockets) if (delivers(filters, event, readers)) ws.send(frame);
    }
    const ms = performance.now() - start;
    return Response.json({ sockets: sockets.length, sends: sockets.length * rounds, usPerSend: (ms * 1000) / (sockets.length * rounds) });
  }

  override async fetch(request: Request): Promise<Response> {
    const url = new URL(request.url);
    if (!url.pathname.startsWith(BENCH_PREFIX)) return super.fetch(request);
    switch (url.pathname.slice(BENCH_PREFIX.length)) {
      case 'verify': {
        const impl = url.searchParams.get('impl') ?? 'wasm';
        const verifier = impl === 'noble' ? nobleVerifier : await relayVerifier();
        return Response.json(timeVerify(impl, verifier, await readEvents(request)));
      }
      case 'seed': {
        const events = await readEvents(request);
        const store = new EventStore(this.ctx.storage.sql);
        const start = performance.now();
        let stored = 0;
        let duplicate = 0;
        for (const e of events) {
          const { status } = store.insert(e, JSON.stringify(e), this.ctx.storage);
          if (status === 'stored') stored++;
          else if (status === 'duplicate') duplicate++;
        }
        return Response.json({ n: events.length, stored, duplicate, ms: performance.now() - start, size: store.size() });
      }
      case 'size':
        return Response.json({ size: new EventStore(this.ctx.storage.sql).size() });
      case 'hops':
        return this.hops((await request.json()) as HopsRequest);
      case 'sockets': {
        const { event, rounds } = (await request.json()) as { event: NostrEvent; rounds: number };
        return this.sockets(event, rounds);
      }
      default:
        return new Response('unknown bench route', { status: 404 });
    }
  }
}

export default {
  fetch(request: Request, env: Env, ctx: ExecutionContext): Response | Promise<Response> {
    const url = new URL(request.url);
    if (!url.pathname.startsWith(BENCH_PREFIX)) return app.fetch(request, env, ctx);
    if (url.pathname === `${BENCH_PREFIX}hops`) return env.RELAY_SHARD.get(env.RELAY_SHARD.idFromName('bench:hops')).fetch(request);
    return shardStub(env, url.searchParams.get('owner')).fetch(request);
  },
} satisfies ExportedHandler<Env>;
