// The MCP server behind /mcp (the SDK's low-level Server): lists the tools, prompts, resources and
// resource templates of the DVMCP servers announced on the public shard (catalog.ts, names.ts), in
// pages of PAGE_SIZE (cursor = the offset), and forwards tools/call, prompts/get and resources/read
// to the server over Nostr with the DVMCP client (src/shared/dvmcp-client.ts), gift-wrapped when
// the server announces support_encryption.
// - Progress: when the MCP request carries _meta.progressToken, each DVMCP notifications/progress
//   becomes an MCP notifications/progress on the request's SSE response (progress counts up from 1
//   when the server's value is missing or not increasing).
// - Errors: a DVMCP protocol error keeps its JSON-RPC code and message; no answer is -32001
//   (request timeout); payment-required is -32603 "payment required: N sats (invoice …)" with
//   data {payment_required: {sats, invoice}}: the gateway never pays (a client that can pay calls the
//   server over DVMCP itself); an unknown name or uri is -32602; a relay connection that does not
//   open (e.g. the public shard refuses the caller's address one more) is -32603 "cannot reach the
//   relay: …" with the reason, before anything is sent.
// - Depth: a result nesting deeper than MAX_JSON_DEPTH (64, src/shared/json-depth.ts), which many
//   JSON readers cannot read, is not passed on: -32603 "the DVMCP server <id>'s result nests deeper
//   than 64 levels"; a protocol error whose data nests so deep keeps its code and message only.
// - Bounds: CALL_IDLE_MS without an answer or progress, CALL_TOTAL_MS in all (both ≤ 60 s).

import { Server } from '@modelcontextprotocol/sdk/server/index.js';
import {
  CallToolRequestSchema,
  CallToolResultSchema,
  ErrorCode,
  GetPromptRequestSchema,
  GetPromptResultSchema,
  ListPromptsRequestSchema,
  ListResourcesRequestSchema,
  ListResourceTemplatesRequestSchema,
  ListToolsRequestSchema,
  ReadResourceRequestSchema,
  ReadResourceResultSchema,
  type ServerNotification,
} from '@modelcontextprotocol/sdk/types.js';
import { CfWorkerJsonSchemaValidator } from '@modelcontextprotocol/sdk/validation/cfworker';
import type { DvmcpClient, DvmcpFailure } from '../../src/shared/dvmcp-client.js';
import type { Result } from '../../src/shared/errors.js';
import { MAX_JSON_DEPTH, nestsWithin } from '../../src/shared/json-depth.js';
import type { z } from 'zod';
import { VERSION } from '../relay-do/nip11.js';
import type { GatewayIndex, Route } from './catalog.js';

export const PAGE_SIZE = 100;
export const CALL_IDLE_MS = 30_000;
export const CALL_TOTAL_MS = 60_000;

export interface GatewayDeps {
  /** The catalog index (discovered on first use). */
  index(): Promise<Result<GatewayIndex, string>>;
  /** Opens the relay connection `dvmcp` sends on (once open: at once), or why it did not open. */
  relay(): Promise<Result<void, string>>;
  dvmcp: DvmcpClient;
}

type ProgressToken = string | number;
type Notify = (n: ServerNotification) => Promise<void>;

/**
 * A JSON-RPC error to answer with. (The SDK's McpError puts "MCP error <code>: " in its message, which
 * the SDK then sends as is and clients prefix again; this one carries the bare message.)
 */
export class RpcFailure extends Error {
  constructor(
    readonly code: number,
    message: string,
    readonly data?: unknown,
  ) {
    super(message);
  }
}

/** The JSON-RPC error for a DVMCP failure (see the header). */
export function rpcFailureOf(f: DvmcpFailure): RpcFailure {
  switch (f.kind) {
    case 'protocol':
      return nestsWithin({ code: f.code, message: f.message, data: f.data }) ? new RpcFailure(f.code, f.message, f.data) : new RpcFailure(f.code, f.message);
    case 'timeout':
      return new RpcFailure(ErrorCode.RequestTimeout, f.message);
    case 'payment':
      return new RpcFailure(ErrorCode.InternalError, `${f.message}; the /mcp gateway does not pay, call this server with a DVMCP client that can`, {
        payment_required: { sats: f.sats, invoice: f.invoice },
      });
    default:
      return new RpcFailure(ErrorCode.InternalError, f.message);
  }
}

function page<T>(items: readonly T[], cursor: string | undefined): { items: T[]; nextCursor?: string } {
  const start = cursor === undefined ? 0 : Number(cursor);
  if (!Number.isSafeInteger(start) || start < 0 || start > items.length) throw new RpcFailure(ErrorCode.InvalidParams, `Invalid cursor: ${String(cursor).slice(0, 40)}`);
  const end = start + PAGE_SIZE;
  return end < items.length ? { items: items.slice(start, end), nextCursor: String(end) } : { items: items.slice(start) };
}

/** notifications/progress for `token`, with a strictly increasing progress value. */
function progressRelay(token: ProgressToken | undefined, notify: Notify): ((p: Record<string, unknown>) => void) | undefined {
  if (token === undefined) return undefined;
  let last = 0;
  return (p) => {
    const given = typeof p.progress === 'number' ? p.progress : undefined;
    last = given !== undefined && given > last ? given : last + 1;
    const params: { progressToken: ProgressToken; progress: number; total?: number; message?: string } = { progressToken: token, progress: last };
    if (typeof p.total === 'number') params.total = p.total;
    if (typeof p.message === 'string') params.message = p.message.slice(0, 1000);
    notify({ method: 'notifications/progress', params }).catch((e: unknown) => console.warn('gateway: progress not sent', e));
  };
}

export function gatewayServer(deps: GatewayDeps): Server {
  const server = new Server(
    { name: 'edgestr-dvmcp-gateway', version: VERSION },
    {
      capabilities: { tools: {}, prompts: {}, resources: {} },
      jsonSchemaValidator: new CfWorkerJsonSchemaValidator(),
      instructions: 'Tools, prompts and resources of the DVMCP servers announced on this relay, named <server>__<name>; resources as dvmcp://<server>/<uri>.',
    },
  );

  const index = async (): Promise<GatewayIndex> => {
    const r = await deps.index();
    if (!r.ok) throw new RpcFailure(ErrorCode.InternalError, `DVMCP discovery failed: ${r.error}`);
    return r.value;
  };

  /** Sends `method` to the route's server; its answer must be a valid `schema` result. */
  const forward = async <T>(route: Route, method: string, params: Record<string, unknown>, schema: z.ZodType<T>, extra: { signal: AbortSignal; sendNotification: Notify }, token: ProgressToken | undefined): Promise<T> => {
    const target = { provider: route.server.provider, serverId: route.server.id, encrypt: route.server.encryption };
    const opened = await deps.relay();
    if (!opened.ok) throw new RpcFailure(ErrorCode.InternalError, `cannot reach the relay: ${opened.error}`);
    const r = await deps.dvmcp.request(target, method, params, {
      signal: extra.signal,
      timeoutMs: CALL_IDLE_MS,
      maxTotalMs: CALL_TOTAL_MS,
      onProgress: progressRelay(token, extra.sendNotification),
    });
    if (!r.ok) throw rpcFailureOf(r.error);
    if (!nestsWithin(r.value)) throw new RpcFailure(ErrorCode.InternalError, `the DVMCP server ${route.server.id}'s result nests deeper than ${MAX_JSON_DEPTH} levels`);
    const parsed = schema.safeParse(r.value);
    if (!parsed.success) throw new RpcFailure(ErrorCode.InternalError, `the DVMCP server ${route.server.id} answered ${method} with a malformed result`);
    return parsed.data;
  };

  server.setRequestHandler(ListToolsRequestSchema, async (req) => {
    const p = page((await index()).tools, req.params?.cursor);
    return { tools: p.items, ...(p.nextCursor ? { nextCursor: p.nextCursor } : {}) };
  });
  server.setRequestHandler(ListPromptsRequestSchema, async (req) => {
    const p = page((await index()).prompts, req.params?.cursor);
    return { prompts: p.items, ...(p.nextCursor ? { nextCursor: p.nextCursor } : {}) };
  });
  server.setRequestHandler(ListResourcesRequestSchema, async (req) => {
    const p = page((await index()).resources, req.params?.cursor);
    return { resources: p.items, ...(p.nextCursor ? { nextCursor: p.nextCursor } : {}) };
  });
  server.setRequestHandler(ListResourceTemplatesRequestSchema, async (req) => {
    const p = page((await index()).resourceTemplates, req.params?.cursor);
    return { resourceTemplates: p.items, ...(p.nextCursor ? { nextCursor: p.nextCursor } : {}) };
  });

  server.setRequestHandler(CallToolRequestSchema, async (req, extra) => {
    const route = (await index()).tool(req.params.name);
    if (!route) throw new RpcFailure(ErrorCode.InvalidParams, `Unknown tool: ${req.params.name.slice(0, 200)}`);
    return forward(route, 'tools/call', { name: route.original, arguments: req.params.arguments ?? {} }, CallToolResultSchema, extra, req.params._meta?.progressToken);
  });
  server.setRequestHandler(GetPromptRequestSchema, async (req, extra) => {
    const route = (await index()).prompt(req.params.name);
    if (!route) throw new RpcFailure(ErrorCode.InvalidParams, `Unknown prompt: ${req.params.name.slice(0, 200)}`);
    return forward(route, 'prompts/get', { name: route.original, arguments: req.params.arguments ?? {} }, GetPromptResultSchema, extra, req.params._meta?.progressToken);
  });
  server.setRequestHandler(ReadResourceRequestSchema, async (req, extra) => {
    const idx = await index();
    const route = idx.resource(req.params.uri);
    if (!route) throw new RpcFailure(ErrorCode.InvalidParams, `Unknown resource: ${req.params.uri.slice(0, 200)} (gateway uris are dvmcp://<server>/<uri>)`);
    const result = await forward(route, 'resources/read', { uri: route.original }, ReadResourceResultSchema, extra, req.params._meta?.progressToken);
    return { ...result, contents: result.contents.map((c) => ({ ...c, uri: idx.exposeUri(route.server, c.uri) })) };
  });
  return server;
}
