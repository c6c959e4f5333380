// event-fit.ts: run events cut in the JSON form (json-cut.ts), exactly within the room.
import { describe, expect, it } from 'vitest';
import { jsonStringBytes, utf8Bytes } from '../../src/shared/json-cut.js';
import { fitResponse, fitToolCall, shownToolName, TOOL_ARGUMENTS_MAX_BYTES, TOOL_NAME_MAX_BYTES, TOOL_OUTPUT_MAX_BYTES } from './event-fit.js';

const jsonBytes = (v: unknown) => utf8Bytes(JSON.stringify(v));

describe('event-fit', () => {
  it('shownToolName: a real name whole; a long one cut to TOOL_NAME_MAX_BYTES with a note', () => {
    expect(shownToolName('server__tool')).toBe('server__tool');
    const shown = shownToolName('"語'.repeat(10_000));
    expect(jsonStringBytes(shown)).toBeLessThanOrEqual(TOOL_NAME_MAX_BYTES);
    expect(shown).toMatch(/^("語)+"?…\[tool name cut: the first \d+ of 40000 bytes\]$/);
  });

  it('fitToolCall: arguments at most TOOL_ARGUMENTS_MAX_BYTES, within the room; entries in order, the last string cut, marked', () => {
    const small = { ver: 1, name: 't', phase: 'start', arguments: { a: 1 } };
    expect(fitToolCall(small, 65535)).toBe(small);
    const args = { n: 42, text: '"é'.repeat(30_000), after: 'dropped' };
    const fitted = fitToolCall({ ver: 1, name: 't', phase: 'start', arguments: args }, 65535);
    expect(fitted).toMatchObject({ truncated: true, original_bytes: { arguments: jsonBytes(args) } });
    expect(Object.keys(fitted.arguments!)).toEqual(['n', 'text']);
    expect(fitted.arguments!['n']).toBe(42);
    expect(args.text.startsWith(fitted.arguments!['text'] as string)).toBe(true);
    expect(jsonBytes(fitted.arguments)).toBeLessThanOrEqual(TOOL_ARGUMENTS_MAX_BYTES);
    expect(jsonBytes(fitted.arguments)).toBeGreaterThan(TOOL_ARGUMENTS_MAX_BYTES - 8);
    // a room tighter than the cap; an own "__proto__" key (as JSON.parse makes it) stays data
    const parsed = JSON.parse('{"__proto__": "x", "big": "' + 'y'.repeat(20_000) + '"}') as Record<string, unknown>;
    const tight = fitToolCall({ ver: 1, name: 't', phase: 'start', arguments: parsed }, 10_000);
    expect(jsonBytes(tight)).toBeLessThanOrEqual(10_000);
    expect(jsonBytes(tight)).toBeGreaterThan(10_000 - 8);
    expect(Object.keys(tight.arguments!)).toEqual(['__proto__', 'big']);
    // a value that is not a string and does not fit ends the object
    const nested = fitToolCall({ ver: 1, name: 't', phase: 'start', arguments: { first: 'ok', deep: { s: 'z'.repeat(40_000) } } }, 65535);
    expect(nested.arguments).toEqual({ first: 'ok' });
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
