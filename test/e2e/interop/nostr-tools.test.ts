// nostr-tools 2.25 (Relay and SimplePool over `ws`) against `wrangler dev`: both shard kinds,
// publish, filters with EOSE, AUTH-gated reads, a demo-agent round trip. Auth wiring: `onauth`
// (Relay.onauth, or the `onauth` parameter of SimplePool.subscribe/publish, which re-sends a
// REQ or EVENT answered `auth-required:` after authenticating).
import { afterEach, describe, expect, inject, it } from 'vitest';
import WebSocket from 'ws';
import { SimplePool, useWebSocketImplementation as usePoolWebSocket } from 'nostr-tools/pool';
import type { Event } from 'nostr-tools/pure';
import { demo, newKey, note, prompt, RunCollector, unwrappedText, within, wrapToSelf } from './demo.js';
import { authenticate, fetchAll, Opened, signer } from './nostr-tools-relays.js';

usePoolWebSocket(WebSocket);

const relayUrl = inject('relayUrl');
const httpUrl = inject('httpUrl');
const publicShard = `${relayUrl}/`;

const opened = new Opened();
afterEach(() => opened.closeAll());
const connect = opened.connect.bind(opened);

describe('nostr-tools', () => {
  it('publishes and reads back with EOSE on the public shard and on the demo owner’s shard', async () => {
    const { owner, ownerShard } = await demo(httpUrl, relayUrl);
    const me = newKey();
    for (const url of [publicShard, ownerShard]) {
      const r = await connect(url);
      const e = note(me, `hello ${url}`, [['p', owner]]); // p-tags the owner: the owner shard's inbox
      expect(await r.publish(e)).toBe('');
      expect((await fetchAll(r, { authors: [me.pk], kinds: [1] })).map((x) => x.id)).toEqual([e.id]);
      expect(await fetchAll(r, { authors: [me.pk], kinds: [7] })).toEqual([]);
    }
    const stranger = await connect(ownerShard);
    await expect(stranger.publish(note(newKey(), 'not for the owner'))).rejects.toThrow(/^restricted: /);
  });

  it('Relay.onauth answers the challenge sent with auth-required:, and the retried REQ serves the gift wrap', async () => {
    const me = newKey();
    const wrap = wrapToSelf(me, 'to myself');
    expect(await (await connect(publicShard)).publish(wrap)).toBe('');

    const r = await connect(publicShard, me);
    const filter = { kinds: [1059], '#p': [me.pk] };
    await expect(fetchAll(r, filter)).rejects.toThrow(/^auth-required: /);
    // The challenge came with the CLOSED and onauth already answered it: auth() returns that attempt.
    expect(await within(r.auth(signer(me)), 10_000, 'the AUTH OK')).toBe('');
    const got = await fetchAll(r, filter);
    expect(got.map((e) => e.id)).toEqual([wrap.id]);
    expect(unwrappedText(me, got[0]!)).toBe('to myself');

    const stranger = await connect(publicShard, newKey());
    await expect(fetchAll(stranger, filter)).rejects.toThrow(/^auth-required: /);
    await stranger.auth(signer(newKey())); // the attempt onauth started (its key, not this one)
    expect(await fetchAll(stranger, filter)).toEqual([]);
  });

  it('SimplePool with onauth: a gift-wrap REQ is authenticated and re-sent by the pool itself', async () => {
    const me = newKey();
    const wrap = wrapToSelf(me, 'pooled');
    const pool = new SimplePool();
    opened.add({ close: () => pool.destroy() });
    const onauth = signer(me);
    await Promise.all(pool.publish([publicShard], wrap));
    const got = await within(
      new Promise<Event>((resolve) => {
        pool.subscribe([publicShard], { kinds: [1059], '#p': [me.pk] }, { onauth, onevent: resolve });
      }),
      15_000,
      'the gift wrap',
    );
    expect(got.id).toBe(wrap.id);
  });

  it('talks to the demo agent: 25802 prompt, 25801 deltas and a 25803 answer after AUTH', async () => {
    const { agent, ownerShard } = await demo(httpUrl, relayUrl);
    const me = newKey();
    const r = await connect(ownerShard);
    // Run events are served only to an authenticated recipient: authenticate up front.
    await authenticate(r, me);
    const p = prompt(me, agent, 'hello from nostr-tools');
    const run = new RunCollector(me, agent);
    const filter = { kinds: [25801, 25803, 25805], '#p': [me.pk], '#e': [p.id] };
    await new Promise<void>((resolve, reject) => {
      r.subscribe([filter], { onevent: (e) => run.take(e), oneose: resolve, onclose: (m) => reject(new Error(m)) });
    });
    expect(await r.publish(p)).toBe('');
    await within(run.done, 20_000, 'the answer');
    expect(run.terminal).toMatchObject({ kind: 25803, payload: { text: 'echo: hello from nostr-tools' } });
    expect(run.streamed).toBe('echo: hello from nostr-tools');
  });
});
