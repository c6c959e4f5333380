// What fits in one run event. Every NIP-XX payload is one NIP-44 message: at most 65,535 bytes of
// UTF-8 JSON, less inside a gift wrap (the outbox computes a run's room: Outbox.room). A tool
// result may be far larger (web_fetch up to 256 KiB, an MCP tool up to 256K characters) and so may
// the answer: the model always reads the whole result, and the client gets, in 25804, at most
// TOOL_OUTPUT_MAX_BYTES of it, marked; a response text that does not fit is cut and marked in the
// 25803 (its deltas, each small, carried all of it). Cuts fall on code point boundaries and are
// measured in the JSON form (escapes included), so the payload is exactly within the room.

import type { ToolOutput } from './tools/types.js';

/** The JSON of a 25804 result's `output` (stdout and stderr together, as sent) takes at most this many bytes. */
export const TOOL_OUTPUT_MAX_BYTES = 32 * 1024;

const encoder = new TextEncoder();
export const utf8Bytes = (s: string): number => encoder.encode(s).length;
const jsonBytes = (v: unknown): number => utf8Bytes(JSON.stringify(v));
/** Bytes of `s` inside a JSON string literal (quotes excluded). */
const jsonStringBytes = (s: string): number => jsonBytes(s) - 2;

/** Bytes a code point takes inside a JSON string literal (JSON.stringify's escapes). */
function jsonCost(cp: number): number {
  if (cp === 0x22 || cp === 0x5c || cp === 0x08 || cp === 0x09 || cp === 0x0a || cp === 0x0c || cp === 0x0d) return 2;
  if (cp < 0x20) return 6;
  if (cp < 0x80) return 1;
  if (cp < 0x800) return 2;
  if (cp >= 0xd800 && cp <= 0xdfff) return 6; // a lone surrogate is escaped as \uXXXX
  return cp < 0x10000 ? 3 : 4;
}

/** The longest prefix of `s` (whole code points) whose JSON string form takes at most `max` bytes. */
export function cutJsonString(s: string, max: number): string {
  if (jsonStringBytes(s) <= max) return s;
  let used = 0;
  let end = 0;
  for (const ch of s) {
    used += jsonCost(ch.codePointAt(0)!);
    if (used > max) break;
    end += ch.length;
  }
  return s.slice(0, end);
}

/** A 25804 payload: the tool call's fields (output on a result). */
export interface ToolCallPayload {
  output?: ToolOutput;
  [field: string]: unknown;
}

/**
 * A 25804 payload whose output's JSON takes at most TOOL_OUTPUT_MAX_BYTES and which fits `room`
 * bytes: else stdout and stderr are cut (stderr keeps at least a quarter of the space, more when
 * stdout leaves it), marked `truncated: true` with `original_bytes: {stdout, stderr}` (UTF-8).
 */
export function fitToolCall(payload: ToolCallPayload, room: number): ToolCallPayload {
  const output = payload.output;
  if (!output || (jsonBytes(output) <= TOOL_OUTPUT_MAX_BYTES && jsonBytes(payload) <= room)) return payload;
  const marked: ToolCallPayload = {
    ...payload,
    output: { ...output, stdout: '', stderr: '' },
    truncated: true,
    original_bytes: { stdout: utf8Bytes(output.stdout), stderr: utf8Bytes(output.stderr) },
  };
  const space = Math.max(0, Math.min(TOOL_OUTPUT_MAX_BYTES - jsonBytes(marked.output), room - jsonBytes(marked)));
  const stderr = cutJsonString(output.stderr, Math.max(Math.floor(space / 4), space - jsonStringBytes(output.stdout)));
  const stdout = cutJsonString(output.stdout, space - jsonStringBytes(stderr));
  return { ...marked, output: { ...output, stdout, stderr } };
}

const cutNote = (shown: number, total: number): string =>
  `\n\n[response cut to fit one NIP-44 message: the first ${shown} of ${total} bytes; the deltas carried all of it]`;

/**
 * A 25803 payload that fits `room` bytes: when its text does not, the first part of the text that
 * does, followed by a note saying so, and `truncated: true`, `original_bytes` (UTF-8 of the text).
 */
export function fitResponse<P extends { text: string }>(payload: P, room: number): P & { truncated?: true; original_bytes?: number } {
  if (jsonBytes(payload) <= room) return payload;
  const total = utf8Bytes(payload.text);
  // The note with `total` for both numbers is at least as long as the final one.
  const marked = { ...payload, text: cutNote(total, total), truncated: true as const, original_bytes: total };
  const shown = cutJsonString(payload.text, Math.max(0, room - jsonBytes(marked)));
  return { ...marked, text: shown + cutNote(utf8Bytes(shown), total) };
}
