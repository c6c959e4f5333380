// checkPrompt (workers/agent/prompt-check.ts) without an Agent: each check on a decrypted prompt,
// in its order, with the NIP-XX error the run ends with; and which cancel payloads count.
import { describe, expect, it } from 'vitest';
import { err, ok, type Result } from '../../src/shared/errors.js';
import type { DecryptError } from '../../src/shared/nip44.js';
import { NIPXX_VERSION } from '../../src/shared/nip-xx.js';
import { DEFAULT_LIMITS } from './config.js';
import { checkPrompt, isCancel } from './prompt-check.js';

const agent = {
  provider: 'openai' as const,
  models: ['gpt-a', 'gpt-b'],
  default_model: 'gpt-b',
  limits: { ...DEFAULT_LIMITS, max_prompt_bytes: 10, max_session_turns: 3 },
};
const text = (payload: object): Result<string, DecryptError> => ok(JSON.stringify({ ver: NIPXX_VERSION, ...payload }));

describe('checkPrompt', () => {
  it.each<[string, Result<string, DecryptError>, number, string, string]>([
    ['not decryptable', err('invalid MAC'), 0, 'PARSE_ERROR', 'the prompt could not be decrypted with NIP-44 (invalid MAC)'],
    ['not JSON', ok('{'), 0, 'PARSE_ERROR', 'the decrypted prompt is not JSON'],
    ['empty message', text({ message: '' }), 0, 'INVALID_SCHEMA', 'prompt: message: message must not be empty'],
    ['too long', text({ message: 'ééééééé' }), 0, 'INVALID_SCHEMA', 'the message is 14 bytes; this agent accepts at most 10 (max_prompt_bytes)'],
    ['another provider', text({ message: 'hi', provider: 'anthropic' }), 0, 'UNSUPPORTED_MODEL', 'provider "anthropic" is not available; this agent uses openai'],
    ['unknown model', text({ message: 'hi', model: 'x' }), 0, 'UNSUPPORTED_MODEL', 'model "x" is not supported; supported: gpt-a, gpt-b'],
    ['tool schema version', text({ message: 'hi', tool_schema_version: 2 }), 0, 'UNSUPPORTED_SCHEMA_VERSION', 'tool_schema_version 2 is not supported; this agent uses 1'],
    ['session full', text({ message: 'hi' }), 3, 'SESSION_LIMIT', 'this session reached 3 turns; start a new session (s tag)'],
  ])('%s', (_name, input, turns, code, message) => {
    expect(checkPrompt(input, agent, () => turns)).toEqual({ ok: false, error: { code, message } });
  });

  it('a valid prompt runs with the negotiated model (default, requested, or first supported fallback)', () => {
    const model = (p: object) => {
      const r = checkPrompt(text({ message: 'hi', ...p }), agent, () => 2);
      return r.ok ? r.value.model : r.error.code;
    };
    expect(model({})).toBe('gpt-b');
    expect(model({ model: 'gpt-a' })).toBe('gpt-a');
    expect(model({ model: 'x', fallback_models: ['y', 'gpt-a'] })).toBe('gpt-a');
  });

  it('reads the session turns only when every other check passed', () => {
    let reads = 0;
    checkPrompt(ok('{'), agent, () => ++reads);
    expect(reads).toBe(0);
  });
});

describe('isCancel', () => {
  it.each<[Result<string, DecryptError>, boolean]>([
    [text({ reason: 'user_cancel' }), true],
    [text({ reason: 'whatever' }), false],
    [ok('not json'), false],
    [err('invalid MAC'), false],
  ])('%j → %s', (input, want) => {
    expect(isCancel(input)).toBe(want);
  });
});
