// DVMCP (MCP over Nostr, ../shared/specs/dvmcp-spec-2025-03-26.txt): the kinds' tags and the
// "simplified JSON-RPC" content both ways — requests and notifications in (25910, 21316), responses,
// errors and notifications out (26910, 21316), payment-required, announcements (31316–31319) and
// their NIP-09 deletions. Pure: the bridge, the /mcp gateway, the agent and the clients use it.
//
// Content rules (spec "Message Structure"): no `jsonrpc`, no `id`; a request is {method, params?};
// a response is the MCP result object at the root; a protocol error is {"error": {code, message}};
// an execution error is a result with `isError: true`. Tolerated on input (interop captures in
// ../shared/vectors/interop): `jsonrpc`/`id` members (ignored), a missing `method` tag, and
// client notifications (e.g. notifications/initialized) sent as kind 25910 instead of 21316.

import { z } from 'zod';
import { KIND } from './kinds.js';
import type { EventTemplate } from './relay-types.js';
import { err, ok, type Result } from './errors.js';
import { bolt11Msat } from './nip57.js';

/** JSON-RPC error codes used by DVMCP (spec "Error Handling"). */
export const RPC = {
  PARSE_ERROR: -32700,
  INVALID_REQUEST: -32600,
  METHOD_NOT_FOUND: -32601,
  INVALID_PARAMS: -32602,
  INTERNAL_ERROR: -32603,
  RESOURCE_NOT_FOUND: -32002,
  /** edgestr's choice in the server-error range: a request refused by a rate limit (message `rate-limited: …`). */
  RATE_LIMITED: -32029,
} as const;

/** The MCP request methods a DVMCP server answers (spec "Capability Operations", "Ping", "Completions"). */
export const REQUEST_METHODS = [
  'initialize',
  'ping',
  'tools/list',
  'tools/call',
  'resources/list',
  'resources/templates/list',
  'resources/read',
  'prompts/list',
  'prompts/get',
  'completion/complete',
] as const;
export type RequestMethod = (typeof REQUEST_METHODS)[number];
export const isRequestMethod = (m: string): m is RequestMethod => (REQUEST_METHODS as readonly string[]).includes(m);

/** The capability lists a server announces, with the kind, the `d` suffix and the content key of each. */
export const LISTS = [
  { method: 'tools/list', kind: KIND.DVMCP_TOOLS, key: 'tools', capName: 'name' },
  { method: 'resources/list', kind: KIND.DVMCP_RESOURCES, key: 'resources', capName: 'name' },
  { method: 'resources/templates/list', kind: KIND.DVMCP_RESOURCES, key: 'resourceTemplates', capName: 'name' },
  { method: 'prompts/list', kind: KIND.DVMCP_PROMPTS, key: 'prompts', capName: 'name' },
] as const;
export type ListSpec = (typeof LISTS)[number];

/** Longest content this core parses (a request's JSON), in characters. */
export const MAX_CONTENT_CHARS = 256 * 1024;
/** Server ids (`d` of 31316, `s` of requests): what the management API accepts. */
export const SERVER_ID = /^[a-zA-Z0-9_.-]{1,64}$/;

const ParamsSchema = z.record(z.string(), z.unknown());
/** A request or notification's content; `jsonrpc` and `id` are tolerated and dropped. */
export const MessageContentSchema = z.object({ method: z.string().min(1).max(128), params: ParamsSchema.optional() });
export type MessageContent = z.infer<typeof MessageContentSchema>;

export const RpcErrorSchema = z.object({ code: z.number().int(), message: z.string(), data: z.unknown().optional() });
export type RpcError = z.infer<typeof RpcErrorSchema>;
export const rpcError = (code: number, message: string): RpcError => ({ code, message });

/** The event fields this module reads: a plain event, or a gift-wrapped rumor (id computed). */
export interface Incoming {
  id: string;
  pubkey: string;
  kind: number;
  tags: string[][];
  content: string;
}

export type DvmcpMessage =
  | { type: 'request'; method: string; params: Record<string, unknown>; serverId?: string; requestId: string; client: string }
  | { type: 'notification'; method: string; params: Record<string, unknown>; serverId?: string; refersTo?: string; client: string };

const tag = (e: Pick<Incoming, 'tags'>, name: string): string | undefined => e.tags.find((t) => t[0] === name)?.[1];

/**
 * Reads a client's request (25910) or notification (21316, or a `notifications/…` method in 25910).
 * The error is what to answer with (requests only; a bad notification is dropped by the caller).
 */
export function parseMessage(e: Incoming): Result<DvmcpMessage, RpcError> {
  if (e.kind !== KIND.DVMCP_REQUEST && e.kind !== KIND.DVMCP_NOTIFICATION && e.kind !== KIND.PRIVATE_DM) {
    return err(rpcError(RPC.INVALID_REQUEST, `Invalid request: kind ${e.kind} is not a DVMCP request`));
  }
  if (e.content.length > MAX_CONTENT_CHARS) return err(rpcError(RPC.INVALID_REQUEST, `Invalid request: content over ${MAX_CONTENT_CHARS} characters`));
  let raw: unknown;
  try {
    raw = JSON.parse(e.content);
  } catch {
    return err(rpcError(RPC.PARSE_ERROR, 'Parse error: content is not JSON'));
  }
  const parsed = MessageContentSchema.safeParse(raw);
  if (!parsed.success) {
    const paramsBad = typeof raw === 'object' && raw !== null && 'method' in raw && typeof (raw as { method: unknown }).method === 'string';
    return err(rpcError(RPC.INVALID_REQUEST, paramsBad ? 'Invalid request: params must be an object' : 'Invalid request: content needs a method'));
  }
  const { method, params = {} } = parsed.data;
  const methodTag = tag(e, 'method');
  if (methodTag !== undefined && methodTag !== method) {
    return err(rpcError(RPC.INVALID_REQUEST, `Invalid request: method tag "${methodTag}" differs from content method "${method}"`));
  }
  const serverId = tag(e, 's');
  if (method.startsWith('notifications/') || e.kind === KIND.DVMCP_NOTIFICATION) {
    return ok({ type: 'notification', method, params, serverId, refersTo: tag(e, 'e'), client: e.pubkey });
  }
  return ok({ type: 'request', method, params, serverId, requestId: e.id, client: e.pubkey });
}

/** What a response or notification answers: the request event (or rumor) id and its author. */
export interface Requester {
  requestId: string;
  client: string;
}

const now = (): number => Math.floor(Date.now() / 1000);

/** A 26910 response carrying `result` (an MCP result object, sent at the root of the content). */
export function responseTemplate(to: Requester, result: Record<string, unknown>, extraTags: string[][] = []): EventTemplate {
  return { kind: KIND.DVMCP_RESPONSE, created_at: now(), tags: [['e', to.requestId], ['p', to.client], ...extraTags], content: JSON.stringify(result) };
}

/** A 26910 protocol error. */
export const errorTemplate = (to: Requester, error: RpcError): EventTemplate => responseTemplate(to, { error });

/** A server → client 21316 notification (`e` for progress and other request-bound notifications). */
export function notificationTemplate(client: string, method: string, params: Record<string, unknown> | undefined, opts: { requestId?: string; serverId?: string } = {}): EventTemplate {
  const tags = [['p', client], ['method', method]];
  if (opts.serverId !== undefined) tags.push(['s', opts.serverId]);
  if (opts.requestId !== undefined) tags.push(['e', opts.requestId]);
  return { kind: KIND.DVMCP_NOTIFICATION, created_at: now(), tags, content: JSON.stringify(params === undefined ? { method } : { method, params }) };
}

/** The Nostr-specific payment request (spec "Payment Required Notification"): empty content, tags only. */
export function paymentRequiredTemplate(to: Requester, sats: number, invoice: string): EventTemplate {
  return {
    kind: KIND.DVMCP_NOTIFICATION,
    created_at: now(),
    tags: [['status', 'payment-required'], ['amount', String(sats), invoice], ['e', to.requestId], ['p', to.client]],
    content: '',
  };
}

/** A client's 25910 request to `provider` (server `serverId` when given; spec "List Request Template"). */
export function requestTemplate(provider: string, method: string, params: Record<string, unknown> | undefined, serverId?: string): EventTemplate {
  const tags = [['p', provider], ['method', method]];
  if (serverId !== undefined) tags.push(['s', serverId]);
  return { kind: KIND.DVMCP_REQUEST, created_at: now(), tags, content: JSON.stringify(params === undefined ? { method } : { method, params }) };
}

/** A client's notifications/cancel (21316) of request `requestId` (spec "Common MCP Notifications"). */
export const cancelTemplate = (provider: string, requestId: string, serverId?: string, reason = 'cancelled by the client'): EventTemplate =>
  notificationTemplate(provider, 'notifications/cancel', { id: requestId, requestId, reason }, { requestId, serverId });

/** A payment request read from a 21316 (`["status", "payment-required"]`, `["amount", sats, invoice]`). */
export interface PaymentRequired {
  sats: number;
  invoice: string;
}

/**
 * The payment a 21316 asks for: undefined when it is not a payment-required notification with a
 * whole number of sats (decimal digits only: `Number('')` would be 0); an error when its invoice
 * cannot be paid at that price. A BOLT-11 invoice states its own amount, and that is what a wallet
 * pays, so it must be exactly the sats stated (a server could otherwise state 0 and pass any
 * client's spend cap): an invoice without an amount, or for another amount, is refused.
 */
export function parsePaymentRequired(e: Pick<Incoming, 'tags'>): Result<PaymentRequired, PaymentRequired & { reason: string }> | undefined {
  if (tag(e, 'status') !== 'payment-required') return undefined;
  const amount = e.tags.find((t) => t[0] === 'amount');
  if (!amount || !/^[0-9]{1,15}$/.test(amount[1] ?? '')) return undefined;
  const sats = Number(amount[1]);
  const invoice = amount[2] ?? '';
  if (invoice === '') return ok({ sats, invoice });
  const msat = bolt11Msat(invoice);
  if (!msat.ok) return err({ sats, invoice, reason: `its invoice cannot be paid (${msat.error})` });
  if (msat.value !== sats * 1000) return err({ sats, invoice, reason: `its invoice asks ${msat.value / 1000} sats, not the ${sats} stated` });
  return ok({ sats, invoice });
}

/** Reads a response content: the result, or the protocol error (also the reference's full `{jsonrpc, id, error}`). */
export function parseResponse(content: string): Result<Record<string, unknown>, RpcError> {
  let raw: unknown;
  try {
    raw = JSON.parse(content);
  } catch {
    return err(rpcError(RPC.PARSE_ERROR, 'Parse error: response content is not JSON'));
  }
  if (typeof raw !== 'object' || raw === null || Array.isArray(raw)) return err(rpcError(RPC.INVALID_REQUEST, 'response content is not an object'));
  const obj = raw as Record<string, unknown>;
  if ('error' in obj) {
    const e = RpcErrorSchema.safeParse(obj.error);
    return err(e.success ? e.data : rpcError(RPC.INTERNAL_ERROR, 'malformed error in response'));
  }
  // A full JSON-RPC answer (tolerated): its result is the content.
  if ('jsonrpc' in obj && typeof obj.result === 'object' && obj.result !== null) return ok(obj.result as Record<string, unknown>);
  return ok(obj);
}

// ---- Announcements ----

export interface ServerProfile {
  /** The server id: `d` of the 31316, `s` of every request to it. */
  id: string;
  name?: string;
  about?: string;
  picture?: string;
  website?: string;
  encryption: boolean;
}

/** What upstream's initialize answered (announced in 31316 and answered to a DVMCP initialize). */
export interface InitializeInfo {
  protocolVersion: string;
  capabilities: Record<string, unknown>;
  serverInfo: Record<string, unknown>;
  instructions?: string;
}

/** Price of a capability: `["cap", name, price, unit]`. */
export interface Price {
  price: string;
  unit: string;
}
export type Prices = Record<string, Price>;

/**
 * The price of `key`: an own entry of `prices` only. Keys are names a requester sends, and a plain
 * object also answers `constructor`, `__proto__`, `toString`… from its prototype.
 */
export const priceOf = (prices: Prices, key: string): Price | undefined => (Object.hasOwn(prices, key) ? prices[key] : undefined);

/** What a server lists of its resources and resource templates: what prices a resources/read. */
export interface ResourceIndex {
  resources: ReadonlyArray<{ uri: string; name: string }>;
  templates: ReadonlyArray<{ uriTemplate: string; name: string }>;
}

/**
 * The one spelling of a resource uri: its WHATWG URL serialization (`new URL(uri).href`: the scheme,
 * and a special scheme's host, in small letters, dot segments resolved, a default port dropped). It
 * is how MCP SDK servers look a resource up (`new URL(uri).toString()`), so every spelling of a uri
 * they serve as one resource is one uri here: a read is priced, and sent upstream, in this spelling
 * (readPrice), and no other spelling of a priced uri reads it for free. The error: `uri` does not
 * parse (it is not an absolute URI).
 */
export function canonicalUri(uri: string): Result<string, string> {
  try {
    return ok(new URL(uri).href);
  } catch {
    return err(`the resources/read uri "${uri.length > 200 ? `${uri.slice(0, 200)}…` : uri}" is not an absolute URI`);
  }
}

/** What stands for the i-th expression of a uriTemplate while its literal text is put in canonicalUri's spelling (left as it is in every part of a URL). */
const expressionMark = (i: number): string => `edgestrexpr${i}z`;

/**
 * `template` with its literal text in canonicalUri's spelling and its `{…}` expressions kept (each
 * stands for some text of the uri); as it is when it does not parse that way (e.g. `{+base}/x`,
 * whose scheme is an expression).
 */
function canonicalTemplate(template: string): string {
  const expressions: string[] = [];
  const marked = template.replace(/\{[^{}]*\}/g, (e) => expressionMark(expressions.push(e) - 1));
  const parsed = canonicalUri(marked);
  if (!parsed.ok) return template;
  return expressions.reduce((t, e, i) => t.split(expressionMark(i)).join(e), parsed.value);
}

/**
 * Whether `uri` is an expansion of `template` (RFC 6570), both in one spelling: the template's
 * literal text in order, with any text (possibly none) in place of each `{…}` expression. Every
 * expansion matches, so none is read for free; a few uris no expansion gives match too. Linear in the
 * uri per literal (indexOf).
 */
export function matchesUriTemplate(template: string, uri: string): boolean {
  const literals = template.split(/\{[^{}]*\}/);
  if (literals.length === 1) return template === uri;
  const first = literals[0]!;
  const last = literals[literals.length - 1]!;
  if (uri.length < first.length + last.length || !uri.startsWith(first) || !uri.endsWith(last)) return false;
  let at = first.length;
  const end = uri.length - last.length;
  for (const literal of literals.slice(1, -1)) {
    const found = uri.indexOf(literal, at);
    if (found < 0 || found + literal.length > end) return false;
    at = found + literal.length;
  }
  return true;
}

/**
 * The prices keyed by a uri, by its canonicalUri spelling (a key that is not a uri is a name: left
 * out); the first key of a spelling wins.
 */
function uriPrices(prices: Prices): Map<string, Price> {
  const byUri = new Map<string, Price>();
  for (const [key, price] of Object.entries(prices)) {
    const uri = canonicalUri(key);
    if (uri.ok && !byUri.has(uri.value)) byUri.set(uri.value, price);
  }
  return byUri;
}

/** Why a resources/read is not priced, so not served (the dispatcher words the answer). */
export type ReadRefusal = { kind: 'not-a-uri'; reason: string } | { kind: 'not-a-resource'; uri: string };

/**
 * The price of reading `uri` and the uri to read (canonicalUri: what is priced is what upstream
 * serves), as the server's announcements show it, every uri compared in that spelling: the price
 * keyed by the uri; else, when the server lists a resource with that uri, the price of its name (a
 * listed resource is served as itself, as the MCP SDK does, even when a template would match it
 * too); else the price (by name or uriTemplate) of the first priced template the uri expands; else
 * free when some template expands to it. A uri neither listed nor expanded from a template is not a
 * resource of the server: refused (on a server with prices, reading what cannot be priced would be
 * reading for free). Without an `index` (a backend that lists nothing), a read is priced by uri only.
 */
export function readPrice(uri: string, prices: Prices, index: ResourceIndex | undefined): Result<{ uri: string; price: Price | undefined }, ReadRefusal> {
  const canonical = canonicalUri(uri);
  if (!canonical.ok) return err({ kind: 'not-a-uri', reason: canonical.error });
  const at = canonical.value;
  const direct = uriPrices(prices).get(at);
  if (direct || index === undefined) return ok({ uri: at, price: direct });
  const listed = index.resources.filter((r) => {
    const c = canonicalUri(r.uri);
    return c.ok && c.value === at;
  });
  if (listed.length > 0) return ok({ uri: at, price: listed.map((r) => priceOf(prices, r.name)).find((p) => p !== undefined) });
  let expanded = false;
  for (const t of index.templates) {
    if (!matchesUriTemplate(canonicalTemplate(t.uriTemplate), at)) continue;
    const price = priceOf(prices, t.name) ?? priceOf(prices, t.uriTemplate);
    if (price) return ok({ uri: at, price });
    expanded = true;
  }
  return expanded ? ok({ uri: at, price: undefined }) : err({ kind: 'not-a-resource', uri: at });
}

const initContent = (init: InitializeInfo): string => JSON.stringify(init.instructions === undefined ? { protocolVersion: init.protocolVersion, capabilities: init.capabilities, serverInfo: init.serverInfo } : init);

function profileTags(p: ServerProfile): string[][] {
  const tags: string[][] = [];
  for (const k of ['name', 'about', 'picture', 'website'] as const) {
    const v = p[k];
    if (v !== undefined && v !== '') tags.push([k, v]);
  }
  tags.push(['support_encryption', String(p.encryption)]);
  return tags;
}

/** 31316: the server announcement. */
export function serverAnnouncement(p: ServerProfile, init: InitializeInfo): EventTemplate {
  return { kind: KIND.DVMCP_SERVER, created_at: now(), tags: [['d', p.id], ['k', String(KIND.DVMCP_REQUEST)], ...profileTags(p)], content: initContent(init) };
}

/** The `d` of a capability list: `<server id>/<list method>` (as the reference implementation). */
export const listAddress = (serverId: string, list: ListSpec): string => `${serverId}/${list.method}`;

/**
 * 31317/31318/31319: one capability list, one `cap` tag per item (with its price when it has one: a
 * resource's by its uri in any spelling, as readPrice charges it).
 */
export function listAnnouncement(serverId: string, list: ListSpec, items: readonly Record<string, unknown>[], prices: Prices = {}): EventTemplate {
  const caps: string[][] = [];
  const byUri = uriPrices(prices);
  for (const item of items) {
    const name = item[list.capName];
    if (typeof name !== 'string') continue;
    const resource = typeof item.uri === 'string' ? canonicalUri(item.uri) : undefined;
    const uri = typeof item.uri === 'string' ? item.uri : typeof item.uriTemplate === 'string' ? item.uriTemplate : undefined;
    const price = priceOf(prices, name) ?? (uri === undefined ? undefined : priceOf(prices, uri)) ?? (resource?.ok ? byUri.get(resource.value) : undefined);
    caps.push(price ? ['cap', name, price.price, price.unit] : ['cap', name]);
  }
  return { kind: list.kind, created_at: now(), tags: [['d', listAddress(serverId, list)], ['s', serverId], ...caps], content: JSON.stringify({ [list.key]: items }) };
}

/** The 26910 answer to a DVMCP initialize: upstream's result plus `d` and `support_encryption`. */
export const initializeResponse = (to: Requester, p: ServerProfile, init: InitializeInfo): EventTemplate =>
  responseTemplate(to, JSON.parse(initContent(init)) as Record<string, unknown>, [['d', p.id], ['support_encryption', String(p.encryption)]]);

/** The `a` coordinates of everything announced for a server. */
export function announcementCoordinates(provider: string, serverId: string): string[] {
  return [`${KIND.DVMCP_SERVER}:${provider}:${serverId}`, ...LISTS.map((l) => `${l.kind}:${provider}:${listAddress(serverId, l)}`)];
}

/** The reason of the deletion a hosted agent or a bridge sends for its announcements once its owner was removed. */
export const OWNER_REMOVED_REASON = 'the owner was removed from this deployment';

/** NIP-09 deletion of a server's announcements (by `a`). */
export function announcementDeletion(provider: string, serverId: string, reason = 'server removed'): EventTemplate {
  const coords = announcementCoordinates(provider, serverId);
  const kinds = [...new Set(coords.map((c) => c.split(':')[0]!))];
  return { kind: KIND.DELETION, created_at: now(), tags: [...coords.map((a) => ['a', a]), ...kinds.map((k) => ['k', k])], content: reason };
}

// ---- The reference implementation's quirks (tolerated where safe) ----

/**
 * The reference client adds `name` = "<tool>_<provider prefix>" to tool arguments. Dropped when the
 * tool's input schema does not declare a `name` property (so a real `name` argument is kept).
 */
export function withoutInjectedName(args: Record<string, unknown>, toolName: string, inputSchema: unknown): Record<string, unknown> {
  const declared = typeof inputSchema === 'object' && inputSchema !== null && typeof (inputSchema as { properties?: unknown }).properties === 'object'
    ? Object.hasOwn((inputSchema as { properties: object }).properties, 'name')
    : false;
  const v = args.name;
  if (declared || typeof v !== 'string' || !v.startsWith(`${toolName}_`)) return args;
  const { name: _name, ...rest } = args;
  return rest;
}
