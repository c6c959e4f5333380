// Tools of DVMCP servers found on Nostr (the agent config's `dvmcp_servers`: provider, server id,
// encrypt?), called through the DVMCP client (src/shared/dvmcp-client.ts) that the agent runs over
// its connection to the deployment's public shard, authenticated as the agent key (so the bridge's
// per-client limits apply per agent).
// - Listing: tools/list over DVMCP (following nextCursor, at most DVMCP_TOOL_DEFAULTS.maxPages
//   pages), cached per (agent, provider, server, encrypt) for LIST_TTL_MS: runs and ai.info reuse it.
// - Names and output exactly as MCP server tools (mcp.ts): mcpToolName(server id, tool name) and
//   renderCallResult; a result that is not a valid tools/call result is a failure.
// - Payments: the agent has no wallet, so it declines every payment request: a priced tool fails
//   with "payment required: N sats (invoice …)".
// Failures are values: "DVMCP server <id>: <reason>" when listing, "DVMCP <tool>: <reason>" when
// calling (timeouts, cancellation, protocol errors with their code).

import { CallToolResultSchema } from '@modelcontextprotocol/sdk/types.js';
import { z } from 'zod';
import type { DvmcpClient, DvmcpFailure, DvmcpTarget } from '../../../src/shared/dvmcp-client.js';
import { err, ok, type Result } from '../../../src/shared/errors.js';
import { LruMap } from '../../../src/shared/lru.js';
import { mcpToolName, renderCallResult } from './mcp.js';
import { fail } from './result.js';
import type { Tool, ToolArgs, ToolDefinition, ToolResult } from './types.js';

export interface DvmcpServerConfig {
  /** The provider's public key (hex). */
  provider: string;
  /** The server id (`d` of its announcement). */
  server: string;
  /** Send requests gift-wrapped. */
  encrypt?: boolean;
}

export interface DvmcpToolOptions {
  /** The agent's DVMCP client (created when first needed). */
  client: () => Promise<DvmcpClient>;
  /** The agent's public key (the list cache is per agent). */
  agent: string;
  /** One tools/list page, in ms (default 10,000). */
  listTimeoutMs?: number;
  /** One call without an answer or progress, in ms (default 30,000); the whole call at most twice that. */
  callTimeoutMs?: number;
}

export const DVMCP_TOOL_DEFAULTS = { listTimeoutMs: 10_000, callTimeoutMs: 30_000, maxPages: 20, maxTools: 128 } as const;
export const LIST_TTL_MS = 5 * 60_000;

const ListedTool = z.looseObject({ name: z.string().min(1).max(256), description: z.string().optional(), title: z.string().optional(), inputSchema: z.looseObject({}) });
type ListedTool = z.infer<typeof ListedTool>;
const ListPage = z.looseObject({ tools: z.array(z.unknown()), nextCursor: z.string().optional() });

const listCache = new LruMap<string, { at: number; tools: ListedTool[] }>(256);

const failureText = (f: DvmcpFailure): string => (f.kind === 'protocol' ? `error ${f.code}: ${f.message}` : f.message);

/** Every tool of the server (bounded), from the cache when fresh. */
async function listTools(client: DvmcpClient, target: DvmcpTarget, cacheKey: string, timeoutMs: number, signal?: AbortSignal): Promise<Result<ListedTool[], string>> {
  const hit = listCache.get(cacheKey);
  if (hit && Date.now() - hit.at < LIST_TTL_MS) return ok(hit.tools);
  const tools: ListedTool[] = [];
  let cursor: string | undefined;
  for (let page = 0; page < DVMCP_TOOL_DEFAULTS.maxPages; page++) {
    const r = await client.request(target, 'tools/list', cursor === undefined ? {} : { cursor }, { timeoutMs, maxTotalMs: timeoutMs, signal });
    if (!r.ok) return err(failureText(r.error));
    const parsed = ListPage.safeParse(r.value);
    if (!parsed.success) return err('tools/list answer is not a tool list');
    for (const t of parsed.data.tools) {
      const tool = ListedTool.safeParse(t);
      if (tool.success && tools.length < DVMCP_TOOL_DEFAULTS.maxTools) tools.push(tool.data);
    }
    cursor = parsed.data.nextCursor;
    if (cursor === undefined) break;
  }
  listCache.set(cacheKey, { at: Date.now(), tools });
  return ok(tools);
}

class DvmcpTool implements Tool {
  constructor(
    readonly definition: ToolDefinition,
    private readonly remoteName: string,
    private readonly target: DvmcpTarget,
    private readonly client: DvmcpClient,
    private readonly timeoutMs: number,
  ) {}

  async run(args: ToolArgs, ctx: { signal: AbortSignal }): Promise<ToolResult> {
    const r = await this.client.request(this.target, 'tools/call', { name: this.remoteName, arguments: args }, {
      signal: ctx.signal,
      timeoutMs: this.timeoutMs,
      maxTotalMs: 2 * this.timeoutMs,
      onPaymentRequired: () => false,
    });
    if (!r.ok) return fail(`DVMCP ${this.definition.name}: ${failureText(r.error)}`);
    const result = CallToolResultSchema.safeParse(r.value);
    if (!result.success) return fail(`DVMCP ${this.definition.name}: the server answered with a malformed tools/call result`);
    return renderCallResult(result.data);
  }
}

/** The tools of one DVMCP server; every failure is a value. */
export async function connectDvmcpServer(config: DvmcpServerConfig, options: DvmcpToolOptions, signal?: AbortSignal): Promise<Result<{ serverId: string; tools: Tool[]; skipped: string[] }, string>> {
  const prefix = `DVMCP server ${config.server}`;
  const client = await options.client();
  const target: DvmcpTarget = { provider: config.provider, serverId: config.server, encrypt: config.encrypt === true };
  const listed = await listTools(client, target, `${options.agent}:${config.provider}:${config.server}:${target.encrypt}`, options.listTimeoutMs ?? DVMCP_TOOL_DEFAULTS.listTimeoutMs, signal);
  if (!listed.ok) return err(`${prefix}: ${listed.error}`);
  const tools: Tool[] = [];
  const skipped: string[] = [];
  const taken = new Set<string>();
  for (const t of listed.value) {
    const name = mcpToolName(config.server, t.name);
    if (taken.has(name)) {
      skipped.push(`${t.name} (duplicate name ${name})`);
      continue;
    }
    taken.add(name);
    const definition: ToolDefinition = { name, description: t.description ?? t.title ?? '', schema_version: 1, requires_approval: false, input_schema: { ...t.inputSchema, type: 'object' } };
    tools.push(new DvmcpTool(definition, t.name, target, client, options.callTimeoutMs ?? DVMCP_TOOL_DEFAULTS.callTimeoutMs));
  }
  return ok({ serverId: config.server, tools, skipped });
}
