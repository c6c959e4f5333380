// NDK 3.0 against `wrangler dev`: both shard kinds, publish, filters with EOSE, AUTH-gated reads, a
// demo-agent round trip. Auth wiring: `ndk.relayAuthDefaultPolicy = NDKRelayAuthPolicies.signIn({ ndk })`
// with `ndk.signer` set; NDK then re-runs a subscription once the relay is authenticated. Without a
// policy, NDK leaves a relay that sent a challenge in AUTH_REQUESTED and no longer reconnects it
// after a drop (NDKRelayConnectivity.onDisconnect reconnects only from CONNECTED): edgestr sends
// its challenge only with an `auth-required:` answer, so plain use never meets one.
// NDK appends "/" to every relay URL: owner shards are reached as `/r/<owner>/`.
import { afterEach, describe, expect, inject, it } from 'vitest';
import WebSocket from 'ws';
import NDK, { NDKEvent, NDKPrivateKeySigner, NDKPublishError, NDKRelayAuthPolicies, NDKRelaySet, NDKRelayStatus, type NDKFilter, type NDKKind } from '@nostr-dev-kit/ndk';
import type { Event } from 'nostr-tools/pure';
import { bytesToHex } from '@noble/hashes/utils';
import { demo, newKey, note, prompt, RunCollector, unwrappedText, within, wrapToSelf, type Key } from './demo.js';

// NDK opens sockets with the global WebSocket, which Node 20 does not have.
(globalThis as { WebSocket?: unknown }).WebSocket ??= WebSocket;

const relayUrl = inject('relayUrl');
const httpUrl = inject('httpUrl');
const publicShard = `${relayUrl}/`;

const made: NDK[] = [];
afterEach(() => {
  for (const ndk of made.splice(0)) for (const r of ndk.pool.relays.values()) r.disconnect();
});

/** An NDK instance connected to `url` only; signs in (NIP-42) as `key` when given. */
async function connect(url: string, key?: Key): Promise<{ ndk: NDK; set: NDKRelaySet }> {
  const ndk = new NDK({ explicitRelayUrls: [url], enableOutboxModel: false });
  made.push(ndk);
  if (key) {
    ndk.signer = new NDKPrivateKeySigner(bytesToHex(key.sk));
    ndk.relayAuthDefaultPolicy = NDKRelayAuthPolicies.signIn({ ndk });
  }
  await ndk.connect(10_000);
  return { ndk, set: NDKRelaySet.fromRelayUrls([url], ndk) };
}

const publish = (ndk: NDK, set: NDKRelaySet, e: Event) => within(new NDKEvent(ndk, e).publish(set, 10_000), 15_000, `publishing kind ${e.kind}`);

async function fetchIds(ndk: NDK, set: NDKRelaySet, filter: NDKFilter): Promise<NDKEvent[]> {
  const got = await within(ndk.fetchEvents(filter, { closeOnEose: true, groupable: false }, set), 15_000, 'EOSE');
  return [...got];
}

async function roundTrip(url: string, owner: string): Promise<void> {
  const me = newKey();
  const { ndk, set } = await connect(url);
  const e = note(me, `hello ${url}`, [['p', owner]]);
  await publish(ndk, set, e);
  expect((await fetchIds(ndk, set, { authors: [me.pk], kinds: [1] })).map((x) => x.id)).toEqual([e.id]);
  expect(await fetchIds(ndk, set, { authors: [me.pk], kinds: [7] })).toEqual([]);
  // No challenge was sent: the relay stays CONNECTED, the state from which NDK reconnects after a drop.
  expect([...ndk.pool.relays.values()].map((r) => r.status)).toEqual([NDKRelayStatus.CONNECTED]);
}

describe('NDK', () => {
  it('with no auth policy: publishes and reads back with EOSE on the public shard, and stays reconnectable', async () => {
    const { owner } = await demo(httpUrl, relayUrl);
    await roundTrip(publicShard, owner);
  });

  // Needs `/r/<owner>/` (trailing slash) to reach the shard: the router change of branch trust-d.
  it('with no auth policy: publishes and reads back on the demo owner’s shard; strangers get restricted:', async () => {
    const { owner, ownerShard } = await demo(httpUrl, relayUrl);
    await roundTrip(ownerShard, owner);
    const { ndk, set } = await connect(ownerShard);
    const refused = await publish(ndk, set, note(newKey(), 'not for the owner')).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(refused).toBeInstanceOf(NDKPublishError);
    expect((refused as NDKPublishError).relayErrors).toMatch(/restricted: /);
  });

  it('with the signIn policy: a gift-wrap subscription is re-run after AUTH; a stranger gets nothing', async () => {
    const me = newKey();
    const wrap = wrapToSelf(me, 'to myself');
    const writer = await connect(publicShard);
    await publish(writer.ndk, writer.set, wrap);
    const { ndk, set } = await connect(publicShard, me);
    const got = await within(
      new Promise<NDKEvent>((resolve) => {
        ndk.subscribe({ kinds: [1059], '#p': [me.pk] }, { relaySet: set, closeOnEose: false, groupable: false, onEvent: resolve });
      }),
      15_000,
      'the gift wrap',
    );
    expect(got.id).toBe(wrap.id);
    expect(unwrappedText(me, got.rawEvent() as Event)).toBe('to myself');
    const stranger = await connect(publicShard, newKey());
    const seen: string[] = [];
    const sub = stranger.ndk.subscribe({ kinds: [1059], '#p': [me.pk] }, { relaySet: stranger.set, closeOnEose: false, groupable: false, onEvent: (e) => seen.push(e.id) });
    // Sentinel: once the stranger's connection is authenticated and a later REQ has answered, the
    // gift-wrap REQ (sent before it on the same connection) has answered too.
    await within(new Promise<void>((resolve) => [...stranger.ndk.pool.relays.values()][0]!.once('authed', () => resolve())), 10_000, 'the stranger’s AUTH');
    await fetchIds(stranger.ndk, stranger.set, { ids: ['0'.repeat(64)] });
    sub.stop();
    expect(seen).toEqual([]);
  });

  // Needs `/r/<owner>/` (trailing slash) to reach the shard: the router change of branch trust-d.
  it('talks to the demo agent: 25802 prompt, 25801 deltas and a 25803 answer', async () => {
    const { agent, ownerShard } = await demo(httpUrl, relayUrl);
    const me = newKey();
    const { ndk, set } = await connect(ownerShard, me);
    const p = prompt(me, agent, 'hello from NDK');
    const run = new RunCollector(me, agent);
    // Answers (25803/25805) are served only after AUTH: their REQ is answered auth-required: with
    // the challenge, the signIn policy authenticates, and NDK re-runs the subscription. Deltas
    // (25801) then reach the same, authenticated connection.
    const subscribed = (kinds: number[]) =>
      new Promise<{ stop: () => void }>((resolve) => {
        const sub = ndk.subscribe(
          { kinds: kinds as NDKKind[], '#p': [me.pk], '#e': [p.id] },
          { relaySet: set, closeOnEose: false, groupable: false, onEvent: (e) => run.take(e.rawEvent() as Event), onEose: () => resolve(sub) },
        );
      });
    const subs = [await within(subscribed([25803, 25805]), 10_000, 'EOSE after AUTH')];
    subs.push(await within(subscribed([25801]), 10_000, 'EOSE of the deltas'));
    try {
      await publish(ndk, set, p);
      await within(run.done, 20_000, 'the answer');
    } finally {
      for (const sub of subs) sub.stop();
    }
    expect(run.terminal).toMatchObject({ kind: 25803, payload: { text: 'echo: hello from NDK' } });
    expect(run.streamed).toBe('echo: hello from NDK');
  });
});
