// Text from others (relays' refusals, servers' and agents' words) made visible before it reaches a
// terminal or a log: every control character a terminal acts on (OSC 0 sets the window title,
// OSC 52 writes the clipboard, CSI 2J clears the screen, a lone CR overwrites the line) or that
// reorders a line is replaced by its escape, `\u` and four hex digits. The `edgestr` command shows
// everything it prints through it (src/cli/terminal-safe.ts), and the library's own warnings quote
// relays through it (dvmcp-client.ts), so that a program using `edgestr/client` or a Worker's log
// gets no raw escape sequence from a relay. docs/CLI.md "Output from others".

/**
 * C0 controls but \n and \t, a CR not followed by a LF, DEL, the C1 controls (U+0080–U+009F, U+009B
 * is CSI), and the bidirectional embeddings, overrides and isolates (U+202A–U+202E, U+2066–U+2069),
 * which reorder what follows them on the line ("Trojan Source": a price or a name shown backwards).
 */
const CONTROLS = /\r\n|[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]/g;
/** The same, \n, \t and every CR included: for a value shown within one line (a name, a price, a warning). */
const CONTROLS_ONE_LINE = /[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]/g;

/** `\u001b` for ESC: the code point as six visible characters (JavaScript/JSON notation). */
export const escapeOf = (c: string): string => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`;

/**
 * `text` with every control character a terminal would act on replaced by its visible escape
 * (`\u001b`, `\u0007`, `\u009b`, a lone CR as `\u000d`, `\u202e`); \n, \t and CRLF stay unless
 * `singleLine`. Idempotent. Other characters (a backslash, the marks U+200E/U+200F, U+2028) are left as they are.
 */
export function visibleControls(text: string, opts: { singleLine?: boolean } = {}): string {
  if (opts.singleLine) return text.replace(CONTROLS_ONE_LINE, escapeOf);
  return text.replace(CONTROLS, (m) => (m === '\r\n' ? m : escapeOf(m)));
}
