// A public server's announcements (DVMCP spec "Server Announcements"): 31316 with upstream's
// initialize result, and 31317 (tools), 31318 (resources; resource templates as a second event)
// and 31319 (prompts) for the capabilities upstream declares, each list read in full (bounded
// pages), prices as `cap` tags. The set is hashed without created_at so that an unchanged set is
// not published again. Each is held to one plain event (answer-fit.ts): the 31316's instructions
// are cut to fit (note, _meta), a 31316 too large otherwise fails the refresh; a list too large for
// one event is left out (`leftOut`, logged by the bridge), never sent for the relay to refuse. A
// list that cannot be read, upstream answering it with a JSON-RPC error other than -32601 (a
// server may declare resources without templates), a transport failure, or too large to hold
// (upstream.ts listTooLarge; listTooLong: more than 20 pages), is left out too, the others announced (`listErrors`: the owner reads
// them in the server's health; `retrySoon` unless every one is too large to hold, which does not
// pass with time). Of a public server, an item nesting deeper than MAX_JSON_DEPTH levels
// (json-depth.ts: a tool's inputSchema of 70 levels), which DVMCP discovery drops
// (dvmcp-discovery.ts: /mcp tools/list, `edgestr tools`, the console), is not announced nor
// counted; its list's `listErrors` entry names it ('left out, nesting deeper than 64 levels:
// <name>, …', at most MAX_NAMED names, then 'and N more'); that does not pass with time either. An
// initialize result nesting that deep, for which discovery drops the whole server, fails the
// refresh (nothing is published; the owner reads why in the health's announce_error). A private
// server, never announced, is counted as upstream lists it.

import { sha256 } from '@noble/hashes/sha2.js';
import { bytesToHex } from '../../src/shared/hex.js';
import { err, ok, type Result } from '../../src/shared/errors.js';
import { LISTS, listAnnouncement, RPC, serverAnnouncement, type ListSpec } from '../../src/shared/dvmcp.js';
import type { EventTemplate } from '../../src/shared/relay-types.js';
import { initializeTemplate } from '../common/dvmcp-server/answer-fit.js';
import { messageSize } from '../../src/shared/dvmcp-size.js';
import { cutChars, MAX_JSON_DEPTH, nestsWithin } from '../../src/shared/json-depth.js';
import type { ServerHealth, StoredServer } from './config.js';
import { isListTooLarge, type UpstreamServer } from './upstream.js';

export interface Announcements {
  templates: EventTemplate[];
  hash: string;
  counts: Pick<ServerHealth, 'tools' | 'resources' | 'resource_templates' | 'prompts'>;
  /** Lists not announced because their event would be too large: why, one line each. */
  leftOut: string[];
  /** Lists that could not be read, by method: why (ServerHealth.list_errors); not announced, not counted. */
  listErrors: Record<string, string>;
  /** Whether a list failed in a way that may pass (not too large to hold): worth listing again soon. */
  retrySoon: boolean;
}

/** The capability of initialize's `capabilities` a list needs. */
const capabilityOf = (spec: ListSpec): string => spec.method.split('/')[0]!;

const COUNT_FIELD: Record<ListSpec['method'], keyof Announcements['counts']> = {
  'tools/list': 'tools',
  'resources/list': 'resources',
  'resources/templates/list': 'resource_templates',
  'prompts/list': 'prompts',
};

/** Items named in a list's note of those nesting too deep; each name cut to MAX_NAME_CHARS. */
const MAX_NAMED = 8;
const MAX_NAME_CHARS = 64;

/** The listErrors entry of a list whose `deep` items are left out for their nesting (see the header). */
function tooDeep(spec: ListSpec, deep: readonly Record<string, unknown>[]): string {
  const names = deep.slice(0, MAX_NAMED).map((item) => {
    const name = item[spec.capName];
    return typeof name === 'string' ? cutChars(name, MAX_NAME_CHARS) : '(no name)';
  });
  const more = deep.length > MAX_NAMED ? ` and ${deep.length - MAX_NAMED} more` : '';
  return `left out, nesting deeper than ${MAX_JSON_DEPTH} levels: ${names.join(', ')}${more}`;
}

/** Builds the announcement set of `stored` from what upstream lists now; the error says why not. */
export async function buildAnnouncements(stored: StoredServer, upstream: UpstreamServer): Promise<Result<Announcements, string>> {
  const init = await upstream.capabilities();
  if (!init.ok) return err(init.error.message);
  const server = initializeTemplate(serverAnnouncement(upstream.profile, init.value), 'plain');
  if (!server.ok) return err(server.error.message);
  if (stored.public && !nestsWithin(JSON.parse(server.value.content))) return err(`upstream's initialize result nests deeper than ${MAX_JSON_DEPTH} levels (DVMCP readers would not list the server)`);
  const templates: EventTemplate[] = [server.value];
  const counts: Announcements['counts'] = { tools: 0, resources: 0, resource_templates: 0, prompts: 0 };
  const leftOut: string[] = [];
  const listErrors: Record<string, string> = {};
  let retrySoon = false;
  for (const spec of LISTS) {
    if (init.value.capabilities[capabilityOf(spec)] === undefined) continue;
    const items = await upstream.list(spec);
    if (!items.ok) {
      // A server may declare resources without resource templates.
      if (items.error.code === RPC.METHOD_NOT_FOUND) continue;
      const tooLarge = isListTooLarge(items.error);
      listErrors[spec.method] = tooLarge ? items.error.message : `${items.error.code} ${items.error.message}`;
      retrySoon ||= !tooLarge;
      continue;
    }
    const kept: Record<string, unknown>[] = [];
    const deep: Record<string, unknown>[] = [];
    for (const item of items.value) (!stored.public || nestsWithin(item) ? kept : deep).push(item);
    if (deep.length > 0) listErrors[spec.method] = tooDeep(spec, deep);
    counts[COUNT_FIELD[spec.method]] = kept.length;
    const list = listAnnouncement(stored.id, spec, kept, stored.prices);
    const { size, room } = messageSize(list, 'plain');
    if (size <= room) templates.push(list);
    else leftOut.push(`${spec.method} (${kept.length} items) is ${size} bytes; one announcement carries at most ${room}`);
  }
  const hash = bytesToHex(sha256(new TextEncoder().encode(JSON.stringify(templates.map((t) => [t.kind, t.tags, t.content])))));
  return ok({ templates, hash, counts, leftOut, listErrors, retrySoon });
}
