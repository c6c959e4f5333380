// Bridge: one Durable Object per provider key, i.e. per owner (`idFromName(owner)`): the owner's
// remote MCP servers exposed over DVMCP. It wires the parts beside it: its tables
// (server-store.ts), its relay connections (bridge-links.ts), the dispatcher (dispatcher.ts) over
// one UpstreamServer per server (upstream.ts), limits (limits.ts), the payment gate
// (payment-gate.ts) and announcements (announcer.ts). Here: the management RPCs, the watchdog
// alarm (reconnect every 30 s, announcements refreshed every 6 h or when upstream says a list
// changed, a server checked so within OUTAGE_CHECK_MS of a client's call failing as if it were
// down (`suspectOutage`), and RETRY_MS after a refresh that failed, left out a list that may pass,
// whose set the public shard did not take in full (only a set it took is recorded as published:
// `announce`), or that a restart cut (`refresh`),
// the deletions of a removed or private server's announcements that the public shard did
// not take sent again (`deleteAnnouncements`, `resendDeletions`); while EDGESTR_SECRET is rotated,
// what the previous secret sealed is sealed again; a pass that throws is logged and the next booked
// within 30 s, so the alarm is never lost; a pass that finds nothing to do, no server, no deletion
// to send again, no invoice still open, closes the connections and books no alarm until a server
// is registered: `idle`, `rest`), and
// incoming events: one that does not name the provider alone (exactly one p tag; a wrap's rumor
// too) dropped before anything; each event id checked once
// (bounded LRU), signature checked, gift wraps opened (refusals never answered; answers and
// notifications gift-wrapped expire in 10 minutes), requests dated over 60 s away from
// now ignored, and each request id (the event's, or the rumor's) handled once: a request seen on both
// shards is answered once, on the relay it came from first, and a replay is ignored also after an
// eviction (`once`, the `seen` table). Requests are metered and held to the owner's plan (metering.ts).
// What a stranger can send without limit and the bridge drops is never logged one line per event:
// events not naming it alone, gift wraps that do not open, zap receipts that pay nothing, answers
// its relay refuses and encrypted requests to a server with encryption off are counted by reason in
// one DropSummary (workers/common/drop-summary.ts: one line per kind a minute, the watchdog writes
// what is due).
// Whether the bridge serves is the owner rule (workers/common/owners.ts: EDGESTR_OWNERS or the
// registry, cached OWNER_CACHE_MS per isolate), never whether the owner has a shard (with
// EDGESTR_OPEN_SHARDS every key has one). While the registry cannot be read (an isolate with no
// copy of it), a request is not served: it is answered -32603 REGISTRY_UNREADABLE (as ErrorAnswers
// allows) and counted in the DropSummary; other events are handled as for an allowed owner.
// a suspended or removed owner's bridge answers nothing and drops its calls in flight, but still
// records zap receipts (a call paid for meanwhile does not run; payments-gate.ts logs it for a
// refund); a suspended owner's watchdog dials no server and publishes no announcement, what is
// announced staying out, until the owner is resumed (`pause`); a removed owner's next watchdog
// withdraws the bridge (`withdraw`: announcements
// deleted on the public shard, no longer listed as a deployment bridge, connections closed, the
// registry asked again every OWNER_RECHECK_MS, and at each check the deletions that did not land,
// and the revocation of its key if a shard failed it, sent again), until the owner is added again
// (`reinstate`).

import { DurableObject } from 'cloudflare:workers';
import { generateSecretKey, getPublicKey } from 'nostr-tools/pure';
import { checkIdAndSignature, type NostrEvent } from '../../src/shared/event.js';
import { err, errorMessage, ok, type Result } from '../../src/shared/errors.js';
import { announcementDeletion, notificationTemplate, OWNER_REMOVED_REASON, parseMessage, RPC, rpcError, type Incoming, type RpcError } from '../../src/shared/dvmcp.js';
import { unwrapDvmcp, wrapDvmcp, type Form } from '../../src/shared/dvmcp-wrap.js';
import { hexToBytes } from '../../src/shared/hex.js';
import { KIND } from '../../src/shared/kinds.js';
import { LruMap } from '../../src/shared/lru.js';
import { ConversationKeyCache } from '../../src/shared/nip44.js';
import { outboundPolicy, type OutboundEnv } from '../../src/shared/outbound-url.js';
import { ownerOutbound } from '../common/owner-outbound.js';
import type { EventTemplate } from '../../src/shared/relay-types.js';
import { shardStub, type RouterBindings } from '../common/shards.js';
import { recordPublicBridge, vettedOwner } from '../common/deployment-bridges.js';
import { ownerState, type OwnerState } from '../common/owners.js';
import { localMode } from '../../src/shared/env-mode.js';
import { DEFAULT_BRIDGE_SERVERS, DEFAULT_PLAN, planLimits, type PlanEnv } from '../accounts/plans.js';
import { BridgeMeter, METER_PRUNE_BATCH, type BridgeCallRow } from './metering.js';
import { logResealPass, type SecretEnv } from '../common/secrets.js';
import { wakeNoLaterThan } from '../common/alarms.js';
import { SeenIds } from '../common/seen-ids.js';
import { relayVerifier } from '../common/verifier.js';
import type { McpNotification } from '../common/mcp-client.js';
import { McpSessionCache } from '../common/mcp-session-cache.js';
import { buildAnnouncements } from './announcer.js';
import { BridgeLinks, bridgeRelays } from './bridge-links.js';
import { patchedServer, storedServer, type CreateServer, type ServerView, type StoredServer, type UpdateServer } from './config.js';
import { errorAnswer } from '../common/dvmcp-server/answer-fit.js';
import { answerWrapSigner, Dispatcher, NotPublished, type Reply, type RequestAdmission } from '../common/dvmcp-server/dispatcher.js';
import { DROPS, DropSummary } from '../common/drop-summary.js';
import { soleRecipient } from '../../src/shared/recipients.js';
import { ErrorAnswers, isFresh, Limiter, STALE_SECONDS } from '../common/dvmcp-server/limits.js';
import { Coalescer, NOTIFICATIONS_PER_MINUTE, NOTIFY_WINDOW_MS, NotificationBudget, SERVER_NOTIFICATIONS_PER_MINUTE } from '../common/dvmcp-server/notification-limits.js';
import { noPaymentGate, type PaymentGate } from '../common/dvmcp-server/payment-gate.js';
import { BridgePayments } from './payments-bridge.js';
import type { PaymentEnv } from './payments.js';
import { MAX_PENDING_DELETIONS, PENDING_DELETION_MS, ServerStore, type PendingDeletion, type ProviderRecord } from './server-store.js';
import { BRIDGE_CLIENT, MAX_SESSIONS, MAX_SESSIONS_PER_SERVER, serverOfSessionKey, UpstreamServer } from './upstream.js';

export interface BridgeEnv extends RouterBindings, OutboundEnv, SecretEnv, PaymentEnv, PlanEnv {}

const WATCHDOG_MS = 30_000;
/** Announcements (and health counts) are refreshed this often, and retried this soon after a failure. */
export const REFRESH_MS = 6 * 3600_000;
export const RETRY_MS = 5 * 60_000;
/** A client's call that failed at the transport level books the bridge's own check of the server this soon, at most once per this time. */
export const OUTAGE_CHECK_MS = 60_000;
/** A removed owner's bridge asks the registry this often whether the owner was added again. */
export const OWNER_RECHECK_MS = 10 * 60_000;
/** The reasons of the deletions of announcements (a removed owner's: OWNER_REMOVED_REASON): a removed server's, a server made private. */
const SERVER_REMOVED = 'server removed';
const SERVER_MADE_PRIVATE = 'server made private';
/** Event ids remembered in memory: a copy from the other shard is not verified or opened again. */
const SEEN_IDS = 4096;
/** A handled request id is kept this long after its created_at (it is fresh until STALE_SECONDS after). */
const HANDLED_SECONDS = 2 * STALE_SECONDS;
/** A client refused for the owner's daily quota is told again at most this often. */
const QUOTA_TOLD_MS = 60_000;
/** Handled request ids pruned by each watchdog alarm, at most. */
const PRUNE_BATCH = 500;
/** Upstream notifications passed on to the client whose session received them. */
const FORWARDED = new Set(['notifications/tools/list_changed', 'notifications/resources/list_changed', 'notifications/prompts/list_changed', 'notifications/resources/updated']);

/** The answer to a request while the owner registry cannot be read (whether the owner may serve is not known). */
export const REGISTRY_UNREADABLE = 'the owner registry could not be read; try again later';

export type AddResult = { ok: true; view: ServerView } | { ok: false; status: 409; error: string };

export class Bridge extends DurableObject<BridgeEnv> {
  private readonly store: ServerStore;
  private readonly links: BridgeLinks;
  private readonly dispatcher: Dispatcher;
  private readonly limiter = new Limiter();
  private readonly errors = new ErrorAnswers();
  /** Upstream sessions: one server's clients (strangers' fresh keys) cannot close another server's. */
  private readonly cache = new McpSessionCache({ maxSessions: MAX_SESSIONS, groupOf: serverOfSessionKey, maxPerGroup: MAX_SESSIONS_PER_SERVER });
  private readonly keys = new ConversationKeyCache(256);
  private readonly seen = new LruMap<string, true>(SEEN_IDS);
  /** Request ids handled, persisted: a replay inside the freshness window is ignored, evicted or not. */
  private readonly handled: SeenIds;
  /** Request ids being handled by this instance. */
  private readonly handling = new Set<string>();
  /** Where the last answer to a client of a server went: upstream notifications follow it. */
  private readonly replies = new LruMap<string, Reply>(256);
  /** Notification events to clients (progress and forwarded upstream notifications) per minute, in all and per server; each must fit one event. */
  private readonly notifyBudget = new NotificationBudget(NOTIFICATIONS_PER_MINUTE, SERVER_NOTIFICATIONS_PER_MINUTE, (line) => console.warn(`bridge: ${line}`));
  /** Upstream notifications forwarded to clients, coalesced per (server, client, list or uri). */
  private readonly forwards = new Coalescer<string, { id: string; client: string; n: McpNotification }>(NOTIFY_WINDOW_MS, (_, f) => this.forward(f));
  /** Announcement refreshes asked for by upstream list_changed, coalesced per server. */
  private readonly listChanges = new Coalescer<string, true>(NOTIFY_WINDOW_MS, (id) => {
    if (this.store.server(id)) this.refreshSoon(id).catch((e: unknown) => console.error(`bridge: refresh of ${id} not scheduled`, errorMessage(e)));
  });
  private backendMap: Map<string, UpstreamServer> | undefined;
  /** The refresh of each server running now (see `refresh`). */
  private readonly refreshing = new Map<string, Promise<void>>();
  /** The payment verifier (workers/bridge/payments*.ts); none configured: priced calls are refused. */
  gate: PaymentGate = noPaymentGate;
  private readonly payments: BridgePayments;
  private readonly meter: BridgeMeter;
  /** The owner's plan, as last seen by onEvent. */
  private plan = DEFAULT_PLAN;
  /** What strangers send that is dropped (see the header), logged once a minute per kind. */
  private readonly drops = new DropSummary((line) => console.warn(`bridge: provider ${this.store.providerRecord()?.pubkey ?? ''}: ${line}`));

  constructor(ctx: DurableObjectState, env: BridgeEnv) {
    super(ctx, env);
    this.store = new ServerStore(ctx.storage.sql, env);
    this.meter = new BridgeMeter(ctx.storage.sql, (now) => this.payments.openInvoices(this.store.providerRecord()?.owner ?? '', now));
    this.handled = new SeenIds(ctx.storage.sql);
    this.payments = new BridgePayments({
      storage: ctx.storage,
      env,
      identity: () => {
        const p = this.store.providerRecord();
        return p && { provider: p.pubkey, owner: p.owner };
      },
      relays: () => {
        const p = this.store.providerRecord();
        return p ? bridgeRelays(this.env, p) : [];
      },
      sign: (t) => this.store.sign(t),
      verifier: relayVerifier,
    });
    this.gate = this.payments;
    this.links = new BridgeLinks({
      env,
      provider: () => this.store.providerRecord(),
      sign: (t) => this.store.sign(t),
      onEvent: (e, url) => this.onEvent(e, url),
      extraFilters: () => this.payments.receiptFilters(),
    });
    this.dispatcher = new Dispatcher({
      backends: () => this.backends(),
      limiter: { admit: (client, servers, method) => this.admit(client, servers, method) },
      gate: () => this.gate,
      log: (line) => console.log(`bridge: ${line}`),
      drops: this.drops,
      errorAnswer: (client) => this.errorAnswer(client),
      notifications: this.notifyBudget,
    });
  }

  /**
   * The owner's daily quota first, for as many calls as the request is charged (one per server it
   * goes to; clients other than the owner's key: their share, metering.ts), then the limiter. An
   * admitted request holds its calls against the quota until it goes upstream, when it is metered,
   * its duration when it ends; a priced request never paid is not metered, and its hold ends with
   * it; before it waits for its payment the quota of waiting calls is asked (metering.ts `hold`,
   * `awaitPayment`). A refusal is answered as ErrorAnswers allows (once per client until the retry
   * time it gave, or QUOTA_TOLD_MS if sooner).
   */
  private admit(client: string, servers: readonly string[], method: string): ReturnType<RequestAdmission['admit']> {
    const other = client !== this.store.providerRecord()?.owner;
    const limit = () => planLimits(this.env, this.plan).bridge_calls_per_day;
    const quota = method === 'ping' ? undefined : this.meter.refusal(limit(), this.limiter.now(), other, servers.length);
    if (quota) return this.errors.refusal(client, quota.error, Math.min(quota.retryMs, QUOTA_TOLD_MS));
    const admitted = this.limiter.admit(client, servers, method);
    if (!admitted.ok) return this.errors.refusal(client, admitted.error, admitted.retryMs);
    if (method === 'ping') return admitted;
    const call = this.meter.hold(servers, method, other, this.limiter.now());
    let released = false;
    return {
      ok: true,
      upstream: () => call.upstream(this.limiter.now()),
      awaitingPayment: (until, invoiced) => call.awaitPayment(limit(), until, this.limiter.now(), invoiced)?.error,
      release: () => {
        if (released) return;
        released = true;
        admitted.release();
        call.end(this.limiter.now());
      },
    };
  }

  /**
   * Whether an error found before admission (a bad request, an unknown method or server) is answered
   * to `client`: it counts as one of the client's requests of the minute (and is refused as one past
   * them), and within ErrorAnswers' cap for all clients.
   */
  private errorAnswer(client: string): { ok: true } | { ok: false; error?: RpcError } {
    const admitted = this.limiter.admit(client, []);
    if (!admitted.ok) return this.errors.refusal(client, admitted.error, admitted.retryMs);
    admitted.release();
    return this.errors.allow() ? { ok: true } : { ok: false };
  }

  /** The bridge's metered calls between the UTC days `from` and `to`. */
  usage(from: string, to: string): BridgeCallRow[] {
    return this.meter.rows(from, to);
  }

  // ---- management (RPC from the API) ----

  /** The owner's provider key, created (and sealed) on first use; concurrent first uses get the same one. */
  async ensureProvider(owner: string, origin: string): Promise<string> {
    const p = this.store.providerRecord();
    if (p) return p.pubkey;
    return (await this.store.createProvider(owner, origin, generateSecretKey())).pubkey;
  }

  /**
   * Test deployments only (EDGESTR_ENV=test): adopt a known provider key before the first
   * registration, so that captured requests signed for that key can be replayed.
   */
  async importTestProviderKey(owner: string, origin: string, skHex: string): Promise<Result<string, string>> {
    if (localMode(this.env) !== 'test') return err('provider keys can be imported only when EDGESTR_ENV=test');
    const existing = this.store.providerRecord();
    if (!/^[0-9a-f]{64}$/.test(skHex)) return err('not a 64-hex secret key');
    const sk = hexToBytes(skHex);
    if (existing) return existing.pubkey === getPublicKey(sk) ? ok(existing.pubkey) : err('this bridge already has another provider key');
    const stored = await this.store.createProvider(owner, origin, sk);
    return stored.pubkey === getPublicKey(sk) ? ok(stored.pubkey) : err('this bridge already has another provider key');
  }

  /** Registers a server; 409 when its id is taken or the owner has `maxServers` already (its plan's `bridge_servers`). */
  async addServer(input: CreateServer, maxServers = DEFAULT_BRIDGE_SERVERS): Promise<AddResult> {
    const p = this.store.providerRecord();
    if (!p) throw new Error('no provider key: ensureProvider first');
    const s = storedServer(input, Math.floor(Date.now() / 1000));
    const added = await this.store.insert(s, input.headers ?? {}, maxServers);
    if (added === 'duplicate') return { ok: false, status: 409, error: `a server with id ${input.id} is already registered` };
    if (added === 'full') return { ok: false, status: 409, error: `the owner’s plan allows at most ${maxServers} bridge server${maxServers === 1 ? '' : 's'}; delete one first` };
    this.backendMap = undefined;
    await this.refreshSoon(s.id);
    return { ok: true, view: this.view(s.id)! };
  }

  list(): ServerView[] {
    return this.store.servers().map((s) => this.viewOf(s));
  }

  view(id: string): ServerView | undefined {
    const s = this.store.server(id);
    return s && this.viewOf(s);
  }

  async updateServer(id: string, patch: UpdateServer): Promise<ServerView | undefined> {
    const s = this.store.server(id);
    if (!s) return undefined;
    const next = patchedServer(s, patch, Math.floor(Date.now() / 1000));
    await this.store.update(next, patch.headers);
    this.backendMap = undefined;
    if (next.url !== s.url || patch.headers !== undefined) this.dispatcher.abortServer(id, 'server changed');
    await this.refreshSoon(id);
    return this.view(id);
  }

  /**
   * Removes a server: requests aborted, upstream sessions closed, the NIP-09 deletion of its
   * announcements sent (`deleteAnnouncements`: kept and sent again until the public shard takes it).
   */
  async removeServer(id: string): Promise<boolean> {
    const p = this.store.providerRecord();
    if (!p || !this.store.server(id)) return false;
    this.store.delete(id);
    this.backendMap = undefined;
    this.limiter.forgetServer(id);
    this.dispatcher.abortServer(id, 'server removed');
    await this.links.ensureConnected();
    await this.deleteAnnouncements(p, id, SERVER_REMOVED);
    await this.cache.closeGroup(id); // only this server's: calls in flight on the others go on
    return true;
  }

  /**
   * Deletes (NIP-09) server `id`'s announcements with `reason`, on the public shard and the owner's
   * shard at once. One the public shard (what /mcp and DVMCP discovery read) did not take is kept,
   * signed, by server id (the server may be gone), logged, and sent again at each watchdog
   * (`resendDeletions`); sent again as it is, it deletes only what was announced before it, not a
   * server announced again under that id since.
   */
  private async deleteAnnouncements(p: ProviderRecord, id: string, reason: string): Promise<void> {
    const e = await this.store.sign(announcementDeletion(p.pubkey, id, reason));
    if (await this.links.publishDeletion(e, true)) {
      this.store.deletionLanded(id, e);
      return;
    }
    for (const d of this.store.keepDeletion(id, e, Date.now())) this.gaveUp(p, d, `more than ${MAX_PENDING_DELETIONS} deletions were waiting`);
    console.warn(`bridge: provider ${p.pubkey}: the deletion of the announcements of ${id} (${reason}) did not land on the public shard; sent again at each watchdog for ${PENDING_DELETION_MS / 86_400_000} days`);
  }

  /**
   * Sends the deletions kept (`deleteAnnouncements`) again, to the public shard only (the owner's
   * shard had them with the first send), all at once (one 5 s window); those that land are no longer
   * kept. One kept over PENDING_DELETION_MS is given up, logged.
   */
  private async resendDeletions(p: ProviderRecord): Promise<void> {
    for (const d of this.store.expireDeletions(Date.now() - PENDING_DELETION_MS)) {
      this.gaveUp(p, d, `the public shard did not take it in ${PENDING_DELETION_MS / 86_400_000} days; check its clock and its logs`);
    }
    const due = this.store.pendingDeletions();
    const landed = await Promise.all(due.map((d) => this.links.publishDeletion(d.event, false)));
    due.forEach((d, i) => {
      if (landed[i]) this.store.deletionLanded(d.id, d.event);
    });
  }

  private gaveUp(p: ProviderRecord, d: PendingDeletion, why: string): void {
    console.warn(`bridge: provider ${p.pubkey}: gave up the deletion of the announcements of ${d.id} (${d.event.content}): ${why}`);
  }

  // ---- lifecycle ----

  /**
   * The watchdog (`watch`). Whatever a pass throws (a shard RPC while reinstating: the shard reset;
   * a refresh) is logged and the next pass booked at most WATCHDOG_MS away: the runtime gives up an
   * alarm after a few failed retries, and with it the bridge's withdrawal, reinstatement and resends.
   */
  override async alarm(): Promise<void> {
    const p = this.store.providerRecord();
    if (!p) return;
    try {
      await this.watch(p);
    } catch (e) {
      console.error(`bridge: provider ${p.pubkey}: watchdog pass failed (${errorMessage(e)}); next pass in ${WATCHDOG_MS / 1000} s`);
      const soonest = Date.now() + WATCHDOG_MS;
      const booked = await this.ctx.storage.getAlarm();
      if (booked === null || booked > soonest) await this.ctx.storage.setAlarm(soonest);
    }
  }

  private async watch(p: ProviderRecord): Promise<void> {
    this.drops.flush();
    await this.resealSecrets(p);
    const account = await this.account(p);
    if (!account.ok) {
      // Nothing changes on an unreadable registry: the watchdog asks again.
      console.error(`bridge: the owner registry could not be read (${account.error}); asked again in ${WATCHDOG_MS / 1000} s`);
      await this.ctx.storage.setAlarm(Date.now() + WATCHDOG_MS);
      return;
    }
    if (account.value === undefined) return this.withdraw(p);
    const suspended = account.value.suspended;
    if (suspended) await this.pause();
    else if (this.store.withdrawn()) await this.reinstate(p);
    this.handled.prune(Math.floor(Date.now() / 1000) - HANDLED_SECONDS, PRUNE_BATCH);
    this.meter.prune(Date.now(), METER_PRUNE_BATCH);
    if (this.idle()) return this.rest(p);
    await this.links.ensureConnected();
    await this.resendDeletions(p);
    // Suspended: no refresh (each dials upstream and may announce); those due wait for the resumption.
    if (!suspended) for (const id of this.store.dueForRefresh(Date.now())) await this.refresh(id);
    // A refresh asked for while this alarm ran (registration, list_changed) must not wait for the watchdog.
    const now = Date.now();
    const next = suspended ? now + WATCHDOG_MS : Math.max(now + 10, Math.min(now + WATCHDOG_MS, this.store.nextRefresh() ?? Infinity));
    await this.ctx.storage.setAlarm(next);
    await this.payments.onAlarm(); // keeps an earlier alarm for the next invoice expiry
  }

  /**
   * The owner is suspended: calls in flight are dropped and the upstream sessions closed; the
   * watchdog (`watch`) then neither refreshes a server (no upstream dial, no announcement published)
   * nor reinstates a withdrawn bridge, but keeps the relay connections (a zap receipt for a call made
   * before still arrives and is recorded) and sends kept deletions again. What is announced stays
   * on the public shard: the first pass after the resumption runs the refreshes that fell due.
   */
  private async pause(): Promise<void> {
    this.haltCalls('its owner is suspended');
    await this.cache.closeAll();
  }

  /**
   * Whether the bridge has nothing to do: no server, no deletion of announcements to send again
   * (`resendDeletions`), no invoice a payment may still come for (its receipt arrives through the
   * relays and is recorded, PAYMENTS.md) and no request being handled.
   */
  private idle(): boolean {
    return this.store.count() === 0 && this.store.pendingDeletions().length === 0 && !this.payments.awaitingPayment() && this.handling.size === 0;
  }

  /**
   * An idle bridge (`idle`) closes its relay connections and upstream sessions and books no alarm:
   * an outbound WebSocket keeps the Durable Object in memory, and a watchdog every 30 s would wake it
   * for good. Registering a server (`addServer`) books the alarm, whose pass connects again. The
   * payments' bookkeeping runs as on any pass (old rows pruned; a wake-up it still needs is booked).
   */
  private async rest(p: ProviderRecord): Promise<void> {
    this.links.close();
    await this.cache.closeAll();
    await this.payments.onAlarm();
    console.log(`bridge: provider ${p.pubkey}: no server and nothing pending: connections closed, no watchdog until a server is registered`);
  }

  /** While EDGESTR_SECRET is rotated: what only the previous secret opens is sealed again (ServerStore.reseal), logged for the operator. */
  private async resealSecrets(p: ProviderRecord): Promise<void> {
    try {
      const pass = await this.store.reseal();
      if (pass) logResealPass(`bridge ${p.pubkey}`, pass);
    } catch (e) {
      console.error(`bridge ${p.pubkey}: sealed values not re-sealed: ${errorMessage(e)}`);
    }
  }

  /** The owner's account by the owner rule (undefined: removed), or why the registry could not be read. */
  private async account(p: ProviderRecord): Promise<Result<OwnerState | undefined, string>> {
    try {
      return ok(await ownerState(this.env, p.owner));
    } catch (e) {
      return err(errorMessage(e));
    }
  }

  /** Drops every call in flight (unanswered; a call waiting for its payment releases its invoice). */
  private haltCalls(reason: string): void {
    for (const s of this.store.servers()) this.dispatcher.abortServer(s.id, reason);
  }

  /**
   * The owner was removed: calls in flight are dropped; its servers' announcements are deleted on the
   * public shard (`withdrawAnnouncements`; they leave the /mcp catalog), those whose deletion did not
   * land again at each check; once, its provider key is no longer recorded as a bridge of the
   * deployment (the owner's shard and the public one, which /mcp lists first); the relay
   * connections and upstream sessions are closed, and the watchdog only asks the registry again
   * every OWNER_RECHECK_MS.
   */
  private async withdraw(p: ProviderRecord): Promise<void> {
    this.haltCalls('its owner was removed');
    // The deletions kept from before (a server removed or made private) go in the same 5 s window.
    const [left] = await Promise.all([this.withdrawAnnouncements(p), this.resendDeletions(p)]);
    if (!this.store.withdrawn() && (await this.revokeKey(p))) {
      this.store.setWithdrawn(true);
      console.warn(`bridge: owner ${p.owner} is no longer allowed: provider ${p.pubkey} withdrawn (its announcements deleted on the public shard, connections closed)`);
    }
    if (left.length > 0) {
      console.warn(`bridge: provider ${p.pubkey}: the deletion of the announcements of ${left.join(', ')} did not land on the public shard; sent again in ${OWNER_RECHECK_MS / 60_000} min`);
    }
    this.links.close();
    await this.cache.closeAll();
    await this.ctx.storage.setAlarm(Date.now() + OWNER_RECHECK_MS);
  }

  /**
   * Forgets the provider key as a bridge of the deployment on the owner's shard and the public one,
   * both asked at once; whether both did. A failure (the shard reset meanwhile) is logged, and the
   * next check (OWNER_RECHECK_MS) asks both again.
   */
  private async revokeKey(p: ProviderRecord): Promise<boolean> {
    const shards = [
      ['the owner’s shard', shardStub(this.env, p.owner)],
      ['the public shard', shardStub(this.env, null)],
    ] as const;
    const settled = await Promise.allSettled(shards.map(([, shard]) => shard.revokeAgent(p.pubkey, p.owner)));
    const failed = settled.flatMap((r, i) => (r.status === 'rejected' ? [`${shards[i]![0]}: ${errorMessage(r.reason)}`] : []));
    if (failed.length > 0) console.error(`bridge: provider ${p.pubkey}: its key could not be revoked as a bridge of the deployment (${failed.join('; ')}); tried again in ${OWNER_RECHECK_MS / 60_000} min`);
    return failed.length === 0;
  }

  /**
   * Deletes (NIP-09) the announcements of every server still marked announced, on the public shard
   * only (the removed owner's shard stores nothing new and, outside open shards, is not served at
   * all: docs/BRIDGE.md), one deletion per server, all sent at once, so the whole waits at most one
   * publish timeout (5 s) however many servers there are. A server is marked unannounced only when
   * the public shard took its deletion (accepted, or `duplicate:`); the ids of the others, still
   * marked, are returned.
   */
  private async withdrawAnnouncements(p: ProviderRecord): Promise<string[]> {
    const pending = this.store.servers().filter((s) => this.store.announced(s.id) !== '');
    const landed = await Promise.all(pending.map(async (s) => this.links.publishDeletion(await this.store.sign(announcementDeletion(p.pubkey, s.id, OWNER_REMOVED_REASON)), false)));
    const left: string[] = [];
    pending.forEach((s, i) => {
      if (landed[i]) this.store.setAnnounced(s.id, '');
      else left.push(s.id);
    });
    return left;
  }

  /**
   * The owner is allowed again after a withdrawal: its provider key recorded again (on the public
   * shard as one of this deployment's bridges only for a vetted owner, deployment-bridges.ts), every server
   * announced anew by this alarm (also one whose deletion never landed: whether a deletion that timed
   * out was stored after all is not known). A shard RPC that throws leaves the bridge withdrawn: the
   * pass fails and the next one, WATCHDOG_MS later (`alarm`), tries again.
   */
  private async reinstate(p: ProviderRecord): Promise<void> {
    await shardStub(this.env, p.owner).provisionAgent(p.pubkey, p.owner, 'bridge');
    await recordPublicBridge(this.env, p.owner, p.pubkey, await vettedOwner(this.env, p.owner));
    for (const s of this.store.servers()) {
      this.store.setAnnounced(s.id, '');
      this.store.scheduleRefresh(s.id, 0);
    }
    this.store.setWithdrawn(false);
    console.warn(`bridge: owner ${p.owner} is allowed again: provider ${p.pubkey} reinstated`);
  }

  /** Development and test only (POST /api/bridge/pay): pays a local invoice of this bridge. */
  payLocalInvoice(invoice: string): ReturnType<BridgePayments['payLocal']> {
    return this.payments.payLocal(invoice);
  }

  private async refreshSoon(id: string): Promise<void> {
    this.store.scheduleRefresh(id, 0);
    await this.ctx.storage.setAlarm(Date.now() + 10);
  }

  /**
   * Lists upstream (health counts); publishes a public server's changed announcements, deletes a
   * private one's. One refresh of a server at a time. When it starts it books a retry RETRY_MS away,
   * what a failure needs, so a restart (a deploy, an eviction) during its awaits (a list waits up to
   * 30 s for upstream, a publish 5 s for the public shard) leaves the retry booked; when it ends
   * needing none, that booking moves to REFRESH_MS, unless a change, a list_changed or a suspected
   * outage booked another meanwhile (`rebookRefresh`: that one is kept, not overwritten).
   */
  private refresh(id: string): Promise<void> {
    const run = (this.refreshing.get(id) ?? Promise.resolve()).then(() => this.refreshOnce(id));
    // Orders the next refresh only, so it settles either way (a failure of `run` goes to its caller).
    const forget = () => {
      if (this.refreshing.get(id) === done) this.refreshing.delete(id);
    };
    const done = run.then(forget, forget);
    this.refreshing.set(id, done);
    return run;
  }

  private async refreshOnce(id: string): Promise<void> {
    const s = this.store.server(id);
    const upstream = this.backends().get(id);
    const p = this.store.providerRecord();
    if (!s || !upstream || !p) return;
    const booked = Date.now() + RETRY_MS;
    this.store.scheduleRefresh(id, booked);
    let retry = true;
    try {
      retry = await this.announce(id, s, upstream, p);
    } finally {
      this.store.rebookRefresh(id, booked, Date.now() + (retry ? RETRY_MS : REFRESH_MS));
    }
  }

  /**
   * A private server's announcements still out are deleted first, whether upstream answers or not
   * (`deleteAnnouncements`: kept and sent again until the public shard takes it); then upstream is
   * listed (health counts, the lists that failed) and a public server's changed announcements are
   * published, all at once (one 5 s window). The set is recorded as published (its hash) only when
   * the public shard took every event; else the refusal goes to the health (`announce_error`) and
   * the refresh is tried again RETRY_MS later, as when a list failed in a way that may pass: whether
   * it needs that retry.
   */
  private async announce(id: string, s: StoredServer, upstream: UpstreamServer, p: ProviderRecord): Promise<boolean> {
    if (!s.public && this.store.announced(id) !== '') {
      await this.deleteAnnouncements(p, id, SERVER_MADE_PRIVATE);
      this.store.setAnnounced(id, '');
    }
    const built = await buildAnnouncements(s, upstream);
    if (!built.ok) {
      console.warn(`bridge: announcements of ${id} not refreshed: ${built.error}`);
      this.store.recordHealth(id, { announce_error: s.public ? `not refreshed: ${built.error}` : null });
      return true;
    }
    const { counts, listErrors, leftOut, retrySoon, templates, hash } = built.value;
    this.store.recordHealth(id, { ...counts, list_errors: listErrors });
    for (const line of [...Object.entries(listErrors).map(([method, why]) => `${method}: ${why}`), ...leftOut]) console.warn(`bridge: announcement of ${id} left out: ${line}`);
    if (!s.public || this.store.announced(id) === hash) {
      this.store.recordHealth(id, { announce_error: null });
      return retrySoon;
    }
    const sent = await Promise.all(templates.map(async (t) => this.links.publishAll(await this.store.sign(t))));
    const refused = sent.find((r) => !r.ok);
    if (refused === undefined) {
      this.store.setAnnounced(id, hash);
      this.store.recordHealth(id, { announce_error: null });
      return retrySoon;
    }
    this.store.recordHealth(id, { announce_error: refused.error });
    console.warn(`bridge: announcements of ${id} not taken by the public shard (${refused.error}); sent again in ${RETRY_MS / 60_000} min`);
    return true;
  }

  private viewOf(s: StoredServer): ServerView {
    return { ...s, provider: this.store.providerRecord()?.pubkey ?? '', health: this.store.health(s.id) };
  }

  private backends(): Map<string, UpstreamServer> {
    if (this.backendMap) return this.backendMap;
    const provider = this.store.providerRecord();
    const deps = {
      cache: this.cache,
      // The owner's dials: EDGESTR_OUTBOUND_ALLOW only if the operators vetted it; never the
      // deployment's own host, the bridge's origin (/mcp there calls this bridge) (owner-outbound.ts).
      policy: () => (provider === undefined ? Promise.resolve(outboundPolicy(this.env, { vetted: false })) : ownerOutbound(this.env, provider.owner, provider.origin)),
      headers: (id: string) => this.store.secretHeaders(id),
      onContact: (id: string, error: string | null) => this.store.recordHealth(id, { ok: error === null, checked_at: Math.floor(Date.now() / 1000), error }),
      onClientOutage: (id: string) => this.suspectOutage(id),
      onNotification: (id: string, client: string, n: McpNotification) => this.onUpstreamNotification(id, client, n),
    };
    this.backendMap = new Map(this.store.servers().map((s) => [s.id, new UpstreamServer(s, deps)]));
    return this.backendMap;
  }

  /**
   * A client's call to server `id` failed as if the server were down (upstream.ts suggestsOutage):
   * the bridge's own check (a refresh: its session lists upstream and sets the health) is booked
   * now, or OUTAGE_CHECK_MS after its last own contact if that is later, so however many calls
   * fail, and whoever sends them, the server is checked at most once a minute; one booked earlier
   * (a refresh is booked once per server) is kept. The watchdog runs it, woken for it if need be.
   */
  private suspectOutage(id: string): void {
    const checkedAt = this.store.health(id).checked_at;
    const at = Math.max(Date.now(), checkedAt === null ? 0 : checkedAt * 1000 + OUTAGE_CHECK_MS);
    this.store.refreshNoLaterThan(id, at);
    wakeNoLaterThan(this.ctx.storage, at).catch((e: unknown) => console.error(`bridge: the check of ${id} not scheduled`, errorMessage(e)));
  }

  /**
   * A list changed upstream: announcements are refreshed soon; the client whose session heard it is
   * told. Both coalesced (NOTIFY_WINDOW_MS): a refresh per server, a notification per (server,
   * client, list) or, for resources/updated, per (server, client, uri); each sent counts against the
   * bridge's NOTIFICATIONS_PER_MINUTE and the server's SERVER_NOTIFICATIONS_PER_MINUTE.
   */
  private onUpstreamNotification(id: string, client: string, n: McpNotification): void {
    if (n.method === 'notifications/resources/list_changed') this.backendMap?.get(id)?.forgetResourceIndex();
    if (n.method.endsWith('/list_changed')) this.listChanges.offer(id, true);
    if (client === BRIDGE_CLIENT || !FORWARDED.has(n.method)) return;
    const uri = n.method === 'notifications/resources/updated' && typeof n.params?.uri === 'string' ? n.params.uri : '';
    this.forwards.offer(`${id}\n${client}\n${n.method}\n${uri}`, { id, client, n }); // dropped while MAX_COALESCED_KEYS windows are open
  }

  /**
   * Sends upstream notification `n` of server `id` to `client`, in the form and on the relay of its
   * last request, when it fits one event and within the budgets (NotificationBudget.admit).
   */
  private forward({ id, client, n }: { id: string; client: string; n: McpNotification }): void {
    const reply = this.replies.peek(`${id}:${client}`);
    if (!reply) return;
    const t = notificationTemplate(client, n.method, n.params, { serverId: id });
    if (!this.notifyBudget.admit(id, t, reply.form)) return;
    reply.send(t).catch((e: unknown) => {
      if (!(e instanceof NotPublished)) console.error(`bridge: ${n.method} to ${client} not delivered`, errorMessage(e));
    });
  }

  // ---- incoming ----

  /** Claims an event id in memory (a copy from the other shard is not checked again). */
  private claim(id: string): boolean {
    if (this.seen.has(id)) return false;
    this.seen.set(id, true);
    return true;
  }

  /**
   * Handles request `id` dated `createdAt` once: while it is fresh, unless it is being handled or was
   * handled (the persistent record, kept HANDLED_SECONDS past its date, so that a copy published
   * again while it is fresh is ignored, even after an eviction). It is recorded when its handling
   * ends: a request that a restart interrupted may be sent again (PAYMENTS.md: a paid call resumes).
   * Each record prunes at most two expired ids (the watchdog prunes the rest), so the record stays
   * about as large as the requests of the last two minutes.
   */
  private async once(id: string, createdAt: number, handle: () => Promise<void>): Promise<void> {
    if (!isFresh(createdAt, Math.floor(Date.now() / 1000)) || this.handling.has(id) || this.handled.has(id)) return;
    this.handling.add(id);
    try {
      await handle();
    } finally {
      this.handling.delete(id);
      this.handled.add(id, createdAt);
      this.handled.prune(Math.floor(Date.now() / 1000) - HANDLED_SECONDS, 2);
    }
  }

  private async onEvent(e: NostrEvent, url: string): Promise<void> {
    const p = this.store.providerRecord();
    if (!p) return;
    // Naming the provider and other keys (or it twice): dropped before any work, only counted (recipients.ts).
    if (!soleRecipient(e, p.pubkey)) return this.drops.drop(DROPS.notAlone);
    // The owner rule, not whether a shard exists (see the header).
    const account = await this.account(p);
    // Suspended or removed (the watchdog then withdraws the bridge): nothing is answered, but a
    // payment cannot be refused: it is recorded (its call was dropped, so the operator is told to refund it).
    if (account.ok && (!account.value || account.value.suspended)) {
      this.haltCalls(account.value ? 'its owner is suspended' : 'its owner was removed');
      if (e.kind !== KIND.ZAP_RECEIPT) return;
    }
    if (!this.claim(e.id)) return;
    // Unreadable: the plan last seen is kept, and requests are refused (dispatch).
    const unreadable = account.ok ? undefined : account.error;
    if (account.ok) this.plan = account.value?.plan ?? DEFAULT_PLAN;
    const verifier = await relayVerifier();
    if (!checkIdAndSignature(e, verifier).ok) {
      this.seen.delete(e.id); // a forged copy must not block the genuine event
      return;
    }
    if (e.kind === KIND.ZAP_RECEIPT) {
      const paid = await this.payments.onReceipt(e);
      if (!paid.ok) this.drops.drop(DROPS.zapReceipt, paid.error);
      return;
    }
    if (e.kind === KIND.GIFT_WRAP) {
      const opened = unwrapDvmcp(e, await this.store.secretKey(), this.keys, verifier);
      if (!opened.ok) return this.drops.drop(DROPS.giftWrap, opened.error);
      const { message, form, createdAt } = opened.value;
      return this.once(message.id, createdAt, () => this.dispatch(message, form, url, p, unreadable).catch(countedAlready));
    }
    return this.once(e.id, e.created_at, () => this.dispatch(e, 'plain', url, p, unreadable).catch(countedAlready));
  }

  /** Handles message `m` (`unreadable`: why the owner registry could not be read; a request is then refused, see the header). */
  private async dispatch(m: Incoming, form: Form, url: string, p: ProviderRecord, unreadable: string | undefined): Promise<void> {
    // A wrapped message must be addressed to this provider alone inside too (the wrap's p alone is not signed by the sender).
    if (form !== 'plain' && !soleRecipient(m, p.pubkey)) return this.drops.drop(DROPS.notAlone);
    const reply = this.replyFor(url, m.pubkey, form, p);
    const parsed = parseMessage(m);
    if (!parsed.ok) {
      // A bad notification is dropped; a bad request gets the error, as errorAnswer allows.
      if (m.kind === KIND.DVMCP_NOTIFICATION) return;
      const allowed = this.errorAnswer(m.pubkey);
      const error = allowed.ok ? parsed.error : allowed.error;
      if (error) await reply.send(errorAnswer({ requestId: m.id, client: m.pubkey }, error, form));
      return;
    }
    const msg = parsed.value;
    if (unreadable !== undefined && msg.type === 'request') {
      this.drops.drop(DROPS.registryUnreadable, unreadable);
      const allowed = this.errorAnswer(m.pubkey);
      const error = allowed.ok ? rpcError(RPC.INTERNAL_ERROR, REGISTRY_UNREADABLE) : allowed.error;
      if (error) await reply.send(errorAnswer({ requestId: m.id, client: m.pubkey }, error, form));
      return;
    }
    // Only for a server it runs: made-up ids from fresh keys would push real clients' entries out.
    if (msg.serverId !== undefined && this.backends().has(msg.serverId)) this.replies.set(`${msg.serverId}:${msg.client}`, reply);
    await this.dispatcher.handle(msg, reply);
  }

  /**
   * The Reply to a request from `url`: its send resolves once the relay took the event; a refusal is
   * counted in the DropSummary and rejects with NotPublished, so that a call is "answered" (its
   * payment spent on it, payments-gate.ts) only when its answer was published.
   */
  private replyFor(url: string, client: string, form: Form, p: ProviderRecord): Reply {
    const send = async (t: EventTemplate): Promise<void> => {
      const e = form === 'plain' ? await this.store.sign(t) : wrapDvmcp(t, await this.store.secretKey(), p.pubkey, client, this.keys, form, answerWrapSigner(await relayVerifier()));
      const sent = await this.links.publish(url, e);
      if (sent.ok) return;
      this.drops.drop(DROPS.refusedByRelay, `${url}: ${sent.error}`);
      throw new NotPublished(`${url} refused it: ${sent.error}`);
    };
    return { send, form };
  }
}

/** Ends the handling of a request whose answer a relay refused (NotPublished: counted already, by replyFor); anything else goes on up (logged). */
function countedAlready(e: unknown): void {
  if (!(e instanceof NotPublished)) throw e;
}
