// Management API for the DVMCP bridge (/api/bridge/servers), NIP-98 authenticated: register, list
// (with health), read, update and remove the caller's remote MCP servers. Every call needs a caller
// allowed to own (EDGESTR_OWNERS, checked before any Durable Object is touched); POST and PATCH one
// not suspended (403 OWNER_SUSPENDED, common/owners.ts notAnActiveOwner: a suspended owner still
// lists, reads and removes its servers, and its bridge answers nothing). Each owner has one
// Bridge (one provider key, created on the first registration); a server id is unique per owner.
// The URL must pass the deployment's outbound policy for the owner (422 naming it; the hosts of
// EDGESTR_OUTBOUND_ALLOW only for an owner the operators vetted; never the deployment's own host,
// EDGESTR_PUBLIC_URL's or the one the call came in on: the bridge would call /mcp, which calls the
// bridge); it is checked again at every dial. Secret headers are sealed at rest and never returned
// (a view lists their names only); a PATCH moving a server to another origin must give them again
// (config.ts movedHeadersIssue).
// Once a server is added, the provider key is recorded on the public shard: as one of this
// deployment's bridges ('bridge': NIP-11 `bridge_providers`, listed first by /mcp and the clients)
// only when the operators vetted the owner, else as provisioned only (common/deployment-bridges.ts,
// docs/BRIDGE.md).

import { Hono } from 'hono';
import { SERVER_ID } from '../../src/shared/dvmcp.js';
import { checkOutboundUrl, outboundPolicy, type OutboundEnv } from '../../src/shared/outbound-url.js';
import type { Bridge } from '../bridge/bridge-do.js';
import { CreateServerSchema, movedHeadersIssue, UpdateServerSchema } from '../bridge/config.js';
import { bridgeServerCap, DEFAULT_PLAN, planLimits, type PlanEnv } from '../accounts/plans.js';
import { notAnActiveOwner, notAnOwner, ownerState } from '../common/owners.js';
import { recordPublicBridge, vettedOwner } from '../common/deployment-bridges.js';
import { sealingSecret } from '../common/secrets.js';
import { shardStub, type RouterBindings } from '../common/shards.js';
import { relayRequestUrl } from '../common/public-url.js';
import { bodyAs } from './agents.js';
import type { ApiStateBindings } from './api-state.js';
import { nip98, type AuthedVariables } from './nip98-auth.js';

export interface BridgeApiBindings extends RouterBindings, ApiStateBindings, OutboundEnv, PlanEnv {
  BRIDGE: DurableObjectNamespace<Bridge>;
}

type ApiEnv = { Bindings: BridgeApiBindings; Variables: AuthedVariables };

/** The owner's Bridge (one per owner: its provider key is the owner's bridge key). */
export const bridgeStub = (env: Pick<BridgeApiBindings, 'BRIDGE'>, owner: string) => env.BRIDGE.get(env.BRIDGE.idFromName(owner));

const NO_SERVER = 'no such server';

/**
 * The outbound policy's verdict on a server URL of an owner, `vetted` or not (EDGESTR_OUTBOUND_ALLOW
 * only if vetted; never the deployment's own host, EDGESTR_PUBLIC_URL's or `calledOn`, the origin the
 * call came in on), as a 422 issue.
 */
function urlIssue(env: OutboundEnv, vetted: boolean, calledOn: string, url: string): { path: string; message: string } | undefined {
  const checked = checkOutboundUrl(url, 'http', outboundPolicy(env, { vetted, origins: [calledOn] }));
  return checked.ok ? undefined : { path: 'url', message: checked.error };
}

export function bridgeRoutes() {
  const app = new Hono<ApiEnv>();
  // Any owner looks and removes; only one not suspended registers and updates.
  const owners = nip98<BridgeApiBindings>(notAnOwner);
  const activeOwners = nip98<BridgeApiBindings>(notAnActiveOwner);

  app.post('/', activeOwners, async (c) => {
    const caller = c.get('caller');
    const parsed = bodyAs(c.get('body'), CreateServerSchema, 'server');
    if (!parsed.ok) return c.json(parsed.error, 422);
    const vetted = await vettedOwner(c.env, caller);
    const refused = urlIssue(c.env, vetted, new URL(c.req.url).origin, parsed.data.url);
    if (refused) return c.json({ error: 'invalid server', issues: [refused] }, 422);
    if (!sealingSecret(c.env)) return c.json({ error: 'EDGESTR_SECRET is not configured on this deployment' }, 500);
    // The deployment's public origin (EDGESTR_PUBLIC_URL) when set: the bridge dials its shards there.
    const origin = (relayRequestUrl(c.env, c.req.url) ?? new URL(c.req.url)).origin;
    const bridge = bridgeStub(c.env, caller);
    const provider = await bridge.ensureProvider(caller, origin);
    // The owner's shard must know the provider key before the bridge connects and publishes there.
    await shardStub(c.env, caller).provisionAgent(provider, caller, 'bridge');
    const plan = planLimits(c.env, (await ownerState(c.env, caller))?.plan ?? DEFAULT_PLAN);
    const added = await bridge.addServer(parsed.data, bridgeServerCap(plan));
    if (!added.ok) return c.json({ error: added.error }, added.status);
    // Only now the public shard (a refused registration records nothing there): a vetted owner's
    // bridge is one of this deployment's, whose servers /mcp and the clients list first.
    await recordPublicBridge(c.env, caller, provider, vetted);
    return c.json({ provider, id: parsed.data.id }, 201);
  });

  app.get('/', owners, async (c) => c.json({ servers: await bridgeStub(c.env, c.get('caller')).list() }));

  app.get('/:id', owners, async (c) => {
    const id = c.req.param('id');
    const view = SERVER_ID.test(id) ? await bridgeStub(c.env, c.get('caller')).view(id) : undefined;
    return view ? c.json(view) : c.json({ error: NO_SERVER }, 404);
  });

  app.patch('/:id', activeOwners, async (c) => {
    const id = c.req.param('id');
    const bridge = bridgeStub(c.env, c.get('caller'));
    const current = SERVER_ID.test(id) ? await bridge.view(id) : undefined;
    if (!current) return c.json({ error: NO_SERVER }, 404);
    const parsed = bodyAs(c.get('body'), UpdateServerSchema, 'server');
    if (!parsed.ok) return c.json(parsed.error, 422);
    const refused = (parsed.data.url === undefined ? undefined : urlIssue(c.env, await vettedOwner(c.env, c.get('caller')), new URL(c.req.url).origin, parsed.data.url)) ?? movedHeadersIssue(current, parsed.data);
    if (refused) return c.json({ error: 'invalid server', issues: [refused] }, 422);
    const view = await bridge.updateServer(id, parsed.data);
    return view ? c.json(view) : c.json({ error: NO_SERVER }, 404);
  });

  app.delete('/:id', owners, async (c) => {
    const id = c.req.param('id');
    const removed = SERVER_ID.test(id) && (await bridgeStub(c.env, c.get('caller')).removeServer(id));
    return removed ? c.body(null, 204) : c.json({ error: NO_SERVER }, 404);
  });

  return app;
}
