// Whether a prompt gets a run: the checks that cost O(1) and create nothing, in their order —
// NIP-XX request tags, the owner still allowed (and not suspended) on the deployment, the agent's
// block and allow lists, the owner's plan (workers/accounts/quota.ts, from the totals the agent
// keeps), then the per-sender and per-agent prompt windows, concurrency and the daily token budget
// (budget.ts). A refusal carries its NIP-XX error; whether it is answered or dropped is decided
// here too (at most one answer per sender per window). No Durable Object needed: the only state
// touched is the budget's limiter windows.

import type { ErrorCode } from '../../src/shared/nip-xx.js';
import { checkRequestTags } from '../../src/shared/nip-xx.js';
import type { AgentBudget } from './budget.js';
import type { StoredAgent } from './config.js';

/** A refusal that is not a rate limit (owner, allowlist, block, tags) is answered once per sender per this many seconds. */
export const REFUSAL_WINDOW_SECONDS = 60;
export const OWNER_NOT_ALLOWED = 'this agent’s owner is no longer allowed on this deployment';
export const OWNER_SUSPENDED = 'this agent’s owner is suspended on this deployment';

export interface AdmissionState {
  /** Whether the agent's owner is (still) allowed on this deployment, and not suspended. */
  owner: 'allowed' | 'removed' | 'suspended';
  /** The owner's plan refusing a run (a quota reached), if it does. */
  quota?: Refusal | undefined;
  /** Runs of this agent in progress. */
  activeRuns: number;
  /** The clock of the limiters (ms). */
  now: number;
  budget: Pick<AgentBudget, 'admit' | 'shouldAnswer'>;
}

export interface Refusal {
  code: ErrorCode;
  message: string;
  retry_after?: number;
  details?: Record<string, unknown>;
}

/** `run`: start it (or serve the request); `answer`: publish the refusal (no run row); `drop`: the sender was already told. */
export type AdmissionResult = { verdict: 'run' } | { verdict: 'answer'; refusal: Refusal } | { verdict: 'drop' };

export function admitPrompt(
  event: { pubkey: string; kind: number; tags: string[][] },
  config: Pick<StoredAgent, 'pubkey' | 'block' | 'allow' | 'limits'>,
  state: AdmissionState,
): AdmissionResult {
  const tags = checkRequestTags(event, config.pubkey);
  if (!tags.ok) return refuse(event.pubkey, config, state, { code: tags.error.code, message: tags.error.message });
  return admitSender(event.pubkey, config, state, 'run');
}

/**
 * The checks after the transport's own (NIP-XX tags, or a DVMCP request's parsing): the owner, the
 * block and allow lists, then, for a `run`, the prompt windows, concurrency and the token budget.
 * A `request` (a DVMCP initialize or list, which starts no run) passes the sender policy only.
 */
export function admitSender(sender: string, config: Pick<StoredAgent, 'block' | 'allow' | 'limits'>, state: AdmissionState, what: 'run' | 'request'): AdmissionResult {
  if (state.owner === 'removed') return refuse(sender, config, state, { code: 'UNAUTHORIZED', message: OWNER_NOT_ALLOWED });
  if (state.owner === 'suspended') return refuse(sender, config, state, { code: 'UNAUTHORIZED', message: OWNER_SUSPENDED });
  if (config.block?.includes(sender)) return refuse(sender, config, state, { code: 'BLOCKED_SENDER', message: 'this sender is blocked by the agent’s policy' });
  if (config.allow && config.allow.length > 0 && !config.allow.includes(sender)) {
    return refuse(sender, config, state, { code: 'UNAUTHORIZED', message: 'this sender is not on the agent’s allowlist' });
  }
  if (what === 'request') return { verdict: 'run' };
  if (state.quota) return refuse(sender, config, state, state.quota, state.quota.retry_after);
  const admission = state.budget.admit(sender, config.limits, state.activeRuns, state.now);
  if (admission.ok) return { verdict: 'run' };
  return admission.answer ? { verdict: 'answer', refusal: { code: 'RATE_LIMIT', message: admission.message, retry_after: admission.retry_after } } : { verdict: 'drop' };
}

/** A policy refusal: answered once per sender per window, then dropped. */
function refuse(sender: string, config: Pick<StoredAgent, 'limits'>, state: AdmissionState, refusal: Refusal, windowSeconds = REFUSAL_WINDOW_SECONDS): AdmissionResult {
  return state.budget.shouldAnswer(sender, config.limits, state.now, Math.min(windowSeconds, REFUSAL_WINDOW_SECONDS)) ? { verdict: 'answer', refusal } : { verdict: 'drop' };
}
