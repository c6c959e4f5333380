// Open MCP sessions kept across uses (mcp-client.ts), keyed by a string: the DVMCP bridge keys
// by `<serverId>:<clientPubkey>` (one upstream session per Nostr client), the agent by
// `<serverId> <sender>` (a run's; `<serverId>` for its ai.info listing). Every request on a
// session runs inside `use` (a lease: the session's calls in flight are counted), so that nothing
// closes a session under a call: the cache is bounded (beyond `maxSessions` the least recently
// used idle session is closed; with `groupOf`, per group too, see evictionFor), a session unused
// for `idleTtlMs` is closed when the cache is next used (no timers: a Durable Object holding the
// cache may hibernate), and both skip sessions with calls in flight; when every session that could
// make room has calls in flight, the new one is refused (`busy`, "too many MCP sessions in use
// (<n>); try again shortly"). A key whose server (URL or headers) or outbound policy (its owner
// vetted or no longer: owner-outbound.ts) changed gets a new session; the old one is closed at
// once, or when its last call ends. Failed opens are not kept. `close` and
// `closeAll` close at once (removal: the calls in flight fail).
// The cache also keeps each server's tool list (tools/list, every page up to `maxToolPages`) for
// `toolsTtlMs`, one list per server endpoint (URL, headers and policy), shared by every key of it:
// one listing at a time per endpoint (the keys asking meanwhile wait for it, each under its own
// signal); a notifications/tools/list_changed from upstream on any of its sessions (seen on SSE
// answers, the legacy transport, or the standalone GET stream), or `invalidateTools` of any of its
// keys, drops it (a listing under way then is not kept), so the next `tools` lists again. Sizes (a
// hostile server could answer 20 pages of 4 MiB): a listing whose tools pass
// MAX_TOOL_LIST_JSON_CHARS (the JSON of each tool, over all pages) fails at once ("tools/list
// answered more than <n> characters of tools …"; no further page is read, nothing is kept), and
// the lists kept hold at most MAX_KEPT_TOOL_LISTS_CHARS in all (the least recently used go, and are
// listed again when next needed).

import { err, ok, type Result } from '../../src/shared/errors.js';
import { LruMap } from '../../src/shared/lru.js';
import type { OutboundPolicy } from '../../src/shared/outbound-url.js';
import { openMcpSession, type McpOpenOptions, type McpServerEndpoint, type McpSession, type McpTransportFailure } from './mcp-client.js';

/** A tool as listed by the server: its name, and every other field as sent. */
export interface McpListedTool {
  name: string;
  [field: string]: unknown;
}

export interface McpSessionCacheOptions {
  /** Most open sessions (default 64). */
  maxSessions?: number;
  /** A session unused this long is closed (default 10 minutes). */
  idleTtlMs?: number;
  /** A tool list is listed again after this long (default 10 minutes). */
  toolsTtlMs?: number;
  /** Most tools/list pages read (default 20). */
  maxToolPages?: number;
  /**
   * The group of a key (the bridge: the server id), so that the sessions of one group cannot close
   * another's: a group at `maxPerGroup` closes its own least recently used idle session, and a full
   * cache closes the least recently used idle session of the group holding the most (see
   * evictionFor). Without it, the least recently used idle session of all.
   */
  groupOf?: (key: string) => string;
  /** Most open sessions of one group (with groupOf; default: maxSessions). */
  maxPerGroup?: number;
  /**
   * A group (with groupOf) that maxPerGroup does not bound and whose sessions only its own keys
   * close (the agent: its owner's): the other groups share what it leaves, and its keys close the
   * others' sessions before their own.
   */
  protectedGroup?: string;
}

/**
 * Why `use` ran nothing: the session did not open (`open`; `status`, the HTTP status upstream
 * answered the open with, when it answered one), or no session could make room for it (`busy`).
 */
export interface McpSessionFailure {
  kind: 'open' | 'busy';
  message: string;
  status?: number;
}

/** The refusal of a new session when the `open` sessions that could make room all have calls in flight. */
const sessionsBusy = (open: number): McpSessionFailure => ({ kind: 'busy', message: `too many MCP sessions in use (${open}); try again shortly` });

export const MCP_CACHE_DEFAULTS = {
  maxSessions: 64,
  idleTtlMs: 10 * 60_000,
  toolsTtlMs: 10 * 60_000,
  maxToolPages: 20,
} as const;

/** Most characters of tools (the JSON of each, over all pages) one listing may hold: past it the listing fails. */
export const MAX_TOOL_LIST_JSON_CHARS = 4 * 1024 * 1024;
/** Most characters of tool lists (as counted by the listing) the cache keeps in all: beyond it the least recently used go. */
export const MAX_KEPT_TOOL_LISTS_CHARS = 8 * 1024 * 1024;

interface Entry {
  key: string;
  fingerprint: string;
  opened: Promise<Result<McpSession, McpTransportFailure>>;
  lastUsed: number;
  /** Calls in flight (leases taken by `use` and `tools`): eviction and idle sweeping skip the entry. */
  inFlight: number;
  /** Replaced (its server changed) while calls were in flight: closed when the last one ends. */
  retired: boolean;
}

/** A server's tool list as kept: `chars`, the JSON of its tools, is its weight in `lists`. */
interface ToolList {
  list: McpListedTool[];
  expires: number;
  chars: number;
}

type Listed = Result<McpListedTool[], string>;

const toolsTooLarge = `tools/list answered more than ${MAX_TOOL_LIST_JSON_CHARS} characters of tools (their JSON, over all pages), the most one listing may hold`;

/** What `p` settles to, or "aborted" as soon as `signal` aborts (`p` goes on). */
function unlessAborted(p: Promise<Listed>, signal: AbortSignal | undefined): Promise<Listed> {
  if (!signal) return p;
  if (signal.aborted) return Promise.resolve(err('aborted'));
  return new Promise((resolve) => {
    const onAbort = (): void => resolve(err('aborted'));
    signal.addEventListener('abort', onAbort, { once: true });
    void p.then((listed) => {
      signal.removeEventListener('abort', onAbort);
      resolve(listed);
    });
  });
}

/** What a session is opened for: the server (URL and headers) under an outbound policy (another policy, e.g. its owner no longer vetted: another session). */
const fingerprintOf = (server: McpServerEndpoint, policy: OutboundPolicy | undefined): string =>
  JSON.stringify([server.url, Object.entries(server.headers ?? {}).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)), policy ?? null]);

const isListedTool = (v: unknown): v is McpListedTool =>
  typeof v === 'object' && v !== null && typeof (v as { name?: unknown }).name === 'string';

async function closeEntry(entry: Entry): Promise<void> {
  const opened = await entry.opened;
  if (opened.ok) await opened.value.close();
}

export class McpSessionCache {
  private readonly entries: LruMap<string, Entry>;
  /** Tool lists by server fingerprint, and the listings under way. */
  private readonly lists: LruMap<string, ToolList>;
  private readonly listings = new Map<string, Promise<Listed>>();
  private readonly idleTtlMs: number;
  private readonly toolsTtlMs: number;
  private readonly maxToolPages: number;
  private readonly groupOf: ((key: string) => string) | undefined;
  private readonly maxPerGroup: number;
  private readonly protectedGroup: string | undefined;

  constructor(options: McpSessionCacheOptions = {}) {
    this.entries = new LruMap(options.maxSessions ?? MCP_CACHE_DEFAULTS.maxSessions);
    this.lists = new LruMap(this.entries.max, { of: (l) => l.chars, max: MAX_KEPT_TOOL_LISTS_CHARS });
    this.groupOf = options.groupOf;
    this.maxPerGroup = options.maxPerGroup ?? this.entries.max;
    this.protectedGroup = options.protectedGroup;
    this.idleTtlMs = options.idleTtlMs ?? MCP_CACHE_DEFAULTS.idleTtlMs;
    this.toolsTtlMs = options.toolsTtlMs ?? MCP_CACHE_DEFAULTS.toolsTtlMs;
    this.maxToolPages = options.maxToolPages ?? MCP_CACHE_DEFAULTS.maxToolPages;
  }

  /** Open sessions (and opens under way). */
  get size(): number {
    return this.entries.size;
  }

  /** Whether `key` has a session (or an open under way), without using it. */
  has(key: string): boolean {
    return this.entries.peek(key) !== undefined;
  }

  /**
   * Runs `fn` on the session of `key`, opened with `options` when there is none (or it closed,
   * went idle, or the server changed), counted as a call in flight until `fn` settles: nothing
   * closes the session meanwhile except `close`/`closeAll`. `options.onNotification` is the one
   * given at open time. Every request on a cached session must run inside `use` (or `tools`).
   */
  async use<T>(key: string, server: McpServerEndpoint, options: McpOpenOptions, fn: (session: McpSession) => Promise<T>): Promise<Result<T, McpSessionFailure>> {
    const leased = await this.acquire(key, server, options);
    if (!leased.ok) return leased;
    const entry = leased.value;
    try {
      const opened = await entry.opened;
      if (!opened.ok) return err({ ...opened.error, kind: 'open' });
      return ok(await fn(opened.value));
    } finally {
      await this.release(entry);
    }
  }

  /**
   * The tool list of `key`'s server: kept, or listed now on `key`'s session (every page, up to
   * maxToolPages; within `request.timeoutMs` each), or the listing under way for its server awaited;
   * the listing counted as a call in flight. `request.signal` ends the wait, not a shared listing.
   */
  async tools(
    key: string,
    server: McpServerEndpoint,
    options: McpOpenOptions = {},
    request: { signal?: AbortSignal; timeoutMs?: number } = {},
  ): Promise<Listed> {
    const leased = await this.acquire(key, server, options);
    if (!leased.ok) return err(leased.error.message);
    const entry = leased.value;
    try {
      const kept = this.lists.get(entry.fingerprint);
      if (kept && kept.expires > Date.now()) return ok(kept.list);
      return await unlessAborted(this.listingFor(entry, request.timeoutMs), request.signal);
    } finally {
      await this.release(entry);
    }
  }

  /** Drops the tool list of `key`'s server (the next `tools` of any of its keys lists again). */
  invalidateTools(key: string): void {
    const entry = this.entries.peek(key);
    if (entry) this.dropTools(entry.fingerprint);
  }

  /** Closes and forgets the session of `key`, at once (a call in flight on it fails). */
  async close(key: string): Promise<void> {
    const entry = this.entries.peek(key);
    if (!entry) return;
    this.entries.delete(key);
    await closeEntry(entry);
  }

  /** Closes the sessions of `group` (groupOf), at once (calls in flight on them fail); the other groups' stay. */
  async closeGroup(group: string): Promise<void> {
    const groupOf = this.groupOf;
    if (!groupOf) throw new Error('closeGroup needs a cache with groupOf');
    const members = [...this.entries].filter(([key]) => groupOf(key) === group);
    for (const [key] of members) this.entries.delete(key);
    await Promise.all(members.map(([, entry]) => closeEntry(entry)));
  }

  /** Closes every session, at once (calls in flight on them fail). */
  async closeAll(): Promise<void> {
    const all = [...this.entries].map(([, entry]) => entry);
    this.entries.clear();
    this.lists.clear();
    this.listings.clear();
    await Promise.all(all.map(closeEntry));
  }

  /** Forgets the tool list of the server `fingerprint`, and the listing under way (it will not be kept). */
  private dropTools(fingerprint: string): void {
    this.lists.delete(fingerprint);
    this.listings.delete(fingerprint);
  }

  /**
   * The listing under way for `entry`'s server, or a new one on `entry`'s session (holding a lease
   * on it until it ends), kept when it succeeds unless dropped meanwhile (dropTools).
   */
  private listingFor(entry: Entry, timeoutMs: number | undefined): Promise<Listed> {
    const fingerprint = entry.fingerprint;
    const under = this.listings.get(fingerprint);
    if (under) return under;
    entry.inFlight += 1;
    const listing: Promise<Listed> = this.list(entry, timeoutMs)
      .finally(() => this.release(entry))
      .then((listed) => {
        if (this.listings.get(fingerprint) === listing) {
          this.listings.delete(fingerprint);
          if (listed.ok) this.lists.set(fingerprint, listed.value);
        }
        return listed.ok ? ok(listed.value.list) : listed;
      });
    this.listings.set(fingerprint, listing);
    return listing;
  }

  /** Every page of tools/list (up to maxToolPages), failing as soon as the tools pass MAX_TOOL_LIST_JSON_CHARS. */
  private async list(entry: Entry, timeoutMs: number | undefined): Promise<Result<ToolList, string>> {
    const opened = await entry.opened;
    if (!opened.ok) return err(opened.error.message);
    const tools: McpListedTool[] = [];
    let chars = 0;
    let cursor: string | undefined;
    for (let page = 0; page < this.maxToolPages; page++) {
      const listed = await opened.value.request('tools/list', cursor === undefined ? {} : { cursor }, timeoutMs === undefined ? {} : { timeoutMs });
      if (!listed.ok) return err(listed.error.message);
      const result = listed.value as { tools?: unknown; nextCursor?: unknown };
      if (!Array.isArray(result.tools)) return err('tools/list answered without a tools array');
      for (const tool of result.tools) {
        if (!isListedTool(tool)) continue;
        chars += JSON.stringify(tool).length;
        if (chars > MAX_TOOL_LIST_JSON_CHARS) return err(toolsTooLarge);
        tools.push(tool);
      }
      cursor = typeof result.nextCursor === 'string' ? result.nextCursor : undefined;
      if (cursor === undefined) break;
    }
    return ok({ list: tools, expires: Date.now() + this.toolsTtlMs, chars });
  }

  /**
   * The entry of `key` (see `use`) with a lease taken (release it), or the refusal. Map changes and
   * the lease are synchronous, so concurrent callers share one open and nothing evicts the entry
   * while it opens.
   */
  private async acquire(key: string, server: McpServerEndpoint, options: McpOpenOptions): Promise<Result<Entry, McpSessionFailure>> {
    const closing = this.sweepIdle();
    let found = this.lookup(key, server, options, closing);
    if (found.ok) {
      const entry = found.value;
      const opened = await entry.opened;
      if (opened.ok && opened.value.closed && this.entries.peek(key) === entry) {
        this.entries.delete(key);
        entry.inFlight -= 1;
        found = this.lookup(key, server, options, closing);
      }
    }
    await Promise.all(closing.map(closeEntry));
    return found;
  }

  /** Ends a lease on `entry`: it counts as used now; a retired entry closes with its last call. */
  private async release(entry: Entry): Promise<void> {
    entry.inFlight -= 1;
    entry.lastUsed = Date.now();
    if (this.entries.peek(entry.key) === entry) this.entries.get(entry.key); // the most recently used now
    if (entry.retired && entry.inFlight === 0) await closeEntry(entry);
  }

  /**
   * The live entry of `key` for `server`, or a new one, with a lease taken; what it replaces or
   * evicts goes to `closing` (a replaced entry with calls in flight is retired instead). Refused
   * when room is needed and every session that could make it has calls in flight.
   */
  private lookup(key: string, server: McpServerEndpoint, options: McpOpenOptions, closing: Entry[]): Result<Entry, McpSessionFailure> {
    const now = Date.now();
    const fingerprint = fingerprintOf(server, options.policy);
    const existing = this.entries.get(key);
    if (existing && existing.fingerprint === fingerprint) {
      existing.lastUsed = now;
      existing.inFlight += 1;
      return ok(existing);
    }
    if (existing) {
      this.entries.delete(key);
      if (existing.inFlight > 0) existing.retired = true;
      else closing.push(existing);
    }
    // Make room by closing an idle session (LruMap would drop one unclosed): see evictionFor.
    for (;;) {
      const victim = this.evictionFor(key);
      if (!victim.ok) return victim;
      if (victim.value === undefined) break;
      closing.push(this.entries.peek(victim.value)!);
      this.entries.delete(victim.value);
    }
    const onNotification = options.onNotification;
    const entry: Entry = { key, fingerprint, lastUsed: now, inFlight: 1, retired: false, opened: Promise.resolve(err({ kind: 'transport', message: 'not opened yet' })) };
    entry.opened = openMcpSession(server, {
      ...options,
      onNotification: (n) => {
        if (n.method === 'notifications/tools/list_changed') this.dropTools(fingerprint);
        onNotification?.(n);
      },
    }).then((opened) => {
      if (!opened.ok && this.entries.peek(key) === entry) this.entries.delete(key); // failures are not kept
      return opened;
    });
    this.entries.set(key, entry);
    return ok(entry);
  }

  /**
   * The key whose session must close before `key` gets one (undefined: there is room). Only idle
   * sessions (no call in flight) close. Without groups: when the cache is full, the least recently
   * used idle one of all. With groups: when `key`'s group holds maxPerGroup (the protected group is
   * not bounded), its own least recently used idle one; else when the cache is full, that of the
   * group holding the most, or, all of its sessions busy, of the next largest group, and so on; the
   * protected group's sessions are candidates only for its own keys, after every other group's.
   * Refused (busy) when no candidate is idle.
   */
  private evictionFor(key: string): Result<string | undefined, McpSessionFailure> {
    const idleOf = (keys: string[]): string | undefined => keys.find((k) => this.entries.peek(k)!.inFlight === 0);
    const full = this.entries.size >= this.entries.max;
    const groupOf = this.groupOf;
    if (!groupOf) {
      if (!full) return ok(undefined);
      const victim = idleOf([...this.entries].map(([k]) => k));
      return victim === undefined ? err(sessionsBusy(this.entries.size)) : ok(victim);
    }
    const members = new Map<string, string[]>(); // group → keys, least recently used first
    for (const [k] of this.entries) {
      const g = groupOf(k);
      const list = members.get(g);
      if (list) list.push(k);
      else members.set(g, [k]);
    }
    const group = groupOf(key);
    const own = members.get(group) ?? [];
    if (group !== this.protectedGroup && own.length >= this.maxPerGroup) {
      const victim = idleOf(own);
      return victim === undefined ? err(sessionsBusy(own.length)) : ok(victim);
    }
    if (!full) return ok(undefined);
    const candidates = [...members].filter(([g]) => g !== this.protectedGroup).sort(([, a], [, b]) => b.length - a.length);
    const kept = this.protectedGroup === undefined ? undefined : members.get(this.protectedGroup);
    if (group === this.protectedGroup && kept) candidates.push([group, kept]);
    for (const [, keys] of candidates) {
      const victim = idleOf(keys);
      if (victim !== undefined) return ok(victim);
    }
    return err(sessionsBusy(this.entries.size));
  }

  /**
   * Forgets the sessions unused for idleTtlMs, skipping those with calls in flight (oldest first:
   * stops at the first fresh one); returns them for closing.
   */
  private sweepIdle(): Entry[] {
    const cutoff = Date.now() - this.idleTtlMs;
    const idle: Entry[] = [];
    for (const [key, entry] of this.entries) {
      if (entry.lastUsed > cutoff) break;
      if (entry.inFlight > 0) continue;
      this.entries.delete(key);
      idle.push(entry);
    }
    return idle;
  }
}
