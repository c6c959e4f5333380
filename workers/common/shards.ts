// Addressing a relay shard from any component: the Durable Object name of a shard, whether an
// owner has one on this deployment (closed shards; which path names which shard:
// src/shared/shard-url.ts), and the headers only edgestr's own components set (the URL a shard names
// in NIP-42 and the origin an agent's or bridge's shards are built on: public-url.ts). (RelayShard
// is imported as a type only: this module creates stubs, it never runs shard code.)

import { ownerState, type OwnerEnv } from './owners.js';
import type { AccountsBindings } from '../accounts/accounts-do.js';
import { isDevelopment } from '../../src/shared/env-mode.js';
import type { RelayShard } from '../relay-do/shard.js';

/** Headers set by the router (never by clients: the router overwrites them). */
export const SHARD_HEADER = 'x-edgestr-shard';
/**
 * Set only by edgestr's own components connecting through the shard's Durable Object stub (hosted
 * agents); the router deletes it from every outside request. Such connections skip the generic
 * per-connection, per-pubkey and per-IP event buckets (their output is bounded by the agent's own
 * limits); every other rule applies to them.
 */
export const INTERNAL_HEADER = 'x-edgestr-internal';
/**
 * With INTERNAL_HEADER: the owner (64 hex) whose hosted agent or bridge the connection serves;
 * absent, the deployment's own component (the /mcp gateway's discovery). The shard counts such
 * connections by it (workers/relay-do/socket-tags.ts); the router deletes it from every outside request.
 */
export const INTERNAL_OWNER_HEADER = 'x-edgestr-internal-owner';
/**
 * With INTERNAL_OWNER_HEADER: the key (64 hex) of the agent or bridge the connection is for. A
 * component holds one socket of a shard object: a newer one replaces the older (socket-tags.ts);
 * the router deletes it from every outside request.
 */
export const INTERNAL_COMPONENT_HEADER = 'x-edgestr-internal-component';
export const PUBLIC_SHARD = 'public';

export interface ShardBindings {
  RELAY_SHARD: DurableObjectNamespace<RelayShard>;
}

export interface RouterBindings extends ShardBindings, OwnerEnv, AccountsBindings {
  /** "true": every key gets an owner shard (a public multi-tenant relay). */
  EDGESTR_OPEN_SHARDS?: string;
  /** The deployment's public URL (e.g. https://relay.example.org): the origin of NIP-42 relay URLs. */
  EDGESTR_PUBLIC_URL?: string;
  /** Edge objects per shard (workers/common/edges.ts). */
  RELAY_EDGES?: string;
}

/** The Durable Object name of a shard: "public" or "owner:<hex>". */
export const shardName = (owner: string | null): string => (owner ? `owner:${owner}` : PUBLIC_SHARD);

/** The owner of the shard whose primary object has Durable Object name `name` (shardName's inverse): null for the public shard, undefined for any other name (an edge's). */
export const ownerOfShardName = (name: string): string | null | undefined =>
  name === PUBLIC_SHARD ? null : /^owner:[0-9a-f]{64}$/.test(name) ? name.slice('owner:'.length) : undefined;

export function shardStub(env: ShardBindings, owner: string | null): DurableObjectStub<RelayShard> {
  return env.RELAY_SHARD.get(env.RELAY_SHARD.idFromName(shardName(owner)));
}

/** Whether every key has an owner shard on this deployment, owner or not (open shards, or development). */
export const everyKeyHasShard = (env: Pick<RouterBindings, 'EDGESTR_OPEN_SHARDS' | 'EDGESTR_ENV'>): boolean =>
  env.EDGESTR_OPEN_SHARDS === 'true' || isDevelopment(env);

/** Whether `owner` has a shard on this deployment (see the header). */
export const ownerShardExists = async (env: RouterBindings, owner: string): Promise<boolean> =>
  everyKeyHasShard(env) || (await ownerState(env, owner)) !== undefined;
