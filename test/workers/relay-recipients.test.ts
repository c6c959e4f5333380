// Kinds addressed to one recipient (src/shared/recipients.ts): a shard refuses such an event with
// more than one `p` tag, so one EVENT cannot reach every agent and bridge it names (an event may
// carry max_event_tags tags, and edgestr's own connections have no delivery budget). A table of
// events in, the survivors out (strfry's write-policy tests): what each event is answered, and what
// the live subscriptions of two recipients, A and B, receive.
import { describe, expect, it } from 'vitest';
import { connect, keys, sign, type Keys, type TestSocket } from './helpers.js';
import type { NostrEvent } from '../../src/shared/event.js';

/** The kinds addressed to one recipient, with the name the refusal gives them. */
const ONE_RECIPIENT: ReadonlyArray<[number, string]> = [
  [25800, 'ai.status'],
  [25801, 'ai.delta'],
  [25802, 'ai.prompt'],
  [25803, 'ai.response'],
  [25804, 'ai.tool_call'],
  [25805, 'ai.error'],
  [25806, 'ai.cancel'],
  [25910, 'DVMCP request'],
  [26910, 'DVMCP response'],
  [21316, 'DVMCP notification'],
  [1059, 'gift wrap'],
  [21059, 'ephemeral gift wrap'],
  [9735, 'zap receipt'],
];

const refusal = (kind: number, name: string) => `invalid: kind ${kind} (${name}) is addressed to one recipient: at most one "p" tag`;

/** Every EVENT a subscription received up to the sentinel, in order. */
async function receivedUntil(s: TestSocket, subId: string, sentinel: NostrEvent): Promise<NostrEvent[]> {
  const got: NostrEvent[] = [];
  for (;;) {
    const e = (await s.next((x) => x[0] === 'EVENT' && x[1] === subId))[2] as NostrEvent;
    if (e.id === sentinel.id) return got;
    got.push(e);
  }
}

async function recipient(path: string, k: Keys): Promise<TestSocket> {
  const s = await connect(path);
  expect((await s.auth(k))[2]).toBe(true);
  expect(await s.req('inbox', { '#p': [k.pk] })).toEqual({ events: [] });
  return s;
}

type Row = { event: NostrEvent; answer: string; accepted: boolean };

describe.each(['/', 'owner'])('a kind addressed to one recipient, on %s', (where) => {
  it('is refused with more than one "p" tag (two keys, or one key twice); one or none is taken; other kinds keep any number', async () => {
    const [a, b, sender] = [keys(), keys(), keys()];
    // On an owner shard, A is the owner: what is addressed to it is its inbox.
    const path = where === '/' ? '/' : `/r/${a.pk}`;
    const subs = { a: await recipient(path, a), b: await recipient(path, b) };
    const rows: Row[] = [];
    const ok = (event: NostrEvent): Row => ({ event, answer: '', accepted: true });
    for (const [kind, name] of ONE_RECIPIENT) {
      const event = (tags: string[][]) => sign(sender, { kind, tags: [...tags, ['e', 'f'.repeat(64)]], content: `${kind}` });
      rows.push(ok(event([['p', a.pk]])));
      rows.push({ event: event([['p', a.pk], ['p', b.pk]]), answer: refusal(kind, name), accepted: false });
      rows.push({ event: event([['p', a.pk], ['p', a.pk]]), answer: refusal(kind, name), accepted: false });
      if (where === '/') rows.push(ok(event([])));
    }
    // Kinds not addressed to one recipient: a note mentioning both, a reaction, a DM rumor kind.
    for (const kind of [1, 7, 14]) rows.push(ok(sign(sender, { kind, tags: [['p', a.pk], ['p', b.pk]], content: `${kind}` })));

    const pub = await connect(path);
    for (const r of rows) expect(await pub.publish(r.event)).toEqual(['OK', r.event.id, r.accepted, r.answer]);
    const sentinel = sign(sender, { kind: 1, tags: [['p', a.pk], ['p', b.pk]], content: 'sentinel' });
    expect(await pub.publish(sentinel)).toEqual(['OK', sentinel.id, true, '']);

    const survivors = rows.filter((r) => r.accepted).map((r) => r.event);
    const naming = (k: Keys) => survivors.filter((e) => e.tags.some((t) => t[0] === 'p' && t[1] === k.pk));
    // A gets each kind once (the event naming A alone) and the three others; B only the three others.
    expect((await receivedUntil(subs.a, 'inbox', sentinel)).map((e) => e.id)).toEqual(naming(a).map((e) => e.id));
    expect(naming(a)).toHaveLength(ONE_RECIPIENT.length + 3);
    expect((await receivedUntil(subs.b, 'inbox', sentinel)).map((e) => e.kind)).toEqual([1, 7, 14]);
  });
});
