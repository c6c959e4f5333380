// What a hosted agent exposed as a DVMCP server says about itself: its server profile (d = the
// configured server id, name/about/picture of the agent), what it answers to initialize (tools
// only), its one tool `ask`, and the announcements (31316, 31317) and their NIP-09 deletion (when
// the settings change, the agent is deleted, or its owner is removed: dvmcpWithdrawal). Pure.

import { z } from 'zod';
import { announcementDeletion, LISTS, listAnnouncement, OWNER_REMOVED_REASON, serverAnnouncement, type InitializeInfo, type ServerProfile } from '../../src/shared/dvmcp.js';
import type { EventTemplate } from '../../src/shared/relay-types.js';
import type { DvmcpSettings, StoredAgent } from './config.js';
import { hasLoneSurrogate } from '../../src/shared/json-cut.js';

/** The MCP protocol version the agent's server speaks (the DVMCP spec's). */
export const MCP_PROTOCOL_VERSION = '2025-03-26';
export const ASK_TOOL = 'ask';
/** Longest `session` argument of `ask`. */
export const MAX_SESSION_CHARS = 128;

/** The arguments of `ask` (its input schema says the same). */
export const AskArgsSchema = z.object({
  message: z.string({ error: 'message must be a string' }).min(1, 'message must not be empty'),
  // Kept in SQLite, where a lone surrogate comes back as U+FFFD: two such sessions would be one conversation.
  session: z
    .string({ error: 'session must be a string' })
    .min(1, 'session must not be empty')
    .max(MAX_SESSION_CHARS, `session is at most ${MAX_SESSION_CHARS} characters`)
    .refine((s) => !hasLoneSurrogate(s), 'session must be valid Unicode (it has a lone surrogate)')
    .optional(),
});
export type AskArgs = z.infer<typeof AskArgsSchema>;

type Described = Pick<StoredAgent, 'name' | 'about' | 'picture'>;

export function serverProfile(a: Described, s: DvmcpSettings): ServerProfile {
  return { id: s.server_id, name: a.name, about: a.about, picture: a.picture, encryption: s.encryption };
}

export function initializeInfo(a: Described): InitializeInfo {
  return {
    protocolVersion: MCP_PROTOCOL_VERSION,
    capabilities: { tools: {} },
    serverInfo: { name: a.name, version: '1.0.0' },
    ...(a.about ? { instructions: a.about } : {}),
  };
}

export function askTool(a: Described): Record<string, unknown> {
  return {
    name: ASK_TOOL,
    description: a.about ? `Ask ${a.name}: ${a.about}` : `Ask ${a.name}, a hosted AI agent, and get its answer.`,
    inputSchema: {
      type: 'object',
      properties: {
        message: { type: 'string', description: 'What to ask the agent.' },
        session: { type: 'string', maxLength: MAX_SESSION_CHARS, description: 'A conversation name: asks in the same session see the earlier turns (default "default").' },
      },
      required: ['message'],
    },
  };
}

const TOOLS_LIST = LISTS.find((l) => l.method === 'tools/list')!;

/** The settings of an agent's DVMCP server when it is announced (enabled and public). */
const announced = (a: Pick<StoredAgent, 'dvmcp'>): DvmcpSettings | undefined => (a.dvmcp?.enabled && a.dvmcp.public ? a.dvmcp : undefined);

/** The 31316 and 31317 of an agent whose DVMCP server is enabled and public (none otherwise). */
export function dvmcpAnnouncements(a: Described & Pick<StoredAgent, 'dvmcp'>): EventTemplate[] {
  const s = announced(a);
  if (!s) return [];
  return [serverAnnouncement(serverProfile(a, s), initializeInfo(a)), listAnnouncement(s.server_id, TOOLS_LIST, [askTool(a)])];
}

/** The NIP-09 deletion of what an agent whose owner was removed announces (undefined: nothing). */
export function dvmcpWithdrawal(agent: string, a: Pick<StoredAgent, 'dvmcp'>): EventTemplate | undefined {
  const s = announced(a);
  return s && announcementDeletion(agent, s.server_id, OWNER_REMOVED_REASON);
}

/**
 * The NIP-09 deletion due when an agent's settings change from `before` to `after` (undefined: the
 * agent is removed): what was announced and no longer is, or is under another server id.
 */
export function dvmcpDeletion(agent: string, before: Pick<StoredAgent, 'dvmcp'>, after: Pick<StoredAgent, 'dvmcp'> | undefined): EventTemplate | undefined {
  const was = announced(before);
  if (!was) return undefined;
  const now = after?.dvmcp;
  if (after && announced(after)?.server_id === was.server_id) return undefined;
  const reason = after === undefined ? 'agent deleted' : now?.enabled ? 'server made private or renamed' : 'DVMCP server disabled';
  return announcementDeletion(agent, was.server_id, reason);
}
