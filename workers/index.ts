// The edgestr Worker: routes HTTP and WebSocket traffic to the relay shards, the management API
// (agents, bridge servers, local payments in development) and the MCP endpoint /mcp (the DVMCP
// gateway, workers/gateway/route.ts); the web console at /console (workers/console/route.ts).
// Development mode (EDGESTR_ENV=development: demo keys known to everyone, every key gets a
// shard, private outbound hosts, free local payments) is honoured only on loopback hosts, and test
// mode (free local payments) only on loopback and .test hosts: other requests get 403 JSON, logged
// once (workers/common/local-mode.ts). That stops a deployment left in either mode (on Cloudflare
// the URL host is the routed one) and DNS rebinding; it cannot stop another machine under
// `wrangler dev`, where the URL host is the client's Host header: there only the loopback address
// `npm start` binds does (scripts/start.mjs). In either mode a browser request from a page that is
// not on loopback (in test mode: nor on a .test host), told by its Origin header, gets 403 JSON too:
// a page the developer visits must not use the dev server (its demo owner key is public).
// A deployment with EDGESTR_PUBLIC_URL answers on that URL's hostname only: 421 JSON elsewhere (its
// workers.dev name next to a custom domain, for one), so an owner's dial under another name of this
// Worker cannot loop back to it (workers/common/served-host.ts).

import { Hono } from 'hono';
import { relayRoutes } from './relay-do/routes.js';
import { type RouterBindings } from './common/shards.js';
import { VERSION } from './relay-do/nip11.js';
import type { ProviderEnv } from './agent/providers/index.js';
import { agentRoutes, type AgentApiBindings } from './api/agents.js';
import { bridgeRoutes, bridgeStub, type BridgeApiBindings } from './api/bridge.js';
import { localPayRoutes } from './bridge/payments-route.js';
import { ensureDemo } from './api/demo.js';
import { localHostRefusal, localOriginRefusal } from './common/local-mode.js';
import { localMode, type LocalMode } from '../src/shared/env-mode.js';
import { servedHostRefusal } from './common/served-host.js';
import { handleMcp, type GatewayBindings } from './gateway/route.js';
import { adminRoutes, adminShardRoutes, type AdminApiBindings } from './api/admin.js';
import { usageRoutes } from './api/usage.js';
import { signupRoutes, type SignupApiBindings } from './api/signup.js';
import { plansOf } from './accounts/plans.js';
import { errorMessage } from '../src/shared/errors.js';
import { serveConsole, type ConsoleBindings } from './console/route.js';
import { relayApiRoutes, type RelayApiBindings } from './api/relay.js';
import { runBackups, runSummary } from './relay-do/backup.js';

export { RelayShard } from './relay-do/shard.js';
export { Agent } from './agent/agent-do.js';
export { ApiState } from './api/api-state.js';
export { Bridge } from './bridge/bridge-do.js';
export { Accounts } from './accounts/accounts-do.js';

export interface Env extends AgentApiBindings, BridgeApiBindings, RelayApiBindings, RouterBindings, GatewayBindings, ProviderEnv, ConsoleBindings, AdminApiBindings, SignupApiBindings {
  RELAY_LIMITS?: string;
}

type AppEnv = { Bindings: Env };

const app = new Hono<AppEnv>();

const devHostLogged: Partial<Record<LocalMode, boolean>> = {};
const devOriginLogged: Partial<Record<LocalMode, boolean>> = {};

// A deployment answers on EDGESTR_PUBLIC_URL's hostname only (workers/common/served-host.ts).
app.use('*', async (c, next) => {
  const refusal = servedHostRefusal(c.env, new URL(c.req.url));
  if (refusal) return c.json({ error: refusal.error }, refusal.status);
  await next();
});

// Development and test mode serve only hosts no deployment can have, and browser requests only from
// pages on such hosts (workers/common/local-mode.ts).
app.use('*', async (c, next) => {
  const mode = localMode(c.env);
  if (!mode) return next();
  const refusal = localHostRefusal(mode, new URL(c.req.url));
  if (refusal) {
    if (!devHostLogged[mode]) {
      devHostLogged[mode] = true;
      console.error(`EDGESTR_ENV=${mode} on a host it does not serve (${new URL(c.req.url).hostname}): ${refusal}`);
    }
    return c.json({ error: refusal }, 403);
  }
  const originRefusal = localOriginRefusal(mode, c.req.raw.headers.get('Origin'));
  if (originRefusal) {
    if (!devOriginLogged[mode]) {
      devOriginLogged[mode] = true;
      console.error(`EDGESTR_ENV=${mode}: refused a request from a web page it does not serve: ${JSON.stringify(originRefusal)}`);
    }
    return c.json({ error: originRefusal }, 403);
  }
  await next();
});

app.get('/health', async (c) => {
  const demo = await ensureDemo(c.env, new URL(c.req.url).origin);
  return c.json({ ok: true, version: VERSION, ...(demo ? { demo } : {}) });
});

// Management answers are private (an owner's agents, usage, export) or refusals: no cache keeps
// them, and no browser guesses their type. The answer is copied first, since a Durable Object's
// response has immutable headers.
app.use('/api/*', async (c, next) => {
  await next();
  const res = new Response(c.res.body, c.res);
  res.headers.set('Cache-Control', 'no-store');
  res.headers.set('X-Content-Type-Options', 'nosniff');
  c.res = res;
});

// A bad EDGESTR_PLANS fails every API call loudly, naming the field, until the operator fixes it.
app.use('/api/*', async (c, next) => {
  try {
    plansOf(c.env);
  } catch (e) {
    return c.json({ error: errorMessage(e) }, 500);
  }
  await next();
});

app.route('/api/agents', agentRoutes());
app.route('/api/admin/owners', adminRoutes());
app.route('/api/admin/shards', adminShardRoutes());
app.route('/api/usage', usageRoutes());
app.route('/api/signup', signupRoutes());
app.route('/api/bridge/servers', bridgeRoutes());
app.route('/api/relay', relayApiRoutes());
app.route('/api/bridge/pay', localPayRoutes<Env>(bridgeStub));

app.get('/console/*', async (c) => (await serveConsole(c.req.raw, c.env)) ?? c.notFound());
app.get('/console', async (c) => (await serveConsole(c.req.raw, c.env)) ?? c.notFound());

app.on(['POST', 'GET', 'DELETE'], '/mcp', (c) => handleMcp(c.req.raw, c.env, (p) => c.executionCtx.waitUntil(p)));

const landing = (req: Request) =>
  new Response(
    `edgestr relay\n\nConnect a Nostr client to ${new URL(req.url).origin.replace(/^http/, 'ws')}/ (public shard)\nor /r/<owner pubkey> (an owner's shard). NIP-11: send Accept: application/nostr+json.\n`,
    { headers: { 'Content-Type': 'text/plain; charset=utf-8' } },
  );

app.route('/', relayRoutes<AppEnv>(landing));

app.notFound((c) => c.json({ error: 'not found' }, 404));
app.onError((error, c) => {
  console.error('unhandled error', error instanceof Error ? error.stack : String(error));
  return c.json({ error: 'internal error' }, 500);
});

/**
 * Cron trigger (wrangler.toml `[triggers] crons`, hourly): backs up the shards written since their
 * last backup to BACKUPS when it is bound (workers/relay-do/backup.ts), and logs the run; without
 * the binding it does nothing.
 */
async function scheduled(controller: ScheduledController, env: Env): Promise<void> {
  if (!env.BACKUPS) return;
  const run = await runBackups(env, env.BACKUPS, controller.scheduledTime);
  for (const f of run.failed) console.error(`backup ${f.key} failed: ${f.error}`);
  console.log(runSummary(run));
}

export default { fetch: app.fetch, scheduled } satisfies ExportedHandler<Env>;
