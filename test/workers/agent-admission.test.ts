// admitPrompt (workers/agent/admission.ts) without an Agent: each check in its order, with the
// NIP-XX code it refuses with, and the answer/drop decision of repeated refusals.
import { env, runInDurableObject } from 'cloudflare:test';
import { describe, expect, it } from 'vitest';
import { admitPrompt, OWNER_NOT_ALLOWED, OWNER_SUSPENDED, type AdmissionResult, type AdmissionState } from '../../workers/agent/admission.js';
import { planRefusal } from '../../workers/accounts/quota.js';
import { AgentBudget } from '../../workers/agent/budget.js';
import { DEFAULT_LIMITS, type AgentLimits, type StoredAgent } from '../../workers/agent/config.js';
import { KIND } from '../../src/shared/kinds.js';

const T0 = Date.UTC(2026, 0, 10, 12, 0, 0);
const AGENT = 'a'.repeat(64);
const SENDER = 'b'.repeat(64);
const OTHER = 'c'.repeat(64);
const OWNER = 'd'.repeat(64);
const TAGS = [['p', AGENT], ['encryption', 'nip44']];

type Config = Pick<StoredAgent, 'pubkey' | 'owner' | 'block' | 'allow' | 'limits'>;
const config = (c: Partial<Omit<Config, 'limits'>> & { limits?: Partial<AgentLimits> } = {}): Config => ({
  pubkey: AGENT,
  owner: OWNER,
  ...c,
  limits: { ...DEFAULT_LIMITS, ...c.limits },
});

interface Case {
  name: string;
  /** The prompt's sender (SENDER when absent). */
  sender?: string;
  tags?: string[][];
  config?: Config;
  state?: Partial<Omit<AdmissionState, 'budget' | 'now'>>;
  /** Tokens spent today before the prompt. */
  spent?: number;
  want: AdmissionResult;
}

const cases: Case[] = [
  { name: 'a well-formed prompt runs', want: { verdict: 'run' } },
  { name: 'no p tag for this agent', tags: [['p', OTHER], ['encryption', 'nip44']], want: { verdict: 'answer', refusal: { code: 'INVALID_SCHEMA', message: 'missing p tag for this agent' } } },
  {
    // A plain one never gets here (agent-do.ts drops it unread); a gift-wrapped prompt's rumor does.
    name: 'the agent and another key (a rumor’s p tags)',
    tags: [['p', AGENT], ['p', OTHER], ['encryption', 'nip44']],
    want: { verdict: 'answer', refusal: { code: 'INVALID_SCHEMA', message: 'more than one p tag: a prompt or cancel names this agent alone' } },
  },
  { name: 'no encryption tag', tags: [['p', AGENT]], want: { verdict: 'answer', refusal: { code: 'INVALID_SCHEMA', message: 'missing encryption tag' } } },
  {
    name: 'a session id over 256 characters',
    tags: [['p', AGENT], ['encryption', 'nip44'], ['s', 'x'.repeat(257)]],
    want: { verdict: 'answer', refusal: { code: 'INVALID_SCHEMA', message: 'the session id (s tag) is 257 characters; at most 256' } },
  },
  { name: 'a session id of 256 characters runs', tags: [['p', AGENT], ['encryption', 'nip44'], ['s', 'x'.repeat(256)]], want: { verdict: 'run' } },
  {
    name: 'another encryption',
    tags: [['p', AGENT], ['encryption', 'nip04']],
    want: { verdict: 'answer', refusal: { code: 'UNSUPPORTED_ENCRYPTION', message: 'unsupported encryption "nip04"; this agent supports nip44' } },
  },
  // Whether the owner was removed or suspended is the owner's business: another sender is told the agent is unavailable.
  {
    name: 'owner no longer allowed',
    state: { owner: 'removed' },
    want: { verdict: 'answer', refusal: { code: 'UNAUTHORIZED', message: 'this agent is unavailable on this deployment; retry later or use another agent', detail: OWNER_NOT_ALLOWED } },
  },
  {
    name: 'owner suspended',
    state: { owner: 'suspended' },
    want: { verdict: 'answer', refusal: { code: 'UNAUTHORIZED', message: 'this agent is unavailable on this deployment; retry later or use another agent', detail: OWNER_SUSPENDED } },
  },
  { name: 'owner suspended, the owner asking: told why', sender: OWNER, state: { owner: 'suspended' }, want: { verdict: 'answer', refusal: { code: 'UNAUTHORIZED', message: OWNER_SUSPENDED } } },
  {
    name: 'owner’s plan quota reached (after the sender policy)',
    state: { quota: () => ({ code: 'RATE_LIMIT', message: 'quota', retry_after: 30, details: { quota: 'runs_per_day' } }) },
    want: { verdict: 'answer', refusal: { code: 'RATE_LIMIT', message: 'quota', retry_after: 30, details: { quota: 'runs_per_day' } } },
  },
  { name: 'blocked sender', config: config({ block: [SENDER] }), want: { verdict: 'answer', refusal: { code: 'BLOCKED_SENDER', message: 'this sender is blocked by the agent’s policy' } } },
  { name: 'sender not on the allowlist', config: config({ allow: [OTHER] }), want: { verdict: 'answer', refusal: { code: 'UNAUTHORIZED', message: 'this sender is not on the agent’s allowlist' } } },
  { name: 'sender on the allowlist', config: config({ allow: [SENDER] }), want: { verdict: 'run' } },
  { name: 'an empty allowlist allows everyone', config: config({ allow: [] }), want: { verdict: 'run' } },
  {
    name: 'concurrency cap',
    config: config({ limits: { max_concurrent_runs: 2 } }),
    state: { activeRuns: 2 },
    want: { verdict: 'answer', refusal: { code: 'RATE_LIMIT', message: 'this agent is already running its maximum of 2 concurrent runs', retry_after: 5 } },
  },
  {
    // The budget and what is spent are the owner's to know: another sender is told neither.
    name: 'daily token budget used up',
    config: config({ limits: { max_tokens_per_day: 100 } }),
    spent: 100,
    want: {
      verdict: 'answer',
      refusal: { code: 'RATE_LIMIT', message: 'this agent reached its model budget for today (UTC)', retry_after: 43_200, detail: 'this agent used its model budget of 100 tokens for today (UTC)' },
    },
  },
  {
    name: 'daily token budget used up, the owner asking: told the figures',
    sender: OWNER,
    config: config({ limits: { max_tokens_per_day: 100 } }),
    spent: 100,
    want: { verdict: 'answer', refusal: { code: 'RATE_LIMIT', message: 'this agent used its model budget of 100 tokens for today (UTC)', retry_after: 43_200 } },
  },
  {
    name: 'the owner’s plan, another sender: no figure in the message',
    state: { quota: () => planRefusal({ runs_per_day: 5 }, { day: '2026-01-10', tokens_today: 0, tokens_month: 0, runs_today: 5 }, T0, { other: true }) },
    want: {
      verdict: 'answer',
      refusal: {
        code: 'RATE_LIMIT',
        message: 'the agent’s owner reached a usage limit for today (UTC)',
        detail: 'others may use 4 of the agent’s owner’s plan’s 5 runs for today (UTC); the rest is kept for the owner',
        retry_after: 43_200,
        details: { quota: 'runs_per_day' },
      },
    },
  },
  {
    name: 'the owner’s plan, the owner asking: told the figures',
    sender: OWNER,
    state: { quota: () => planRefusal({ runs_per_day: 5 }, { day: '2026-01-10', tokens_today: 0, tokens_month: 0, runs_today: 5 }, T0) },
    want: { verdict: 'answer', refusal: { code: 'RATE_LIMIT', message: 'the agent’s owner used its plan’s 5 runs for today (UTC)', retry_after: 43_200, details: { quota: 'runs_per_day' } } },
  },
  {
    name: 'the block list is checked before the limits',
    config: config({ block: [SENDER], limits: { max_concurrent_runs: 1 } }),
    state: { activeRuns: 1 },
    want: { verdict: 'answer', refusal: { code: 'BLOCKED_SENDER', message: 'this sender is blocked by the agent’s policy' } },
  },
];

const withBudget = <T>(fn: (b: AgentBudget) => T) =>
  runInDurableObject(env.AGENT.get(env.AGENT.newUniqueId()), (_i, state) => fn(new AgentBudget(state.storage.sql)));

describe('admitPrompt', () => {
  for (const c of cases) {
    it(c.name, async () => {
      await withBudget((budget) => {
        if (c.spent) budget.spend(c.spent, T0);
        const state: AdmissionState = { owner: 'allowed', activeRuns: 0, ...c.state, now: T0, budget };
        const got = admitPrompt({ pubkey: c.sender ?? SENDER, kind: KIND.AI_PROMPT, tags: c.tags ?? TAGS }, c.config ?? config(), state);
        expect(got).toEqual(c.want);
      });
    });
  }

  it('a sender is told once per window; later refusals are dropped, then told again', async () => {
    await withBudget((budget) => {
      const blocked = config({ block: [SENDER] });
      const at = (now: number) => admitPrompt({ pubkey: SENDER, kind: KIND.AI_PROMPT, tags: TAGS }, blocked, { owner: 'allowed', activeRuns: 0, now, budget });
      expect(at(T0).verdict).toBe('answer');
      expect(at(T0 + 59_999).verdict).toBe('drop');
      expect(at(T0 + 60_000).verdict).toBe('answer');
      expect(budget.stats).toEqual({ answered: 2, dropped: 1 });
    });
  });

  it('the per-sender window: admitted prompts take its slots, the next one is refused with retry_after', async () => {
    await withBudget((budget) => {
      const c = config({ limits: { prompts_per_minute: 2 } });
      const at = (now: number) => admitPrompt({ pubkey: SENDER, kind: KIND.AI_PROMPT, tags: TAGS }, c, { owner: 'allowed', activeRuns: 0, now, budget });
      expect(at(T0)).toEqual({ verdict: 'run' });
      expect(at(T0 + 1000)).toEqual({ verdict: 'run' });
      expect(at(T0 + 20_000)).toEqual({ verdict: 'answer', refusal: { code: 'RATE_LIMIT', message: 'at most 2 prompts per minute per sender', retry_after: 40 } });
      expect(at(T0 + 21_000)).toEqual({ verdict: 'drop' });
    });
  });
});
