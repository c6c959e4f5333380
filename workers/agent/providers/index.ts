// Provider selection from the deployment's configuration (wrangler vars / secrets / .dev.vars):
// - openai: configured by OPENAI_API_KEY or OPENAI_BASE_URL (a base URL without a key is a local
//   OpenAI-compatible server such as Ollama: no Authorization header is sent);
//   base URL default https://api.openai.com/v1.
// - anthropic: configured by ANTHROPIC_API_KEY or ANTHROPIC_BASE_URL; default https://api.anthropic.com.
// - workers-ai: configured by the AI binding.
// - echo: always available, offline.
// Empty or blank values count as unset. defaultProvider: openai if configured, else anthropic if
// configured, else echo. The AI binding alone does not make workers-ai the default (under local
// `wrangler dev` the binding needs a Cloudflare login, and `npm start` must work with no account):
// an agent picks it explicitly with provider "workers-ai".

import { err, ok, type Result } from '../../../src/shared/errors.js';
import { AnthropicProvider, ANTHROPIC_DEFAULT_BASE_URL } from './anthropic.js';
import { EchoProvider } from './echo.js';
import { OpenAiProvider, OPENAI_DEFAULT_BASE_URL } from './openai.js';
import type { Provider } from './types.js';
import { WorkersAiProvider, type WorkersAiBinding } from './workers-ai.js';

export type { WorkersAiBinding } from './workers-ai.js';

export type ProviderName = Provider['id'];
export const PROVIDER_NAMES: readonly ProviderName[] = ['openai', 'anthropic', 'workers-ai', 'echo'];

/** The configuration the providers read (a subset of the Worker's env). */
export interface ProviderEnv {
  OPENAI_API_KEY?: string;
  OPENAI_BASE_URL?: string;
  ANTHROPIC_API_KEY?: string;
  ANTHROPIC_BASE_URL?: string;
  AI?: WorkersAiBinding;
}

const setting = (v: string | undefined): string | undefined => {
  const t = v?.trim();
  return t ? t : undefined;
};

export const isProviderName = (name: string): name is ProviderName =>
  (PROVIDER_NAMES as readonly string[]).includes(name);

/** The providers this deployment can use, in default-preference order (echo always last). */
export function configuredProviders(env: ProviderEnv): ProviderName[] {
  const out: ProviderName[] = [];
  if (setting(env.OPENAI_API_KEY) || setting(env.OPENAI_BASE_URL)) out.push('openai');
  if (setting(env.ANTHROPIC_API_KEY) || setting(env.ANTHROPIC_BASE_URL)) out.push('anthropic');
  if (env.AI) out.push('workers-ai');
  out.push('echo');
  return out;
}

const HOW_TO_CONFIGURE: Record<ProviderName, string> = {
  openai: 'set OPENAI_API_KEY or OPENAI_BASE_URL',
  anthropic: 'set ANTHROPIC_API_KEY or ANTHROPIC_BASE_URL',
  'workers-ai': 'add the AI binding',
  echo: '',
};

/**
 * The provider called `name`, built from the configuration, or why it cannot be used here (an
 * unknown name, or a provider that is not configured): the runtime answers MODEL_UNAVAILABLE.
 */
export function providerFor(name: string, env: ProviderEnv): Result<Provider, string> {
  if (!isProviderName(name)) return err(`unknown provider "${name}" (expected one of ${PROVIDER_NAMES.join(', ')})`);
  if (!configuredProviders(env).includes(name)) return err(`provider "${name}" is not configured (${HOW_TO_CONFIGURE[name]})`);
  switch (name) {
    case 'openai': {
      const apiKey = setting(env.OPENAI_API_KEY);
      const baseUrl = setting(env.OPENAI_BASE_URL) ?? OPENAI_DEFAULT_BASE_URL;
      return ok(new OpenAiProvider(apiKey ? { baseUrl, apiKey } : { baseUrl }));
    }
    case 'anthropic': {
      const apiKey = setting(env.ANTHROPIC_API_KEY);
      const baseUrl = setting(env.ANTHROPIC_BASE_URL) ?? ANTHROPIC_DEFAULT_BASE_URL;
      return ok(new AnthropicProvider(apiKey ? { baseUrl, apiKey } : { baseUrl }));
    }
    case 'workers-ai':
      return env.AI ? ok(new WorkersAiProvider(env.AI)) : err(`provider "workers-ai" is not configured (${HOW_TO_CONFIGURE['workers-ai']})`);
    case 'echo':
      return ok(new EchoProvider());
  }
}

/** The name of the provider agents use when they name none: openai if configured, else anthropic, else echo. */
export function defaultProviderName(env: ProviderEnv): ProviderName {
  return configuredProviders(env).find((n) => n !== 'workers-ai') ?? 'echo';
}

/** The provider agents use when they name none (never fails: echo is the fallback). */
export function defaultProvider(env: ProviderEnv): Provider {
  const chosen = providerFor(defaultProviderName(env), env);
  return chosen.ok ? chosen.value : new EchoProvider();
}
