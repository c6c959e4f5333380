// A WebSocket to a relay for edgestr's own components (hosted agents, the DVMCP bridge, the /mcp
// gateway): shards of this deployment, at its served origin (public-url.ts `servedOrigin`:
// EDGESTR_PUBLIC_URL's when set, whatever origin the component was created on), are reached
// through their Durable Object (the owner's, the public one, or another owner's shard that exists
// on this deployment; on one of its edge objects when RELAY_EDGES gives it more than one, as the
// router does); other relays over the network, under the outbound policy
// (src/shared/outbound-url.ts; the owner's, `outbound`: its exceptions only for an owner the
// operators vetted; never this deployment's own host, e.g. another port of its hostname in
// production, EDGESTR_PUBLIC_URL's host or the origin the component was created on: a loop) and without following redirects; their
// upgrade is given up (its connection closed) when unanswered within RELAY_CONNECT_TIMEOUT_MS, and
// the body of a refusal is cancelled, not left open.
// A connection of edgestr's own carries INTERNAL_HEADER, and INTERNAL_OWNER_HEADER naming the owner
// whose agent or bridge it serves (none: the deployment's own component) with
// INTERNAL_COMPONENT_HEADER naming that agent or bridge, by which the shard counts it and keeps one
// socket per component (workers/relay-do/socket-tags.ts); with edge objects every one of an
// owner's lands on the edge its key hashes to on a shard of an owner (edges.ts `ownerPlacement`),
// so that the per-owner cap holds there, and on the edge its component's key hashes to on the
// public shard, where no per-owner cap applies and one owner's many agents spread. One opened for an outside client (`client`:
// the /mcp gateway's calls, which a stranger drives) carries that client's address instead, as
// CF-Connecting-IP, and lands on the object the router puts that address's sockets on: the shard
// counts it, and what is sent on it, as that client's own connection (per-address connection cap
// and buckets, the public shard's client share of storage). A shard's refusal of an upgrade is an
// error with the shard's reason.

import { outboundPolicy, outboundRefusal, type OutboundPolicy } from '../../src/shared/outbound-url.js';
import type { SocketLike } from '../../src/shared/relay-client.js';
import { INTERNAL_COMPONENT_HEADER, INTERNAL_HEADER, INTERNAL_OWNER_HEADER, ownerShardExists, PUBLIC_SHARD, SHARD_HEADER, type RouterBindings } from './shards.js';
import { servedOrigin } from './public-url.js';
import { shardOfPath } from '../../src/shared/shard-url.js';
import { componentPlacement, EDGE_HEADER, ownerPlacement, socketTarget } from './edges.js';
import { isLoopbackKey, UNKNOWN_ADDRESS } from './client-address.js';

/** Who is connecting: the deployment's origin and the component's owner (its own shard). */
export interface SocketOwner {
  /**
   * The origin (http(s)://host) the component was created on (an agent's or bridge's stored one; the
   * gateway's request's): this deployment's shards are at servedOrigin of it, and it is one of the
   * own hosts of the default policy below.
   */
  origin: string;
  owner: string | null;
  /** The address (client-address.ts `clientAddress`) of the outside client the connection is opened for; absent: edgestr's own. */
  client?: string;
  /** The key of the agent or bridge of `owner` the connection is for (required with an owner and no `client`): it holds one socket of a shard. */
  component?: string;
  /** The policy of a relay elsewhere, dialled for the owner (owner-outbound.ts, given `origin`), asked only for such a relay; absent: the deployment's, without EDGESTR_OUTBOUND_ALLOW, refusing `origin`'s host. */
  outbound?: () => Promise<OutboundPolicy>;
}

/**
 * The headers of an upgrade to the shard of `owner` on this deployment, for `client` (see the
 * header) or for edgestr's own component `component` serving `served` (absent: the deployment's own).
 */
export function shardUpgradeHeaders(owner: string | null, client: string | undefined, served?: { owner: string; component: string }): Headers {
  const headers = new Headers({ Upgrade: 'websocket' });
  headers.set(SHARD_HEADER, owner ?? PUBLIC_SHARD);
  if (client !== undefined) headers.set('CF-Connecting-IP', client);
  else {
    headers.set(INTERNAL_HEADER, 'agent');
    if (served !== undefined) {
      headers.set(INTERNAL_OWNER_HEADER, served.owner);
      headers.set(INTERNAL_COMPONENT_HEADER, served.component);
    }
  }
  return headers;
}

/**
 * The key a socket to the shard of `shardOwner` (null: public) is placed by on an edge (see the
 * header): the client's address; for edgestr's own, its owner's key on an owner's shard and its
 * component's on the public shard; none (at random) for loopback and unknown addresses and the
 * deployment's own.
 */
function placement(who: SocketOwner, shardOwner: string | null): string | undefined {
  if (who.client === undefined) {
    if (who.owner === null) return undefined;
    return shardOwner === null && who.component !== undefined ? componentPlacement(who.component) : ownerPlacement(who.owner);
  }
  return who.client === UNKNOWN_ADDRESS || isLoopbackKey(who.client) ? undefined : who.client;
}

/** How long a relay elsewhere has to answer the upgrade (the relay client's own connect timeout). */
export const RELAY_CONNECT_TIMEOUT_MS = 10_000;

/** The upgrade to a relay elsewhere: aborted when unanswered within `timeoutMs`; a refusal's body cancelled. */
async function upgradeElsewhere(url: string, httpUrl: string, timeoutMs: number): Promise<Response> {
  const deadline = new AbortController();
  const timer = setTimeout(() => deadline.abort(new Error(`no answer to the WebSocket upgrade within ${timeoutMs} ms`)), timeoutMs);
  try {
    const response = await fetch(httpUrl, { headers: { Upgrade: 'websocket' }, redirect: 'manual', signal: deadline.signal });
    if (!response.webSocket) await response.body?.cancel().catch(() => undefined);
    return response;
  } catch (e) {
    if (deadline.signal.aborted) throw new Error(`relay ${url}: no answer to the WebSocket upgrade within ${timeoutMs} ms`);
    throw e;
  } finally {
    clearTimeout(timer);
  }
}

/**
 * Opens a WebSocket to relay `url` for a component of `who` (see the header); throws with the
 * reason. A relay elsewhere must answer the upgrade within `connectTimeoutMs`.
 */
export async function openRelaySocket(env: RouterBindings, url: string, who: SocketOwner, connectTimeoutMs = RELAY_CONNECT_TIMEOUT_MS): Promise<SocketLike> {
  const local = new URL(url);
  const origin = new URL(servedOrigin(env, who.origin));
  const httpUrl = url.replace(/^ws/, 'http');
  let response: Response;
  if (local.host === origin.host) {
    const owner = shardOfPath(local.pathname);
    if (owner === undefined) throw new Error(`relay ${url}: not a relay shard of this deployment (/ or /r/<owner>)`);
    if (owner !== null && owner !== who.owner && !(await ownerShardExists(env, owner))) {
      throw new Error(`relay ${url}: no relay shard for ${owner} on this deployment`);
    }
    if (who.client === undefined && who.owner !== null && who.component === undefined) {
      throw new Error(`relay ${url}: an owner's agent or bridge names its own key to connect (component)`);
    }
    const served = who.client === undefined && who.owner !== null && who.component !== undefined ? { owner: who.owner, component: who.component } : undefined;
    const headers = shardUpgradeHeaders(owner, who.client, served);
    const target = socketTarget(env, owner, placement(who, owner));
    if (!target.ok) throw new Error(`relay ${url}: ${target.error}`);
    if (target.value.edge !== undefined) headers.set(EDGE_HEADER, String(target.value.edge));
    response = await target.value.stub.fetch(httpUrl, { headers });
  } else {
    const refused = outboundRefusal(local, 'relay', who.outbound ? await who.outbound() : outboundPolicy(env, { vetted: false, origins: [who.origin] }));
    if (refused !== undefined) throw new Error(`relay ${url}: refused: ${refused}`);
    response = await upgradeElsewhere(url, httpUrl, connectTimeoutMs);
  }
  const ws = response.webSocket;
  if (!ws) {
    // A shard of this deployment says why (e.g. its per-address connection cap); another relay's text is not passed on.
    const reason = local.host === origin.host ? (await response.text().catch(() => '')).slice(0, 300) : '';
    throw new Error(`relay ${url} did not accept a WebSocket (HTTP ${response.status})${reason ? `: ${reason}` : ''}`);
  }
  ws.accept();
  return ws as unknown as SocketLike;
}
