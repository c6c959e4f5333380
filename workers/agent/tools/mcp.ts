// Tools of configured remote MCP servers: the Tool adapter over the one upstream MCP client
// (workers/common/mcp-client.ts: Streamable HTTP, or legacy HTTP+SSE, through the official SDK).
//
// connectMcpServer({id, url, headers?}) opens (or reuses, see Sessions below) a session, lists
// the tools (tools/list, following nextCursor), and returns one Tool per server tool whose run
// is tools/call.
//
// Tool names, definitions and their sizes: remote-tools.ts (one rule with DVMCP servers'): at most
// `maxTools` tools, each named <serverId>__<toolName> (server ids match [a-zA-Z0-9_-]{1,32}), its
// description cut and the tools too large left out, in `skipped` and logged ("agent: MCP server
// <id>: tools left out for their size: …").
// Server URL: Streamable HTTP, or a legacy HTTP+SSE endpoint (tried when Streamable HTTP is refused).
// Output: stdout = the text content blocks joined with "\n" (an embedded text resource counts as
// text; other blocks become one-line placeholders like "[image: image/png]"; structured content
// is printed as JSON when there is no content), cut at 256 KiB characters ("truncated at <n>
// characters" in stderr); exit_code 1 when the result has isError, else 0 (both ok: true). A
// result nesting deeper than MAX_JSON_DEPTH levels (json-depth.ts; 100,000 levels of [[…]] are
// 200 KB, within the 4 MiB an answer may have) is a failure, "MCP <tool>: the tool's result nests
// deeper than 64 levels": printed, it would be megabytes of brackets for the model (or overflow
// the stack), and nothing deeper is kept or shown of others' JSON.
// Failures are values: "MCP server <id>: <reason>" for connections, "MCP <tool>: <reason>" for
// calls, "timed out after <n> ms", "aborted".
// Outbound policy (src/shared/outbound-url.ts, `policy` option, strict production by default):
// the server URL is checked before connecting ("MCP server <id>: refused: <reason>"), and every
// request of the transport goes through safeFetch: redirects are followed by hand and each hop is
// checked again (a refused hop fails the request with "redirect refused: <reason>").
//
// Sessions (workers/common/mcp-client.ts, mcp-session-cache.ts): with `sessions` (the agent
// Durable Object's McpSessionCache, keyed by server id and `scope`: the agent scopes a run's
// sessions to its sender, so no upstream session state passes between senders' conversations; the
// tool list is kept per server, shared by all senders, see mcp-session-cache.ts) the
// session and the tool list outlive a run: a run reuses them instead of initializing and listing
// again (the list is refreshed after its expiry or on tools/list_changed), and close() leaves them open. Without it, the connection
// owns its sessions and close() ends them. A call runs inside the cache's lease (`use`): no
// eviction closes its session meanwhile; a new session refused because every one that could make
// room is busy fails with "too many MCP sessions in use (<n>); try again shortly" ("MCP server
// <id>: …" when connecting, "MCP <tool>: …" for a call; the agent's cache: ../mcp-sessions.ts).
// A session the server forgot (404, or 400 naming the session) is re-initialized and the call
// retried once; the standalone GET stream is not opened (see mcp-client.ts). Tool results are
// taken as sent (no client-side output-schema validation).

import { err, errorMessage, ok, type Result } from '../../../src/shared/errors.js';
import { MAX_JSON_DEPTH, nestsWithin } from '../../../src/shared/json-depth.js';
import { STRICT_OUTBOUND, type OutboundPolicy } from '../../../src/shared/outbound-url.js';
import type { McpOpenOptions, McpServerEndpoint } from '../../common/mcp-client.js';
import { McpSessionCache } from '../../common/mcp-session-cache.js';
import { remoteToolDefinitions } from './remote-tools.js';
import { fail, succeed } from './result.js';
import type { Tool, ToolArgs, ToolDefinition, ToolResult } from './types.js';

export interface McpServerConfig {
  /** [a-zA-Z0-9_-]{1,32}; the prefix of the tool names. */
  id: string;
  /** The MCP endpoint, http(s): Streamable HTTP, or legacy HTTP+SSE. */
  url: string;
  /**
   * Extra request headers (e.g. Authorization), sent with every request; or how to get them, asked
   * each time the server is connected to or called (a hosted agent's are sealed at rest, mcp-headers.ts).
   */
  headers?: Record<string, string> | (() => Promise<Record<string, string>>);
}

export interface McpOptions {
  /** initialize, and each tools/list page, in milliseconds (default 10,000). */
  connectTimeoutMs?: number;
  /** One tools/call, in milliseconds (default 30,000). */
  callTimeoutMs?: number;
  /** Most tools taken from one server (default 128); the rest are reported in `skipped`. */
  maxTools?: number;
  /** Most tools/list pages read (default 20; a shared `sessions` cache applies its own maxToolPages). */
  maxPages?: number;
  /** Longest stdout, in characters (default 262,144). */
  maxOutputChars?: number;
  /** The deployment's outbound policy (default: strict production). */
  policy?: OutboundPolicy;
  /** Sessions and tool lists kept across connections, keyed by server id and `scope` (see the header). */
  sessions?: McpSessionCache;
  /** Who the sessions are for (the agent: a run's sender); unset: one session per server. */
  scope?: string;
}

/** The cache key of server `id`'s session for `scope`. */
export const mcpSessionKey = (id: string, scope?: string): string => (scope === undefined ? id : `${id} ${scope}`);

export const MCP_DEFAULTS = {
  connectTimeoutMs: 10_000,
  callTimeoutMs: 30_000,
  maxTools: 128,
  maxPages: 20,
  maxOutputChars: 256 * 1024,
} as const;

export interface McpConnection {
  readonly serverId: string;
  readonly tools: readonly Tool[];
  /** Server tool names that were not exposed, with the reason. */
  readonly skipped: readonly string[];
  /** Ends the connection; its own session is closed (DELETE, best effort), a cached one is kept. */
  close(): Promise<void>;
}

export const MCP_SERVER_ID = /^[a-zA-Z0-9_-]{1,32}$/;
const CLIENT_INFO = { name: 'edgestr-agent', version: '1.0.0' };

const isRecord = (v: unknown): v is Record<string, unknown> =>
  typeof v === 'object' && v !== null && !Array.isArray(v);
const str = (v: unknown, fallback: string): string => (typeof v === 'string' ? v : fallback);

/** One content block as text: text as is, other kinds as a one-line placeholder. */
function renderBlock(block: unknown): string {
  if (!isRecord(block)) return '[unknown content]';
  switch (block.type) {
    case 'text':
      return str(block.text, '');
    case 'image':
    case 'audio':
      return `[${block.type}: ${str(block.mimeType, 'unknown type')}]`;
    case 'resource': {
      const resource = isRecord(block.resource) ? block.resource : {};
      return typeof resource.text === 'string' ? resource.text : `[resource: ${str(resource.uri, 'unknown')}]`;
    }
    case 'resource_link':
      return `[resource link: ${str(block.uri, 'unknown')}]`;
    default:
      return `[${str(block.type, 'unknown')} content]`;
  }
}

/** The ToolResult of a tools/call result (see the header); `label` ("MCP <tool>") names the tool in a failure. */
export function renderCallResult(result: unknown, label: string, maxChars: number = MCP_DEFAULTS.maxOutputChars): ToolResult {
  if (!nestsWithin(result)) return fail(`${label}: the tool's result nests deeper than ${MAX_JSON_DEPTH} levels`);
  const r: Record<string, unknown> = isRecord(result) ? result : {};
  let text: string;
  if (Array.isArray(r.content) && r.content.length > 0) text = r.content.map(renderBlock).join('\n');
  else if (r.structuredContent !== undefined) text = JSON.stringify(r.structuredContent);
  else if (r.toolResult !== undefined) text = JSON.stringify(r.toolResult); // protocol 2024-10-07 shape
  else text = '';
  const truncated = text.length > maxChars;
  return succeed(truncated ? text.slice(0, maxChars) : text, truncated ? `truncated at ${maxChars} characters` : '', r.isError === true ? 1 : 0);
}

/** The server's endpoint, its headers got now when they are given as a function. */
async function endpointOf(config: McpServerConfig): Promise<Result<McpServerEndpoint, string>> {
  const { url, headers } = config;
  if (typeof headers !== 'function') return ok(headers ? { url, headers } : { url });
  try {
    return ok({ url, headers: await headers() });
  } catch (e) {
    return err(`headers cannot be opened: ${errorMessage(e)}`);
  }
}

/** One server of one connection: where its session comes from, and whether the connection closed. */
class ServerLink {
  closed = false;

  constructor(
    readonly config: McpServerConfig,
    readonly sessions: McpSessionCache,
    readonly open: McpOpenOptions,
    readonly key: string,
  ) {}

  async call(name: string, args: ToolArgs, signal: AbortSignal, timeoutMs: number): Promise<Result<unknown, string>> {
    if (this.closed) return err('connection is closed');
    const server = await endpointOf(this.config);
    if (!server.ok) return server;
    const called = await this.sessions.use(this.key, server.value, { ...this.open, signal }, (s) => s.request('tools/call', { name, arguments: args }, { signal, timeoutMs }));
    if (!called.ok) return err(called.error.message);
    return called.value.ok ? called.value : err(called.value.error.message);
  }
}

class McpTool implements Tool {
  constructor(
    readonly definition: ToolDefinition,
    private readonly remoteName: string,
    private readonly link: ServerLink,
    private readonly timeoutMs: number,
    private readonly maxOutputChars: number,
  ) {}

  async run(args: ToolArgs, ctx: { signal: AbortSignal }): Promise<ToolResult> {
    const outcome = await this.link.call(this.remoteName, args, ctx.signal, this.timeoutMs);
    if (!outcome.ok) return fail(`MCP ${this.definition.name}: ${outcome.error}`);
    return renderCallResult(outcome.value, `MCP ${this.definition.name}`, this.maxOutputChars);
  }
}

/** Connects to one MCP server and returns its tools; every failure is a value. */
export async function connectMcpServer(
  config: McpServerConfig,
  options: McpOptions = {},
  signal?: AbortSignal,
): Promise<Result<McpConnection, string>> {
  const prefix = `MCP server ${config.id}`;
  if (!MCP_SERVER_ID.test(config.id)) return err(`${prefix}: id must match [a-zA-Z0-9_-]{1,32}`);
  const connectTimeoutMs = options.connectTimeoutMs ?? MCP_DEFAULTS.connectTimeoutMs;
  const open: McpOpenOptions = { policy: options.policy ?? STRICT_OUTBOUND, connectTimeoutMs, clientInfo: CLIENT_INFO };
  const owned = options.sessions === undefined;
  const sessions = options.sessions ?? new McpSessionCache({ maxSessions: 1, maxToolPages: options.maxPages ?? MCP_DEFAULTS.maxPages });
  const key = mcpSessionKey(config.id, options.scope);
  const link = new ServerLink(config, sessions, open, key);
  const server = await endpointOf(config);
  if (!server.ok) return err(`${prefix}: ${server.error}`);
  const listed = await sessions.tools(key, server.value, { ...open, signal }, { signal, timeoutMs: connectTimeoutMs });
  if (!listed.ok) {
    if (owned) await sessions.closeAll();
    return err(`${prefix}: ${listed.error}`);
  }

  const callTimeoutMs = options.callTimeoutMs ?? MCP_DEFAULTS.callTimeoutMs;
  const maxOutputChars = options.maxOutputChars ?? MCP_DEFAULTS.maxOutputChars;
  const { taken, skipped } = remoteToolDefinitions(config.id, listed.value, options.maxTools ?? MCP_DEFAULTS.maxTools, prefix);
  const tools = taken.map((t) => new McpTool(t.definition, t.remoteName, link, callTimeoutMs, maxOutputChars));
  const close = async (): Promise<void> => {
    link.closed = true;
    if (owned) await sessions.closeAll();
  };
  return ok({ serverId: config.id, tools, skipped, close });
}
