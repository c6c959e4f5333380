// Tools of DVMCP servers found on Nostr (the agent config's `dvmcp_servers`: provider, server id,
// encrypt?), called through the DVMCP client (src/shared/dvmcp-client.ts) that the agent runs over
// its connection to the deployment's public shard, authenticated as the agent key (so the bridge's
// per-client limits apply per agent).
// - Private by default: `encrypt` goes to the client as configured, so a server without it is
//   listed and called gift-wrapped (a server announcing no encryption is refused: "DVMCP server
//   <id>: <id> does not support encryption; set encrypt: false to call it in public"); only
//   `encrypt: false` sends the tools/list and tools/call (the arguments the model wrote from a
//   possibly private prompt, and the results) where anyone on the public shard can read them.
// - Listing: tools/list over DVMCP (following nextCursor, at most DVMCP_TOOL_DEFAULTS.maxPages
//   pages, each one Nostr event).
// - Names, definitions and their sizes exactly as MCP server tools' (remote-tools.ts: at most
//   DVMCP_TOOL_DEFAULTS.maxTools tools, descriptions cut, tools too large left out, in `skipped`
//   and logged "agent: DVMCP server <id>: tools left out for their size: …"); the definitions so
//   bounded (not the raw listing) are cached per (agent, provider, server, encrypt) for
//   LIST_TTL_MS, runs and ai.info reusing them, at most MAX_KEPT_TOOL_LISTS_CHARS of them in all
//   (the least recently used listed again). Output as MCP tools' (mcp.ts renderCallResult: a
//   result nesting deeper than 64 levels is "DVMCP <tool>: the tool's result nests deeper than 64
//   levels"); a result that is not a valid tools/call result is a failure.
// - Payments: the agent has no wallet, so it declines every payment request: a priced tool fails
//   with "payment required: N sats (invoice …)".
// Failures are values: "DVMCP server <id>: <reason>" when listing, "DVMCP <tool>: <reason>" when
// calling (timeouts, cancellation, protocol errors with their code).

import { CallToolResultSchema } from '@modelcontextprotocol/sdk/types.js';
import { z } from 'zod';
import type { DvmcpClient, DvmcpFailure, DvmcpTarget } from '../../../src/shared/dvmcp-client.js';
import type { DvmcpServerConfig } from '../config.js';
import { err, ok, type Result } from '../../../src/shared/errors.js';
import { LruMap } from '../../../src/shared/lru.js';
import { MAX_KEPT_TOOL_LISTS_CHARS } from '../../common/mcp-session-cache.js';
import { remoteToolDefinitions, type RemoteToolDefinition } from './remote-tools.js';
import { renderCallResult } from './mcp.js';
import { fail } from './result.js';
import type { Tool, ToolArgs, ToolDefinition, ToolResult } from './types.js';

export type { DvmcpServerConfig };

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

/** A server's tools as taken (and skipped) from one listing; `chars` weighs it in the cache. */
interface Listing {
  at: number;
  taken: RemoteToolDefinition[];
  skipped: string[];
  chars: number;
}

const listCache = new LruMap<string, Listing>(256, { of: (l) => l.chars, max: MAX_KEPT_TOOL_LISTS_CHARS });

const failureText = (f: DvmcpFailure): string => (f.kind === 'protocol' ? `error ${f.code}: ${f.message}` : f.message);

/** The tools of `config`'s server (see the header), from the cache when fresh. */
async function listTools(client: DvmcpClient, config: DvmcpServerConfig, target: DvmcpTarget, cacheKey: string, timeoutMs: number, signal?: AbortSignal): Promise<Result<Listing, string>> {
  const hit = listCache.get(cacheKey);
  if (hit && Date.now() - hit.at < LIST_TTL_MS) return ok(hit);
  const tools: ListedTool[] = [];
  let cursor: string | undefined;
  for (let page = 0; page < DVMCP_TOOL_DEFAULTS.maxPages; page++) {
    const r = await client.request(target, 'tools/list', cursor === undefined ? {} : { cursor }, { timeoutMs, maxTotalMs: timeoutMs, signal });
    if (!r.ok) return err(failureText(r.error));
    const parsed = ListPage.safeParse(r.value);
    if (!parsed.success) return err('tools/list answer is not a tool list');
    for (const t of parsed.data.tools) {
      const tool = ListedTool.safeParse(t);
      if (tool.success) tools.push(tool.data);
    }
    cursor = parsed.data.nextCursor;
    if (cursor === undefined) break;
  }
  const { taken, skipped, chars } = remoteToolDefinitions(config.server, tools, DVMCP_TOOL_DEFAULTS.maxTools, `DVMCP server ${config.server}`);
  const listing = { at: Date.now(), taken, skipped, chars: chars + skipped.reduce((n, s) => n + s.length, 0) };
  listCache.set(cacheKey, listing);
  return ok(listing);
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
    return renderCallResult(result.data, `DVMCP ${this.definition.name}`);
  }
}

/** The tools of one DVMCP server; every failure is a value. */
export async function connectDvmcpServer(config: DvmcpServerConfig, options: DvmcpToolOptions, signal?: AbortSignal): Promise<Result<{ serverId: string; tools: Tool[]; skipped: string[] }, string>> {
  const prefix = `DVMCP server ${config.server}`;
  const client = await options.client();
  const target: DvmcpTarget = { provider: config.provider, serverId: config.server, encrypt: config.encrypt };
  const listed = await listTools(client, config, target, `${options.agent}:${config.provider}:${config.server}:${config.encrypt ?? 'default'}`, options.listTimeoutMs ?? DVMCP_TOOL_DEFAULTS.listTimeoutMs, signal);
  if (!listed.ok) return err(`${prefix}: ${listed.error}`);
  const callTimeoutMs = options.callTimeoutMs ?? DVMCP_TOOL_DEFAULTS.callTimeoutMs;
  const tools = listed.value.taken.map((t) => new DvmcpTool(t.definition, t.remoteName, target, client, callTimeoutMs));
  return ok({ serverId: config.server, tools, skipped: [...listed.value.skipped] });
}
