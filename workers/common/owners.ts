// Who may own agents and bridge servers on this deployment and the local demo keys. Shared by the
// router (closed shards), the management API, the Agent and Bridge Durable Objects. Owners are the
// static list EDGESTR_OWNERS (default plan, never suspended) plus the registry of the Accounts
// Durable Object (workers/accounts: added by operators through /api/admin/owners or by sign-up).
// The static list is checked first; for other keys each isolate holds a copy of the registry,
// fetched in one RPC and kept for OWNER_CACHE_MS (so unknown keys — a stranger trying random shards —
// cost no RPC at all, and a suspension or removal reaches a router isolate within that time; the
// owner's agents and shard are told at once by the admin API). The copy is at most
// REGISTRY_COPY_MAX owners (Accounts.states(); sign-up stops at EDGESTR_SIGNUP_MAX_OWNERS, default
// 10,000, workers/accounts/signup-limits.ts): past that, only operators' adds make the registry
// larger, and a key the copy does not hold is looked up by itself (Accounts.state()), its answer
// kept OWNER_CACHE_MS too, for at most LOOKUPS_KEPT keys (the least recently used forgotten). While
// the Accounts object cannot be read, an isolate serves its last copy (or its last answer for the
// key) and asks again every REGISTRY_RETRY_MS (registryAt). Operators are EDGESTR_ADMINS. The
// management API lets any owner look and delete (notAnOwner), only an owner not suspended change
// anything (notAnActiveOwner). A key that is not an owner is told how to become one (sign up when
// EDGESTR_SIGNUP=open, else ask the operators): notAnOwnerReason, and noShardReason for /r/<key>.

import { sha256 } from '@noble/hashes/sha2.js';
import { getPublicKey } from 'nostr-tools/pure';
import { parsePubkey } from '../../src/shared/keys.js';
import { isDevelopment } from '../../src/shared/env-mode.js';
import { errorMessage } from '../../src/shared/errors.js';
import { LruMap } from '../../src/shared/lru.js';
import type { SecretEnv } from './secrets.js';
import { accountsStub, type AccountsBindings } from '../accounts/accounts-do.js';
import { DEFAULT_PLAN } from '../accounts/plans.js';

export interface OwnerEnv extends SecretEnv {
  EDGESTR_OWNERS?: string;
  EDGESTR_ADMINS?: string;
  /** "open": any key may sign itself up (workers/api/signup.ts); read here for what a key that is not an owner is told. */
  EDGESTR_SIGNUP?: string;
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

/** This isolate's copy of the registry: `complete` false when the registry holds more than it (REGISTRY_COPY_MAX). */
interface Registry {
  owners: Map<string, OwnerState>;
  complete: boolean;
}

let registry: (Registry & { at: number }) | undefined;
/** The last failed read, while its retry time has not come. */
let failure: { until: number; error: string } | undefined;
/** The fetch in flight, shared by every request of the isolate that needs the registry meanwhile. */
let loading: Promise<Registry> | undefined;

/** Keys whose answers (a copy that is not complete) this isolate keeps at most. */
export const LOOKUPS_KEPT = 10_000;
/** The registry's answers for keys the copy does not hold (undefined: not an owner), each with its time. */
const lookups = new LruMap<string, { at: number; state: OwnerState | undefined }>(LOOKUPS_KEPT);
/** The lookups in flight, one per key. */
const lookingUp = new Map<string, Promise<OwnerState | undefined>>();

/** Bumped by forgetOwnerState and rememberOwner: a fetch started before it is not kept. */
let generation = 0;

const unreadable = (error: string): Error => new Error(`the owner registry could not be read (${error}); asked again in ${REGISTRY_RETRY_MS / 1000} s`);

/** This isolate's copy of the registry at `now` (ms): kept while fresh, else fetched (see REGISTRY_RETRY_MS on failure). */
async function copyAt(env: AccountsBindings, now: number): Promise<Registry> {
  if (registry && now - registry.at < OWNER_CACHE_MS) return registry;
  if (failure && now < failure.until) {
    if (registry) return registry;
    throw unreadable(failure.error);
  }
  if (!loading) {
    const started = generation;
    const fetching = accountsStub(env)
      .states()
      .then(
        (copy) => {
          const owners = new Map(copy.owners.map(({ pubkey, plan, suspended }) => [pubkey, { plan, suspended }]));
          const fetched = { owners, complete: copy.complete };
          if (generation === started) {
            registry = { at: now, ...fetched };
            failure = undefined;
          }
          return fetched;
        },
        (e: unknown) => {
          const error = errorMessage(e);
          if (generation === started) failure = { until: now + REGISTRY_RETRY_MS, error };
          if (!registry) throw e;
          console.error(`owner registry: ${unreadable(error).message}; this isolate serves its copy from ${Math.round((now - registry.at) / 1000)} s ago meanwhile`);
          return registry;
        },
      )
      .finally(() => {
        if (loading === fetching) loading = undefined;
      });
    loading = fetching;
  }
  return loading;
}

/** The owners of this isolate's copy of the registry at `now` (ms; see copyAt). */
export const registryAt = async (env: AccountsBindings, now: number): Promise<Map<string, OwnerState>> => (await copyAt(env, now)).owners;

/**
 * The registry's answer for `pubkey`, one the copy does not hold, at `now` (ms): kept OWNER_CACHE_MS;
 * while the registry cannot be read (REGISTRY_RETRY_MS after a failure, as for the copy) the last
 * answer, if any.
 */
async function lookUp(env: AccountsBindings, pubkey: string, now: number): Promise<OwnerState | undefined> {
  const kept = lookups.get(pubkey);
  if (kept && now - kept.at < OWNER_CACHE_MS) return kept.state;
  if (failure && now < failure.until) {
    if (kept) return kept.state;
    throw unreadable(failure.error);
  }
  const running = lookingUp.get(pubkey);
  if (running) return running;
  const started = generation;
  const asking = accountsStub(env)
    .state(pubkey)
    .then(
      (state) => {
        if (generation === started) lookups.set(pubkey, { at: now, state });
        return state;
      },
      (e: unknown) => {
        const error = errorMessage(e);
        if (generation === started) failure = { until: now + REGISTRY_RETRY_MS, error };
        if (!kept) throw e;
        console.error(`owner registry: ${unreadable(error).message}; this isolate serves its answer for this key from ${Math.round((now - kept.at) / 1000)} s ago meanwhile`);
        return kept.state;
      },
    )
    .finally(() => {
      if (lookingUp.get(pubkey) === asking) lookingUp.delete(pubkey);
    });
  lookingUp.set(pubkey, asking);
  return asking;
}

/** The account of `pubkey` (undefined: not an owner here): the static list first, then the registry (cached, see the header). */
export async function ownerState(env: OwnerEnv & AccountsBindings, pubkey: string): Promise<OwnerState | undefined> {
  if (staticOwners(env).has(pubkey)) return { plan: DEFAULT_PLAN, suspended: false };
  const now = Date.now();
  const copy = await copyAt(env, now);
  const held = copy.owners.get(pubkey);
  if (held || copy.complete) return held;
  return lookUp(env, pubkey, now);
}

/**
 * A sign-up added `pubkey` to the registry: this isolate's copy (or its answers for single keys)
 * learns it and is kept (forgetting it would make the next request fetch the whole registry again,
 * once per sign-up). A fetch or lookup in flight may have read the registry before the sign-up: it
 * is not kept.
 */
export function rememberOwner(pubkey: string, state: OwnerState): void {
  registry?.owners.set(pubkey, state);
  lookups.set(pubkey, { at: Date.now(), state });
  loading = undefined;
  generation++;
}

/** Forgets this isolate's copy of the registry and its answers for single keys (after the admin API changed it). */
export const forgetOwnerState = (): void => {
  registry = undefined;
  failure = undefined;
  loading = undefined;
  lookups.clear();
  lookingUp.clear();
  generation++;
};

/**
 * What a key that is not an owner here can do about it: sign up when sign-up is open, else ask the
 * operators (who add owners through EDGESTR_OWNERS or /api/admin/owners).
 */
const becomeAnOwner = (env: OwnerEnv): string => (env.EDGESTR_SIGNUP === 'open' ? 'sign up first (edgestr signup, or POST /api/signup)' : 'ask the operators to add it');

/** The 403 reason for a key that is not an owner, with sign-up closed (NOT_SIGNED_UP: open). */
export const NOT_AN_OWNER = `this pubkey is not an owner on this deployment; ${becomeAnOwner({})}`;
/** The 403 reason for a key that is not an owner, with sign-up open. */
export const NOT_SIGNED_UP = `this pubkey is not an owner on this deployment; ${becomeAnOwner({ EDGESTR_SIGNUP: 'open' })}`;
export const OWNER_SUSPENDED = 'this owner is suspended on this deployment; contact its operator';

/** Why a key that is not an owner is refused on this deployment (NOT_SIGNED_UP with sign-up open, else NOT_AN_OWNER). */
export const notAnOwnerReason = (env: OwnerEnv): string => (env.EDGESTR_SIGNUP === 'open' ? NOT_SIGNED_UP : NOT_AN_OWNER);

/** Why `owner` has no relay shard here (404 of /r/<owner> on closed shards): it is not an owner, and what it can do about it. */
export const noShardReason = (env: OwnerEnv, owner: string): string =>
  `no relay shard for ${owner} on this deployment: shards exist only for its owners and this key is not one; ${becomeAnOwner(env)}`;

/** The management API's 403 reason for a pubkey that is not an owner (see ownerState), or undefined: who may look and delete. */
export const notAnOwner = async (env: OwnerEnv & AccountsBindings, pubkey: string): Promise<string | undefined> =>
  (await ownerState(env, pubkey)) ? undefined : notAnOwnerReason(env);

/**
 * The management API's 403 reason for a pubkey that may not change anything now, or undefined: not
 * an owner (notAnOwnerReason), or suspended (OWNER_SUSPENDED). The rule of every write route (creating,
 * updating, importing, restoring, setting retention); a suspended owner still looks and deletes
 * (notAnOwner).
 */
export async function notAnActiveOwner(env: OwnerEnv & AccountsBindings, pubkey: string): Promise<string | undefined> {
  const state = await ownerState(env, pubkey);
  if (!state) return notAnOwnerReason(env);
  return state.suspended ? OWNER_SUSPENDED : undefined;
}
