// How large a DVMCP message is in the form it goes in, and the most that form carries: the one rule
// of what fits one event, for the servers' answers (workers/common/dvmcp-server/answer-fit.ts cuts
// them to it) and the client's requests (dvmcp-client.ts refuses one that does not fit).
//   plain         the content at most PLAIN_MESSAGE_MAX_BYTES (120,000) bytes of UTF-8, so the
//                 event stays within a relay's 256 KiB messages however much JSON escapes its
//                 content again (at most twice: a quote is \" in the content and \\\" in the event)
//   gift-wrapped  the content, as the JSON string of the rumor, within what the seal and the wrap
//                 carry (wrapContentRoom, exact: about 40,600 bytes)

import { wrapContentRoom, type Form } from './dvmcp-wrap.js';
import { jsonStringBytes, utf8Bytes } from './json-cut.js';
import type { EventTemplate } from './relay-types.js';

/** The most UTF-8 bytes of content a plain DVMCP message takes. */
export const PLAIN_MESSAGE_MAX_BYTES = 120_000;

/**
 * A template's size as `form` counts it, the most it may be, and how deep a text of its content
 * lies in what is counted (1: in the content's JSON; 2: in the rumor's JSON too).
 */
export function messageSize(t: EventTemplate, form: Form): { size: number; room: number; depth: 1 | 2 } {
  if (form === 'plain') return { size: utf8Bytes(t.content), room: PLAIN_MESSAGE_MAX_BYTES, depth: 1 };
  return { size: jsonStringBytes(t.content), room: wrapContentRoom(t, form), depth: 2 };
}
