// How deep JSON from others may nest. JSON.parse reads any depth, but JSON.stringify (and every
// recursive walk) throws "Maximum call stack size exceeded" a few thousand levels down, and a
// pretty-printed form grows with the square of the depth: 12 KB of `[` and `]` from a stranger (a
// DVMCP announcement, a tool's result, an agent's tool call, a NIP-11 document) would crash or
// freeze whoever shows it. Whatever reads such values keeps or shows them only within
// MAX_JSON_DEPTH levels (dvmcp-discovery.ts: announced items and servers; the `edgestr` command:
// `call`, `relay info`, every --json line; the console: tool cards and tool results), measured by
// nestsWithin without recursion. shownJson is what the console shows of such a value: compact,
// cut (cutChars), or a note when it nests too deep.

/** The deepest nesting of arrays and objects kept or shown of a JSON value from others. */
export const MAX_JSON_DEPTH = 64;

/**
 * Whether `value` nests arrays and objects at most `max` levels deep (a string or number: 0; `[]`
 * and `{"a":1}`: 1; `[[1]]`: 2). Iterative (any depth is measured without a deep stack); stops at
 * the first value past `max`, so a cycle ends too.
 */
export function nestsWithin(value: unknown, max = MAX_JSON_DEPTH): boolean {
  const values: unknown[] = [value];
  const depths: number[] = [0];
  while (values.length > 0) {
    const v = values.pop();
    const depth = depths.pop()!;
    if (typeof v !== 'object' || v === null) continue;
    if (depth >= max) return false;
    for (const child of Array.isArray(v) ? v : Object.values(v)) {
      values.push(child);
      depths.push(depth + 1);
    }
  }
  return true;
}

/** `text` cut to `maxChars` characters (not between the halves of a surrogate pair), then `… (N characters in all)`. */
export function cutChars(text: string, maxChars: number): string {
  if (text.length <= maxChars) return text;
  const end = /[\uD800-\uDBFF]/.test(text.charAt(maxChars - 1)) ? maxChars - 1 : maxChars;
  return `${text.slice(0, end)}… (${text.length} characters in all)`;
}

/** What a reader is shown instead of a value nesting deeper than MAX_JSON_DEPTH. */
export const NOT_SHOWN = `(nests deeper than ${MAX_JSON_DEPTH} levels: not shown)`;

/**
 * `value` as compact JSON for a reader, cut by cutChars; `(nests deeper than 64 levels: not shown)`
 * when it does.
 */
export function shownJson(value: unknown, maxChars: number): string {
  if (!nestsWithin(value)) return NOT_SHOWN;
  return cutChars(JSON.stringify(value) ?? String(value), maxChars);
}
