// json-cut.ts: cuts measured in the JSON form (escapes, multi-byte and surrogate pairs included,
// also a JSON string inside a JSON string), never between the halves of a code point.
import { describe, expect, it } from 'vitest';
import { cutJsonString, cutWithNote, hasLoneSurrogate, jsonStringBytes, utf8Bytes } from './json-cut.js';

describe('json-cut', () => {
  it('cutJsonString keeps whole code points within the JSON byte budget', () => {
    expect(cutJsonString('abc', 3)).toBe('abc');
    expect(cutJsonString('a"b', 2)).toBe('a'); // " takes 2 bytes escaped
    expect(cutJsonString('\u0001x', 5)).toBe(''); // \u0001 takes 6
    expect(cutJsonString('é😀x', 5)).toBe('é'); // 2 + 4 bytes: the pair is not split
    expect(cutJsonString('é😀x', 6)).toBe('é😀');
  });

  it('depth 2 counts a JSON string inside a JSON string: the bytes of JSON.stringify(JSON.stringify(s))', () => {
    const nested = (s: string) => utf8Bytes(JSON.stringify(JSON.stringify(s))) - 2 - 2 * 2; // the inner quotes are escaped too
    for (const s of ['abc', 'a"b\\c', 'line\nnext\ttab', '\u0001\u001f', 'é語😀', '\ud800 lone']) {
      expect(jsonStringBytes(s, 2)).toBe(nested(s));
      expect(jsonStringBytes(s)).toBe(utf8Bytes(JSON.stringify(s)) - 2);
    }
    expect(cutJsonString('a"b', 4, 2)).toBe('a'); // " takes 4 bytes twice escaped
    expect(cutJsonString('a"b', 5, 2)).toBe('a"');
    expect(cutJsonString('\u0001x', 6, 2)).toBe(''); // \\u0001 takes 7
  });

  it('cutWithNote: the whole text when it fits; else the longest prefix and the note within the space, with the original size', () => {
    const note = (shown: number, total: number) => ` [${shown}/${total}]`;
    expect(cutWithNote('short', 5, note)).toEqual({ text: 'short' });
    const text = 'ab"cd'.repeat(1000);
    for (const depth of [1, 2]) {
      const cut = cutWithNote(text, 500, note, depth);
      expect(cut.original_bytes).toBe(5000);
      expect(jsonStringBytes(cut.text, depth)).toBeLessThanOrEqual(500);
      expect(jsonStringBytes(cut.text, depth)).toBeGreaterThan(500 - 6);
      const shown = cut.text.slice(0, cut.text.lastIndexOf(' ['));
      expect(text.startsWith(shown)).toBe(true);
      expect(cut.text.endsWith(` [${utf8Bytes(shown)}/5000]`)).toBe(true);
    }
  });
});

describe('hasLoneSurrogate', () => {
  it('flags half a pair alone (high or low, at either end), not a pair nor plain text', () => {
    for (const s of ['\ud800', 'a\ud800b', '\udc00', 'x\udc00', '\udc00\ud800', '😀\ud83d']) expect(hasLoneSurrogate(s), JSON.stringify(s)).toBe(true);
    for (const s of ['', 'abc', '😀', 'é😀x', '\ud83d\ude00\ud83d\ude00']) expect(hasLoneSurrogate(s), JSON.stringify(s)).toBe(false);
  });
});
