// NIP-98 authentication of management API calls: a hono middleware that, in this order,
//   1. checks the Authorization header against the request (URL, method, ±60 s; no body needed),
//   2. asks `authorize` whether the signer may use this API at all (e.g. EDGESTR_OWNERS): 403
//      before any Durable Object is touched, so a key that can merely sign creates nothing (open
//      sign-up admits any key: the ApiState it makes deletes its storage once the id expires),
//   3. reads the body with a cap (413 over MAX_API_BODY_BYTES) and checks its `payload` hash,
//   4. consumes the event id once in the caller's ApiState object (replay protection shared by
//      every isolate), remembered for as long as the event is valid (replayExpiry),
// and exposes the caller's pubkey and the body.

import type { MiddlewareHandler } from 'hono';
import { checkHttpAuthPayload, replayExpiry, verifyHttpAuthHeader } from '../../src/shared/nip98.js';
import { relayVerifier } from '../common/verifier.js';
import { MAX_API_BODY_BYTES, readBoundedBody } from './body.js';
import { apiStateStub, type ApiStateBindings } from './api-state.js';

export type AuthedVariables = { caller: string; body: Uint8Array };

/** Why `pubkey` may not use this API (the 403 message), or undefined when it may. */
export type Authorize<B> = (env: B, pubkey: string) => string | undefined | Promise<string | undefined>;

export function nip98<B extends ApiStateBindings>(
  authorize: Authorize<B>,
  maxBody: number = MAX_API_BODY_BYTES,
): MiddlewareHandler<{ Bindings: B; Variables: AuthedVariables }> {
  return async (c, next) => {
    const now = Math.floor(Date.now() / 1000);
    const checked = verifyHttpAuthHeader(
      { authorization: c.req.header('Authorization') ?? null, url: c.req.url, method: c.req.method },
      { verifier: await relayVerifier(), now },
    );
    if (!checked.ok) return c.json({ error: `NIP-98: ${checked.error.reason}` }, 401);
    const { pubkey, event } = checked.value;
    const refused = await authorize(c.env, pubkey);
    if (refused !== undefined) return c.json({ error: refused }, 403);
    const body = await readBoundedBody(c.req.raw, maxBody);
    if (!body.ok) return c.json({ error: body.error }, 413);
    const payload = checkHttpAuthPayload(event, body.value);
    if (!payload.ok) return c.json({ error: `NIP-98: ${payload.error.reason}` }, 401);
    if (!(await apiStateStub(c.env, pubkey).consumeAuthorization(event.id, replayExpiry(event, now)))) {
      return c.json({ error: 'NIP-98: this authorization event was already used' }, 401);
    }
    c.set('caller', pubkey);
    c.set('body', body.value);
    await next();
  };
}
