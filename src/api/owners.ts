// Who may own agents and bridge servers on this deployment (EDGESTR_OWNERS), the local demo
// owner, and the secret that seals keys at rest. The parsing lives with the agent
// (workers/agent/owners.ts), which checks its owner at prompt time without importing src/api.

export { allowedOwners, DEMO_AGENT, DEMO_AGENT_SK, DEMO_OWNER, DEMO_OWNER_SK, type OwnerEnv } from '../../workers/agent/owners.js';
export { isDevelopment } from '../../workers/agent/secrets.js';
import { allowedOwners, type OwnerEnv } from '../../workers/agent/owners.js';

/** The management API's 403 reason for a pubkey that may not own (see allowedOwners), or undefined. */
export const notAnOwner = (env: OwnerEnv, pubkey: string): string | undefined =>
  allowedOwners(env).has(pubkey) ? undefined : 'this pubkey may not own agents on this deployment (EDGESTR_OWNERS)';
