// HTTP routes of the relay shards: `/` (public shard) and `/r/<owner>` (owner shard, 64-hex or
// npub; also `/r/<owner>/`, since NDK appends a slash), each serving WebSocket upgrades and
// NIP-11 documents through the shard's Durable Object.
//
// Closed shards: outside development an owner shard exists only for the deployment's owners
// (EDGESTR_OWNERS and the registry: added by operators or by sign-up; others get 404 JSON saying how
// to become one, common/owners.ts noShardReason, for upgrades and NIP-11 alike, and no Durable
// Object is touched), unless EDGESTR_OPEN_SHARDS=true. In development (served on loopback hosts only, see
// workers/index.ts) every key gets a shard.
// Edges: with RELAY_EDGES giving a shard K > 1 edge objects, an upgrade lands on one of them, the
// same one for every connection of a client address (workers/common/edges.ts, docs/SCALING.md);
// NIP-11 is always served by the shard's primary.
// Relay URL: the request forwarded to the shard carries the URL clients must name in their NIP-42
// `relay` tag: EDGESTR_PUBLIC_URL's scheme and host when set, else the request's own.

import { Hono } from 'hono';
import { parsePubkey } from '../../src/shared/keys.js';
import { NIP11_CORS_HEADERS, wantsRelayInformation } from './nip11.js';
import { INTERNAL_COMPONENT_HEADER, INTERNAL_HEADER, INTERNAL_OWNER_HEADER, ownerShardExists, PUBLIC_SHARD, SHARD_HEADER, shardStub, type RouterBindings } from '../common/shards.js';
import { relayRequestUrl } from '../common/public-url.js';
import { EDGE_HEADER, socketTarget } from '../common/edges.js';
import { clientAddress, isLoopbackKey, UNKNOWN_ADDRESS } from '../common/client-address.js';
import { PUBLIC_URL_NOT_A_URL } from '../common/served-host.js';
import { noShardReason } from '../common/owners.js';

/**
 * Forwards a request to a shard (an upgrade: to the object its socket lands on), stamping the shard
 * and edge headers (overwriting anything a client sent) and deleting the internal ones.
 */
function toShard(env: RouterBindings, owner: string | null, request: Request): Promise<Response> | Response {
  const url = relayRequestUrl(env, request.url);
  if (!url) return Response.json({ error: PUBLIC_URL_NOT_A_URL }, { status: 500 });
  const forwarded = new Request(url, request);
  forwarded.headers.set(SHARD_HEADER, owner ?? PUBLIC_SHARD);
  forwarded.headers.delete(INTERNAL_HEADER);
  forwarded.headers.delete(INTERNAL_OWNER_HEADER);
  forwarded.headers.delete(INTERNAL_COMPONENT_HEADER);
  forwarded.headers.delete(EDGE_HEADER);
  if (!isUpgrade(request)) return shardStub(env, owner).fetch(forwarded);
  // Local clients (no address, loopback) are spread at random, as one address's would not be.
  const address = clientAddress(request);
  const target = socketTarget(env, owner, address === UNKNOWN_ADDRESS || isLoopbackKey(address) ? undefined : address);
  if (!target.ok) return Response.json({ error: target.error }, { status: 500 });
  if (target.value.edge !== undefined) forwarded.headers.set(EDGE_HEADER, String(target.value.edge));
  return target.value.stub.fetch(forwarded);
}

const isUpgrade = (req: Request) => req.headers.get('Upgrade')?.toLowerCase() === 'websocket';

export function relayRoutes<E extends { Bindings: RouterBindings }>(landing: (req: Request) => Response | Promise<Response>) {
  const app = new Hono<E>();

  const serve = (owner: string | null, req: Request, env: RouterBindings) => {
    if (isUpgrade(req)) return toShard(env, owner, req);
    if (wantsRelayInformation(req.headers.get('Accept'))) return toShard(env, owner, req);
    return landing(req);
  };

  // CORS preflights of the relay's own paths only (NIP-11 asks for them): /api and /mcp answer
  // none, so no page elsewhere is told it may send them credentials or custom headers.
  const preflight = () => new Response(null, { status: 204, headers: NIP11_CORS_HEADERS });
  for (const path of ['/', '/r/:owner{[^/]+}', '/r/:owner{[^/]+}/']) app.options(path, preflight);
  app.get('/', (c) => serve(null, c.req.raw, c.env));
  for (const path of ['/r/:owner{[^/]+}', '/r/:owner{[^/]+}/']) {
    app.get(path, async (c) => {
      const owner = parsePubkey(c.req.param('owner') ?? '');
      if (!owner) return c.json({ error: 'the shard owner must be a 64-hex pubkey or an npub' }, 400);
      if (!(await ownerShardExists(c.env, owner))) {
        return c.json({ error: noShardReason(c.env, owner) }, 404);
      }
      return serve(owner, c.req.raw, c.env);
    });
  }
  return app;
}
