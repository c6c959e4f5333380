// The shapes of the management API's answers (/api), of /health and of a NIP-11 document, as zod
// schemas: what answers at a URL is read as one of these or refused (http.ts requestJson's `shape`),
// so that a page or JSON of another service is never taken for edgestr's answer. The client library
// (api.ts, http.ts) and the web console (src/console/api.ts) read answers through them; their types
// are z.infer of them. Objects are loose: a field a newer deployment adds passes through.
import { z } from 'zod';
import { HEX64 } from '../shared/hex.js';

const Hex64 = z.string().regex(HEX64, 'not 64 lowercase hex');

/** The API's error body: `{error, issues?}` (422 lists the fields). */
export const ApiErrorSchema = z.looseObject({
  error: z.string(),
  issues: z.array(z.looseObject({ path: z.string(), message: z.string() })).optional(),
});

/** An agent as the API shows it (its stored configuration, never its secret key; `npub` only sometimes). */
export const AgentViewSchema = z.looseObject({
  pubkey: Hex64,
  npub: z.string().optional(),
  owner: Hex64,
  name: z.string(),
  about: z.string().optional(),
  /** Absent: the agent follows the deployment's default provider, `effective_provider`. */
  provider: z.string().optional(),
  effective_provider: z.string().optional(),
  models: z.array(z.string()).optional(),
  default_model: z.string().optional(),
  system_prompt: z.string().optional(),
  tools: z.array(z.string()).optional(),
  web_fetch_hosts: z.array(z.string()).optional(),
  relays: z.array(z.string()).optional(),
  oa_auth: z.array(z.string()).optional(),
});
export type AgentView = z.infer<typeof AgentViewSchema>;

/** The provider an agent's runs use, as a list shows it: its own, or `deployment default (<provider>)`. */
export const agentProviderLabel = (a: Pick<AgentView, 'provider' | 'effective_provider'>): string =>
  a.provider ?? `deployment default${a.effective_provider ? ` (${a.effective_provider})` : ''}`;

/** GET /api/agents. */
export const AgentListSchema = z.looseObject({ agents: z.array(AgentViewSchema) });

/** POST /api/agents (201). */
export const CreatedAgentSchema = z.looseObject({ pubkey: Hex64, npub: z.string(), owner: Hex64, relays: z.array(z.string()) });
export type CreatedAgent = z.infer<typeof CreatedAgentSchema>;

/** DELETE /api/agents/<key>: 204 (no body: a hosted agent deleted) or 200 `{revoked}` (the caller's attestation of any other key revoked). */
export const AgentDeletedSchema = z.looseObject({ revoked: Hex64 }).nullable();

/** POST /api/signup (201): the signer is an owner now, on `plan`. */
export const SignedUpSchema = z.looseObject({ pubkey: Hex64, plan: z.string(), suspended: z.boolean() });

/** A bridge server as the API shows it (never its header values). */
export const BridgeServerViewSchema = z.looseObject({ id: z.string(), url: z.string() });
export type BridgeServerView = z.infer<typeof BridgeServerViewSchema>;

/** GET /api/bridge/servers. */
export const BridgeServerListSchema = z.looseObject({ servers: z.array(BridgeServerViewSchema) });

/** POST /api/bridge/servers (201). */
export const BridgeServerAddedSchema = z.looseObject({ provider: Hex64, id: z.string() });

/** An answer without a body (204). */
export const NoBodySchema = z.null();

/** GET /health. */
export const HealthSchema = z.looseObject({
  ok: z.boolean(),
  version: z.string().optional(),
  demo: z.looseObject({ owner: Hex64, agent: Hex64, relay: z.string() }).optional(),
});
export type Health = z.infer<typeof HealthSchema>;

/** A NIP-11 document: a JSON object (its fields are the relay's to choose). */
export const RelayInfoSchema = z.record(z.string(), z.unknown());

/** POST /api/bridge/pay (a development or test deployment's local invoice paid). */
export const LocalPaymentSchema = z.looseObject({ sats: z.number() });
