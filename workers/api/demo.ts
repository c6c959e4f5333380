// The local demo (EDGESTR_ENV=development only): a known demo owner and one demo agent, created on
// first use so that `npm start` gives a client something to talk to without any account.

import { DEMO_AGENT, DEMO_AGENT_SK, DEMO_OWNER } from '../common/owners.js';
import { isDevelopment } from '../../src/shared/env-mode.js';
import { agentStub, createAgent, type AgentApiBindings } from './agents.js';

export interface DemoBlock {
  owner: string;
  agent: string;
  relay: string;
}

export async function ensureDemo(env: AgentApiBindings, origin: string): Promise<DemoBlock | undefined> {
  if (!isDevelopment(env)) return undefined;
  if (!(await agentStub(env, DEMO_AGENT).view())) {
    const created = await createAgent(
      env,
      DEMO_OWNER,
      {
        name: 'edgestr demo agent',
        about: 'The local demo agent of `npm start`. It answers with the configured provider, or the offline echo model.',
        tools: ['calculator'],
      },
      origin,
      DEMO_AGENT_SK,
    );
    if (created.status !== 201) throw new Error(`demo agent could not be created: ${JSON.stringify(created.body)}`);
  }
  return { owner: DEMO_OWNER, agent: DEMO_AGENT, relay: `/r/${DEMO_OWNER}` };
}
