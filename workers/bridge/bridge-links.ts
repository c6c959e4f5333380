// The Bridge's connections to its relays: the owner's shard `/r/<owner>` and the public shard `/`
// of the deployment, at the served origin of the one it was registered on (shards.ts `servedOrigin`:
// EDGESTR_PUBLIC_URL's when set; its zap requests name these relays too), opened with
// openRelaySocket (through the shards' Durable Objects). On each (re)open: NIP-42 AUTH as the provider, then fresh subscriptions (a new
// `since`): requests and notifications (25910, 21316) p-tagging the provider from a minute back, and
// gift wraps (1059) p-tagging it from two days back (WRAP_LOOKBACK_SECONDS: wraps are dated up to two
// days in the past, NIP-59); the bridge judges a wrapped request by its rumor's created_at and id.
// A publish tells whether its event landed: accepted, or `duplicate:` (the relay has it already),
// else the relay's message (the bridge counts an answer's refusal in its DropSummary: a stranger
// chooses how many answers it gets); the refusals of the bridge's own events (announcements, their
// deletions: a few per server and watchdog) are logged here. An announcement, and a deletion of
// announcements, counts as landed when the public shard (the one /mcp and DVMCP discovery read)
// took it (`publishAll`, `publishDeletion`); the owner's shard's answer is only logged.

import type { NostrEvent } from '../../src/shared/event.js';
import { err, errorMessage, ok, parseRejection, type Result } from '../../src/shared/errors.js';
import { KIND } from '../../src/shared/kinds.js';
import { WRAP_LOOKBACK_SECONDS } from '../../src/shared/nip59.js';
import type { Filter } from '../../src/shared/filters.js';
import { RelayClient, type EventTemplate, type PublishResult, type Subscription } from '../../src/shared/relay-client.js';
import type { RouterBindings } from '../common/shards.js';
import { servedOrigin } from '../common/public-url.js';
import { openRelaySocket } from '../common/relay-sockets.js';
import { SingleFlight } from '../common/single-flight.js';
import type { ProviderRecord } from './server-store.js';
import { STALE_SECONDS } from '../common/dvmcp-server/limits.js';

export interface BridgeLinksDeps {
  env: RouterBindings;
  provider(): ProviderRecord | undefined;
  sign(t: EventTemplate): Promise<NostrEvent>;
  /** A request, notification or gift wrap addressed to the provider, from relay `url`. */
  onEvent(e: NostrEvent, url: string): Promise<void>;
  /** More subscriptions on every relay (the payment verifier's zap receipts, payments-bridge.ts). */
  extraFilters?(): Promise<Filter[]>;
}

type UrlEnv = Pick<RouterBindings, 'EDGESTR_PUBLIC_URL'>;

/** The public shard of a provider's deployment: where `/mcp` and clients look for announcements. */
export function publicRelay(env: UrlEnv, p: ProviderRecord): string {
  return `${servedOrigin(env, p.origin).replace(/^http/, 'ws')}/`;
}

/** The shard of a provider's owner. */
function ownerRelay(env: UrlEnv, p: ProviderRecord): string {
  return `${servedOrigin(env, p.origin).replace(/^http/, 'ws')}/r/${p.owner}`;
}

/** The relays of a provider: its owner's shard first, then the public shard. */
export function bridgeRelays(env: UrlEnv, p: ProviderRecord): string[] {
  return [ownerRelay(env, p), publicRelay(env, p)];
}

/** Whether a relay's answer means it holds the event: accepted, or `duplicate:` (it had it, or a newer version). */
const landed = (r: PublishResult): boolean => r.ok || parseRejection(r.message)?.prefix === 'duplicate';

function handle(what: string, p: Promise<void>): void {
  p.catch((e: unknown) => console.error(`bridge: ${what} failed`, errorMessage(e)));
}

export class BridgeLinks {
  private readonly clients = new Map<string, RelayClient>();
  private readonly subs = new Map<string, Subscription>();
  /** Per relay: how many subscriptions this bridge made there (each setup's REQ has a new id). */
  private readonly generation = new Map<string, number>();
  /** Connection setups in flight, by relay URL: an open connection is set up once, not once per caller. */
  private readonly setups = new SingleFlight<string>();

  constructor(private readonly deps: BridgeLinksDeps) {}

  /** Opens (or checks) a connection to every relay. */
  async ensureConnected(): Promise<void> {
    const p = this.deps.provider();
    if (!p) return;
    await Promise.all(
      bridgeRelays(this.deps.env, p).map(async (url) => {
        const client = this.client(url, p);
        const opened = await client.connect({ timeoutMs: 10_000 });
        // Open but not set up (AUTH failed earlier): try again.
        if (opened.ok && !client.authenticatedAs) await this.setUp(url);
      }),
    );
  }

  /**
   * Publishes on `url` (connecting when needed; 5 s for the connection and the OK together): ok when
   * it landed (`landed`), else the relay's message. Not logged (see the header).
   */
  async publish(url: string, e: NostrEvent): Promise<Result<void, string>> {
    const p = this.deps.provider();
    if (!p) return err('the bridge has no provider key');
    const r = await this.client(url, p).publish(e, { timeoutMs: 5000 });
    return landed(r) ? ok(undefined) : err(r.message);
  }

  /** Publishes one of the bridge's own events on `url` (`publish`), a refusal logged. */
  private async publishOwn(url: string, e: NostrEvent): Promise<Result<void, string>> {
    const r = await this.publish(url, e);
    if (!r.ok) console.warn(`bridge: ${url} refused ${e.kind} ${e.id}: ${r.error}`);
    return r;
  }

  /**
   * Publishes deletion `e` of a server's announcements on the public shard and, with `ownerShard`,
   * on the owner's shard at the same time (one 5 s window); whether it landed on the public shard,
   * the one that counts (the owner's shard's answer is only logged).
   */
  async publishDeletion(e: NostrEvent, ownerShard: boolean): Promise<boolean> {
    const p = this.deps.provider();
    if (!p) return false;
    const [landedPublicly] = await Promise.all([this.publishOwn(publicRelay(this.deps.env, p), e), ownerShard ? this.publishOwn(ownerRelay(this.deps.env, p), e) : undefined]);
    return landedPublicly.ok;
  }

  /**
   * Publishes announcement `e` on every relay at once (one 5 s window): ok when it landed on the
   * public shard, else `<public shard>: <its message>` (the owner's shard's answer is only logged).
   */
  async publishAll(e: NostrEvent): Promise<Result<void, string>> {
    const p = this.deps.provider();
    if (!p) return err('the bridge has no provider key');
    const [onPublic] = await Promise.all([this.publishOwn(publicRelay(this.deps.env, p), e), this.publishOwn(ownerRelay(this.deps.env, p), e)]);
    return onPublic.ok ? onPublic : err(`${publicRelay(this.deps.env, p)}: ${onPublic.error}`);
  }

  close(): void {
    for (const c of this.clients.values()) c.close();
    this.clients.clear();
    this.subs.clear();
  }

  private client(url: string, p: ProviderRecord): RelayClient {
    const existing = this.clients.get(url);
    if (existing && existing.status !== 'closed') return existing;
    const client = new RelayClient({
      url,
      socket: (u) => openRelaySocket(this.deps.env, u, { origin: p.origin, owner: p.owner, component: p.pubkey }),
      auth: (t) => this.deps.sign(t),
      authOn: 'challenge',
      onStatus: (status) => {
        if (status === 'open') handle(`connection setup ${url}`, this.setUp(url));
      },
    });
    this.clients.set(url, client);
    return client;
  }

  /** Sets up the connection to `url` (onOpen), joining a setup already in flight for it. */
  private setUp(url: string): Promise<void> {
    return this.setups.run(url, () => this.onOpen(url));
  }

  /** Authenticate first (gift wraps are served only to their recipient), then subscribe afresh. */
  private async onOpen(url: string): Promise<void> {
    const p = this.deps.provider();
    const client = this.clients.get(url);
    if (!p || !client) return;
    const auth = await client.authenticate({ timeoutMs: 10_000 });
    if (!auth.ok) return; // the watchdog tries again
    const extra = (await this.deps.extraFilters?.()) ?? [];
    const filters = (): Filter[] => {
      const now = Math.floor(Date.now() / 1000);
      return [
        { kinds: [KIND.DVMCP_REQUEST, KIND.DVMCP_NOTIFICATION], '#p': [p.pubkey], since: now - STALE_SECONDS },
        { kinds: [KIND.GIFT_WRAP], '#p': [p.pubkey], since: now - WRAP_LOOKBACK_SECONDS },
        ...extra,
      ];
    };
    // A new id per connection: the client's own re-send of the old one carries a stale `since`.
    // Sent again (fresh `since`) when the relay closes it for a passing reason: the server keeps listening.
    this.subs.get(url)?.close();
    const n = (this.generation.get(url) ?? 0) + 1;
    this.generation.set(url, n);
    this.subs.set(url, client.subscribe(filters(), { id: `dvmcp:${n}`, resubscribe: filters, onEvent: (e) => handle(`event ${e.id}`, this.deps.onEvent(e, url)) }));
  }
}
