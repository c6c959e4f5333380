// event-fit.ts: cuts measured in the JSON form (escapes, multi-byte and surrogate pairs included),
// never between the halves of a code point, exactly within the room.
import { describe, expect, it } from 'vitest';
import { cutJsonString, fitResponse, fitToolCall, TOOL_OUTPUT_MAX_BYTES, utf8Bytes } from './event-fit.js';

const jsonBytes = (v: unknown) => utf8Bytes(JSON.stringify(v));

describe('event-fit', () => {
  it('cutJsonString keeps whole code points within the JSON byte budget', () => {
    expect(cutJsonString('abc', 3)).toBe('abc');
    expect(cutJsonString('a"b', 2)).toBe('a'); // " takes 2 bytes escaped
    expect(cutJsonString('\u0001x', 5)).toBe(''); // \u0001 takes 6
    expect(cutJsonString('é😀x', 5)).toBe('é'); // 2 + 4 bytes: the pair is not split
    expect(cutJsonString('é😀x', 6)).toBe('é😀');
  });

  it('fitToolCall: output at most TOOL_OUTPUT_MAX_BYTES, within the room, marked with the original sizes', () => {
    const output = { stdout: '"'.repeat(50_000), stderr: 'é'.repeat(20_000), exit_code: 0 };
    const small = { ver: 1, name: 't', phase: 'result', output: { stdout: 'ok', stderr: '', exit_code: 0 } };
    expect(fitToolCall(small, 65535)).toBe(small);
    const fitted = fitToolCall({ ver: 1, name: 't', phase: 'result', output }, 65535);
    expect(fitted).toMatchObject({ truncated: true, original_bytes: { stdout: 50_000, stderr: 40_000 } });
    expect(jsonBytes(fitted.output)).toBeLessThanOrEqual(TOOL_OUTPUT_MAX_BYTES);
    expect(jsonBytes(fitted.output)).toBeGreaterThan(TOOL_OUTPUT_MAX_BYTES - 8);
    expect(fitted.output!.stderr.length).toBeGreaterThanOrEqual(Math.floor(TOOL_OUTPUT_MAX_BYTES / 4 / 2) - 20);
    const tight = fitToolCall({ ver: 1, name: 't', phase: 'result', output }, 10_000);
    expect(jsonBytes(tight)).toBeLessThanOrEqual(10_000);
  });

  it('fitResponse cuts the text, adds a note and the original size, and fits the room exactly', () => {
    const payload = { ver: 1, text: 'ü'.repeat(40_000), usage: { input_tokens: 1, output_tokens: 2 } };
    expect(fitResponse(payload, 100_000)).toBe(payload);
    const fitted = fitResponse(payload, 65535);
    expect(jsonBytes(fitted)).toBeLessThanOrEqual(65535);
    expect(jsonBytes(fitted)).toBeGreaterThan(65535 - 4);
    expect(fitted).toMatchObject({ truncated: true, original_bytes: 80_000, usage: payload.usage });
    expect(fitted.text).toMatch(/^ü+\n\n\[response cut to fit one NIP-44 message: the first \d+ of 80000 bytes; the deltas carried all of it\]$/);
  });
});
