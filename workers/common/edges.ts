// Edge objects of a relay shard (docs/SCALING.md): RELAY_EDGES names how many edge objects (K)
// each shard has. With K = 1 (the default) a shard is one Durable Object, its primary, which holds
// the sockets as well. With K > 1 the router lands each WebSocket on one of K edge objects (the
// same RelayShard class under another name, told its role by EDGE_HEADER), every connection of one
// client address on the same one (every internal connection of one owner's agents and bridges too):
// the edge holds the socket, its subscriptions and AUTH, verifies events, and leaves ordering,
// storage and the write policy to the primary. This module parses the setting and picks an edge; it
// runs no shard code.
// The edge of an address (or of an owner's or component's key) is a keyed hash of it, under a key
// derived from the deployment's EDGESTR_SECRET: nobody without the secret can tell which addresses
// share an edge, so an attacker cannot pick addresses that land on a victim's edge (the hash of
// public names alone let one aim a flood at the edge of a known owner's agents).

import { z } from 'zod';
import { hmac } from '@noble/hashes/hmac.js';
import { sha256 } from '@noble/hashes/sha2.js';
import { err, ok, type Result } from '../../src/shared/errors.js';
import { PUBLIC_SHARD, shardName, shardStub, type ShardBindings } from './shards.js';
import { sealingSecret, type SecretEnv } from './secrets.js';
import type { RelayShard } from '../relay-do/shard.js';

/**
 * Set by the router on an upgrade it sends to an edge object: the edge's index (0..K-1). The router
 * deletes it from every outside request; a request without it reaches the primary.
 */
export const EDGE_HEADER = 'x-edgestr-edge';
export const MAX_EDGES = 64;

const isShardKey = (key: string): boolean => key === '*' || key === PUBLIC_SHARD || /^[0-9a-f]{64}$/.test(key);
const EdgesSchema = z
  .record(z.string(), z.number().int().min(1).max(MAX_EDGES))
  .superRefine((config, check) => {
    for (const key of Object.keys(config)) {
      if (!isShardKey(key)) check.addIssue({ code: 'custom', path: [key], message: 'not a shard: use "*", "public" or a 64-hex owner key' });
    }
  });

/** K per shard: by owner hex, "public", and "*" for every other shard. */
export type EdgesConfig = z.infer<typeof EdgesSchema>;

export interface EdgesEnv extends Pick<SecretEnv, 'EDGESTR_SECRET' | 'EDGESTR_ENV'> {
  /** JSON, e.g. {"public": 4, "<owner hex>": 2, "*": 1}; unset: K = 1 everywhere. */
  RELAY_EDGES?: string;
}

let parsed: { raw: string; result: Result<EdgesConfig, string> } | undefined;

/** RELAY_EDGES parsed (once per distinct value); an invalid value is an error naming what to fix, never ignored. */
export function edgesFromEnv(env: EdgesEnv): Result<EdgesConfig, string> {
  const raw = env.RELAY_EDGES;
  if (raw === undefined || raw.trim() === '') return ok({});
  if (parsed?.raw === raw) return parsed.result;
  parsed = { raw, result: parseEdges(raw) };
  return parsed.result;
}

function parseEdges(raw: string): Result<EdgesConfig, string> {
  let json: unknown;
  try {
    json = JSON.parse(raw);
  } catch {
    return err('RELAY_EDGES is not JSON; expected e.g. {"public": 4, "*": 1}');
  }
  const checked = EdgesSchema.safeParse(json);
  if (!checked.success) {
    return err(`RELAY_EDGES is invalid: ${checked.error.issues.map((i) => `${i.path.join('.') || '(root)'}: ${i.message}`).join('; ')} (K is an integer 1..${MAX_EDGES})`);
  }
  return ok(checked.data);
}

/** K of the shard of `owner` (null: the public shard). */
export function edgeCount(config: EdgesConfig, owner: string | null): number {
  return config[owner ?? PUBLIC_SHARD] ?? config['*'] ?? 1;
}

/**
 * The edge a new connection lands on: for a known client address (client-address.ts), the same edge
 * for every connection of that address (HMAC-SHA256 of it under `key`, `placementKey`), so that the
 * per-address limits of an edge (connections, event and read buckets) hold for the whole shard and
 * one address's load stays on one edge; without one (edgestr's own agents, local runs), uniform over
 * 0..k-1 at random.
 */
export function pickEdge(k: number, key: Uint8Array, address?: string): number {
  if (address === undefined) return crypto.getRandomValues(new Uint32Array(1))[0]! % k;
  const mac = hmac(sha256, key, encoder.encode(address));
  return new DataView(mac.buffer, mac.byteOffset, 4).getUint32(0) % k;
}

const encoder = new TextEncoder();
let derived: { secret: string; key: Uint8Array } | undefined;

/**
 * The key edges are picked by (see the header): derived from EDGESTR_SECRET (the fixed local one in
 * development). Without a secret (never deployed: `npm run deploy` refuses it) the key is empty and
 * placement is a plain hash anyone can compute. Rotating the secret moves addresses to other edges
 * for new connections; open ones stay, as when K changes.
 */
export function placementKey(env: EdgesEnv): Uint8Array {
  const secret = sealingSecret(env) ?? '';
  if (derived?.secret !== secret) derived = { secret, key: hmac(sha256, encoder.encode(secret), encoder.encode('edgestr/v1 edge placement')) };
  return derived.key;
}

/**
 * The key edgestr's own connections for `owner`'s agents and bridges are placed by on an owner's
 * shard, as an address's are (workers/common/relay-sockets.ts): every one of that owner's on the
 * same edge, so that the shard's per-owner cap of them (max_agent_connections_per_owner) holds for
 * the whole shard.
 */
export const ownerPlacement = (owner: string): string => `owner:${owner}`;

/**
 * The key the connection of agent or bridge `component` is placed by on the public shard (no
 * per-owner cap there): one owner's many agents spread over the edges; each component's socket
 * lands on one edge, where a newer one replaces it.
 */
export const componentPlacement = (component: string): string => `component:${component}`;

/** The Durable Object name of edge `i` of the shard named `shard` (see shardName). */
export const edgeObjectName = (shard: string, i: number): string => `${shard}#edge${i}`;

export function edgeStub(env: ShardBindings, owner: string | null, i: number): DurableObjectStub<RelayShard> {
  return env.RELAY_SHARD.get(env.RELAY_SHARD.idFromName(edgeObjectName(shardName(owner), i)));
}

/** Where a WebSocket of the shard of `owner` goes: the primary (K = 1, `edge` undefined) or edge `edge` of K. */
export interface SocketTarget {
  stub: DurableObjectStub<RelayShard>;
  edge: number | undefined;
}

/**
 * The object a new WebSocket of the shard of `owner` lands on, from client `address` (undefined:
 * none known); an error when RELAY_EDGES is invalid.
 */
export function socketTarget(env: ShardBindings & EdgesEnv, owner: string | null, address?: string): Result<SocketTarget, string> {
  const config = edgesFromEnv(env);
  if (!config.ok) return config;
  const k = edgeCount(config.value, owner);
  if (k === 1) return ok({ stub: shardStub(env, owner), edge: undefined });
  const edge = pickEdge(k, placementKey(env), address);
  return ok({ stub: edgeStub(env, owner, edge), edge });
}
