// Fixed keys shared by the test configuration (Node side) and the tests (workerd side).
import { sha256 } from '@noble/hashes/sha2.js';
import { getPublicKey } from 'nostr-tools/pure';

/** The owner listed in EDGESTR_OWNERS for in-runtime tests. */
export const TEST_OWNER_SK = sha256(new TextEncoder().encode('edgestr test owner'));
export const TEST_OWNER = getPublicKey(TEST_OWNER_SK);

/** The operator listed in EDGESTR_ADMINS for in-runtime tests. */
export const TEST_ADMIN_SK = sha256(new TextEncoder().encode('edgestr test admin'));
export const TEST_ADMIN = getPublicKey(TEST_ADMIN_SK);

/** EDGESTR_PLANS of the in-runtime tests: the default plan is unlimited (the other tests), the others small. */
const PLANS = {
  default: {},
  one_agent: { agents: 1 },
  two_runs: { runs_per_day: 2 },
  few_tokens: { tokens_per_day: 200 },
  some_tokens: { tokens_per_day: 1_000 },
  few_tokens_month: { tokens_per_month: 100 },
  small_shard: { stored_bytes: 1000 },
  inbox_shard: { stored_bytes: 4000 },
  answers_shard: { stored_bytes: 60000 },
  slow_shard: { events_per_second: 2 },
  three_bridge_calls: { bridge_calls_per_day: 3 },
  five_bridge_calls: { bridge_calls_per_day: 5 },
  two_bridge_servers: { bridge_servers: 2 },
};
export const TEST_PLANS = JSON.stringify(PLANS);

/**
 * The variables a test's sign-up call runs under: EDGESTR_SIGNUP=open, which needs a default plan
 * that sets agents and tokens_per_day, and models since the tests bind paid provider keys
 * (workers/accounts/signup-limits.ts; else sign-up answers 503),
 * so these plans are TEST_PLANS with such a default. Only the sign-up call sees them: the owner's
 * later calls and agents run under TEST_PLANS.
 */
export const OPEN_SIGNUP = {
  EDGESTR_SIGNUP: 'open',
  EDGESTR_PLANS: JSON.stringify({ ...PLANS, default: { agents: 100, tokens_per_day: 1_000_000_000, models: ['*'] } }),
};
