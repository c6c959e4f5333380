// What fits in one run event. Every NIP-XX payload is one NIP-44 message: at most 65,535 bytes of
// UTF-8 JSON, less inside a gift wrap (the outbox computes a run's room: Outbox.room). A tool
// result may be far larger (web_fetch up to 256 KiB, an MCP tool up to 256K characters) and so may
// what the model writes (the answer, a tool call's arguments, even a tool name): the model always
// reads the whole result, and the client gets, in 25804, at most TOOL_OUTPUT_MAX_BYTES of it and at
// most TOOL_ARGUMENTS_MAX_BYTES of the arguments, marked; a tool name is shown up to
// TOOL_NAME_MAX_BYTES; a response text that does not fit is cut and marked in the 25803 (its
// deltas, each small, carried all of it), and so is the answer of a DVMCP ask (dvmcp-server.ts).
// Cuts fall on code point boundaries and are measured in the JSON form (escapes included, also a
// JSON string inside a JSON string: `depth`), so the payload is exactly within the room.

import type { ToolOutput } from './tools/types.js';

/** The JSON of a 25804 result's `output` (stdout and stderr together, as sent) takes at most this many bytes. */
export const TOOL_OUTPUT_MAX_BYTES = 32 * 1024;
/** The JSON of a 25804 start's `arguments` takes at most this many bytes. */
export const TOOL_ARGUMENTS_MAX_BYTES = 32 * 1024;
/**
 * A tool name as run events show it (status info, 25804, error messages, DVMCP progress): at most
 * this many bytes of JSON string. Real names are far shorter (an MCP tool is `<server>__<tool>`);
 * a longer one is the model's invention, and is shown cut.
 */
export const TOOL_NAME_MAX_BYTES = 256;
/** A 25800 status `info` (the names of the tools called) takes at most this many bytes of JSON string. */
export const STATUS_INFO_MAX_BYTES = 1024;

const encoder = new TextEncoder();
export const utf8Bytes = (s: string): number => encoder.encode(s).length;
const jsonBytes = (v: unknown): number => utf8Bytes(JSON.stringify(v));

/** What JSON.stringify writes for code point `cp` inside a string, when it is not the character itself. */
function escapeOf(cp: number): string | undefined {
  switch (cp) {
    case 0x22:
      return '\\"';
    case 0x5c:
      return '\\\\';
    case 0x08:
      return '\\b';
    case 0x09:
      return '\\t';
    case 0x0a:
      return '\\n';
    case 0x0c:
      return '\\f';
    case 0x0d:
      return '\\r';
  }
  // control characters, and a lone surrogate (a pair is one code point above 0xffff)
  if (cp < 0x20 || (cp >= 0xd800 && cp <= 0xdfff)) return `\\u${cp.toString(16).padStart(4, '0')}`;
  return undefined;
}

/**
 * Bytes code point `cp` takes inside a JSON string literal nested `depth` times: 1 in a JSON string,
 * 2 in the JSON text of a string that is itself inside a JSON string (a DVMCP answer in its rumor).
 */
function jsonCost(cp: number, depth: number): number {
  const escape = depth > 0 ? escapeOf(cp) : undefined;
  if (escape === undefined) return cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
  let n = 0;
  for (let i = 0; i < escape.length; i++) n += jsonCost(escape.charCodeAt(i), depth - 1);
  return n;
}

/** Bytes of `s` inside a JSON string literal (quotes excluded), nested `depth` times. */
export function jsonStringBytes(s: string, depth = 1): number {
  let n = 0;
  for (const ch of s) n += jsonCost(ch.codePointAt(0)!, depth);
  return n;
}

/** The longest prefix of `s` (whole code points) whose JSON string form, nested `depth` times, takes at most `max` bytes. */
export function cutJsonString(s: string, max: number, depth = 1): string {
  let used = 0;
  let end = 0;
  for (const ch of s) {
    used += jsonCost(ch.codePointAt(0)!, depth);
    if (used > max) return s.slice(0, end);
    end += ch.length;
  }
  return s;
}

/** The note after a cut text, from the UTF-8 bytes of the part shown and of the whole text. */
export type CutNote = (shown: number, total: number) => string;

/**
 * `text` when its JSON string form (nested `depth` times) takes at most `space` bytes; else its
 * longest prefix that leaves room for the note, followed by the note, with `original_bytes` (UTF-8
 * of the whole text). The one way a text of any run event or answer is cut.
 */
export function cutWithNote(text: string, space: number, note: CutNote, depth = 1): { text: string; original_bytes?: number } {
  if (jsonStringBytes(text, depth) <= space) return { text };
  const total = utf8Bytes(text);
  // The note with `total` for both numbers is at least as long as the final one.
  const shown = cutJsonString(text, Math.max(0, space - jsonStringBytes(note(total, total), depth)), depth);
  return { text: shown + note(utf8Bytes(shown), total), original_bytes: total };
}

/** A tool name as run events show it: whole, or its first part and a note, within TOOL_NAME_MAX_BYTES. */
export const shownToolName = (name: string): string =>
  cutWithNote(name, TOOL_NAME_MAX_BYTES, (shown, total) => `…[tool name cut: the first ${shown} of ${total} bytes]`).text;

/** A 25800 status `info` within STATUS_INFO_MAX_BYTES. */
export const shownStatusInfo = (info: string): string =>
  cutWithNote(info, STATUS_INFO_MAX_BYTES, (shown, total) => `…[cut: the first ${shown} of ${total} bytes]`).text;

/**
 * The entries of `o`, in order, while its JSON takes at most `max` bytes: a string value that does
 * not fit whole is cut (and ends the object); the first other value that does not fit ends it.
 */
function cutEntries(o: Record<string, unknown>, max: number): Record<string, unknown> {
  const kept: Array<[string, unknown]> = [];
  let used = 2; // {}
  for (const [k, v] of Object.entries(o)) {
    const left = max - used - (kept.length > 0 ? 1 : 0) - jsonBytes(k) - 1; // ,"k":
    if (typeof v === 'string') {
      if (left < 2) break;
      const cut = cutJsonString(v, left - 2);
      kept.push([k, cut]);
      if (cut !== v) break;
      used = max - left + 2 + jsonStringBytes(cut);
      continue;
    }
    const bytes = jsonBytes(v);
    if (bytes > left) break;
    kept.push([k, v]);
    used = max - left + bytes;
  }
  // fromEntries: a key such as "__proto__" stays an own entry, as JSON.parse made it
  return Object.fromEntries(kept);
}

/** A 25804 payload: the tool call's fields (arguments on a start, output on a result). */
export interface ToolCallPayload {
  arguments?: Record<string, unknown>;
  output?: ToolOutput;
  [field: string]: unknown;
}

/** `payload` marked `truncated: true`, with `sizes` added to its `original_bytes`. */
function marked(payload: ToolCallPayload, sizes: Record<string, number>): ToolCallPayload {
  const before = typeof payload.original_bytes === 'object' ? payload.original_bytes : {};
  return { ...payload, truncated: true, original_bytes: { ...before, ...sizes } };
}

/**
 * A 25804 payload whose arguments' JSON takes at most TOOL_ARGUMENTS_MAX_BYTES, whose output's at
 * most TOOL_OUTPUT_MAX_BYTES, and which fits `room` bytes: else the arguments are cut (their
 * entries in order while they fit, the last string cut) and stdout and stderr are cut (stderr keeps
 * at least a quarter of the space, more when stdout leaves it), marked `truncated: true` with
 * `original_bytes` (`arguments`: UTF-8 bytes of their JSON; `stdout`, `stderr`: UTF-8 bytes).
 */
export function fitToolCall(payload: ToolCallPayload, room: number): ToolCallPayload {
  let fitted = payload;
  const args = payload.arguments;
  if (args && (jsonBytes(args) > TOOL_ARGUMENTS_MAX_BYTES || jsonBytes(fitted) > room)) {
    const empty = marked({ ...fitted, arguments: {} }, { arguments: jsonBytes(args) });
    fitted = { ...empty, arguments: cutEntries(args, Math.min(TOOL_ARGUMENTS_MAX_BYTES, room - jsonBytes(empty) + 2)) };
  }
  const output = payload.output;
  if (!output || (jsonBytes(output) <= TOOL_OUTPUT_MAX_BYTES && jsonBytes(fitted) <= room)) return fitted;
  const empty = marked({ ...fitted, output: { ...output, stdout: '', stderr: '' } }, { stdout: utf8Bytes(output.stdout), stderr: utf8Bytes(output.stderr) });
  const space = Math.max(0, Math.min(TOOL_OUTPUT_MAX_BYTES - jsonBytes(empty.output), room - jsonBytes(empty)));
  const stderr = cutJsonString(output.stderr, Math.max(Math.floor(space / 4), space - jsonStringBytes(output.stdout)));
  const stdout = cutJsonString(output.stdout, space - jsonStringBytes(stderr));
  return { ...empty, output: { ...output, stdout, stderr } };
}

/**
 * A 25803 payload that fits `room` bytes: when its text does not, the first part of the text that
 * does, followed by a note saying so, and `truncated: true`, `original_bytes` (UTF-8 of the text).
 */
export function fitResponse<P extends { text: string }>(payload: P, room: number): P & { truncated?: true; original_bytes?: number } {
  if (jsonBytes(payload) <= room) return payload;
  const total = utf8Bytes(payload.text);
  const frame = jsonBytes({ ...payload, text: '', truncated: true, original_bytes: total });
  const note: CutNote = (shown, all) => `\n\n[response cut to fit one NIP-44 message: the first ${shown} of ${all} bytes; the deltas carried all of it]`;
  return { ...payload, text: cutWithNote(payload.text, room - frame, note).text, truncated: true, original_bytes: total };
}
