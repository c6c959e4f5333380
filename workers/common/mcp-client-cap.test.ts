// The byte cap on upstream answers (cappedResponse, mcp-client.ts): a JSON body in all, an SSE
// stream per event (a blank line, in any of SSE's line endings, starts the count again).
import { describe, expect, it } from 'vitest';
import { cappedResponse } from './mcp-client.js';

const MiB = 1024 * 1024;
const enc = new TextEncoder();

/** A response whose body is `parts` (each sent as chunks of 64 KiB), with `type`. */
function respond(parts: string[], type: string): Response {
  const stream = new ReadableStream<Uint8Array>({
    start(c) {
      for (const p of parts) {
        const bytes = enc.encode(p);
        for (let i = 0; i < bytes.length; i += 64 * 1024) c.enqueue(bytes.subarray(i, i + 64 * 1024));
      }
      c.close();
    },
  });
  return new Response(stream, { status: 200, headers: { 'content-type': type } });
}

const read = async (r: Response): Promise<number> => (await r.arrayBuffer()).byteLength;

describe('cappedResponse', () => {
  it('reads a JSON body up to the cap and errors past it, telling it was not SSE', async () => {
    const told: boolean[] = [];
    expect(await read(cappedResponse(respond(['x'.repeat(2 * MiB)], 'application/json'), 2 * MiB, (sse) => told.push(sse)))).toBe(2 * MiB);
    await expect(read(cappedResponse(respond(['x'.repeat(2 * MiB + 1)], 'application/json'), 2 * MiB, (sse) => told.push(sse)))).rejects.toThrow(`sent an answer over ${2 * MiB} bytes`);
    expect(told).toEqual([false]);
  });

  it('counts an SSE stream per event: many events pass, one event over the cap errors', async () => {
    const event = (n: number, eol: string): string => `event: message${eol}data: ${'y'.repeat(n)}${eol}${eol}`;
    for (const eol of ['\n', '\r\n', '\r']) {
      const many = cappedResponse(respond([event(MiB, eol), event(MiB, eol), event(MiB, eol)], 'text/event-stream'), 1.5 * MiB, () => undefined);
      expect(await read(many)).toBeGreaterThan(3 * MiB);
    }
    const told: boolean[] = [];
    const one = cappedResponse(respond([event(10, '\n'), event(2 * MiB, '\n')], 'text/event-stream; charset=utf-8'), 1.5 * MiB, (sse) => told.push(sse));
    await expect(read(one)).rejects.toThrow(`sent an answer over ${1.5 * MiB} bytes`);
    expect(told).toEqual([true]);
  });

  it('keeps the status and headers, and a response without a body as it is', async () => {
    const r = cappedResponse(new Response('{}', { status: 202, headers: { 'mcp-session-id': 's1', 'content-type': 'application/json' } }), 10, () => undefined);
    expect([r.status, r.headers.get('mcp-session-id'), await r.text()]).toEqual([202, 's1', '{}']);
    const empty = new Response(null, { status: 204 });
    expect(cappedResponse(empty, 10, () => undefined)).toBe(empty);
  });
});
