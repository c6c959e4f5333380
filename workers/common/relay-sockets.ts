// A WebSocket to a relay for edgestr's own components (hosted agents, the DVMCP bridge, the /mcp
// gateway): shards of this deployment are reached through their Durable Object with INTERNAL_HEADER
// (the owner's, the public one, or another owner's shard that exists on this deployment; on one of
// its edge objects when RELAY_EDGES gives it more than one, as the router does); other
// relays over the network, under the outbound policy (src/shared/outbound-url.ts) and without
// following redirects.

import { outboundPolicy, outboundRefusal } from '../../src/shared/outbound-url.js';
import type { SocketLike } from '../../src/shared/relay-client.js';
import { INTERNAL_HEADER, ownerShardExists, SHARD_HEADER, shardOfPath, type RouterBindings } from './shards.js';
import { EDGE_HEADER, socketTarget } from './edges.js';

/** Who is connecting: the deployment's origin (http(s)://host) and the component's owner (its own shard). */
export interface SocketOwner {
  origin: string;
  owner: string | null;
}

/** Opens a WebSocket to relay `url` for a component of `who` (see the header); throws with the reason. */
export async function openRelaySocket(env: RouterBindings, url: string, who: SocketOwner): Promise<SocketLike> {
  const local = new URL(url);
  const origin = new URL(who.origin);
  const httpUrl = url.replace(/^ws/, 'http');
  let response: Response;
  if (local.host === origin.host) {
    const owner = shardOfPath(local.pathname);
    if (owner === undefined) throw new Error(`relay ${url}: not a relay shard of this deployment (/ or /r/<owner>)`);
    if (owner !== null && owner !== who.owner && !(await ownerShardExists(env, owner))) {
      throw new Error(`relay ${url}: no relay shard for ${owner} on this deployment`);
    }
    const headers = new Headers({ Upgrade: 'websocket' });
    headers.set(SHARD_HEADER, owner ?? 'public');
    headers.set(INTERNAL_HEADER, 'agent');
    const target = socketTarget(env, owner);
    if (!target.ok) throw new Error(`relay ${url}: ${target.error}`);
    if (target.value.edge !== undefined) headers.set(EDGE_HEADER, String(target.value.edge));
    response = await target.value.stub.fetch(httpUrl, { headers });
  } else {
    const refused = outboundRefusal(local, 'relay', outboundPolicy(env));
    if (refused !== undefined) throw new Error(`relay ${url}: refused: ${refused}`);
    response = await fetch(httpUrl, { headers: { Upgrade: 'websocket' }, redirect: 'manual' });
  }
  const ws = response.webSocket;
  if (!ws) throw new Error(`relay ${url} did not accept a WebSocket (HTTP ${response.status})`);
  ws.accept();
  return ws as unknown as SocketLike;
}
