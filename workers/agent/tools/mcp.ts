// Tools of configured remote MCP servers (Streamable HTTP), through the official
// @modelcontextprotocol/sdk Client and StreamableHTTPClientTransport.
//
// connectMcpServer({id, url, headers?}) initializes a session (initialize, then
// notifications/initialized; the Mcp-Session-Id header is kept by the transport), lists the
// tools (tools/list, following nextCursor), and returns one Tool per server tool whose run is
// tools/call. Both JSON and SSE answers are handled by the transport.
//
// Tool names (LLM providers accept only [a-zA-Z0-9_-]{1,64}):
//   <serverId>__<toolName>                       when that is already valid and at most 64 chars;
//   otherwise <serverId>__<toolName with every other character replaced by "_">, cut to 55
//   characters, then "_" and the first 8 hex digits of sha256(toolName) (so that "a.b" and
//   "a_b" stay distinct). Server ids must match [a-zA-Z0-9_-]{1,32}. A name that is still
//   taken (the server listed it twice) is skipped and reported in `skipped`.
// Definitions: description = the tool's description (or title, or ""), input_schema = the
// server's inputSchema as given, schema_version 1, requires_approval false.
// Output: stdout = the text content blocks joined with "\n" (an embedded text resource counts as
// text; other blocks become one-line placeholders like "[image: image/png]"; structured content
// is printed as JSON when there is no content), cut at 256 KiB characters ("truncated at <n>
// characters" in stderr); exit_code 1 when the result has isError, else 0 (both ok: true).
// Failures are values: "MCP server <id>: <reason>" for connections, "MCP <tool>: <reason>" for
// calls, "timed out after <n> ms", "aborted".
// Outbound policy (src/shared/outbound-url.ts, `policy` option, strict production by default):
// the server URL is checked before connecting ("MCP server <id>: refused: <reason>"), and every
// request of the transport goes through safeFetch: redirects are followed by hand and each hop is
// checked again (a refused hop fails the request with "redirect refused: <reason>").
//
// workerd specifics (checked under `wrangler dev`, i.e. real workerd):
//   - The SDK Client's default JSON Schema validator (Ajv) compiles tool output schemas with
//     `new Function`, which workerd forbids: listTools fails with "EvalError: Code generation
//     from strings disallowed for this context" as soon as a tool has an outputSchema. We pass
//     the SDK's code-free Workers validator (CfWorkerJsonSchemaValidator, @cfworker/json-schema),
//     with the schema's regular expressions removed as for tool arguments (args.ts). (The vitest
//     workers pool allows `new Function`, so the tests also forbid it explicitly to catch a
//     regression.)
//   - The transport's optional standalone GET SSE stream (server-initiated messages) is not
//     opened: our fetch answers that GET with 405, which the transport treats as "not offered".
//     A never-ending subrequest would keep a Durable Object from hibernating and hold one of
//     the Worker's few simultaneous connections; we advertise no client capabilities, so the
//     server has nothing to ask us. Consequence: tools/list_changed is not seen; the tool list
//     is fixed per connection.
//   - A 404 on a request with a session id means the session expired (MCP spec): the call
//     opens a new session and retries once. A session that could not be re-opened (timeout,
//     server down) is opened again by the next call.

import { sha256 } from '@noble/hashes/sha2.js';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport, StreamableHTTPError } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { CfWorkerJsonSchemaValidator } from '@modelcontextprotocol/sdk/validation/cfworker';
import type { JsonSchemaType, jsonSchemaValidator } from '@modelcontextprotocol/sdk/validation/types.js';
import { err, errorMessage, ok, type Result } from '../../../src/shared/errors.js';
import { bytesToHex } from '../../../src/shared/hex.js';
import { checkOutboundUrl, safeFetch, STRICT_OUTBOUND, type OutboundPolicy } from '../../../src/shared/outbound-url.js';
import { withoutRegexes } from './args.js';
import { fail, succeed } from './result.js';
import type { Tool, ToolArgs, ToolDefinition, ToolResult } from './types.js';

export interface McpServerConfig {
  /** [a-zA-Z0-9_-]{1,32}; the prefix of the tool names. */
  id: string;
  /** The Streamable HTTP endpoint, http(s). */
  url: string;
  /** Extra request headers (e.g. Authorization), sent with every request. */
  headers?: Record<string, string>;
}

export interface McpOptions {
  /** initialize + tools/list, in milliseconds (default 10,000). */
  connectTimeoutMs?: number;
  /** One tools/call, in milliseconds (default 30,000). */
  callTimeoutMs?: number;
  /** Most tools taken from one server (default 128); the rest are reported in `skipped`. */
  maxTools?: number;
  /** Most tools/list pages read (default 20). */
  maxPages?: number;
  /** Longest stdout, in characters (default 262,144). */
  maxOutputChars?: number;
  /** The deployment's outbound policy (default: strict production). */
  policy?: OutboundPolicy;
}

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
  /** Ends the session (DELETE with the session id, best effort) and releases the transport. */
  close(): Promise<void>;
}

export const MCP_SERVER_ID = /^[a-zA-Z0-9_-]{1,32}$/;
const TOOL_NAME = /^[a-zA-Z0-9_-]{1,64}$/;
const SEPARATOR = '__';
const CLIENT_INFO = { name: 'edgestr-agent', version: '1.0.0' };

/** The exposed name of `toolName` of server `serverId` (see the naming rule above). */
export function mcpToolName(serverId: string, toolName: string): string {
  const plain = `${serverId}${SEPARATOR}${toolName}`;
  if (TOOL_NAME.test(plain)) return plain;
  const cleaned = `${serverId}${SEPARATOR}${toolName.replace(/[^a-zA-Z0-9_-]/g, '_')}`.slice(0, 55);
  return `${cleaned}_${bytesToHex(sha256(new TextEncoder().encode(toolName))).slice(0, 8)}`;
}

/** The SDK's output-schema validator hook: no code generation, no regular expressions (see the header). */
const workersValidator = new CfWorkerJsonSchemaValidator();
const codeFreeValidator: jsonSchemaValidator = {
  getValidator: <T>(schema: JsonSchemaType) => workersValidator.getValidator<T>(withoutRegexes(schema) as JsonSchemaType),
};

/** fetch for the transport: no standalone GET SSE stream (see the header); the rest through safeFetch. */
const transportFetch =
  (policy: OutboundPolicy) =>
  async (url: string | URL, init?: RequestInit): Promise<Response> => {
    if ((init?.method ?? 'GET').toUpperCase() === 'GET') return new Response(null, { status: 405, statusText: 'Method Not Allowed' });
    const fetched = await safeFetch(url, init ?? {}, policy);
    if (!fetched.ok) throw new Error(fetched.error);
    return fetched.value.response;
  };

/** Our own stop (deadline or caller's signal), told apart from the SDK's errors. */
class Stop extends Error {}

/** Runs `work` with a deadline and the caller's signal; maps our own stops to fixed messages. */
async function withDeadline<T>(
  timeoutMs: number,
  caller: AbortSignal | undefined,
  work: (signal: AbortSignal) => Promise<T>,
): Promise<Result<T, string>> {
  if (caller?.aborted) return err('aborted');
  const timer = new AbortController();
  const timeout = setTimeout(() => timer.abort(new Error(`timed out after ${timeoutMs} ms`)), timeoutMs);
  const signal = caller ? AbortSignal.any([caller, timer.signal]) : timer.signal;
  // The SDK rejects with the signal's reason on abort; racing keeps our messages exact.
  let onAbort: (() => void) | undefined;
  const stopped = new Promise<never>((_, reject) => {
    onAbort = () => reject(timer.signal.aborted ? new Stop(`timed out after ${timeoutMs} ms`) : new Stop('aborted'));
    signal.addEventListener('abort', onAbort, { once: true });
  });
  stopped.catch(() => undefined);
  try {
    return ok(await Promise.race([work(signal), stopped]));
  } catch (e) {
    if (e instanceof Stop) return err(e.message);
    if (timer.signal.aborted) return err(`timed out after ${timeoutMs} ms`);
    if (caller?.aborted) return err('aborted');
    return err(errorMessage(e));
  } finally {
    clearTimeout(timeout);
    if (onAbort) signal.removeEventListener('abort', onAbort);
  }
}

interface ListedTool {
  name: string;
  title?: string;
  description?: string;
  inputSchema: Record<string, unknown>;
}

/** One MCP session that re-opens itself when the server forgets it (HTTP 404) or a re-open failed. */
class McpSession {
  private client: Client | undefined;
  private transport: StreamableHTTPClientTransport | undefined;
  private opening: Promise<void> | undefined;
  private closed = false;

  constructor(
    private readonly config: McpServerConfig,
    private readonly url: URL,
    private readonly policy: OutboundPolicy,
  ) {}

  /** initialize + notifications/initialized on a new transport. */
  async open(signal: AbortSignal): Promise<void> {
    const transport = new StreamableHTTPClientTransport(this.url, {
      fetch: transportFetch(this.policy),
      requestInit: this.config.headers ? { headers: { ...this.config.headers } } : undefined,
    });
    const client = new Client(CLIENT_INFO, { capabilities: {}, jsonSchemaValidator: codeFreeValidator });
    // Transport errors also reject the pending request; this hook only keeps them from being unhandled.
    transport.onerror = () => undefined;
    try {
      await client.connect(transport, { signal });
      if (this.closed) throw new Error('connection is closed');
    } catch (e) {
      await client.close().catch(() => undefined);
      throw e;
    }
    this.client = client;
    this.transport = transport;
  }

  async listTools(signal: AbortSignal, maxPages: number): Promise<ListedTool[]> {
    const client = await this.current(signal);
    const tools: ListedTool[] = [];
    let cursor: string | undefined;
    for (let page = 0; page < maxPages; page++) {
      const result = await client.listTools(cursor === undefined ? {} : { cursor }, { signal });
      tools.push(...result.tools);
      cursor = result.nextCursor;
      if (cursor === undefined) break;
    }
    return tools;
  }

  async callTool(name: string, args: Record<string, unknown>, signal: AbortSignal, timeoutMs: number): Promise<ToolCallOutcome> {
    // The SDK's own timer is a backstop only; withDeadline decides the message.
    const options = { signal, timeout: timeoutMs + 5_000 };
    const client = await this.current(signal);
    try {
      return await client.callTool({ name, arguments: args }, undefined, options);
    } catch (e) {
      if (!(e instanceof StreamableHTTPError && e.code === 404) || signal.aborted || this.closed) throw e;
      // The server forgot the session: a new session (once for concurrent callers), one retry.
      if (this.client === client) await this.drop();
      return (await this.current(signal)).callTool({ name, arguments: args }, undefined, options);
    }
  }

  async close(): Promise<void> {
    this.closed = true;
    const transport = this.transport;
    if (transport?.sessionId) {
      let timer: ReturnType<typeof setTimeout> | undefined;
      const deadline = new Promise<void>((r) => {
        timer = setTimeout(r, 2_000);
      });
      await Promise.race([transport.terminateSession().catch(() => undefined), deadline]);
      clearTimeout(timer);
    }
    await this.drop();
  }

  /** The open client, opening a session first when there is none. */
  private async current(signal: AbortSignal): Promise<Client> {
    if (this.closed) throw new Error('connection is closed');
    if (!this.client) {
      this.opening ??= this.open(signal).finally(() => {
        this.opening = undefined;
      });
      await this.opening;
    }
    if (!this.client) throw new Error('connection is closed');
    return this.client;
  }

  private async drop(): Promise<void> {
    const client = this.client;
    this.client = undefined;
    this.transport = undefined;
    await client?.close().catch(() => undefined);
  }
}

type ToolCallOutcome = Awaited<ReturnType<Client['callTool']>>;

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

/** The ToolResult of a tools/call result (see the header). */
export function renderCallResult(result: ToolCallOutcome, maxChars: number = MCP_DEFAULTS.maxOutputChars): ToolResult {
  const r: Record<string, unknown> = result;
  let text: string;
  if (Array.isArray(r.content) && r.content.length > 0) text = r.content.map(renderBlock).join('\n');
  else if (r.structuredContent !== undefined) text = JSON.stringify(r.structuredContent);
  else if (r.toolResult !== undefined) text = JSON.stringify(r.toolResult); // protocol 2024-10-07 shape
  else text = '';
  const truncated = text.length > maxChars;
  return succeed(truncated ? text.slice(0, maxChars) : text, truncated ? `truncated at ${maxChars} characters` : '', r.isError === true ? 1 : 0);
}

class McpTool implements Tool {
  constructor(
    readonly definition: ToolDefinition,
    private readonly remoteName: string,
    private readonly session: McpSession,
    private readonly timeoutMs: number,
    private readonly maxOutputChars: number,
  ) {}

  async run(args: ToolArgs, ctx: { signal: AbortSignal }): Promise<ToolResult> {
    const outcome = await withDeadline(this.timeoutMs, ctx.signal, (signal) =>
      this.session.callTool(this.remoteName, args, signal, this.timeoutMs),
    );
    if (!outcome.ok) return fail(`MCP ${this.definition.name}: ${outcome.error}`);
    return renderCallResult(outcome.value, this.maxOutputChars);
  }
}

function definitionOf(name: string, tool: ListedTool): ToolDefinition {
  const schema = isRecord(tool.inputSchema) ? tool.inputSchema : {};
  return {
    name,
    description: tool.description ?? tool.title ?? '',
    schema_version: 1,
    requires_approval: false,
    input_schema: { ...schema, type: 'object' },
  };
}

/** Connects to one MCP server and returns its tools; every failure is a value. */
export async function connectMcpServer(
  config: McpServerConfig,
  options: McpOptions = {},
  signal?: AbortSignal,
): Promise<Result<McpConnection, string>> {
  const prefix = `MCP server ${config.id}`;
  if (!MCP_SERVER_ID.test(config.id)) return err(`${prefix}: id must match [a-zA-Z0-9_-]{1,32}`);
  const policy = options.policy ?? STRICT_OUTBOUND;
  const checked = checkOutboundUrl(config.url, 'http', policy);
  if (!checked.ok) return err(`${prefix}: ${checked.error}`);

  const connectTimeoutMs = options.connectTimeoutMs ?? MCP_DEFAULTS.connectTimeoutMs;
  const session = new McpSession(config, checked.value, policy);
  const listed = await withDeadline(connectTimeoutMs, signal, (s) =>
    session.listTools(s, options.maxPages ?? MCP_DEFAULTS.maxPages),
  );
  if (!listed.ok) {
    await session.close();
    return err(`${prefix}: ${listed.error}`);
  }

  const maxTools = options.maxTools ?? MCP_DEFAULTS.maxTools;
  const callTimeoutMs = options.callTimeoutMs ?? MCP_DEFAULTS.callTimeoutMs;
  const maxOutputChars = options.maxOutputChars ?? MCP_DEFAULTS.maxOutputChars;
  const tools: Tool[] = [];
  const skipped: string[] = [];
  const taken = new Set<string>();
  for (const tool of listed.value) {
    const name = mcpToolName(config.id, tool.name);
    if (taken.has(name)) {
      skipped.push(`${tool.name} (duplicate name ${name})`);
    } else if (tools.length >= maxTools) {
      skipped.push(`${tool.name} (over the tool limit of ${maxTools})`);
    } else {
      taken.add(name);
      tools.push(new McpTool(definitionOf(name, tool), tool.name, session, callTimeoutMs, maxOutputChars));
    }
  }
  return ok({ serverId: config.id, tools, skipped, close: () => session.close() });
}
