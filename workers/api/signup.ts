// Open sign-up (POST /api/signup), only when EDGESTR_SIGNUP=open: the key that signs the NIP-98
// request becomes an owner on the default plan (201), not vetted: its bridge is not one of this
// deployment's (NIP-11 `bridge_providers`, docs/BRIDGE.md) until an operator marks it vetted
// (PATCH /api/admin/owners/<pk> {vetted: true}). Closed (the default): 403 before any
// Durable Object is touched. A key that already owns here: 409. A key an operator removed
// (DELETE /api/admin/owners/<pk>): 403 until an operator adds it again, so that a removal (of a
// suspended owner too) is not undone by signing up. Open, each client address
// (CF-Connecting-IP) is held to the SIGNUP_RATE_LIMIT binding (Workers Rate Limiting, wrangler.toml:
// sign-ups per minute per address, counted per Cloudflare location) before any other work: 429. A
// sign-up adds its one key to this isolate's copy of the owner registry (workers/common/owners.ts)
// rather than dropping the copy, so sign-ups do not make other requests fetch the whole registry.
// The registry takes sign-ups up to EDGESTR_SIGNUP_MAX_OWNERS owners and EDGESTR_SIGNUP_MAX_PER_DAY
// a UTC day (workers/accounts/signup-limits.ts, counted by the Accounts object): past either, 403
// naming the cap (the day's: with Retry-After, the seconds until the UTC day ends). And open sign-up needs a default plan that sets `agents` and `tokens_per_day`
// (else a stranger's key spends the provider keys without end): without one, every sign-up is 503
// with that reason, before the NIP-98 checks (`npm run deploy` refuses such a configuration; this
// covers a deploy that went around it).

import { Hono } from 'hono';
import { accountsStub, type AccountsBindings } from '../accounts/accounts-do.js';
import { DEFAULT_PLAN, plansOf, type PlanEnv } from '../accounts/plans.js';
import { openSignupProblem, paidProviderBound, signupCaps, type SignupEnv } from '../accounts/signup-limits.js';
import { clientAddress } from '../common/client-address.js';
import { rememberOwner, staticOwners, type OwnerEnv } from '../common/owners.js';
import type { ApiStateBindings } from './api-state.js';
import { nip98, type AuthedVariables } from './nip98-auth.js';
import type { ProviderEnv } from '../agent/providers/index.js';

export interface SignupApiBindings extends ApiStateBindings, AccountsBindings, OwnerEnv, PlanEnv, SignupEnv, ProviderEnv {
  /** "open": anyone may sign up. */
  EDGESTR_SIGNUP?: string;
  /** Workers Rate Limiting: sign-ups per client address (wrangler.toml [[ratelimits]]). */
  SIGNUP_RATE_LIMIT?: RateLimit;
}

type ApiEnv = { Bindings: SignupApiBindings; Variables: AuthedVariables };

export const SIGNUP_CLOSED = 'sign-up is not open on this deployment (EDGESTR_SIGNUP)';
/** The period of SIGNUP_RATE_LIMIT (wrangler.toml), in seconds. */
const SIGNUP_PERIOD_SECONDS = 60;
const SIGNUP_REMOVED = 'this key was removed by the operators of this deployment; ask them to add it again';
const ALREADY_AN_OWNER = 'this key is already an owner on this deployment';
export const SIGNUP_RATE_LIMITED = `too many sign-ups from this address; retry in ${SIGNUP_PERIOD_SECONDS} s`;
const signupFull = (owners: number) => `sign-up is full on this deployment (${owners} owners); ask the operators`;
/** Seconds from `now` (ms) until the UTC day ends, when the day's count of sign-ups starts again (at least 1). */
const secondsToUtcDayEnd = (now: number): number => Math.max(1, Math.ceil((Math.floor(now / 86_400_000 + 1) * 86_400_000 - now) / 1000));
const signupFullToday = (perDay: number) => `sign-up is full on this deployment today (${perDay} sign-ups a day); try again tomorrow (UTC)`;

export function signupRoutes() {
  const app = new Hono<ApiEnv>();
  app.use('*', async (c, next) => {
    if (c.env.EDGESTR_SIGNUP === 'open' && c.env.SIGNUP_RATE_LIMIT) {
      const address = clientAddress(c.req.raw);
      if (!(await c.env.SIGNUP_RATE_LIMIT.limit({ key: address })).success) {
        return c.json({ error: SIGNUP_RATE_LIMITED }, 429, { 'Retry-After': String(SIGNUP_PERIOD_SECONDS) });
      }
    }
    const unavailable = c.env.EDGESTR_SIGNUP === 'open' ? openSignupProblem(plansOf(c.env), paidProviderBound(c.env)) : undefined;
    if (unavailable) return c.json({ error: `sign-up is unavailable on this deployment: ${unavailable}; ask the operators` }, 503);
    await next();
  });
  app.use('*', nip98<SignupApiBindings>((env) => (env.EDGESTR_SIGNUP === 'open' ? undefined : SIGNUP_CLOSED)));

  app.post('/', async (c) => {
    const caller = c.get('caller');
    if (staticOwners(c.env).has(caller)) return c.json({ error: ALREADY_AN_OWNER }, 409);
    // The registry answers for its own keys (registered, or removed by an operator): no copy of it is needed.
    const caps = signupCaps(c.env);
    const result = await accountsStub(c.env).signUp(caller, DEFAULT_PLAN, caps, Date.now());
    if (result === 'removed') return c.json({ error: SIGNUP_REMOVED }, 403);
    if (result === 'owner') return c.json({ error: ALREADY_AN_OWNER }, 409);
    if (result === 'full') return c.json({ error: signupFull(caps.owners) }, 403);
    if (result === 'full_today') return c.json({ error: signupFullToday(caps.per_day) }, 403, { 'Retry-After': String(secondsToUtcDayEnd(Date.now())) });
    rememberOwner(caller, { plan: DEFAULT_PLAN, suspended: false });
    return c.json({ pubkey: caller, plan: DEFAULT_PLAN, suspended: false }, 201);
  });

  return app;
}
