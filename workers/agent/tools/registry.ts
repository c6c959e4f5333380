// The agent's tool set, built from its config: the built-in tools it names (`tools`), the
// tools of its MCP servers (`mcp_servers`, connected in parallel; see mcp.ts for the naming
// rule) and of its DVMCP servers (`dvmcp_servers`, over Nostr; dvmcp.ts, same naming rule). It lists the definitions (for ai.info tool_names / tool_schemas and for the model) and
// runs a tool by name: arguments are checked against the tool's input schema first (args.ts; the
// only check: the tools trust their typed input).
//
// Building never fails: the agent runs with the tools it can have, and `problems` lists the rest
// (an unknown built-in name, a repeated MCP server id, an MCP or DVMCP server that cannot be reached,
// skipped MCP tools, invalid web_fetch_hosts entries, an empty web_fetch allowlist, tools over
// the limit of MAX_TOOLS).
//
// A name that is not in the set (the model may call a tool it remembers from the conversation's
// history) is answered:
// - when it is a name of a configured MCP or DVMCP server that could not be reached or was skipped
//   (remote-tools.ts isToolNameOf): a failed tool call "tool <name> is unavailable: its server <id>
//   could not be used for this run (the agent's owner can see why)", so the run goes on and the
//   model can say so; the server's problem itself goes to the owner alone (`problems`, in the run's
//   NIP-AO frames), as it may name the operator's hosts or settings; the name is shown as run events
//   show it (event-fit.ts shownToolName);
// - otherwise `{ok: false, unknown: true}` (UnknownTool), so that the runtime answers
//   UNSUPPORTED_FEATURE, with `detail` for the owner listing `problems` when there are any.

import { argsCheck, type ArgsCheck } from './args.js';
import { CalculatorTool } from './calculator.js';
import { connectDvmcpServer, type DvmcpServerConfig, type DvmcpToolOptions } from './dvmcp.js';
import { connectMcpServer, type McpConnection, type McpOptions, type McpServerConfig } from './mcp.js';
import { isToolNameOf } from './remote-tools.js';
import { fail } from './result.js';
import type { Tool, ToolDefinition, ToolResult, UnknownTool } from './types.js';
import { WebFetchTool, type WebFetchOptions } from './web-fetch.js';
import { shownToolName } from '../event-fit.js';
import { errorMessage } from '../../../src/shared/errors.js';

export const BUILTIN_TOOL_NAMES = ['calculator', 'web_fetch'] as const;
export type BuiltinToolName = (typeof BUILTIN_TOOL_NAMES)[number];

/** Most tools offered to the model (OpenAI accepts at most 128 functions per request). */
export const MAX_TOOLS = 128;

/** The tool part of an agent's config. */
export interface AgentToolsConfig {
  /** Built-in tools by name (BUILTIN_TOOL_NAMES). */
  tools?: readonly string[];
  /** Remote MCP servers whose tools the agent may call. */
  mcp_servers?: readonly McpServerConfig[];
  /** DVMCP servers on Nostr whose tools the agent may call. */
  dvmcp_servers?: readonly DvmcpServerConfig[];
  /** Hosts web_fetch may fetch: "example.com" or "*.example.com"; empty = web_fetch refuses every call. */
  web_fetch_hosts?: readonly string[];
}

export interface RegistryOptions {
  /** web_fetch limits and the deployment's outbound policy (`policy`). */
  webFetch?: Omit<WebFetchOptions, 'allowlist'>;
  mcp?: McpOptions;
  /** The agent's DVMCP client; without it, DVMCP servers are reported in `problems`. */
  dvmcp?: DvmcpToolOptions;
  /** Aborts connecting to the MCP servers. */
  signal?: AbortSignal;
}

/** A tool call's result, or: no tool of that name in this agent's set. */
export type RegistryRunResult = ToolResult | UnknownTool;

/**
 * What the model (and so whoever prompted the run) reads for a tool of servers that could not be
 * used: their ids, not their problems, which may name the operator's hosts or settings (the outbound
 * policy's allowlist, EDGESTR_SECRET); the owner reads those in the run's NIP-AO turn_started frame
 * (`tool_problems`).
 */
const unavailableText = (serverIds: string[]): string =>
  `${serverIds.length === 1 ? `its server ${serverIds[0]} could` : `its servers ${serverIds.join(', ')} could`} not be used for this run (the agent's owner can see why)`;

/** A configured MCP or DVMCP server whose tools the agent does not have, and why. */
interface UnavailableServer {
  serverId: string;
  problem: string;
}

export interface ToolRegistry {
  /** The definitions of every tool, built-ins first, in config order. */
  definitions(): ToolDefinition[];
  has(name: string): boolean;
  /** Validates the arguments against the tool's input schema, then runs it. Never throws. */
  run(name: string, args: unknown, signal: AbortSignal): Promise<RegistryRunResult>;
  /** What did not work out while building (see the header). */
  readonly problems: readonly string[];
  /** Closes the MCP sessions. */
  close(): Promise<void>;
}

class Registry implements ToolRegistry {
  private readonly byName = new Map<string, { tool: Tool; check: ArgsCheck }>();

  constructor(
    tools: readonly Tool[],
    readonly problems: string[],
    private readonly connections: readonly McpConnection[],
    private readonly unavailable: readonly UnavailableServer[],
  ) {
    for (const tool of tools) {
      const name = tool.definition.name;
      if (this.byName.has(name)) problems.push(`tool ${name} skipped: the name is already taken`);
      else if (this.byName.size >= MAX_TOOLS) problems.push(`tool ${name} skipped: more than ${MAX_TOOLS} tools`);
      else this.byName.set(name, { tool, check: argsCheck(tool.definition.input_schema) });
    }
  }

  definitions(): ToolDefinition[] {
    return [...this.byName.values()].map(({ tool }) => tool.definition);
  }

  has(name: string): boolean {
    return this.byName.has(name);
  }

  async run(name: string, args: unknown, signal: AbortSignal): Promise<RegistryRunResult> {
    const entry = this.byName.get(name);
    if (!entry) return this.missing(name);
    const checked = entry.check(args);
    if (!checked.ok) return fail(checked.error);
    try {
      return await entry.tool.run(checked.value, { signal });
    } catch (e) {
      return fail(`${name} failed: ${errorMessage(e)}`); // a tool must not throw; keep the run alive if one does
    }
  }

  /** The answer for a name not in the set (see the header). */
  private missing(name: string): ToolResult | UnknownTool {
    const servers = new Set(this.unavailable.filter((s) => isToolNameOf(name, s.serverId)).map((s) => s.serverId));
    if (servers.size > 0) return fail(`tool ${shownToolName(name)} is unavailable: ${unavailableText([...servers])}`);
    const detail = this.problems.length > 0 ? { detail: `unknown tool ${JSON.stringify(shownToolName(name))}; the agent's tool problems: ${this.problems.join('; ')}` } : {};
    return { ok: false, unknown: true, error: `unknown tool "${name}"`, ...detail };
  }

  async close(): Promise<void> {
    await Promise.all(this.connections.map((c) => c.close()));
  }
}

/** Builds the tool set of an agent (never fails; see `problems`). */
export async function buildToolRunner(config: AgentToolsConfig, options: RegistryOptions = {}): Promise<ToolRegistry> {
  const problems: string[] = [];
  const tools: Tool[] = [];
  for (const name of new Set(config.tools ?? [])) {
    if (name === 'calculator') {
      tools.push(new CalculatorTool());
    } else if (name === 'web_fetch') {
      const allowlist = config.web_fetch_hosts ?? [];
      const webFetch = new WebFetchTool({ ...options.webFetch, allowlist });
      for (const entry of webFetch.invalidAllowlistEntries) {
        problems.push(`web_fetch: host pattern "${entry}" is not valid, ignored`);
      }
      if (allowlist.length === webFetch.invalidAllowlistEntries.length) {
        problems.push('web_fetch: no allowed hosts, every call is refused');
      }
      tools.push(webFetch);
    } else {
      problems.push(`unknown built-in tool "${name}" skipped (known: ${BUILTIN_TOOL_NAMES.join(', ')})`);
    }
  }

  const servers: McpServerConfig[] = [];
  const ids = new Set<string>();
  for (const s of config.mcp_servers ?? []) {
    if (ids.has(s.id)) problems.push(`MCP server ${s.id}: the id is used twice, the second one is skipped`);
    else servers.push(s);
    ids.add(s.id);
  }
  const dvmcpServers = config.dvmcp_servers ?? [];
  const dvmcp = options.dvmcp;
  const unavailable: UnavailableServer[] = [];
  const unavailableServers = (list: readonly string[], problem: string): void => {
    problems.push(problem);
    for (const serverId of list) unavailable.push({ serverId, problem });
  };
  if (dvmcpServers.length > 0 && !dvmcp) unavailableServers(dvmcpServers.map((s) => s.server), 'DVMCP servers skipped: no relay connection for DVMCP here');
  const [connected, dvmcpConnected] = await Promise.all([
    Promise.all(servers.map(async (s) => ({ id: s.id, c: await connectMcpServer(s, options.mcp, options.signal) }))),
    dvmcp ? Promise.all(dvmcpServers.map(async (s) => ({ id: s.server, c: await connectDvmcpServer(s, dvmcp, options.signal) }))) : [],
  ]);
  const connections: McpConnection[] = [];
  for (const { id, c } of connected) {
    if (!c.ok) {
      unavailableServers([id], c.error);
      continue;
    }
    connections.push(c.value);
    tools.push(...c.value.tools);
    for (const s of c.value.skipped) problems.push(`MCP server ${c.value.serverId}: skipped ${s}`);
  }
  for (const { id, c } of dvmcpConnected) {
    if (!c.ok) {
      unavailableServers([id], c.error);
      continue;
    }
    tools.push(...c.value.tools);
    for (const s of c.value.skipped) problems.push(`DVMCP server ${c.value.serverId}: skipped ${s}`);
  }
  return new Registry(tools, problems, connections, unavailable);
}
