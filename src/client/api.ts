// The management API client (/api, NIP-98 signed by the owner): sign-up, agents and bridge servers. The
// inputs follow the zod schemas of workers/agent/config.ts and workers/bridge/config.ts, written
// here to match (the library's build cannot import workers/; api-types.test.ts holds
// BridgeServerInput equal to the bridge's); every answer is read as its shape in schemas.ts, so
// that what another service answers is an error (status 0), not an agent. `createAgent` also mints
// the owner's NIP-OA attestation for the new agent (src/shared/nip-oa.ts) and sets it as the
// agent's `oa_auth`, so the agent proves to relays whose it is.
import type { z } from 'zod';
import { err, ok, type Result } from '../shared/errors.js';
import { signAttestation } from '../shared/nip-oa.js';
import type { THINKING_LEVELS } from '../shared/nip-xx.js';
import { requestJson, type HttpError } from './http.js';
import type { KeyPair } from './keys.js';
import {
  AgentDeletedSchema,
  AgentListSchema,
  AgentViewSchema,
  BridgeServerAddedSchema,
  BridgeServerListSchema,
  CreatedAgentSchema,
  NoBodySchema,
  SignedUpSchema,
  type AgentView,
  type BridgeServerView,
  type CreatedAgent,
} from './schemas.js';

export type { AgentView, BridgeServerView, CreatedAgent };

/** The fields of an agent that create and update set (update: any of them; create needs `name`). */
export interface AgentInput {
  name?: string;
  about?: string;
  picture?: string;
  system_prompt?: string;
  provider?: 'openai' | 'anthropic' | 'workers-ai' | 'echo';
  models?: string[];
  default_model?: string;
  thinking?: (typeof THINKING_LEVELS)[number];
  tools?: string[];
  /** The hosts web_fetch may fetch (required with the web_fetch tool): `example.org`, `*.example.org`. */
  web_fetch_hosts?: string[];
  allow?: string[];
  block?: string[];
  limits?: Record<string, number>;
  relays?: string[];
  oa_auth?: string[];
}

/** A server registered with the owner's bridge (POST /api/bridge/servers). */
export interface BridgeServerInput {
  id: string;
  url: string;
  headers?: Record<string, string>;
  name?: string;
  about?: string;
  picture?: string;
  website?: string;
  /** Announced on the relays (default true); a private server answers only clients that know its id. */
  public?: boolean;
  /** Whether the server accepts gift-wrapped (NIP-59) requests (default true). */
  encryption?: boolean;
  /** `{<tool or prompt name, or resource uri>: {price, unit}}`, the price a positive integer string. */
  prices?: Record<string, { price: string; unit: string }>;
}

export class ManagementClient {
  constructor(
    readonly baseUrl: string,
    readonly key: KeyPair,
  ) {}

  #call<T>(method: string, path: string, shape: z.ZodType<T>, body?: unknown): Promise<Result<T, HttpError>> {
    return requestJson(this.baseUrl, method, path, { key: this.key, shape, ...(body !== undefined ? { body } : {}) });
  }

  /** Makes the key an owner on this deployment (POST /api/signup; only where sign-up is open: else 403). */
  signUp = (): Promise<Result<{ pubkey: string; plan: string; suspended: boolean }, HttpError>> => this.#call('POST', '/api/signup', SignedUpSchema);

  async listAgents(): Promise<Result<AgentView[], HttpError>> {
    const r = await this.#call('GET', '/api/agents', AgentListSchema);
    return r.ok ? ok(r.value.agents) : r;
  }
  getAgent = (pubkey: string): Promise<Result<AgentView, HttpError>> => this.#call('GET', `/api/agents/${pubkey}`, AgentViewSchema);
  updateAgent = (pubkey: string, patch: AgentInput): Promise<Result<AgentView, HttpError>> => this.#call('PATCH', `/api/agents/${pubkey}`, AgentViewSchema, patch);
  /**
   * Deletes one of the caller's hosted agents (`deleted`); any other key is not deleted: the API
   * revokes the caller's NIP-OA attestations of it instead (`revoked`, docs/PROTOCOL.md "Revocation").
   */
  async deleteAgent(pubkey: string): Promise<Result<{ deleted: string } | { revoked: string }, HttpError>> {
    const r = await this.#call('DELETE', `/api/agents/${pubkey}`, AgentDeletedSchema);
    if (!r.ok) return r;
    return ok(r.value ? { revoked: r.value.revoked } : { deleted: pubkey });
  }

  /** Creates the agent, then attests it (NIP-OA, no conditions) as its owner. */
  async createAgent(input: AgentInput): Promise<Result<CreatedAgent & { oa_auth: string[] }, HttpError>> {
    const created = await this.#call('POST', '/api/agents', CreatedAgentSchema, input);
    if (!created.ok) return created;
    const oa = signAttestation(this.key.sk, created.value.pubkey, '');
    const attested = await this.updateAgent(created.value.pubkey, { oa_auth: oa });
    if (!attested.ok) return err({ ...attested.error, message: `agent ${created.value.pubkey} created, but its attestation was refused: ${attested.error.message}` });
    return ok({ ...created.value, oa_auth: oa });
  }

  async listBridgeServers(): Promise<Result<BridgeServerView[], HttpError>> {
    const r = await this.#call('GET', '/api/bridge/servers', BridgeServerListSchema);
    return r.ok ? ok(r.value.servers) : r;
  }
  addBridgeServer = (input: BridgeServerInput): Promise<Result<{ provider: string; id: string }, HttpError>> =>
    this.#call('POST', '/api/bridge/servers', BridgeServerAddedSchema, input);
  deleteBridgeServer = (id: string): Promise<Result<null, HttpError>> => this.#call('DELETE', `/api/bridge/servers/${encodeURIComponent(id)}`, NoBodySchema);
}
