// A registered remote MCP server as a DVMCP backend: one upstream session per Nostr client
// (McpSessionCache key `<server id>:<client pubkey>`; the bridge's own listing for announcements
// uses `<server id>:bridge`), its URL checked by the owner's outbound policy at every dial (inside
// the MCP client; a session opened under another policy is replaced), the reference client's
// injected `name` argument dropped (the tool's inputSchema from the cached tool list), and the
// bridge's own contacts (its session: initialize and the lists, for announcements, health and
// prices) recorded as the server's health. A client's contacts are not: a stranger chooses its
// calls, and a slow tool's timeout or a huge answer cut at our cap says nothing of the server. A
// client's call that fails at the transport level in a way that may mean the server is down
// (`suggestsOutage`: unreachable, HTTP 5xx, the connection lost) makes the bridge check the server
// itself soon (onClientOutage), and that check sets the health.
// Upstream failures become JSON-RPC errors: its own protocol errors pass through; a transport
// failure is INTERNAL_ERROR "upstream <id> unreachable (HTTP <status>)" when upstream answered an
// HTTP error, else "upstream <id> unreachable" (or our own "upstream <id> timed out after <n> ms",
// "upstream <id> sent an answer over <n> bytes"): upstream's text (an error page, a stack trace)
// and the runtime's (a DNS failure's reference) reach only the owner, in the server's health when
// the bridge's own session meets them (onContact: "Streamable HTTP error (HTTP 500): Error POSTing
// to endpoint: <body>"), never a caller over DVMCP or /mcp (docs/SECURITY.md). Tool execution
// errors are results with isError and pass through untouched.
// What nests deeper than MAX_JSON_DEPTH (64, src/shared/json-depth.ts), which many JSON readers
// cannot read, is not passed on: a client's request so answered is INTERNAL_ERROR "upstream <id>'s
// result nests deeper than 64 levels" (an initialize result: dispatcher.ts), a protocol error keeps
// its code and message without its data. Like an answer over our byte cap, such a call says
// nothing of the server's health (a stranger may choose a call that echoes what it sent).
// Every request runs inside the cache's lease (McpSessionCache.use), so evictions skip sessions
// with calls in flight; a new session refused because every one that could make room is busy is
// INTERNAL_ERROR "upstream <id>: too many MCP sessions in use (<n>); try again shortly".

import { err, ok, type Result } from '../../src/shared/errors.js';
import { MAX_JSON_DEPTH, nestsWithin } from '../../src/shared/json-depth.js';
import { LISTS, RPC, rpcError, withoutInjectedName, type InitializeInfo, type ListSpec, type Prices, type ResourceIndex, type RpcError, type ServerProfile } from '../../src/shared/dvmcp.js';
import type { OutboundPolicy } from '../../src/shared/outbound-url.js';
import type { McpFailure, McpNotification, McpServerEndpoint, McpSession } from '../common/mcp-client.js';
import { MAX_TOOL_LIST_JSON_CHARS, type McpSessionCache } from '../common/mcp-session-cache.js';
import type { DvmcpBackend, RequestContext } from '../common/dvmcp-server/backend.js';
import { profileOf, type StoredServer } from './config.js';

/** A request's limit without any progress from upstream, and its limit in total. */
export const UPSTREAM_TIMEOUT_MS = 30_000;
export const UPSTREAM_MAX_TOTAL_MS = 5 * 60_000;
/** Pages of one list read (for an announcement, or the resource index that prices reads); a list with more is listTooLong. */
export const MAX_LIST_PAGES = 20;

/**
 * The error of a list whose items pass MAX_TOOL_LIST_JSON_CHARS (their JSON, over all pages): no
 * later page is read and nothing is kept (as the session cache's tool lists; no announcement can
 * carry such a list, and announcer.ts leaves it out).
 */
export const listTooLarge = (method: string): RpcError => ({
  ...rpcError(RPC.INTERNAL_ERROR, `${method} answered more than ${MAX_TOOL_LIST_JSON_CHARS} characters of items (their JSON, over all pages), the most one listing may hold`),
  data: { too_large: true },
});

/**
 * The error of a list upstream still has pages of after MAX_LIST_PAGES (its nextCursor set): no later
 * page is read and nothing is kept, as listTooLarge (what is left unread may be priced: a read
 * priced by a name past the last page read would be free).
 */
export const listTooLong = (method: string): RpcError => ({
  ...rpcError(RPC.INTERNAL_ERROR, `${method} answered more than ${MAX_LIST_PAGES} pages, the most one listing may hold`),
  data: { too_large: true },
});

/** Whether `e` is listTooLarge's (or listTooLong's). */
export const isListTooLarge = (e: RpcError): boolean => isRecord(e.data) && e.data.too_large === true;

/** How long a resource index (what prices reads, `resourceIndex`) is used before it is listed again. */
export const RESOURCE_INDEX_TTL_MS = 10 * 60_000;

/** The session key of the bridge's own listing (announcements, health). */
export const BRIDGE_CLIENT = 'bridge';

/**
 * Upstream sessions a bridge keeps open, in all and per server (McpSessionCache groups by server
 * id). Sessions with calls in flight are not closed to make room (a new one is refused instead),
 * so a server's share is large enough for many concurrent clients (the bench runs 50 at once)
 * while leaving a quarter for the others.
 */
export const MAX_SESSIONS = 128;
export const MAX_SESSIONS_PER_SERVER = 96;

/** The server id of a session key `<server id>:<client>` (a server id has no colon, SERVER_ID). */
export const serverOfSessionKey = (key: string): string => key.slice(0, key.indexOf(':'));

export interface UpstreamDeps {
  cache: McpSessionCache;
  /** The outbound policy of the owner's dials now (EDGESTR_OUTBOUND_ALLOW only if the operators vetted it). */
  policy(): Promise<OutboundPolicy>;
  headers(serverId: string): Promise<Record<string, string>>;
  /** Every contact of the bridge's own session (BRIDGE_CLIENT) with upstream: ok, or the error text. */
  onContact(serverId: string, error: string | null): void;
  /** A client's call failed in a way that suggests the server is down (`suggestsOutage`): the bridge should check it. */
  onClientOutage(serverId: string): void;
  /** A notification upstream sent on `client`'s session (list_changed, resources/updated…). */
  onNotification(serverId: string, client: string, n: McpNotification): void;
}

const isRecord = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

/** The error of a client's request whose result nests deeper than MAX_JSON_DEPTH. */
const tooDeep = (serverId: string): RpcError => rpcError(RPC.INTERNAL_ERROR, `upstream ${serverId}'s result nests deeper than ${MAX_JSON_DEPTH} levels`);

/** Whether transport failure `message` is one of our own limits cutting a call (mcp-client.ts), not upstream failing. */
const ownLimit = (message: string): boolean => message.startsWith('timed out') || message.startsWith('sent an answer over');

/** The JSON-RPC error a DVMCP client gets for an upstream failure (upstream's text stays with the owner, see the header). */
export function upstreamError(serverId: string, f: McpFailure): RpcError {
  if (f.kind === 'protocol') {
    const error = { code: f.code, message: f.message, data: f.data };
    return f.data === undefined || !nestsWithin(error) ? rpcError(f.code, f.message) : error;
  }
  if (ownLimit(f.message)) return rpcError(RPC.INTERNAL_ERROR, `upstream ${serverId} ${f.message}`);
  return rpcError(RPC.INTERNAL_ERROR, f.status === undefined ? `upstream ${serverId} unreachable` : `upstream ${serverId} unreachable (HTTP ${f.status})`);
}

/**
 * Whether a transport failure (its message and HTTP status) may mean the server is down:
 * unreachable, an HTTP 5xx, the connection lost. Not our own limits (a timeout, an answer over our
 * cap) nor an abort (a client's cancel), which a stranger's choice of call causes, nor an HTTP 4xx
 * (upstream answered the call).
 */
export const suggestsOutage = (message: string, status: number | undefined): boolean => (status === undefined ? !ownLimit(message) && message !== 'aborted' : status >= 500);

const RESOURCE_LISTS = {
  resources: LISTS.find((l) => l.method === 'resources/list')!,
  templates: LISTS.find((l) => l.method === 'resources/templates/list')!,
};

export class UpstreamServer implements DvmcpBackend {
  private index: { value: ResourceIndex; expires: number } | undefined;
  private indexing: Promise<Result<ResourceIndex, RpcError>> | undefined;

  constructor(
    private readonly server: StoredServer,
    private readonly deps: UpstreamDeps,
  ) {}

  get profile(): ServerProfile {
    return profileOf(this.server);
  }

  get prices(): Prices {
    return this.server.prices;
  }

  get unlisted(): boolean {
    return !this.server.public;
  }

  private key(client: string): string {
    return `${this.server.id}:${client}`;
  }

  private async endpoint(): Promise<McpServerEndpoint> {
    const headers = await this.deps.headers(this.server.id);
    return Object.keys(headers).length ? { url: this.server.url, headers } : { url: this.server.url };
  }

  /**
   * Records a contact of `client`'s session as the server's health when it is the bridge's own; a
   * client's failure that suggests an outage (`status`: the HTTP status of upstream's answer) asks
   * the bridge to check (see the header).
   */
  private contact(client: string, error: string | null, status?: number): void {
    if (client === BRIDGE_CLIENT) this.deps.onContact(this.server.id, error);
    else if (error !== null && suggestsOutage(error, status)) this.deps.onClientOutage(this.server.id);
  }

  /**
   * `fn` on `client`'s upstream session, counted as a call in flight (McpSessionCache.use: no
   * eviction closes it meanwhile). A failed open is an upstream contact failure; a refusal (every
   * session that could make room is busy) is the client's error and says nothing of upstream.
   */
  private async withSession<T>(client: string, fn: (session: McpSession) => Promise<Result<T, RpcError>>): Promise<Result<T, RpcError>> {
    const id = this.server.id;
    const used = await this.deps.cache.use(this.key(client), await this.endpoint(), { policy: await this.deps.policy(), onNotification: (n) => this.deps.onNotification(id, client, n) }, fn);
    if (used.ok) return used.value;
    if (used.error.kind === 'busy') return err(rpcError(RPC.INTERNAL_ERROR, `upstream ${id}: ${used.error.message}`));
    const { message, status } = used.error;
    this.contact(client, message, status);
    return err(upstreamError(id, status === undefined ? { kind: 'transport', message } : { kind: 'transport', message, status }));
  }

  async initialize(client: string): Promise<Result<InitializeInfo, RpcError>> {
    return this.withSession(client, async (s) => {
      this.contact(client, null);
      const { protocolVersion, capabilities, serverInfo, instructions } = s.identity;
      return ok({ protocolVersion, capabilities, serverInfo, ...(instructions === undefined ? {} : { instructions }) });
    });
  }

  /** A client's request (never recorded as the server's health; a transport failure may ask for a check: see the header). */
  async request(method: string, params: Record<string, unknown>, ctx: RequestContext): Promise<Result<Record<string, unknown>, RpcError>> {
    const client = ctx.requester.client;
    return this.withSession(client, async (s) => {
      const sent = method === 'tools/call' ? await this.toolCallParams(client, params) : params;
      const r = await s.request(method, sent, { signal: ctx.signal, timeoutMs: UPSTREAM_TIMEOUT_MS, maxTotalMs: UPSTREAM_MAX_TOTAL_MS, onProgress: (p) => ctx.onProgress(p) });
      if (!r.ok && r.error.kind === 'transport') this.contact(client, r.error.message, r.error.status);
      if (!r.ok) return err(upstreamError(this.server.id, r.error));
      if (!isRecord(r.value)) return err(rpcError(RPC.INTERNAL_ERROR, `upstream ${this.server.id} answered ${method} with a result that is not an object`));
      return nestsWithin(r.value) ? ok(r.value) : err(tooDeep(this.server.id));
    });
  }

  /**
   * The resources and templates upstream lists (the bridge's own session, as announced), kept for
   * RESOURCE_INDEX_TTL_MS or until upstream says its resource list changed; concurrent reads share
   * one listing. A list upstream does not have (-32601) is empty.
   */
  resourceIndex(): Promise<Result<ResourceIndex, RpcError>> {
    if (this.index && this.index.expires > Date.now()) return Promise.resolve(ok(this.index.value));
    this.indexing ??= this.listIndex().finally(() => (this.indexing = undefined));
    return this.indexing;
  }

  /** Upstream's resource list changed: the next read lists again. */
  forgetResourceIndex(): void {
    this.index = undefined;
  }

  private async listIndex(): Promise<Result<ResourceIndex, RpcError>> {
    const resources = await this.listOrNone(RESOURCE_LISTS.resources);
    if (!resources.ok) return resources;
    const templates = await this.listOrNone(RESOURCE_LISTS.templates);
    if (!templates.ok) return templates;
    const value: ResourceIndex = {
      resources: resources.value.flatMap((r) => (typeof r.name === 'string' && typeof r.uri === 'string' ? [{ name: r.name, uri: r.uri }] : [])),
      templates: templates.value.flatMap((t) => (typeof t.name === 'string' && typeof t.uriTemplate === 'string' ? [{ name: t.name, uriTemplate: t.uriTemplate }] : [])),
    };
    this.index = { value, expires: Date.now() + RESOURCE_INDEX_TTL_MS };
    return ok(value);
  }

  /** `list`, a list upstream does not have (-32601) being empty. */
  private async listOrNone(spec: ListSpec): Promise<Result<Record<string, unknown>[], RpcError>> {
    const items = await this.list(spec);
    return !items.ok && items.error.code === RPC.METHOD_NOT_FOUND ? ok([]) : items;
  }

  /** tools/call params without the reference client's injected `name` argument (see dvmcp.ts). */
  private async toolCallParams(client: string, params: Record<string, unknown>): Promise<Record<string, unknown>> {
    const args = params.arguments;
    const name = params.name;
    if (!isRecord(args) || typeof name !== 'string' || typeof args.name !== 'string') return params;
    const tools = await this.deps.cache.tools(this.key(client), await this.endpoint(), { policy: await this.deps.policy() }, { timeoutMs: UPSTREAM_TIMEOUT_MS });
    const tool = tools.ok ? tools.value.find((t) => t.name === name) : undefined;
    return { ...params, arguments: withoutInjectedName(args, name, tool?.inputSchema) };
  }

  /** Every item of one list (all pages: listTooLong past MAX_LIST_PAGES, listTooLarge past MAX_TOOL_LIST_JSON_CHARS), through the bridge's own session. */
  async list(spec: ListSpec): Promise<Result<Record<string, unknown>[], RpcError>> {
    return this.withSession(BRIDGE_CLIENT, async (s) => {
      const items: Record<string, unknown>[] = [];
      let chars = 0;
      let cursor: string | undefined;
      for (let page = 0; page < MAX_LIST_PAGES; page++) {
        const r = await s.request(spec.method, cursor === undefined ? {} : { cursor }, { timeoutMs: UPSTREAM_TIMEOUT_MS });
        if (!r.ok) {
          // A JSON-RPC error is an answer: upstream was reached (the list's error goes to the health's list_errors, announcer.ts).
          this.deps.onContact(this.server.id, r.error.kind === 'transport' ? r.error.message : null);
          return err(upstreamError(this.server.id, r.error));
        }
        const value = isRecord(r.value) ? r.value : {};
        const listed = value[spec.key];
        for (const item of Array.isArray(listed) ? listed.filter(isRecord) : []) {
          chars += JSON.stringify(item).length;
          if (chars > MAX_TOOL_LIST_JSON_CHARS) return err(listTooLarge(spec.method));
          items.push(item);
        }
        cursor = typeof value.nextCursor === 'string' ? value.nextCursor : undefined;
        if (cursor === undefined) break;
      }
      this.deps.onContact(this.server.id, null);
      return cursor === undefined ? ok(items) : err(listTooLong(spec.method));
    });
  }

  /** The capabilities upstream declared (through the bridge's own session). */
  async capabilities(): Promise<Result<InitializeInfo, RpcError>> {
    return this.initialize(BRIDGE_CLIENT);
  }
}
