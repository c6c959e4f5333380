// Open MCP sessions kept across uses (mcp-client.ts), keyed by a string: the DVMCP bridge keys
// by `<serverId>:<clientPubkey>` (one upstream session per Nostr client), the agent by
// `<serverId> <sender>` (a run's; `<serverId>` for its ai.info listing). Bounded (LruMap: beyond `maxSessions` the least recently used session is
// closed; with `groupOf`, per group too, see evictionFor), and a session unused for
// `idleTtlMs` is closed when the cache is next used (no timers:
// a Durable Object holding the cache may hibernate). A key whose server (URL or headers) changed
// gets a new session. Failed opens are not kept.
// Each key also caches its server's tool list (tools/list, every page up to `maxToolPages`) for
// `toolsTtlMs`; a notifications/tools/list_changed from upstream (seen on SSE answers, the legacy
// transport, or the standalone GET stream) marks it stale, so the next `tools` lists again.

import { err, ok, type Result } from '../../src/shared/errors.js';
import { LruMap } from '../../src/shared/lru.js';
import { openMcpSession, type McpOpenOptions, type McpServerEndpoint, type McpSession } from './mcp-client.js';

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
   * another's: a group at `maxPerGroup` closes its own least recently used session, and a full cache
   * closes the least recently used session of the group holding the most. Without it, the least
   * recently used session of all.
   */
  groupOf?: (key: string) => string;
  /** Most open sessions of one group (with groupOf; default: maxSessions). */
  maxPerGroup?: number;
}

export const MCP_CACHE_DEFAULTS = {
  maxSessions: 64,
  idleTtlMs: 10 * 60_000,
  toolsTtlMs: 10 * 60_000,
  maxToolPages: 20,
} as const;

interface Entry {
  fingerprint: string;
  opened: Promise<Result<McpSession, string>>;
  lastUsed: number;
  tools?: { list: McpListedTool[]; expires: number };
  listing?: Promise<Result<McpListedTool[], string>>;
}

const fingerprintOf = (server: McpServerEndpoint): string =>
  JSON.stringify([server.url, Object.entries(server.headers ?? {}).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))]);

const isListedTool = (v: unknown): v is McpListedTool =>
  typeof v === 'object' && v !== null && typeof (v as { name?: unknown }).name === 'string';

async function closeEntry(entry: Entry): Promise<void> {
  const opened = await entry.opened;
  if (opened.ok) await opened.value.close();
}

export class McpSessionCache {
  private readonly entries: LruMap<string, Entry>;
  private readonly idleTtlMs: number;
  private readonly toolsTtlMs: number;
  private readonly maxToolPages: number;
  private readonly groupOf: ((key: string) => string) | undefined;
  private readonly maxPerGroup: number;

  constructor(options: McpSessionCacheOptions = {}) {
    this.entries = new LruMap(options.maxSessions ?? MCP_CACHE_DEFAULTS.maxSessions);
    this.groupOf = options.groupOf;
    this.maxPerGroup = options.maxPerGroup ?? this.entries.max;
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
   * The session of `key`, opened with `options` when there is none (or it closed, went idle, or
   * the server changed). `options.onNotification` is the one given at open time.
   */
  async session(key: string, server: McpServerEndpoint, options: McpOpenOptions = {}): Promise<Result<McpSession, string>> {
    return (await this.entry(key, server, options)).opened;
  }

  /** The tool list of `key`'s server: cached, or listed now (every page, up to maxToolPages). */
  async tools(
    key: string,
    server: McpServerEndpoint,
    options: McpOpenOptions = {},
    request: { signal?: AbortSignal; timeoutMs?: number } = {},
  ): Promise<Result<McpListedTool[], string>> {
    const entry = await this.entry(key, server, options);
    if (entry.tools && entry.tools.expires > Date.now()) return ok(entry.tools.list);
    entry.listing ??= this.list(entry, request).finally(() => {
      entry.listing = undefined;
    });
    return entry.listing;
  }

  /** Marks `key`'s tool list stale (the next `tools` lists again). */
  invalidateTools(key: string): void {
    const entry = this.entries.peek(key);
    if (entry) entry.tools = undefined;
  }

  /** Closes and forgets the session of `key`. */
  async close(key: string): Promise<void> {
    const entry = this.entries.peek(key);
    if (!entry) return;
    this.entries.delete(key);
    await closeEntry(entry);
  }

  /** Closes every session. */
  async closeAll(): Promise<void> {
    const all = [...this.entries].map(([, entry]) => entry);
    this.entries.clear();
    await Promise.all(all.map(closeEntry));
  }

  private async list(entry: Entry, request: { signal?: AbortSignal; timeoutMs?: number }): Promise<Result<McpListedTool[], string>> {
    const opened = await entry.opened;
    if (!opened.ok) return opened;
    const tools: McpListedTool[] = [];
    let cursor: string | undefined;
    for (let page = 0; page < this.maxToolPages; page++) {
      const listed = await opened.value.request('tools/list', cursor === undefined ? {} : { cursor }, request);
      if (!listed.ok) return err(listed.error.message);
      const result = listed.value as { tools?: unknown; nextCursor?: unknown };
      if (!Array.isArray(result.tools)) return err('tools/list answered without a tools array');
      tools.push(...result.tools.filter(isListedTool));
      cursor = typeof result.nextCursor === 'string' ? result.nextCursor : undefined;
      if (cursor === undefined) break;
    }
    entry.tools = { list: tools, expires: Date.now() + this.toolsTtlMs };
    return ok(tools);
  }

  /** The entry of `key` (see `session`); map changes are synchronous, so concurrent callers share one open. */
  private async entry(key: string, server: McpServerEndpoint, options: McpOpenOptions): Promise<Entry> {
    const closing = this.sweepIdle();
    let entry = this.lookup(key, server, options, closing);
    const opened = await entry.opened;
    if (opened.ok && opened.value.closed && this.entries.peek(key) === entry) {
      this.entries.delete(key);
      entry = this.lookup(key, server, options, closing);
    }
    await Promise.all(closing.map(closeEntry));
    return entry;
  }

  /** The live entry of `key` for `server`, or a new one (what it replaces or evicts goes to `closing`). */
  private lookup(key: string, server: McpServerEndpoint, options: McpOpenOptions, closing: Entry[]): Entry {
    const now = Date.now();
    const fingerprint = fingerprintOf(server);
    const existing = this.entries.get(key);
    if (existing && existing.fingerprint === fingerprint) {
      existing.lastUsed = now;
      return existing;
    }
    if (existing) {
      this.entries.delete(key);
      closing.push(existing);
    }
    // Make room by closing a session (LruMap would drop it unclosed): see evictionFor.
    for (let victim = this.evictionFor(key); victim !== undefined; victim = this.evictionFor(key)) {
      closing.push(this.entries.peek(victim)!);
      this.entries.delete(victim);
    }
    const onNotification = options.onNotification;
    const entry: Entry = { fingerprint, lastUsed: now, opened: Promise.resolve(err('not opened yet')) };
    entry.opened = openMcpSession(server, {
      ...options,
      onNotification: (n) => {
        if (n.method === 'notifications/tools/list_changed') entry.tools = undefined;
        onNotification?.(n);
      },
    }).then((opened) => {
      if (!opened.ok && this.entries.peek(key) === entry) this.entries.delete(key); // failures are not kept
      return opened;
    });
    this.entries.set(key, entry);
    return entry;
  }

  /**
   * The key whose session must close before `key` gets one, if any: without groups, the least
   * recently used of all when the cache is full; with groups, the least recently used of `key`'s
   * group when it holds maxPerGroup, else (the cache full) that of the group holding the most.
   */
  private evictionFor(key: string): string | undefined {
    const groupOf = this.groupOf;
    if (!groupOf) return this.entries.size >= this.entries.max ? this.entries[Symbol.iterator]().next().value?.[0] : undefined;
    const members = new Map<string, string[]>(); // group → keys, least recently used first
    for (const [k] of this.entries) {
      const g = groupOf(k);
      const list = members.get(g);
      if (list) list.push(k);
      else members.set(g, [k]);
    }
    const own = members.get(groupOf(key)) ?? [];
    if (own.length >= this.maxPerGroup) return own[0];
    if (this.entries.size < this.entries.max) return undefined;
    let largest: string[] = [];
    for (const list of members.values()) if (list.length > largest.length) largest = list;
    return largest[0];
  }

  /** Forgets the sessions unused for idleTtlMs (oldest first: stops at the first fresh one); returns them for closing. */
  private sweepIdle(): Entry[] {
    const cutoff = Date.now() - this.idleTtlMs;
    const idle: Entry[] = [];
    for (const [key, entry] of this.entries) {
      if (entry.lastUsed > cutoff) break;
      this.entries.delete(key);
      idle.push(entry);
    }
    return idle;
  }
}
