// An agent's MCP server headers at rest (usually secrets: `Authorization: Bearer …`): sealed per
// server with the one rule of workers/common/secrets.ts (as the bridge seals its servers'), bound
// to `<agent>/mcp/<server id>` so that a sealed blob opens for no other agent or server. The API
// seals them as it stores the config (create, and a PATCH with `mcp_servers`, which replaces the
// list: a server given without `headers` has none); the agent opens a server's headers when it
// connects to that server (AgentStore.mcpHeaders); configs stored before sealing keep working
// (plain headers read as they are) and the agent's watchdog seals them (AgentStore.sealPlainHeaders).

import { sealHeaders } from '../common/secrets.js';
import type { StoredAgent, StoredMcpServer } from './config.js';
import type { AgentToolsConfig } from './tools/registry.js';

/** What a server's sealed headers are bound to: the agent and the server id. */
export const mcpHeadersBinding = (agent: string, serverId: string): string => `${agent}/mcp/${serverId}`;

interface McpServerInput {
  id: string;
  url: string;
  headers?: Record<string, string>;
}

/** `servers` as stored by `agent`: each one's headers sealed (none: no `sealed_headers`). */
export async function sealMcpServers(servers: readonly McpServerInput[], agent: string, secret: string): Promise<StoredMcpServer[]> {
  return Promise.all(
    servers.map(async ({ id, url, headers }) => {
      const sealed = await sealHeaders(headers ?? {}, mcpHeadersBinding(agent, id), secret);
      return sealed === '' ? { id, url } : { id, url, sealed_headers: sealed };
    }),
  );
}

/** The agent's tool config, each MCP server's headers opened by `open` when the agent connects to that server, not before. */
export function toolsConfig(c: StoredAgent, open: (s: StoredMcpServer) => Promise<Record<string, string>>): AgentToolsConfig {
  return { ...c, mcp_servers: c.mcp_servers?.map((s) => ({ id: s.id, url: s.url, headers: () => open(s) })) };
}
