// Who a WebSocket of a shard is counted as, kept as the socket's hibernation tags so that the
// shard's counts are exact after a wake: an outside client by its address (client-address.ts), a
// connection of edgestr's own (INTERNAL_HEADER) by the owner it serves (INTERNAL_OWNER_HEADER; none:
// the deployment's own component). An internal connection serving anyone but the shard's owner (on
// the public shard, whose side is the deployment's: any owner) is also tagged as another owner's,
// for the per-owner cap and the share of `max_connections` those may hold (policy.ts), and, on the
// public shard, for the share of its storage reserve one owner's agents and bridges may hold
// (`servedOwnerOf`, owner-plan.ts). An owner's agent or bridge names itself (INTERNAL_COMPONENT_HEADER)
// and holds one socket of a shard object: its socket is tagged with its key, and a newer one
// replaces the older (`componentTag`, shard.ts `fetch`).

import { clientAddress, INTERNAL_ADDRESS } from '../common/client-address.js';
import { INTERNAL_COMPONENT_HEADER, INTERNAL_HEADER, INTERNAL_OWNER_HEADER, PUBLIC_SHARD } from '../common/shards.js';

/** Who a new socket is for: its address key, and for an internal one the owner it serves (null: the deployment) and whether that is another owner than the shard's. */
export interface SocketSide {
  address: string;
  internal: boolean;
  /** An internal connection serving another owner than the shard's: that owner's tag; else undefined. */
  otherOwner: string | undefined;
  /** An owner's agent or bridge: the tag of its sockets (`componentTag`); else undefined. */
  component: string | undefined;
  /** The tags the socket is accepted with. */
  tags: string[];
}

/** The tag of every socket from client address `address` (INTERNAL_ADDRESS for edgestr's own). */
export const addressTag = (address: string): string => `address:${address}`;
/** The tag of every internal socket of another owner than the shard's. */
export const OTHER_OWNERS_TAG = 'agents:others';
/** The tag of the socket of the agent or bridge with key `key` (64 hex). */
export const componentTag = (key: string): string => `component:${key}`;

/** Why a newer socket of an agent or bridge closed its older one (code 1000). */
export const REPLACED_SOCKET = 'replaced by a newer connection of the same agent or bridge';

const OWNER_KEY = /^[0-9a-f]{64}$/;
const OWNER_TAG = /^agents:([0-9a-f]{64})$/;

/** The owner an internal socket tagged `tags` serves on a shard not that owner's (undefined: none, or the deployment's own). */
export function servedOwnerOf(tags: readonly string[]): string | undefined {
  for (const tag of tags) {
    const m = OWNER_TAG.exec(tag);
    if (m) return m[1];
  }
  return undefined;
}

/**
 * The side of an upgrade to the shard named `shard` (SHARD_HEADER: an owner's hex or "public"), or
 * an error when an internal upgrade names something other than an owner key, or an owner's names
 * no key of its component.
 */
export function socketSide(request: Request, shard: string | undefined): SocketSide | string {
  if (request.headers.get(INTERNAL_HEADER) !== 'agent') {
    const address = clientAddress(request);
    return { address, internal: false, otherOwner: undefined, component: undefined, tags: [addressTag(address)] };
  }
  const served = request.headers.get(INTERNAL_OWNER_HEADER);
  if (served !== null && !OWNER_KEY.test(served)) return `invalid ${INTERNAL_OWNER_HEADER}: not an owner key`;
  let component: string | undefined;
  if (served !== null) {
    const key = request.headers.get(INTERNAL_COMPONENT_HEADER);
    if (key === null) return `missing ${INTERNAL_COMPONENT_HEADER}: an owner's agent or bridge names its own key`;
    if (!OWNER_KEY.test(key)) return `invalid ${INTERNAL_COMPONENT_HEADER}: not a key (64 hex)`;
    component = componentTag(key);
  }
  const tags = [addressTag(INTERNAL_ADDRESS), ...(component === undefined ? [] : [component])];
  if ((served ?? PUBLIC_SHARD) === shard) return { address: INTERNAL_ADDRESS, internal: true, otherOwner: undefined, component, tags };
  const owner = `agents:${served ?? PUBLIC_SHARD}`;
  return { address: INTERNAL_ADDRESS, internal: true, otherOwner: owner, component, tags: [...tags, owner, OTHER_OWNERS_TAG] };
}
