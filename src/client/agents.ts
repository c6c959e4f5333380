// Finding an agent: `<agent>` as 64-hex, npub or `demo` (the demo agent named by /health in local
// development), and the relay to talk to it on: the demo block's shard, else the agent's relay list
// (kind 10002) on the deployment's public shard, preferring a shard of the same deployment.
// Whoever runs the agent writes its relay list: an entry on another host is dialled only when the
// one outbound-URL policy (src/shared/outbound-url.ts) lets it be, so that a stranger's agent cannot
// make the user's machine open (and authenticate on) a socket to its LAN or loopback: for a
// deployment on a public host, public hosts over wss only; for a local one (a loopback, private or
// local-name host: `npm start`, a LAN test), what development allows (link-local stays refused).
import { err, ok, type Result } from '../shared/errors.js';
import { classOfHost } from '../shared/host-policy.js';
import { parsePubkey } from '../shared/keys.js';
import { KIND } from '../shared/kinds.js';
import { outboundPolicy, outboundRefusal, urlShapeRefusal } from '../shared/outbound-url.js';
import { health, httpBase, wsUrl } from './http.js';
import { latestOrNext, relayClient } from './relay.js';

export interface AgentTarget {
  pubkey: string;
  relay: string;
}

export type FindError = { reason: 'usage' | 'unreachable' | 'unknown'; message: string };

/** The agent's key and its relay on the deployment at `base`. */
export async function findAgent(base: string, agent: string): Promise<Result<AgentTarget, FindError>> {
  if (agent === 'demo') {
    const h = await health(base);
    if (!h.ok) return err({ reason: 'unreachable', message: h.error.message });
    if (!h.value.demo) return err({ reason: 'unknown', message: `${httpBase(base)} has no demo agent (only local development has one)` });
    return ok({ pubkey: h.value.demo.agent, relay: wsUrl(base, h.value.demo.relay) });
  }
  const pubkey = parsePubkey(agent);
  if (!pubkey) return err({ reason: 'usage', message: `not an agent: ${agent} (expected 64-hex, npub or demo)` });
  const relay = await agentRelay(base, pubkey);
  return relay.ok ? ok({ pubkey, relay: relay.value }) : relay;
}

/**
 * How long to wait for the relay list of an agent that has none stored yet: an agent publishes it
 * right after it is created, when it has connected (a second or so), so a client that asks at once
 * waits for it rather than calling the agent unknown.
 */
export const RELAY_LIST_WAIT_MS = 5000;

/** The agent's relay from its relay list on the public shard of `base`. */
export async function agentRelay(base: string, pubkey: string, waitMs = RELAY_LIST_WAIT_MS): Promise<Result<string, FindError>> {
  const client = relayClient(wsUrl(base, '/'), undefined);
  try {
    const connected = await client.connect();
    if (!connected.ok) return err({ reason: 'unreachable', message: `cannot connect to ${client.url}: ${connected.message}` });
    const list = await latestOrNext(client, [{ kinds: [KIND.RELAY_LIST], authors: [pubkey], limit: 1 }], waitMs);
    const relays = (list?.tags ?? []).filter((t) => t[0] === 'r' && typeof t[1] === 'string').map((t) => t[1]!);
    return relays.length > 0 ? chooseRelay(base, relays) : err({ reason: 'unknown', message: `unknown agent ${pubkey}: no relay list on ${client.url}` });
  } catch (e) {
    return err({ reason: 'unreachable', message: (e as Error).message });
  } finally {
    client.close();
  }
}

/**
 * The relay to dial of an agent's relay list entries (`relays`, not empty): a shard of the
 * deployment at `base` (its host, a /r/ path) wherever it is listed, else the first entry on the
 * deployment's host or that the outbound-URL policy lets be dialled (see the header; a ws/wss URL
 * without credentials in any case); none: "the agent's relay ws://192.168.1.1/r/x is not dialled:
 * 192.168.1.1 is a private address", for the first entry.
 */
export function chooseRelay(base: string, relays: readonly string[]): Result<string, FindError> {
  const deployment = new URL(httpBase(base));
  const policy = outboundPolicy(classOfHost(deployment.hostname) === undefined ? {} : { EDGESTR_ENV: 'development' });
  const entries = relays.map((raw) => {
    let url: URL;
    try {
      url = new URL(raw);
    } catch {
      return { raw, shard: false, refused: 'invalid URL' };
    }
    const own = url.host === deployment.host;
    return { raw, shard: own && url.pathname.startsWith('/r/'), refused: own ? urlShapeRefusal(url, 'relay') : outboundRefusal(url, 'relay', policy) };
  });
  const chosen = entries.find((e) => e.shard && e.refused === undefined) ?? entries.find((e) => e.refused === undefined);
  if (chosen) return ok(chosen.raw);
  const first = entries[0]!;
  return err({ reason: 'unreachable', message: `the agent's relay ${first.raw} is not dialled: ${first.refused}` });
}
