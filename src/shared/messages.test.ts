// Unit tests of the NIP-01 wire rules in messages.ts that need no relay: what is read of a frame too
// long (or over budget) to parse.
import { describe, expect, it } from 'vitest';
import { parseClientMessage, sniffSubId } from './messages.js';

const MAX = 64;

describe('sniffSubId', () => {
  it('reads the verb and subscription id of a REQ or COUNT from its start, whatever follows', () => {
    expect(sniffSubId(`["REQ","feed",{"#t":["${'q'.repeat(300_000)}`, MAX)).toEqual({ verb: 'REQ', subId: 'feed' });
    expect(sniffSubId(' [ "COUNT" ,\n\t"tally" , {}]', MAX)).toEqual({ verb: 'COUNT', subId: 'tally' });
  });

  it('decodes JSON string escapes in the id (an escaped quote does not end it), as JSON.parse does', () => {
    const frame = JSON.stringify(['REQ', 'a "quoted" \\ id\n\u00e9', {}]);
    expect(sniffSubId(frame, MAX)).toEqual({ verb: 'REQ', subId: 'a "quoted" \\ id\n\u00e9' });
    expect(sniffSubId('["REQ","\\u0041\\/b",{}]', MAX)).toEqual({ verb: 'REQ', subId: 'A/b' });
    const parsed = parseClientMessage(frame, { maxSubIdLength: MAX, maxFilters: 10 });
    expect(parsed.ok && parsed.value.type === 'REQ' ? parsed.value.subId : undefined).toBe(sniffSubId(frame, MAX)?.subId);
  });

  it('reads no id that parseClientMessage would refuse: empty, longer than the limit, with a lone surrogate, or not valid JSON', () => {
    expect(sniffSubId('["REQ","",{}]', MAX)).toBeUndefined();
    expect(sniffSubId(JSON.stringify(['REQ', 'x'.repeat(MAX + 1), {}]), MAX)).toBeUndefined();
    expect(sniffSubId(JSON.stringify(['REQ', 'x'.repeat(MAX), {}]), MAX)).toEqual({ verb: 'REQ', subId: 'x'.repeat(MAX) });
    expect(sniffSubId('["REQ","sub\\ud800",{}]', MAX)).toBeUndefined();
    expect(sniffSubId('["REQ","\\ud83d\\ude00",{}]', MAX)).toEqual({ verb: 'REQ', subId: '\u{1f600}' });
    expect(sniffSubId('["REQ","bad \\x escape",{}]', MAX)).toBeUndefined();
    expect(sniffSubId('["REQ","raw\ttab",{}]', MAX)).toBeUndefined();
  });

  it('reads nothing from other verbs, an id that is not a string, or an id not closed in the first 512 characters', () => {
    expect(sniffSubId('["CLOSE","feed"]', MAX)).toBeUndefined();
    expect(sniffSubId('["EVENT",{"id":"feed"}]', MAX)).toBeUndefined();
    expect(sniffSubId('["req","feed",{}]', MAX)).toBeUndefined();
    expect(sniffSubId('["REQ",5,{}]', MAX)).toBeUndefined();
    expect(sniffSubId('{"REQ":"feed"}', MAX)).toBeUndefined();
    expect(sniffSubId(`["REQ","${' '.repeat(600)}",{}]`, 1000)).toBeUndefined();
  });
});
