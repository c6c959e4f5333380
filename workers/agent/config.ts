// Agent configuration: the management API's request bodies (zod) and the stored form, with the
// defaults a hosted agent runs with. An agent's relay URLs are public (its relay list, kind 10002):
// one with a query string or fragment, where a relay's access token would sit, is refused; one
// stored before that rule is still dialled, but neither published nor logged whole. A name in
// `models` (and `default_model`) is at most MODEL_NAME_MAX characters: each is a key of the owner's usage rows in the
// deployment's one Accounts object (workers/accounts/accounts-do.ts, which cuts a longer one).

import { z } from 'zod';
import { THINKING_LEVELS } from '../../src/shared/nip-xx.js';
import { parsePubkey } from '../../src/shared/keys.js';
import { shardUrlOf } from '../../src/shared/shard-url.js';
import { SERVER_ID } from '../../src/shared/dvmcp.js';
import { BUILTIN_TOOL_NAMES } from './tools/registry.js';
import { mcpHeadersSchema } from '../common/mcp-headers-schema.js';
import type { RouterBindings } from '../common/shards.js';
import { servedOrigin } from '../common/public-url.js';

const pubkeyList = z
  .array(z.string())
  .transform((list, ctx) => {
    const out: string[] = [];
    for (const s of list) {
      const hex = parsePubkey(s);
      if (!hex) ctx.addIssue({ code: 'custom', message: `not a pubkey (64-hex or npub): ${s.slice(0, 80)}` });
      else out.push(hex);
    }
    return out;
  });

/** Whether a relay URL may be published and logged as it is: no query string or fragment (`?`, `#`). */
export const isPublicRelayUrl = (url: string): boolean => !/[?#]/.test(url);

/** A relay URL as logs show it: without its query string or fragment (see the header). */
export const relayLabel = (url: string): string => url.replace(/[?#][\s\S]*$/, '');

const relayUrl = z
  .string()
  .regex(/^wss?:\/\/[^\s]+$/, 'relays must be ws:// or wss:// URLs')
  .refine(isPublicRelayUrl, "relays may not have a query string or fragment (?… or #…): an agent's relays are published in its relay list (kind 10002), which anyone can read");

export const LimitsSchema = z.strictObject({
  /** Largest prompt message accepted, in UTF-8 bytes (advertised as ai.info max_prompt_bytes). */
  max_prompt_bytes: z.number().int().min(1).max(1_000_000).default(32_000),
  /** History kept per session, in estimated tokens (advertised as max_context_tokens). */
  max_context_tokens: z.number().int().min(256).max(2_000_000).default(32_000),
  /** Prompts per sender per minute. */
  prompts_per_minute: z.number().int().min(1).max(10_000).default(20),
  /** Prompts per minute across all senders (the agent's total). */
  agent_prompts_per_minute: z.number().int().min(1).max(100_000).default(60),
  /** Runs in progress at once. */
  max_concurrent_runs: z.number().int().min(1).max(100).default(4),
  /** Model tokens (input + output, from the provider's usage) per UTC day. */
  max_tokens_per_day: z.number().int().min(1).max(1_000_000_000).default(1_000_000),
  /** Turns (prompts) per session before SESSION_LIMIT. */
  max_session_turns: z.number().int().min(1).max(100_000).default(200),
  /** Model/tool round trips per run. */
  max_tool_steps: z.number().int().min(1).max(50).default(8),
  /** Tool calls run per model response (step); further calls of that response are not run. */
  max_tool_calls_per_step: z.number().int().min(1).max(64).default(16),
  /** Wall-clock limit of a run, in seconds. */
  max_run_seconds: z.number().int().min(1).max(900).default(120),
  max_output_tokens: z.number().int().min(1).max(200_000).default(4096),
});
export type AgentLimits = z.infer<typeof LimitsSchema>;

const withoutDefaults = <K extends string>(shape: Record<K, z.ZodDefault<z.ZodNumber>>): Record<K, z.ZodNumber> =>
  Object.fromEntries(Object.entries<z.ZodDefault<z.ZodNumber>>(shape).map(([k, v]) => [k, v.unwrap()])) as Record<K, z.ZodNumber>;
/**
 * The limits a PATCH gives: the same rules, without the defaults, so that a limit not given keeps
 * its stored value (zod fills the defaults of a partial schema).
 */
export const LimitsPatchSchema = z.strictObject(withoutDefaults(LimitsSchema.shape)).partial();

export const McpServerSchema = z.strictObject({
  id: z.string().regex(/^[a-zA-Z0-9_-]{1,32}$/, 'mcp server ids are 1-32 characters of [a-zA-Z0-9_-]'),
  url: z.url({ error: 'mcp server url must be a URL' }),
  headers: mcpHeadersSchema('the agent').optional(),
});

/** A DVMCP server on Nostr: its provider (64-hex or npub, stored as hex) and server id (`d`). */
export const DvmcpServerSchema = z.strictObject({
  provider: z.string().transform((s, ctx) => {
    const hex = parsePubkey(s);
    if (!hex) ctx.addIssue({ code: 'custom', message: `not a pubkey (64-hex or npub): ${s.slice(0, 80)}` });
    return hex ?? '';
  }),
  server: z.string().regex(SERVER_ID, 'dvmcp server ids are 1-64 characters of [a-zA-Z0-9_.-]'),
  /**
   * Absent (the default): requests gift-wrapped, the server refused when its announcement says it
   * does not support encryption; true: gift-wrapped without reading the announcement; false: plain,
   * so the calls, their arguments and results are public (anyone on the relay reads 25910/26910).
   */
  encrypt: z.boolean().optional(),
});
/** One of `dvmcp_servers` as stored (the provider as hex). */
export type DvmcpServerConfig = z.infer<typeof DvmcpServerSchema>;

/** The agent exposed as a DVMCP server (docs/AGENTS.md "The agent as a DVMCP server"). */
export const DvmcpSettingsSchema = z.strictObject({
  enabled: z.boolean(),
  /** `d` of its 31316 and `s` of the requests to it. */
  server_id: z.string().regex(SERVER_ID, 'server_id is 1-64 characters of [a-zA-Z0-9_.-]').default('agent'),
  /** Announced (31316/31317) on the agent's relays; a private server answers only who knows its pubkey. */
  public: z.boolean().default(true),
  /** Whether gift-wrapped requests are answered (announced as support_encryption). */
  encryption: z.boolean().default(true),
});
export type DvmcpSettings = z.infer<typeof DvmcpSettingsSchema>;

export const PROVIDERS = ['openai', 'anthropic', 'workers-ai', 'echo'] as const;

/** Characters a model name of `models` has at most (see the header). */
export const MODEL_NAME_MAX = 200;

const fields = {
  name: z.string().min(1).max(100),
  about: z.string().max(2000).optional(),
  /** At most 2048 characters, as a bridge server's: it goes in the agent's kind 0 and 31316 (each one event). */
  picture: z.url().max(2048).optional(),
  system_prompt: z.string().max(100_000).optional(),
  provider: z.enum(PROVIDERS).optional(),
  models: z.array(z.string().min(1).max(MODEL_NAME_MAX, `model names are at most ${MODEL_NAME_MAX} characters`)).min(1).max(50).optional(),
  default_model: z.string().min(1).max(MODEL_NAME_MAX, `model names are at most ${MODEL_NAME_MAX} characters`).optional(),
  thinking: z.enum(THINKING_LEVELS).optional(),
  tools: z.array(z.enum(BUILTIN_TOOL_NAMES, { error: `built-in tools are ${BUILTIN_TOOL_NAMES.join(', ')}` })).max(50).optional(),
  web_fetch_hosts: z.array(z.string().min(1)).max(100).optional(),
  mcp_servers: z.array(McpServerSchema).max(10).optional(),
  dvmcp_servers: z.array(DvmcpServerSchema).max(10).optional(),
  allow: pubkeyList.optional(),
  block: pubkeyList.optional(),
  limits: LimitsSchema.partial().optional(),
  relays: z.array(relayUrl).max(10).optional(),
  dvmcp: DvmcpSettingsSchema.optional(),
  /** The owner's NIP-OA `auth` tag for the agent key, published on the agent's kind 0. */
  oa_auth: z
    .array(z.string())
    .length(4, 'oa_auth is a 4-element NIP-OA tag')
    .refine((t) => t[0] === 'auth', 'oa_auth must be an ["auth", owner, conditions, sig] tag')
    .optional(),
};

export const CreateAgentSchema = z.strictObject(fields);
export const UpdateAgentSchema = z.strictObject({ ...fields, name: fields.name.optional(), limits: LimitsPatchSchema.optional() });
export type CreateAgent = z.infer<typeof CreateAgentSchema>;
export type UpdateAgent = z.infer<typeof UpdateAgentSchema>;

/** An MCP server as the agent stores it: its headers sealed (mcp-headers.ts), never in clear. */
export interface StoredMcpServer {
  id: string;
  url: string;
  /** The headers sealed under EDGESTR_SECRET, bound to the agent and this id; absent: none. */
  sealed_headers?: string;
  /** Plain headers of a config stored before they were sealed: read as they are until the watchdog seals them. */
  headers?: Record<string, string>;
}

/** What the Agent Durable Object stores (the secret key separately, encrypted; MCP server headers sealed). */
export interface StoredAgent extends Omit<CreateAgent, 'limits' | 'mcp_servers'> {
  mcp_servers?: StoredMcpServer[];
  pubkey: string;
  owner: string;
  /**
   * Origin of the deployment the agent was created on (e.g. https://edgestr.example): its relay
   * URLs and NIP-42 are on servedOrigin of it (agentRelays); it stays one of its own hosts.
   */
  origin: string;
  /**
   * The provider the owner chose; absent: the deployment's default provider, resolved at each run
   * (so adding OPENAI_API_KEY later switches such agents from echo to the real model).
   */
  provider?: (typeof PROVIDERS)[number];
  limits: AgentLimits;
  created_at: number;
}

export const DEFAULT_LIMITS: AgentLimits = LimitsSchema.parse({});

/** Whether the agent is private: only the keys of its `allow` list may use it (admission.ts); its ai.info says less (info.ts). */
export const isPrivateAgent = <A extends Pick<StoredAgent, 'allow'>>(a: A): a is A & { allow: string[] } => a.allow !== undefined && a.allow.length > 0;

/**
 * The relays the agent uses: its owner's shard and the public shard on this deployment, at its
 * served origin (workers/common/public-url.ts `servedOrigin`: EDGESTR_PUBLIC_URL's when set, though it
 * was created on another), then its own, each once: one naming a shard of this deployment, at the
 * served origin or at the stored one, as that shard's URL at the served origin, whatever its
 * spelling (src/shared/shard-url.ts; a config stored before the API refused repeated shards may
 * list one twice).
 */
export function agentRelays(env: Pick<RouterBindings, 'EDGESTR_PUBLIC_URL'>, a: Pick<StoredAgent, 'origin' | 'owner' | 'relays'>): string[] {
  const origin = servedOrigin(env, a.origin);
  const ws = origin.replace(/^http/, 'ws');
  const shard = (relay: string): string | undefined => shardUrlOf(origin, relay) ?? shardUrlOf(a.origin, relay)?.replace(/^wss?:\/\/[^/]+/, ws);
  return [...new Set([`${ws}/r/${a.owner}`, `${ws}/`, ...(a.relays ?? []).map((relay) => shard(relay) ?? relay)])];
}
