// Property: the SSE reader (workers/agent/providers/sse.ts) gives the same records whatever the
// chunk boundaries of the byte stream (split inside CRLF, inside a multi-byte UTF-8 character, one
// byte at a time), and a stream cut anywhere before its terminal record ends with `truncated`.
import { describe, expect, it } from 'vitest';
import fc from 'fast-check';
import { readSse, type SseItem, type SseRecord } from './sse.js';
import { PROP } from '../../../test/support/prop.js';

const utf8 = new TextEncoder();

/** A stream of Anthropic-style events (named, JSON data, multi-byte text), comments and mixed line ends. */
function streamText(texts: string[], eol: string[]): { text: string; records: SseRecord[] } {
  const records: SseRecord[] = [];
  let text = '\uFEFF: a comment first\n';
  texts.forEach((t, i) => {
    const end = eol[i % eol.length]!;
    const data = JSON.stringify({ type: 'content_block_delta', delta: { text: t } });
    records.push({ event: 'content_block_delta', data });
    text += `event: content_block_delta${end}data: ${data}${end}:keep-alive${end}${end}`;
    if (i % 3 === 2) {
      // A two-line data field (joined with "\n").
      records.push({ data: `line one\nline two ${i}` });
      text += `data: line one${end}data:line two ${i}${end}${end}`;
    }
  });
  records.push({ event: 'message_stop', data: '{"type":"message_stop"}' });
  text += 'event: message_stop\r\ndata: {"type":"message_stop"}\r\n\r\n';
  return { text, records };
}

const isTerminal = (r: SseRecord) => r.event === 'message_stop';

function body(bytes: Uint8Array, cuts: number[]): ReadableStream<Uint8Array> {
  const points = [...new Set(cuts.map((c) => c % (bytes.length + 1)))].sort((a, b) => a - b);
  const chunks: Uint8Array[] = [];
  let at = 0;
  for (const p of [...points, bytes.length]) {
    if (p > at) chunks.push(bytes.slice(at, p));
    at = Math.max(at, p);
  }
  return new ReadableStream({
    pull(controller) {
      const c = chunks.shift();
      if (c) controller.enqueue(c);
      else controller.close();
    },
  });
}

async function collect(stream: ReadableStream<Uint8Array>): Promise<SseItem[]> {
  const out: SseItem[] = [];
  for await (const item of readSse(stream, { isTerminal })) out.push(item);
  return out;
}

const texts = fc.array(fc.string({ maxLength: 30, unit: 'grapheme' }), { minLength: 1, maxLength: 8 });
const eols = fc.array(fc.constantFrom('\n', '\r\n', '\r'), { minLength: 1, maxLength: 3 });

describe('SSE reader (property)', () => {
  it('random chunk boundaries give the same records as one chunk', async () => {
    await fc.assert(
      fc.asyncProperty(texts, eols, fc.array(fc.nat(), { maxLength: 40 }), async (t, e, cuts) => {
        const { text, records } = streamText(t, e);
        const bytes = utf8.encode(text);
        const expected = records.map((record) => ({ type: 'record', record }));
        expect(await collect(body(bytes, []))).toEqual(expected);
        expect(await collect(body(bytes, cuts))).toEqual(expected);
      }),
      PROP,
    );
  });

  it('one byte per chunk gives the same records', async () => {
    const { text, records } = streamText(['héllo', '日本語', '🙂 emoji', ''], ['\r\n', '\r', '\n']);
    const bytes = utf8.encode(text);
    const all = Array.from({ length: bytes.length }, (_, i) => i);
    expect(await collect(body(bytes, all))).toEqual(records.map((record) => ({ type: 'record', record })));
  });

  it('a stream cut anywhere before its terminal record ends with truncated, after a prefix of the records', async () => {
    await fc.assert(
      fc.asyncProperty(texts, eols, fc.nat(), fc.array(fc.nat(), { maxLength: 10 }), async (t, e, cutAt, cuts) => {
        const { text, records } = streamText(t, e);
        const bytes = utf8.encode(text);
        const terminalStart = utf8.encode(text.slice(0, text.lastIndexOf('event: message_stop'))).length;
        // Cut strictly before the terminal record's last byte.
        const cut = cutAt % (terminalStart + 1);
        const items = await collect(body(bytes.slice(0, cut), cuts));
        expect(items.at(-1)).toEqual({ type: 'truncated' });
        const got = items.slice(0, -1).map((i) => (i.type === 'record' ? i.record : undefined));
        // Each record received is the one at its position (a record cut mid-data is never dispatched,
        // except that the last one may have lost trailing data lines of a multi-line field).
        got.forEach((r, i) => {
          const want = records[i]!;
          if (i < got.length - 1) expect(r).toEqual(want);
          else expect(want.data.startsWith(r!.data) && r!.event === want.event).toBe(true);
        });
        expect(got.some((r) => r && isTerminal(r))).toBe(false);
      }),
      PROP,
    );
  });
});
