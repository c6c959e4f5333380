// answerTemplate (answer-fit.ts): every DVMCP answer, the bridge's and a hosted agent's, is one
// message in the form of the request: plain within 120,000 bytes of content, gift-wrapped within
// what the seal carries (the text escaped twice); a tool result's text that does not fit is cut,
// with a note and _meta; any other result too large is answered -32603. Errors (errorAnswer) and
// initialize results (initializeTemplate, answered or announced) are cut by the same rule.
import { describe, expect, it } from 'vitest';
import { initializeResponse, parseResponse, responseTemplate, serverAnnouncement, type InitializeInfo } from '../../../src/shared/dvmcp.js';
import { unwrapDvmcp, wrapContentRoom, wrapDvmcp, type Form } from '../../../src/shared/dvmcp-wrap.js';
import { ConversationKeyCache } from '../../../src/shared/nip44.js';
import { nobleVerifier } from '../../../src/shared/verify.js';
import { keys } from '../../../test/support/nostr.js';
import { utf8Bytes } from '../../../src/shared/json-cut.js';
import { answerTemplate, errorAnswer, initializeTemplate } from './answer-fit.js';
import { messageSize, PLAIN_MESSAGE_MAX_BYTES } from '../../../src/shared/dvmcp-size.js';

const cache = new ConversationKeyCache(8);
const server = keys();
const client = keys();
const to = { requestId: 'a'.repeat(64), client: client.pk };
const textResult = (text: string) => ({ content: [{ type: 'text', text }] });
const resultOf = (content: string): Record<string, unknown> => {
  const r = parseResponse(content);
  if (!r.ok) throw new Error(`not a result: ${r.error.message}`);
  return r.value;
};
/** The part shown of a cut text and its note, split at the note. */
function split(text: string): { shown: string; note: string } {
  const at = text.lastIndexOf('\n\n[answer cut');
  expect(at).toBeGreaterThanOrEqual(0);
  return { shown: text.slice(0, at), note: text.slice(at) };
}
const note = (shown: number, total: number) => `\n\n[answer cut to fit one DVMCP message: the first ${shown} of ${total} bytes]`;

describe('answerTemplate', () => {
  it('a result that fits is answered whole', () => {
    for (const form of ['plain', 'wrapped', 'wrapped-dm'] as const) {
      expect(resultOf(answerTemplate(to, textResult('hello'), form).content)).toEqual(textResult('hello'));
      const failed = { content: [{ type: 'text', text: 'CANCELLED: run cancelled' }], isError: true };
      expect(resultOf(answerTemplate(to, failed, form).content)).toEqual(failed);
    }
  });

  for (const form of ['plain', 'wrapped', 'wrapped-dm'] as const satisfies readonly Form[]) {
    // Wrapped, '語' × 30,000 is under the 40,000 characters the dispatcher allowed, but 90,000 bytes:
    // whole, its wrap could not be made and the client got nothing. Plain, '語' × 100,000 is under
    // the 120,000 characters allowed, but its event was over the relay's 262,144-byte messages.
    const texts = { ascii: 'a'.repeat(200_000), cjk: '語'.repeat(form === 'plain' ? 100_000 : 30_000), escapes: '"\\\n\u0001'.repeat(50_000) };
    for (const [name, text] of Object.entries(texts)) {
      it(`${form}, ${name}: cut to one message, the note and _meta say so`, () => {
        const t = answerTemplate(to, { ...textResult(text), isError: true }, form);
        const result = resultOf(t.content);
        expect(result['_meta']).toEqual({ truncated: true, original_bytes: utf8Bytes(text) });
        expect(result['isError']).toBe(true);
        const items = result['content'] as Array<{ type: string; text: string }>;
        expect(items).toHaveLength(1);
        const { shown, note: n } = split(items[0]!.text);
        expect(text.startsWith(shown)).toBe(true);
        expect(n).toBe(note(utf8Bytes(shown), utf8Bytes(text)));
        // within the room, and no more than a character (and its escapes) short of it
        const { size, room } = messageSize(t, form);
        expect(size).toBeLessThanOrEqual(room);
        expect(size).toBeGreaterThan(room - 16);
        if (form === 'plain') {
          expect(room).toBe(PLAIN_MESSAGE_MAX_BYTES);
          // the event's JSON escapes the content at most twice over: within the relay's 256 KiB messages
          expect(utf8Bytes(JSON.stringify(t))).toBeLessThan(2 * PLAIN_MESSAGE_MAX_BYTES + 1024);
          return;
        }
        expect(room).toBe(wrapContentRoom(t, form));
        const opened = unwrapDvmcp(wrapDvmcp(t, server.sk, server.pk, client.pk, cache, form), client.sk, cache, nobleVerifier);
        expect(opened.ok && opened.value.message.content).toBe(t.content);
      });
    }
  }

  it('several items: texts kept in order while they fit, the first that does not cut with the note, later texts left out, other items and members kept', () => {
    const a = 'a'.repeat(60_000);
    const b = '語'.repeat(100_000);
    const image = { type: 'image', data: 'iVBORw0KGgo=', mimeType: 'image/png' };
    const result = { content: [{ type: 'text', text: a }, image, { type: 'text', text: b, annotations: { priority: 1 } }, { type: 'text', text: 'tail' }], _meta: { upstream: 'kept' } };
    const t = answerTemplate(to, result, 'plain');
    const total = utf8Bytes(a) + utf8Bytes(b) + 4;
    const fitted = resultOf(t.content);
    expect(fitted['_meta']).toEqual({ upstream: 'kept', truncated: true, original_bytes: total });
    const items = fitted['content'] as Array<Record<string, unknown>>;
    expect(items).toHaveLength(3);
    expect(items[0]).toEqual({ type: 'text', text: a });
    expect(items[1]).toEqual(image);
    expect(items[2]).toMatchObject({ type: 'text', annotations: { priority: 1 } });
    const { shown, note: n } = split(items[2]!['text'] as string);
    expect(b.startsWith(shown)).toBe(true);
    expect(shown.length).toBeGreaterThan(15_000);
    expect(n).toBe(note(utf8Bytes(a) + utf8Bytes(shown), total));
    expect(utf8Bytes(t.content)).toBeLessThanOrEqual(PLAIN_MESSAGE_MAX_BYTES);
  });

  it('a result whose size is not in a tool result text is answered -32603 result too large', () => {
    const big = 'x'.repeat(200_000);
    const results = {
      structured: { content: [{ type: 'text', text: 'see structuredContent' }], structuredContent: { data: big } },
      image: { content: [{ type: 'text', text: 'an image' }, { type: 'image', data: big, mimeType: 'image/png' }] },
      blob: { contents: [{ uri: 'file:///a.bin', blob: big }] },
      'resource text': { contents: [{ uri: 'file:///a.txt', text: big }] },
      'list page': { tools: [{ name: 'a', description: big }] },
    };
    for (const [name, result] of Object.entries(results)) {
      for (const form of ['plain', 'wrapped'] as const) {
        const whole = responseTemplate(to, result);
        const { size, room } = messageSize(whole, form);
        const answer = form === 'plain' ? 'a plain answer' : 'a gift-wrapped answer';
        expect(JSON.parse(answerTemplate(to, result, form).content), `${name}, ${form}`).toEqual({
          error: { code: -32603, message: `result too large: ${size} bytes; ${answer} carries at most ${room}, and only the text content of a tool result can be cut to fit` },
        });
      }
    }
  });
});

describe('errorAnswer', () => {
  const errorOf = (t: { content: string }): { code: number; message: string; data?: unknown } => (JSON.parse(t.content) as { error: { code: number; message: string; data?: unknown } }).error;

  it('an error that fits is answered whole, with the extra tags', () => {
    const error = { code: -32000, message: 'no', data: { why: 'because' } };
    const t = errorAnswer(to, error, 'wrapped', [['d', 'srv']]);
    expect(errorOf(t)).toEqual(error);
    expect(t.tags).toContainEqual(['d', 'srv']);
  });

  for (const form of ['plain', 'wrapped', 'wrapped-dm'] as const satisfies readonly Form[]) {
    it(`${form}: a message too large is cut with the note, its data left out`, () => {
      const message = '語'.repeat(200_000);
      const t = errorAnswer(to, { code: -32000, message, data: 'left out' }, form);
      const error = errorOf(t);
      expect(Object.keys(error).sort()).toEqual(['code', 'message']);
      const { shown, note: n } = split(error.message);
      expect(message.startsWith(shown)).toBe(true);
      expect(n).toBe(note(utf8Bytes(shown), utf8Bytes(message) + utf8Bytes('left out')));
      const { size, room } = messageSize(t, form);
      expect(size).toBeLessThanOrEqual(room);
      expect(size).toBeGreaterThan(room - 32); // (the room kept for the data left out is not used)
    });
  }

  it('data that is not a string is cut as its JSON text, after the whole message', () => {
    const data = { stack: '"quoted"\n'.repeat(50_000) };
    const t = errorAnswer(to, { code: -32603, message: 'it broke', data }, 'wrapped');
    const error = errorOf(t);
    expect(error.message).toBe('it broke');
    const { shown, note: n } = split(error.data as string);
    expect(JSON.stringify(data).startsWith(shown)).toBe(true);
    expect(n).toBe(note(utf8Bytes('it broke') + utf8Bytes(shown), utf8Bytes('it broke') + utf8Bytes(JSON.stringify(data))));
    expect(messageSize(t, 'wrapped').size).toBeLessThanOrEqual(messageSize(t, 'wrapped').room);
  });
});

describe('initializeTemplate', () => {
  const profile = { id: 'srv', encryption: true };
  const info = (extra: Partial<InitializeInfo>): InitializeInfo => ({ protocolVersion: '2025-06-18', capabilities: { tools: {} }, serverInfo: { name: 'srv', version: '1' }, ...extra });

  it('a result that fits is kept whole (answer and 31316)', () => {
    const answer = initializeResponse(to, profile, info({ instructions: 'be nice' }));
    expect(initializeTemplate(answer, 'wrapped')).toEqual({ ok: true, value: answer });
    const announced = serverAnnouncement(profile, info({}));
    expect(initializeTemplate(announced, 'plain')).toEqual({ ok: true, value: announced });
  });

  for (const form of ['plain', 'wrapped'] as const satisfies readonly Form[]) {
    it(`${form}: instructions too large are cut with the note and _meta, the tags kept`, () => {
      const instructions = 'i"'.repeat(100_000);
      const answer = initializeResponse(to, profile, info({ instructions }));
      const fitted = initializeTemplate(answer, form);
      if (!fitted.ok) throw new Error(fitted.error.message);
      expect(fitted.value.tags).toEqual(answer.tags);
      const result = resultOf(fitted.value.content);
      expect(result).toMatchObject({ protocolVersion: '2025-06-18', capabilities: { tools: {} }, serverInfo: { name: 'srv', version: '1' }, _meta: { truncated: true, original_bytes: 200_000 } });
      const { shown, note: n } = split(result['instructions'] as string);
      expect(instructions.startsWith(shown)).toBe(true);
      expect(n).toBe(note(utf8Bytes(shown), 200_000));
      expect(messageSize(fitted.value, form).size).toBeLessThanOrEqual(messageSize(fitted.value, form).room);
    });
  }

  it('a result too large elsewhere is the error -32603 initialize result too large', () => {
    const announced = serverAnnouncement(profile, info({ serverInfo: { name: 'x'.repeat(130_000), version: '1' }, instructions: 'short' }));
    const size = utf8Bytes(announced.content);
    expect(initializeTemplate(announced, 'plain')).toEqual({
      ok: false,
      error: { code: -32603, message: `initialize result too large: ${size} bytes; a plain answer carries at most 120000, and only the instructions can be cut to fit` },
    });
  });
});
