// What the `edgestr` command writes to a terminal. Much of it comes from others: DVMCP
// announcements on the public shard (anyone may publish them), invoices, progress and tool output
// of DVMCP servers, an agent's deltas, status, tool calls and errors, relays' messages. A terminal
// acts on control characters in that text, so every human-readable line goes through terminalSafe
// (Context.out/err and main's error line; the rule is src/shared/visible-controls.ts) and every
// JSON line through terminalJson, which also refuses a value nested deeper than MAX_PRINTED_DEPTH
// (JSON.stringify throws a few thousand levels down). docs/CLI.md "Output from others".
import { err, ok, type Result } from '../shared/errors.js';
import { MAX_JSON_DEPTH, nestsWithin } from '../shared/json-depth.js';
import { escapeOf, visibleControls } from '../shared/visible-controls.js';

/** What JSON.stringify leaves unescaped that a terminal (C1, bidirectional controls) or an older JSON-in-JS reader (U+2028/9) acts on. */
const JSON_UNSAFE = /[\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]/g;

/**
 * The deepest JSON the command prints: values of others are kept within MAX_JSON_DEPTH where they
 * are read (a DVMCP catalog, a tool's result, a NIP-11 document), and a line puts them inside a
 * few levels of its own (a server's tools, an event's payload).
 */
export const MAX_PRINTED_DEPTH = 2 * MAX_JSON_DEPTH;

/**
 * `text` with every control character a terminal would act on shown as its escape (`\u001b`);
 * \n, \t and CRLF stay unless `singleLine` (src/shared/visible-controls.ts).
 */
export const terminalSafe = visibleControls;

/**
 * JSON.stringify(value, null, space) with DEL, C1 and U+2028/2029 escaped as well (the same JSON
 * value); an error when `value` nests deeper than MAX_PRINTED_DEPTH.
 */
export function terminalJson(value: unknown, space?: number): Result<string, string> {
  if (!nestsWithin(value, MAX_PRINTED_DEPTH)) return err(`the answer nests deeper than ${MAX_PRINTED_DEPTH} levels, this client's limit`);
  return ok(JSON.stringify(value, null, space).replace(JSON_UNSAFE, escapeOf));
}
