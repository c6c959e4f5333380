// The outbound policy (src/shared/outbound-url.ts) of what a hosted agent or a bridge dials for
// its owner at dial time (MCP servers, web_fetch, an agent's extra relays): the operator's
// exceptions (EDGESTR_OUTBOUND_ALLOW) apply only to an owner the operators vetted
// (deployment-bridges.ts `vettedOwner`: EDGESTR_OWNERS, added by an operator, or marked vetted),
// never to a key that signed itself up. A static owner is vetted without asking; with no
// exception configured nothing is asked; else the registry's answer is kept per isolate for
// OWNER_CACHE_MS (an owner vetted, or no longer, is seen within that time), and a registry that
// cannot be read counts as not vetted (not kept: asked again at the next dial). The management API
// asks vettedOwner itself at create and update.
// The deployment's own host is never dialled (a loop): EDGESTR_PUBLIC_URL's, and `origin`, the one
// the agent or bridge was created on (the management API's request origin, or EDGESTR_PUBLIC_URL's
// when set). A Durable Object knows no other host the Worker is served on (docs/OPERATIONS.md).

import { LruMap } from '../../src/shared/lru.js';
import { outboundPolicy, type OutboundEnv, type OutboundPolicy } from '../../src/shared/outbound-url.js';
import { errorMessage } from '../../src/shared/errors.js';
import type { AccountsBindings } from '../accounts/accounts-do.js';
import { vettedOwner } from './deployment-bridges.js';
import { OWNER_CACHE_MS, staticOwners, type OwnerEnv } from './owners.js';

/** Owners whose answer an isolate keeps (those of the agents and bridges it runs). */
const KEPT_OWNERS = 1024;
const known = new LruMap<string, { vetted: boolean; at: number }>(KEPT_OWNERS);

async function vetted(env: OutboundEnv & OwnerEnv & AccountsBindings, owner: string): Promise<boolean> {
  if (staticOwners(env).has(owner)) return true;
  if ((env.EDGESTR_OUTBOUND_ALLOW ?? '').trim() === '') return false; // no exception to apply
  const kept = known.get(owner);
  if (kept && Date.now() - kept.at < OWNER_CACHE_MS) return kept.vetted;
  try {
    const answer = await vettedOwner(env, owner);
    known.set(owner, { vetted: answer, at: Date.now() });
    return answer;
  } catch (e) {
    console.error(`outbound policy: whether ${owner} is vetted could not be read (${errorMessage(e)}); EDGESTR_OUTBOUND_ALLOW does not apply to this dial`);
    return false;
  }
}

/** The policy of a dial made for `owner` by its agent or bridge created on the deployment's `origin` (see the header). */
export async function ownerOutbound(env: OutboundEnv & OwnerEnv & AccountsBindings, owner: string, origin: string): Promise<OutboundPolicy> {
  return outboundPolicy(env, { vetted: await vetted(env, owner), origins: [origin] });
}
