// Which relay shard of a deployment a URL names: `/` the public shard, `/r/<owner>` an owner's
// (64-hex in any case or npub, a trailing slash allowed: NDK appends one), and the one URL of that
// shard, so that every spelling of it is known as the same shard (an agent's relays, workers/agent/config.ts).

import { parsePubkey } from './keys.js';

/** The shard a path names: null for `/`, the owner's hex for `/r/<hex or npub>` (trailing slash allowed), else undefined. */
export function shardOfPath(pathname: string): string | null | undefined {
  const path = pathname.replace(/\/$/, '');
  if (path === '') return null;
  return path.startsWith('/r/') ? parsePubkey(path.slice(3)) : undefined;
}

/**
 * The URL of the shard that relay URL `relay` names on the deployment at `origin` (http(s)://host):
 * `ws(s)://host/` or `ws(s)://host/r/<hex>`, whatever the spelling (the owner as above, the host's
 * case, the scheme's default port); undefined for another host or a path that names no shard.
 */
export function shardUrlOf(origin: string, relay: string): string | undefined {
  let url: URL;
  try {
    url = new URL(relay);
  } catch {
    return undefined;
  }
  const own = new URL(origin);
  if (url.host !== own.host) return undefined;
  const owner = shardOfPath(url.pathname);
  if (owner === undefined) return undefined;
  const ws = own.origin.replace(/^http/, 'ws');
  return owner === null ? `${ws}/` : `${ws}/r/${owner}`;
}
