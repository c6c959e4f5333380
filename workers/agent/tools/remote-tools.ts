// The definitions the model sees of a remote server's tools, one rule for MCP servers (mcp.ts)
// and DVMCP servers (dvmcp.ts): from the server's listing to the tools taken and those skipped.
//
// Tool names (LLM providers accept only [a-zA-Z0-9_-]{1,64}), <serverId> written with "_" for
// any other character (a DVMCP server id may hold '.'):
//   <serverId>__<toolName>                       when that is already valid and at most 64 chars;
//   otherwise <serverId>__<toolName with every other character replaced by "_">, cut to 55
//   characters, then "_" and the first 8 hex digits of sha256(toolName) (so that "a.b" and
//   "a_b" stay distinct). A name that is still taken (the server listed it twice, or two server
//   ids differ only by '.' and '_') is skipped.
//   So every name of server `serverId`'s tools begins with "<serverId>__", or its first 55
//   characters when longer (a DVMCP server id may have 64): isToolNameOf.
// Definitions: description = the tool's description (or title, or ""), input_schema = the
// server's inputSchema as given (with type "object"), schema_version 1, requires_approval false.
// Count: at most `maxTools` tools are taken; the rest are skipped.
// Sizes (the definitions go in the input of every model call, paid for by the owner; a hostile
// server could list megabytes): a description over MAX_MCP_DESCRIPTION_CHARS is cut, followed by
// "\n[description cut: the first N of M characters]"; a tool whose inputSchema nests deeper than
// MAX_JSON_DEPTH levels (json-depth.ts: the schema goes into a public agent's ai.info and the
// owner's NIP-AO frames, whose readers write it with JSON.stringify) or whose JSON is over
// MAX_MCP_INPUT_SCHEMA_CHARS is left out, and so are the tools listed after the server's
// definitions (name, description, input_schema as JSON) reach MAX_MCP_TOOL_LIST_CHARS; they are
// logged in one line (console.warn "agent: <label>: tools left out for their size: …").
// Every tool skipped is in `skipped`, "<tool name> (<why>)".

import { sha256 } from '@noble/hashes/sha2.js';
import { err, ok, type Result } from '../../../src/shared/errors.js';
import { bytesToHex } from '../../../src/shared/hex.js';
import { MAX_JSON_DEPTH, nestsWithin } from '../../../src/shared/json-depth.js';
import type { ToolDefinition } from './types.js';

/** Longest tool description kept, in characters (UTF-16 units); real ones are a few hundred. */
export const MAX_MCP_DESCRIPTION_CHARS = 16_384;
/** Longest input schema (its JSON) of a tool taken, in characters; real ones are a few thousand at most. */
export const MAX_MCP_INPUT_SCHEMA_CHARS = 65_536;
/** Most characters of tool definitions (JSON of name, description, input_schema) taken from one server. */
export const MAX_MCP_TOOL_LIST_CHARS = 524_288;

/** A tool as a server lists it (MCP tools/list; DVMCP the same over Nostr). */
export interface RemoteListedTool {
  name: string;
  description?: unknown;
  title?: unknown;
  inputSchema?: unknown;
}

/** A tool taken: its definition, and its name on the server. */
export interface RemoteToolDefinition {
  definition: ToolDefinition;
  remoteName: string;
}

const TOOL_NAME = /^[a-zA-Z0-9_-]{1,64}$/;
const SEPARATOR = '__';
/** A cleaned name is cut to this many characters before "_" and its 8 hex digits (64 in all). */
const CLEANED_CHARS = 55;

/** The exposed name of `toolName` of server `serverId` (see the naming rule above). */
export function mcpToolName(serverId: string, toolName: string): string {
  const plain = `${nameOfServer(serverId)}${SEPARATOR}${toolName}`;
  if (TOOL_NAME.test(plain)) return plain;
  const cleaned = `${nameOfServer(serverId)}${SEPARATOR}${cleanName(toolName)}`.slice(0, CLEANED_CHARS);
  return `${cleaned}_${bytesToHex(sha256(new TextEncoder().encode(toolName))).slice(0, 8)}`;
}

/** `name` with every character providers refuse in a tool name replaced by "_". */
const cleanName = (name: string): string => name.replace(/[^a-zA-Z0-9_-]/g, '_');
/** A server id as tool names write it: a DVMCP server id may hold '.', written "_". */
const nameOfServer = cleanName;

/** Whether `name` begins as every name mcpToolName gives server `serverId`'s tools does (see the naming rule above). */
export const isToolNameOf = (name: string, serverId: string): boolean => name.startsWith(`${nameOfServer(serverId)}${SEPARATOR}`.slice(0, CLEANED_CHARS));

const isRecord = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

/** `text` cut to MAX_MCP_DESCRIPTION_CHARS (never between the halves of a surrogate pair), with a note. */
function cutDescription(text: string): string {
  if (text.length <= MAX_MCP_DESCRIPTION_CHARS) return text;
  let end = MAX_MCP_DESCRIPTION_CHARS;
  const last = text.charCodeAt(end - 1);
  if (last >= 0xd800 && last <= 0xdbff) end--;
  return `${text.slice(0, end)}\n[description cut: the first ${end} of ${text.length} characters]`;
}

/** The tool's definition, or why it is left out (an input schema nesting deeper than MAX_JSON_DEPTH, or over MAX_MCP_INPUT_SCHEMA_CHARS). */
function definitionOf(name: string, tool: RemoteListedTool): Result<ToolDefinition, string> {
  const schema = isRecord(tool.inputSchema) ? tool.inputSchema : {};
  const input_schema = { ...schema, type: 'object' };
  if (!nestsWithin(input_schema)) return err(`its input schema nests deeper than ${MAX_JSON_DEPTH} levels`);
  const schemaChars = JSON.stringify(input_schema).length;
  if (schemaChars > MAX_MCP_INPUT_SCHEMA_CHARS) return err(`its input schema is ${schemaChars} characters, at most ${MAX_MCP_INPUT_SCHEMA_CHARS}`);
  const text = (v: unknown): string | undefined => (typeof v === 'string' ? v : undefined);
  return ok({
    name,
    description: cutDescription(text(tool.description) ?? text(tool.title) ?? ''),
    schema_version: 1,
    requires_approval: false,
    input_schema,
  });
}

/**
 * The tools taken from server `serverId`'s listing and those skipped (see the header), and `chars`,
 * the characters of the definitions taken (at most MAX_MCP_TOOL_LIST_CHARS); `label` names the
 * server in the log.
 */
export function remoteToolDefinitions(
  serverId: string,
  listed: readonly RemoteListedTool[],
  maxTools: number,
  label: string,
): { taken: RemoteToolDefinition[]; skipped: string[]; chars: number } {
  const taken: RemoteToolDefinition[] = [];
  const skipped: string[] = [];
  const tooLarge: string[] = [];
  const names = new Set<string>();
  let listChars = 0;
  for (const tool of listed) {
    const name = mcpToolName(serverId, tool.name);
    if (names.has(name)) {
      skipped.push(`${tool.name} (duplicate name ${name})`);
      continue;
    }
    if (taken.length >= maxTools) {
      skipped.push(`${tool.name} (over the tool limit of ${maxTools})`);
      continue;
    }
    const definition = definitionOf(name, tool);
    const chars = definition.ok ? JSON.stringify({ name, description: definition.value.description, input_schema: definition.value.input_schema }).length : 0;
    if (!definition.ok || listChars + chars > MAX_MCP_TOOL_LIST_CHARS) {
      const why = definition.ok ? `over the ${MAX_MCP_TOOL_LIST_CHARS} characters of tool definitions one server may have` : definition.error;
      tooLarge.push(`${tool.name} (${why})`);
      continue;
    }
    listChars += chars;
    names.add(name);
    taken.push({ definition: definition.value, remoteName: tool.name });
  }
  if (tooLarge.length > 0) {
    console.warn(`agent: ${label}: tools left out for their size: ${tooLarge.join('; ')}`);
    skipped.push(...tooLarge);
  }
  return { taken, skipped, chars: listChars };
}
