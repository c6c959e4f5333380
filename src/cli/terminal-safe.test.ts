import { describe, expect, it } from 'vitest';
import { MAX_PRINTED_DEPTH, terminalJson, terminalSafe } from './terminal-safe.js';

describe('terminalSafe', () => {
  it.each([
    ['plain text', 'plain text'],
    ['', ''],
    ['two\nlines\tand a tab', 'two\nlines\tand a tab'],
    ['é ü 中文 😀', 'é ü 中文 😀'],
    ['\x1b]0;title\x07', String.raw`\u001b]0;title\u0007`],
    ['\x1b]52;c;Y3VybA==\x07', String.raw`\u001b]52;c;Y3VybA==\u0007`],
    ['\x1b[2J\x1b[H', String.raw`\u001b[2J\u001b[H`],
    ['\u009b2J', String.raw`\u009b2J`],
    ['\u009d0;title\u009c', String.raw`\u009d0;title\u009c`],
    ['\x00\x08\x0b\x0c\x7f\u0080\u009f', String.raw`\u0000\u0008\u000b\u000c\u007f\u0080\u009f`],
    ['over\rwrite', String.raw`over\u000dwrite`],
    ['end\r', String.raw`end\u000d`],
    ['crlf\r\nkept', 'crlf\r\nkept'],
    ['\r\r\n', String.raw`\u000d` + '\r\n'],
    ['\u00a0\u2028\u200f', '\u00a0\u2028\u200f'],
    ['price: \u202e000 1\u202c sats', String.raw`price: \u202e000 1\u202c sats`],
    ['\u202a\u202b\u202d\u2066\u2067\u2068\u2069', String.raw`\u202a\u202b\u202d\u2066\u2067\u2068\u2069`],
    [String.raw`already \u001b`, String.raw`already \u001b`],
  ])('%j → %j', (input, shown) => {
    expect(terminalSafe(input)).toBe(shown);
    expect(terminalSafe(terminalSafe(input))).toBe(shown);
  });

  it.each([
    ['name', 'name'],
    ['two\nlines', String.raw`two\u000alines`],
    ['tab\there', String.raw`tab\u0009here`],
    ['crlf\r\n', String.raw`crlf\u000d\u000a`],
    ['\x1b[31mred', String.raw`\u001b[31mred`],
    ['\u2067tool\u2069', String.raw`\u2067tool\u2069`],
  ])('one line: %j → %j', (input, shown) => {
    expect(terminalSafe(input, { singleLine: true })).toBe(shown);
  });
});

describe('terminalJson', () => {
  it('escapes C0 (JSON.stringify), DEL, C1, U+2028/2029 and the bidirectional controls, and parses back to the same value', () => {
    const value = { text: '\x1b]0;t\x07 \x7f \u009b2J \u2028 \u2029 \u202e \u2066 \r\n é', n: 1 };
    const line = terminalJson(value);
    expect(line).toEqual({ ok: true, value: String.raw`{"text":"\u001b]0;t\u0007 \u007f \u009b2J \u2028 \u2029 \u202e \u2066 \r\n é","n":1}` });
    expect(line.ok && JSON.parse(line.value)).toEqual(value);
    expect(terminalJson({ a: '\u0085' }, 2)).toEqual({ ok: true, value: '{\n  "a": "\\u0085"\n}' });
  });

  it(`refuses a value nested deeper than ${MAX_PRINTED_DEPTH} levels (JSON.stringify would throw at 6,000) instead of throwing`, () => {
    const nested = (n: number): unknown => JSON.parse(`${'['.repeat(n)}${']'.repeat(n)}`);
    expect(terminalJson({ a: nested(MAX_PRINTED_DEPTH - 1) }).ok).toBe(true);
    expect(terminalJson({ a: nested(MAX_PRINTED_DEPTH) })).toEqual({ ok: false, error: "the answer nests deeper than 128 levels, this client's limit" });
    expect(terminalJson(nested(6000), 2)).toEqual({ ok: false, error: "the answer nests deeper than 128 levels, this client's limit" });
  });
});
