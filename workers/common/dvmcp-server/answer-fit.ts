// DVMCP messages that fit the form they go in, for every backend (a bridge's upstream MCP servers, a
// hosted agent's `ask`). What fits is src/shared/dvmcp-size.ts's rule (a plain content at most
// 120,000 bytes; a gift-wrapped one within what the seal and the wrap carry, the text of the result
// being escaped twice there, json-cut.ts `depth` 2).
// One way of cutting (`cutInOrder`): the texts that make a message large, in order, each kept while
// it fits, the first that does not cut to what does and followed by the note '\n\n[answer cut to
// fit one DVMCP message: the first N of M bytes]' (N, M: UTF-8 bytes of the texts shown, and of all
// of them), the texts after it left out; everything else is kept whole. Which texts:
//   a result      (answerTemplate) its `content` text items (MCP TextContent), and `_meta` gets
//                 `truncated: true, original_bytes: M` (besides upstream's own `_meta` members). A
//                 result whose other parts alone leave no room for the note (a huge
//                 structuredContent, image, embedded resource, a resources/read blob or text, a
//                 list page, a prompt) is answered -32603 'result too large: <size> bytes; a plain
//                 answer carries at most 120000, and only the text content of a tool result can be
//                 cut to fit' (a gift-wrapped answer: its room).
//   an initialize result (initializeTemplate: answered, or announced in a 31316) its
//                 `instructions`, `_meta` as for a result; one too large otherwise (capabilities,
//                 serverInfo) is -32603 'initialize result too large: <size> bytes; … and only the
//                 instructions can be cut to fit'.
//   an error      (errorAnswer) its message, then its data (a string as it is, anything else as its
//                 JSON text); data after a cut message is left out.
// A notification is not cut: one that does not fit is dropped (NotificationBudget.admit).

import { err, ok, type Result } from '../../../src/shared/errors.js';
import { errorTemplate, responseTemplate, RPC, rpcError, type Requester, type RpcError } from '../../../src/shared/dvmcp.js';
import type { Form } from '../../../src/shared/dvmcp-wrap.js';
import { messageSize } from '../../../src/shared/dvmcp-size.js';
import type { EventTemplate } from '../../../src/shared/relay-types.js';
import { cutJsonString, jsonStringBytes, utf8Bytes, type CutNote } from '../../../src/shared/json-cut.js';

/** The note that ends a cut answer's text. */
export const answerNote: CutNote = (shown, total) => `\n\n[answer cut to fit one DVMCP message: the first ${shown} of ${total} bytes]`;

interface TextItem {
  type: 'text';
  text: string;
  [member: string]: unknown;
}

const isRecord = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);
const isText = (v: unknown): v is TextItem => isRecord(v) && v.type === 'text' && typeof v.text === 'string';
/** What a form carries, as the too-large errors name it. */
const carrier = (form: Form): string => (form === 'plain' ? 'a plain answer' : 'a gift-wrapped answer');
/** `result`'s `_meta` saying that it was cut from `total` bytes (upstream's own members kept). */
const cutMeta = (result: Record<string, unknown>, total: number): Record<string, unknown> => ({ ...(isRecord(result._meta) ? result._meta : {}), truncated: true, original_bytes: total });

/**
 * `t` with the content `body(texts)`, `texts` cut to fit `form` in order (see the header): each kept
 * whole while it fits, the first that does not cut and followed by the note, the later ones left
 * out (undefined). `total`: the UTF-8 bytes of all of them. Undefined when the rest of the body
 * leaves no room for the note, or when nothing needed cutting.
 */
function cutInOrder(
  t: EventTemplate,
  texts: readonly string[],
  form: Form,
  body: (texts: ReadonlyArray<string | undefined>, total: number) => Record<string, unknown>,
): EventTemplate | undefined {
  const total = texts.reduce((n, text) => n + utf8Bytes(text), 0);
  const { size, room, depth } = messageSize({ ...t, content: JSON.stringify(body(texts.map(() => ''), total)) }, form);
  // The note with `total` for both numbers is at least as long as the final one.
  let left = room - size - jsonStringBytes(answerNote(total, total), depth);
  if (left < 0) return undefined;
  let shown = 0;
  let cut = false;
  const kept: Array<string | undefined> = [];
  for (const text of texts) {
    if (cut) kept.push(undefined); // the note ends the last text kept
    else if (jsonStringBytes(text, depth) <= left) {
      left -= jsonStringBytes(text, depth);
      shown += utf8Bytes(text);
      kept.push(text);
    } else {
      const part = cutJsonString(text, left, depth);
      shown += utf8Bytes(part);
      kept.push(part + answerNote(shown, total));
      cut = true;
    }
  }
  return cut ? { ...t, content: JSON.stringify(body(kept, total)) } : undefined;
}

/** The answer to `to` carrying `result` in `form`: whole, its text cut and marked, or -32603 (see the header). */
export function answerTemplate(to: Requester, result: Record<string, unknown>, form: Form): EventTemplate {
  const whole = responseTemplate(to, result);
  const { size, room } = messageSize(whole, form);
  if (size <= room) return whole;
  const content = result.content;
  const cut = Array.isArray(content)
    ? cutInOrder(whole, content.filter(isText).map((item) => item.text), form, (texts, total) => {
        let i = 0;
        const items = content.flatMap((item: unknown) => {
          if (!isText(item)) return [item];
          const text = texts[i++];
          return text === undefined ? [] : [{ ...item, text }];
        });
        return { ...result, content: items, _meta: cutMeta(result, total) };
      })
    : undefined;
  return cut ?? errorTemplate(to, rpcError(RPC.INTERNAL_ERROR, `result too large: ${size} bytes; ${carrier(form)} carries at most ${room}, and only the text content of a tool result can be cut to fit`));
}

/**
 * `t`, whose content is an initialize result (the answer to a DVMCP initialize, or a 31316), fitted
 * to `form`: whole, its instructions cut and marked, or the error when the rest is too large.
 */
export function initializeTemplate(t: EventTemplate, form: Form): Result<EventTemplate, RpcError> {
  const { size, room } = messageSize(t, form);
  if (size <= room) return ok(t);
  const result = JSON.parse(t.content) as Record<string, unknown>;
  const { instructions } = result;
  const cut = typeof instructions === 'string' ? cutInOrder(t, [instructions], form, ([text], total) => ({ ...result, instructions: text, _meta: cutMeta(result, total) })) : undefined;
  return cut ? ok(cut) : err(rpcError(RPC.INTERNAL_ERROR, `initialize result too large: ${size} bytes; ${carrier(form)} carries at most ${room}, and only the instructions can be cut to fit`));
}

/**
 * The answer to `to` carrying protocol error `error` in `form` (with `extraTags`, e.g. the `d` of
 * one server answering an initialize): whole, or its message and data cut and marked.
 */
export function errorAnswer(to: Requester, error: RpcError, form: Form, extraTags: string[][] = []): EventTemplate {
  const whole = responseTemplate(to, { error }, extraTags);
  const { size, room } = messageSize(whole, form);
  if (size <= room) return whole;
  const texts = error.data === undefined ? [error.message] : [error.message, typeof error.data === 'string' ? error.data : JSON.stringify(error.data)];
  const body = ([message, data]: ReadonlyArray<string | undefined>): Record<string, unknown> => ({ error: { code: error.code, message: message ?? '', ...(data === undefined ? {} : { data }) } });
  // (the rest of an error, its code, always leaves room for the note)
  return cutInOrder(whole, texts, form, body) ?? whole;
}
