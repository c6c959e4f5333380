// The oversized model outputs of the fake provider's scenarios long-text, huge-args, huge-name,
// args-hang and many-tools (server.ts), shared with the tests that check what the agent makes of them. Pure (no Node APIs):
// imported inside workerd too.

/** What costs most in JSON and UTF-8: quotes, a backslash, a newline, 2-, 3- and 4-byte characters. */
const PATTERN = 'plain "quoted" back\\slash\nnew line é ü 語 日本 😀 ';

/** long-text's answer: over 150,000 UTF-16 units, far more than one NIP-44 message (65,535 bytes). */
export const LONG_TEXT = PATTERN.repeat(Math.ceil(150_000 / PATTERN.length));
/** huge-args' argument `city`: over 200 KiB. */
export const HUGE_ARGUMENT = PATTERN.repeat(Math.ceil((200 * 1024) / PATTERN.length));
/** huge-args' arguments, as the model streams their JSON text. */
export const HUGE_ARGUMENTS = JSON.stringify({ city: HUGE_ARGUMENT });
/** huge-name's tool name: over 200 KiB (no tool of any agent). */
export const HUGE_TOOL_NAME = `tool ${PATTERN.repeat(Math.ceil((200 * 1024) / PATTERN.length))}`;

/**
 * args-hang's tool call arguments: exactly 40,000 characters (ASCII) of a JSON object never closed,
 * streamed without a finish_reason before the stream hangs (OpenAI buffers them until it ends).
 */
export const HANGING_ARGUMENTS = `{"text": "${'x'.repeat(40_000 - 10)}`;

/** many-tools: how many tool calls one response asks for. */
export const MANY_TOOL_CALLS = 40;
/** many-tools: the arguments of call `i` (from 0), the calculator's, as the model streams them. */
export const manyToolArguments = (i: number): string => JSON.stringify({ expr: `${i} + 1` });

/** `s` in pieces of about `n` UTF-16 units, never between the two halves of a surrogate pair. */
export function pieces(s: string, n: number): string[] {
  const out: string[] = [];
  for (let i = 0; i < s.length; ) {
    let end = Math.min(s.length, i + n);
    const last = s.charCodeAt(end - 1);
    if (end < s.length && last >= 0xd800 && last <= 0xdbff) end--;
    out.push(s.slice(i, end));
    i = end;
  }
  return out;
}
