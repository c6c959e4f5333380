// DVMCP from the client side: the tools announced on a deployment's public shard (the shared
// discovery, src/shared/dvmcp-discovery.ts) and calls to them (the shared DvmcpClient), with
// progress and a spend cap on payment requests (past the cap the call is declined; within it the
// caller's `pay` decides, and the call waits for the payment). Local development and test
// deployments take their own local invoices at POST /api/bridge/pay (docs/PAYMENTS.md).
// Anyone may announce a server, under any id and name: the servers of the deployment's own bridges
// (named by the public shard's NIP-11 `bridge_providers`) are read first, and a name is never
// settled silently between servers of different providers (lookupServer).
import { finalizeEvent } from 'nostr-tools/pure';
import { bridgeProvidersOf, discover, type Catalog, type CatalogServer } from '../shared/dvmcp-discovery.js';
import { DvmcpClient, spendCap, type DvmcpFailure } from '../shared/dvmcp-client.js';
import type { PaymentRequired } from '../shared/dvmcp.js';
import { err, ok, type Result } from '../shared/errors.js';
import { ConversationKeyCache } from '../shared/nip44.js';
import { nobleVerifier } from '../shared/verify.js';
import { parsePubkey } from '../shared/keys.js';
import { relayInfo, requestJson, wsUrl, type HttpError } from './http.js';
import type { KeyPair } from './keys.js';
import { relayClient } from './relay.js';
import { LocalPaymentSchema } from './schemas.js';

/**
 * The DVMCP servers and tools announced on the public shard of `base`, the servers of the
 * deployment's bridges (its NIP-11 `bridge_providers`) first and marked `preferred`.
 */
export async function listTools(base: string): Promise<Result<Catalog, string>> {
  const url = wsUrl(base, '/');
  const info = await relayInfo(url);
  if (!info.ok) return err(`cannot read this deployment's bridges from the NIP-11 document of ${url}: ${info.error.message}`);
  let lost: (why: string) => void = () => undefined;
  const dropped = new Promise<Result<Catalog, string>>((resolve) => (lost = (why) => resolve(err(`discovery on ${url} failed: connection ${why}`))));
  const relay = relayClient(url, undefined, { onStatus: (status, detail) => status === 'idle' && lost(detail) });
  try {
    const connected = await relay.connect();
    if (!connected.ok) return err(`cannot connect to ${relay.url}: ${connected.message}`);
    return await Promise.race([discover(relay, { verifier: nobleVerifier, preferred: bridgeProvidersOf(info.value) }), dropped]);
  } finally {
    relay.close();
  }
}

export interface LookupFailure {
  /** unknown: no server has that name; ambiguous: servers of several providers have it. */
  reason: 'unknown' | 'ambiguous';
  message: string;
}

/** Candidates named in an ambiguity message, at most. */
const MAX_CANDIDATES_SHOWN = 10;

/**
 * The server `name` names: `<provider>:<id>` (hex or npub) exactly that one; else a server whose
 * id, name or provider (hex) it is. Servers of several providers that all answer to the name go to
 * the one of this deployment's bridges (`preferred`) when exactly one provider of them is such; else
 * the name is refused as ambiguous, listing the candidates as `<provider>:<id>`. Among one
 * provider's servers its id wins over a name.
 */
export function lookupServer(catalog: Catalog, name: string): Result<CatalogServer, LookupFailure> {
  const colon = name.indexOf(':');
  const provider = colon > 0 ? parsePubkey(name.slice(0, colon)) : undefined;
  const matches = provider
    ? catalog.servers.filter((s) => s.provider === provider && s.id === name.slice(colon + 1))
    : catalog.servers.filter((s) => s.id === name || s.name === name || s.provider === name);
  if (matches.length === 0) return err({ reason: 'unknown', message: `no DVMCP server ${name} is announced` });
  const providers = new Set(matches.map((s) => s.provider));
  const preferred = new Set(matches.filter((s) => s.preferred).map((s) => s.provider));
  const owner = providers.size === 1 ? matches[0]!.provider : preferred.size === 1 ? [...preferred][0]! : undefined;
  if (owner !== undefined) {
    const own = matches.filter((s) => s.provider === owner);
    return ok(own.find((s) => s.id === name) ?? own[0]!);
  }
  const listed = matches.slice(0, MAX_CANDIDATES_SHOWN).map((s) => `${s.provider}:${s.id}`);
  const more = matches.length > listed.length ? ` and ${matches.length - listed.length} more` : '';
  const bridges = preferred.size === 0 ? "none of them this deployment's bridge" : `${preferred.size} of them this deployment's bridges`;
  return err({ reason: 'ambiguous', message: `${name} names DVMCP servers of ${providers.size} providers, ${bridges}; name one as <provider>:<id>: ${listed.join(', ')}${more}` });
}

/** The server `name` names (lookupServer); undefined when none or when it is ambiguous. */
export function findServer(catalog: Catalog, name: string): CatalogServer | undefined {
  const found = lookupServer(catalog, name);
  return found.ok ? found.value : undefined;
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
  const r = await requestJson(base, 'POST', '/api/bridge/pay', { body: { invoice }, shape: LocalPaymentSchema });
  return r.ok ? ok({ sats: r.value.sats }) : r;
}
