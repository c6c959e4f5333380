// The deployment's public URL (EDGESTR_PUBLIC_URL) applied to the URLs others see: the URL a shard
// sees and names in NIP-42, and the origin an agent's or bridge's shards are reached and named at.
// No imports: the agent's and bridge's pure modules (and their Node unit tests) use it.

export interface PublicUrlEnv {
  /** The URL clients use (custom domain or workers.dev), when set. */
  EDGESTR_PUBLIC_URL?: string;
}

/** The URL the shard sees (and names in NIP-42): the request's, on EDGESTR_PUBLIC_URL's origin when set. */
export function relayRequestUrl(env: PublicUrlEnv, requestUrl: string): URL | undefined {
  const url = new URL(requestUrl);
  if (!env.EDGESTR_PUBLIC_URL) return url;
  let pub: URL;
  try {
    pub = new URL(env.EDGESTR_PUBLIC_URL);
  } catch {
    return undefined;
  }
  url.protocol = pub.protocol;
  url.host = pub.host;
  return url;
}

/**
 * The origin an agent's or bridge's shards are reached and named at, given `stored`, the origin it
 * was created on: EDGESTR_PUBLIC_URL's when set, else `stored`. One created before the deployment
 * set EDGESTR_PUBLIC_URL stored the host its creating request came on (e.g. its workers.dev name),
 * which now answers 421 (served-host.ts); its relay list, the relays of its zap requests and its
 * own sockets use this origin, while `stored` stays one of its own hosts for the outbound policy
 * (owner-outbound.ts). A malformed EDGESTR_PUBLIC_URL (every request refused 500) leaves `stored`.
 */
export const servedOrigin = (env: PublicUrlEnv, stored: string): string => relayRequestUrl(env, stored)?.origin ?? stored;
