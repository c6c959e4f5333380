// Bridge server configuration: the management API's request bodies (zod) for a remote MCP server
// exposed over DVMCP, its stored form (secret headers kept apart, sealed), its public view with
// health, and the provider record of an owner's bridge.

import { z } from 'zod';
import { SERVER_ID, type Prices, type ServerProfile } from '../../src/shared/dvmcp.js';
import { hasLoneSurrogate } from '../../src/shared/json-cut.js';
import { mcpHeadersSchema } from '../common/mcp-headers-schema.js';
import { withoutProtoKey } from '../common/proto-key.js';

const HeadersSchema = mcpHeadersSchema('the bridge');

/**
 * `{<tool or prompt name, or resource uri>: {price, unit}}`; the price is a positive integer string.
 * A name "__proto__" is refused (zod's record would drop it, and that capability would be served free),
 * and so is one with a lone surrogate (no UTF-8 form: no payment could be recorded for it, payments-gate.ts).
 */
export const PricesSchema = withoutProtoKey(
  z
    .record(
      z.string().min(1).max(512),
      z.strictObject({
        price: z.string().regex(/^[1-9][0-9]{0,15}$/, 'price is a positive integer string, e.g. "21"'),
        unit: z.string().min(1).max(16).regex(/^[a-zA-Z0-9_-]+$/, 'unit is a word, e.g. "sats"'),
      }),
    )
    .refine((p) => Object.keys(p).length <= 500, 'at most 500 prices')
    .refine((p) => !Object.keys(p).some(hasLoneSurrogate), 'a priced name must be valid Unicode (it has a lone surrogate)'),
);

const fields = {
  url: z.url({ error: 'url must be a URL' }).max(2048),
  headers: HeadersSchema.optional(),
  name: z.string().min(1).max(100).optional(),
  about: z.string().max(2000).optional(),
  picture: z.url().max(2048).optional(),
  website: z.url().max(2048).optional(),
  /** Announced on the relays (31316–31319); a private server answers only clients that know its id. */
  public: z.boolean().optional(),
  /** Whether the server accepts gift-wrapped (NIP-59) requests. */
  encryption: z.boolean().optional(),
  prices: PricesSchema.optional(),
};

export const CreateServerSchema = z.strictObject({
  id: z.string().regex(SERVER_ID, 'server ids are 1-64 characters of [a-zA-Z0-9_.-]'),
  ...fields,
});
export const UpdateServerSchema = z.strictObject({ ...fields, url: fields.url.optional() });
export type CreateServer = z.infer<typeof CreateServerSchema>;
export type UpdateServer = z.infer<typeof UpdateServerSchema>;

/** A server as stored (its secret headers are sealed in their own column). */
export interface StoredServer {
  id: string;
  url: string;
  header_names: string[];
  name?: string;
  about?: string;
  picture?: string;
  website?: string;
  public: boolean;
  encryption: boolean;
  prices: Prices;
  created_at: number;
  updated_at: number;
}

/**
 * The bridge's last contact with upstream (its own: a client's call, which the client chooses, is
 * not counted), what the server lists, and whether its announcements are out.
 */
export interface ServerHealth {
  /** null until the first contact. */
  ok: boolean | null;
  /** Unix seconds of the last contact. */
  checked_at: number | null;
  error: string | null;
  tools: number;
  resources: number;
  resource_templates: number;
  prompts: number;
  /**
   * The lists the last refresh could not read, by method: `<code> <message>` of the JSON-RPC error
   * it got (upstream's own, or the bridge's for a transport failure), or why it was too large to
   * hold, or the names of a public server's items left out for nesting deeper than MAX_JSON_DEPTH
   * (announcer.ts); left out of the counts and the announcements, the other lists announced.
   */
  list_errors: Record<string, string>;
  /** Whether the server's announcements of the last refresh are on the public shard (a private server's never are). */
  announced: boolean;
  /**
   * Why a public server's announcements are not out: the public shard's refusal (`<relay>: <its
   * message>`, sent again at the next refresh, RETRY_MS later), or why the last refresh could not
   * build them; null otherwise.
   */
  announce_error: string | null;
}

export const EMPTY_HEALTH: ServerHealth = { ok: null, checked_at: null, error: null, tools: 0, resources: 0, resource_templates: 0, prompts: 0, list_errors: {}, announced: false, announce_error: null };

/** What the API returns for a server: never the header values. */
export type ServerView = StoredServer & { provider: string; health: ServerHealth };

/** The DVMCP profile of a stored server. */
export const profileOf = (s: StoredServer): ServerProfile => ({
  id: s.id,
  ...(s.name !== undefined ? { name: s.name } : {}),
  ...(s.about !== undefined ? { about: s.about } : {}),
  ...(s.picture !== undefined ? { picture: s.picture } : {}),
  ...(s.website !== undefined ? { website: s.website } : {}),
  encryption: s.encryption,
});

/** A new server's stored form (defaults: public, encryption on, no prices). */
export function storedServer(input: CreateServer, now: number): StoredServer {
  const { headers, ...rest } = input;
  return { ...rest, header_names: Object.keys(headers ?? {}), public: input.public ?? true, encryption: input.encryption ?? true, prices: input.prices ?? {}, created_at: now, updated_at: now };
}

/**
 * Why `patch` cannot apply to `s`: its URL moves to another origin while `s` has secret headers and
 * the patch does not give them again (they were given for that host: they are not sent to another,
 * as safeFetch drops credentials on a cross-origin redirect). The same origin keeps them.
 */
export function movedHeadersIssue(s: StoredServer, patch: UpdateServer): { path: string; message: string } | undefined {
  if (patch.url === undefined || patch.headers !== undefined || s.header_names.length === 0) return undefined;
  const to = new URL(patch.url).origin;
  if (to === new URL(s.url).origin) return undefined;
  return { path: 'headers', message: `the url moves to another origin (${to}): give the headers again to send them there, or "headers": {} to send none` };
}

/** A server after a PATCH (headers, when given, replace the old ones; see movedHeadersIssue for a new origin). */
export function patchedServer(s: StoredServer, patch: UpdateServer, now: number): StoredServer {
  const { headers, ...rest } = patch;
  return { ...s, ...rest, ...(headers !== undefined ? { header_names: Object.keys(headers) } : {}), updated_at: now };
}
