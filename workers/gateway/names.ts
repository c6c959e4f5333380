// How the /mcp gateway names what DVMCP servers announce, so that one MCP client sees every server
// at once without clashes:
//   tools and prompts:  <prefix>__<name>
//   resources:          uri  dvmcp://<prefix>/<original uri>       name  <prefix>__<name>
//   resource templates: uriTemplate dvmcp://<prefix>/<original template> (a client's expansion keeps
//                       the prefix, so a read goes back to the right server)
// <prefix> is the server id (`d` of its 31316); when two providers announce the same server id, or
// an id has the form of such a prefix (16 hex digits and "_"), the server gets "<first 16 hex
// digits of its provider>_<server id>" instead. So no key can take another server's prefix: that
// would need a provider key sharing 64 bits with the other's (not the 32 of a shorter form, which a
// stranger can grind). Exposed names that two servers still share (ids and names may contain "__")
// are settled in catalog.ts.

import type { Catalog, CatalogServer } from '../../src/shared/dvmcp-discovery.js';

export const SEPARATOR = '__';
export const URI_SCHEME = 'dvmcp://';
/** Hex digits of the provider in a qualified prefix. */
const PROVIDER_DIGITS = 16;
const QUALIFIED = new RegExp(`^[0-9a-f]{${PROVIDER_DIGITS}}_`);

/** The prefix of each server of `catalog`, by `<provider>:<id>` (see the header). */
export function serverPrefixes(catalog: Catalog): Map<string, string> {
  const providersOf = new Map<string, number>();
  for (const s of catalog.servers) providersOf.set(s.id, (providersOf.get(s.id) ?? 0) + 1);
  const prefixes = new Map<string, string>();
  for (const s of catalog.servers) {
    const qualify = (providersOf.get(s.id) ?? 0) > 1 || QUALIFIED.test(s.id);
    prefixes.set(key(s), qualify ? `${s.provider.slice(0, PROVIDER_DIGITS)}_${s.id}` : s.id);
  }
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
