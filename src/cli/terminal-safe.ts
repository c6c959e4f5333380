// What the `edgestr` command writes to a terminal. Much of it comes from others: DVMCP
// announcements on the public shard (anyone may publish them), invoices, progress and tool output
// of DVMCP servers, an agent's deltas, status, tool calls and errors, relays' messages. A terminal
// acts on control characters in that text (OSC 0 sets the window title, OSC 52 writes the
// clipboard, CSI 2J clears the screen, a lone CR overwrites the line), so every human-readable
// line goes through terminalSafe (Context.out/err and main's error line) and every JSON line
// through terminalJson. docs/CLI.md "Output from others".

/**
 * C0 controls but \n and \t, a CR not followed by a LF, DEL, the C1 controls (U+0080–U+009F, U+009B
 * is CSI), and the bidirectional embeddings, overrides and isolates (U+202A–U+202E, U+2066–U+2069),
 * which reorder what follows them on the line ("Trojan Source": a price or a name shown backwards).
 */
const CONTROLS = /\r\n|[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]/g;
/** The same, \n, \t and every CR included: for a value shown within one line (a name, a price). */
const CONTROLS_ONE_LINE = /[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]/g;
/** What JSON.stringify leaves unescaped that a terminal (C1, bidirectional controls) or an older JSON-in-JS reader (U+2028/9) acts on. */
const JSON_UNSAFE = /[\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]/g;

/** `\u001b` for ESC: the code point as six visible characters (JavaScript/JSON notation). */
const visible = (c: string): string => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`;

/**
 * `text` with every control character a terminal would act on replaced by its visible escape
 * (`\u001b`, `\u0007`, `\u009b`, a lone CR as `\u000d`, `\u202e`); \n, \t and CRLF stay unless
 * `singleLine`. Idempotent. Other characters (a backslash, the marks U+200E/U+200F, U+2028) are left as they are.
 */
export function terminalSafe(text: string, opts: { singleLine?: boolean } = {}): string {
  if (opts.singleLine) return text.replace(CONTROLS_ONE_LINE, visible);
  return text.replace(CONTROLS, (m) => (m === '\r\n' ? m : visible(m)));
}

/** JSON.stringify(value, null, space) with DEL, C1 and U+2028/2029 escaped as well (the same JSON value). */
export function terminalJson(value: unknown, space?: number): string {
  return JSON.stringify(value, null, space).replace(JSON_UNSAFE, visible);
}
