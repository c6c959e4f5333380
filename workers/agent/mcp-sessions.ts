// The agent's MCP session cache (McpSessionCache, kept across runs by the agent Durable Object):
// keys `<serverId> <sender>` for a run's session (tools/mcp.ts mcpSessionKey with the run's
// sender as scope) and `<serverId>` for the agent's own listing (ai.info). A public agent's
// senders cost nothing to make, so they are grouped: the owner's keys and the listing form the
// protected group, which other senders' sessions never close; all other senders share at most
// AGENT_MCP_SESSIONS.others of the sessions, leaving the owner a reserve, and the owner's new
// session closes a stranger's idle one when the cache is full.

import { McpSessionCache } from '../common/mcp-session-cache.js';

/** An agent's MCP sessions in all, and at most how many of them are for senders other than its owner. */
export const AGENT_MCP_SESSIONS = { all: 32, others: 24 } as const;

/** The group of a session key: `owner` for `owner`'s runs and the listing (a key without a sender), else `others`. */
export function agentSessionGroup(key: string, owner: string | undefined): 'owner' | 'others' {
  const space = key.indexOf(' ');
  return space < 0 || key.slice(space + 1) === owner ? 'owner' : 'others';
}

/** The agent's cache; `owner()` is the agent's owner (undefined before the agent is created). */
export function agentMcpSessions(owner: () => string | undefined): McpSessionCache {
  return new McpSessionCache({
    maxSessions: AGENT_MCP_SESSIONS.all,
    groupOf: (key) => agentSessionGroup(key, owner()),
    maxPerGroup: AGENT_MCP_SESSIONS.others,
    protectedGroup: 'owner',
  });
}
