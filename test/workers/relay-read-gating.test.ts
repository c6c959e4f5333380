// Read gating of live-only private kinds: NIP-XX run events (25800, 25801, 25804, 25806) and
// ephemeral gift wraps (21059) are never stored; their tags say who talks to which agent and when,
// so live fan-out gives them only to a connection authenticated as their author or p-tagged
// recipient (21059: the recipient only). "Nothing arrived" is proven with a sentinel event that
// every subscriber may read, published after the gated ones (a connection's frames stay in order).
import { describe, expect, it } from 'vitest';
import { connect, freshOwner, keys, sign, type Keys, type TestSocket } from './helpers.js';
import type { NostrEvent } from '../../src/shared/event.js';
import { READ_RESTRICTED_KINDS, readRule } from '../../src/shared/kinds.js';

const AUTH_REQUIRED = 'auth-required: these kinds are only served to their authenticated author or recipient';
const GATED_LIVE = [25800, 25801, 25804, 25806, 21059];

/** Every EVENT a subscription received up to and including `sentinel`, in order. */
async function receivedUntil(s: TestSocket, subId: string, sentinel: NostrEvent): Promise<NostrEvent[]> {
  const got: NostrEvent[] = [];
  for (;;) {
    const f = await s.next((x) => x[0] === 'EVENT' && x[1] === subId);
    const e = f[2] as NostrEvent;
    if (e.id === sentinel.id) return got;
    got.push(e);
  }
}

async function subscriber(path: string, as: Keys | undefined, filter: object): Promise<TestSocket> {
  const s = await connect(path);
  if (as) expect((await s.auth(as))[2]).toBe(true);
  expect(await s.req('live', filter)).toEqual({ events: [] });
  return s;
}

describe('live-only private kinds (NIP-XX run events, 21059)', () => {
  it.each(GATED_LIVE)('a REQ for kind %i alone without AUTH is CLOSED auth-required', async (kind) => {
    const owner = freshOwner();
    const s = await connect(`/r/${owner.pk}`);
    expect(await s.req('x', { kinds: [kind] })).toEqual({ events: [], closed: AUTH_REQUIRED });
    expect(await s.req('y', { kinds: [kind], '#p': [owner.pk] })).toEqual({ events: [], closed: AUTH_REQUIRED });
  });

  it('are delivered only to the authenticated author or p-tagged recipient; 21059 to the recipient only', async () => {
    // The shard's owner plays the agent (it may publish anything on its shard); `client` talks to it.
    const agent = freshOwner();
    const client = keys();
    const stranger = keys();
    const wrapper = keys(); // a gift wrap's one-time key
    const path = `/r/${agent.pk}`;
    const wide = {}; // every kind, every author
    const listed = { kinds: [1, ...GATED_LIVE] };
    const subs = {
      anonWide: await subscriber(path, undefined, wide),
      anonListed: await subscriber(path, undefined, listed),
      stranger: await subscriber(path, stranger, wide),
      client: await subscriber(path, client, wide),
      agent: await subscriber(path, agent, wide),
      wrapper: await subscriber(path, wrapper, wide),
    };

    const status = sign(agent, { kind: 25800, tags: [['p', client.pk], ['e', 'f'.repeat(64)], ['s', 'secret-session']], content: 'x' });
    const delta = sign(agent, { kind: 25801, tags: [['p', client.pk], ['s', 'secret-session']], content: 'x' });
    const tool = sign(agent, { kind: 25804, tags: [['p', client.pk], ['s', 'secret-session']], content: 'x' });
    const cancel = sign(client, { kind: 25806, tags: [['p', agent.pk], ['e', 'f'.repeat(64)]], content: 'x' });
    const wrap = sign(wrapper, { kind: 21059, tags: [['p', agent.pk]], content: 'wrapped' });
    const sentinel = sign(agent, { kind: 1, content: 'sentinel' });

    const pub = await connect(path);
    for (const e of [status, delta, tool, cancel, wrap, sentinel]) expect(await pub.publish(e)).toEqual(['OK', e.id, true, '']);

    expect(await receivedUntil(subs.anonWide, 'live', sentinel)).toEqual([]);
    expect(await receivedUntil(subs.anonListed, 'live', sentinel)).toEqual([]);
    expect(await receivedUntil(subs.stranger, 'live', sentinel)).toEqual([]);
    // The client: the run events p-tag it, and it wrote the cancel.
    expect(await receivedUntil(subs.client, 'live', sentinel)).toEqual([status, delta, tool, cancel]);
    // The agent: it wrote the run events, the cancel and the wrap p-tag it.
    expect(await receivedUntil(subs.agent, 'live', sentinel)).toEqual([status, delta, tool, cancel, wrap]);
    // A gift wrap's author is a throwaway key: it never reads the wrap back.
    expect(await receivedUntil(subs.wrapper, 'live', sentinel)).toEqual([]);
  });

  it('a connection authenticated as a stranger may subscribe but receives no one else’s run events', async () => {
    const agent = freshOwner();
    const client = keys();
    const path = `/r/${agent.pk}`;
    const spy = await connect(path);
    await spy.auth(keys());
    // Authenticated: the REQ is accepted (it may match the spy's own events), but others' run events never arrive;
    // the sentinel on 'all' comes after anything the shard would have sent to 'runs'.
    expect(await spy.req('runs', { kinds: GATED_LIVE, '#p': [client.pk] })).toEqual({ events: [] });
    expect(await spy.req('all', {})).toEqual({ events: [] });
    const delta = sign(agent, { kind: 25801, tags: [['p', client.pk], ['s', 'sender:' + client.pk]], content: 'x' });
    const sentinel = sign(agent, { kind: 1, content: 'sentinel' });
    const pub = await connect(path);
    await pub.publish(delta);
    await pub.publish(sentinel);
    expect(await receivedUntil(spy, 'all', sentinel)).toEqual([]);
    expect(spy.frames.filter((f) => f[0] === 'EVENT' && f[1] === 'runs')).toEqual([]);
  });
});

describe('one read rule', () => {
  it('readRule and the kind lists the SQL clause is built from agree on every kind', () => {
    const disagreements: number[] = [];
    for (let k = 0; k <= 65535; k++) {
      const listed = READ_RESTRICTED_KINDS['author-or-recipient'].includes(k)
        ? 'author-or-recipient'
        : READ_RESTRICTED_KINDS.recipient.includes(k)
          ? 'recipient'
          : 'anyone';
      if (listed !== readRule(k)) disagreements.push(k);
    }
    expect(disagreements).toEqual([]);
    expect(READ_RESTRICTED_KINDS).toEqual({
      'author-or-recipient': [25800, 25801, 25802, 25803, 25804, 25805, 25806],
      recipient: [1059, 21059],
    });
  });
});
