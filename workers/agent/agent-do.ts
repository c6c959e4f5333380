// Agent: one Durable Object per hosted agent key. It wires the parts beside it: its row (config
// and sealed key, agent-store.ts), its relay connections (relay-links.ts), the runs / seen /
// cursor tables (run-store.ts), what strangers may spend (admission.ts, budget.ts), the checks on
// a decrypted prompt (prompt-check.ts), one run with the runtime (run-driver.ts), the outbox
// that publishes a run's events (outbox.ts) and the agent's DVMCP server (dvmcp-server.ts). Here:
// the management RPCs, the watchdog alarm (reconnect, announcements a relay did not take or that
// waited for a suspended owner, orphaned runs, run reports to the owner's plan that failed, bounded
// retention, sealing the
// MCP server headers of configs stored before they were sealed, and while EDGESTR_SECRET is rotated
// sealing again what the previous secret sealed), incoming
// events (one that does not name the agent alone dropped before anything; each id claimed once,
// signature checked, gift wraps opened; fresh DVMCP requests handed to dvmcp-server.ts), cancels,
// and a prompt's path from admission to its one terminal event. What a stranger can send without
// limit and the agent drops is never logged one line per event: events not naming it alone, events
// past an external relay's bucket (relay-links.ts), answers (a run's events, outbox.ts; DVMCP
// answers) its relay does not take and encrypted requests with its encryption off are counted by
// reason in one DropSummary (workers/common/drop-summary.ts: one line per kind a minute, the
// watchdog writes what is due).
// Conversations are keyed by (sender, s); an agent whose owner left EDGESTR_OWNERS (or the
// registry) or was suspended stops answering (UNAUTHORIZED): its runs and DVMCP asks in progress
// end at once when it learns it (ownerChanged, the watchdog), and each model call of a run checks
// the owner and its plan's models and tokens again (planTokensCheck). The agent of a removed owner is retired: it keeps only its
// public shard's connection (answering UNAUTHORIZED there), announces nothing, deletes its DVMCP
// announcements from the public shard once (withdraw; its profile, relay list and ai.info stay),
// and its watchdog wakes every 10 minutes, until the owner is back (the admin API's
// ownerChanged wakes it at once; EDGESTR_OWNERS at the next wake), when it announces anew
// (reinstate). A suspended owner's agent announces nothing new either (announces): its announcements
// wait, due, and go out on the open connections once the owner is resumed. The owner's account and plan totals come from the Accounts DO (workers/accounts)
// and are kept here (owner-copy.ts): fetched when needed and older than 30 s (a prompt's or a DVMCP
// request's admission waits for it, a run in flight; watchdog.ts: an idle agent's watchdog asks nothing and backs off to 10 minutes),
// not again for 5 s after a failure, after each run (its metering report answers them) and when
// the admin API tells the agent (ownerChanged) — never on a run's path; the agent's runs not
// reported yet count on top of them. Each fetch and each run report tells Accounts what the agent's
// runs in progress hold, and each answer what the owner's other agents' runs in progress hold
// (workers/accounts/in-flight.ts): the plan checks count both (inFlightTokens). When the plan sets
// runs_per_day, each run admitted (a prompt or an ask, once it validates) is also reserved at Accounts
// just before it starts (reserveRun: one RPC, the day's runs counted across the owner's agents,
// workers/accounts/run-reservations.ts); its report ends the reservation. A run report answered with
// an earlier UTC day than the agent's now leaves its row unreported (report). A prompt that
// waited for them is checked again (the agent may be being removed). Removal ends the runs in flight with UNAUTHORIZED (AGENT_REMOVED, not the
// CANCELLED a client would take for its own cancel), sends the usage Accounts does not have yet
// before forgetting it, and is refused while it cannot. See docs/OPERATIONS.md for how far a plan limit may be overshot.

import { DurableObject } from 'cloudflare:workers';
import type { NostrEvent } from '../../src/shared/event.js';
import { checkIdAndSignature } from '../../src/shared/event.js';
import { KIND } from '../../src/shared/kinds.js';
import { ConversationKeyCache, decrypt } from '../../src/shared/nip44.js';
import { unwrap } from '../../src/shared/nip59.js';
import { checkRequestTags, sessionOf } from '../../src/shared/nip-xx.js';
import { soleRecipient } from '../../src/shared/recipients.js';
import { DROPS, DropSummary } from '../common/drop-summary.js';
import { readControlFrame } from '../../src/shared/ao-control.js';
import { relayVerifier } from '../common/verifier.js';
import { agentRelays, relayLabel, type AgentLimits, type StoredAgent } from './config.js';
import { estimateTokens, SessionStore, type SessionKey } from './sessions.js';
import { AgentBudget } from './budget.js';
import { DEMO_AGENT, staticOwners, type OwnerState } from '../common/owners.js';
import { accountsStub } from '../accounts/accounts-do.js';
import { RESERVATION_MARGIN_MS } from '../accounts/run-reservations.js';
import { DEFAULT_PLAN, planLimits, type PlanEnv } from '../accounts/plans.js';
import { ownerUsage, planRefusal, planTokensRefusal, planTokensRoom, type ModelCallAsk, type OwnerUsage } from '../accounts/quota.js';
import { REPORT_BATCH, REPORT_RESEND_MS, UsageMeter, type RunMeter } from './metering.js';
import { RunStore, isFreshPrompt, type RunAddress } from './run-store.js';
import { Outbox } from './outbox.js';
import { admitPrompt, admitSender, ownerRefusal, promptAsk, type AdmissionState, type OwnerStanding, type Refusal } from './admission.js';
import { RelayLinks, type LinksEnv } from './relay-links.js';
import { AgentStore } from './agent-store.js';
import { checkPrompt, isCancel } from './prompt-check.js';
import { logAgent } from './agent-log.js';
import { outboxOutput, runPrompt, RunStopped, type RunDeps } from './run-driver.js';
import { effectiveAgent, type DefaultModelEnv, type EffectiveAgent } from './effective.js';
import { deletionTemplate } from './info.js';
import { AgentDvmcp, isDvmcpRumor } from './dvmcp-server.js';
import { isFresh } from '../common/dvmcp-server/limits.js';
import { dvmcpDeletion, dvmcpWithdrawal } from './dvmcp-profile.js';
import { Withdrawal } from './withdrawal.js';
import { err, errorMessage, ok, type Result } from '../../src/shared/errors.js';
import { logResealPass } from '../common/secrets.js';
import type { EventTemplate } from '../../src/shared/relay-types.js';
import { agentMcpSessions } from './mcp-sessions.js';
import { wakeNoLaterThan } from '../common/alarms.js';
import { WATCHDOG_MS, WatchdogSchedule } from './watchdog.js';
import { OWNER_COPY_IDLE_MAX_AGE_MS, OwnerCopy } from './owner-copy.js';
import { RESEND_WINDOW_MS } from './outbox.js';
import { EarlyCancels } from './early-cancels.js';
import { RUN_CANCELLED } from './runtime.js';

export interface AgentEnv extends DefaultModelEnv, LinksEnv, PlanEnv {}

/** An update of an agent: the fields given replace the stored ones, except `limits`, merged key by key onto the stored limits. */
export type AgentPatch = Partial<Omit<StoredAgent, 'limits'>> & { limits?: Partial<AgentLimits> };

/**
 * Public view of an agent (never the key): its settings as the owner set them (`provider` absent:
 * it follows the deployment's), and `effective_provider`, the provider its runs use now.
 */
export type AgentView = Omit<StoredAgent, 'mcp_servers'> & { npub?: string; mcp_servers?: Array<{ id: string; url: string }>; effective_provider: EffectiveAgent['provider'] };

/** Whether the agent follows the deployment's provider whatever it stores: the development demo agent (an older version stored one). */
const alwaysFollows = (c: StoredAgent): boolean => c.pubkey === DEMO_AGENT;

/** How often the watchdog of a removed owner's agent asks whether the owner is back. */
const REMOVED_OWNER_WATCHDOG_MS = 10 * 60_000;
/** Conversations untouched for 30 days are forgotten. */
const SESSION_RETENTION_MS = 30 * 24 * 3600 * 1000;
/** Rows deleted per table per watchdog alarm (bounded work per alarm). */
const PRUNE_BATCH = 500;
/** How long remove() and the retiring watchdog wait for the terminal events of the runs they abort. */
const REMOVE_WAIT_MS = 10_000;
/** What the client of a run (or a DVMCP ask) the agent's deletion ends is told, with UNAUTHORIZED. */
export const AGENT_REMOVED = 'this agent was removed from this deployment';

interface Incoming {
  /** The protocol event (the rumor when it came gift-wrapped). */
  event: { id: string; pubkey: string; kind: number; tags: string[][]; content: string; created_at: number };
  wrapped: boolean;
  /** The kind of the gift wrap it came in (1059 or 21059), when it came wrapped. */
  wrapKind?: number;
  relay: string;
}

/** Where the events answering an incoming prompt go. */
const addressOf = (m: Incoming): RunAddress => ({ id: m.event.id, client: m.event.pubkey, session: sessionOf(m.event), wrapped: m.wrapped ? 1 : 0, relay: m.relay });

export class Agent extends DurableObject<AgentEnv> {
  private readonly sql: SqlStorage;
  private readonly store: AgentStore;
  private readonly runs: RunStore;
  private readonly sessions: SessionStore;
  private readonly keys = new ConversationKeyCache(256);
  /** MCP sessions and tool lists of the agent's servers, kept across runs: per server and sender (a run's), per server for ai.info; the owner's kept from strangers (mcp-sessions.ts). */
  private readonly mcpSessions = agentMcpSessions(() => this.store.config()?.owner);
  private readonly links: RelayLinks;
  private readonly active = new Map<string, AbortController>();
  /** Cancels that came before their prompt's run row (early-cancels.ts). */
  private readonly earlyCancels = new EarlyCancels();
  /** Prompts' runs admitted and not yet added to the owner's totals (recordRun): counted against runs_per_day. */
  private readonly unmetered = new Set<string>();
  /** Settles when the run has written its terminal event (remove() waits for these). */
  private readonly settled = new Map<string, Promise<void>>();
  private readonly budget: AgentBudget;
  /** The clock (ms) of the limiters, the token day, the retention cut-offs and the announcements' retries (stored timestamps are real time); tests replace it. */
  now: () => number = () => Date.now();
  /** The bytes all conversations may take together (sessions.ts MAX_HISTORY_BYTES); tests lower it. */
  get maxHistoryBytes(): number {
    return this.sessions.maxBytes;
  }
  set maxHistoryBytes(n: number) {
    this.sessions.maxBytes = n;
  }
  /** Refusals answered, and refusals dropped because the sender was already told in that window. */
  get refusals(): { answered: number; dropped: number } {
    return { ...this.budget.stats };
  }
  /** Events an external relay sent beyond its bucket (relay-links.ts), dropped unread. */
  get droppedFromRelays(): number {
    return this.links.dropped;
  }
  /** Non-terminal run events that could not be published after every attempt. */
  get undelivered(): number {
    return this.outbox.undelivered;
  }
  /** The relays the agent holds an open connection to. */
  get connectedRelays(): string[] {
    return this.links.openRelays;
  }
  private readonly outbox: Outbox;
  private readonly dvmcp: AgentDvmcp;
  /** The owner's account and totals (see the header; owner-copy.ts). */
  private readonly ownerCopy = new OwnerCopy({
    fetch: async () => {
      const c = this.store.config();
      return c && accountsStub(this.env).snapshot(c.owner, this.now(), { agent: c.pubkey, tokens: this.budget.inProgressTokens() });
    },
    unreported: (now) => this.meter.unreportedTotals(now),
    now: () => this.now(),
    failed: (error) => console.error('agent: owner account not refreshed', this.store.config()?.owner, error),
  });
  /** The watchdog's next wait (watchdog.ts). */
  private readonly schedule = new WatchdogSchedule();
  /** The snapshot RPCs made to Accounts since the object started. */
  get ownerSnapshots(): number {
    return this.ownerCopy.fetches;
  }
  private readonly meter: UsageMeter;
  /** Whether the retired agent's DVMCP announcements were deleted (withdraw). */
  private readonly withdrawal: Withdrawal;
  /** Set while remove() ends the active runs: no new run starts. */
  private removing = false;
  /** What strangers send that is dropped (see the header), logged once a minute per kind. */
  private readonly drops = new DropSummary((line) => console.warn(`agent ${this.store.config()?.pubkey ?? ''}: ${line}`));

  constructor(ctx: DurableObjectState, env: AgentEnv) {
    super(ctx, env);
    this.sql = ctx.storage.sql;
    this.store = new AgentStore(this.sql, env);
    this.runs = new RunStore(this.sql);
    this.sessions = new SessionStore(this.sql);
    this.budget = new AgentBudget(this.sql);
    this.meter = new UsageMeter(ctx.storage);
    this.withdrawal = new Withdrawal(this.sql);
    this.links = new RelayLinks({
      env,
      keys: this.keys,
      config: () => this.store.config(),
      effective: (c) => this.effective(c),
      secretKey: () => this.store.secretKey(),
      sign: (t, sk) => this.store.sign(t, sk),
      since: () => this.runs.since(),
      onRequest: (e, relay) => this.onEvent(e, relay),
      onControl: (e) => this.onControl(e),
      announces: (c) => this.announces(c),
      now: () => this.now(),
      announceBy: (at) => void this.wakeForAnnouncements(at),
      drops: this.drops,
      mcpSessions: this.mcpSessions,
      mcpHeaders: (s) => this.store.mcpHeaders(s),
    });
    this.outbox = new Outbox({
      runs: this.runs,
      keys: this.keys,
      secretKey: () => this.store.secretKey(),
      sign: (t, sk) => this.store.sign(t, sk),
      client: (url, c) => this.links.client(url, c),
      config: () => this.store.config(),
      drops: this.drops,
    });
    this.dvmcp = new AgentDvmcp({
      config: () => this.store.config(),
      effective: (c) => this.effective(c),
      keys: this.keys,
      secretKey: () => this.store.secretKey(),
      sign: (t, sk) => this.store.sign(t, sk),
      publish: async (url, e, c) => {
        const r = await this.links.client(url, c).publish(e, { timeoutMs: 5000 });
        if (!r.ok) this.drops.drop(DROPS.refusedByRelay, `${relayLabel(url)}: ${r.message}`);
      },
      drops: this.drops,
      admit: (sender, what, reserved, ask, reader) => {
        const c = this.store.config();
        if (!c || this.removing) return { verdict: 'drop' };
        // The ask's arguments are read as the prompt's message would be (4 bytes of UTF-8 per token), with the system prompt and the answer's room.
        const base = promptAsk(this.effective(c), 0);
        const call = ask === undefined ? base : { ...base, input: base.input + estimateTokens({ role: 'user', content: ask }) };
        // The copy was fetched first if stale (ready, as for a prompt); a run is reserved at Accounts once its ask validates (reserve).
        const admitted = admitSender(sender, c, { ...this.ownerChecks(c, sender, this.unmetered.size + reserved, call), activeRuns: this.active.size + reserved, now: this.now(), budget: this.budget, call }, what, reader);
        if (admitted.verdict === 'run') this.busy();
        return admitted;
      },
      ready: () => this.ownerCopy.forAdmission(),
      reserve: (runId, sender) => {
        const c = this.store.config();
        return c ? this.reserveRun(c, runId, sender) : Promise.resolve(ok(undefined));
      },
      turns: (k) => this.sessions.turns(k),
      run: (out, runId, c, prompt, model, conversation, abort) => runPrompt(this.runDeps(c), out, runId, c, prompt, model, conversation, abort),
    });
  }

  // ---- management (RPC from the API) ----

  /** Creates the agent (idempotent for the same key). */
  async create(config: StoredAgent, sealedKey: string): Promise<void> {
    this.store.create(config, sealedKey);
    logAgent({ msg: 'agent.created', agent: config.pubkey, owner: config.owner });
    this.runs.initCursor(Math.floor(Date.now() / 1000) - 60);
    await this.ctx.storage.setAlarm(Date.now() + 10);
  }

  /** The agent as its runs use it (effective.ts); the development demo agent always follows the deployment. */
  private effective(c: StoredAgent): EffectiveAgent {
    return effectiveAgent(c, this.env, alwaysFollows(c));
  }

  view(): AgentView | undefined {
    const c = this.store.config();
    if (!c) return undefined;
    // The stored settings, not the effective ones: an owner editing them must not pin the deployment's provider or model (the demo agent stores one it does not use).
    const { mcp_servers, provider, ...rest } = c;
    const chosen = provider !== undefined && !alwaysFollows(c) ? { provider } : {};
    return { ...rest, ...chosen, effective_provider: this.effective(c).provider, ...(mcp_servers ? { mcp_servers: mcp_servers.map(({ id, url }) => ({ id, url })) } : {}) };
  }

  /**
   * Applies `patch`. When it ends the DVMCP announcement, the announcement's deletion goes out first;
   * the patch is then merged onto the config as it is after that await, so an update applied
   * meanwhile is kept (and if it changed the announcement, that one is deleted too before writing).
   */
  async update(patch: AgentPatch): Promise<AgentView | undefined> {
    let deletedFor: string | undefined;
    for (;;) {
      const c = this.store.config();
      if (!c) return undefined;
      const next: StoredAgent = { ...c, ...patch, limits: { ...c.limits, ...(patch.limits ?? {}) } };
      const deletion = dvmcpDeletion(c.pubkey, c, next);
      const announced = JSON.stringify(c.dvmcp);
      if (deletion && deletedFor !== announced) {
        await this.publishEverywhere(c, deletion);
        deletedFor = announced;
        continue;
      }
      if (c.dvmcp?.enabled && (!next.dvmcp?.enabled || next.dvmcp.server_id !== c.dvmcp.server_id)) this.dvmcp.abortAll(new Error('DVMCP server disabled or renamed'));
      this.store.update(next);
      this.links.close();
      await this.ctx.storage.setAlarm(Date.now() + 10);
      return this.view();
    }
  }

  /**
   * Ends the active runs and DVMCP asks (each with its one UNAUTHORIZED AGENT_REMOVED terminal or
   * answer: RunStopped, waited for up to REMOVE_WAIT_MS), reports to the owner's plan what its runs
   * spent and Accounts does not have yet (sendUsage), publishes deletions of what the agent
   * published, then forgets everything (the key included). False: no agent here. Throws, the agent
   * kept as it is (a second call removes it), when Accounts did not take that usage: the Error's
   * message is for the owner.
   */
  async remove(): Promise<boolean> {
    const c = this.store.config();
    if (!c) return false;
    this.removing = true;
    try {
      const deleted = new RunStopped({ type: 'error', code: 'UNAUTHORIZED', message: AGENT_REMOVED });
      for (const abort of this.active.values()) abort.abort(deleted);
      this.dvmcp.abortAll(deleted);
      await this.runsEnded();
      await this.sendUsage(c);
      await this.publishEverywhere(c, deletionTemplate(c, Math.floor(Date.now() / 1000)));
      const announced = dvmcpDeletion(c.pubkey, c, undefined);
      if (announced) await this.publishEverywhere(c, announced);
      this.links.close();
      await this.mcpSessions.closeAll();
      this.store.forgetKey();
      await this.ctx.storage.deleteAlarm();
      this.forgetEverything();
      logAgent({ msg: 'agent.removed', agent: c.pubkey, owner: c.owner });
      return true;
    } finally {
      this.removing = false;
    }
  }

  /**
   * Before the agent forgets its rows: the spends a restart left (recordOrphanedSpends) are recorded
   * and every run not reported yet is sent to the owner's aggregate (those ended REPORT_RESEND_MS
   * ago or later, as the watchdog sends them); throws the owner's Error at the first failure.
   */
  private async sendUsage(c: StoredAgent): Promise<void> {
    this.recordOrphanedSpends(c);
    while (this.meter.unreported(this.now() - REPORT_RESEND_MS, 1).length > 0) {
      const sent = await this.resendReports(c);
      if (!sent.ok) throw new Error(`the agent’s usage of its last runs could not be recorded yet (${sent.error}); send DELETE again`);
    }
  }

  /** Resolves once the runs and DVMCP asks in progress have written their terminal events, or after REMOVE_WAIT_MS. */
  private async runsEnded(): Promise<void> {
    let timer: ReturnType<typeof setTimeout> | undefined;
    await Promise.race([Promise.allSettled([...this.settled.values(), this.dvmcp.whenIdle()]), new Promise((r) => (timer = setTimeout(r, REMOVE_WAIT_MS)))]);
    clearTimeout(timer);
  }

  /** Signs `t` and publishes it on every relay of the agent. */
  private async publishEverywhere(c: StoredAgent, t: EventTemplate): Promise<void> {
    const e = await this.store.sign(t, await this.store.secretKey());
    await Promise.all(agentRelays(this.env, c).map((url) => this.links.client(url, c).publish(e, { timeoutMs: 5000 })));
  }

  /**
   * Empties every table in one synchronous transaction. (`storage.deleteAll()` drops the tables and
   * resolves later: a message handler running in between would find no `runs` table.)
   */
  private forgetEverything(): void {
    this.ctx.storage.transactionSync(() => {
      const tables = this.sql
        .exec<{ name: string }>("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' AND name NOT LIKE '_cf_%'")
        .toArray();
      for (const { name } of tables) this.sql.exec(`DELETE FROM "${name.replaceAll('"', '""')}"`);
    });
    this.store.reload();
  }

  // ---- lifecycle ----

  /**
   * The watchdog (its schedule and when it fetches the owner's account: watchdog.ts): the owner's account first (an owner no longer allowed: the runs in progress end,
   * stopRunsIfNotAllowed), then the connections, the runs a restart left, the reports to resend and retention.
   * The agent of a removed owner is retired instead of reconnected: once its runs have ended, it
   * keeps only the public shard's connection (where it answers UNAUTHORIZED; a removed owner's
   * shard stores no prompt), withdraws its DVMCP server there (once), and wakes again in
   * REMOVED_OWNER_WATCHDOG_MS. Once the owner is back, a withdrawn agent is reinstated first.
   */
  override async alarm(): Promise<void> {
    if (!this.store.config()) return;
    this.drops.flush();
    await this.sealSecrets();
    const c = this.store.config();
    if (!c) return;
    // Not on an idle pass (watchdog.ts): only with none yet, a run in flight or a retired agent (is its owner back?), or past an hour.
    const needed = !this.ownerCopy.known || this.active.size + this.dvmcp.inProgress + this.unmetered.size > 0 || this.ownerRemoved(c);
    await this.ownerCopy.refreshIfStale(needed ? undefined : OWNER_COPY_IDLE_MAX_AGE_MS);
    this.stopRunsIfNotAllowed(c);
    const removed = this.ownerRemoved(c);
    if (removed) await this.runsEnded();
    else {
      await this.reinstate();
      await this.links.ensureConnected(c);
      await this.links.announceDue(c);
    }
    await this.finishOrphanedRuns(c);
    await this.resendReports(c);
    if (removed) {
      // The public shard (agentRelays: the owner's shard, the public one, then the owner's relays).
      const kept = [agentRelays(this.env, c)[1]!];
      this.links.closeOthers(kept);
      await this.links.ensureConnected(c, kept);
      await this.withdraw(c);
    }
    this.prune();
    // An update() or ownerChanged() while this ran asked to run again in 10 ms: the watchdog must not push that back.
    await wakeNoLaterThan(this.ctx.storage, Date.now() + (removed ? REMOVED_OWNER_WATCHDOG_MS : this.schedule.next(this.idle(c))));
    // Nor an announcement's retry (relay-links.ts), whatever woke this pass.
    const retry = this.links.nextAnnouncement(this.now());
    if (retry !== undefined && this.announces(c)) await this.wakeForAnnouncements(retry);
  }

  /** The watchdog wakes no later than `at` (the agent's clock, `now`), when announcements refused for a passing reason are due again. */
  private async wakeForAnnouncements(at: number): Promise<void> {
    await wakeNoLaterThan(this.ctx.storage, Date.now() + Math.max(0, at - this.now()));
  }

  /** Whether the watchdog has nothing due (watchdog.ts): no run or ask in flight, nothing to send again, every connection open, no drops unlogged. */
  private idle(c: StoredAgent): boolean {
    const open = this.links.openRelays;
    return (
      this.active.size + this.dvmcp.inProgress + this.unmetered.size === 0 &&
      this.runs.running().length === 0 &&
      this.meter.unrecorded().length === 0 &&
      this.meter.unreported(this.now() - REPORT_RESEND_MS, 1).length === 0 &&
      this.runs.unpublished(this.now() - RESEND_WINDOW_MS, 1).length === 0 &&
      !this.drops.pending &&
      agentRelays(this.env, c).every((url) => open.includes(url))
    );
  }

  /** A prompt or ask admitted: the watchdog is due within WATCHDOG_MS again. */
  private busy(): void {
    this.schedule.busy();
    void wakeNoLaterThan(this.ctx.storage, Date.now() + WATCHDOG_MS);
  }

  /**
   * A retired agent's DVMCP server leaves the public shard, where the /mcp catalog and DVMCP
   * discovery read it: the NIP-09 deletion of its announcements, once (recorded when the shard
   * accepts it; sent again by the next watchdog otherwise). Its kind 0, relay list and ai.info stay:
   * still true of the key, and a client prompting it there is told why it is not served
   * (UNAUTHORIZED). Its owner's relays are not dialled for it (a retired agent dials nothing but
   * the public shard); the removed owner's shard stores nothing new.
   */
  private async withdraw(c: StoredAgent): Promise<void> {
    if (this.withdrawal.deletedAt() !== undefined) return;
    const t = dvmcpWithdrawal(c.pubkey, c);
    if (t) {
      const published = await this.links.client(agentRelays(this.env, c)[1]!, c).publish(await this.store.sign(t, await this.store.secretKey()), { timeoutMs: 5000 });
      if (!published.ok) {
        console.warn(`agent ${c.pubkey}: the public shard did not accept the deletion of its DVMCP announcements (${published.message}); sent again at the next watchdog`);
        return;
      }
    }
    this.withdrawal.record(t?.created_at ?? 0);
  }

  /**
   * The owner of a withdrawn agent is back: the record is cleared and every connection is opened
   * again, so that each (the public shard's too) announces anew, in a second after the deletion's
   * (an announcement dated as the deletion would count as deleted, NIP-09).
   */
  private async reinstate(): Promise<void> {
    const deletedAt = this.withdrawal.deletedAt();
    if (deletedAt === undefined) return;
    const wait = (deletedAt + 1) * 1000 - Date.now();
    if (wait > 0) await new Promise((r) => setTimeout(r, wait));
    this.withdrawal.clear();
    this.links.close();
  }

  /**
   * Seals the plain MCP server headers of a config stored before sealing (mcp-headers.ts) and, while
   * EDGESTR_SECRET is rotated, seals again what only the previous secret opens (logged for the
   * operator, docs/OPERATIONS.md "Rotating EDGESTR_SECRET"); a failure is logged, they keep working.
   */
  private async sealSecrets(): Promise<void> {
    try {
      await this.store.sealPlainHeaders();
    } catch (e) {
      console.error('agent: plain MCP server headers not sealed', errorMessage(e));
    }
    const agent = this.store.config()?.pubkey;
    try {
      const pass = await this.store.reseal();
      if (pass) logResealPass(`agent ${agent}`, pass);
    } catch (e) {
      console.error(`agent ${agent}: sealed values not re-sealed: ${errorMessage(e)}`);
    }
  }

  /** Retention: old `seen` ids, finished runs and the terminal events past their resend window, and untouched conversations, a bounded batch each. */
  prune(): void {
    const now = this.now();
    this.runs.prune(now, now - RESEND_WINDOW_MS, PRUNE_BATCH);
    this.sessions.prune(now - SESSION_RETENTION_MS, PRUNE_BATCH);
    this.meter.prune(now, PRUNE_BATCH);
  }

  // ---- the owner's account (workers/accounts) ----

  /**
   * RPC from the admin API: the owner's account changed (plan, suspension, removal, added again).
   * The account is fetched again; when the owner is no longer allowed, the runs and asks in progress
   * end at once (stopRunsIfNotAllowed). The watchdog then runs at once: it retires the agent of a removed owner,
   * and reconnects (and announces) that of an owner added again.
   */
  async ownerChanged(): Promise<void> {
    const c = this.store.config();
    if (!c) return;
    await this.ownerCopy.refresh();
    this.stopRunsIfNotAllowed(c);
    this.schedule.busy();
    await wakeNoLaterThan(this.ctx.storage, Date.now() + 10);
  }

  /** Whether the registry answered that the owner has no account here (and EDGESTR_OWNERS does not list it): the agent is retired (alarm). An account not fetched yet is not a removal. */
  private ownerRemoved(c: StoredAgent): boolean {
    return this.ownerCopy.known && this.ownerState(c) === undefined;
  }

  /**
   * Whether the agent publishes its announcements (relay-links.ts): not while its owner is removed
   * or suspended, so that such an owner gets nothing new published on the public shard (what it
   * announced before stays; a removed owner's DVMCP announcements are withdrawn). Those due stay
   * due: sent on the open connections once the owner is back (the admin API's ownerChanged wakes the
   * watchdog). An account not read yet stops nothing.
   */
  private announces(c: StoredAgent): boolean {
    return !this.ownerRemoved(c) && this.ownerState(c)?.suspended !== true;
  }

  /**
   * Ends the runs and DVMCP asks in progress when the owner is not allowed (removed, or suspended):
   * each with the UNAUTHORIZED a new prompt gets (RunStopped), its spend recorded as any run's. An
   * account not read yet stops nothing.
   */
  private stopRunsIfNotAllowed(c: StoredAgent): void {
    const standing = this.standing(c);
    if (standing.owner === 'allowed' || standing.owner === 'unreadable') return;
    const stop = new RunStopped({ type: 'error', ...ownerRefusal(standing.owner) });
    for (const abort of this.active.values()) abort.abort(stop);
    this.dvmcp.abortAll(stop);
  }

  /** The agent's metered runs, newest first (at most `limit`). */
  usage(limit = 100): Array<RunMeter & { at: number }> {
    return this.meter.recent(limit);
  }

  /**
   * The run's record: kept here, unreported, which counts it on top of the owner's totals at once
   * (owner-copy.ts), then reported to the owner's aggregate, whose answer (every agent's runs)
   * renews the copy. A report that fails is sent again by the watchdog (resendReports).
   */
  private recordRun(c: StoredAgent, r: RunMeter): OwnerUsage | undefined {
    const at = this.now();
    this.unmetered.delete(r.run_id);
    this.meter.record(r, at);
    void this.report(c, { ...r, at });
    const plan = this.ownerState(c)?.plan;
    return this.ownerCopy.known && plan ? ownerUsage(plan, planLimits(this.env, plan), this.ownerCopy.totals(at), at) : undefined;
  }

  /**
   * Adds the run (ended at `r.at`, ms) to the owner's aggregate (counted once there, however often
   * sent), with what the agent's runs still in progress hold (this one settled: no longer among
   * them); its answer marks the row reported and renews the owner's copy, in one step (the run is
   * counted by the one or the other at every moment), unless it is of an earlier UTC day than the
   * agent's now (sent before midnight, landed after: owner-copy.ts ofToday), when the row stays
   * unreported and the watchdog sends it again (Accounts counts it once). Why it failed (logged), if it did.
   */
  private async report(c: StoredAgent, r: RunMeter & { at: number }): Promise<Result<void, string>> {
    try {
      const snapshot = await accountsStub(this.env).record(
        {
          owner: c.owner,
          agent: c.pubkey,
          run_id: r.run_id,
          sender: r.sender,
          model: r.model,
          at: r.at,
          input_tokens: r.input_tokens,
          output_tokens: r.output_tokens,
          tool_calls: r.tool_calls,
          error: r.outcome !== 'response',
        },
        this.now(),
        this.budget.inProgressTokens(),
      );
      if (!this.ownerCopy.ofToday(snapshot)) return ok(undefined);
      this.meter.markReported(r.run_id);
      this.ownerCopy.answered(snapshot);
      return ok(undefined);
    } catch (e) {
      console.error('agent: run not added to the owner’s usage yet (the watchdog sends it again)', r.run_id, errorMessage(e));
      return err(errorMessage(e));
    }
  }

  /**
   * The runs whose report failed (or was cut by a restart), oldest first, at most REPORT_BATCH per
   * call and for REPORT_RESEND_MS; stops at the first failure (Accounts unreachable), whose reason
   * it answers.
   */
  private async resendReports(c: StoredAgent): Promise<Result<void, string>> {
    for (const r of this.meter.unreported(this.now() - REPORT_RESEND_MS, REPORT_BATCH)) {
      const sent = await this.report(c, r);
      if (!sent.ok) return sent;
    }
    return ok(undefined);
  }

  // ---- incoming ----

  private async onEvent(e: NostrEvent, relay: string): Promise<void> {
    const c = this.store.config();
    if (!c) return;
    // Naming the agent and other keys (or it twice): dropped before any work, only counted (recipients.ts).
    if (!soleRecipient(e, c.pubkey)) return this.drops.drop(DROPS.notAlone);
    // Claimed before the first await: the same event from a second relay (or a replay) is dropped here.
    // Claims live in memory; an id is kept in `seen` only once acted on (below, and in onPrompt).
    if (!this.runs.claim(e.id)) return;
    const verifier = await relayVerifier();
    if (!checkIdAndSignature(e, verifier).ok) {
      // A forged copy must not block the genuine event with the same id.
      this.runs.unclaim(e.id);
      return;
    }
    this.runs.advance(Math.min(e.created_at, Math.floor(Date.now() / 1000)));
    if (e.kind === KIND.GIFT_WRAP || e.kind === KIND.EPHEMERAL_GIFT_WRAP) {
      const opened = unwrap(e, await this.store.secretKey(), this.keys, verifier);
      if (!opened.ok) return;
      const r = opened.value.rumor;
      const dvmcp = e.kind === KIND.GIFT_WRAP && isDvmcpRumor(r.kind);
      if (r.kind !== KIND.AI_PROMPT && r.kind !== KIND.AI_CANCEL && !dvmcp) return;
      // The wrap's p is not signed by the sender: a DVMCP rumor must name the agent alone too (a
      // NIP-XX rumor that does not is answered INVALID_SCHEMA, admission.ts).
      if (dvmcp && !soleRecipient(r, c.pubkey)) return this.drops.drop(DROPS.notAlone);
      if (!this.runs.claim(r.id)) return;
      if (dvmcp) return this.keptIfFresh(r.id, r.created_at) ? this.dvmcp.onRumor(r, relay) : undefined;
      return this.dispatch({ event: r, wrapped: true, wrapKind: e.kind, relay });
    }
    if (e.kind === KIND.DVMCP_REQUEST || e.kind === KIND.DVMCP_NOTIFICATION) {
      return this.keptIfFresh(e.id, e.created_at) ? this.dvmcp.onEvent(e, relay) : undefined;
    }
    return this.dispatch({ event: e, wrapped: false, relay });
  }

  /**
   * A DVMCP request or notification (plain, or a wrap's rumor) is served only while fresh (isFresh:
   * created_at within 60 s of now, as by the bridge; one dated further ahead could be replayed until
   * then); its id is kept in `seen` 120 s past its created_at (run-store.ts keepRequest), past the
   * last moment a copy would be fresh, and no longer. Whether it is fresh.
   */
  private keptIfFresh(id: string, createdAt: number): boolean {
    if (!isFresh(createdAt, Math.floor(Date.now() / 1000))) return false;
    this.runs.keepRequest(id, createdAt);
    return true;
  }

  private async dispatch(m: Incoming): Promise<void> {
    const c = this.store.config();
    if (!c) return;
    if (m.event.kind === KIND.AI_CANCEL) return this.onCancel(m, c);
    if (m.event.kind === KIND.AI_PROMPT) return this.onPrompt(m, this.effective(c));
  }

  private async onControl(e: NostrEvent): Promise<void> {
    const c = this.store.config();
    if (!c) return;
    const read = readControlFrame(e, { agentSecretKey: await this.store.secretKey(), owners: [c.owner], verifier: await relayVerifier(), cache: this.keys });
    if (read.status !== 'accepted' || !read.control.channelId) return;
    const channel = read.control.channelId;
    const running = this.active.get(channel);
    running?.abort();
    // Neither a run nor a DVMCP ask yet: kept for the prompt, which may still be on its way (early-cancels.ts).
    if (!this.dvmcp.abortRun(channel) && !running) this.earlyCancels.noteOwner(channel, Date.now());
  }

  /**
   * Only the client that started the run may cancel it; cancels of finished runs are ignored. A
   * cancel of a run not started yet (its prompt awaiting admission, or still to come through
   * another relay) is kept a while for the prompt (early-cancels.ts).
   */
  private async onCancel(m: Incoming, c: StoredAgent): Promise<void> {
    const tags = checkRequestTags(m.event, c.pubkey);
    if (!tags.ok || !tags.value.runId) return;
    const client = m.event.pubkey;
    const run = this.runs.get(tags.value.runId);
    if (!run) return this.earlyCancels.note(tags.value.runId, client, m.event.content, Date.now());
    if (run.state !== 'running' || run.client !== client) return;
    if (!isCancel(decrypt(m.event.content, this.keys.get(await this.store.secretKey(), client)))) return;
    this.active.get(run.id)?.abort();
  }

  /** Whether the owner (cancel_turn) or the prompt's sender cancelled run `runId` before it existed (early-cancels.ts), the sender's cancel decrypted now with its key. */
  private async cancelledEarly(runId: string, sender: string): Promise<boolean> {
    if (this.earlyCancels.takeOwner(runId, Date.now())) return true;
    const content = this.earlyCancels.take(runId, sender, Date.now());
    return content !== undefined && isCancel(decrypt(content, this.keys.get(await this.store.secretKey(), sender)));
  }

  /** The owner's account as the agent knows it: a static owner (EDGESTR_OWNERS) is on the default plan. */
  private ownerState(c: StoredAgent): OwnerState | undefined {
    return staticOwners(this.env).has(c.owner) ? { plan: DEFAULT_PLAN, suspended: false } : this.ownerCopy.state;
  }

  /**
   * Whether the owner may have its agents run, from what the agent knows now: a static owner
   * (EDGESTR_OWNERS, read each time) is allowed on the default plan; another owner as the registry
   * last said (not read yet: unreadable, owner-copy.ts); a suspended one is not.
   */
  private standing(c: StoredAgent): { owner: 'allowed'; state: OwnerState } | { owner: Exclude<OwnerStanding, 'allowed'> } {
    const state = this.ownerState(c);
    if (!state) return { owner: this.ownerCopy.known ? 'removed' : 'unreadable' };
    return state.suspended ? { owner: 'suspended' } : { owner: 'allowed', state };
  }

  /**
   * The owner's part of admission: its standing, then the plan's quotas against the owner's totals
   * plus this agent's `inFlight` runs not yet in them, the token limits with room for `call` (the
   * run's first model call, promptAsk); a `sender` other than the owner gets OTHERS_PLAN_SHARE of
   * each limit (quota.ts). The quotas are computed when admission asks, once the sender passed the
   * block and allow lists (admission.ts).
   */
  private ownerChecks(c: StoredAgent, sender: string, inFlight: number, call: ModelCallAsk): Pick<AdmissionState, 'owner' | 'quota'> {
    const standing = this.standing(c);
    if (standing.owner !== 'allowed') return { owner: standing.owner };
    const plan = standing.state.plan;
    return {
      owner: 'allowed',
      quota: () => planRefusal(planLimits(this.env, plan), this.ownerCopy.totals(this.now()), this.now(), { other: sender !== c.owner, inFlight, inFlightTokens: this.inFlightTokens(), call }),
    };
  }

  /**
   * A prompt: a stale one (created over PROMPT_MAX_AGE_SECONDS ago, or too far ahead) is ignored,
   * silently: its id may already be pruned from `seen` (an agent back from a long idle time
   * resubscribes from an old cursor; anyone may re-broadcast an old prompt). Then the checks that
   * cost O(1) and create nothing (tags, owner, allow/block lists, the per-sender and per-agent
   * caps; the plan's token limits and the day's budget with room for the prompt's first model call,
   * promptAsk), answered at most once per sender per window; then the run row and its AbortController
   * together, and a cancel its sender sent before that ends the run at once with CANCELLED (so a
   * cancel is never lost); then decryption, validation and the run. Any failure
   * after that ends the run with INTERNAL_ERROR at once.
   */
  private async onPrompt(m: Incoming, c: EffectiveAgent): Promise<void> {
    const e = m.event;
    const client = e.pubkey;
    if (this.removing || this.runs.has(e.id) || !isFreshPrompt(e.created_at, Math.floor(Date.now() / 1000))) return;
    await this.ownerCopy.forAdmission();
    // The agent may have begun its removal (or ended it) during that wait: no run starts then.
    if (this.removing || !this.store.config()) return;
    const inFlight = this.unmetered.size + this.dvmcp.inProgress;
    const call = promptAsk(c, e.content.length);
    const admission = admitPrompt(e, c, { ...this.ownerChecks(c, client, inFlight, call), activeRuns: this.active.size + this.dvmcp.inProgress, now: this.now(), budget: this.budget, call });
    // Dropped, answered or run: kept in `seen`, so that a replay after an eviction or a restart (the
    // resubscription reaches back past the cursor) is neither run nor answered again.
    this.runs.keep(e.id);
    if (admission.verdict === 'drop') return;
    if (admission.verdict === 'answer') return this.outbox.answerWithoutRun(addressOf(m), c, { type: 'error', ...admission.refusal }, m.wrapKind);
    const conversation: SessionKey = { sender: client, session: sessionOf(e) };
    this.runs.start(e.id, client, conversation.session, m.wrapped, m.relay);
    this.busy();
    const abort = new AbortController();
    this.active.set(e.id, abort);
    this.unmetered.add(e.id);
    let settle = (): void => undefined;
    this.settled.set(e.id, new Promise<void>((r) => (settle = r)));
    try {
      // Cancelled by its sender before it started: it ends at once, nothing decrypted or run.
      if (await this.cancelledEarly(e.id, client)) await this.outbox.finish(e.id, c, RUN_CANCELLED);
      else await this.validateAndRun(m, c, conversation, abort);
    } catch (err) {
      console.error('agent: run failed', e.id, errorMessage(err));
      await this.outbox.finish(e.id, c, { type: 'error', code: 'INTERNAL_ERROR', message: 'unexpected agent failure; please retry', retry_after: 5 });
    } finally {
      this.active.delete(e.id);
      this.unmetered.delete(e.id);
      this.settled.delete(e.id);
      settle();
    }
  }

  /**
   * Decrypts and validates a claimed prompt, reserves its run at Accounts (reserveRun), then runs it;
   * every problem ends the run with its NIP-XX error (Accounts' refusal: RATE_LIMIT, as the plan's at admission).
   */
  private async validateAndRun(m: Incoming, c: EffectiveAgent, conversation: SessionKey, abort: AbortController): Promise<void> {
    const e = m.event;
    const sk = await this.store.secretKey();
    const checked = checkPrompt(decrypt(e.content, this.keys.get(sk, e.pubkey)), c, () => this.sessions.turns(conversation));
    if (!checked.ok) return this.outbox.finish(e.id, c, { type: 'error', ...checked.error });
    const reserved = await this.reserveRun(c, e.id, e.pubkey);
    if (!reserved.ok) return this.outbox.finish(e.id, c, { type: 'error', ...reserved.error });
    await runPrompt(this.runDeps(c), outboxOutput(this.outbox, e.id, c), e.id, c, checked.value.prompt, checked.value.model, conversation, abort);
  }

  private runDeps(c: StoredAgent): RunDeps {
    return {
      env: this.env,
      sessions: this.sessions,
      budget: this.budget,
      emitter: this.links.emitter,
      now: () => this.now(),
      mcpSessions: this.mcpSessions,
      mcpHeaders: (s) => this.store.mcpHeaders(s),
      dvmcp: this.links.dvmcpTools(c),
      meter: (r) => this.recordRun(c, r),
      checkpoint: (r, startedAt) => this.meter.checkpoint(r, startedAt, Date.now()),
      planTokens: (sender, call) => this.planTokensCheck(c, sender, call),
    };
  }

  /**
   * Reserves run `runId` of `sender`, admitted and validated, at Accounts when the owner's plan sets
   * runs_per_day (workers/accounts/run-reservations.ts): Accounts checks it against the owner's runs
   * of the day plus every agent's runs reserved, which this agent's copy does not see (others' share
   * for a sender other than the owner); its refusal, if it refuses. One RPC per run, at admission
   * (none on a plan without runs_per_day, none before a model call), just before the run starts
   * (runPrompt meters every run it starts, however it ends): the reservation lasts until the run's
   * report, at most max_run_seconds + RESERVATION_MARGIN_MS (a restart during the run: its report
   * comes from the watchdog). Accounts failing: the run is admitted on the agent's copy as before (logged).
   */
  private async reserveRun(c: StoredAgent, runId: string, sender: string): Promise<Result<void, Refusal>> {
    const state = this.ownerState(c);
    const runsPerDay = state ? planLimits(this.env, state.plan).runs_per_day : undefined;
    if (runsPerDay === undefined) return ok(undefined);
    const now = this.now();
    const until = now + c.limits.max_run_seconds * 1000 + RESERVATION_MARGIN_MS;
    try {
      const refusal = await accountsStub(this.env).reserveRun({ owner: c.owner, agent: c.pubkey, run: runId, until, other: sender !== c.owner, runs_per_day: runsPerDay }, now);
      if (refusal) return err(refusal);
    } catch (e) {
      console.error('agent: run not reserved at Accounts (admitted on the agent’s copy of the owner’s totals)', runId, errorMessage(e));
    }
    return ok(undefined);
  }

  /**
   * Before a model call of a run in progress: the owner's standing (an owner no longer allowed gets
   * the UNAUTHORIZED of a new prompt, never "no limit"), then its plan's models (the call's model
   * must be one it names) and token limits, counting what the runs in progress spent (quota.ts,
   * inFlightTokens): the refusal of `call`, else the tokens the limits leave (undefined: the plan sets none).
   */
  private planTokensCheck(c: StoredAgent, sender: string, call: ModelCallAsk): Result<number | undefined, Refusal> {
    const standing = this.standing(c);
    if (standing.owner !== 'allowed') return err(ownerRefusal(standing.owner));
    const ask = { other: sender !== c.owner, inFlightTokens: this.inFlightTokens(), call };
    const plan = planLimits(this.env, standing.state.plan);
    const totals = this.ownerCopy.totals(this.now());
    const refusal = planTokensRefusal(plan, totals, this.now(), ask);
    return refusal ? err(refusal) : ok(planTokensRoom(plan, totals, this.now(), ask));
  }

  /**
   * The model tokens the owner's runs in progress hold that its totals do not have: this agent's
   * (spent so far and held by their calls in flight, budget.ts) and its other agents', as Accounts
   * last answered (owner-copy.ts othersInFlight).
   */
  private inFlightTokens(): number {
    return this.budget.inProgressTokens() + this.ownerCopy.othersInFlight(this.now());
  }

  // ---- after a restart ----

  /**
   * The spends left by runs the agent restarted during (prompts and DVMCP asks alike): added to the
   * day's token budget and recorded as INTERNAL_ERROR runs (metering, the owner's plan), each once:
   * recording deletes the checkpoint, in the same synchronous step as the budget's addition.
   */
  private recordOrphanedSpends(c: StoredAgent): void {
    for (const { started_at, at, ...spend } of this.meter.unrecorded()) {
      if (this.budget.isRunning(spend.run_id)) continue;
      const r: RunMeter = { ...spend, outcome: 'INTERNAL_ERROR', duration_ms: Math.max(0, at - started_at) };
      logAgent({ msg: 'agent.run', agent: c.pubkey, run: r.run_id, provider: r.provider, model: r.model, input_tokens: r.input_tokens, output_tokens: r.output_tokens, tool_calls: r.tool_calls, duration_ms: r.duration_ms, outcome: r.outcome });
      this.budget.spend(r.input_tokens + r.output_tokens, this.now());
      this.recordRun(c, r);
    }
  }

  /**
   * After a restart: what the runs in flight had spent (their last checkpoint, metering.ts) is
   * counted and recorded; runs that were in flight end with one INTERNAL_ERROR; unpublished
   * terminals are re-sent.
   */
  private async finishOrphanedRuns(c: StoredAgent): Promise<void> {
    this.recordOrphanedSpends(c);
    const orphans = this.runs
      .running()
      .filter((r) => !this.active.has(r.id) && !this.outbox.isFinishing(r.id));
    for (const r of orphans) {
      await this.outbox.finish(r.id, c, { type: 'error', code: 'INTERNAL_ERROR', message: 'the agent restarted during this run; please retry', retry_after: 5 });
    }
    await this.outbox.resendTerminals(c, this.now());
  }
}
