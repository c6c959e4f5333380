// Relay policy of a shard as hook lists (khatru style). `rejectConnection` hooks decide whether a
// request reaching the shard (a WebSocket upgrade or a NIP-11 fetch) is served, `rejectFilter` hooks
// whether a REQ or COUNT may run, `rejectEvent` hooks whether a verified EVENT is accepted,
// `chargeEvent` hooks whether one new to the shard is within the rate buckets of who sends it (run
// after the store has answered duplicates, older versions and deleted events, so that sending an
// event again costs nobody a token), `onEventSaved` hooks act on an event once it is stored and
// answered, `onEventStored` hooks (synchronous) apply a stored event's effects before its OK is
// sent. Each rule is one small hook in the module of its NIP; this file holds
// the hook types, the context they see and the shard's lists, in the order they run (which decides
// which answer a request that breaks several rules gets). `onEventStored` hooks run inside the
// transaction of an ingest batch (shard.ts), so what they record is seen by the next event of the
// batch; `onEventSaved` hooks run after the commit and the answers.

import type { NostrEvent } from '../../src/shared/event.js';
import { reject, type Rejection } from '../../src/shared/errors.js';
import { checkFilterValues, type Filter } from '../../src/shared/filters.js';
import type { SchnorrVerifier } from '../../src/shared/verify.js';
import type { RelayLimits } from './limits.js';
import type { Connection } from './connections.js';
import { learnOwnershipFromProfile, type OwnershipRegistry } from './ownership.js';
import { aoFrameAdmission } from './ao-frames.js';
import { privateKindsNeedAuth, aoFramesLiveToRecipient } from './read-policy.js';
import { notExpired, scheduleExpiry } from './nip40.js';
import { deletionTargetsCap, keptForGood, type EventStore } from './store.js';
import { applyVanish, notVanished, scheduleVanish, vanishAddressedHere, type VanishList } from './vanish.js';
import { withinRetention, type RetentionRules } from './retention.js';
import { SHARD_NOT_SERVED } from './owner-plan.js';
import { PUBLIC_SHARD } from '../common/shards.js';
import { eventRateLimits, notAuthEvent, oneRecipient, ownerShardWrites, protectedByAuthor, withinLimits } from './write-rules.js';

/**
 * What a connection hook sees: the shard the router named in its header (SHARD_HEADER; undefined:
 * none), whether the shard is still served (false: its owner was removed and the deployment's
 * shards are closed, owner-plan.ts), the shard's limits, its open sockets, and those from the request's client address
 * (client-address.ts; undefined when it is not counted: no address known, or edgestr's own agent),
 * and whether a WebSocket upgrade is within its address's new-connection bucket (undefined: not an
 * upgrade, or not counted; the bucket's token is taken for every counted upgrade, refused or not).
 * For a connection of edgestr's own serving another owner than the shard's (socket-tags.ts), also
 * the open sockets of that owner's components, and of every other owner's together.
 */
export interface ConnectionContext {
  shard: string | undefined;
  served: boolean;
  limits: RelayLimits;
  connections: number;
  fromAddress: number | undefined;
  upgradeAdmitted: boolean | undefined;
  fromOtherOwner?: number;
  ofOtherOwners?: number;
}
/** Why a request is not served: its HTTP status and plain-text body. */
export interface ConnectionRefusal {
  status: number;
  message: string;
}
export type RejectConnectionHook = (request: Request, ctx: ConnectionContext) => ConnectionRefusal | undefined;

/** What an event hook sees of the shard and the publishing connection. */
export interface EventContext {
  /** Owner of the shard, or null for the public shard. */
  owner: string | null;
  /** Pubkeys the connection has authenticated as (NIP-42). */
  authed: ReadonlySet<string>;
  /** The shard's clock: unix seconds, and the same instant in milliseconds. */
  now: number;
  nowMs: number;
  /** Whether the connection is edgestr's own agent (see INTERNAL_HEADER). */
  internal: boolean;
  /** The owner an internal connection serves, on a shard not that owner's (socket-tags.ts `servedOwnerOf`; the public shard's share of the reserve per owner, owner-plan.ts); undefined otherwise. */
  servedOwner?: string;
  /** The URL this shard is reached at, as clients name it (NIP-42 `relay`, NIP-62). */
  relayUrl: string;
  /** Whether the event comes from one of this deployment's backups (a restore, import.ts), where a few rules made since its backup give way (store.ts `keptForGood`). */
  restoring?: boolean;
  limits: RelayLimits;
  verifier: SchnorrVerifier;
  /** Whether `pubkey` is an agent of the shard's owner, by a record valid for the event at hand. */
  isOwnersAgent(pubkey: string): boolean;
  /** Whether the shard holds a record of `agent` → `owner` valid now (and for `agentEvent`, signed by the agent). */
  isAgentOwner(agent: string, owner: string, agentEvent?: NostrEvent): boolean;
  /** Whether the event carries a valid NIP-OA attestation naming the shard's owner. */
  attestsToOwner(e: NostrEvent): boolean;
}

/** A rejection, 'drop' (accepted with OK true but neither stored nor delivered), or undefined to go on. */
export type EventVerdict = Rejection | 'drop' | undefined;
export type RejectEventHook = (e: NostrEvent, ctx: EventContext) => EventVerdict;
/** A rate bucket of who sends an event new to the shard: the rejection when it is empty (its token is taken otherwise). */
export type ChargeEventHook = (e: NostrEvent, ctx: EventContext) => Rejection | undefined;
export type OnEventSavedHook = (e: NostrEvent, ctx: EventContext) => void | Promise<void>;
export type OnEventStoredHook = (e: NostrEvent, ctx: EventContext) => void;

/** What a filter hook sees: the connection asking, the subscription id, the shard's clock (unix ms). */
export interface FilterContext {
  conn: Connection;
  subId: string;
  limits: RelayLimits;
  nowMs: number;
  /** For a REQ (a subscription to be held; a COUNT holds nothing): the memory it would add to what is held. */
  holding?: Holding;
  /** For a REQ: whole seconds its client address must wait, having read its budget of stored events (0: none). */
  readWait?: number;
  /** REQ and COUNT: whole seconds the connection's address must wait for its scan budget (connections.ts `scanWait`). */
  scanWait?: number;
}

/** Estimated memory (subscription-memory.ts) of a REQ's filters, and what is held without the subscription it replaces. */
export interface Holding {
  adding: number;
  connection: number;
  shard: number;
}
export type RejectFilterHook = (filters: readonly Filter[], ctx: FilterContext) => Rejection | undefined;

export interface RelayPolicy {
  rejectConnection: readonly RejectConnectionHook[];
  rejectFilter: readonly RejectFilterHook[];
  rejectEvent: readonly RejectEventHook[];
  /** Rate buckets an event new to the shard spends (shard.ts `admit` runs them after the store's duplicate check). */
  chargeEvent: readonly ChargeEventHook[];
  onEventStored: readonly OnEventStoredHook[];
  onEventSaved: readonly OnEventSavedHook[];
}

/** Requests reach a shard only through the router, which names the shard (SHARD_HEADER): anything else is refused. */
const routedByRouter: RejectConnectionHook = (_request, { shard }) =>
  shard === undefined ? { status: 400, message: 'missing shard header' } : undefined;

/**
 * A removed owner's shard, where the router no longer serves it: 404 as from the router, for a
 * router isolate that has not learnt of the removal yet and a hosted agent reaching its own shard.
 */
const servedShard: RejectConnectionHook = (_request, { served }) => (served ? undefined : { status: 404, message: SHARD_NOT_SERVED });

/** A WebSocket upgrade past `max_connections` open sockets of the shard gets 503 (NIP-11 advertises the cap). */
const connectionCap: RejectConnectionHook = (request, { limits, connections }) =>
  request.headers.get('Upgrade')?.toLowerCase() === 'websocket' && connections >= limits.max_connections
    ? { status: 503, message: `this relay shard is full (${limits.max_connections} connections); try again later` }
    : undefined;

/** A WebSocket upgrade from an address that holds `max_connections_per_ip` open sockets of the shard gets 429. */
const connectionsPerAddress: RejectConnectionHook = (request, { limits, fromAddress }) =>
  request.headers.get('Upgrade')?.toLowerCase() === 'websocket' && fromAddress !== undefined && fromAddress >= limits.max_connections_per_ip
    ? { status: 429, message: `too many connections from your address (max ${limits.max_connections_per_ip}); close one first` }
    : undefined;

/**
 * A WebSocket upgrade of an agent or bridge of another owner than the shard's, whose agents and
 * bridges hold `max_agent_connections_per_owner` open sockets of it (one each: socket-tags.ts), gets
 * 429: one owner's agents cannot fill another tenant's shard. Not on the public shard, every owner's,
 * where an owner has as many as its plan gives it (and all owners together `max_agent_connections`).
 */
const agentConnectionsPerOwner: RejectConnectionHook = (request, { shard, limits, fromOtherOwner }) =>
  request.headers.get('Upgrade')?.toLowerCase() === 'websocket' &&
  shard !== PUBLIC_SHARD &&
  fromOtherOwner !== undefined &&
  fromOtherOwner >= limits.max_agent_connections_per_owner
    ? { status: 429, message: `too many connections from the agents of another owner (max ${limits.max_agent_connections_per_owner}); close one first` }
    : undefined;

/**
 * The same past `max_agent_connections` open sockets of all other owners' agents and bridges
 * together gets 503: the rest of `max_connections` is kept for the shard owner's side.
 */
const agentConnectionShare: RejectConnectionHook = (request, { shard, limits, ofOtherOwners }) =>
  request.headers.get('Upgrade')?.toLowerCase() === 'websocket' && ofOtherOwners !== undefined && ofOtherOwners >= limits.max_agent_connections
    ? {
        status: 503,
        message: `this relay shard is full for ${shard === PUBLIC_SHARD ? 'hosted agents' : "other owners' agents"} (${limits.max_agent_connections} connections); try again later`,
      }
    : undefined;

/** A WebSocket upgrade from an address past its new-connection bucket (connections_*_per_ip) gets 429. */
const connectionRatePerAddress: RejectConnectionHook = (_request, { limits, upgradeAdmitted }) =>
  upgradeAdmitted === false
    ? {
        status: 429,
        message: `too many new connections from your address (${limits.connections_burst_per_ip} at once, then ${limits.connections_per_second_per_ip} per second); reconnect more slowly`,
      }
    : undefined;

/** NIP-01 limits on a REQ/COUNT: values per filter, request rate, open subscriptions. */
const filterValuesCap: RejectFilterHook = (filters, { limits }) => checkFilterValues(filters, limits.max_filter_values);

const requestRate: RejectFilterHook = (_filters, { conn, nowMs }) =>
  conn.reqs.take(nowMs) ? undefined : reject('rate-limited', 'slow down: too many requests on this connection');

/** Why a REQ or COUNT from an address whose queries read more than its budget of stored rows (scan_rows_per_second_per_ip) must wait `wait` seconds. */
export const scanBudgetSpent = (limits: Pick<RelayLimits, 'scan_rows_per_second_per_ip'>, wait: number): Rejection =>
  reject('rate-limited', `slow down: this address's queries read too many stored rows (${limits.scan_rows_per_second_per_ip} rows/s); retry in ${wait} s`);

/** Why a REQ from an address that has read more than its budget of stored events (read_bytes_per_second_per_ip) must wait `wait` seconds. */
export const readBudgetSpent = (limits: Pick<RelayLimits, 'read_bytes_per_second_per_ip'>, wait: number): Rejection =>
  reject('rate-limited', `slow down: this address has read too many events (${limits.read_bytes_per_second_per_ip} bytes/s); retry in ${wait} s`);

const scanBudget: RejectFilterHook = (_filters, { scanWait, limits }) => (scanWait ? scanBudgetSpent(limits, scanWait) : undefined);

const readBudget: RejectFilterHook = (_filters, { readWait, limits }) => (readWait ? readBudgetSpent(limits, readWait) : undefined);

const subscriptionCap: RejectFilterHook = (_filters, { conn, subId, limits }) =>
  !conn.subs.has(subId) && conn.subs.size >= limits.max_subscriptions
    ? reject('rate-limited', `too many open subscriptions (max ${limits.max_subscriptions}); close one first`)
    : undefined;

/** A REQ whose filters would pass the memory held by its connection, or by the whole shard (an edge: its connections). */
const subscriptionMemoryCap: RejectFilterHook = (_filters, { holding, limits }) => {
  if (!holding) return undefined;
  const connection = holding.connection + holding.adding;
  if (connection > limits.max_subscription_memory_per_connection) {
    return reject(
      'rate-limited',
      `the subscriptions of this connection would hold ${connection} bytes of filters (max ${limits.max_subscription_memory_per_connection}); close one first`,
    );
  }
  return holding.shard + holding.adding > limits.max_subscription_memory
    ? reject('error', `this relay shard holds too many subscriptions (max ${limits.max_subscription_memory} bytes of filters); try again later`)
    : undefined;
};

/** The hooks of a shard, in the order they run; stateful ones (rate limits) live as long as the shard object. */
export function shardPolicy(
  limits: RelayLimits,
  ownership: OwnershipRegistry,
  storage: DurableObjectStorage,
  store: EventStore,
  vanished: VanishList,
  retention: RetentionRules,
): RelayPolicy {
  return {
    rejectConnection: [routedByRouter, servedShard, connectionCap, connectionsPerAddress, agentConnectionsPerOwner, agentConnectionShare, connectionRatePerAddress],
    rejectFilter: [filterValuesCap, requestRate, readBudget, scanBudget, subscriptionCap, subscriptionMemoryCap, privateKindsNeedAuth, aoFramesLiveToRecipient],
    rejectEvent: [
      withinLimits,
      withinRetention(retention),
      notAuthEvent,
      oneRecipient,
      notExpired,
      protectedByAuthor,
      vanishAddressedHere,
      notVanished(vanished),
      ownerShardWrites,
      deletionTargetsCap,
      keptForGood,
      aoFrameAdmission(),
    ],
    chargeEvent: eventRateLimits(limits),
    onEventStored: [applyVanish(vanished, store), learnOwnershipFromProfile(ownership)],
    onEventSaved: [scheduleExpiry(storage), scheduleVanish(vanished, storage)],
  };
}

/** The first answer of `hooks` (in order) that is not undefined. */
export function firstVerdict<T, C, R>(hooks: readonly ((input: T, ctx: C) => R | undefined)[], input: T, ctx: C): R | undefined {
  for (const hook of hooks) {
    const r = hook(input, ctx);
    if (r !== undefined) return r;
  }
  return undefined;
}
