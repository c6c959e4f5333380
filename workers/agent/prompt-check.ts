// What a claimed prompt must be to run, checked in order on its decrypted content: NIP-44
// decryption, JSON, the NIP-XX prompt schema, max_prompt_bytes, the provider, the model
// (negotiated with the agent's models), the tool schema version and the session's turn limit.
// Each problem is the NIP-XX error the run ends with. And what a cancel's content must be. Pure.

import { err, ok, type Result } from '../../src/shared/errors.js';
import type { DecryptError } from '../../src/shared/nip44.js';
import { CancelSchema, PromptSchema, type ErrorCode, type Prompt } from '../../src/shared/nip-xx.js';
import type { StoredAgent } from './config.js';
import { supportedModels, TOOL_SCHEMA_VERSION } from './info.js';
import type { ProviderName } from './providers/index.js';
import { negotiateModel } from './runtime.js';
import { utf8Bytes } from '../../src/shared/json-cut.js';

export interface PromptProblem {
  code: ErrorCode;
  message: string;
}

/** `turns` is read only when every other check passed. */
export function checkPrompt(
  text: Result<string, DecryptError>,
  c: Pick<StoredAgent, 'models' | 'default_model' | 'limits'> & { provider: ProviderName },
  turns: () => number,
): Result<{ prompt: Prompt; model: string }, PromptProblem> {
  const fail = (code: ErrorCode, message: string) => err({ code, message });
  if (!text.ok) return fail('PARSE_ERROR', `the prompt could not be decrypted with NIP-44 (${text.error})`);
  let json: unknown;
  try {
    json = JSON.parse(text.value);
  } catch {
    return fail('PARSE_ERROR', 'the decrypted prompt is not JSON');
  }
  const parsed = PromptSchema.safeParse(json);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    return fail('INVALID_SCHEMA', `prompt: ${issue?.path.join('.') || 'payload'}: ${issue?.message ?? 'invalid'}`);
  }
  const prompt: Prompt = parsed.data;
  const bytes = utf8Bytes(prompt.message);
  if (bytes > c.limits.max_prompt_bytes) {
    return fail('INVALID_SCHEMA', `the message is ${bytes} bytes; this agent accepts at most ${c.limits.max_prompt_bytes} (max_prompt_bytes)`);
  }
  if (prompt.provider && prompt.provider !== c.provider) {
    return fail('UNSUPPORTED_MODEL', `provider ${JSON.stringify(prompt.provider)} is not available; this agent uses ${c.provider}`);
  }
  const { models, defaultModel } = supportedModels(c);
  const model = negotiateModel(prompt, models, defaultModel);
  if (!model.ok) return fail('UNSUPPORTED_MODEL', model.message);
  if (prompt.tool_schema_version !== undefined && prompt.tool_schema_version !== TOOL_SCHEMA_VERSION) {
    return fail('UNSUPPORTED_SCHEMA_VERSION', `tool_schema_version ${prompt.tool_schema_version} is not supported; this agent uses ${TOOL_SCHEMA_VERSION}`);
  }
  if (turns() >= c.limits.max_session_turns) {
    return fail('SESSION_LIMIT', `this session reached ${c.limits.max_session_turns} turns; start a new session (s tag)`);
  }
  return ok({ prompt, model: model.model });
}

/** Whether a decrypted cancel payload is a NIP-XX cancel (anything else is ignored). */
export function isCancel(text: Result<string, DecryptError>): boolean {
  if (!text.ok) return false;
  try {
    return CancelSchema.safeParse(JSON.parse(text.value)).success;
  } catch {
    return false;
  }
}
