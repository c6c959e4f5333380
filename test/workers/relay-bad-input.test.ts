// Bad input: every malformed frame gets its standard answer, the connection keeps working, and no
// stored event is lost.
import { describe, expect, it } from 'vitest';
import { DEFAULT_LIMITS } from '../../workers/relay-do/limits.js';
import { connect, freshOwner, now, randomHex, sign, type Keys } from './helpers.js';

/** The answer's verb and message; `subId`: the subscription id a CLOSED must name. */
type Expect = { kind: 'NOTICE' | 'OK' | 'CLOSED'; message: string; subId?: string };

function cases(k: Keys): Array<[string, string, Expect]> {
  const good = sign(k);
  const tamper = (patch: Record<string, unknown>) => JSON.stringify(['EVENT', { ...good, ...patch }]);
  const long = 'x'.repeat(65);
  return [
    ['malformed JSON', '["EVENT", {', { kind: 'NOTICE', message: 'invalid: message is not valid JSON' }],
    ['non-array frame', '{"EVENT": 1}', { kind: 'NOTICE', message: 'invalid: message must be a non-empty JSON array' }],
    ['empty array', '[]', { kind: 'NOTICE', message: 'invalid: message must be a non-empty JSON array' }],
    ['unknown verb', '["PUBLISH", {}]', { kind: 'NOTICE', message: 'invalid: unknown message type: PUBLISH' }],
    ['non-string verb', '[42]', { kind: 'NOTICE', message: 'invalid: message type must be a string' }],
    ['EVENT without event', '["EVENT"]', { kind: 'NOTICE', message: 'invalid: EVENT takes exactly one event' }],
    ['bad id', tamper({ content: 'changed' }), { kind: 'OK', message: 'invalid: event id does not match the event hash' }],
    ['bad signature', tamper({ sig: good.sig.slice(0, -2) + (good.sig.endsWith('00') ? '11' : '00') }), { kind: 'OK', message: 'invalid: signature verification failed' }],
    ['id not hex', tamper({ id: 'z'.repeat(64) }), { kind: 'OK', message: 'invalid: id must be 64 lowercase hex characters' }],
    ['kind as string', tamper({ kind: '1' }), { kind: 'OK', message: 'invalid: kind must be a number' }],
    ['kind over 65535', tamper({ kind: 65536 }), { kind: 'OK', message: 'invalid: kind must be at most 65535' }],
    ['negative kind', tamper({ kind: -1 }), { kind: 'OK', message: 'invalid: kind must not be negative' }],
    ['float created_at', tamper({ created_at: 1.5 }), { kind: 'OK', message: 'invalid: created_at must be an integer' }],
    ['tags not array', tamper({ tags: 'x' }), { kind: 'OK', message: 'invalid: tags must be an array' }],
    ['tag with number', tamper({ tags: [['t', 1]] }), { kind: 'OK', message: 'invalid: tags.0.1: tag elements must be strings' }],
    ['empty tag', tamper({ tags: [[]] }), { kind: 'OK', message: 'invalid: tags.0: a tag must not be empty' }],
    ['content not string', tamper({ content: 5 }), { kind: 'OK', message: 'invalid: content must be a string' }],
    ['extra field', tamper({ extra: 1 }), { kind: 'OK', message: 'invalid: unknown event field: extra' }],
    ['REQ without filters', '["REQ","s1"]', { kind: 'CLOSED', message: 'invalid: REQ needs at least one filter' }],
    ['REQ sub id over 64', JSON.stringify(['REQ', long, {}]), { kind: 'CLOSED', message: 'invalid: subscription id is longer than 64 characters' }],
    ['REQ empty sub id', '["REQ","",{}]', { kind: 'NOTICE', message: 'invalid: subscription id must be a non-empty string' }],
    // Stored for hibernation, "sub\ud800" and "sub\ud801" would both come back as "sub\ufffd" (one subscription).
    ['REQ sub id with a lone surrogate', '["REQ","sub\\ud800",{}]', { kind: 'CLOSED', message: 'invalid: subscription id must be valid Unicode (it has a lone surrogate)' }],
    ['COUNT sub id with a lone low surrogate', '["COUNT","\\udc00x",{}]', { kind: 'CLOSED', message: 'invalid: subscription id must be valid Unicode (it has a lone surrogate)' }],
    ['REQ filter not object', '["REQ","s2",5]', { kind: 'CLOSED', message: 'invalid: a filter must be an object' }],
    ['REQ author not hex', JSON.stringify(['REQ', 's3', { authors: ['abc'] }]), { kind: 'CLOSED', message: 'invalid: authors.0: ids and authors must be 64 lowercase hex characters' }],
    ['REQ id uppercase', JSON.stringify(['REQ', 's4', { ids: [randomHex().toUpperCase()] }]), { kind: 'CLOSED', message: 'invalid: ids.0: ids and authors must be 64 lowercase hex characters' }],
    ['REQ kind over 65535', JSON.stringify(['REQ', 's5', { kinds: [70000] }]), { kind: 'CLOSED', message: 'invalid: kinds.0: kinds must be at most 65535' }],
    ['REQ unknown field', JSON.stringify(['REQ', 's6', { search: 'x' }]), { kind: 'CLOSED', message: 'invalid: unsupported filter field: search' }],
    ['REQ tag values not strings', JSON.stringify(['REQ', 's7', { '#p': [1] }]), { kind: 'CLOSED', message: 'invalid: #p.0: tag filter values must be strings' }],
    ['REQ too many filters', JSON.stringify(['REQ', 's8', ...Array.from({ length: DEFAULT_LIMITS.max_filters + 1 }, () => ({}))]), { kind: 'CLOSED', message: `invalid: too many filters (max ${DEFAULT_LIMITS.max_filters})` }],
    ['CLOSE without id', '["CLOSE"]', { kind: 'NOTICE', message: 'invalid: CLOSE takes exactly one subscription id' }],
    ['created_at in the far future', JSON.stringify(['EVENT', sign(k, { created_at: now() + DEFAULT_LIMITS.created_at_upper_limit + 60 })]), { kind: 'OK', message: 'invalid: created_at is too far in the future' }],
    ['created_at in the far past', JSON.stringify(['EVENT', sign(k, { created_at: now() - DEFAULT_LIMITS.created_at_lower_limit - 60 })]), { kind: 'OK', message: 'invalid: created_at is too far in the past' }],
    ['too many tags', JSON.stringify(['EVENT', sign(k, { tags: Array.from({ length: DEFAULT_LIMITS.max_event_tags + 1 }, (_, i) => ['t', String(i)]) })]), { kind: 'OK', message: `invalid: too many tags (max ${DEFAULT_LIMITS.max_event_tags})` }],
    ['content too long', JSON.stringify(['EVENT', sign(k, { content: 'y'.repeat(DEFAULT_LIMITS.max_content_length + 1) })]), { kind: 'OK', message: `invalid: content is longer than ${DEFAULT_LIMITS.max_content_length} characters` }],
    ['oversized frame', JSON.stringify(['EVENT', sign(k, { content: 'z'.repeat(DEFAULT_LIMITS.max_message_length) })]), { kind: 'OK', message: `invalid: message is longer than ${DEFAULT_LIMITS.max_message_length} bytes` }],
    // Read without parsing: a REQ or COUNT too long to parse is still answered for its subscription id.
    ['oversized non-event frame', JSON.stringify(['REQ', 'big', { '#t': ['q'.repeat(DEFAULT_LIMITS.max_message_length)] }]), { kind: 'CLOSED', message: `invalid: message is longer than ${DEFAULT_LIMITS.max_message_length} bytes`, subId: 'big' }],
    ['oversized COUNT frame', JSON.stringify(['COUNT', 'big "count"', { '#t': ['q'.repeat(DEFAULT_LIMITS.max_message_length)] }]), { kind: 'CLOSED', message: `invalid: message is longer than ${DEFAULT_LIMITS.max_message_length} bytes`, subId: 'big "count"' }],
    ['oversized frame of another verb', JSON.stringify(['CLOSE', 'big', 'q'.repeat(DEFAULT_LIMITS.max_message_length)]), { kind: 'NOTICE', message: `invalid: message is longer than ${DEFAULT_LIMITS.max_message_length} bytes` }],
    ['AUTH event kind 22242 via EVENT', JSON.stringify(['EVENT', sign(k, { kind: 22242 })]), { kind: 'OK', message: 'invalid: kind 22242 is sent with the AUTH message, not EVENT' }],
  ];
}

describe('bad input', () => {
  const owner = freshOwner();
  for (const [name, frame, expected] of cases(owner)) {
    it(`${name} → ${expected.kind} "${expected.message}"`, async () => {
      const s = await connect(`/r/${owner.pk}`);
      const keep = sign(owner, { content: `kept before: ${name}` });
      expect((await s.publish(keep))[2]).toBe(true);
      s.send(frame);
      const answer = await s.next((f) => f[0] === expected.kind);
      expect(answer[0]).toBe(expected.kind);
      if (expected.kind === 'OK') expect(answer[2]).toBe(false);
      if (expected.subId !== undefined) expect(answer[1]).toBe(expected.subId);
      expect(answer[answer.length - 1]).toBe(expected.message);
      // The connection keeps serving, and the stored event is still there.
      const after = sign(owner, { content: `after: ${name}` });
      expect((await s.publish(after))[2]).toBe(true);
      const { events } = await s.req('check', { ids: [keep.id, after.id] });
      expect(events.map((e) => e.id).sort()).toEqual([keep.id, after.id].sort());
      expect(s.closed).toBeUndefined();
    });
  }
});

describe('max_content_length counts Unicode characters (NIP-11), not UTF-16 units', () => {
  it('a content of exactly max_content_length characters, emoji included, is accepted; one more is refused', async () => {
    const owner = freshOwner();
    const s = await connect(`/r/${owner.pk}`);
    const max = DEFAULT_LIMITS.max_content_length;
    // Each emoji is one character and two UTF-16 units: the content is `max` characters, max + 100 units.
    const atMax = sign(owner, { content: `${'😀'.repeat(100)}${'y'.repeat(max - 100)}` });
    expect(await s.publish(atMax)).toEqual(['OK', atMax.id, true, '']);
    const over = sign(owner, { content: `${'😀'.repeat(100)}${'y'.repeat(max - 99)}` });
    expect(await s.publish(over)).toEqual(['OK', over.id, false, `invalid: content is longer than ${max} characters`]);
  });
});
