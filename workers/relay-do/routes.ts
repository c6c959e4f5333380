// HTTP routes of the relay shards: `/` (public shard) and `/r/<owner>` (owner shard, 64-hex or
// npub; also `/r/<owner>/`, since NDK appends a slash), each serving WebSocket upgrades and
// NIP-11 documents through the shard's Durable Object.
//
// Closed shards: outside development an owner shard exists only for owners allowed by
// EDGESTR_OWNERS (others get 404 JSON, for upgrades and NIP-11 alike, and no Durable Object is
// touched), unless EDGESTR_OPEN_SHARDS=true. In development (served on loopback hosts only, see
// src/index.ts) every key gets a shard.
// Relay URL: the request forwarded to the shard carries the URL clients must name in their NIP-42
// `relay` tag: EDGESTR_PUBLIC_URL's scheme and host when set, else the request's own.

import { Hono } from 'hono';
import { allowedOwners, isDevelopment, type OwnerEnv } from '../../src/api/owners.js';
import { parsePubkey } from '../../src/shared/keys.js';
import { NIP11_CORS_HEADERS, wantsRelayInformation } from './nip11.js';
import { INTERNAL_HEADER, PUBLIC_SHARD, SHARD_HEADER, type RelayShard } from './shard.js';

export interface ShardBindings {
  RELAY_SHARD: DurableObjectNamespace<RelayShard>;
}

export interface RouterBindings extends ShardBindings, OwnerEnv {
  /** "true": every key gets an owner shard (a public multi-tenant relay). */
  EDGESTR_OPEN_SHARDS?: string;
  /** The deployment's public URL (e.g. https://relay.example.org): the origin of NIP-42 relay URLs. */
  EDGESTR_PUBLIC_URL?: string;
}

/** The Durable Object name of a shard: "public" or "owner:<hex>". */
export const shardName = (owner: string | null): string => (owner ? `owner:${owner}` : PUBLIC_SHARD);

export function shardStub(env: ShardBindings, owner: string | null): DurableObjectStub<RelayShard> {
  return env.RELAY_SHARD.get(env.RELAY_SHARD.idFromName(shardName(owner)));
}

/** The shard a path names: null for `/`, the owner's hex for `/r/<hex or npub>` (trailing slash allowed), else undefined. */
export function shardOfPath(pathname: string): string | null | undefined {
  const path = pathname.replace(/\/$/, '');
  if (path === '') return null;
  return path.startsWith('/r/') ? parsePubkey(path.slice(3)) : undefined;
}

/** Whether `owner` has a shard on this deployment (see the header). */
export const ownerShardExists = (env: RouterBindings, owner: string): boolean =>
  env.EDGESTR_OPEN_SHARDS === 'true' || isDevelopment(env) || allowedOwners(env).has(owner);

/** The URL the shard sees (and names in NIP-42): the request's, on EDGESTR_PUBLIC_URL's origin when set. */
export function relayRequestUrl(env: RouterBindings, requestUrl: string): URL | undefined {
  const url = new URL(requestUrl);
  if (!env.EDGESTR_PUBLIC_URL) return url;
  let pub: URL;
  try {
    pub = new URL(env.EDGESTR_PUBLIC_URL);
  } catch {
    return undefined;
  }
  url.protocol = pub.protocol;
  url.host = pub.host;
  return url;
}

/** Forwards a request to a shard, stamping the shard header (overwriting anything a client sent). */
function toShard(env: RouterBindings, owner: string | null, request: Request): Promise<Response> | Response {
  const url = relayRequestUrl(env, request.url);
  if (!url) return Response.json({ error: 'EDGESTR_PUBLIC_URL is not a URL; fix the deployment configuration' }, { status: 500 });
  const forwarded = new Request(url, request);
  forwarded.headers.set(SHARD_HEADER, owner ?? PUBLIC_SHARD);
  forwarded.headers.delete(INTERNAL_HEADER);
  return shardStub(env, owner).fetch(forwarded);
}

const isUpgrade = (req: Request) => req.headers.get('Upgrade')?.toLowerCase() === 'websocket';

export function relayRoutes<E extends { Bindings: RouterBindings }>(landing: (req: Request) => Response | Promise<Response>) {
  const app = new Hono<E>();

  const serve = (owner: string | null, req: Request, env: RouterBindings) => {
    if (isUpgrade(req) || wantsRelayInformation(req.headers.get('Accept'))) return toShard(env, owner, req);
    return landing(req);
  };

  app.options('*', () => new Response(null, { status: 204, headers: NIP11_CORS_HEADERS }));
  app.get('/', (c) => serve(null, c.req.raw, c.env));
  for (const path of ['/r/:owner{[^/]+}', '/r/:owner{[^/]+}/']) {
    app.get(path, (c) => {
      const owner = parsePubkey(c.req.param('owner') ?? '');
      if (!owner) return c.json({ error: 'the shard owner must be a 64-hex pubkey or an npub' }, 400);
      if (!ownerShardExists(c.env, owner)) {
        return c.json({ error: `no relay shard for ${owner} on this deployment (shards exist only for owners in EDGESTR_OWNERS)` }, 404);
      }
      return serve(owner, c.req.raw, c.env);
    });
  }
  return app;
}
