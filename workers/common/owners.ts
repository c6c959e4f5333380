// Who may own agents and bridge servers on this deployment and the local demo keys. Shared by the
// router (closed shards), the management API, the Agent and Bridge Durable Objects. Owners are the
// static list EDGESTR_OWNERS (default plan, never suspended) plus the registry of the Accounts
// Durable Object (workers/accounts: added by operators through /api/admin/owners or by sign-up).
// The static list is checked first; for other keys each isolate holds the whole registry, fetched
// in one RPC and kept for OWNER_CACHE_MS (so unknown keys — a stranger trying random shards —
// cost no RPC at all, and a suspension or removal reaches a router isolate within that time; the
// owner's agents and shard are told at once by the admin API). While the Accounts object cannot be
// read, an isolate serves its last copy and asks again every REGISTRY_RETRY_MS (registryAt).
// Operators are EDGESTR_ADMINS.

import { sha256 } from '@noble/hashes/sha2.js';
import { getPublicKey } from 'nostr-tools/pure';
import { parsePubkey } from '../../src/shared/keys.js';
import { isDevelopment } from '../../src/shared/env-mode.js';
import { errorMessage } from '../../src/shared/errors.js';
import type { SecretEnv } from './secrets.js';
import { accountsStub, type AccountsBindings } from '../accounts/accounts-do.js';
import { DEFAULT_PLAN } from '../accounts/plans.js';

export interface OwnerEnv extends SecretEnv {
  EDGESTR_OWNERS?: string;
  EDGESTR_ADMINS?: string;
}

/** An owner's account: its plan (a name in EDGESTR_PLANS) and whether an operator suspended it. */
export interface OwnerState {
  plan: string;
  suspended: boolean;
}

/** How long an isolate trusts a registry answer (a suspension or removal applies within this time). */
export const OWNER_CACHE_MS = 30_000;

const seed = (label: string) => sha256(new TextEncoder().encode(label));

/** The local demo keys: derived from public labels, so they are known to everyone — development only. */
export const DEMO_OWNER_SK = seed('edgestr demo owner (local development only)');
export const DEMO_AGENT_SK = seed('edgestr demo agent (local development only)');
export const DEMO_OWNER = getPublicKey(DEMO_OWNER_SK);
export const DEMO_AGENT = getPublicKey(DEMO_AGENT_SK);

const keyList = (raw: string | undefined): Set<string> => {
  const out = new Set<string>();
  for (const part of (raw ?? '').split(',')) {
    const hex = parsePubkey(part.trim());
    if (hex) out.add(hex);
  }
  return out;
};

/** The owners listed statically: EDGESTR_OWNERS (64-hex or npub, comma-separated), plus the demo owner in development. */
export function staticOwners(env: OwnerEnv): Set<string> {
  const out = keyList(env.EDGESTR_OWNERS);
  if (isDevelopment(env)) out.add(DEMO_OWNER);
  return out;
}

/** Whether `pubkey` is an operator (EDGESTR_ADMINS, 64-hex or npub, comma-separated). */
export const isAdmin = (env: OwnerEnv, pubkey: string): boolean => keyList(env.EDGESTR_ADMINS).has(pubkey);

/**
 * After a failed registry read, an isolate asks again no sooner than this: it serves its last copy
 * meanwhile (logged once per failure), or, with none, answers the failure at once — so an
 * unreachable Accounts object costs one RPC per isolate per this time, not one per request.
 */
export const REGISTRY_RETRY_MS = 5_000;

let registry: { at: number; owners: Map<string, OwnerState> } | undefined;
/** The last failed read, while its retry time has not come. */
let failure: { until: number; error: string } | undefined;
/** The fetch in flight, shared by every request of the isolate that needs the registry meanwhile. */
let loading: Promise<Map<string, OwnerState>> | undefined;

/** Bumped by forgetOwnerState and rememberOwner: a fetch started before it is not kept. */
let generation = 0;

const unreadable = (error: string): Error => new Error(`the owner registry could not be read (${error}); asked again in ${REGISTRY_RETRY_MS / 1000} s`);

/** The registry as this isolate knows it at `now` (ms): its copy while fresh, else fetched (see REGISTRY_RETRY_MS on failure). */
export async function registryAt(env: AccountsBindings, now: number): Promise<Map<string, OwnerState>> {
  if (registry && now - registry.at < OWNER_CACHE_MS) return registry.owners;
  if (failure && now < failure.until) {
    if (registry) return registry.owners;
    throw unreadable(failure.error);
  }
  if (!loading) {
    const started = generation;
    const fetching = accountsStub(env)
      .states()
      .then(
        (rows) => {
          const owners = new Map(rows.map(({ pubkey, plan, suspended }) => [pubkey, { plan, suspended }]));
          if (generation === started) {
            registry = { at: now, owners };
            failure = undefined;
          }
          return owners;
        },
        (e: unknown) => {
          const error = errorMessage(e);
          if (generation === started) failure = { until: now + REGISTRY_RETRY_MS, error };
          if (!registry) throw e;
          console.error(`owner registry: ${unreadable(error).message}; this isolate serves its copy from ${Math.round((now - registry.at) / 1000)} s ago meanwhile`);
          return registry.owners;
        },
      )
      .finally(() => {
        if (loading === fetching) loading = undefined;
      });
    loading = fetching;
  }
  return loading;
}

const registryOwners = (env: AccountsBindings): Promise<Map<string, OwnerState>> => registryAt(env, Date.now());

/** The account of `pubkey` (undefined: not an owner here): the static list first, then the registry (cached, see the header). */
export async function ownerState(env: OwnerEnv & AccountsBindings, pubkey: string): Promise<OwnerState | undefined> {
  if (staticOwners(env).has(pubkey)) return { plan: DEFAULT_PLAN, suspended: false };
  return (await registryOwners(env)).get(pubkey);
}

/**
 * A sign-up added `pubkey` to the registry: this isolate's copy learns it and is kept (forgetting it
 * would make the next request fetch the whole registry again, once per sign-up). A fetch in flight
 * may have read the registry before the sign-up: it is not kept.
 */
export function rememberOwner(pubkey: string, state: OwnerState): void {
  registry?.owners.set(pubkey, state);
  if (loading) {
    loading = undefined;
    generation++;
  }
}

/** Forgets this isolate's copy of the registry (after the admin API changed it). */
export const forgetOwnerState = (): void => {
  registry = undefined;
  failure = undefined;
  loading = undefined;
  generation++;
};

export const NOT_AN_OWNER = 'this pubkey may not own agents on this deployment (EDGESTR_OWNERS)';
export const OWNER_SUSPENDED = 'this owner is suspended on this deployment; contact its operator';

/** The management API's 403 reason for a pubkey that is not an owner (see ownerState), or undefined. */
export const notAnOwner = async (env: OwnerEnv & AccountsBindings, pubkey: string): Promise<string | undefined> =>
  (await ownerState(env, pubkey)) ? undefined : NOT_AN_OWNER;
