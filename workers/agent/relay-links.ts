// The Agent's connections to its relays: one RelayClient per relay URL, opened through the relay
// shard's Durable Object for shards of this deployment and over the network (under the outbound
// policy) for others; on each (re)open: NIP-42 AUTH, the subscriptions (prompts, cancels and gift
// wraps addressed to the agent, DVMCP requests when its DVMCP server is enabled; NIP-AO control
// frames on the owner's shard), the NIP-AO telemetry emitter, and the agent's ai.info, kind 0,
// relay list and DVMCP announcements (announcements.ts: due on each connection until its relay took
// them; none sent while the agent's owner is suspended or removed, `announces`, and sent on the open
// connections once it announces again; one refused for a passing reason is sent again with
// back-off, `announceDue` from the watchdog). The links may be narrowed to some relays (closeOthers: a removed owner's agent keeps the public
// shard's only, agent-do.ts). The agent's DVMCP client (for its `dvmcp_servers` tools)
// runs over the public shard's connection, authenticated as the agent; its gift wraps expire
// (NIP-40) as the DVMCP answers' do. Events from an external
// relay (one of the owner's `relays`, where anyone may post events tagged to the agent) pass a
// token bucket per relay before any work; the excess is counted in the agent's DropSummary (one log
// line a minute, workers/common/drop-summary.ts); the deployment's own shards bound their
// publishers themselves.

import type { NostrEvent } from '../../src/shared/event.js';
import type { Filter } from '../../src/shared/filters.js';
import { KIND } from '../../src/shared/kinds.js';
import type { ConversationKeyCache } from '../../src/shared/nip44.js';
import { RelayClient, type EventTemplate, type Subscription } from '../../src/shared/relay-client.js';
import { TelemetryEmitter } from '../../src/shared/ao-emitter.js';
import { AO_KIND } from '../../src/shared/nip-ao.js';
import { backendSigner, signEventWith } from '../../src/shared/event.js';
import type { OutboundEnv } from '../../src/shared/outbound-url.js';
import { ownerOutbound } from '../common/owner-outbound.js';
import { relayVerifier } from '../common/verifier.js';
import { type RelayShard } from '../relay-do/shard.js';
import { logAgent } from './agent-log.js';
import { openRelaySocket } from '../common/relay-sockets.js';
import { agentRelays, relayLabel, type StoredAgent, type StoredMcpServer } from './config.js';
import { infoTemplates } from './info.js';
import { dvmcpAnnouncements } from './dvmcp-profile.js';
import { STALE_SECONDS as DVMCP_STALE_SECONDS } from '../common/dvmcp-server/limits.js';
import { DVMCP_WRAP_TTL_SECONDS, expiringWraps } from '../../src/shared/dvmcp-wrap.js';
import type { OwnerEnv } from '../common/owners.js';
import type { AccountsBindings } from '../accounts/accounts-do.js';
import { REPLAY_SLACK_SECONDS } from './run-store.js';
import { WRAP_LOOKBACK_SECONDS } from '../../src/shared/nip59.js';
import { buildToolRunner } from './tools/registry.js';
import { toolsConfig } from './mcp-headers.js';
import { errorMessage } from '../../src/shared/errors.js';
import { DvmcpClient } from '../../src/shared/dvmcp-client.js';
import type { DvmcpToolOptions } from './tools/dvmcp.js';
import type { McpSessionCache } from '../common/mcp-session-cache.js';
import { SingleFlight } from '../common/single-flight.js';
import { TokenBucket } from '../relay-do/rate-limit.js';
import { DROPS, type DropSummary } from '../common/drop-summary.js';
import { DueAnnouncements, type Refused } from './announcements.js';

/**
 * Events one external relay may hand the agent: 20 a second sustained, 100 at once. Each costs a
 * Schnorr verification and a `seen` row (a gift wrap also an ECDH and a second row); real use is
 * far below (agent_prompts_per_minute is 60 by default, and a run's cancel is one event), and the
 * burst covers what a relay replays at (re)connection. The excess is dropped before any of it.
 */
export const EXTERNAL_EVENTS_PER_SECOND = 20;
export const EXTERNAL_EVENTS_BURST = 100;
/** Why an event of external relay `url` was dropped (the reason its DropSummary line names). */
const overLimit = (url: string): string => `${relayLabel(url)}: more than ${EXTERNAL_EVENTS_PER_SECOND} a second (burst ${EXTERNAL_EVENTS_BURST})`;

export interface LinksEnv extends OwnerEnv, AccountsBindings, OutboundEnv {
  RELAY_SHARD: DurableObjectNamespace<RelayShard>;
}

export interface RelayLinksDeps {
  env: LinksEnv;
  keys: ConversationKeyCache;
  config(): StoredAgent | undefined;
  /** The agent as published in ai.info (its provider resolved). */
  effective(c: StoredAgent): StoredAgent;
  secretKey(): Promise<Uint8Array>;
  sign(t: EventTemplate, sk: Uint8Array): Promise<NostrEvent>;
  /** The subscription cursor (seconds). */
  since(): number;
  /** A prompt, cancel, DVMCP request or gift wrap addressed to the agent, from `relay`. */
  onRequest(e: NostrEvent, relay: string): Promise<void>;
  /** A NIP-AO control frame for the agent on its owner's shard. */
  onControl(e: NostrEvent): Promise<void>;
  /** Whether the agent publishes its announcements now (not while its owner is suspended or removed): while not, they stay due. */
  announces(c: StoredAgent): boolean;
  /** The agent's clock (ms), for the announcements' retries. */
  now(): number;
  /** Announcements refused for a passing reason are due again at `at` (the agent's clock): the watchdog must wake by then. */
  announceBy(at: number): void;
  /** Where the events an external relay sends past its bucket are counted (DROPS.externalRelay). */
  drops: Pick<DropSummary, 'drop'>;
  /** The agent's MCP sessions and tool lists (ai.info lists the tools from them). */
  mcpSessions: McpSessionCache;
  /** Opens an MCP server's sealed headers (AgentStore.mcpHeaders), when ai.info's listing connects to it. */
  mcpHeaders(s: StoredMcpServer): Promise<Record<string, string>>;
}

/**
 * Runs a handler to completion; a failure is logged, never dropped (a run it belongs to already
 * ended with INTERNAL_ERROR in onPrompt; a failed connection setup is retried by the watchdog).
 */
function handle(what: string, id: string, p: Promise<void>): void {
  p.catch((e: unknown) => console.error(`agent: ${what} ${id} failed`, errorMessage(e)));
}

export class RelayLinks {
  private readonly clients = new Map<string, RelayClient>();
  /** Connection setups in flight, by relay URL: an open connection is set up once, not once per caller. */
  private readonly setups = new SingleFlight<string>();
  private telemetry: TelemetryEmitter | undefined;
  private controlSub: Subscription | undefined;
  private controlGeneration = 0;
  private dvmcp: { relay: RelayClient; client: DvmcpClient } | undefined;
  /** The bucket of each external relay, by URL (kept across reconnections, so a reconnect does not refill it). */
  private readonly limits = new Map<string, TokenBucket>();
  /** Events dropped by those buckets. */
  dropped = 0;
  /** The announcements due on each connection, by relay URL (announcements.ts). */
  private readonly due = new Map<string, DueAnnouncements>();

  constructor(private readonly deps: RelayLinksDeps) {}

  /** The NIP-AO emitter to the owner, once the owner's shard connection is set up. */
  get emitter(): TelemetryEmitter | undefined {
    return this.telemetry;
  }

  /** The relays the agent holds an open connection to. */
  get openRelays(): string[] {
    return [...this.clients].filter(([, client]) => client.status === 'open').map(([url]) => url);
  }

  /** Opens a connection to each of `urls` (every relay of the agent by default); each (re)opened connection is set up by onOpen. */
  async ensureConnected(c: StoredAgent, urls: readonly string[] = agentRelays(this.deps.env, c)): Promise<void> {
    await Promise.all(
      urls.map(async (url) => {
        const client = this.client(url, c);
        const opened = await client.connect({ timeoutMs: 10_000 });
        // Open but not set up (AUTH failed earlier): try again.
        if (opened.ok && !client.authenticatedAs) await this.setUp(url);
      }),
    );
  }

  /** The connection to `url` (a new one when there is none or it closed for good). */
  client(url: string, c: StoredAgent): RelayClient {
    const existing = this.clients.get(url);
    if (existing && existing.status !== 'closed') return existing;
    const client = new RelayClient({
      url,
      // A relay elsewhere is dialled under the owner's policy (EDGESTR_OUTBOUND_ALLOW only if vetted).
      socket: (u) => openRelaySocket(this.deps.env, u, { origin: c.origin, owner: c.owner, component: c.pubkey, outbound: () => ownerOutbound(this.deps.env, c.owner, c.origin) }),
      auth: async (t) => this.deps.sign(t, await this.deps.secretKey()),
      authOn: 'challenge',
      onStatus: (status) => {
        if (status === 'open') handle('connection setup', relayLabel(url), this.setUp(url));
      },
    });
    this.clients.set(url, client);
    return client;
  }

  /** The agent's DVMCP client over the public shard (a new one when that connection was replaced). */
  async dvmcpClient(c: StoredAgent): Promise<DvmcpClient> {
    const relay = this.client(agentRelays(this.deps.env, c)[1]!, c);
    if (this.dvmcp?.relay === relay) return this.dvmcp.client;
    const sk = await this.deps.secretKey();
    const backend = await relayVerifier();
    // Its gift wraps (stored 1059s) expire as a DVMCP server's answers do: no server acts on a request that old.
    const wrapSign = expiringWraps(backendSigner(backend), DVMCP_WRAP_TTL_SECONDS);
    const client = new DvmcpClient({ relays: relay, secretKey: sk, keys: this.deps.keys, sign: (t) => this.deps.sign(t, sk), verifier: backend, wrapSign });
    if (this.dvmcp?.relay === relay) return this.dvmcp.client; // another caller made one meanwhile
    void this.dvmcp?.client.close();
    this.dvmcp = { relay, client };
    return client;
  }

  /** The DVMCP tool options of the agent's tool set. */
  dvmcpTools(c: StoredAgent): DvmcpToolOptions {
    return { client: () => this.dvmcpClient(c), agent: c.pubkey };
  }

  /** Closes the connections to relays other than `keep` (the next use opens them again). */
  closeOthers(keep: readonly string[]): void {
    for (const [url, client] of this.clients) {
      if (keep.includes(url)) continue;
      client.close();
      this.clients.delete(url);
      this.due.delete(url);
      if (this.dvmcp?.relay === client) {
        void this.dvmcp.client.close();
        this.dvmcp = undefined;
      }
    }
    // The owner's-shard parts go with that connection.
    const c = this.deps.config();
    if (c && !keep.includes(agentRelays(this.deps.env, c)[0]!)) {
      this.telemetry = undefined;
      this.controlSub = undefined;
    }
  }

  /** Closes every connection (the next use opens new ones). */
  close(): void {
    void this.dvmcp?.client.close();
    this.dvmcp = undefined;
    for (const c of this.clients.values()) c.close();
    this.clients.clear();
    this.due.clear();
    this.telemetry = undefined;
    this.controlSub = undefined;
  }

  /** Sets up the connection to `url` (onOpen), joining a setup already in flight for it. */
  private setUp(url: string): Promise<void> {
    return this.setups.run(url, () => this.onOpen(url));
  }

  /**
   * A connection (re)opened: authenticate first (the relay serves stored prompts and wraps only to
   * their recipient), then subscribe with fresh filters (a reconnect must not resend a stale
   * `since`, which the relay refuses for NIP-AO control frames), then publish ai.info, kind 0, the
   * relay list and the DVMCP announcements (all due on this connection: announce).
   */
  private async onOpen(url: string): Promise<void> {
    const c = this.deps.config();
    const client = this.clients.get(url);
    if (!c || !client) return;
    const auth = await client.authenticate({ timeoutMs: 10_000 });
    if (!auth.ok) return; // the watchdog tries again
    logAgent({ msg: 'agent.connected', agent: c.pubkey, relay: relayLabel(url) });
    const ownerShard = url === agentRelays(this.deps.env, c)[0];
    this.subscribe(client, c, ownerShard);
    if (ownerShard && !this.telemetry) {
      const sk = await this.deps.secretKey();
      const backend = await relayVerifier();
      this.telemetry = new TelemetryEmitter({
        agentSecretKey: sk,
        owner: c.owner,
        publish: (e) => client.publish(e, { timeoutMs: 5000 }),
        cache: this.deps.keys,
        sign: (t) => signEventWith(t, sk, backend, c.pubkey),
      });
    }
    this.due.set(url, new DueAnnouncements());
    await this.announce(url, c);
  }

  /** Sends the announcements due on the open connections whose retry time has come (or held back while the agent did not announce). */
  async announceDue(c: StoredAgent): Promise<void> {
    const now = this.deps.now();
    const ready = [...this.due].filter(([url, due]) => due.ready(now) && this.clients.get(url)?.authenticatedAs !== undefined);
    await Promise.all(ready.map(([url]) => this.announce(url, c)));
  }

  /** When the watchdog must wake for an announcement to send again (the earliest after `now`, the agent's clock), if any. */
  nextAnnouncement(now: number): number | undefined {
    const at = [...this.due.values()].map((d) => d.nextAfter(now)).filter((t) => t !== undefined);
    return at.length > 0 ? Math.min(...at) : undefined;
  }

  /**
   * The agent's subscriptions on one relay. Both are sent again, with a fresh `since`, when the
   * relay closes them for a passing reason (`error:` such as live events lost on the way, or
   * `rate-limited:`): the agent keeps listening rather than go deaf on that relay.
   */
  private subscribe(client: RelayClient, c: StoredAgent, ownerShard: boolean): void {
    const url = client.url;
    const requests = (): Filter[] => {
      const since = this.deps.since();
      return [
        { kinds: [KIND.AI_PROMPT, KIND.AI_CANCEL], '#p': [c.pubkey], since: since - REPLAY_SLACK_SECONDS },
        { kinds: [KIND.GIFT_WRAP, KIND.EPHEMERAL_GIFT_WRAP], '#p': [c.pubkey], since: since - WRAP_LOOKBACK_SECONDS },
        ...(c.dvmcp?.enabled ? [{ kinds: [KIND.DVMCP_REQUEST, KIND.DVMCP_NOTIFICATION], '#p': [c.pubkey], since: Math.floor(Date.now() / 1000) - DVMCP_STALE_SECONDS }] : []),
      ];
    };
    // The deployment's own shards (the owner's, the public one) bound their publishers; other relays get a bucket.
    const limit = ownerShard || url === agentRelays(this.deps.env, c)[1] ? undefined : this.limitOf(url);
    const onEvent = (e: NostrEvent): void => {
      if (limit && !limit.take(Date.now())) {
        this.dropped++;
        return this.deps.drops.drop(DROPS.externalRelay, overLimit(url));
      }
      handle('event', e.id, this.deps.onRequest(e, url));
    };
    client.subscribe(requests(), { id: 'requests', resubscribe: requests, onEvent });
    if (ownerShard) {
      // A new id per connection: the client's own re-send of the previous one (with its stale
      // `since`) is refused by the relay and must not replace this one.
      this.controlSub?.close();
      const control = (): Filter[] => [{ kinds: [AO_KIND], '#p': [c.pubkey], since: Math.floor(Date.now() / 1000) }];
      this.controlSub = client.subscribe(control(), {
        id: `control:${++this.controlGeneration}`,
        resubscribe: control,
        onEvent: (e) => handle('control frame', e.id, this.deps.onControl(e)),
      });
    }
  }

  private limitOf(url: string): TokenBucket {
    let limit = this.limits.get(url);
    if (!limit) {
      limit = new TokenBucket(EXTERNAL_EVENTS_PER_SECOND, EXTERNAL_EVENTS_BURST, Date.now());
      this.limits.set(url, limit);
    }
    return limit;
  }

  /**
   * Publishes the announcements still due on `url`'s connection, signed now, when the agent
   * announces and no attempt is in progress there; each refusal is logged and what may pass later
   * is sent again after a back-off (announcements.ts), the watchdog woken for it (announceBy).
   */
  private async announce(url: string, c: StoredAgent): Promise<void> {
    const due = this.due.get(url);
    const client = this.clients.get(url);
    if (!due || !client || due.sending || !this.deps.announces(c)) return;
    due.sending = true;
    let outcome: { refused: Refused[] } | { failed: string };
    try {
      outcome = { refused: await this.publishInfo(c, client, due) };
    } catch (e) {
      // Not built (its tool list) or not signed: every announcement still due.
      outcome = { failed: errorMessage(e) };
    } finally {
      due.sending = false;
    }
    // The connection was replaced meanwhile: the new one announces by itself.
    if (this.due.get(url) !== due) return;
    const now = this.deps.now();
    const settled = due.settle(outcome, now, c.pubkey, relayLabel(url));
    for (const [level, line] of settled.lines) console[level](line);
    const retry = due.nextAfter(now);
    if (retry === undefined) this.due.delete(url);
    else this.deps.announceBy(retry);
  }

  /** Publishes ai.info, kind 0, the relay list and the DVMCP announcements that `due` still wants on `client`; those refused, with the relay's answer. */
  private async publishInfo(c: StoredAgent, client: RelayClient, due: DueAnnouncements): Promise<Refused[]> {
    const sk = await this.deps.secretKey();
    const policy = await ownerOutbound(this.deps.env, c.owner, c.origin);
    const tools = await buildToolRunner(toolsConfig(c, (s) => this.deps.mcpHeaders(s)), { webFetch: { policy }, mcp: { policy, sessions: this.deps.mcpSessions }, dvmcp: this.dvmcpTools(c) });
    await tools.close();
    const now = Math.floor(Date.now() / 1000);
    const templates = [...infoTemplates(this.deps.effective(c), tools.definitions(), agentRelays(this.deps.env, c), now), ...dvmcpAnnouncements(c)].filter((t) => due.wants(t));
    const refused: Refused[] = [];
    for (const t of templates) {
      const published = await client.publish(await this.deps.sign(t, sk), { timeoutMs: 5000 });
      if (!published.ok) refused.push({ template: t, message: published.message });
    }
    return refused;
  }
}
