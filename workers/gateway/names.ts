// How the /mcp gateway names what DVMCP servers announce, so that one MCP client sees every server
// at once without clashes:
//   tools and prompts:  <prefix>__<name>
//   resources:          uri  dvmcp://<prefix>/<original uri>       name  <prefix>__<name>
//   resource templates: uriTemplate dvmcp://<prefix>/<original template> (a client's expansion keeps
//                       the prefix, so a read goes back to the right server)
// <prefix> is the server id (`d` of its 31316); when two providers announce the same server id,
// each of those servers gets "<first 8 hex digits of its provider>_<server id>" instead. A name that
// is still taken (a server listed the same name twice) keeps its first owner.

import type { Catalog, CatalogServer } from '../../src/shared/dvmcp-discovery.js';

export const SEPARATOR = '__';
export const URI_SCHEME = 'dvmcp://';

/** The prefix of each server of `catalog`, by `<provider>:<id>` (see the header). */
export function serverPrefixes(catalog: Catalog): Map<string, string> {
  const providersOf = new Map<string, number>();
  for (const s of catalog.servers) providersOf.set(s.id, (providersOf.get(s.id) ?? 0) + 1);
  const prefixes = new Map<string, string>();
  for (const s of catalog.servers) prefixes.set(key(s), (providersOf.get(s.id) ?? 0) > 1 ? `${s.provider.slice(0, 8)}_${s.id}` : s.id);
  return prefixes;
}

export const key = (s: Pick<CatalogServer, 'provider' | 'id'>): string => `${s.provider}:${s.id}`;
export const exposedName = (prefix: string, name: string): string => `${prefix}${SEPARATOR}${name}`;
export const exposedUri = (prefix: string, uri: string): string => `${URI_SCHEME}${prefix}/${uri}`;

/** The prefix and original uri of an exposed uri, given the known prefixes. */
export function originalUri(uri: string, prefixes: Iterable<string>): { prefix: string; uri: string } | undefined {
  if (!uri.startsWith(URI_SCHEME)) return undefined;
  const rest = uri.slice(URI_SCHEME.length);
  const slash = rest.indexOf('/');
  if (slash <= 0) return undefined;
  const prefix = rest.slice(0, slash);
  for (const p of prefixes) if (p === prefix) return { prefix, uri: rest.slice(slash + 1) };
  return undefined;
}
