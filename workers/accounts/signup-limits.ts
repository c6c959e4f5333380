// What open sign-up (EDGESTR_SIGNUP=open, workers/api/signup.ts) may add, and what it needs, read
// from the deployment's variables. EDGESTR_SIGNUP_MAX_OWNERS caps the owners of the registry (sign-up
// stops there; an operator's POST /api/admin/owners does not, and EDGESTR_OWNERS are not in the
// registry) and EDGESTR_SIGNUP_MAX_PER_DAY the sign-ups of one UTC day: they bound what every router,
// API and Bridge isolate copies of the registry (workers/common/owners.ts) and what a stranger's
// fresh keys can grow it by. Each a whole number, 0 or more; unset, the default; a value that is not
// one counts as the default, logged once per isolate and value. Open sign-up also needs a default
// plan (workers/accounts/plans.ts) that sets `agents` and `tokens_per_day`: with either unlimited, a
// stranger's key would spend the operator's provider keys without end; and, when the deployment binds
// a paid provider (an OpenAI or Anthropic key, the Workers AI binding), `models`: its tokens_per_day
// counts a token of every model alike, so a stranger's agent on the priciest model would spend it at
// many times the price it was sized for (OPEN_SIGNUP_NEEDS_MODELS). Without them the Worker answers
// sign-ups 503 (openSignupProblem), also when deployed without the check; `npm run deploy` refuses
// the same (scripts/deploy-check.mjs bundles this file and calls signupProblems; there a paid
// provider is one the deployment has or may have, its keys being secrets it cannot read).

import { DEFAULT_PLAN, parsePlans, type Plans } from './plans.js';
import type { ProviderEnv } from '../agent/providers/index.js';

/** What sign-up may add: owners in the registry, sign-ups a UTC day. */
export interface SignupCaps {
  owners: number;
  per_day: number;
}

export interface SignupEnv {
  EDGESTR_SIGNUP?: string;
  EDGESTR_SIGNUP_MAX_OWNERS?: string;
  EDGESTR_SIGNUP_MAX_PER_DAY?: string;
  EDGESTR_PLANS?: string;
}

/** The caps when the variables are unset. */
export const DEFAULT_SIGNUP_CAPS: SignupCaps = { owners: 10_000, per_day: 1_000 };

const SETTINGS = [
  ['EDGESTR_SIGNUP_MAX_OWNERS', 'owners'],
  ['EDGESTR_SIGNUP_MAX_PER_DAY', 'per_day'],
] as const;

/** The caps of `env`, each wrong value at its default, and what is wrong (one message per wrong variable). */
function readCaps(env: SignupEnv): { caps: SignupCaps; wrong: Array<{ problem: string; used: number }> } {
  const caps = { ...DEFAULT_SIGNUP_CAPS };
  const wrong: Array<{ problem: string; used: number }> = [];
  for (const [name, field] of SETTINGS) {
    const raw = env[name];
    if (raw === undefined || raw.trim() === '') continue;
    if (/^\d{1,15}$/.test(raw.trim())) caps[field] = Number(raw.trim());
    else wrong.push({ problem: `${name} is "${raw}": a whole number, 0 or more (default ${DEFAULT_SIGNUP_CAPS[field]})`, used: DEFAULT_SIGNUP_CAPS[field] });
  }
  return { caps, wrong };
}

/** The wrong values this isolate logged already. */
const logged = new Set<string>();

/** The sign-up caps in force (a wrong value: its default, logged once per isolate and value). */
export function signupCaps(env: SignupEnv): SignupCaps {
  const { caps, wrong } = readCaps(env);
  for (const { problem, used } of wrong) {
    if (logged.has(problem)) continue;
    logged.add(problem);
    console.warn(`${problem}; ${used} is used`);
  }
  return caps;
}

export const OPEN_SIGNUP_NEEDS_LIMITS = 'EDGESTR_SIGNUP=open needs a default plan that sets agents and tokens_per_day';

export const OPEN_SIGNUP_NEEDS_MODELS =
  'EDGESTR_SIGNUP=open with a paid model provider (OPENAI_API_KEY, ANTHROPIC_API_KEY or the AI binding) needs a default plan that sets models, since tokens_per_day counts a token of every model alike';

/**
 * Why open sign-up cannot be served with `plans`, or undefined: the default plan leaves agents or
 * model tokens unlimited, or, with `paidProvider`, any model (no `models`).
 */
export function openSignupProblem(plans: Plans, paidProvider: boolean): string | undefined {
  const plan = plans[DEFAULT_PLAN];
  if (plan?.agents === undefined || plan.tokens_per_day === undefined) return OPEN_SIGNUP_NEEDS_LIMITS;
  return paidProvider && plan.models === undefined ? OPEN_SIGNUP_NEEDS_MODELS : undefined;
}

/** Whether the Worker's `env` binds a paid model provider: an OpenAI or Anthropic key, or Workers AI (a base URL without a key is a local server). */
export function paidProviderBound(env: Pick<ProviderEnv, 'OPENAI_API_KEY' | 'ANTHROPIC_API_KEY' | 'AI'>): boolean {
  return Boolean(env.OPENAI_API_KEY?.trim() || env.ANTHROPIC_API_KEY?.trim() || env.AI);
}

/**
 * What `npm run deploy` refuses of the sign-up settings in `vars`: caps that are not whole numbers,
 * and open sign-up with a default plan that leaves agents or tokens_per_day unlimited, or, with
 * `paidProvider` (the deployment has, or may have, an OpenAI or Anthropic key or the AI binding),
 * any model (no `models`). Not said when EDGESTR_PLANS itself is wrong, which the plans check says,
 * or when `plansKnown` is false: the plans are a secret.
 */
export function signupProblems(vars: SignupEnv, plansKnown = true, paidProvider = true): string[] {
  const problems = readCaps(vars).wrong.map((w) => w.problem);
  if (vars.EDGESTR_SIGNUP !== 'open' || !plansKnown) return problems;
  let plans: Plans;
  try {
    plans = parsePlans(vars.EDGESTR_PLANS);
  } catch {
    return problems;
  }
  if (openSignupProblem(plans, false)) problems.push(`${OPEN_SIGNUP_NEEDS_LIMITS}: set both in EDGESTR_PLANS, e.g. {"default":{"agents":3,"tokens_per_day":200000}}`);
  if (paidProvider && plans[DEFAULT_PLAN]?.models === undefined) {
    problems.push(`${OPEN_SIGNUP_NEEDS_MODELS}: list the models sign-ups may use in EDGESTR_PLANS, e.g. {"default":{"agents":3,"tokens_per_day":200000,"models":["gpt-4o-mini"]}} (["*"]: any model)`);
  }
  return problems;
}
