// What a hosted agent publishes about itself: ai.info (kind 31340, fixed `d`), its kind 0 profile
// (with the owner's NIP-OA tag when it has one) and its relay list (kind 10002: the relays whose
// URL may be public, config.ts `isPublicRelayUrl`); and the deletion of all three when the agent is removed.
// ai.info reaches every relay of the agent (the public shard too), so it says only what anyone may
// read: a private agent (an `allow` list: only those keys may prompt it) publishes `tool_names` and
// no `tool_schemas` (optional in NIP-XX): the descriptions and schemas of its tools, those of its
// authenticated MCP servers included, are not for strangers; a public agent publishes each tool's
// schema with its published description (web_fetch's names no host; the model's own definition does).

import { AI_INFO_D, NIPXX_VERSION, type AgentInfo } from '../../src/shared/nip-xx.js';
import { KIND } from '../../src/shared/kinds.js';
import type { EventTemplate } from '../../src/shared/relay-client.js';
import { isPrivateAgent, isPublicRelayUrl, type StoredAgent } from './config.js';
import type { ToolDefinition } from './tools/types.js';

export const TOOL_SCHEMA_VERSION = 1;

export function supportedModels(a: Pick<StoredAgent, 'models' | 'default_model' | 'provider'>): { models: string[]; defaultModel: string } {
  const models = a.models && a.models.length > 0 ? a.models : [a.provider === 'echo' ? 'echo' : (a.default_model ?? 'default')];
  const defaultModel = a.default_model && models.includes(a.default_model) ? a.default_model : models[0]!;
  return { models, defaultModel };
}

/** Each tool's schema as ai.info publishes it (its published description when it has one). */
const toolSchemas = (tools: readonly ToolDefinition[]): NonNullable<AgentInfo['tool_schemas']> =>
  Object.fromEntries(
    tools.map((t) => [
      t.name,
      { schema_version: t.schema_version, description: t.published_description ?? t.description, requires_approval: t.requires_approval, input_schema: t.input_schema },
    ]),
  );

export function aiInfo(a: StoredAgent, tools: readonly ToolDefinition[]): AgentInfo {
  const { models, defaultModel } = supportedModels(a);
  return {
    ver: NIPXX_VERSION,
    supports_streaming: true,
    supports_nip59: true,
    dvm_compatible: false,
    encryption: ['nip44'],
    supported_models: models,
    default_model: defaultModel,
    tool_names: tools.map((t) => t.name),
    tool_schema_version: TOOL_SCHEMA_VERSION,
    ...(isPrivateAgent(a) ? {} : { tool_schemas: toolSchemas(tools) }),
    max_prompt_bytes: a.limits.max_prompt_bytes,
    max_context_tokens: a.limits.max_context_tokens,
  };
}

export function infoTemplates(a: StoredAgent, tools: readonly ToolDefinition[], relays: readonly string[], now: number): EventTemplate[] {
  const profile: Record<string, string> = { name: a.name };
  if (a.about) profile['about'] = a.about;
  if (a.picture) profile['picture'] = a.picture;
  return [
    { kind: KIND.AI_INFO, created_at: now, tags: [['d', AI_INFO_D]], content: JSON.stringify(aiInfo(a, tools)) },
    { kind: KIND.METADATA, created_at: now, tags: a.oa_auth ? [[...a.oa_auth]] : [], content: JSON.stringify(profile) },
    { kind: KIND.RELAY_LIST, created_at: now, tags: relays.filter(isPublicRelayUrl).map((r) => ['r', r]), content: '' },
  ];
}

/** The NIP-09 deletion of what infoTemplates published (by address). */
export function deletionTemplate(a: Pick<StoredAgent, 'pubkey'>, now: number): EventTemplate {
  return {
    kind: KIND.DELETION,
    created_at: now,
    content: 'agent deleted',
    tags: [['a', `${KIND.AI_INFO}:${a.pubkey}:${AI_INFO_D}`], ['a', `${KIND.METADATA}:${a.pubkey}:`], ['a', `${KIND.RELAY_LIST}:${a.pubkey}:`]],
  };
}
