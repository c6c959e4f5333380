// The edgestr Worker: routes HTTP and WebSocket traffic to the relay shards (and, as they land,
// the management API, the MCP endpoint and the console).

import { Hono } from 'hono';
import { relayRoutes } from '../workers/relay-do/routes.js';
import { VERSION } from '../workers/relay-do/nip11.js';
import type { ProviderEnv } from '../workers/agent/providers/index.js';
import { agentRoutes, type AgentApiBindings } from './api/agents.js';
import { ensureDemo } from './api/demo.js';

export { RelayShard } from '../workers/relay-do/shard.js';
export { Agent } from '../workers/agent/agent-do.js';

export interface Env extends AgentApiBindings, ProviderEnv {
  RELAY_LIMITS?: string;
}

type AppEnv = { Bindings: Env };

const app = new Hono<AppEnv>();

app.get('/health', async (c) => {
  const demo = await ensureDemo(c.env, new URL(c.req.url).origin);
  return c.json({ ok: true, version: VERSION, ...(demo ? { demo } : {}) });
});

app.route('/api/agents', agentRoutes());

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

export default app;
