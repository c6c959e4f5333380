// The one outbound-URL policy: every URL an agent (or a bridge) dials on a user's behalf — MCP
// servers, web_fetch, external relays — passes outboundRefusal, and HTTP goes through safeFetch,
// which follows redirects by hand and checks every hop.
//
// Rules (production):
//   - scheme: https (HTTP kinds) or wss (relay kind); plain http/ws only in development or for a
//     host the operator listed in EDGESTR_OUTBOUND_ALLOW;
//   - no userinfo (user:password@) in the URL;
//   - for a dial on an owner's behalf, not this deployment's own host ("<host> is this
//     deployment's own host (a loop)"): a bridge server at the deployment's /mcp would call the
//     gateway that calls the bridge, an agent's web_fetch or MCP server would call the agents' own
//     API or shards over the network. Own hosts: EDGESTR_PUBLIC_URL's, and the origins the dialler
//     knows (outboundPolicy's `origins`: the host the management API was called on; the origin an
//     agent or bridge was created on, EDGESTR_PUBLIC_URL's if it was set then). Production compares
//     the hostname (Cloudflare serves a Worker's hostname on several ports), the local modes
//     (development, test) the host and port (local servers on other ports are other servers).
//     EDGESTR_OUTBOUND_ALLOW does not lift it (a loop is never wanted). An owner's host entry
//     that takes every port (web_fetch_hosts) is refused when every dial it allows is a loop
//     (ownHostEntryRefusal: an own hostname, in production); a wildcard, or any entry in the local
//     modes, names other servers too and is refused only when the own host is dialled. A
//     hostname the deployment is also served on that no dialler saw (another route, workers.dev
//     when a custom domain is the public URL) is not known here: docs/OPERATIONS.md;
//   - the host must be public (host-policy.ts: not loopback, private, unique-local, link-local
//     incl. the 169.254.169.254 metadata address, CGNAT, multicast, reserved, unspecified, an
//     IPv4-mapped/NAT64/6to4 form of those, a decimal/octal/hex IPv4 trick, localhost or another
//     local name).
// Development (EDGESTR_ENV=development, served on loopback hosts only): loopback, private and
// local names are allowed too, and plain http/ws. Link-local, CGNAT, multicast, reserved and
// unspecified addresses stay refused.
// EDGESTR_OUTBOUND_ALLOW (comma-separated "host", "*.example.com", "host:port" or "host:*"
// entries, IP literals as exact hosts, "[v6]:port"): the operator's explicit exceptions; a listed
// host on a port its entry allows (the listed port; "*": every port; no port: the scheme's default
// port only, 80 for http/ws and 443 for https/wss, as a CSP host-source) is allowed whatever its
// address class, over plain http/ws too (e.g. an internal MCP server, or the test suite's local
// servers on 127.0.0.1:*).
// Whom a dial is for decides whether they apply (outboundPolicy's `dialler`): the deployment's own
// configuration (the operator's Lightning address), and an owner the operators vetted (its agents'
// and bridge's dials: workers/common/owner-outbound.ts; the management API at create and update);
// not a key that signed itself up: for it a listed host is refused with the rules' own reason
// (plain http/ws, a private address…) unless the URL passes without the exception — nothing in
// the answer says the host is listed, so the list cannot be probed. A vetted owner's URL on a
// host listed only with other ports is refused with those ports named ("its default port" for an
// entry without one).
// Names are not resolved (workerd has no DNS API): a public name that resolves to a private
// address is not caught here; on Cloudflare the Worker's egress cannot reach private networks.
// Provider base URLs (OPENAI_BASE_URL, ANTHROPIC_BASE_URL) are the operator's own configuration
// and are not subject to this policy.

import { isDevelopment, localMode } from './env-mode.js';
import { err, ok, type Result } from './errors.js';
import { classOfHost, hostAllowed, parseAllowlist, portOf, urlAllowed, type HostKind, type HostPattern } from './host-policy.js';

export interface OutboundEnv {
  EDGESTR_ENV?: string;
  EDGESTR_OUTBOUND_ALLOW?: string;
  /** The deployment's public URL (workers/common/shards.ts): its host is the deployment's own. */
  EDGESTR_PUBLIC_URL?: string;
}

/** Whom a dial is for: an owner, vetted by the operators or not, and the deployment's origins its dial knows (see the header). */
export interface OutboundDialler {
  readonly vetted: boolean;
  /** The deployment's origins (http(s)://host[:port]) seen by this dial: the API request's, an agent's or bridge's stored one. */
  readonly origins?: readonly string[];
}

export interface OutboundPolicy {
  /** Development: loopback, private and local names, and plain http/ws, are allowed. */
  readonly development: boolean;
  /** Hosts the operator listed (EDGESTR_OUTBOUND_ALLOW), each on one port, its scheme's default port, or every port. */
  readonly allow: readonly HostPattern[];
  /** Whether `allow` applies: the deployment's own dial, or one for an owner the operators vetted. */
  readonly vetted: boolean;
  /** The deployment's own hosts, never dialled (a dial for an owner only): any port in production, the one port in the local modes. */
  readonly self: readonly HostPattern[];
}

/** Production with no exceptions: what a policy-less caller gets. */
export const STRICT_OUTBOUND: OutboundPolicy = { development: false, allow: [], vetted: false, self: [] };

/**
 * The deployment's policy (invalid EDGESTR_OUTBOUND_ALLOW entries are ignored) for a dial made for
 * `dialler`: an owner, vetted by the operators or not, with the origins it knows; omitted, the
 * deployment's own configuration (see the header: its own host is not refused then). A dial on an
 * owner's behalf must name it.
 */
export function outboundPolicy(env: OutboundEnv, dialler?: OutboundDialler): OutboundPolicy {
  const entries = (env.EDGESTR_OUTBOUND_ALLOW ?? '').split(',').map((e) => e.trim()).filter((e) => e !== '');
  return {
    development: isDevelopment(env),
    allow: parseAllowlist(entries, { ports: true }).patterns,
    vetted: dialler?.vetted ?? true,
    self: dialler === undefined ? [] : selfHosts(env, [env.EDGESTR_PUBLIC_URL ?? '', ...(dialler.origins ?? [])]),
  };
}

/** The own hosts of `origins` (those that are not URLs are ignored): hostnames in production, host and port in the local modes. */
function selfHosts(env: OutboundEnv, origins: readonly string[]): HostPattern[] {
  const withPort = localMode(env) !== undefined;
  return origins.flatMap((origin) => {
    let url: URL;
    try {
      url = new URL(origin);
    } catch {
      return [];
    }
    const exact = url.hostname.replace(/\.$/, '');
    return exact === '' ? [] : [withPort ? { pattern: `${exact}:${portOf(url)}`, exact, port: portOf(url) } : { pattern: exact, exact }];
  });
}

/** Why a dial to `host` is refused as this deployment's own. */
const ownHost = (host: string): string => `${host} is this deployment's own host (a loop)`;

/**
 * Why an owner's host entry that takes every port (a web_fetch_hosts entry, parsed by
 * parseAllowlist) is refused under `policy`: it names exactly one of this deployment's own
 * hostnames, which production refuses at any port, so every dial it allows is a loop. Undefined for
 * a wildcard (it names other hosts too) and in the local modes (the own host is one port there, the
 * entry's other ports are other servers): outboundRefusal still refuses the own host when dialled.
 */
export function ownHostEntryRefusal(entry: HostPattern, policy: OutboundPolicy): string | undefined {
  const host = entry.exact;
  if (host === undefined || entry.port !== undefined) return undefined;
  return policy.self.some((own) => own.port === undefined && hostAllowed(host, [own])) ? ownHost(host) : undefined;
}

/** What is dialled: an HTTP(S) endpoint, or a relay (WebSocket). */
export type OutboundKind = 'http' | 'relay';

const SCHEMES: Record<OutboundKind, { secure: string; plain: string; names: string }> = {
  http: { secure: 'https:', plain: 'http:', names: 'http and https' },
  relay: { secure: 'wss:', plain: 'ws:', names: 'ws and wss' },
};

/** Host classes development allows. */
const DEVELOPMENT_KINDS: ReadonlySet<HostKind> = new Set(['loopback', 'private', 'local-name']);

/** Why `url` may not be dialled whatever the policy (its scheme, credentials in it), or undefined. */
export function urlShapeRefusal(url: URL, kind: OutboundKind): string | undefined {
  const scheme = SCHEMES[kind];
  if (url.protocol !== scheme.secure && url.protocol !== scheme.plain) return `only ${scheme.names} URLs are allowed`;
  if (url.username !== '' || url.password !== '') return 'URLs with credentials are not allowed';
  return undefined;
}

/** Why `url` may not be dialled under `policy`, or undefined when it may. */
export function outboundRefusal(url: URL, kind: OutboundKind, policy: OutboundPolicy): string | undefined {
  const shape = urlShapeRefusal(url, kind);
  if (shape !== undefined) return shape;
  const scheme = SCHEMES[kind];
  if (urlAllowed(url, policy.self)) return ownHost(url.host);
  const listed = urlAllowed(url, policy.allow);
  if (listed && policy.vetted) return undefined;
  const refused = withoutExceptions(url, scheme, policy.development);
  if (refused === undefined) return undefined;
  if (policy.vetted && hostAllowed(url.hostname, policy.allow)) return listedOnOtherPorts(url, policy.allow);
  return refused;
}

/**
 * Why `url`, whose host EDGESTR_OUTBOUND_ALLOW lists only with other ports, is refused: "…lists
 * 10.0.0.5 on port 8080 only, not 9200", "…on its default port only, not 9200", "…on its default
 * port and ports 8080, 8443 only, not 9200".
 */
function listedOnOtherPorts(url: URL, allow: readonly HostPattern[]): string {
  const matching = allow.filter((p) => hostAllowed(url.hostname, [p]));
  const ports = [...new Set(matching.flatMap((p) => (typeof p.port === 'number' ? [p.port] : [])))].sort((a, b) => a - b);
  const named = [
    ...(matching.some((p) => p.port === 'default') ? ['its default port'] : []),
    ...(ports.length > 0 ? [`port${ports.length > 1 ? 's' : ''} ${ports.join(', ')}`] : []),
  ];
  return `EDGESTR_OUTBOUND_ALLOW lists ${url.hostname} on ${named.join(' and ')} only, not ${portOf(url)}`;
}

/** Why `url` is refused by the rules alone (no EDGESTR_OUTBOUND_ALLOW), or undefined. */
function withoutExceptions(url: URL, scheme: { secure: string; plain: string }, development: boolean): string | undefined {
  if (url.protocol === scheme.plain && !development) {
    return `plain ${scheme.plain.slice(0, -1)}:// is allowed only in development or for hosts in EDGESTR_OUTBOUND_ALLOW; use ${scheme.secure.slice(0, -1)}://`;
  }
  const cls = classOfHost(url.hostname);
  if (cls === undefined || (development && DEVELOPMENT_KINDS.has(cls.kind))) return undefined;
  return cls.reason;
}

/** Parses and checks a URL: the URL, or "invalid URL" / "refused: <reason>". */
export function checkOutboundUrl(raw: string, kind: OutboundKind, policy: OutboundPolicy): Result<URL, string> {
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    return err('invalid URL');
  }
  const refused = outboundRefusal(url, kind, policy);
  return refused === undefined ? ok(url) : err(`refused: ${refused}`);
}

export interface SafeFetchOptions {
  /** Redirect hops followed (default 5). */
  maxRedirects?: number;
  /** An extra per-hop rule of the caller (e.g. web_fetch's own host allowlist), asked before the policy. */
  check?: (url: URL) => string | undefined;
}

export interface SafeFetchOk {
  response: Response;
  /** The URL that answered (after redirects). */
  url: URL;
  hops: number;
}

const REDIRECT_STATUSES = new Set([301, 302, 303, 307, 308]);
/** Headers kept when a redirect leaves the origin (credentials and custom headers are dropped; MCP's protocol headers stay). */
const CROSS_ORIGIN_HEADERS = new Set(['accept', 'accept-language', 'content-type', 'user-agent', 'mcp-session-id', 'mcp-protocol-version', 'last-event-id']);

/**
 * fetch with the outbound policy on the first URL and on every redirect hop (`redirect:
 * 'manual'`, at most `maxRedirects` hops). 303, and 301/302 after a POST, continue as a GET
 * without a body (as browsers do); 307/308 repeat the method and body (a string or bytes body
 * only). A hop to another origin drops every header but Accept, Accept-Language, Content-Type,
 * User-Agent and MCP's protocol headers (no Authorization or API keys to a host the caller did not name). Errors are values:
 * "refused: <reason>", "redirect refused: <reason>", "too many redirects (max <n>)"; network
 * errors and aborts reject as fetch does.
 */
export async function safeFetch(
  input: string | URL,
  init: RequestInit,
  policy: OutboundPolicy,
  options: SafeFetchOptions = {},
): Promise<Result<SafeFetchOk, string>> {
  const maxRedirects = options.maxRedirects ?? 5;
  // The caller's own rule before the policy (after the URL's shape): a hop it refuses never reaches
  // the policy, whose reasons could name what the operators listed.
  const refusal = (url: URL) => urlShapeRefusal(url, 'http') ?? options.check?.(url) ?? outboundRefusal(url, 'http', policy);
  let url: URL;
  try {
    url = new URL(input);
  } catch {
    return err('invalid URL');
  }
  const first = refusal(url);
  if (first !== undefined) return err(`refused: ${first}`);
  let method = (init.method ?? 'GET').toUpperCase();
  let body = init.body;
  let headers = new Headers(init.headers);
  for (let hops = 0; ; hops++) {
    const response = await fetch(url.href, { ...init, method, body, headers, redirect: 'manual' });
    const location = response.headers.get('location');
    if (!REDIRECT_STATUSES.has(response.status) || location === null) return ok({ response, url, hops });
    await response.body?.cancel().catch(() => undefined);
    if (hops >= maxRedirects) return err(`too many redirects (max ${maxRedirects})`);
    let next: URL;
    try {
      next = new URL(location, url);
    } catch {
      return err('redirect refused: invalid URL');
    }
    const refused = refusal(next);
    if (refused !== undefined) return err(`redirect refused: ${refused}`);
    if (response.status === 303 || ((response.status === 301 || response.status === 302) && method === 'POST')) {
      if (method !== 'HEAD') method = 'GET';
      body = undefined;
      headers.delete('content-type');
    } else if (body !== undefined && body !== null && typeof body !== 'string' && !(body instanceof Uint8Array) && !(body instanceof ArrayBuffer)) {
      return err('redirect refused: the request body cannot be sent again');
    }
    if (next.origin !== url.origin) {
      const kept = new Headers();
      headers.forEach((value, name) => {
        if (CROSS_ORIGIN_HEADERS.has(name)) kept.set(name, value);
      });
      headers = kept;
    }
    url = next;
  }
}
