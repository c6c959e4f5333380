// What fits in one run event. Every NIP-XX payload is one NIP-44 message: at most 65,535 bytes of
// UTF-8 JSON, less inside a gift wrap (the outbox computes a run's room: Outbox.room). A tool
// result may be far larger (web_fetch up to 256 KiB, an MCP tool up to 256K characters) and so may
// what the model writes (the answer, a tool call's arguments, even a tool name): the model always
// reads the whole result, and the client gets, in 25804, at most TOOL_OUTPUT_MAX_BYTES of it and at
// most TOOL_ARGUMENTS_MAX_BYTES of the arguments, marked; a tool name is shown up to
// TOOL_NAME_MAX_BYTES; a response text that does not fit is cut and marked in the 25803 (its
// deltas, each small, carried all of it); the answer of a DVMCP ask is cut as every DVMCP answer
// (workers/common/dvmcp-server/answer-fit.ts).
// Cuts fall on code point boundaries and are measured in the JSON form (escapes included), so the
// payload is exactly within the room (src/shared/json-cut.ts, which DVMCP answers cut with too).

import { cutJsonString, cutWithNote, jsonStringBytes, utf8Bytes, type CutNote } from '../../src/shared/json-cut.js';
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

const jsonBytes = (v: unknown): number => utf8Bytes(JSON.stringify(v));

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
