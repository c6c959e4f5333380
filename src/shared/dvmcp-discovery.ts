// DVMCP discovery (spec "Discovery via Server Announcements"): reads the public announcements on a
// relay — 31316 servers, 31317 tools, 31318 resources and resource templates, 31319 prompts — into a
// catalog. A list belongs to the server named by its `s` tag (else the part of its `d` before the
// first "/", dvmcp.ts `listAddress`); 31318 carries resources or resource templates depending on
// its content key. The newest event per address (kind, author, d) wins (equal times: lowest id).
// Prices come from `["cap", name, price, unit]` tags (matched by name, or by uri for resources).
// Bounded: events with content over MAX_CONTENT_CHARS, malformed content and malformed items are
// skipped, so are items and server announcements that nest deeper than MAX_JSON_DEPTH (json-depth.ts:
// an inputSchema of 6,000 `[` is 12 KB that JSON.stringify cannot write, and every reader of the
// catalog writes it: the CLI's `tools --json`, the /mcp gateway's tools/list); at most `maxServers` servers and `maxItems` items per list are kept. Lists without a
// server announcement are dropped (a server is only listed once it announced itself).
// Anyone may announce, so a reader may name `preferred` providers (e.g. the bridges of its own
// deployment): their servers are read by their own queries and listed first, marked `preferred`,
// so that announcements of other keys cannot push them out of the catalog. An edgestr public shard
// names its deployment's bridges in its NIP-11 document (`bridge_providers`, bridgeProvidersOf), and
// a server is shown to users with its provider (providerLabel), so that whoever decides to call or
// pay it sees whose it is.
// announcedEncryption reads one server's 31316 on a client's relays: whether its newest announcement
// says `support_encryption` (the DVMCP client's default, dvmcp-client.ts, gift-wraps unless it says not).

import { z } from 'zod';
import { LISTS, MAX_CONTENT_CHARS, SERVER_ID, type Price, type ServerProfile } from './dvmcp.js';
import { err, ok, type Result } from './errors.js';
import { checkIdAndSignature, type NostrEvent } from './event.js';
import type { Filter } from './filters.js';
import { isHex64 } from './hex.js';
import { nestsWithin } from './json-depth.js';
import { toNpub } from './keys.js';
import { KIND } from './kinds.js';
import type { RelayClient } from './relay-client.js';
import type { SchnorrVerifier } from './verify.js';

const Item = z.looseObject({ name: z.string().min(1).max(256) });
const ToolItem = z.looseObject({
  name: z.string().min(1).max(256),
  description: z.string().max(16_384).optional(),
  inputSchema: z.looseObject({}),
});
const ResourceItem = z.looseObject({ name: z.string().max(256), uri: z.string().min(1).max(2048) });
const TemplateItem = z.looseObject({ name: z.string().max(256), uriTemplate: z.string().min(1).max(2048) });
const ServerContent = z.looseObject({
  protocolVersion: z.string().max(64).optional(),
  capabilities: z.record(z.string(), z.unknown()).optional(),
  serverInfo: z.looseObject({}).optional(),
  instructions: z.string().max(16_384).optional(),
});

export type CatalogItem = z.infer<typeof Item> & { price?: Price };
export type CatalogTool = z.infer<typeof ToolItem> & { price?: Price };
export type CatalogResource = z.infer<typeof ResourceItem> & { price?: Price };
export type CatalogTemplate = z.infer<typeof TemplateItem> & { price?: Price };

/** An announced server: its profile (31316 tags) and what its announcements say. */
export interface CatalogServer extends ServerProfile {
  provider: string;
  /** Announced by one of the reader's preferred providers. */
  preferred?: true;
  protocolVersion?: string;
  capabilities: Record<string, unknown>;
  serverInfo?: Record<string, unknown>;
  instructions?: string;
  tools: CatalogTool[];
  resources: CatalogResource[];
  resourceTemplates: CatalogTemplate[];
  prompts: CatalogItem[];
}

export interface Catalog {
  servers: CatalogServer[];
}

export interface DiscoveryLimits {
  /** Most servers kept (default 100). */
  maxServers: number;
  /** Most items kept per list (default 200). */
  maxItems: number;
  /** Most events asked for per kind group (default 1,000). */
  maxEvents: number;
}

export const DISCOVERY_DEFAULTS: DiscoveryLimits = { maxServers: 100, maxItems: 200, maxEvents: 1000 };

const tag = (e: Pick<NostrEvent, 'tags'>, name: string): string | undefined => e.tags.find((t) => t[0] === name)?.[1];
const dOf = (e: NostrEvent): string => tag(e, 'd') ?? '';

/** Newer wins; equal times: the lower id (the addressable rule of the relay). */
const newer = (a: NostrEvent, b: NostrEvent): boolean => a.created_at > b.created_at || (a.created_at === b.created_at && a.id < b.id);

function newestPerAddress(events: readonly NostrEvent[]): NostrEvent[] {
  const best = new Map<string, NostrEvent>();
  for (const e of events) {
    const key = `${e.kind}:${e.pubkey}:${dOf(e)}`;
    const cur = best.get(key);
    if (!cur || newer(e, cur)) best.set(key, e);
  }
  return [...best.values()];
}

function jsonObject(content: string): Record<string, unknown> | undefined {
  if (content.length > MAX_CONTENT_CHARS) return undefined;
  try {
    const v: unknown = JSON.parse(content);
    return typeof v === 'object' && v !== null && !Array.isArray(v) ? (v as Record<string, unknown>) : undefined;
  } catch {
    return undefined;
  }
}

/** The prices of a list event's `cap` tags, by capability name (or uri). */
function pricesOf(e: NostrEvent): Map<string, Price> {
  const prices = new Map<string, Price>();
  for (const t of e.tags) {
    if (t[0] === 'cap' && t[1] !== undefined && t[2] !== undefined && t[3] !== undefined) prices.set(t[1], { price: t[2], unit: t[3] });
  }
  return prices;
}

/** The valid items of `raw` (an array) within MAX_JSON_DEPTH, priced, at most `max`. */
function itemsOf<T extends { name: string; uri?: unknown }>(raw: unknown, schema: z.ZodType<T>, prices: Map<string, Price>, max: number): Array<T & { price?: Price }> {
  if (!Array.isArray(raw)) return [];
  const out: Array<T & { price?: Price }> = [];
  for (const item of raw) {
    if (out.length >= max) break;
    if (!nestsWithin(item)) continue;
    const parsed = schema.safeParse(item);
    if (!parsed.success) continue;
    const v = parsed.data;
    const price = prices.get(v.name) ?? (typeof v.uri === 'string' ? prices.get(v.uri) : undefined);
    out.push(price ? { ...v, price } : v);
  }
  return out;
}

function serverOf(e: NostrEvent): CatalogServer | undefined {
  const id = dOf(e);
  if (!SERVER_ID.test(id)) return undefined;
  const raw = jsonObject(e.content);
  if (!nestsWithin(raw)) return undefined;
  const content = ServerContent.safeParse(raw);
  if (!content.success) return undefined;
  const c = content.data;
  const server: CatalogServer = {
    provider: e.pubkey,
    id,
    encryption: tag(e, 'support_encryption') === 'true',
    capabilities: c.capabilities ?? {},
    tools: [],
    resources: [],
    resourceTemplates: [],
    prompts: [],
  };
  for (const k of ['name', 'about', 'picture', 'website'] as const) {
    const v = tag(e, k);
    if (v !== undefined) server[k] = v.slice(0, 2048);
  }
  if (c.protocolVersion !== undefined) server.protocolVersion = c.protocolVersion;
  if (c.serverInfo !== undefined) server.serverInfo = c.serverInfo;
  if (c.instructions !== undefined) server.instructions = c.instructions;
  return server;
}

/** The catalog of `events` (announcements of any authors; `preferred` providers first; see the header). */
export function buildCatalog(events: readonly NostrEvent[], limits: Partial<DiscoveryLimits> = {}, preferred: ReadonlySet<string> = new Set()): Catalog {
  const { maxServers, maxItems } = { ...DISCOVERY_DEFAULTS, ...limits };
  const latest = newestPerAddress(events);
  const servers = new Map<string, CatalogServer>();
  const rank = (e: NostrEvent): number => (preferred.has(e.pubkey) ? 0 : 1);
  const announced = latest.filter((e) => e.kind === KIND.DVMCP_SERVER).sort((a, b) => rank(a) - rank(b) || (newer(a, b) ? -1 : 1));
  for (const e of announced) {
    if (servers.size >= maxServers) break;
    const s = serverOf(e);
    if (s) servers.set(`${s.provider}:${s.id}`, preferred.has(s.provider) ? { ...s, preferred: true } : s);
  }
  for (const e of latest) {
    if (e.kind === KIND.DVMCP_SERVER) continue;
    const serverId = tag(e, 's') ?? dOf(e).split('/')[0]!;
    const server = servers.get(`${e.pubkey}:${serverId}`);
    const content = server && jsonObject(e.content);
    if (!content) continue;
    const prices = pricesOf(e);
    for (const list of LISTS) {
      if (list.kind !== e.kind || !(list.key in content)) continue;
      const raw = content[list.key];
      if (list.key === 'tools') server.tools = itemsOf(raw, ToolItem, prices, maxItems);
      else if (list.key === 'resources') server.resources = itemsOf(raw, ResourceItem, prices, maxItems);
      else if (list.key === 'resourceTemplates') server.resourceTemplates = itemsOf(raw, TemplateItem, prices, maxItems);
      else server.prompts = itemsOf(raw, Item, prices, maxItems);
    }
  }
  return { servers: [...servers.values()] };
}

/** Preferred providers one discovery reads at most (one filter's authors). */
export const MAX_PREFERRED = 500;

/**
 * The provider keys an edgestr public shard's NIP-11 document names as its deployment's DVMCP
 * bridges (`bridge_providers`, hex): the valid ones, at most MAX_PREFERRED; none when it names none.
 */
export function bridgeProvidersOf(nip11: unknown): string[] {
  const named = typeof nip11 === 'object' && nip11 !== null ? (nip11 as { bridge_providers?: unknown }).bridge_providers : undefined;
  if (!Array.isArray(named)) return [];
  return named.filter((k): k is string => isHex64(k)).slice(0, MAX_PREFERRED);
}

/**
 * Whose a server is, as a user deciding to call or pay it reads it: the provider's npub shortened
 * (`npub1` and 8 characters … the last 6) and whether it is one of this deployment's bridges.
 */
export function providerLabel(server: Pick<CatalogServer, 'provider' | 'preferred'>): string {
  const npub = toNpub(server.provider);
  return `${npub.slice(0, 13)}…${npub.slice(-6)} (${server.preferred ? "this deployment's bridge" : "not one of this deployment's bridges"})`;
}

export interface DiscoverOptions {
  /** Only these providers (hex); default: every author. */
  providers?: readonly string[];
  /** Providers (hex) read by queries of their own and listed first (see the header); at most MAX_PREFERRED. */
  preferred?: readonly string[];
  /** Until EOSE, in ms (default 5,000). */
  timeoutMs?: number;
  /** Checks each event's id and signature (events that fail are skipped). */
  verifier: SchnorrVerifier;
  limits?: Partial<DiscoveryLimits>;
}

/** Reads the announcements stored on `relay` (until EOSE) into a catalog. */
export function discover(relay: RelayClient, opts: DiscoverOptions): Promise<Result<Catalog, string>> {
  const limits = { ...DISCOVERY_DEFAULTS, ...opts.limits };
  const authors = opts.providers ? { authors: [...opts.providers] } : {};
  const preferred = (opts.preferred ?? []).slice(0, MAX_PREFERRED);
  const lists = [KIND.DVMCP_TOOLS, KIND.DVMCP_RESOURCES, KIND.DVMCP_PROMPTS];
  const filters: Filter[] = [
    { kinds: [KIND.DVMCP_SERVER], limit: limits.maxServers, ...authors },
    { kinds: lists, limit: limits.maxEvents, ...authors },
  ];
  if (preferred.length > 0) {
    filters.push({ kinds: [KIND.DVMCP_SERVER], authors: preferred, limit: limits.maxServers }, { kinds: lists, authors: preferred, limit: limits.maxEvents });
  }
  const maxRead = filters.reduce((n, f) => n + (f.limit ?? 0), 0);
  const timeoutMs = opts.timeoutMs ?? 5_000;
  return new Promise((resolve) => {
    const events: NostrEvent[] = [];
    const end = (r: Result<Catalog, string>): void => {
      clearTimeout(timer);
      sub.close();
      resolve(r);
    };
    const timer = setTimeout(() => end(err(`discovery on ${relay.url} timed out after ${timeoutMs} ms`)), timeoutMs);
    const sub = relay.subscribe(filters, {
      onEvent: (e) => {
        if (events.length < maxRead && checkIdAndSignature(e, opts.verifier).ok) events.push(e);
      },
      onEose: () => end(ok(buildCatalog(events, limits, new Set(preferred)))),
      onClosed: (m) => end(err(`discovery on ${relay.url} refused: ${m}`)),
    });
  });
}

/** A server a client means to call: its provider (hex) and id (`d`; absent: the provider's only server). */
export interface AnnouncedServer {
  provider: string;
  serverId?: string;
}

/** Announcements of one provider read at most per relay (one server: one address; without an id, its servers). */
const MAX_ANNOUNCEMENTS_READ = 20;

/** The valid 31316s of `server` stored on `relay` (until EOSE, CLOSED or `timeoutMs`: what came by then). */
function readAnnouncements(relay: RelayClient, server: AnnouncedServer, verifier: SchnorrVerifier, timeoutMs: number): Promise<NostrEvent[]> {
  const filter: Filter = { kinds: [KIND.DVMCP_SERVER], authors: [server.provider], limit: MAX_ANNOUNCEMENTS_READ, ...(server.serverId === undefined ? {} : { '#d': [server.serverId] }) };
  return new Promise((resolve) => {
    const events: NostrEvent[] = [];
    const end = (): void => {
      clearTimeout(timer);
      sub.close();
      resolve(events);
    };
    const timer = setTimeout(end, timeoutMs);
    const sub = relay.subscribe([filter], {
      onEvent: (e) => {
        const named = e.kind === KIND.DVMCP_SERVER && e.pubkey === server.provider && (server.serverId === undefined || dOf(e) === server.serverId);
        if (named && events.length < MAX_ANNOUNCEMENTS_READ && checkIdAndSignature(e, verifier).ok) events.push(e);
      },
      onEose: end,
      onClosed: end,
    });
  });
}

/**
 * What `server`'s announcements on `relays` say of encryption: true when its newest 31316 (any of
 * the provider's servers' newest, without an id) carries `["support_encryption", "true"]`, false
 * when it says otherwise, undefined when none was found (a private server, or no relay answered
 * within `timeoutMs`).
 */
export async function announcedEncryption(relays: readonly RelayClient[], server: AnnouncedServer, verifier: SchnorrVerifier, timeoutMs: number): Promise<boolean | undefined> {
  const found = (await Promise.all(relays.map((r) => readAnnouncements(r, server, verifier, timeoutMs)))).flat();
  const latest = newestPerAddress(found);
  if (latest.length === 0) return undefined;
  return latest.some((e) => tag(e, 'support_encryption') === 'true');
}
