// Cutting text to what fits in a JSON message, measured in its JSON form: escapes included, also
// those of a JSON string inside a JSON string (`depth`: a DVMCP answer's text is escaped once in
// the answer's content and again in the rumor a gift wrap carries), and never between the halves of
// a code point. The hosted agent's run events (workers/agent/event-fit.ts) and every DVMCP answer
// (dvmcp-server/answer-fit.ts, the bridge's and the agent's) cut with these. `utf8Bytes` is the one
// UTF-8 length every size rule measures with (NIP-44, NIP-59, events, prompts, frames, imports);
// `hasLoneSurrogate` tells text that has no UTF-8 form (storage would not give it back as it was).

const encoder = new TextEncoder();
export const utf8Bytes = (s: string): number => encoder.encode(s).length;

const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;

/**
 * Whether `s` holds half of a surrogate pair alone (JSON's `"\ud800"` parses to one): it has no
 * UTF-8 form, so SQLite gives it back as U+FFFD and two such strings become one.
 */
export const hasLoneSurrogate = (s: string): boolean => LONE_SURROGATE.test(s);

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
