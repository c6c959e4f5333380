// applesauce-relay 6.2 against `wrangler dev`: both shard kinds (and their NIP-11), publish,
// filters with EOSE, AUTH-gated reads, a demo-agent round trip. Auth wiring: authenticate when
// `challenge$` emits (requests answered `auth-required:` wait for `authenticated$` and are re-sent
// by applesauce). edgestr sends its challenge only when authentication is needed, so
// `authenticate()` right after connecting finds none: ask for it first with `relay.send(["AUTH"])`.
import { afterEach, describe, expect, inject, it } from 'vitest';
import WebSocket from 'ws';
import { Relay } from 'applesauce-relay';
import { filter, firstValueFrom, lastValueFrom, toArray } from 'rxjs';
import { finalizeEvent, type Event, type EventTemplate } from 'nostr-tools/pure';
import type { Filter } from 'nostr-tools/filter';
import { demo, newKey, note, prompt, RunCollector, unwrappedText, within, wrapToSelf, type Key } from './demo.js';

const relayUrl = inject('relayUrl');
const httpUrl = inject('httpUrl');
const publicShard = `${relayUrl}/`;

const relays: Relay[] = [];
afterEach(() => {
  for (const r of relays.splice(0)) r.close();
});

const signer = (key: Key) => ({ signEvent: (t: EventTemplate): Event => finalizeEvent(t, key.sk) });

function open(url: string): Relay {
  const r = new Relay(url, { WebSocket: WebSocket as unknown as typeof globalThis.WebSocket });
  relays.push(r);
  return r;
}

/** A relay that authenticates as `key` whenever the relay sends a challenge. */
function openAuthenticating(url: string, key: Key): Relay {
  const r = open(url);
  r.challenge$.pipe(filter((c): c is string => c !== null)).subscribe(() => void r.authenticate(signer(key)));
  return r;
}

const read = (r: Relay, filters: Filter[]): Promise<Event[]> =>
  within(lastValueFrom(r.request(filters).pipe(toArray())), 10_000, `EOSE from ${r.url}`) as Promise<Event[]>;

describe('applesauce-relay', () => {
  it('publishes and reads back with EOSE on the public shard and the demo owner’s shard; reads NIP-11', async () => {
    const { owner, ownerShard } = await demo(httpUrl, relayUrl);
    const me = newKey();
    for (const url of [publicShard, ownerShard]) {
      const r = open(url);
      const e = note(me, `hello ${url}`, [['p', owner]]);
      expect(await r.publish(e)).toMatchObject({ ok: true });
      expect((await read(r, [{ authors: [me.pk], kinds: [1] }])).map((x) => x.id)).toEqual([e.id]);
      expect(await read(r, [{ authors: [me.pk], kinds: [7] }])).toEqual([]);
      expect(await r.getSupported()).toContain(42);
    }
    const refused = await open(ownerShard).publish(note(newKey(), 'not for the owner'));
    expect(refused.ok).toBe(false);
    expect(refused.message).toMatch(/^restricted: /);
  });

  it('authenticating on challenge$: a gift-wrap request waits for AUTH and is re-sent; a stranger gets nothing', async () => {
    const me = newKey();
    const wrap = wrapToSelf(me, 'to myself');
    expect(await open(publicShard).publish(wrap)).toMatchObject({ ok: true });
    const r = openAuthenticating(publicShard, me);
    const got = await read(r, [{ kinds: [1059], '#p': [me.pk] }]);
    expect(got.map((e) => e.id)).toEqual([wrap.id]);
    expect(unwrappedText(me, got[0]!)).toBe('to myself');
    expect(r.authenticatedAs).toBe(me.pk);
    expect(await read(openAuthenticating(publicShard, newKey()), [{ kinds: [1059], '#p': [me.pk] }])).toEqual([]);
  });

  it('authenticate() right after connecting: no challenge yet; relay.send(["AUTH"]) asks for one', async () => {
    const me = newKey();
    const r = open(publicShard);
    expect(await read(r, [{ ids: ['0'.repeat(64)] }])).toEqual([]); // opens the connection (send() does not)
    expect(() => r.authenticate(signer(me))).toThrow('Have not received authentication challenge');
    r.send(['AUTH']);
    await within(firstValueFrom(r.challenge$.pipe(filter((c) => c !== null))), 10_000, 'the challenge');
    expect(await r.authenticate(signer(me))).toMatchObject({ ok: true });
    expect(r.authenticatedAs).toBe(me.pk);
  });

  it('talks to the demo agent: 25802 prompt, 25801 deltas and a 25803 answer', async () => {
    const { agent, ownerShard } = await demo(httpUrl, relayUrl);
    const me = newKey();
    const r = open(ownerShard);
    expect(await read(r, [{ ids: ['0'.repeat(64)] }])).toEqual([]); // opens the connection (send() does not)
    r.send(['AUTH']);
    await within(firstValueFrom(r.challenge$.pipe(filter((c) => c !== null))), 10_000, 'the challenge');
    expect(await r.authenticate(signer(me))).toMatchObject({ ok: true });
    const p = prompt(me, agent, 'hello from applesauce');
    const run = new RunCollector(me, agent);
    let eose = false;
    const sub = r.subscription([{ kinds: [25801, 25803, 25805], '#p': [me.pk], '#e': [p.id] }]).subscribe((m) => {
      if (m === 'EOSE') eose = true;
      else run.take(m);
    });
    try {
      await within(
        new Promise<void>((resolve) => {
          const t = setInterval(() => eose && (clearInterval(t), resolve()), 20);
        }),
        10_000,
        'EOSE',
      );
      expect(await r.publish(p)).toMatchObject({ ok: true });
      await within(run.done, 20_000, 'the answer');
    } finally {
      sub.unsubscribe();
    }
    expect(run.terminal).toMatchObject({ kind: 25803, payload: { text: 'echo: hello from applesauce' } });
    expect(run.streamed).toBe('echo: hello from applesauce');
  });
});
