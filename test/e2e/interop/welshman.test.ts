// @welshman/net 0.8 against `wrangler dev`: both shard kinds, publish, filters with EOSE, AUTH-gated
// reads, a demo-agent round trip. Auth wiring: a Pool whose sockets carry
// makeSocketPolicyAuth({ sign }) next to the default policies. Without it welshman holds back every
// EOSE once a relay has sent a challenge it does not answer (socketPolicyAuthBuffer): so edgestr
// sends its challenge only with an `auth-required:` answer, and plain reads work with no auth set up.
import { afterEach, describe, expect, inject, it } from 'vitest';
import { defaultSocketPolicies, makeSocketPolicyAuth, Pool, publish, request, Socket, PublishStatus } from '@welshman/net';
import type { Filter, SignedEvent, StampedEvent, TrustedEvent } from '@welshman/util';
import { finalizeEvent } from 'nostr-tools/pure';
import { demo, newKey, note, prompt, RunCollector, unwrappedText, within, wrapToSelf, type Key } from './demo.js';

const relayUrl = inject('relayUrl');
const httpUrl = inject('httpUrl');
const publicShard = `${relayUrl}/`;

const pools: Pool[] = [];
afterEach(() => {
  for (const p of pools.splice(0)) p.clear();
});

/** A pool with welshman's default policies, plus NIP-42 as `key` when given. */
function makePool(key?: Key): Pool {
  const sign = async (t: StampedEvent): Promise<SignedEvent> => finalizeEvent(t, key!.sk);
  const policies = key ? [...defaultSocketPolicies, makeSocketPolicyAuth({ sign })] : defaultSocketPolicies;
  const pool = new Pool({ makeSocket: (url) => new Socket(url, policies) });
  pools.push(pool);
  return pool;
}

const read = (pool: Pool, url: string, filters: Filter[]): Promise<TrustedEvent[]> =>
  within(request({ relays: [url], filters, autoClose: true, context: { pool } }), 10_000, `EOSE from ${url}`);

async function publishTo(pool: Pool, url: string, event: SignedEvent): Promise<{ status: PublishStatus; detail: string }> {
  const results = await publish({ event, relays: [url], context: { pool }, timeout: 10_000 });
  return Object.values(results)[0]!;
}

describe('@welshman/net', () => {
  it('with no auth policy: publishes and reads back with EOSE on the public shard and the demo owner’s shard', async () => {
    const { owner, ownerShard } = await demo(httpUrl, relayUrl);
    const pool = makePool();
    const me = newKey();
    for (const url of [publicShard, ownerShard]) {
      const e = note(me, `hello ${url}`, [['p', owner]]);
      expect(await publishTo(pool, url, e)).toMatchObject({ status: PublishStatus.Success });
      expect((await read(pool, url, [{ authors: [me.pk], kinds: [1] }])).map((x) => x.id)).toEqual([e.id]);
      expect(await read(pool, url, [{ authors: [me.pk], kinds: [7] }])).toEqual([]);
    }
    const refused = await publishTo(pool, ownerShard, note(newKey(), 'not for the owner'));
    expect(refused).toMatchObject({ status: PublishStatus.Failure });
    expect(refused.detail).toMatch(/^restricted: /);
  });

  it('with makeSocketPolicyAuth: a gift-wrap REQ is authenticated and re-sent, and a stranger gets nothing', async () => {
    const me = newKey();
    const wrap = wrapToSelf(me, 'to myself');
    expect(await publishTo(makePool(), publicShard, wrap)).toMatchObject({ status: PublishStatus.Success });
    const got = await read(makePool(me), publicShard, [{ kinds: [1059], '#p': [me.pk] }]);
    expect(got.map((e) => e.id)).toEqual([wrap.id]);
    expect(unwrappedText(me, got[0] as never)).toBe('to myself');
    expect(await read(makePool(newKey()), publicShard, [{ kinds: [1059], '#p': [me.pk] }])).toEqual([]);
  });

  it('talks to the demo agent: 25802 prompt, 25801 deltas and a 25803 answer', async () => {
    const { agent, ownerShard } = await demo(httpUrl, relayUrl);
    const me = newKey();
    const pool = makePool(me);
    const p = prompt(me, agent, 'hello from welshman');
    const run = new RunCollector(me, agent);
    const ctrl = new AbortController();
    let eose = false;
    void request({
      relays: [ownerShard],
      // welshman sends one REQ per filter; the second names only a kind served after AUTH, so the
      // relay answers it auth-required: with its challenge, the policy authenticates, and both REQs
      // are re-sent (the first alone does the same once 25801 is served only after AUTH too).
      filters: [{ kinds: [25801, 25803, 25805], '#p': [me.pk], '#e': [p.id] }, { kinds: [25803], '#p': [me.pk], limit: 0 }],
      signal: ctrl.signal,
      context: { pool },
      onEvent: (e) => run.take(e),
      onEose: () => (eose = true),
    });
    try {
      await within(
        new Promise<void>((resolve) => {
          const t = setInterval(() => eose && (clearInterval(t), resolve()), 20);
        }),
        10_000,
        'EOSE after authenticating',
      );
      expect(await publishTo(pool, ownerShard, p)).toMatchObject({ status: PublishStatus.Success });
      await within(run.done, 20_000, 'the answer');
    } finally {
      ctrl.abort();
    }
    expect(run.terminal).toMatchObject({ kind: 25803, payload: { text: 'echo: hello from welshman' } });
    expect(run.streamed).toBe('echo: hello from welshman');
  });
});
