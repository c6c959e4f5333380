// HTTP routes of the relay shards: `/` (public shard) and `/r/<owner>` (owner shard, 64-hex or
// npub), each serving WebSocket upgrades and NIP-11 documents through the shard's Durable Object.

import { Hono } from 'hono';
import { parsePubkey } from '../../src/shared/keys.js';
import { NIP11_CORS_HEADERS, wantsRelayInformation } from './nip11.js';
import { INTERNAL_HEADER, PUBLIC_SHARD, SHARD_HEADER, type RelayShard } from './shard.js';

export interface ShardBindings {
  RELAY_SHARD: DurableObjectNamespace<RelayShard>;
}

/** The Durable Object name of a shard: "public" or "owner:<hex>". */
export const shardName = (owner: string | null): string => (owner ? `owner:${owner}` : PUBLIC_SHARD);

export function shardStub(env: ShardBindings, owner: string | null): DurableObjectStub<RelayShard> {
  return env.RELAY_SHARD.get(env.RELAY_SHARD.idFromName(shardName(owner)));
}

/** Forwards a request to a shard, stamping the shard header (overwriting anything a client sent). */
function toShard(env: ShardBindings, owner: string | null, request: Request): Promise<Response> {
  const forwarded = new Request(request);
  forwarded.headers.set(SHARD_HEADER, owner ?? PUBLIC_SHARD);
  forwarded.headers.delete(INTERNAL_HEADER);
  return shardStub(env, owner).fetch(forwarded);
}

const isUpgrade = (req: Request) => req.headers.get('Upgrade')?.toLowerCase() === 'websocket';

export function relayRoutes<E extends { Bindings: ShardBindings }>(landing: (req: Request) => Response | Promise<Response>) {
  const app = new Hono<E>();

  const serve = (owner: string | null, req: Request, env: ShardBindings) => {
    if (isUpgrade(req) || wantsRelayInformation(req.headers.get('Accept'))) return toShard(env, owner, req);
    return landing(req);
  };

  app.options('*', () => new Response(null, { status: 204, headers: NIP11_CORS_HEADERS }));
  app.get('/', (c) => serve(null, c.req.raw, c.env));
  app.get('/r/:owner{[^/]+}', (c) => {
    const owner = parsePubkey(c.req.param('owner'));
    if (!owner) return c.json({ error: 'the shard owner must be a 64-hex pubkey or an npub' }, 400);
    return serve(owner, c.req.raw, c.env);
  });
  return app;
}
