// Management API for hosted agents (/api/agents), NIP-98 authenticated: create, list, read, update,
// delete. Every call needs a caller allowed to own (EDGESTR_OWNERS, checked before any Durable
// Object is touched: an owner removed from the list loses its agents' management at once); POST and
// PATCH one not suspended (403 OWNER_SUSPENDED, common/owners.ts notAnActiveOwner: a suspended
// owner still lists, reads and deletes its agents); only an agent's owner may see or change it. Outbound URLs (extra relays, MCP servers) must pass the
// deployment's outbound policy (src/shared/outbound-url.ts) for the owner at create and update
// (EDGESTR_OUTBOUND_ALLOW only for an owner the operators vetted; never this deployment's own host,
// the agent's origin's or the one the call came in on: a loop; nor a web_fetch_hosts entry naming
// only that host, in production: ownHostEntryRefusal): 422 naming the field; relays on
// exactly the agent's origin are its shards, reached without the network, each listed once (one
// shard in two spellings, e.g. /r/<hex> and /r/<npub>: 422).
// An explicit provider must be one the deployment configures (create and update alike). An agent
// with an explicit hosted provider (openai, anthropic, workers-ai) must name its model
// (`models` or `default_model`): there is no model every OpenAI-compatible server knows; web_fetch
// needs `web_fetch_hosts`. The models it names (`models`, `default_model`) must be ones the owner's
// plan allows (its `models`, workers/accounts/plans.ts; echo is never restricted): 422 naming the
// field and the plan's list, at create and at an update that sets provider, models or default_model. Agents are looked up in the caller's shard record first, so a key that
// is not one of the caller's agents never reaches (or creates) an Agent Durable Object: 404 (DELETE
// of any other key instead revokes, for good on the relay, the caller's NIP-OA attestations of it:
// 200 `{revoked}`, whether the relay holds a proof of it now or not; 204 is a hosted agent deleted).
// A key in the caller's record is deleted whatever its Agent object holds (the Agent forgets it,
// then the shard its record), and a creation whose Agent call failed is undone the same way, so no
// agent runs unlisted or uncounted by the plan: a step that fails answers 503 saying what to send
// again. A path that is not a key: 400; a method the resource does not have: 405 with `Allow`. MCP
// server headers are sealed before the config is stored (workers/agent/mcp-headers.ts), never returned.

import { Hono } from 'hono';
import type { z } from 'zod';
import { generateSecretKey, getPublicKey } from 'nostr-tools/pure';
import { parsePubkey, toNpub } from '../../src/shared/keys.js';
import { err, errorMessage, ok, type Result } from '../../src/shared/errors.js';
import { verifyAuthTag } from '../../src/shared/nip-oa.js';
import { nobleVerifier } from '../../src/shared/verify.js';
import { checkOutboundUrl, outboundPolicy, ownHostEntryRefusal, type OutboundEnv } from '../../src/shared/outbound-url.js';
import { parseAllowlist } from '../../src/shared/host-policy.js';
import { vettedOwner } from '../common/deployment-bridges.js';
import { agentRelays, CreateAgentSchema, DEFAULT_LIMITS, UpdateAgentSchema, type StoredAgent } from '../agent/config.js';
import type { Agent, AgentView } from '../agent/agent-do.js';
import { sealingSecret, sealSecretKey } from '../common/secrets.js';
import { sealMcpServers } from '../agent/mcp-headers.js';
import { shardStub, type RouterBindings } from '../common/shards.js';
import { relayRequestUrl } from '../common/public-url.js';
import { shardOfPath, shardUrlOf } from '../../src/shared/shard-url.js';
import { notAnActiveOwner, notAnOwner, ownerState } from '../common/owners.js';
import { MAX_REVOKED_PER_OWNER } from '../relay-do/ownership.js';
import { DEFAULT_PLAN, planAllowsModel, planLimits, planModelsText, type Plan, type PlanEnv } from '../accounts/plans.js';
import { nip98, type AuthedVariables } from './nip98-auth.js';
import type { ApiStateBindings } from './api-state.js';
import { configuredProviders, defaultProviderName, type ProviderEnv } from '../agent/providers/index.js';

export interface AgentApiBindings extends RouterBindings, ApiStateBindings, ProviderEnv, OutboundEnv, PlanEnv {
  AGENT: DurableObjectNamespace<Agent>;
}

type ApiEnv = { Bindings: AgentApiBindings; Variables: AuthedVariables };

export const agentStub = (env: Pick<AgentApiBindings, 'AGENT'>, pubkey: string) => env.AGENT.get(env.AGENT.idFromName(pubkey));

export const issuesOf = (error: z.ZodError) => error.issues.map((i) => ({ path: i.path.join('.'), message: i.message }));

export function parseJson(body: Uint8Array): { ok: true; value: unknown } | { ok: false } {
  try {
    return { ok: true, value: body.length ? JSON.parse(new TextDecoder().decode(body)) : {} };
  } catch {
    return { ok: false };
  }
}

/** A request body read as `schema`: its data, or the 422 body naming what is wrong (`invalid <what>` with the issues; a body that is not JSON). */
export function bodyAs<S extends z.ZodType>(body: Uint8Array, schema: S, what: string): { ok: true; data: z.infer<S> } | { ok: false; error: { error: string; issues: Array<{ path: string; message: string }> } } {
  const json = parseJson(body);
  if (!json.ok) return { ok: false, error: { error: 'body is not JSON', issues: [] } };
  const parsed = schema.safeParse(json.value);
  return parsed.success ? { ok: true, data: parsed.data } : { ok: false, error: { error: `invalid ${what}`, issues: issuesOf(parsed.error) } };
}

interface Issue {
  path: string;
  message: string;
}

/**
 * The outbound URLs of an agent config that the deployment's policy refuses for its owner (vetted
 * or not: EDGESTR_OUTBOUND_ALLOW applies to vetted owners only; never the deployment's own host:
 * the agent's `origin` and the one the call came in on, `calledOn`), and the web_fetch_hosts
 * entries that name only that own host (ownHostEntryRefusal), as 422 issues. A relay on exactly the
 * agent's origin is one of its shards.
 */
async function outboundIssues(
  env: AgentApiBindings,
  owner: string,
  origin: string,
  calledOn: string,
  input: { relays?: string[]; mcp_servers?: Array<{ url: string }>; web_fetch_hosts?: string[] },
): Promise<Issue[]> {
  if (!input.relays?.length && !input.mcp_servers?.length && !input.web_fetch_hosts?.length) return [];
  const policy = outboundPolicy(env, { vetted: await vettedOwner(env, owner), origins: [origin, calledOn] });
  const ownHost = new URL(origin).host;
  const issues: Issue[] = [];
  (input.relays ?? []).forEach((relay, i) => {
    const checked = checkOutboundUrl(relay, 'relay', policy);
    if (checked.ok || checked.error === 'invalid URL' || new URL(relay).host !== ownHost) {
      if (!checked.ok) issues.push({ path: `relays.${i}`, message: checked.error });
    } else if (shardOfPath(new URL(relay).pathname) === undefined) {
      issues.push({ path: `relays.${i}`, message: 'not a relay shard of this deployment (/ or /r/<owner>)' });
    }
  });
  issues.push(...repeatedShards(origin, input.relays ?? []));
  (input.mcp_servers ?? []).forEach((server, i) => {
    const checked = checkOutboundUrl(server.url, 'http', policy);
    if (!checked.ok) issues.push({ path: `mcp_servers.${i}.url`, message: checked.error });
  });
  (input.web_fetch_hosts ?? []).forEach((entry, i) => {
    // An entry that is not a host pattern is the tool's to report (workers/agent/tools/registry.ts).
    const [pattern] = parseAllowlist([entry]).patterns;
    const refused = pattern === undefined ? undefined : ownHostEntryRefusal(pattern, policy);
    if (refused !== undefined) issues.push({ path: `web_fetch_hosts.${i}`, message: `refused: ${refused}` });
  });
  return issues;
}

/**
 * A relay naming a shard of this deployment that an earlier one names already, in any spelling
 * (shard-url.ts), as a 422 issue: the agent would open one connection to that shard per spelling,
 * each counted against its owner's cap there (docs/OPERATIONS.md "Memory of a shard").
 */
function repeatedShards(origin: string, relays: readonly string[]): Issue[] {
  const seen = new Set<string>();
  const issues: Issue[] = [];
  relays.forEach((relay, i) => {
    const shard = shardUrlOf(origin, relay);
    if (shard === undefined) return;
    if (seen.has(shard)) issues.push({ path: `relays.${i}`, message: `names the relay shard ${new URL(shard).pathname} already listed` });
    seen.add(shard);
  });
  return issues;
}

/** The providers that call a hosted model API by model name (echo needs none). */
const NAMED_MODEL_PROVIDERS: ReadonlySet<string> = new Set(['openai', 'anthropic', 'workers-ai']);

/** The settings checked across fields, at create and on the result of an update. */
type CrossFields = Pick<z.infer<typeof UpdateAgentSchema>, 'provider' | 'models' | 'default_model' | 'tools' | 'web_fetch_hosts'>;

/**
 * 422 issues of settings that would fail every run: a provider this deployment does not configure
 * (`configured`, configuredProviders), a hosted provider with no model to call, and web_fetch with
 * no allowed host (it would refuse every call). At create, and on the result of an update whose
 * provider is the one the update names (a stored one was checked when it was set).
 */
function crossFieldIssues(c: CrossFields, configured: readonly string[]): Issue[] {
  const issues: Issue[] = [];
  if (c.provider && !configured.includes(c.provider)) {
    issues.push({ path: 'provider', message: `provider "${c.provider}" is not configured on this deployment (available: ${configured.join(', ')})` });
  }
  if (c.provider && NAMED_MODEL_PROVIDERS.has(c.provider) && !c.models?.length && !c.default_model) {
    issues.push({
      path: 'models',
      message: `provider "${c.provider}" needs a model: set models (e.g. ["gpt-4o-mini"], or a local server's model name such as ["llama3.2"]) or default_model`,
    });
  }
  if (c.tools?.includes('web_fetch') && !c.web_fetch_hosts?.length) {
    issues.push({ path: 'web_fetch_hosts', message: 'web_fetch needs the hosts it may fetch: set web_fetch_hosts (e.g. ["example.com", "*.example.org"])' });
  }
  return issues;
}

/**
 * 422 issues of the models an agent names (`models`, `default_model`) that the owner's plan does not
 * allow for its provider (`provider`: the one it names, else the deployment's, which it follows).
 */
function planModelIssues(plan: Plan, provider: string, c: Pick<CrossFields, 'models' | 'default_model'>): Issue[] {
  const refused = (model: string) => !planAllowsModel(plan, provider, model);
  const issues: Issue[] = (c.models ?? []).flatMap((model, i) => (refused(model) ? [{ path: `models.${i}`, message: planModelsText(plan) }] : []));
  if (c.default_model !== undefined && refused(c.default_model)) issues.push({ path: 'default_model', message: planModelsText(plan) });
  return issues;
}

/** The methods each management path answers (anything else: 405 with this Allow header). */
const ALLOWED_METHODS = { collection: ['GET', 'POST'], agent: ['GET', 'PATCH', 'DELETE'] } as const;

/** The agent's own NIP-OA tag must verify against the agent key and name the caller. */
function checkOaTag(tag: readonly string[] | undefined, agent: string, owner: string): string | undefined {
  if (!tag) return undefined;
  if (tag[1] !== owner) return 'oa_auth must name the caller as owner';
  const r = verifyAuthTag(tag, agent, { kind: 0, created_at: Math.floor(Date.now() / 1000) }, nobleVerifier);
  return r.ok ? undefined : `oa_auth is not a valid NIP-OA attestation for this agent: ${r.error}`;
}

const NO_SECRET = 'EDGESTR_SECRET is not configured on this deployment';

/** A path segment that is not a key (400). */
const NOT_A_KEY = 'not an agent key: expected a 64-hex pubkey or an npub';

/** Why the plan refuses one more agent (409). */
const agentCapReached = (max: number): string => `the owner’s plan allows at most ${max} agent${max === 1 ? '' : 's'}; delete one first`;

/**
 * Creates an agent for `owner` (used by the API and the local demo); with `maxAgents` (the plan's
 * `agents`), refused with 409 when the owner has that many: the shard counts and records in one
 * step, before the Agent Durable Object is touched, so a refused creation leaves nothing behind.
 */
export async function createAgent(
  env: AgentApiBindings,
  owner: string,
  input: z.infer<typeof CreateAgentSchema>,
  origin: string,
  sk: Uint8Array = generateSecretKey(),
  maxAgents?: number,
  calledOn: string = origin,
): Promise<{ status: 201; body: { pubkey: string; npub: string; owner: string; relays: string[] } } | { status: 409 | 422 | 500 | 503; body: object }> {
  const secret = sealingSecret(env);
  if (!secret) return { status: 500, body: { error: NO_SECRET } };
  const pubkey = getPublicKey(sk);
  const crossed = crossFieldIssues(input, configuredProviders(env));
  if (crossed.length) return { status: 422, body: { error: 'invalid agent', issues: crossed } };
  const outbound = await outboundIssues(env, owner, origin, calledOn, input);
  if (outbound.length) return { status: 422, body: { error: 'invalid agent', issues: outbound } };
  const oaProblem = checkOaTag(input.oa_auth, pubkey, owner);
  if (oaProblem) return { status: 422, body: { error: 'invalid agent', issues: [{ path: 'oa_auth', message: oaProblem }] } };
  const { mcp_servers, ...fields } = input;
  const stored: StoredAgent = {
    ...fields,
    ...(mcp_servers ? { mcp_servers: await sealMcpServers(mcp_servers, pubkey, secret) } : {}),
    pubkey,
    owner,
    origin,
    limits: { ...DEFAULT_LIMITS, ...(input.limits ?? {}) },
    created_at: Math.floor(Date.now() / 1000),
  };
  // Provision first: the agent connects as soon as it exists, and its shard must already know it.
  // The shard also holds the plan's cap (counted and recorded at once).
  const shard = shardStub(env, owner);
  if (!(await shard.provisionAgent(pubkey, owner, 'provisioned', maxAgents))) return { status: 409, body: { error: agentCapReached(maxAgents ?? 0) } };
  const sealedKey = await sealSecretKey(sk, pubkey, secret);
  try {
    await agentStub(env, pubkey).create(stored, sealedKey);
  } catch (e) {
    return { status: 503, body: { error: await undoCreation(env, owner, pubkey, errorMessage(e)) } };
  }
  return { status: 201, body: { pubkey, npub: toNpub(pubkey), owner, relays: agentRelays(env, stored) } };
}

/**
 * The call to the Agent failed (`reason`), but it may have stored the agent all the same (its
 * answer lost): the agent is deleted as DELETE deletes it, the Agent first, so that no agent runs
 * without the record that lists it and counts it for the plan. Why the creation failed (503), and
 * how to clear what a failing step leaves (DELETE finds it by its record).
 */
async function undoCreation(env: AgentApiBindings, owner: string, pubkey: string, reason: string): Promise<string> {
  const failed = `the agent could not be created (${reason})`;
  const undone = await deleteHosted(env, owner, pubkey);
  if (undone.ok) return `${failed}; nothing of it was kept: send the request again`;
  const left = undone.error.step === 'agent' ? 'it may have been stored and could not be removed' : 'it was removed but its record on your shard could not be';
  return `${failed}; ${left} (${undone.error.reason}): send DELETE /api/agents/${pubkey}, then create it again`;
}

/** The step of deleting a hosted agent that failed, and why. */
interface DeleteFailure {
  step: 'agent' | 'record';
  reason: string;
}

/**
 * Deletes `agent`, a hosted agent of `owner`, whatever its Agent object holds: the Agent forgets it
 * (ends its runs, publishes its deletions, forgets the key; nothing when it holds none), then the
 * owner's shard forgets the record that lists it and counts it for the plan. A failed step stops
 * there, so a retry finds the record and finishes.
 */
async function deleteHosted(env: AgentApiBindings, owner: string, agent: string): Promise<Result<void, DeleteFailure>> {
  try {
    await agentStub(env, agent).remove();
  } catch (e) {
    return err({ step: 'agent', reason: errorMessage(e) });
  }
  try {
    await shardStub(env, owner).revokeAgent(agent, owner);
  } catch (e) {
    return err({ step: 'record', reason: errorMessage(e) });
  }
  return ok(undefined);
}

/** Whether `agent` is one of `owner`'s hosted agents: its record on the owner's shard, whatever the Agent object holds. */
const hostedBy = async (env: AgentApiBindings, owner: string, agent: string): Promise<boolean> => (await shardStub(env, owner).provisionedAgents(owner)).includes(agent);

/**
 * The plan of `owner`: the models it allows (planModelIssues) and its `agents` cap, which the
 * owner's shard applies as it records a new agent (createAgent).
 */
const planOf = async (env: AgentApiBindings, owner: string): Promise<Plan> => planLimits(env, (await ownerState(env, owner))?.plan ?? DEFAULT_PLAN);

/** Why a revocation is refused (409): the owner revoked as many keys as a shard keeps per owner. */
const revokedCapReached = `the owner has revoked ${MAX_REVOKED_PER_OWNER} agent keys, the most this deployment keeps per owner: this key is not revoked (an attestation with a created_at<T clause lapses by itself at T)`;

/**
 * Revokes for good `agent`, a key `owner` attested itself (NIP-OA), whether a proof of it is held
 * now or not (its holder can have its proofs forgotten and attest itself again later): on the
 * owner's shard, then on the public shard, whose proofs of any owner's agents admit telemetry
 * frames there. Whether both took it (false: the owner is at MAX_REVOKED_PER_OWNER, 409).
 */
async function revokeAttested(env: AgentApiBindings, owner: string, agent: string): Promise<boolean> {
  return (await shardStub(env, owner).revokeAttestedAgent(agent, owner)) && (await shardStub(env, null).revokeAttestedAgent(agent, owner));
}

export function agentRoutes() {
  const app = new Hono<ApiEnv>();
  // Before authentication: a method the path does not have is refused whoever asks.
  app.use('*', async (c, next) => {
    const allowed: readonly string[] = c.req.path.replace(/\/+$/, '').endsWith('/api/agents') ? ALLOWED_METHODS.collection : ALLOWED_METHODS.agent;
    if (!allowed.includes(c.req.method) && !(c.req.method === 'HEAD' && allowed.includes('GET'))) {
      return c.json({ error: `method ${c.req.method} is not allowed here (allowed: ${allowed.join(', ')})` }, 405, { Allow: allowed.join(', ') });
    }
    await next();
  });
  // Any owner looks and deletes; only one not suspended creates and updates.
  const owners = nip98<AgentApiBindings>(notAnOwner);
  const activeOwners = nip98<AgentApiBindings>(notAnActiveOwner);

  /**
   * The agent named in the path, when the caller owns it: the caller's shard record is asked first,
   * so a key that is not one of the caller's agents never touches an Agent Durable Object.
   */
  const owned = async (env: AgentApiBindings, caller: string, param: string): Promise<{ view: AgentView } | { status: 400 | 404 | 403; error: string }> => {
    const pubkey = parsePubkey(param);
    if (!pubkey) return { status: 400, error: NOT_A_KEY };
    if (!(await hostedBy(env, caller, pubkey))) return { status: 404, error: 'no such agent' };
    const view = await agentStub(env, pubkey).view();
    if (!view) return { status: 404, error: 'no such agent' };
    if (view.owner !== caller) return { status: 403, error: 'only the agent’s owner may do this' };
    return { view };
  };

  app.post('/', activeOwners, async (c) => {
    const caller = c.get('caller');
    const parsed = bodyAs(c.get('body'), CreateAgentSchema, 'agent');
    if (!parsed.ok) return c.json(parsed.error, 422);
    const plan = await planOf(c.env, caller);
    const models = planModelIssues(plan, parsed.data.provider ?? defaultProviderName(c.env), parsed.data);
    if (models.length) return c.json({ error: 'invalid agent', issues: models }, 422);
    // The deployment's public origin (EDGESTR_PUBLIC_URL) when set: the agent advertises and dials its relays there.
    const origin = (relayRequestUrl(c.env, c.req.url) ?? new URL(c.req.url)).origin;
    const created = await createAgent(c.env, caller, parsed.data, origin, undefined, plan.agents, new URL(c.req.url).origin);
    return c.json(created.body, created.status);
  });

  app.get('/', owners, async (c) => {
    const caller = c.get('caller');
    const pubkeys = await shardStub(c.env, caller).provisionedAgents(caller);
    const views = await Promise.all(pubkeys.map((p) => agentStub(c.env, p).view()));
    return c.json({ agents: views.filter((v) => v !== undefined && v.owner === caller) });
  });

  app.get('/:pubkey', owners, async (c) => {
    const r = await owned(c.env, c.get('caller'), c.req.param('pubkey'));
    return 'view' in r ? c.json(r.view) : c.json({ error: r.error }, r.status);
  });

  app.patch('/:pubkey', activeOwners, async (c) => {
    const r = await owned(c.env, c.get('caller'), c.req.param('pubkey'));
    if (!('view' in r)) return c.json({ error: r.error }, r.status);
    const parsed = bodyAs(c.get('body'), UpdateAgentSchema, 'agent');
    if (!parsed.ok) return c.json(parsed.error, 422);
    // The agent as it would be after the update (an explicit provider only: one left unset follows the deployment).
    const crossed = crossFieldIssues({
      provider: parsed.data.provider,
      models: parsed.data.models ?? r.view.models,
      default_model: parsed.data.default_model ?? r.view.default_model,
      tools: parsed.data.tools ?? r.view.tools,
      web_fetch_hosts: parsed.data.web_fetch_hosts ?? r.view.web_fetch_hosts,
    }, configuredProviders(c.env));
    if (crossed.length) return c.json({ error: 'invalid agent', issues: crossed }, 422);
    // The models of the agent as it would be, when the update sets any (a model the plan stopped allowing is refused at the run).
    const { provider, models, default_model } = parsed.data;
    if (provider !== undefined || models !== undefined || default_model !== undefined) {
      const plan = await planOf(c.env, r.view.owner);
      const issues = planModelIssues(plan, provider ?? r.view.effective_provider, { models: models ?? r.view.models, default_model: default_model ?? r.view.default_model });
      if (issues.length) return c.json({ error: 'invalid agent', issues }, 422);
    }
    const outbound = await outboundIssues(c.env, r.view.owner, r.view.origin, new URL(c.req.url).origin, parsed.data);
    if (outbound.length) return c.json({ error: 'invalid agent', issues: outbound }, 422);
    const oaProblem = checkOaTag(parsed.data.oa_auth, r.view.pubkey, r.view.owner);
    if (oaProblem) return c.json({ error: 'invalid agent', issues: [{ path: 'oa_auth', message: oaProblem }] }, 422);
    // mcp_servers replaces the list: headers given are sealed anew, a server given without them has none.
    const { limits, mcp_servers, ...rest } = parsed.data;
    const secret = sealingSecret(c.env);
    if (mcp_servers && !secret) return c.json({ error: NO_SECRET }, 500);
    const view = await agentStub(c.env, r.view.pubkey).update({
      ...rest,
      ...(mcp_servers && secret ? { mcp_servers: await sealMcpServers(mcp_servers, r.view.pubkey, secret) } : {}),
      // Only the limits given: the agent merges them onto its stored ones (a concurrent PATCH of other limits is kept).
      ...(limits ? { limits } : {}),
    });
    return c.json(view);
  });

  app.delete('/:pubkey', owners, async (c) => {
    const caller = c.get('caller');
    const agent = parsePubkey(c.req.param('pubkey'));
    if (!agent) return c.json({ error: NOT_A_KEY }, 400);
    if (!(await hostedBy(c.env, caller, agent))) {
      // Not one of the caller's hosted agents: the caller's attestations of the key (NIP-OA) are revoked for good.
      return (await revokeAttested(c.env, caller, agent)) ? c.json({ revoked: agent }, 200) : c.json({ error: revokedCapReached }, 409);
    }
    const deleted = await deleteHosted(c.env, caller, agent);
    if (deleted.ok) return c.body(null, 204);
    // The Agent's own reason is the owner's to read (e.g. what it could not finish yet); the record stays, so a retry deletes it.
    if (deleted.error.step === 'agent') return c.json({ error: deleted.error.reason }, 503);
    return c.json({ error: `the agent was deleted but its record on your shard could not be removed (${deleted.error.reason}); send DELETE again` }, 503);
  });

  return app;
}
