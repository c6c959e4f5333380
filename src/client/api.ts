// The management API client (/api, NIP-98 signed by the owner): agents and bridge servers. The
// shapes follow the zod schemas of workers/agent/config.ts and workers/api/bridge.ts. `createAgent`
// also mints the owner's NIP-OA attestation for the new agent (src/shared/nip-oa.ts) and sets it as
// the agent's `oa_auth`, so the agent proves to relays whose it is.
import { err, ok, type Result } from '../shared/errors.js';
import { signAttestation } from '../shared/nip-oa.js';
import { requestJson, type HttpError } from './http.js';
import type { KeyPair } from './keys.js';

export interface AgentInput {
  name?: string;
  about?: string;
  picture?: string;
  system_prompt?: string;
  provider?: 'openai' | 'anthropic' | 'workers-ai' | 'echo';
  models?: string[];
  default_model?: string;
  thinking?: string;
  tools?: string[];
  allow?: string[];
  block?: string[];
  limits?: Record<string, number>;
  relays?: string[];
  oa_auth?: string[];
}

export interface CreatedAgent {
  pubkey: string;
  npub: string;
  owner: string;
  relays: string[];
}

/** An agent as the API shows it (the stored configuration, never its secret key; `npub` only sometimes). */
export type AgentView = { pubkey: string; owner: string; npub?: string } & AgentInput & Record<string, unknown>;

export interface BridgeServerInput {
  id: string;
  url: string;
  headers?: Record<string, string>;
  name?: string;
  about?: string;
  public?: boolean;
  encryption?: string;
  prices?: Record<string, unknown>;
}

export type BridgeServerView = BridgeServerInput & Record<string, unknown>;

export class ManagementClient {
  constructor(
    readonly baseUrl: string,
    readonly key: KeyPair,
  ) {}

  #call<T>(method: string, path: string, body?: unknown): Promise<Result<T, HttpError>> {
    return requestJson(this.baseUrl, method, path, { key: this.key, ...(body !== undefined ? { body } : {}) }) as Promise<Result<T, HttpError>>;
  }

  async listAgents(): Promise<Result<AgentView[], HttpError>> {
    const r = await this.#call<{ agents: AgentView[] }>('GET', '/api/agents');
    return r.ok ? ok(r.value.agents) : r;
  }
  getAgent = (pubkey: string): Promise<Result<AgentView, HttpError>> => this.#call('GET', `/api/agents/${pubkey}`);
  updateAgent = (pubkey: string, patch: AgentInput): Promise<Result<AgentView, HttpError>> => this.#call('PATCH', `/api/agents/${pubkey}`, patch);
  /**
   * Deletes one of the caller's hosted agents (`deleted`); any other key is not deleted: the API
   * revokes the caller's NIP-OA attestations of it instead (`revoked`, docs/PROTOCOL.md "Revocation").
   */
  async deleteAgent(pubkey: string): Promise<Result<{ deleted: string } | { revoked: string }, HttpError>> {
    const r = await this.#call<{ revoked: string } | null>('DELETE', `/api/agents/${pubkey}`);
    if (!r.ok) return r;
    return ok(r.value ?? { deleted: pubkey });
  }

  /** Creates the agent, then attests it (NIP-OA, no conditions) as its owner. */
  async createAgent(input: AgentInput): Promise<Result<CreatedAgent & { oa_auth: string[] }, HttpError>> {
    const created = await this.#call<CreatedAgent>('POST', '/api/agents', input);
    if (!created.ok) return created;
    const oa = signAttestation(this.key.sk, created.value.pubkey, '');
    const attested = await this.updateAgent(created.value.pubkey, { oa_auth: oa });
    if (!attested.ok) return err({ ...attested.error, message: `agent ${created.value.pubkey} created, but its attestation was refused: ${attested.error.message}` });
    return ok({ ...created.value, oa_auth: oa });
  }

  async listBridgeServers(): Promise<Result<BridgeServerView[], HttpError>> {
    const r = await this.#call<{ servers: BridgeServerView[] }>('GET', '/api/bridge/servers');
    return r.ok ? ok(r.value.servers) : r;
  }
  addBridgeServer = (input: BridgeServerInput): Promise<Result<{ provider: string; id: string }, HttpError>> =>
    this.#call('POST', '/api/bridge/servers', input);
  deleteBridgeServer = (id: string): Promise<Result<unknown, HttpError>> => this.#call('DELETE', `/api/bridge/servers/${encodeURIComponent(id)}`);
}
