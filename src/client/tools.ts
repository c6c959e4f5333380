// DVMCP from the client side: the tools announced on a deployment's public shard (the shared
// discovery, src/shared/dvmcp-discovery.ts) and calls to them (the shared DvmcpClient), with
// progress and a spend cap on payment requests (past the cap the call is declined; within it the
// caller's `pay` decides, and the call waits for the payment). Local development and test
// deployments take their own local invoices at POST /api/bridge/pay (docs/PAYMENTS.md).
import { finalizeEvent } from 'nostr-tools/pure';
import { discover, type Catalog, type CatalogServer } from '../shared/dvmcp-discovery.js';
import { DvmcpClient, spendCap, type DvmcpFailure } from '../shared/dvmcp-client.js';
import type { PaymentRequired } from '../shared/dvmcp.js';
import { err, ok, type Result } from '../shared/errors.js';
import { ConversationKeyCache } from '../shared/nip44.js';
import { nobleVerifier } from '../shared/verify.js';
import { requestJson, wsUrl, type HttpError } from './http.js';
import type { KeyPair } from './keys.js';
import { relayClient } from './relay.js';

/** The DVMCP servers and tools announced on the public shard of `base`. */
export async function listTools(base: string): Promise<Result<Catalog, string>> {
  const relay = relayClient(wsUrl(base, '/'), undefined);
  try {
    const connected = await relay.connect();
    if (!connected.ok) return err(`cannot connect to ${relay.url}: ${connected.message}`);
    return await discover(relay, { verifier: nobleVerifier });
  } finally {
    relay.close();
  }
}

/** The server named `name`: its id, its name, or `<provider>:<id>` / `<provider>` (hex). */
export function findServer(catalog: Catalog, name: string): CatalogServer | undefined {
  const [a, b] = name.split(':');
  return catalog.servers.find((s) => (b !== undefined ? s.provider === a && s.id === b : s.id === name || s.name === name || s.provider === name));
}

export interface CallOptions {
  /** Most sats to pay in all (default 0: every payment request is declined). */
  maxSats?: number;
  onProgress?: (params: Record<string, unknown>) => void;
  /** A payment request within the cap: true once paid or being paid (the call keeps waiting),
   *  false to decline. Default: decline. */
  pay?: (p: PaymentRequired) => boolean | Promise<boolean>;
  timeoutMs?: number;
  signal?: AbortSignal;
}

/** Calls `tool` with `args` on `server` as `key` over the public shard of `base`. */
export async function callTool(
  base: string,
  key: KeyPair,
  server: CatalogServer,
  tool: string,
  args: Record<string, unknown>,
  opts: CallOptions = {},
): Promise<Result<Record<string, unknown>, DvmcpFailure>> {
  const relay = relayClient(wsUrl(base, '/'), key, { reconnect: true });
  const client = new DvmcpClient({
    relays: relay,
    secretKey: key.sk,
    keys: new ConversationKeyCache(16),
    sign: async (t) => finalizeEvent(t, key.sk),
    verifier: nobleVerifier,
  });
  const cap = spendCap(opts.maxSats ?? 0, opts.pay ?? (() => false));
  try {
    const r = await client.request({ provider: server.provider, serverId: server.id, encrypt: server.encryption }, 'tools/call', { name: tool, arguments: args }, {
      onPaymentRequired: cap,
      ...(opts.onProgress ? { onProgress: opts.onProgress } : {}),
      ...(opts.timeoutMs ? { timeoutMs: opts.timeoutMs, maxTotalMs: Math.max(opts.timeoutMs, 120_000) } : {}),
      ...(opts.signal ? { signal: opts.signal } : {}),
    });
    return r.ok ? ok(r.value) : r;
  } finally {
    await client.close();
    relay.close();
  }
}

/** Pays a local invoice of a development or test deployment (POST /api/bridge/pay, no NIP-98). */
export async function payLocalInvoice(base: string, invoice: string): Promise<Result<{ sats: number }, HttpError>> {
  const r = await requestJson(base, 'POST', '/api/bridge/pay', { body: { invoice } });
  return r.ok ? ok(r.value as { sats: number }) : r;
}
