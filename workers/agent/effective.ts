// The agent as its runs use it: an agent that names no provider (and the development demo agent)
// follows the deployment's provider, read at each run; when it also names no model, it gets the
// deployment's EDGESTR_DEFAULT_MODEL (e.g. "gpt-4o-mini", or a local server's "llama3.2") rather than
// the placeholder "default", which no real server knows.

import type { StoredAgent } from './config.js';
import { defaultProviderName, type ProviderEnv, type ProviderName } from './providers/index.js';

/** A stored agent with its provider resolved for this run (the deployment's default when it names none). */
export type EffectiveAgent = StoredAgent & { provider: ProviderName };

export interface DefaultModelEnv extends ProviderEnv {
  /** The model of agents that name neither provider nor model (and of the demo agent). */
  EDGESTR_DEFAULT_MODEL?: string;
}

/** `c` as its runs use it; `followsDeployment` forces the deployment's provider (the demo agent). */
export function effectiveAgent(c: StoredAgent, env: DefaultModelEnv, followsDeployment = false): EffectiveAgent {
  const follows = followsDeployment || !c.provider;
  const provider = !follows && c.provider ? c.provider : defaultProviderName(env);
  const model = env.EDGESTR_DEFAULT_MODEL?.trim();
  const named = (c.models?.length ?? 0) > 0 || c.default_model !== undefined;
  return follows && provider !== 'echo' && model && !named ? { ...c, provider, models: [model], default_model: model } : { ...c, provider };
}
