// Open sign-up (POST /api/signup), only when EDGESTR_SIGNUP=open: the key that signs the NIP-98
// request becomes an owner on the default plan (201). Closed (the default): 403 before any
// Durable Object is touched. A key that already owns here: 409.

import { Hono } from 'hono';
import { accountsStub, type AccountsBindings } from '../accounts/accounts-do.js';
import { DEFAULT_PLAN } from '../accounts/plans.js';
import { ownerState, forgetOwnerState, type OwnerEnv } from '../common/owners.js';
import type { ApiStateBindings } from './api-state.js';
import { nip98, type AuthedVariables } from './nip98-auth.js';

export interface SignupApiBindings extends ApiStateBindings, AccountsBindings, OwnerEnv {
  /** "open": anyone may sign up. */
  EDGESTR_SIGNUP?: string;
}

type ApiEnv = { Bindings: SignupApiBindings; Variables: AuthedVariables };

export const SIGNUP_CLOSED = 'sign-up is not open on this deployment (EDGESTR_SIGNUP)';

export function signupRoutes() {
  const app = new Hono<ApiEnv>();
  app.use('*', nip98<SignupApiBindings>((env) => (env.EDGESTR_SIGNUP === 'open' ? undefined : SIGNUP_CLOSED)));

  app.post('/', async (c) => {
    const caller = c.get('caller');
    if ((await ownerState(c.env, caller)) || !(await accountsStub(c.env).add(caller, DEFAULT_PLAN))) {
      return c.json({ error: 'this key is already an owner on this deployment' }, 409);
    }
    forgetOwnerState();
    return c.json({ pubkey: caller, plan: DEFAULT_PLAN, suspended: false }, 201);
  });

  return app;
}
