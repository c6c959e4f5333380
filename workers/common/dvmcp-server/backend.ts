// What the DVMCP dispatcher serves: one DvmcpBackend per server id of a provider. The bridge's
// backend is a remote MCP server (upstream.ts); a hosted agent exposed as a DVMCP server can be
// another implementation of the same interface.

import type { Form } from '../../../src/shared/dvmcp-wrap.js';
import type { Result } from '../../../src/shared/errors.js';
import type { InitializeInfo, Prices, Requester, ResourceIndex, RpcError, ServerProfile } from '../../../src/shared/dvmcp.js';

/** An MCP progress notification's values. */
export interface Progress {
  progress: number;
  total?: number;
  message?: string;
}

/** One request being served. */
export interface RequestContext {
  requester: Requester;
  /** The request's form: its answer goes out in it (plain: anyone on the relay can read it). */
  form: Form;
  /** Aborted when the client cancels (notifications/cancel) or the bridge gives up. */
  signal: AbortSignal;
  onProgress(p: Progress): void;
}

export interface DvmcpBackend {
  /** `d`/`s`, name, about…, support_encryption. */
  readonly profile: ServerProfile;
  /** Prices by tool or prompt name, resource uri or name, or resource template name or uriTemplate. */
  readonly prices: Prices;
  /**
   * The resources and templates the server lists (cached as it likes): a resources/read is priced
   * by the uri, the listed resource's name or the template it expands (readPrice, dvmcp.ts).
   * Without it, reads are priced by uri only.
   */
  resourceIndex?(): Promise<Result<ResourceIndex, RpcError>>;
  /**
   * A private server: reached only by requests naming it in `s`. Requests without `s` (initialize
   * to every server, any method to the only server) go to the other servers, as if it did not exist.
   */
  readonly unlisted?: boolean;
  /**
   * What the server declared to the provider's own session (opened when needed, shared by all
   * clients): the answer to an initialize without `s`, which reaches every listed server, so that one
   * request does not open a session per server for its client. Without it, `initialize` answers.
   */
  capabilities?(): Promise<Result<InitializeInfo, RpcError>>;
  /** What the server answers to initialize (for `client`, whose session it opens when needed). */
  initialize(client: string, signal: AbortSignal): Promise<Result<InitializeInfo, RpcError>>;
  /** An MCP request (not initialize or ping): the result object at the root, or the protocol error. */
  request(method: string, params: Record<string, unknown>, ctx: RequestContext): Promise<Result<Record<string, unknown>, RpcError>>;
}
