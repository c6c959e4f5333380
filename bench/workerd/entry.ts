// Bench-only Worker entry (bundled with wrangler.toml by bench/lib/server.mjs): the production router and RelayShard,
// unchanged, plus three routes under /__bench/ that run inside the shard's Durable Object:
//   POST /__bench/verify?impl=wasm|noble|wasm+id  times the shard's own verifier over given events
//   POST /__bench/seed                              inserts prepared events through the real EventStore
//                                                   (idempotent: a repeated batch comes back as duplicates)
//   GET  /__bench/size                              number of stored events
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

export class RelayShard extends ProductionShard {
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
      default:
        return new Response('unknown bench route', { status: 404 });
    }
  }
}

export default {
  fetch(request: Request, env: Env, ctx: ExecutionContext): Response | Promise<Response> {
    const url = new URL(request.url);
    if (!url.pathname.startsWith(BENCH_PREFIX)) return app.fetch(request, env, ctx);
    return shardStub(env, url.searchParams.get('owner')).fetch(request);
  },
} satisfies ExportedHandler<Env>;
