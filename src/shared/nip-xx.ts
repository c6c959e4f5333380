// NIP-XX "AI Agent Messages": kinds, payload schemas (zod), error codes, tag rules, and helpers to
// build and read the encrypted protocol events. Used by the hosted agent; the payload schemas also
// check the agent's outgoing payloads in tests (test/workers/agent-payloads.test.ts).

import { z } from 'zod';
import type { NostrEvent } from './event.js';
import { isHex64 } from './hex.js';
import { hasLoneSurrogate } from './json-cut.js';
import { err, ok, type Result } from './errors.js';
import { KIND } from './kinds.js';
import { soleRecipient } from './recipients.js';

export const NIPXX_VERSION = 1;

const ERROR_CODES = [
  'UNSUPPORTED_ENCRYPTION',
  'UNSUPPORTED_MODEL',
  'UNSUPPORTED_SCHEMA_VERSION',
  'CANCELLED',
  'RATE_LIMIT',
  'UNAUTHORIZED',
  'BLOCKED_SENDER',
  'MODEL_UNAVAILABLE',
  'SESSION_LIMIT',
  'PARSE_ERROR',
  'EMPTY_RESPONSE',
  'TOOL_ERROR',
  'INVALID_SCHEMA',
  'UNSUPPORTED_FEATURE',
  'INVALID_SEQUENCE',
  'INTERNAL_ERROR',
] as const;
export type ErrorCode = (typeof ERROR_CODES)[number];

const ver = z.literal(NIPXX_VERSION, { error: 'ver must be 1' });
export const THINKING_LEVELS = ['low', 'medium', 'high', 'max'] as const;

export const PromptSchema = z.looseObject({
  ver,
  message: z.string({ error: 'message must be a string' }).min(1, 'message must not be empty'),
  thinking: z.enum(THINKING_LEVELS, { error: 'thinking must be low, medium, high or max' }).optional(),
  provider: z.string().min(1).optional(),
  model: z.string().min(1, 'model must not be empty').optional(),
  tool_schema_version: z.number().int().min(1, 'tool_schema_version must be ≥ 1').optional(),
  fallback_models: z.array(z.string()).optional(),
});
export type Prompt = z.infer<typeof PromptSchema>;

export const CancelSchema = z.looseObject({
  ver,
  reason: z.enum(['user_cancel', 'timeout', 'policy']),
});

const UsageSchema = z.object({ input_tokens: z.number().int().min(0), output_tokens: z.number().int().min(0) });

export const ResponseSchema = z.looseObject({
  ver,
  text: z.string(),
  timestamp: z.number().int().min(0).optional(),
  usage: UsageSchema.optional(),
});

export const DeltaSchema = z.looseObject({
  ver,
  text: z.string(),
  seq: z.number().int().min(0).optional(),
  timestamp: z.number().int().min(0).optional(),
});
export type Delta = z.infer<typeof DeltaSchema>;

export const StatusSchema = z.looseObject({
  ver,
  state: z.enum(['thinking', 'tool_use', 'done']),
  progress: z.number().int().min(0).max(100).optional(),
  info: z.string().optional(),
});
export type Status = z.infer<typeof StatusSchema>;

export const ToolCallSchema = z.looseObject({
  ver,
  text: z.string().min(1).optional(),
  name: z.string().min(1).optional(),
  phase: z.enum(['start', 'result']).optional(),
  arguments: z.record(z.string(), z.unknown()).optional(),
  output: z.record(z.string(), z.unknown()).optional(),
  success: z.boolean().optional(),
  duration_ms: z.number().int().min(0).optional(),
  timestamp: z.number().int().min(0).optional(),
});

export const ErrorSchema = z.looseObject({
  ver,
  code: z.enum(ERROR_CODES),
  message: z.string().min(1),
  retry_after: z.number().int().min(1).optional(),
  details: z.record(z.string(), z.unknown()).optional(),
});

const ToolSchemaEntry = z.object({
  schema_version: z.number().int().min(1),
  description: z.string(),
  requires_approval: z.boolean().optional(),
  input_schema: z.record(z.string(), z.unknown()),
  output_schema: z.record(z.string(), z.unknown()).optional(),
});

export const InfoSchema = z.looseObject({
  ver,
  supports_streaming: z.boolean().optional(),
  supports_nip59: z.boolean().optional(),
  dvm_compatible: z.boolean().optional(),
  encryption: z.array(z.string()).refine((e) => e.includes('nip44'), 'encryption must contain nip44'),
  supported_models: z.array(z.string()).optional(),
  default_model: z.string().optional(),
  tool_names: z.array(z.string()),
  tool_schema_version: z.number().int().min(1).optional(),
  tool_schemas: z.record(z.string(), ToolSchemaEntry).optional(),
  max_prompt_bytes: z.number().int().min(1).optional(),
  max_context_tokens: z.number().int().min(1).optional(),
  pricing_hints: z.record(z.string(), z.unknown()).optional(),
});
export type AgentInfo = z.infer<typeof InfoSchema>;

export const AI_INFO_D = 'agent-info';

/**
 * Characters a session id (`s` tag) may have. NIP-XX sets no bound; every event of a run repeats
 * it, inside the NIP-44 payload of a gift-wrapped run, so an unbounded one could make none of them fit.
 */
export const MAX_SESSION_CHARS = 256;

/**
 * Characters the hosted agent's model writes in one run at most (its answers' text, tool names and
 * arguments; workers/agent/providers/limits.ts). A run's streamed text (its deltas) is part of it,
 * so clients keep and show at most this much of a run's deltas (delta-order.ts).
 */
export const MAX_RUN_OUTPUT_CHARS = 2_097_152;

/**
 * Why a session id cannot be kept: one with a lone surrogate has no UTF-8 form, and storage
 * (SQLite) gives it back as U+FFFD, a key that matches nothing ("chat\ud800" and "chat\ud801" alike).
 */
export const SESSION_NOT_UNICODE = 'the session id (s tag) must be valid Unicode (it has a lone surrogate)';

const usableSession = (s: string): boolean => s.length > 0 && s.length <= MAX_SESSION_CHARS && !hasLoneSurrogate(s);

/** The session of an event: its `s` tag (within MAX_SESSION_CHARS, valid Unicode), or the deterministic default `sender:<hex>`. */
export const sessionOf = (e: Pick<NostrEvent, 'tags' | 'pubkey'>): string =>
  e.tags.find((t) => t[0] === 's' && typeof t[1] === 'string' && usableSession(t[1]))?.[1] ?? `sender:${e.pubkey}`;

/** Why an incoming protocol event's tags are unusable: an error code and a message. */
export interface TagProblem {
  code: 'INVALID_SCHEMA' | 'UNSUPPORTED_ENCRYPTION';
  message: string;
}

/** Tag rules for a prompt (25802) or cancel (25806) addressed to `agent` (one `p`, naming it: recipients.ts). */
export function checkRequestTags(e: Pick<NostrEvent, 'kind' | 'tags'>, agent: string): Result<{ runId?: string }, TagProblem> {
  if (!e.tags.some((t) => t[0] === 'p' && t[1] === agent)) return err({ code: 'INVALID_SCHEMA', message: 'missing p tag for this agent' });
  if (!soleRecipient(e, agent)) return err({ code: 'INVALID_SCHEMA', message: 'more than one p tag: a prompt or cancel names this agent alone' });
  const enc = e.tags.filter((t) => t[0] === 'encryption');
  if (enc.length === 0) return err({ code: 'INVALID_SCHEMA', message: 'missing encryption tag' });
  if (!enc.some((t) => t[1] === 'nip44')) {
    return err({ code: 'UNSUPPORTED_ENCRYPTION', message: `unsupported encryption ${JSON.stringify(enc[0]![1] ?? '')}; this agent supports nip44` });
  }
  const long = e.tags.find((t) => t[0] === 's' && typeof t[1] === 'string' && t[1].length > MAX_SESSION_CHARS);
  if (long) return err({ code: 'INVALID_SCHEMA', message: `the session id (s tag) is ${long[1]!.length} characters; at most ${MAX_SESSION_CHARS}` });
  if (e.tags.some((t) => t[0] === 's' && typeof t[1] === 'string' && hasLoneSurrogate(t[1]))) return err({ code: 'INVALID_SCHEMA', message: SESSION_NOT_UNICODE });
  if (e.kind === KIND.AI_CANCEL) {
    const root = e.tags.find((t) => t[0] === 'e' && t[3] === 'root') ?? e.tags.find((t) => t[0] === 'e');
    if (!root || !isHex64(root[1])) return err({ code: 'INVALID_SCHEMA', message: 'missing e tag with the prompt id' });
    return ok({ runId: root[1] });
  }
  return ok({});
}

/** Tags of an agent → client event of a run. */
export function runTags(client: string, runId: string, session: string, extra: string[][] = []): string[][] {
  return [['p', client], ['e', runId, '', 'root'], ['s', session], ['encryption', 'nip44'], ...extra];
}
