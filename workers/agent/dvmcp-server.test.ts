// answerFor (dvmcp-server.ts): an ask's answer, whatever its text, is one DVMCP message in the form
// of the request: within the dispatcher's maxAnswerChars and, gift-wrapped, within what the seal
// carries (the text escaped twice); what does not fit is cut, with a note and _meta.
import { describe, expect, it } from 'vitest';
import { responseTemplate } from '../../src/shared/dvmcp.js';
import { unwrapDvmcp, wrapDvmcp, type Form } from '../../src/shared/dvmcp-wrap.js';
import { ConversationKeyCache } from '../../src/shared/nip44.js';
import { nobleVerifier } from '../../src/shared/verify.js';
import { keys } from '../../test/support/nostr.js';
import { maxAnswerChars } from '../common/dvmcp-server/dispatcher.js';
import { answerFor } from './dvmcp-server.js';
import { utf8Bytes } from './event-fit.js';
import type { Terminal } from './runtime.js';

const cache = new ConversationKeyCache(8);
const agent = keys();
const client = keys();
const to = { requestId: 'a'.repeat(64), client: client.pk };
const response = (text: string): Terminal => ({ type: 'response', text, usage: { input_tokens: 1, output_tokens: 1 }, model: 'm' });

describe('answerFor', () => {
  it('an answer that fits is the plain MCP result', () => {
    expect(answerFor(response('hello'), to, 'wrapped')).toEqual({ content: [{ type: 'text', text: 'hello' }] });
    expect(answerFor({ type: 'error', code: 'CANCELLED', message: 'run cancelled' }, to, 'plain')).toEqual({
      content: [{ type: 'text', text: 'CANCELLED: run cancelled' }],
      isError: true,
    });
  });

  for (const form of ['plain', 'wrapped', 'wrapped-dm'] as const satisfies readonly Form[]) {
    // Wrapped, '語' × 30,000 is under the 40,000 characters the dispatcher allows, but 90,000 bytes:
    // whole, its wrap could not be made and the client got nothing. Plain, 150,000 bytes are over
    // the 120,000 a plain answer takes (its event then stays under the relay's 256 KiB message limit).
    const texts = { ascii: 'a'.repeat(200_000), cjk: '語'.repeat(form === 'plain' ? 50_000 : 30_000), escapes: '"\\\n\u0001'.repeat(50_000) };
    for (const [name, text] of Object.entries(texts)) {
      it(`${form}, ${name}: cut to one message, the note and _meta say so`, () => {
        const result = answerFor(response(text), to, form);
        expect(result['_meta']).toEqual({ truncated: true, original_bytes: utf8Bytes(text) });
        const shownText = (result['content'] as Array<{ text: string }>)[0]!.text;
        const at = shownText.lastIndexOf('\n\n[answer cut');
        const shown = shownText.slice(0, at);
        expect(text.startsWith(shown)).toBe(true);
        expect(shownText.slice(at)).toBe(`\n\n[answer cut to fit one DVMCP message: the first ${utf8Bytes(shown)} of ${utf8Bytes(text)} bytes]`);
        const t = responseTemplate(to, result);
        expect(t.content.length).toBeLessThanOrEqual(maxAnswerChars(form));
        if (form === 'plain') return;
        const opened = unwrapDvmcp(wrapDvmcp(t, agent.sk, agent.pk, client.pk, cache, form), client.sk, cache, nobleVerifier);
        expect(opened.ok && opened.value.message.content).toBe(t.content);
      });
    }
  }
});
