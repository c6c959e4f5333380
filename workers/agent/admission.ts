// Whether a prompt gets a run: the checks that cost O(1) and create nothing, in their order —
// NIP-XX request tags (a session id the agent can store included), the owner still allowed (and not
// suspended) on the deployment (or its account not read yet: owner-copy.ts), the agent's
// block and allow lists, the owner's plan (workers/accounts/quota.ts, from the totals the agent
// keeps: computed only once the sender passed those lists, so a blocked or unlisted key's prompt
// costs no read of them), then the per-sender and per-agent prompt windows, concurrency and the daily token budget
// (budget.ts). The plan's token limits and the budget must leave room for what the prompt's first
// model call will ask, as far as that is known before decryption (promptAsk), so that a prompt the
// limits cannot serve gets no run. A refusal carries its NIP-XX error; whether it is answered or
// dropped is decided here too (at most one answer per sender per window), and what its sender is
// told (told-to.ts): the figures of a limit (the owner's plan and spend, the agent's budget) and why
// the owner is not allowed go to the owner alone; anyone else gets a message without them. No
// Durable Object needed: the only state touched is the budget's limiter windows.

import type { ErrorCode } from '../../src/shared/nip-xx.js';
import { checkRequestTags } from '../../src/shared/nip-xx.js';
import { REGISTRY_RETRY_MS } from '../common/owners.js';
import type { ModelCallAsk } from '../accounts/quota.js';
import type { AgentBudget } from './budget.js';
import { isPrivateAgent, type StoredAgent } from './config.js';
import { MIN_ANSWER_TOKENS } from './run-driver.js';
import { estimateTokens } from './sessions.js';
import { toldTo } from './told-to.js';

/** A refusal that is not a rate limit (owner, allowlist, block, tags) is answered once per sender per this many seconds (one with a shorter retry_after, per that). */
export const REFUSAL_WINDOW_SECONDS = 60;
/** Why the agent refuses its owner's own prompts: removed (or unknown here), or suspended. */
export const OWNER_NOT_ALLOWED = 'this agent’s owner is no longer allowed on this deployment';
export const OWNER_SUSPENDED = 'this agent’s owner is suspended on this deployment';
/** What anyone else is told of an owner not allowed: the agent cannot serve it; the owner's standing is not its business. */
export const AGENT_UNAVAILABLE = 'this agent is unavailable on this deployment; retry later or use another agent';
/** Why the agent cannot tell yet whether its owner is allowed: Accounts did not answer its first fetch of the owner's account (asked again after REGISTRY_RETRY_MS). */
export const OWNER_UNREADABLE = `the owner registry could not be read yet; retry in ${REGISTRY_RETRY_MS / 1000} s`;
/** What anyone else is told of it. */
export const OWNER_NOT_CHECKED = 'this agent could not check its owner’s account yet; retry later';

/** Whose standing the agent knows: allowed; removed (or unknown here) or suspended; unreadable: its account not read yet (owner-copy.ts). */
export type OwnerStanding = 'allowed' | 'removed' | 'suspended' | 'unreadable';

/**
 * What a prompt, an ask or a run in progress of an owner not allowed (removed or unknown here, or
 * suspended) is answered: AGENT_UNAVAILABLE, the reason in `detail` (told-to.ts). An owner whose
 * account could not be read yet: INTERNAL_ERROR, retry after REGISTRY_RETRY_MS.
 */
export const ownerRefusal = (owner: Exclude<OwnerStanding, 'allowed'>): Refusal =>
  owner === 'unreadable'
    ? { code: 'INTERNAL_ERROR', message: OWNER_NOT_CHECKED, detail: OWNER_UNREADABLE, retry_after: REGISTRY_RETRY_MS / 1000 }
    : { code: 'UNAUTHORIZED', message: AGENT_UNAVAILABLE, detail: owner === 'removed' ? OWNER_NOT_ALLOWED : OWNER_SUSPENDED };

export interface AdmissionState {
  /** Whether the agent's owner is (still) allowed on this deployment, and not suspended (unreadable: not known yet). */
  owner: OwnerStanding;
  /** The owner's plan refusing a run (a quota reached), if it does: asked only once the sender passed the block and allow lists. */
  quota?: () => Refusal | undefined;
  /** Runs of this agent in progress. */
  activeRuns: number;
  /** The clock of the limiters (ms). */
  now: number;
  budget: Pick<AgentBudget, 'admit' | 'shouldAnswer'>;
  /** What the run's first model call will ask of the token budget (promptAsk; `quota` was computed with it too); none: the budget must only not be used up. */
  call?: ModelCallAsk;
}

/**
 * What a prompt's first model call will ask of the token limits, as far as it is known before
 * decryption: the system prompt (as estimateTokens counts a message) and the prompt's encrypted
 * content of `contentChars` characters at 3 bytes per 4 (base64) and 4 bytes per token — never less
 * than the user message's own estimate, since the NIP-44 payload holds the message with the JSON
 * around it, its padding (at most a quarter of a long message; a short one fills a multiple of 32 bytes) and
 * 67 bytes of version, nonce, length and MAC (more than the 4 tokens a message adds), so a stranger
 * cannot make a large prompt look small; history and tool definitions are not counted (they cost a
 * read and a listing, and are checked at the call). Then room for the answer: MIN_ANSWER_TOKENS, or
 * max_output_tokens when lower (a call's own bound is never below it).
 */
export function promptAsk(c: Pick<StoredAgent, 'system_prompt' | 'limits'>, contentChars: number): ModelCallAsk {
  const system = c.system_prompt ? estimateTokens({ role: 'system', content: c.system_prompt }) : 0;
  return { input: system + Math.ceil((contentChars * 3) / 16), answer: Math.min(MIN_ANSWER_TOKENS, c.limits.max_output_tokens), prompt: true };
}

export interface Refusal {
  code: ErrorCode;
  message: string;
  /** For the agent's owner alone (told-to.ts): the figures or the reason the message leaves out. */
  detail?: string;
  retry_after?: number;
  details?: Record<string, unknown>;
}

/** `run`: start it (or serve the request); `answer`: publish the refusal (no run row); `drop`: the sender was already told. */
export type AdmissionResult = { verdict: 'run' } | { verdict: 'answer'; refusal: Refusal } | { verdict: 'drop' };

export function admitPrompt(
  event: { pubkey: string; kind: number; tags: string[][] },
  config: Pick<StoredAgent, 'pubkey' | 'owner' | 'block' | 'allow' | 'limits'>,
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
 * `reader`: who can read the answer (told-to.ts; a plain DVMCP answer is public: nobody in particular).
 */
export function admitSender(sender: string, config: Pick<StoredAgent, 'owner' | 'block' | 'allow' | 'limits'>, state: AdmissionState, what: 'run' | 'request', reader = sender): AdmissionResult {
  if (state.owner !== 'allowed') {
    const refusal = ownerRefusal(state.owner);
    return refuse(sender, config, state, refusal, refusal.retry_after, reader);
  }
  if (config.block?.includes(sender)) return refuse(sender, config, state, { code: 'BLOCKED_SENDER', message: 'this sender is blocked by the agent’s policy' }, undefined, reader);
  if (isPrivateAgent(config) && !config.allow.includes(sender)) {
    return refuse(sender, config, state, { code: 'UNAUTHORIZED', message: 'this sender is not on the agent’s allowlist' }, undefined, reader);
  }
  if (what === 'request') return { verdict: 'run' };
  const quota = state.quota?.();
  if (quota) return refuse(sender, config, state, quota, quota.retry_after, reader);
  const admission = state.budget.admit(sender, config.limits, state.activeRuns, state.now, state.call);
  if (admission.ok) return { verdict: 'run' };
  if (!admission.answer) return { verdict: 'drop' };
  const { message, detail, retry_after } = admission;
  return { verdict: 'answer', refusal: toldTo({ code: 'RATE_LIMIT', message, ...(detail ? { detail } : {}), retry_after }, reader, config.owner) };
}

/** A policy refusal: answered once per sender per window (as `sender` is told it), then dropped. */
function refuse(sender: string, config: Pick<StoredAgent, 'owner' | 'limits'>, state: AdmissionState, refusal: Refusal, windowSeconds = REFUSAL_WINDOW_SECONDS, reader = sender): AdmissionResult {
  return state.budget.shouldAnswer(sender, config.limits, state.now, Math.min(windowSeconds, REFUSAL_WINDOW_SECONDS)) ? { verdict: 'answer', refusal: toldTo(refusal, reader, config.owner) } : { verdict: 'drop' };
}
