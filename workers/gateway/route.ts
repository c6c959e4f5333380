// /mcp: the MCP Streamable HTTP endpoint of the DVMCP gateway (mcp-server.ts), on the SDK's
// WebStandardStreamableHTTPServerTransport in stateless mode: every POST gets a new transport,
// server, Nostr key and relay connection, and nothing is kept between requests (no Mcp-Session-Id;
// a client's initialize is answered but remembers nothing). Consequences: GET (a standalone SSE
// stream for server-initiated messages) and DELETE (ending a session) are answered 405, and a
// notifications/cancelled arrives in another request than the call it names, so a call is cancelled
// by closing its response stream instead (the gateway then sends DVMCP notifications/cancel).
// The Nostr key is fresh per POST: DVMCP servers see an unlinkable client per request, and the key
// is never stored. The connection goes to the deployment's public shard (its origin as agents use
// it: EDGESTR_PUBLIC_URL's when set) through openRelaySocket as the caller's own connection (its
// client address: the shard's per-address connection cap and buckets, and the client share of its
// storage, hold it as they hold the caller's other sockets; a stranger drives everything sent on
// it), authenticated (NIP-42) as that key so that gift-wrapped answers are delivered to it. It is
// closed when the response has been sent. The gift wraps sent on it (the calls to servers that
// announce encryption, and their cancels: stored kinds) expire DVMCP_WRAP_TTL_SECONDS after they are
// sent (NIP-40); no server acts on a request that old. The catalog is read on a connection of
// its own (catalog.ts).
// Before any of that work, each client address (client-address.ts: an IPv6 /64) is held to the MCP_RATE_LIMIT
// binding (Workers Rate Limiting, wrangler.toml: requests per minute per address, counted per
// Cloudflare location) and to MAX_OPEN_PER_ADDRESS requests open at once in this isolate (counted
// before the binding is asked, so that requests arriving together cannot all pass): a stranger
// cannot open relay connections and DVMCP requests faster than that (the bridge sees every /mcp
// request as a new client, so its per-client limits cannot do it). A POST carries one JSON-RPC
// message: a batch is refused (400), so each DVMCP request is one POST counted by those limits.

import { WebStandardStreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/webStandardStreamableHttp.js';
import { DvmcpClient } from '../../src/shared/dvmcp-client.js';
import { RPC } from '../../src/shared/dvmcp.js';
import { DVMCP_WRAP_TTL_SECONDS, expiringWraps } from '../../src/shared/dvmcp-wrap.js';
import { backendSigner, signEventWith } from '../../src/shared/event.js';
import { err, errorMessage, ok, type Result } from '../../src/shared/errors.js';
import { ConversationKeyCache } from '../../src/shared/nip44.js';
import { RelayClient } from '../../src/shared/relay-client.js';
import { generateSecretKey, getPublicKey } from 'nostr-tools/pure';
import { openRelaySocket } from '../common/relay-sockets.js';
import { readBoundedBody } from '../api/body.js';
import { clientAddress } from '../common/client-address.js';
import { releaseOnce } from '../common/dvmcp-server/limits.js';
import { shardStub, type RouterBindings } from '../common/shards.js';
import { relayRequestUrl } from '../common/public-url.js';
import { relayVerifier } from '../common/verifier.js';
import { gatewayIndex } from './catalog.js';
import { gatewayServer } from './mcp-server.js';

/** Largest POST body read, in bytes. */
export const MAX_BODY_BYTES = 256 * 1024;
/** The answer to a JSON-RPC batch (400, -32600). */
export const BATCH_REFUSED = 'Invalid Request: batches are not supported (MCP 2025-06-18); send one JSON-RPC message per POST';
/** Requests of one client address open at once in an isolate (a call may stream for up to a minute). */
export const MAX_OPEN_PER_ADDRESS = 8;
/** How long after it is sent a gift wrap of the gateway expires (NIP-40), in seconds. */
/** How long a call waits for its relay connection to open, in ms. */
const RELAY_OPEN_MS = 5_000;

export interface GatewayBindings extends RouterBindings {
  /** Workers Rate Limiting: /mcp requests per client address (wrangler.toml [[ratelimits]]). */
  MCP_RATE_LIMIT?: RateLimit;
}

/** /mcp requests open now per client address, in this isolate. */
const open = new Map<string, number>();

const rateLimited = (why: string, retryAfter: number): Response =>
  Response.json(
    { jsonrpc: '2.0', error: { code: RPC.RATE_LIMITED, message: `rate-limited: ${why}; retry in ${retryAfter} s` }, id: null },
    { status: 429, headers: { 'Retry-After': String(retryAfter) } },
  );

/**
 * Why a request from `address` is refused before any work, or undefined (then it is counted open).
 * It is counted before the rate limit is asked (an await): requests arriving together see each other.
 */
async function admit(env: GatewayBindings, address: string): Promise<Response | undefined> {
  if ((open.get(address) ?? 0) >= MAX_OPEN_PER_ADDRESS) return rateLimited(`at most ${MAX_OPEN_PER_ADDRESS} /mcp requests open at once per address`, 5);
  open.set(address, (open.get(address) ?? 0) + 1);
  if (env.MCP_RATE_LIMIT && !(await env.MCP_RATE_LIMIT.limit({ key: address })).success) {
    release(address);
    return rateLimited('too many /mcp requests from this address', 60);
  }
  return undefined;
}

function release(address: string): void {
  const n = (open.get(address) ?? 1) - 1;
  if (n <= 0) open.delete(address);
  else open.set(address, n);
}

const methodNotAllowed = (): Response =>
  Response.json(
    { jsonrpc: '2.0', error: { code: -32000, message: 'Method not allowed: /mcp is stateless (POST only; no SSE stream, no sessions)' }, id: null },
    { status: 405, headers: { Allow: 'POST' } },
  );

/** Answers one /mcp request (see the header). */
export async function handleMcp(req: Request, env: GatewayBindings, waitUntil: (p: Promise<unknown>) => void): Promise<Response> {
  if (req.method !== 'POST') return methodNotAllowed();
  const address = clientAddress(req);
  const refused = await admit(env, address);
  if (refused) return refused;
  const done = releaseOnce(() => release(address));
  try {
    const message = await oneMessage(req);
    if (!message.ok) {
      done();
      return message.error;
    }
    return await serve(req, address, message.value, env, waitUntil, done);
  } catch (e) {
    done();
    throw e;
  }
}

const jsonRpcError = (status: number, code: number, message: string): Response =>
  Response.json({ jsonrpc: '2.0', error: { code, message }, id: null }, { status });

/**
 * The one JSON-RPC message of a POST, read up to MAX_BODY_BYTES. A batch (a JSON array) is refused:
 * MCP 2025-06-18 dropped JSON-RPC batching, and each message of a batch would be a DVMCP request
 * of its own, past the per-address limits, which count POSTs.
 */
async function oneMessage(req: Request): Promise<Result<unknown, Response>> {
  const body = await readBoundedBody(req, MAX_BODY_BYTES);
  if (!body.ok) return err(jsonRpcError(413, -32000, body.error));
  let message: unknown;
  try {
    message = JSON.parse(new TextDecoder().decode(body.value));
  } catch {
    return err(jsonRpcError(400, -32700, 'Parse error: Invalid JSON'));
  }
  if (Array.isArray(message)) return err(jsonRpcError(400, -32600, BATCH_REFUSED));
  return ok(message);
}

/** One admitted request from `address` and its message; `done` is called once when its response has ended (or it failed). */
async function serve(req: Request, address: string, message: unknown, env: GatewayBindings, waitUntil: (p: Promise<unknown>) => void, done: () => void): Promise<Response> {
  const origin = (relayRequestUrl(env, req.url) ?? new URL(req.url)).origin;
  const url = `${origin.replace(/^http/, 'ws')}/`;
  const sk = generateSecretKey();
  const pubkey = getPublicKey(sk);
  const backend = await relayVerifier();
  const sign = async (t: Parameters<typeof signEventWith>[0]) => signEventWith(t, sk, backend, pubkey);
  const relay = new RelayClient({
    url,
    socket: (u) => openRelaySocket(env, u, { origin, owner: null, client: address }),
    auth: sign,
    reconnect: false,
  });
  const dvmcp = new DvmcpClient({
    relays: relay,
    secretKey: sk,
    keys: new ConversationKeyCache(16),
    sign,
    verifier: backend,
    wrapSign: expiringWraps(backendSigner(backend), DVMCP_WRAP_TTL_SECONDS),
  });
  // The catalog's own connection: edgestr's, as it reads announcements only (catalog.ts).
  const catalogRelay = (): RelayClient => new RelayClient({ url, socket: (u) => openRelaySocket(env, u, { origin, owner: null }), reconnect: false });
  const server = gatewayServer({
    index: () => gatewayIndex(origin, catalogRelay, backend, () => shardStub(env, null).bridgeProviders(), waitUntil),
    relay: async () => {
      const opened = await relay.connect({ timeoutMs: RELAY_OPEN_MS });
      return opened.ok ? ok(undefined) : err(opened.message);
    },
    dvmcp,
  });
  const transport = new WebStandardStreamableHTTPServerTransport({ sessionIdGenerator: undefined, maxRequestBodySize: MAX_BODY_BYTES });
  const cleanup = async (): Promise<void> => {
    try {
      await dvmcp.close();
      relay.close();
      await server.close();
    } finally {
      done();
    }
  };
  let response: Response;
  try {
    await server.connect(transport);
    response = await transport.handleRequest(req, { parsedBody: message });
  } catch (e) {
    await cleanup();
    throw e;
  }
  if (!response.body) {
    await cleanup();
    return response;
  }
  // The response (an SSE stream while calls run) is passed through; its end, or the client going
  // away, ends the DVMCP requests and the relay connection.
  const { readable, writable } = new TransformStream<Uint8Array, Uint8Array>();
  waitUntil(
    response.body
      .pipeTo(writable)
      .catch((e: unknown) => console.warn(`gateway: /mcp response ended early: ${errorMessage(e)}`))
      .finally(cleanup),
  );
  return new Response(readable, { status: response.status, statusText: response.statusText, headers: response.headers });
}
