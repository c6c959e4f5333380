// NIP-98 authentication of management API calls: a hono middleware that verifies the
// Authorization header against the exact request (URL, method, body hash, ±60 s), consumes the
// event id once in the caller's shard (replay protection shared by every isolate), and exposes the
// caller's pubkey.

import type { MiddlewareHandler } from 'hono';
import { verifyHttpAuth, HTTP_AUTH_WINDOW_SECONDS } from '../shared/nip98.js';
import { relayVerifier } from '../../workers/relay-do/verifier.js';
import { shardStub, type ShardBindings } from '../../workers/relay-do/routes.js';

export type AuthedVariables = { caller: string; body: Uint8Array };

export function nip98(): MiddlewareHandler<{ Bindings: ShardBindings; Variables: AuthedVariables }> {
  return async (c, next) => {
    const body = new Uint8Array(await c.req.raw.arrayBuffer());
    const now = Math.floor(Date.now() / 1000);
    let usedId: string | undefined;
    const checked = verifyHttpAuth(
      { authorization: c.req.header('Authorization') ?? null, url: c.req.url, method: c.req.method, body },
      {
        verifier: await relayVerifier(),
        now,
        // Replay is checked below in the caller's shard (shared by all isolates); here we only learn the id.
        replay: { seen: (id) => ((usedId = id), false) },
      },
    );
    if (!checked.ok) return c.json({ error: `NIP-98: ${checked.error.reason}` }, 401);
    const shard = shardStub(c.env, checked.value.pubkey);
    if (!(await shard.consumeAuthorization(usedId ?? checked.value.event.id, now + HTTP_AUTH_WINDOW_SECONDS + 5))) {
      return c.json({ error: 'NIP-98: this authorization event was already used' }, 401);
    }
    c.set('caller', checked.value.pubkey);
    c.set('body', body);
    await next();
  };
}
