// Plans of a SaaS deployment (EDGESTR_PLANS, a JSON object of plan name → limits): what an owner on
// each plan may use. A limit left out is unlimited (but bridge_servers: DEFAULT_BRIDGE_SERVERS);
// `models` lists the model names the owner's agents may call (absent, or naming "*": any; the echo
// provider is free and never restricted): the token limits count a token of every model alike, so
// they bound the price only with the models named (planAllowsModel, checked by the agent API at
// create and update and before each model call of a run). The plan named "default" is the one of owners
// listed statically (EDGESTR_OWNERS), of sign-ups and of owners added without a plan. Validated at
// first use (cached per isolate for the raw string); a bad value throws an Error naming the field,
// so every request that needs the plans fails loudly until the operator fixes it. `npm run deploy`
// runs this same parsePlans (scripts/deploy-check.mjs bundles this file) and refuses what it throws.

import { z } from 'zod';
import { hasProtoKey, PROTO_KEY } from '../common/proto-key.js';

const limit = z.number().int().min(0);

export const PlanSchema = z
  .object({
    agents: limit.optional(),
    tokens_per_day: limit.optional(),
    tokens_per_month: limit.optional(),
    runs_per_day: limit.optional(),
    bridge_calls_per_day: limit.optional(),
    bridge_servers: limit.optional(),
    stored_bytes: limit.optional(),
    events_per_second: limit.optional(),
    models: z.array(z.string().min(1, 'model names are not empty')).optional(),
  })
  .strict();

export type Plan = z.infer<typeof PlanSchema>;

const PlansSchema = z.record(z.string().regex(/^[a-z0-9_-]{1,32}$/, 'plan names are 1-32 of a-z 0-9 _ -'), PlanSchema);

export type Plans = Record<string, Plan>;

export const DEFAULT_PLAN = 'default';

/** Bridge servers an owner may register when its plan names no `bridge_servers` (unlike other limits, not unlimited). */
export const DEFAULT_BRIDGE_SERVERS = 100;

/** The number of bridge servers `plan` allows. */
export const bridgeServerCap = (plan: Plan): number => plan.bridge_servers ?? DEFAULT_BRIDGE_SERVERS;

export interface PlanEnv {
  EDGESTR_PLANS?: string;
}

let cached: { raw: string | undefined; plans: Plans } | undefined;

/** The deployment's plans (no EDGESTR_PLANS: one unlimited "default" plan). Throws naming the bad field. */
export function plansOf(env: PlanEnv): Plans {
  if (cached && cached.raw === env.EDGESTR_PLANS) return cached.plans;
  const plans = parsePlans(env.EDGESTR_PLANS);
  cached = { raw: env.EDGESTR_PLANS, plans };
  return plans;
}

export function parsePlans(raw: string | undefined): Plans {
  if (raw === undefined || raw.trim() === '') return { [DEFAULT_PLAN]: {} };
  let json: unknown;
  try {
    json = JSON.parse(raw);
  } catch {
    throw new Error('EDGESTR_PLANS is not JSON');
  }
  // zod's record would drop it silently (workers/common/proto-key.ts); "constructor" and the like are
  // ordinary names, looked up as own entries (planLimits, the admin API).
  if (hasProtoKey(json)) throw new Error(`EDGESTR_PLANS.${PROTO_KEY}: "${PROTO_KEY}" cannot name a plan; choose another name`);
  const parsed = PlansSchema.safeParse(json);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    // A bad plan name: zod's own message is "Invalid key in record"; the name rule's is clearer.
    const message = issue?.code === 'invalid_key' ? (issue.issues[0]?.message ?? issue.message) : issue?.message;
    const path = issue?.path.join('.') ?? '';
    throw new Error(`EDGESTR_PLANS${path === '' ? '' : `.${path}`}: ${message ?? 'invalid'}`);
  }
  if (!parsed.data[DEFAULT_PLAN]) throw new Error(`EDGESTR_PLANS.${DEFAULT_PLAN}: a plan named "${DEFAULT_PLAN}" is required`);
  return parsed.data;
}

/** The entry of a plan's `models` that names every model. */
export const ANY_MODEL = '*';

/** Whether `plan` lets an agent of `provider` call `model`: echo always (it costs nothing), else a model its `models` names (absent or "*": any). */
export const planAllowsModel = (plan: Plan, provider: string, model: string): boolean =>
  provider === 'echo' || plan.models === undefined || plan.models.includes(ANY_MODEL) || plan.models.includes(model);

/** The models `plan` allows, as its owner is told (the plan restricts them: `models` is set). */
export const planModelsText = (plan: Plan): string =>
  plan.models?.length ? `the owner’s plan allows the models ${plan.models.join(', ')}` : 'the owner’s plan allows no model (only the echo provider)';

/** The limits of `name` (an unknown name — a plan removed from EDGESTR_PLANS — falls back to the default plan). */
export const planLimits = (env: PlanEnv, name: string): Plan => {
  const plans = plansOf(env);
  return (Object.hasOwn(plans, name) ? plans[name] : undefined) ?? plans[DEFAULT_PLAN] ?? {};
};
