// The relay client (src/shared/relay-client.ts) against the real Worker under `wrangler dev`:
// publish with OK, REQ/EOSE/live events, invalid events, timeouts on a dead socket, reconnects
// with subscriptions resumed (and nothing re-published), COUNT, NOTICE, and NIP-42 AUTH with one
// retry after `auth-required:`.

import { afterEach, describe, expect, inject, it } from 'vitest';
import { createServer } from 'node:net';
import { verifyEvent } from 'nostr-tools/pure';
import { parseRejection } from '../../src/shared/errors.js';
import type { NostrEvent } from '../../src/shared/event.js';
import type { ConnectionStatus } from '../../src/shared/relay-client.js';
import { clientFactory, fetchIds, newKey, nowSeconds, signed, signer, sleep, waitFor } from './helpers.js';

const relayUrl = inject('relayUrl');
const { create, closeAll } = clientFactory();
afterEach(closeAll);

const GIFT_WRAP = 1059;
const fastReconnect = { initialDelayMs: 50, maxDelayMs: 200 };

/** A local port with nothing listening on it. */
function deadPort(): Promise<number> {
  return new Promise((resolve) => {
    const s = createServer();
    s.listen(0, '127.0.0.1', () => {
      const a = s.address();
      s.close(() => resolve(typeof a === 'object' && a ? a.port : 1));
    });
  });
}

describe('publish', () => {
  it('resolves with the relay OK (true), and a re-sent event is a duplicate', async () => {
    const { client } = create(relayUrl);
    const e = signed(newKey(), 1, 'hello from the e2e test');
    const first = await client.publish(e);
    expect(first).toEqual({ ok: true, message: '' });
    const again = await client.publish(e);
    expect(again.ok).toBe(true);
    expect(parseRejection(again.message)?.prefix).toBe('duplicate');
  });

  it('resolves ok=false with an invalid: message for a tampered event or signature', async () => {
    const { client } = create(relayUrl);
    const e = signed(newKey(), 1, 'original');
    const tampered = { ...e, content: 'tampered' };
    const r1 = await client.publish(tampered);
    expect(r1.ok).toBe(false);
    expect(parseRejection(r1.message)?.prefix).toBe('invalid');

    const badSig = { ...e, sig: (e.sig[0] === '0' ? '1' : '0') + e.sig.slice(1) };
    const r2 = await client.publish(badSig);
    expect(r2.ok).toBe(false);
    expect(parseRejection(r2.message)?.prefix).toBe('invalid');
    // Neither was stored.
    expect(await fetchIds(client, [{ ids: [e.id] }])).toEqual([]);
  });

  it('times out when the socket is dead (frames vanish) and the relay never got the event', async () => {
    const dead = create(relayUrl, {}, (frame) => frame.startsWith('["EVENT"'));
    expect((await dead.client.connect()).ok).toBe(true);
    const e = signed(newKey(), 1, 'into the void');
    const started = Date.now();
    const r = await dead.client.publish(e, { timeoutMs: 400 });
    expect(r.ok).toBe(false);
    expect(r.timeout).toBe(true);
    expect(Date.now() - started).toBeGreaterThanOrEqual(390);
    expect(dead.sentTypes()).toContain('EVENT');
    const { client } = create(relayUrl);
    expect(await fetchIds(client, [{ ids: [e.id] }])).toEqual([]);
  });

  it('times out when the relay is unreachable, keeps retrying with backoff, and close() stops it', async () => {
    const statuses: ConnectionStatus[] = [];
    const { client, sockets } = create(`ws://127.0.0.1:${await deadPort()}`, {
      reconnect: fastReconnect,
      onStatus: (s) => statuses.push(s),
    });
    const r = await client.publish(signed(newKey(), 1, 'nobody home'), { timeoutMs: 600 });
    expect(r).toMatchObject({ ok: false, timeout: true });
    expect(sockets.length).toBeGreaterThanOrEqual(3); // 1 + retries at ≤ 50, ≤ 100, ≤ 200 ms …
    expect(statuses).toContain('waiting');
    expect(statuses).not.toContain('open');
    client.close();
    const attempts = sockets.length;
    await sleep(400);
    expect(sockets.length).toBe(attempts);
    expect(client.status).toBe('closed');
    expect(await client.publish(signed(newKey(), 1, 'after close'))).toEqual({ ok: false, message: 'error: client closed' });
  });

  it('gets OK false invalid: for an oversized event (sent id-first so the relay can name it)', async () => {
    const { client } = create(relayUrl);
    const e = signed(newKey(), 1, 'x'.repeat(300_000));
    const r = await client.publish(e);
    expect(r.ok).toBe(false);
    expect(parseRejection(r.message)?.prefix).toBe('invalid');
  });
});

describe('subscribe', () => {
  it('delivers stored events (newest first), then EOSE, then live events; close() stops delivery', async () => {
    const key = newKey();
    const { client: writer } = create(relayUrl);
    const t = nowSeconds();
    const older = signed(key, 1, 'older', [], t - 20);
    const newer = signed(key, 1, 'newer', [], t - 10);
    expect((await writer.publish(older)).ok).toBe(true);
    expect((await writer.publish(newer)).ok).toBe(true);

    const { client: reader } = create(relayUrl);
    const log: string[] = [];
    const sub = reader.subscribe([{ authors: [key.pk], kinds: [1] }], {
      onEvent: (e) => log.push(e.id),
      onEose: () => log.push('EOSE'),
    });
    await waitFor(() => log.includes('EOSE'), 'EOSE');
    expect(log).toEqual([newer.id, older.id, 'EOSE']);

    const live = signed(key, 1, 'live');
    expect((await writer.publish(live)).ok).toBe(true);
    await waitFor(() => log.length === 4, 'the live event');
    expect(log[3]).toBe(live.id);

    sub.close();
    const after = signed(key, 1, 'after close');
    expect((await writer.publish(after)).ok).toBe(true);
    // A round trip on the reader's socket: a broadcast of `after` would have arrived before it.
    expect(await reader.count([{ authors: [key.pk] }])).toMatchObject({ ok: true, count: 4 });
    expect(log).toHaveLength(4);
  });

  it('drops events that the verify callback refuses', async () => {
    const key = newKey();
    const { client: writer } = create(relayUrl);
    const keep = signed(key, 1, 'keep');
    const drop = signed(key, 1, 'drop-me');
    for (const e of [keep, drop]) expect((await writer.publish(e)).ok).toBe(true);
    const verified: string[] = [];
    const { client: reader } = create(relayUrl, {
      verify: (e: NostrEvent) => {
        verified.push(e.id);
        return e.content !== 'drop-me' && verifyEvent({ ...e });
      },
    });
    const ids = await fetchIds(reader, [{ authors: [key.pk] }]);
    expect(verified.sort()).toEqual([keep.id, drop.id].sort());
    expect(ids).toEqual([keep.id]);
  });

  it('counts with NIP-45 COUNT', async () => {
    const key = newKey();
    const { client } = create(relayUrl);
    for (let i = 0; i < 3; i++) expect((await client.publish(signed(key, 1, `n${i}`))).ok).toBe(true);
    expect(await client.count([{ authors: [key.pk], kinds: [1] }])).toEqual({ ok: true, count: 3, approximate: false });
    expect(await client.count([{ authors: [key.pk], kinds: [7] }])).toEqual({ ok: true, count: 0, approximate: false });
  });

  it('reports NOTICE messages', async () => {
    const notices: string[] = [];
    const { client, sockets } = create(relayUrl, { onNotice: (m) => notices.push(m) });
    expect((await client.connect()).ok).toBe(true);
    sockets[0]!.ws.send(Buffer.from('binary'), { binary: true });
    await waitFor(() => notices.length > 0, 'a NOTICE');
    expect(parseRejection(notices[0]!)?.prefix).toBe('invalid');
  });
});

describe('reconnect', () => {
  it('reconnects after the connection drops and resumes the subscription with the same filters', async () => {
    const key = newKey();
    const { client: writer } = create(relayUrl);
    const stored = signed(key, 1, 'stored before the drop');
    expect((await writer.publish(stored)).ok).toBe(true);

    const statuses: ConnectionStatus[] = [];
    const { client, sockets } = create(relayUrl, { reconnect: fastReconnect, onStatus: (s) => statuses.push(s) });
    const ids: string[] = [];
    let eoses = 0;
    client.subscribe([{ authors: [key.pk] }], { onEvent: (e) => ids.push(e.id), onEose: () => eoses++ });
    await waitFor(() => eoses === 1, 'the first EOSE');
    expect(ids).toEqual([stored.id]);

    sockets[0]!.ws.terminate(); // abrupt drop, as when a network path dies
    await waitFor(() => eoses === 2, 'EOSE of the re-sent REQ');
    expect(sockets).toHaveLength(2);
    expect(statuses).toEqual(['connecting', 'open', 'waiting', 'connecting', 'open']);
    const reqs = sockets.map((s) => s.sent.filter((f) => f.startsWith('["REQ"')));
    expect(reqs[1]).toEqual(reqs[0]); // same id and filters (no `since` added)
    expect(ids).toEqual([stored.id, stored.id]); // replayed, since the filter is unchanged

    const live = signed(key, 1, 'live after the reconnect');
    expect((await writer.publish(live)).ok).toBe(true);
    await waitFor(() => ids.length === 3, 'the live event after reconnect');
    expect(ids[2]).toBe(live.id);
  });

  it('reconnects after the server closes the socket (1009: a frame over the runtime limit of 32 MiB)', async () => {
    const key = newKey();
    const { client, sockets } = create(relayUrl, { reconnect: fastReconnect });
    let eoses = 0;
    const ids: string[] = [];
    client.subscribe([{ authors: [key.pk] }], { onEvent: (e) => ids.push(e.id), onEose: () => eoses++ });
    await waitFor(() => eoses === 1, 'the first EOSE');
    // workerd closes a connection whose frame exceeds 32 MiB (the relay's own limit only NOTICEs).
    // Sending that much through wrangler's local proxy takes about 10 s.
    const closed = new Promise<number>((r) => sockets[0]!.ws.once('close', (code) => r(code)));
    sockets[0]!.ws.send('["REQ","big",' + JSON.stringify({ '#t': ['x'.repeat(32 * 1024 * 1024)] }) + ']');
    expect(await closed).toBe(1009);
    await waitFor(() => eoses === 2, 'EOSE after the reconnect');
    expect(sockets).toHaveLength(2);
    const { client: writer } = create(relayUrl);
    const live = signed(key, 1, 'after server close');
    expect((await writer.publish(live)).ok).toBe(true);
    await waitFor(() => ids.includes(live.id), 'the live event');
  });

  it('fails a publish in flight when the connection drops and does not re-publish it', async () => {
    // The first socket swallows EVENT frames, so no OK can come back before the drop.
    const t = create(relayUrl, { reconnect: fastReconnect }, (frame, socket) => socket === 0 && frame.startsWith('["EVENT"'));
    expect((await t.client.connect()).ok).toBe(true);
    const e = signed(newKey(), 1, 'in flight');
    const pending = t.client.publish(e, { timeoutMs: 10_000 });
    await waitFor(() => t.sentTypes().includes('EVENT'), 'the EVENT frame');
    t.sockets[0]!.ws.terminate();
    const r = await pending;
    expect(r.ok).toBe(false);
    expect(r.timeout).toBeUndefined();
    expect(r.message).toMatch(/^error: connection/);
    await waitFor(() => t.client.status === 'open' && t.sockets.length === 2, 'the reconnect');
    await sleep(200);
    expect(t.sockets[1]!.sent.filter((f) => f.startsWith('["EVENT"'))).toEqual([]);
    const { client } = create(relayUrl);
    expect(await fetchIds(client, [{ ids: [e.id] }])).toEqual([]);
  });
});

describe('NIP-42 AUTH', () => {
  const giftWrapTo = (pk: string): NostrEvent => signed(newKey(), GIFT_WRAP, 'opaque ciphertext', [['p', pk]]);

  it('without a signer, a private REQ and COUNT end with auth-required:', async () => {
    const me = newKey();
    const { client, sentTypes } = create(relayUrl);
    expect((await client.connect()).ok).toBe(true);
    const closed = await new Promise<string>((resolve) => {
      client.subscribe([{ kinds: [GIFT_WRAP], '#p': [me.pk] }], { onEvent: () => undefined, onClosed: resolve });
    });
    expect(parseRejection(closed)?.prefix).toBe('auth-required');
    const counted = await client.count([{ kinds: [GIFT_WRAP], '#p': [me.pk] }]);
    expect(counted.ok).toBe(false);
    expect(!counted.ok && parseRejection(counted.message)?.prefix).toBe('auth-required');
    expect(sentTypes()).not.toContain('AUTH');
    expect(client.challenge).toMatch(/^[0-9a-f]{32}$/); // sent by the relay with its auth-required: answer
  });

  it('authenticate() before any challenge asks for one (a bare ["AUTH"]) and authenticates', async () => {
    const me = newKey();
    const { client, sockets } = create(relayUrl, { auth: signer(me), authOn: 'demand' });
    expect((await client.connect()).ok).toBe(true);
    expect(client.challenge).toBeUndefined(); // edgestr sends no challenge on connect
    expect(await client.authenticate()).toEqual({ ok: true, message: '' });
    expect(client.authenticatedAs).toBe(me.pk);
    const sent = sockets[0]!.sent.map((f) => JSON.parse(f) as unknown[]);
    expect(sent.map((f) => [f[0], f.length])).toEqual([['AUTH', 1], ['AUTH', 2]]);
  });

  it('by default answers a challenge whenever it comes: a private REQ is served after one round trip', async () => {
    const me = newKey();
    const { client: writer } = create(relayUrl);
    const stored = giftWrapTo(me.pk);
    expect((await writer.publish(stored)).ok).toBe(true);
    const { client, sentTypes } = create(relayUrl, { auth: signer(me) });
    expect(await fetchIds(client, [{ kinds: [GIFT_WRAP], '#p': [me.pk] }])).toEqual([stored.id]);
    expect(sentTypes()).toEqual(['REQ', 'AUTH', 'REQ', 'CLOSE']);
    expect(client.authenticatedAs).toBe(me.pk);
  });

  it('on demand: a refused REQ is retried once after authenticating, and then serves the gift wrap', async () => {
    const me = newKey();
    const { client: writer } = create(relayUrl);
    const stored = giftWrapTo(me.pk);
    expect((await writer.publish(stored)).ok).toBe(true);

    const { client, sentTypes } = create(relayUrl, { auth: signer(me), authOn: 'demand' });
    const ids: string[] = [];
    const closed: string[] = [];
    let eose = false;
    client.subscribe([{ kinds: [GIFT_WRAP], '#p': [me.pk] }], {
      onEvent: (e) => ids.push(e.id),
      onEose: () => (eose = true),
      onClosed: (m) => closed.push(m),
    });
    await waitFor(() => eose, 'EOSE after authenticating');
    expect(closed).toEqual([]);
    expect(ids).toEqual([stored.id]);
    expect(sentTypes()).toEqual(['REQ', 'AUTH', 'REQ']);
    expect(client.authenticatedAs).toBe(me.pk);

    const live = giftWrapTo(me.pk);
    expect((await writer.publish(live)).ok).toBe(true);
    await waitFor(() => ids.length === 2, 'the live gift wrap');
    expect(ids[1]).toBe(live.id);
  });

  it('on demand: a publish refused with auth-required: (NIP-70) is retried once after authenticating', async () => {
    const me = newKey();
    const { client, sentTypes } = create(relayUrl, { auth: signer(me), authOn: 'demand' });
    const e = signed(me, 1, 'protected note', [['-']]);
    const r = await client.publish(e);
    expect(r).toEqual({ ok: true, message: '' });
    expect(sentTypes()).toEqual(['EVENT', 'AUTH', 'EVENT']);
    const count = await client.count([{ kinds: [GIFT_WRAP], '#p': [me.pk] }]);
    expect(count).toEqual({ ok: true, count: 0, approximate: false }); // already authenticated: no retry needed
    expect(sentTypes()).toEqual(['EVENT', 'AUTH', 'EVENT', 'COUNT']);
  });

  it('retries only once: a signer the relay refuses leaves the subscription closed with auth-required:', async () => {
    const me = newKey();
    const wrongRelay = signer(me);
    const { client, sentTypes } = create(relayUrl, {
      authOn: 'demand',
      auth: (t) => wrongRelay({ ...t, tags: t.tags.map((tag) => (tag[0] === 'relay' ? ['relay', 'ws://elsewhere.example'] : tag)) }),
    });
    const closed = await new Promise<string>((resolve) => {
      client.subscribe([{ kinds: [GIFT_WRAP], '#p': [me.pk] }], { onEvent: () => undefined, onClosed: resolve });
    });
    expect(parseRejection(closed)?.prefix).toBe('auth-required');
    expect(closed).toContain('authentication failed');
    expect(sentTypes()).toEqual(['REQ', 'AUTH']);
    expect(client.authenticatedAs).toBeUndefined();
  });

  it('authenticates again after a reconnect and resumes a private subscription', async () => {
    const me = newKey();
    const { client: writer } = create(relayUrl);
    const { client, sockets } = create(relayUrl, { auth: signer(me), reconnect: fastReconnect });
    const ids: string[] = [];
    const closed: string[] = [];
    let eoses = 0;
    client.subscribe([{ kinds: [GIFT_WRAP], '#p': [me.pk] }], {
      onEvent: (e) => ids.push(e.id),
      onEose: () => eoses++,
      onClosed: (m) => closed.push(m),
    });
    await waitFor(() => eoses === 1, 'the first EOSE');
    sockets[0]!.ws.terminate();
    await waitFor(() => eoses === 2, 'EOSE after the reconnect');
    expect(client.authenticatedAs).toBe(me.pk);
    expect(sockets[1]!.sent.some((f) => f.startsWith('["AUTH"'))).toBe(true);
    const live = giftWrapTo(me.pk);
    expect((await writer.publish(live)).ok).toBe(true);
    await waitFor(() => ids.includes(live.id), 'the live gift wrap');
    expect(closed).toEqual([]);
  });
});
