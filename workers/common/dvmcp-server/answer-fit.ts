// DVMCP answers that fit the form they go in, for every backend (a bridge's upstream MCP servers, a
// hosted agent's `ask`): a result is answered whole when it fits; else, when its size is in the
// text of a tool result, that text is cut and marked; else it is answered -32603. What fits:
//   plain         the content at most PLAIN_ANSWER_MAX_BYTES (120,000) bytes of UTF-8, so the
//                 event stays within the relay's 256 KiB messages (max_message_length) however
//                 much JSON escapes its content again (at most twice: a quote is \" in the
//                 content and \\\" in the event)
//   gift-wrapped  the content, as the JSON string of the rumor, within what the seal and the wrap
//                 carry (wrapContentRoom, src/shared/dvmcp-wrap.ts, exact: about 40,600 bytes), the text
//                 of the result being escaped twice there (json-cut.ts `depth` 2)
// A cut result: its `content` text items (MCP TextContent) in order while they fit, the first that
// does not cut to what does and followed by the note '\n\n[answer cut to fit one DVMCP message: the
// first N of M bytes]' (N, M: UTF-8 bytes of the text items' text shown, and of all of it); the
// text items after it are left out, every other item and member is kept whole, and
// `_meta` gets `truncated: true, original_bytes: M` (besides upstream's own `_meta` members). A
// result whose other parts alone leave no room for the note (a huge structuredContent, image,
// embedded resource, a resources/read blob or text, a list page, a prompt) is answered -32603
// 'result too large: <size> bytes; a plain answer carries at most 120000, and only the text content
// of a tool result can be cut to fit' (a gift-wrapped answer: its room).

import { errorTemplate, responseTemplate, RPC, rpcError, type Requester } from '../../../src/shared/dvmcp.js';
import { wrapContentRoom, type Form } from '../../../src/shared/dvmcp-wrap.js';
import type { EventTemplate } from '../../../src/shared/relay-types.js';
import { cutJsonString, jsonStringBytes, utf8Bytes, type CutNote } from '../json-cut.js';

/** The most UTF-8 bytes of content a plain answer takes. */
export const PLAIN_ANSWER_MAX_BYTES = 120_000;

/** The note that ends a cut answer's text. */
export const answerNote: CutNote = (shown, total) => `\n\n[answer cut to fit one DVMCP message: the first ${shown} of ${total} bytes]`;

interface TextItem {
  type: 'text';
  text: string;
  [member: string]: unknown;
}

const isRecord = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);
const isText = (v: unknown): v is TextItem => isRecord(v) && v.type === 'text' && typeof v.text === 'string';

/**
 * An answer template's size as `form` counts it, the most it may be, and how deep a text of the
 * result lies in what is counted (1: in the content's JSON; 2: in the rumor's JSON too).
 */
export function answerSize(t: EventTemplate, form: Form): { size: number; room: number; depth: 1 | 2 } {
  if (form === 'plain') return { size: utf8Bytes(t.content), room: PLAIN_ANSWER_MAX_BYTES, depth: 1 };
  return { size: jsonStringBytes(t.content), room: wrapContentRoom(t, form), depth: 2 };
}

/** The answer to `to` carrying `result` in `form`: whole, cut and marked, or -32603 (above). */
export function answerTemplate(to: Requester, result: Record<string, unknown>, form: Form): EventTemplate {
  const whole = responseTemplate(to, result);
  const { size, room } = answerSize(whole, form);
  if (size <= room) return whole;
  const cut = cutText(to, result, form);
  if (cut) return cut;
  const answer = form === 'plain' ? 'a plain answer' : 'a gift-wrapped answer';
  return errorTemplate(to, rpcError(RPC.INTERNAL_ERROR, `result too large: ${size} bytes; ${answer} carries at most ${room}, and only the text content of a tool result can be cut to fit`));
}

/** `result` (which does not fit whole) with its text items cut to fit, marked; undefined when its other parts leave no room. */
function cutText(to: Requester, result: Record<string, unknown>, form: Form): EventTemplate | undefined {
  const content = result.content;
  if (!Array.isArray(content) || !content.some(isText)) return undefined;
  const total = content.reduce((n: number, item) => n + (isText(item) ? utf8Bytes(item.text) : 0), 0);
  const _meta = { ...(isRecord(result._meta) ? result._meta : {}), truncated: true, original_bytes: total };
  const frame = responseTemplate(to, { ...result, content: content.map((item) => (isText(item) ? { ...item, text: '' } : item)), _meta });
  const { size, room, depth } = answerSize(frame, form);
  // The note with `total` for both numbers is at least as long as the final one.
  let left = room - size - jsonStringBytes(answerNote(total, total), depth);
  if (left < 0) return undefined;
  let shown = 0;
  let cut = false;
  const kept: unknown[] = [];
  for (const item of content) {
    if (!isText(item)) kept.push(item);
    else if (cut) continue; // text after the cut is left out: the note ends the last text item
    else if (jsonStringBytes(item.text, depth) <= left) {
      left -= jsonStringBytes(item.text, depth);
      shown += utf8Bytes(item.text);
      kept.push(item);
    } else {
      const part = cutJsonString(item.text, left, depth);
      shown += utf8Bytes(part);
      kept.push({ ...item, text: part + answerNote(shown, total) });
      cut = true;
    }
  }
  // (the whole text did not fit, so some item was cut)
  return cut ? { ...frame, content: JSON.stringify({ ...result, content: kept, _meta }) } : undefined;
}
