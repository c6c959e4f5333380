// /mcp: the MCP Streamable HTTP endpoint of the DVMCP gateway (mcp-server.ts), on the SDK's
// WebStandardStreamableHTTPServerTransport in stateless mode: every POST gets a new transport,
// server, Nostr key and relay connection, and nothing is kept between requests (no Mcp-Session-Id;
// a client's initialize is answered but remembers nothing). Consequences: GET (a standalone SSE
// stream for server-initiated messages) and DELETE (ending a session) are answered 405, and a
// notifications/cancelled arrives in another request than the call it names, so a call is cancelled
// by closing its response stream instead (the gateway then sends DVMCP notifications/cancel).
// The Nostr key is fresh per POST: DVMCP servers see an unlinkable client per request, and the key
// is never stored. The connection goes to the deployment's public shard (its origin as agents use
// it: EDGESTR_PUBLIC_URL's when set) through openRelaySocket, authenticated (NIP-42) as that key so
// that gift-wrapped answers are delivered to it. It is closed when the response has been sent.

import { WebStandardStreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/webStandardStreamableHttp.js';
import { DvmcpClient } from '../../src/shared/dvmcp-client.js';
import { backendSigner, signEventWith } from '../../src/shared/event.js';
import { errorMessage } from '../../src/shared/errors.js';
import { ConversationKeyCache } from '../../src/shared/nip44.js';
import { RelayClient } from '../../src/shared/relay-client.js';
import { generateSecretKey, getPublicKey } from 'nostr-tools/pure';
import { openRelaySocket } from '../common/relay-sockets.js';
import { relayRequestUrl, type RouterBindings } from '../common/shards.js';
import { relayVerifier } from '../common/verifier.js';
import { gatewayIndex } from './catalog.js';
import { gatewayServer } from './mcp-server.js';

/** Largest POST body read, in bytes. */
export const MAX_BODY_BYTES = 256 * 1024;

const methodNotAllowed = (): Response =>
  Response.json(
    { jsonrpc: '2.0', error: { code: -32000, message: 'Method not allowed: /mcp is stateless (POST only; no SSE stream, no sessions)' }, id: null },
    { status: 405, headers: { Allow: 'POST' } },
  );

/** Answers one /mcp request (see the header). */
export async function handleMcp(req: Request, env: RouterBindings, waitUntil: (p: Promise<unknown>) => void): Promise<Response> {
  if (req.method !== 'POST') return methodNotAllowed();
  const origin = (relayRequestUrl(env, req.url) ?? new URL(req.url)).origin;
  const sk = generateSecretKey();
  const pubkey = getPublicKey(sk);
  const backend = await relayVerifier();
  const sign = async (t: Parameters<typeof signEventWith>[0]) => signEventWith(t, sk, backend, pubkey);
  const relay = new RelayClient({
    url: `${origin.replace(/^http/, 'ws')}/`,
    socket: (u) => openRelaySocket(env, u, { origin, owner: null }),
    auth: sign,
    reconnect: false,
  });
  const dvmcp = new DvmcpClient({ relays: relay, secretKey: sk, keys: new ConversationKeyCache(16), sign, verifier: backend, wrapSign: backendSigner(backend) });
  const server = gatewayServer({ index: () => gatewayIndex(origin, relay, backend), dvmcp });
  const transport = new WebStandardStreamableHTTPServerTransport({ sessionIdGenerator: undefined, maxRequestBodySize: MAX_BODY_BYTES });
  const cleanup = async (): Promise<void> => {
    await dvmcp.close();
    relay.close();
    await server.close();
  };
  let response: Response;
  try {
    await server.connect(transport);
    response = await transport.handleRequest(req);
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
