// What a user does after `npm start`, from Node with nostr-tools over `ws`: publish and read back on
// the public shard and on an owner's shard, fetch NIP-11, find the demo agent in /health and talk
// to it exactly as the README shows.
import { afterEach, describe, expect, inject, it } from 'vitest';
import WebSocket from 'ws';
import { Relay, useWebSocketImplementation } from 'nostr-tools/relay';
import { SimplePool, useWebSocketImplementation as usePoolWebSocket } from 'nostr-tools/pool';
import { finalizeEvent, generateSecretKey, getPublicKey } from 'nostr-tools/pure';
import * as nip44 from 'nostr-tools/nip44';
import { npubEncode } from 'nostr-tools/nip19';
import type { Event } from 'nostr-tools/core';
import type { Filter } from 'nostr-tools/filter';

useWebSocketImplementation(WebSocket);
usePoolWebSocket(WebSocket);

const relayUrl = inject('relayUrl');
const httpUrl = inject('httpUrl');
const relays: Relay[] = [];
afterEach(() => {
  for (const r of relays.splice(0)) r.close();
});

async function open(path: string): Promise<Relay> {
  const r = await Relay.connect(`${relayUrl.replace(/\/$/, '')}${path}`);
  relays.push(r);
  return r;
}

function readAll(r: Relay, filter: Filter): Promise<Event[]> {
  return new Promise((resolve) => {
    const got: Event[] = [];
    const sub = r.subscribe([filter], {
      onevent: (e) => got.push(e),
      oneose: () => {
        sub.close();
        resolve(got);
      },
    });
  });
}

const now = () => Math.floor(Date.now() / 1000);

describe('nostr-tools against the running Worker', () => {
  it.each([['/'], ['/r/OWNER']])('publishes and reads back on %s', async (template) => {
    const sk = generateSecretKey();
    const pk = getPublicKey(sk);
    const r = await open(template.replace('OWNER', pk));
    const e = finalizeEvent({ kind: 1, created_at: now(), tags: [['t', 'e2e']], content: `hello ${template}` }, sk);
    await r.publish(e);
    const back = await readAll(r, { authors: [pk] });
    expect(back.map((x) => x.id)).toEqual([e.id]);
    expect(back[0]!.content).toBe(`hello ${template}`);
  });

  it('the owner shard refuses strangers with restricted:', async () => {
    const owner = getPublicKey(generateSecretKey());
    const r = await open(`/r/${npubEncode(owner)}`);
    const e = finalizeEvent({ kind: 1, created_at: now(), tags: [], content: 'not mine' }, generateSecretKey());
    await expect(r.publish(e)).rejects.toThrow(/^restricted: /);
  });

  it('serves NIP-11 to Accept: application/nostr+json', async () => {
    const res = await fetch(`${httpUrl}/`, { headers: { Accept: 'application/nostr+json' } });
    expect(res.headers.get('content-type')).toBe('application/nostr+json');
    const doc = (await res.json()) as { supported_nips: number[]; limitation: { max_limit: number } };
    expect(doc.supported_nips).toEqual([1, 9, 11, 40, 42, 45, 62, 70]);
    expect(doc.limitation.max_limit).toBe(500);
  });

  it('finds the demo agent in /health and gets an answer from it (the README flow)', async () => {
    const health = (await (await fetch(`${httpUrl}/health`)).json()) as { ok: boolean; demo: { owner: string; agent: string; relay: string } };
    expect(health.ok).toBe(true);
    expect(health.demo.relay).toBe(`/r/${health.demo.owner}`);
    const { demo } = health;
    const url = `${relayUrl.replace(/\/$/, '')}${demo.relay}`;
    const sk = generateSecretKey();
    const me = getPublicKey(sk);
    const key = nip44.getConversationKey(sk, demo.agent);
    const prompt = finalizeEvent(
      {
        kind: 25802,
        created_at: now(),
        content: nip44.encrypt(JSON.stringify({ ver: 1, message: 'hello from the README' }), key),
        tags: [['p', demo.agent], ['encryption', 'nip44']],
      },
      sk,
    );
    const pool = new SimplePool();
    const answer = new Promise<Record<string, unknown>>((resolve) => {
      pool.subscribe([url], { kinds: [25803, 25805], '#p': [me], '#e': [prompt.id] }, {
        onauth: (t) => Promise.resolve(finalizeEvent(t, sk)),
        onevent: (e) => resolve(JSON.parse(nip44.decrypt(e.content, key)) as Record<string, unknown>),
      });
    });
    await Promise.all(pool.publish([url], prompt));
    expect(await answer).toMatchObject({ ver: 1, text: 'echo: hello from the README' });
    pool.destroy();
  });
});
