import { describe, expect, it } from 'vitest';
import { DEFAULT_LIMITS, type StoredAgent } from './config.js';
import { effectiveAgent } from './effective.js';

const agent = (over: Partial<StoredAgent> = {}): StoredAgent => ({ name: 'a', pubkey: 'a'.repeat(64), owner: 'b'.repeat(64), origin: 'http://x', limits: DEFAULT_LIMITS, created_at: 1, ...over });
const OPENAI = { OPENAI_BASE_URL: 'http://127.0.0.1:11434/v1' };

describe('effectiveAgent', () => {
  it('an agent naming no provider follows the deployment’s, with EDGESTR_DEFAULT_MODEL as its model', () => {
    expect(effectiveAgent(agent(), { ...OPENAI, EDGESTR_DEFAULT_MODEL: ' llama3.2 ' })).toMatchObject({ provider: 'openai', models: ['llama3.2'], default_model: 'llama3.2' });
  });

  it('without EDGESTR_DEFAULT_MODEL, or with models of its own, the agent’s models stay', () => {
    expect(effectiveAgent(agent(), OPENAI)).toMatchObject({ provider: 'openai' });
    expect(effectiveAgent(agent(), OPENAI).models).toBeUndefined();
    expect(effectiveAgent(agent({ models: ['qwen'] }), { ...OPENAI, EDGESTR_DEFAULT_MODEL: 'llama3.2' })).toMatchObject({ models: ['qwen'] });
    expect(effectiveAgent(agent({ default_model: 'qwen' }), { ...OPENAI, EDGESTR_DEFAULT_MODEL: 'llama3.2' }).models).toBeUndefined();
  });

  it('an agent naming its provider keeps it and is not given the default model; the demo agent follows the deployment', () => {
    const named = agent({ provider: 'anthropic' });
    expect(effectiveAgent(named, { ...OPENAI, EDGESTR_DEFAULT_MODEL: 'llama3.2' })).toEqual({ ...named, provider: 'anthropic' });
    const demo = agent({ provider: 'echo' });
    expect(effectiveAgent(demo, { ...OPENAI, EDGESTR_DEFAULT_MODEL: 'llama3.2' }, true)).toMatchObject({ provider: 'openai', default_model: 'llama3.2' });
  });

  it('echo (no provider configured) needs no model', () => {
    expect(effectiveAgent(agent(), { EDGESTR_DEFAULT_MODEL: 'llama3.2' })).toEqual({ ...agent(), provider: 'echo' });
  });
});
