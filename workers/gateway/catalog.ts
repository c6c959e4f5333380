// The /mcp gateway's view of the DVMCP servers announced on the deployment's public shard: the
// discovered catalog (src/shared/dvmcp-discovery.ts) turned into MCP items under exposed names
// (names.ts), with the way back from an exposed name or uri to (server, original); the servers of
// this deployment's own bridges first, so that strangers' announcements cannot push them out or
// take their names. Catalogs are cached per isolate for CATALOG_TTL_MS (one discovery per origin
// at a time), so a burst of MCP requests costs one relay query. A discovery runs on a relay
// connection of its own (edgestr's: it reads announcements only, with filters no client sets),
// closed when it ends; not on the connection of the request that started it, which closes when
// that client goes away, under every request waiting for the catalog. The request that started it
// keeps it running (waitUntil) until it ends.

import { PromptSchema, ResourceSchema, ResourceTemplateSchema, ToolSchema, type Prompt, type Resource, type ResourceTemplate, type Tool } from '@modelcontextprotocol/sdk/types.js';
import type { z } from 'zod';
import { discover, type Catalog, type CatalogServer } from '../../src/shared/dvmcp-discovery.js';
import { err, errorMessage, ok, type Result } from '../../src/shared/errors.js';
import { LruMap } from '../../src/shared/lru.js';
import type { RelayClient } from '../../src/shared/relay-client.js';
import type { SchnorrVerifier } from '../../src/shared/verify.js';
import { exposedName, exposedUri, key, originalUri, serverPrefixes } from './names.js';

export const CATALOG_TTL_MS = 10_000;
/** Bounds of one catalog: servers, and items per list of a server. */
export const CATALOG_LIMITS = { maxServers: 100, maxItems: 200, maxEvents: 1000 } as const;

/** An exposed item and where it leads. */
export interface Route {
  server: CatalogServer;
  /** The name (or uri) the server knows. */
  original: string;
}

export class GatewayIndex {
  readonly tools: Tool[] = [];
  readonly prompts: Prompt[] = [];
  readonly resources: Resource[] = [];
  readonly resourceTemplates: ResourceTemplate[] = [];
  readonly #tools = new Map<string, Route>();
  readonly #prompts = new Map<string, Route>();
  readonly #servers = new Map<string, CatalogServer>();

  /**
   * Items that are not valid MCP items (by the SDK's schemas) are left out. An exposed tool or
   * prompt name that two servers claim (names.ts) goes to the one a preferred provider announced
   * when there is exactly one such; otherwise to neither, so that no announcement can take over a
   * name another server is known by. A server that lists a name twice keeps its first.
   */
  constructor(catalog: Catalog) {
    const prefixes = serverPrefixes(catalog);
    const tools = new Claims<Tool>();
    const prompts = new Claims<Prompt>();
    for (const server of catalog.servers) {
      const prefix = prefixes.get(key(server))!;
      this.#servers.set(prefix, server);
      for (const { price: _price, ...tool } of server.tools) {
        const item = valid(ToolSchema, { ...tool, name: exposedName(prefix, tool.name) });
        if (item) tools.add(item.name, item, { server, original: tool.name });
      }
      for (const { price: _price, ...prompt } of server.prompts) {
        const item = valid(PromptSchema, { ...prompt, name: exposedName(prefix, prompt.name) });
        if (item) prompts.add(item.name, item, { server, original: prompt.name });
      }
      for (const { price: _price, ...r } of server.resources) {
        const item = valid(ResourceSchema, { ...r, name: exposedName(prefix, r.name), uri: exposedUri(prefix, r.uri) });
        if (item) this.resources.push(item);
      }
      for (const { price: _price, ...t } of server.resourceTemplates) {
        const item = valid(ResourceTemplateSchema, { ...t, name: exposedName(prefix, t.name), uriTemplate: exposedUri(prefix, t.uriTemplate) });
        if (item) this.resourceTemplates.push(item);
      }
    }
    for (const [name, { item, route }] of tools.settled()) {
      this.tools.push(item);
      this.#tools.set(name, route);
    }
    for (const [name, { item, route }] of prompts.settled()) {
      this.prompts.push(item);
      this.#prompts.set(name, route);
    }
  }

  tool(name: string): Route | undefined {
    return this.#tools.get(name);
  }

  prompt(name: string): Route | undefined {
    return this.#prompts.get(name);
  }

  /** The server and original uri of an exposed resource uri. */
  resource(uri: string): Route | undefined {
    const found = originalUri(uri, this.#servers.keys());
    return found && { server: this.#servers.get(found.prefix)!, original: found.uri };
  }

  /** The exposed form of `uri` of `server` (for the uris in a read's contents). */
  exposeUri(server: CatalogServer, uri: string): string {
    for (const [prefix, s] of this.#servers) if (s === server) return exposedUri(prefix, uri);
    return uri;
  }

}

/** The claims on exposed names, in catalog order, and who gets each (see GatewayIndex's constructor). */
class Claims<T> {
  readonly #claims = new Map<string, Array<{ item: T; route: Route }>>();

  add(name: string, item: T, route: Route): void {
    const claims = this.#claims.get(name);
    if (!claims) this.#claims.set(name, [{ item, route }]);
    else if (!claims.some((c) => c.route.server === route.server)) claims.push({ item, route });
  }

  /** Each name with the claim that gets it, in catalog order; contested names are left out. */
  *settled(): Generator<[string, { item: T; route: Route }]> {
    for (const [name, claims] of this.#claims) {
      if (claims.length === 1) {
        yield [name, claims[0]!];
        continue;
      }
      const preferred = claims.filter((c) => c.route.server.preferred);
      if (preferred.length === 1) yield [name, preferred[0]!];
    }
  }
}

const valid = <T>(schema: z.ZodType<T>, item: unknown): T | undefined => {
  const r = schema.safeParse(item);
  return r.success ? r.data : undefined;
};

interface Cached {
  at: number;
  index: Promise<Result<GatewayIndex, string>>;
}
const cache = new LruMap<string, Cached>(16);

/**
 * The index for the public shard at `origin`, discovered when the cache is stale through a
 * connection `connect` opens (closed when the discovery ends; `keepRunning` is given the
 * discovery), with the servers of this deployment's bridges (`preferred`, their provider keys) first.
 */
export function gatewayIndex(
  origin: string,
  connect: () => RelayClient,
  verifier: SchnorrVerifier,
  preferred: () => Promise<string[]>,
  keepRunning: (discovery: Promise<unknown>) => void,
  now = Date.now(),
): Promise<Result<GatewayIndex, string>> {
  const hit = cache.get(origin);
  if (hit && now - hit.at < CATALOG_TTL_MS) return hit.index;
  const index = preferred()
    .then((providers) => {
      const relay = connect();
      return discover(relay, { verifier, timeoutMs: 5_000, limits: CATALOG_LIMITS, preferred: providers }).finally(() => relay.close());
    })
    .then(
      (c) => (c.ok ? ok(new GatewayIndex(c.value)) : err(c.error)),
      (e: unknown) => err(`could not read this deployment's bridges: ${errorMessage(e)}`),
    );
  keepRunning(index);
  const entry: Cached = { at: now, index };
  cache.set(origin, entry);
  // A failed discovery is not kept: the next request tries again.
  void index.then((r) => {
    if (!r.ok && cache.peek(origin) === entry) cache.delete(origin);
  });
  return index;
}
