// Enforced limits: subscriptions per connection, and rate limits per connection, per pubkey (on
// connections authenticated as it: relay-replay-limits.test.ts) and per IP (which a reconnect does
// not reset). The rate-limit tests freeze the clock (the shard runs in the test's isolate and reads
// the same Date), so each bucket's answer is exact: its burst is accepted and nothing more until the
// clock is moved on, however slow the machine. And how a shard reads RELAY_LIMITS: a key an earlier
// version named otherwise under its new name, a wrong field ignored (its default kept), never a crash.
import { env, runInDurableObject, SELF } from 'cloudflare:test';
import { TestSocket } from '../support/test-socket.js';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { SHARD_HEADER } from '../../workers/common/shards.js';
import { edgeStub } from '../../workers/common/edges.js';
import { RelayShard } from '../../workers/relay-do/shard.js';
import { DEFAULT_LIMITS } from '../../workers/relay-do/limits.js';
import type { NostrEvent } from '../../src/shared/event.js';
import { subscriptionMemory } from '../../workers/relay-do/subscription-memory.js';
import { connect, connectEdgeObject, edgesOf, freshOwner, keys, randomHex, Sentinel, sign } from './helpers.js';

describe('limits', () => {
  it(`allows ${DEFAULT_LIMITS.max_subscriptions} subscriptions per connection, refuses one more, and accepts replacing one`, async () => {
    const s = await connect(`/r/${freshOwner().pk}`);
    for (let i = 0; i < DEFAULT_LIMITS.max_subscriptions; i++) expect((await s.req(`s${i}`, { kinds: [1] })).closed).toBeUndefined();
    expect((await s.req('one-more', { kinds: [1] })).closed).toBe(
      `rate-limited: too many open subscriptions (max ${DEFAULT_LIMITS.max_subscriptions}); close one first`,
    );
    expect((await s.req('s0', { kinds: [2] })).closed).toBeUndefined();
    s.send(['CLOSE', 's1']);
    // CLOSE has no answer, and frames sent back to back can reach the shard out of order in this
    // test runtime (over a real socket they do not: test/e2e/relay-ordering.test.ts): the freed slot
    // is asked for until the CLOSE has landed.
    let closed = (await s.req('now-fits', { kinds: [1] })).closed;
    for (let i = 0; i < 20 && closed !== undefined; i++) closed = (await s.req(`now-fits-${i}`, { kinds: [1] })).closed;
    expect(closed).toBeUndefined();
  });

  it('a connection holds at most max_subscription_memory_per_connection of filters; replacing or closing one makes room', async () => {
    const s = await connect(`/r/${freshOwner().pk}`);
    const feed = () => ({ authors: Array.from({ length: 1000 }, () => randomHex()) });
    const weight = subscriptionMemory([feed()]);
    const cap = DEFAULT_LIMITS.max_subscription_memory_per_connection;
    const fit = Math.floor(cap / weight);
    expect(fit).toBe(5); // five follow feeds of 1,000 authors
    for (let i = 0; i < fit; i++) expect((await s.req(`feed${i}`, feed())).closed).toBeUndefined();
    expect((await s.req('one-more', feed())).closed).toBe(
      `rate-limited: the subscriptions of this connection would hold ${(fit + 1) * weight} bytes of filters (max ${cap}); close one first`,
    );
    // A small subscription still fits; replacing a feed by another counts the new one only.
    expect((await s.req('small', { kinds: [1], limit: 1 })).closed).toBeUndefined();
    expect((await s.req('feed0', feed())).closed).toBeUndefined();
    s.send(['CLOSE', 'feed1']);
    // Frames sent back to back can reach the shard out of order in this test runtime: asked again until the CLOSE has landed.
    let closed = (await s.req('now-fits', feed())).closed;
    for (let i = 0; i < 20 && closed !== undefined; i++) closed = (await s.req(`now-fits-${i}`, feed())).closed;
    expect(closed).toBeUndefined();
    s.close();
  });

  it('a shard (an edge object: its connections) holds at most max_subscription_memory of filters in all, and makes room as connections close', async () => {
    const path = `/r/${freshOwner().pk}`;
    const feed = () => ({ authors: Array.from({ length: 1000 }, () => randomHex()) });
    const weight = subscriptionMemory([feed()]);
    const perConnection = Math.floor(DEFAULT_LIMITS.max_subscription_memory_per_connection / weight);
    const perObject = Math.floor(DEFAULT_LIMITS.max_subscription_memory / weight);
    const sockets: TestSocket[] = [];
    let accepted = 0;
    let refused: string | undefined;
    // Until one object of the shard is full: K objects of perObject feeds at most, however the connections spread.
    for (let c = 0; refused === undefined && c < Math.ceil((edgesOf(null) * perObject) / perConnection) + 2; c++) {
      const s = await connect(path);
      sockets.push(s);
      for (let i = 0; i < perConnection && refused === undefined; i++) {
        const closed = (await s.req(`feed${i}`, feed())).closed;
        if (closed === undefined) accepted++;
        else refused = closed;
      }
    }
    expect(refused).toBe(`error: this relay shard holds too many subscriptions (max ${DEFAULT_LIMITS.max_subscription_memory} bytes of filters); try again later`);
    expect(accepted).toBeGreaterThanOrEqual(perObject);
    for (const s of sockets) s.close();
    // The closes land in their own time; a new connection's feed fits once they have.
    const s = await connect(path);
    await expect.poll(async () => (await s.req(`again-${randomHex(4)}`, feed())).closed, { timeout: 10_000 }).toBeUndefined();
    s.close();
  });

  it('refuses a WebSocket upgrade past max_connections with 503 and says why; NIP-11 still answers and advertises the cap', async () => {
    const stub = env.RELAY_SHARD.get(env.RELAY_SHARD.newUniqueId());
    const answers = await runInDurableObject(stub, async (_i, state) => {
      // A shard object with a cap of 2 over this storage (RELAY_LIMITS is the deployment's setting).
      const shard = new RelayShard(state, { ...env, RELAY_LIMITS: JSON.stringify({ max_connections: 2 }) });
      const upgrade = () => shard.fetch(new Request('http://relay.test/', { headers: { Upgrade: 'websocket', [SHARD_HEADER]: 'public' } }));
      const statuses = [(await upgrade()).status, (await upgrade()).status];
      const refused = await upgrade();
      const info = await shard.fetch(new Request('http://relay.test/', { headers: { Accept: 'application/nostr+json', [SHARD_HEADER]: 'public' } }));
      const doc = (await info.json()) as { limitation: { max_connections: number } };
      return { statuses, refused: [refused.status, await refused.text()], info: [info.status, doc.limitation.max_connections] };
    });
    expect(answers).toEqual({
      statuses: [101, 101],
      refused: [503, 'this relay shard is full (2 connections); try again later'],
      info: [200, 2],
    });
  });

  it('refuses an upgrade from an address (an IPv6 /64) holding max_connections_per_ip sockets with 429; others, agents and closed sockets do not count', async () => {
    const stub = env.RELAY_SHARD.get(env.RELAY_SHARD.newUniqueId());
    const answers = await runInDurableObject(stub, async (_i, state) => {
      const shard = new RelayShard(state, { ...env, RELAY_LIMITS: JSON.stringify({ max_connections_per_ip: 2 }) });
      const upgrade = (headers: Record<string, string>) =>
        shard.fetch(new Request('http://relay.test/', { headers: { Upgrade: 'websocket', [SHARD_HEADER]: 'public', ...headers } }));
      const from = (ip: string) => upgrade({ 'CF-Connecting-IP': ip });
      const first = await from('2001:db8:7:7::1');
      const statuses = [first.status, (await from('2001:db8:7:7:ffff::2')).status];
      const refused = await from('2001:db8:7:7:1:2:3:4');
      const others = [
        (await from('2001:db8:7:8::1')).status, // the next /64
        (await from('198.51.100.20')).status,
        (await upgrade({ 'CF-Connecting-IP': '2001:db8:7:7::9', 'x-edgestr-internal': 'agent' })).status, // edgestr's own agent
        (await upgrade({})).status, // no address known (never on Cloudflare)
        (await upgrade({})).status,
      ];
      // A closed socket frees its place.
      const client = first.webSocket!;
      client.accept();
      client.close(1000, 'bye');
      let again = await from('2001:db8:7:7::1');
      for (let i = 0; i < 50 && again.status !== 101; i++) {
        await new Promise((r) => setTimeout(r, 20));
        again = await from('2001:db8:7:7::1');
      }
      const info = await shard.fetch(new Request('http://relay.test/', { headers: { Accept: 'application/nostr+json', [SHARD_HEADER]: 'public' } }));
      const doc = (await info.json()) as { limitation: { max_connections_per_ip: number } };
      return { statuses, refused: [refused.status, await refused.text()], others, again: again.status, advertised: doc.limitation.max_connections_per_ip };
    });
    expect(answers).toEqual({
      statuses: [101, 101],
      refused: [429, 'too many connections from your address (max 2); close one first'],
      others: [101, 101, 101, 101, 101],
      again: 101,
      advertised: 2,
    });
  });

  it('RELAY_LIMITS with a key an earlier version named (max_connections_per_address, now max_connections_per_ip): the shard reads it under its new name and says so once per isolate', async () => {
    const warned = vi.spyOn(console, 'warn');
    const limits = JSON.stringify({ max_connections_per_address: 5 });
    const answers = await runInDurableObject(env.RELAY_SHARD.get(env.RELAY_SHARD.newUniqueId()), async (_i, state) => {
      const shard = new RelayShard(state, { ...env, RELAY_LIMITS: limits });
      new RelayShard(state, { ...env, RELAY_LIMITS: limits }); // another shard woken in the same isolate
      const from = () => shard.fetch(new Request('http://relay.test/', { headers: { Upgrade: 'websocket', [SHARD_HEADER]: 'public', 'CF-Connecting-IP': '198.51.100.77' } }));
      const statuses: number[] = [];
      for (let i = 0; i < 5; i++) statuses.push((await from()).status);
      const refused = await from();
      const info = await shard.fetch(new Request('http://relay.test/', { headers: { Accept: 'application/nostr+json', [SHARD_HEADER]: 'public' } }));
      const doc = (await info.json()) as { limitation: { max_connections_per_ip: number } };
      return { statuses, refused: [refused.status, await refused.text()], advertised: doc.limitation.max_connections_per_ip };
    });
    const warnings = warned.mock.calls.map((c) => c.join(' '));
    warned.mockRestore();
    expect(answers).toEqual({ statuses: [101, 101, 101, 101, 101], refused: [429, 'too many connections from your address (max 5); close one first'], advertised: 5 });
    expect(warnings).toEqual(['relay limits: RELAY_LIMITS.max_connections_per_address is now named max_connections_per_ip: its value is used as max_connections_per_ip; rename it in your configuration']);
  });

  it('RELAY_LIMITS still wrong at run time (a misspelt key, a bad value): the shard serves with its valid fields and the defaults of the others, and logs what is wrong once per isolate', async () => {
    const logged = vi.spyOn(console, 'error');
    const limits = '{"max_connections":2,"max_conections_per_ip":1,"max_subscriptions":0}';
    const answers = await runInDurableObject(env.RELAY_SHARD.get(env.RELAY_SHARD.newUniqueId()), async (_i, state) => {
      const shard = new RelayShard(state, { ...env, RELAY_LIMITS: limits });
      new RelayShard(state, { ...env, RELAY_LIMITS: limits });
      const upgrade = () => shard.fetch(new Request('http://relay.test/', { headers: { Upgrade: 'websocket', [SHARD_HEADER]: 'public' } }));
      const statuses = [(await upgrade()).status, (await upgrade()).status];
      const refused = await upgrade();
      const info = await shard.fetch(new Request('http://relay.test/', { headers: { Accept: 'application/nostr+json', [SHARD_HEADER]: 'public' } }));
      const doc = (await info.json()) as { limitation: { max_connections: number; max_subscriptions: number; max_connections_per_ip: number } };
      return { statuses, refused: [refused.status, await refused.text()], info: [info.status, doc.limitation] };
    });
    const errors = logged.mock.calls.map((c) => c.join(' ')).filter((l) => l.includes('RELAY_LIMITS'));
    logged.mockRestore();
    expect(answers).toMatchObject({
      statuses: [101, 101],
      refused: [503, 'this relay shard is full (2 connections); try again later'],
      info: [200, { max_connections: 2, max_subscriptions: DEFAULT_LIMITS.max_subscriptions, max_connections_per_ip: DEFAULT_LIMITS.max_connections_per_ip }],
    });
    expect(errors).toEqual([
      'relay limits: RELAY_LIMITS.max_subscriptions: Too small: expected number to be >0; RELAY_LIMITS: Unrecognized key: "max_conections_per_ip"; what is wrong is ignored: those limits keep their defaults until RELAY_LIMITS is fixed (npm run deploy refuses such a value)',
    ]);
  });

  it('RELAY_LIMITS that is not JSON: the shard serves with the default limits and says why', async () => {
    const logged = vi.spyOn(console, 'error');
    const answers = await runInDurableObject(env.RELAY_SHARD.get(env.RELAY_SHARD.newUniqueId()), async (_i, state) => {
      const shard = new RelayShard(state, { ...env, RELAY_LIMITS: '{max_connections: 2}' });
      const upgrade = await shard.fetch(new Request('http://relay.test/', { headers: { Upgrade: 'websocket', [SHARD_HEADER]: 'public' } }));
      const info = await shard.fetch(new Request('http://relay.test/', { headers: { Accept: 'application/nostr+json', [SHARD_HEADER]: 'public' } }));
      return [upgrade.status, info.status, ((await info.json()) as { limitation: { max_connections: number } }).limitation.max_connections];
    });
    const errors = logged.mock.calls.map((c) => c.join(' ')).filter((l) => l.includes('RELAY_LIMITS'));
    logged.mockRestore();
    expect(answers).toEqual([101, 200, DEFAULT_LIMITS.max_connections]);
    expect(errors).toEqual([
      'relay limits: RELAY_LIMITS is not JSON; what is wrong is ignored: those limits keep their defaults until RELAY_LIMITS is fixed (npm run deploy refuses such a value)',
    ]);
  });

  it('an address opens at most connections_burst_per_ip new connections at once, then connections_per_second_per_ip (429, closed ones count too); others, agents, loopback and unknown addresses are not held', async () => {
    const clock = freezeClock();
    const stub = env.RELAY_SHARD.get(env.RELAY_SHARD.newUniqueId());
    const answers = await runInDurableObject(stub, async (_i, state) => {
      const shard = new RelayShard(state, { ...env, RELAY_LIMITS: JSON.stringify({ connections_per_second_per_ip: 1, connections_burst_per_ip: 3 }) });
      const upgrade = async (headers: Record<string, string>) => {
        const res = await shard.fetch(new Request('http://relay.test/', { headers: { Upgrade: 'websocket', [SHARD_HEADER]: 'public', ...headers } }));
        if (res.webSocket) {
          res.webSocket.accept();
          res.webSocket.close(1000, 'churn'); // churn: each connection is closed at once
        }
        return res.status === 101 ? 101 : `${res.status} ${await res.text()}`;
      };
      const from = (ip: string) => upgrade({ 'CF-Connecting-IP': ip });
      const burst = [await from('203.0.113.30'), await from('203.0.113.30'), await from('203.0.113.30')];
      const refused = await from('203.0.113.30');
      const others = [
        await from('203.0.113.31'),
        await upgrade({ 'CF-Connecting-IP': '203.0.113.30', 'x-edgestr-internal': 'agent' }), // edgestr's own agent
        await upgrade({}), // no address known (never on Cloudflare)
        await upgrade({}),
        await upgrade({}),
        await upgrade({}),
        ...(await Promise.all([1, 2, 3, 4].map(() => from('127.0.0.1')))), // loopback: local runs, never a client on Cloudflare
      ];
      clock.advance(1000);
      const refilled = [await from('203.0.113.30'), await from('203.0.113.30')];
      const info = await shard.fetch(new Request('http://relay.test/', { headers: { Accept: 'application/nostr+json', [SHARD_HEADER]: 'public' } }));
      const doc = (await info.json()) as { limitation: { connections_per_second_per_ip: number; connections_burst_per_ip: number } };
      return { burst, refused, others, refilled, advertised: [doc.limitation.connections_per_second_per_ip, doc.limitation.connections_burst_per_ip] };
    });
    const slow = '429 too many new connections from your address (3 at once, then 1 per second); reconnect more slowly';
    expect(answers).toEqual({
      burst: [101, 101, 101],
      refused: slow,
      others: [101, 101, 101, 101, 101, 101, 101, 101, 101, 101],
      refilled: [101, slow],
      advertised: [1, 3],
    });
  });

  it(`through the router, one address holds at most ${DEFAULT_LIMITS.max_connections_per_ip} sockets of a shard (with K edges too: an address's connections land on one edge)`, async () => {
    const owner = freshOwner().pk;
    const path = `/r/${owner}`;
    const cap = DEFAULT_LIMITS.max_connections_per_ip;
    const sockets: TestSocket[] = [];
    let refused: string | undefined;
    for (let i = 0; refused === undefined && i <= edgesOf(owner) * cap; i++) {
      const res = await SELF.fetch(`http://relay.test${path}`, { headers: { Upgrade: 'websocket', 'CF-Connecting-IP': '192.0.2.200' } });
      if (res.webSocket) {
        res.webSocket.accept();
        sockets.push(new TestSocket(res.webSocket, `ws://relay.test${path}`));
      } else refused = `${res.status} ${await res.text()}`;
    }
    expect(refused).toBe(`429 too many connections from your address (max ${cap}); close one first`);
    expect(sockets.length).toBe(cap); // every connection of the address lands on the same object
    const other = await connect(path, { 'CF-Connecting-IP': '192.0.2.201' });
    expect(await other.req('still-open', { kinds: [1], limit: 1 })).toEqual({ events: [] });
    other.close();
    for (const s of sockets) s.close();
  });

  it('clamps limit to max_limit', async () => {
    // Only checks the clamp is applied, on an empty shard: a REQ with a huge limit still answers EOSE.
    const s = await connect(`/r/${freshOwner().pk}`);
    expect(await s.req('big', { kinds: [1], limit: 1_000_000 })).toEqual({ events: [] });
  });

  afterEach(() => {
    vi.useRealTimers();
  });

  /** Freezes Date (here and in the shard) at the current time; `advance(ms)` moves it on. */
  function freezeClock() {
    vi.useFakeTimers({ toFake: ['Date'] });
    vi.setSystemTime(Date.now());
    return { advance: (ms: number) => vi.setSystemTime(Date.now() + ms) };
  }

  /** Sends events without waiting, then collects their OKs. */
  async function flood(s: TestSocket, events: NostrEvent[]) {
    for (const e of events) s.send(['EVENT', e]);
    const answers = [];
    for (const e of events) answers.push(await s.next((f) => f[0] === 'OK' && f[1] === e.id));
    return answers as Array<[string, string, boolean, string]>;
  }

  /** Accepted count, and the distinct refusal messages (counted, not by position). */
  function tally(answers: Array<[string, string, boolean, string]>) {
    return { accepted: answers.filter((a) => a[2]).length, refusals: [...new Set(answers.filter((a) => !a[2]).map((a) => a[3]))] };
  }

  it('rate-limits events per connection after the burst, and refills at its rate', async () => {
    const clock = freezeClock();
    const owner = freshOwner();
    // The internal marker of edgestr's own agents is stripped by the router: no exemption from outside.
    const s = await connect(`/r/${owner.pk}`, { 'CF-Connecting-IP': '203.0.113.1', 'x-edgestr-internal': 'agent' });
    const burst = DEFAULT_LIMITS.events_burst_per_connection;
    const rate = DEFAULT_LIMITS.events_per_second_per_connection;
    // Ephemeral events from several authors, so only the connection's bucket can trip.
    const authors = Array.from({ length: 5 }, keys);
    const make = (n: number, tag: string) => Array.from({ length: n }, (_, i) => sign(authors[i % 5]!, { kind: 20000, tags: [['p', owner.pk]], content: `${tag}${i}` }));
    const message = 'rate-limited: slow down: too many events on this connection';
    expect(tally(await flood(s, make(burst + 40, 'a')))).toEqual({ accepted: burst, refusals: [message] });
    clock.advance(1000);
    expect(tally(await flood(s, make(rate + 1, 'b')))).toEqual({ accepted: rate, refusals: [message] });
    expect(s.closed).toBeUndefined();
  });

  it('rate-limits one pubkey on connections authenticated as it from several addresses (a reconnect does not reset it)', async () => {
    const clock = freezeClock();
    const owner = freshOwner();
    const burst = DEFAULT_LIMITS.events_burst_per_pubkey;
    const answers = [];
    for (let c = 0; c < 3; c++) {
      const s = await connect(`/r/${owner.pk}`, { 'CF-Connecting-IP': `198.51.100.${c}` });
      await s.auth(owner);
      answers.push(...(await flood(s, Array.from({ length: 90 }, (_, i) => sign(owner, { kind: 20000, content: `${c}/${i}` })))));
      s.close();
    }
    const message = 'rate-limited: slow down: too many events from this pubkey';
    expect(tally(answers)).toEqual({ accepted: burst, refusals: [message] });
    clock.advance(1000);
    const s = await connect(`/r/${owner.pk}`, { 'CF-Connecting-IP': '198.51.100.9' });
    await s.auth(owner);
    const rate = DEFAULT_LIMITS.events_per_second_per_pubkey;
    expect(tally(await flood(s, Array.from({ length: rate + 1 }, (_, i) => sign(owner, { kind: 20000, content: `later ${i}` }))))).toEqual({
      accepted: rate,
      refusals: [message],
    });
  });

  it('rate-limits one IP address across reconnects', async () => {
    const clock = freezeClock();
    const owner = freshOwner();
    const burst = DEFAULT_LIMITS.events_burst_per_ip;
    const rate = DEFAULT_LIMITS.events_per_second_per_ip;
    const authors = Array.from({ length: 20 }, keys);
    const make = (n: number, tag: string) => Array.from({ length: n }, (_, i) => sign(authors[i % 20]!, { kind: 20000, tags: [['p', owner.pk]], content: `${tag}${i}` }));
    const message = 'rate-limited: slow down: too many events from this address';
    const events = make(burst + 100, 'a');
    const answers = [];
    for (let i = 0; i < events.length; i += 80) {
      const s = await connect(`/r/${owner.pk}`, { 'CF-Connecting-IP': '192.0.2.77' });
      answers.push(...(await flood(s, events.slice(i, i + 80))));
      s.close();
    }
    expect(tally(answers)).toEqual({ accepted: burst, refusals: [message] });
    clock.advance(1000);
    const s = await connect(`/r/${owner.pk}`, { 'CF-Connecting-IP': '192.0.2.77' });
    expect(tally(await flood(s, make(rate + 1, 'b')))).toEqual({ accepted: rate, refusals: [message] });
  });

  it('the per-address buckets are taken before the signature is verified: badly signed events and unauthenticated frames from many connections cost at most the burst in verifications', async () => {
    freezeClock();
    const owner = freshOwner();
    const path = `/r/${owner.pk}`;
    const address = { 'CF-Connecting-IP': '192.0.2.93' };
    const k = keys();
    // Events: 8 connections × 70 (under each connection's burst of 100), signatures broken.
    const bad = (n: number) =>
      Array.from({ length: n }, (_, i) => {
        const e = sign(k, { content: `forged ${i} ${randomHex(4)}` });
        return { ...e, sig: e.sig.replace(/^./, (c) => (c === '0' ? '1' : '0')) };
      });
    const answers = [];
    for (let c = 0; c < 8; c++) answers.push(...(await flood(await connect(path, address), bad(70))));
    expect(tally(answers)).toEqual({ accepted: 0, refusals: ['invalid: signature verification failed', 'rate-limited: slow down: too many events from this address'] });
    expect(answers.filter((a) => a[3].startsWith('invalid:')).length).toBe(DEFAULT_LIMITS.events_burst_per_ip);
    // Frames: 2 connections × 600 (under each connection's burst of 1,000), from a key no connection authenticated as.
    const agent = keys();
    const frame = (i: number) => sign(agent, { kind: 24200, tags: [['p', owner.pk]], content: `frame ${i} ${randomHex(4)}` });
    const frames = [];
    for (let c = 0; c < 2; c++) frames.push(...(await flood(await connect(path, address), Array.from({ length: 600 }, (_, i) => frame(c * 600 + i)))));
    const limited = frames.filter((a) => a[3] === 'rate-limited: slow down: too many events from this address').length;
    expect(limited).toBe(1200 - DEFAULT_LIMITS.frames_burst_per_ip);
    expect(frames.filter((a) => a[3].startsWith('auth-required:')).length + frames.filter((a) => a[3].startsWith('invalid:')).length).toBe(DEFAULT_LIMITS.frames_burst_per_ip);
  });

  it('an address sends at most inbound_bytes_burst_per_ip of messages before they are parsed; past it an EVENT gets OK false, a REQ or COUNT CLOSED (a REQ ending the subscription of its id) and anything else a NOTICE, until the budget refills', async () => {
    const clock = freezeClock();
    const owner = freshOwner();
    const address = { 'CF-Connecting-IP': '192.0.2.94' };
    const junk = `[${'x'.repeat(200_000)}`; // not JSON: each costs a parse and is answered with a NOTICE
    const burst = DEFAULT_LIMITS.inbound_bytes_burst_per_ip;
    const rate = DEFAULT_LIMITS.inbound_bytes_per_second_per_ip;
    const served = Math.ceil(burst / junk.length);
    const sockets = [await connect(`/r/${owner.pk}`, address), await connect(`/r/${owner.pk}`, address)];
    expect(await sockets[0]!.req('feed', { kinds: [1], authors: [owner.pk] })).toEqual({ events: [] });
    const notices = [];
    for (let i = 0; i <= served; i++) {
      const s = sockets[i % 2]!;
      s.send(junk);
      notices.push((await s.next((f) => f[0] === 'NOTICE'))[1] as string);
    }
    const wait = Math.max(1, Math.ceil((1 + served * junk.length - burst) / rate));
    const limited = `rate-limited: slow down: this address sent too much (${rate} bytes/s); retry in ${wait} s`;
    expect(notices.slice(0, served).every((n) => n.startsWith('invalid:'))).toBe(true);
    expect(notices[served]).toBe(limited);
    // An EVENT is answered with its OK, read without parsing.
    const note = sign(owner, { content: 'while over budget' });
    expect(await sockets[0]!.publish(note)).toEqual(['OK', note.id, false, limited]);
    // A REQ and a COUNT are answered with CLOSED for their id, read without parsing; the refused REQ
    // replaced the subscription of its id, which is gone.
    expect(await sockets[0]!.req('feed', { kinds: [1], authors: [owner.pk] })).toEqual({ events: [], closed: limited });
    sockets[1]!.send(['COUNT', 'tally', { kinds: [1] }]);
    expect(await sockets[1]!.next((f) => f[0] === 'CLOSED')).toEqual(['CLOSED', 'tally', limited]);
    // Another address is not held; once the budget refills the address is served again.
    const other = await connect(`/r/${owner.pk}`, { 'CF-Connecting-IP': '192.0.2.95' });
    expect((await other.req('fine', { kinds: [1], limit: 1 })).events).toEqual([]);
    clock.advance(wait * 1000);
    expect(await sockets[1]!.publish(note)).toEqual(['OK', note.id, true, '']);
    const sentinel = await Sentinel.arm(sockets[0]!, other, owner);
    expect((await other.publish(sign(owner, { content: 'for a subscription that was refused' })))[2]).toBe(true);
    expect(await sockets[0]!.silence((f) => f[0] === 'EVENT' && f[1] === 'feed', sentinel)).toBe(true);
  });

  it('live events sent to one address are budgeted: deliveries_burst_per_ip, then deliveries_per_second_per_ip; past it a subscription that would get one is closed rate-limited; another address gets every event', async () => {
    freezeClock();
    const owner = freshOwner();
    const path = `/r/${owner.pk}`;
    const burst = DEFAULT_LIMITS.deliveries_burst_per_ip;
    const rate = DEFAULT_LIMITS.deliveries_per_second_per_ip;
    const perConn = DEFAULT_LIMITS.max_subscriptions;
    const feed = { kinds: [1], authors: [owner.pk] };
    // One address: 10 connections × every subscription they may hold, each matching every note.
    const hoarders: TestSocket[] = [];
    for (let c = 0; c < 10; c++) {
      const s = await connect(path, { 'CF-Connecting-IP': '192.0.2.97' });
      for (let i = 0; i < perConn; i++) expect(await s.req(`h${i}`, feed)).toEqual({ events: [] });
      hoarders.push(s);
    }
    const subs = hoarders.length * perConn;
    const observer = await connect(path, { 'CF-Connecting-IP': '192.0.2.98' });
    expect(await observer.req('all', feed)).toEqual({ events: [] });
    const writer = await connect(path);
    const count = Math.ceil(burst / subs) + 1; // the last one finds the budget empty for every subscription left
    const notes = Array.from({ length: count }, (_, i) => sign(owner, { content: `live ${i}` }));
    for (const e of notes) expect((await writer.publish(e))[2]).toBe(true);
    for (const e of notes) await observer.next((f) => f[0] === 'EVENT' && f[1] === 'all' && (f[2] as { id: string }).id === e.id);
    const limited = `rate-limited: too many live events for your address (${rate} per second); subscribe again later`;
    const closed: string[] = [];
    for (const s of hoarders) for (let i = 0; i < perConn; i++) closed.push((await s.next((f) => f[0] === 'CLOSED'))[2] as string);
    expect(new Set(closed)).toEqual(new Set([limited]));
    const delivered = hoarders.reduce((n, s) => n + s.frames.filter((f) => f[0] === 'EVENT').length, 0);
    expect(delivered).toBe(burst);
    for (const s of [...hoarders, observer, writer]) s.close();
  }, 60_000);

  it('the stored rows an address\'s REQs and COUNTs read are budgeted (scan_rows_burst_per_ip, then scan_rows_per_second_per_ip), returned or not; another address is not held', async () => {
    const clock = freezeClock();
    const owner = freshOwner();
    const path = `/r/${owner.pk}`;
    // 20,000 notes: a COUNT of kind 1 reads every one of them (what it counts), returning one number.
    await storeNotes(owner.pk, 20_000);
    const address = { 'CF-Connecting-IP': '192.0.2.99' };
    const stranger = keys();
    const open = async () => {
      const s = await connect(path, address);
      await s.auth(stranger);
      return s;
    };
    const rate = DEFAULT_LIMITS.scan_rows_per_second_per_ip;
    const refusal = new RegExp(`^rate-limited: slow down: this address's queries read too many stored rows \\(${rate} rows/s\\); retry in (\\d+) s$`);
    let s = await open();
    let served = 0;
    let closed: string | undefined;
    for (let i = 0; closed === undefined && i < 400; i++) {
      if (i > 0 && i % 50 === 0) {
        s.close(); // a connection's request bucket holds 100; a reconnect does not reset the address's budget
        s = await open();
      }
      s.send(['COUNT', `c${i}`, { kinds: [1] }]);
      const answer = await s.next((f) => (f[0] === 'COUNT' || f[0] === 'CLOSED') && f[1] === `c${i}`);
      if (answer[0] === 'COUNT') {
        expect(answer[2]).toEqual({ count: 20_000 });
        served++;
      } else closed = answer[2] as string;
    }
    expect(closed).toMatch(refusal);
    // Each COUNT read at least the 20,000 notes: the burst allowed about burst / 20,000 of them.
    expect(served).toBeGreaterThanOrEqual(2);
    expect(served).toBeLessThanOrEqual(Math.ceil(DEFAULT_LIMITS.scan_rows_burst_per_ip / 20_000));
    // A REQ is held the same way.
    expect((await s.req('r', { kinds: [1], limit: 1 })).closed).toMatch(refusal);
    // Another address is not held.
    const other = await connect(path, { 'CF-Connecting-IP': '192.0.2.100' });
    expect((await other.req('fine', { kinds: [1], limit: 1 })).events).toHaveLength(1);
    clock.advance(Number(refusal.exec(closed!)![1]) * 1000);
    expect((await s.req('again', { kinds: [1], limit: 1 })).events).toHaveLength(1);
    s.close();
    other.close();
  }, 60_000);

  /** Stores `n` kind 1 notes of strangers on the shard of `owner` directly (no write path: fast), once the shard knows its owner. */
  async function storeNotes(owner: string, n: number) {
    (await connect(`/r/${owner}`)).close(); // the shard knows its owner
    await runInDurableObject(env.RELAY_SHARD.get(env.RELAY_SHARD.idFromName(`owner:${owner}`)), (instance, state) => {
      const store = (instance as unknown as { store: { insertInTransaction(e: NostrEvent, raw: string): unknown } }).store;
      state.storage.transactionSync(() => {
        for (let i = 0; i < n; i++) {
          const e: NostrEvent = { id: randomHex(32), pubkey: randomHex(32), kind: 1, created_at: 1_700_000_000 + i, tags: [], content: 'x', sig: '0'.repeat(128) };
          store.insertInTransaction(e, JSON.stringify(e));
        }
      });
    });
  }

  /** Sends `perSocket` queries (`message(i)`: a REQ or COUNT with subscription id `q${i}`) on each socket without waiting, then the answer each got (COUNT, EOSE or CLOSED). */
  async function pipelined(sockets: TestSocket[], perSocket: number, message: (i: number) => unknown[]) {
    for (let i = 0; i < perSocket; i++) for (const s of sockets) s.send(message(i));
    const answers: unknown[][] = [];
    for (const s of sockets) {
      for (let i = 0; i < perSocket; i++) answers.push(await s.next((f) => ['COUNT', 'EOSE', 'CLOSED'].includes(f[0] as string) && f[1] === `q${i}`, 30_000));
    }
    return answers;
  }

  it('COUNTs an address pipelines on many connections (sent without waiting for answers) read no more than its scan budget, with edge objects as without', async () => {
    freezeClock();
    const owner = freshOwner();
    await storeNotes(owner.pk, 20_000);
    // Three connections of one address (with edge objects: all on one edge), 100 COUNTs each (a connection's request burst).
    const sockets = [];
    for (let i = 0; i < 3; i++) sockets.push(await connect(`/r/${owner.pk}`, { 'CF-Connecting-IP': '192.0.2.97' }));
    const answers = await pipelined(sockets, DEFAULT_LIMITS.reqs_burst_per_connection, (i) => ['COUNT', `q${i}`, { kinds: [1] }]);
    const counted = answers.filter((f) => f[0] === 'COUNT');
    const refused = answers.filter((f) => f[0] !== 'COUNT');
    const rate = DEFAULT_LIMITS.scan_rows_per_second_per_ip;
    // Each COUNT read at least the 20,000 notes: the burst allows about burst / 20,000 of them, whatever the number in flight.
    expect(counted.length).toBeGreaterThanOrEqual(2);
    expect(counted.length).toBeLessThanOrEqual(Math.ceil(DEFAULT_LIMITS.scan_rows_burst_per_ip / 20_000));
    for (const f of counted) expect(f[2]).toEqual({ count: 20_000 });
    // Refused for its budget, or (at an edge) as more than the address may have waiting at once.
    const waiting = `rate-limited: slow down: this address has too many queries waiting (${DEFAULT_LIMITS.edge_queries_per_ip}); send more once they are answered`;
    const spent = new RegExp(`^rate-limited: slow down: this address's queries read too many stored rows \\(${rate} rows/s\\); retry in \\d+ s$`);
    for (const f of refused) expect(f[0]).toBe('CLOSED');
    for (const f of refused.filter((r) => r[2] !== waiting)) expect(f[2]).toMatch(spent);
    for (const s of sockets) s.close();
  }, 60_000);

  it('one address flooding its edge with cheap COUNTs (30 connections × 100) is refused past what it may have waiting; another address on that edge is answered within a few batches', async () => {
    const owner = freshOwner();
    const edge = edgeStub(env, owner.pk, 0);
    /** A socket on edge 0 of the shard, from `ip`, opened as the router opens it (in both test projects: K = 1 uses no edge by itself). */
    const onEdge = (ip: string) => connectEdgeObject(owner.pk, 0, ip);
    const victim = await onEdge('198.51.100.9');
    const note = sign(owner, { content: 'before the flood' });
    expect(await victim.publish(note)).toEqual(['OK', note.id, true, '']);
    // Each batch the edge sends its primary, in order: what it carried (the edge link's own calls, counted on the way).
    await runInDurableObject(edge, (instance) => {
      type Link = { primary: () => { edgeBatch(shard: string, ops: { op: string; event?: { id: string } }[]): Promise<unknown[]> } };
      const link = (instance as unknown as { edge(): Link }).edge();
      const primary = link.primary;
      const batches: string[][] = [];
      (globalThis as unknown as { floodBatches: string[][] }).floodBatches = batches;
      link.primary = () => ({
        edgeBatch: (shard, ops) => {
          batches.push(ops.map((o) => (o.op === 'event' ? `event ${o.event!.id}` : o.op)));
          return primary().edgeBatch(shard, ops);
        },
      });
    });
    const flooders = [];
    for (let i = 0; i < DEFAULT_LIMITS.max_connections_per_ip; i++) flooders.push(await onEdge('203.0.113.7'));
    const perSocket = DEFAULT_LIMITS.reqs_burst_per_connection;
    for (let n = 0; n < perSocket; n++) for (const s of flooders) s.send(['COUNT', `c${n}`, { ids: [randomHex(32)] }]);
    // A bare AUTH is answered by the edge itself, after the messages before it: then every COUNT has reached the edge.
    for (const s of flooders) s.send(['AUTH']);
    for (const s of flooders) await s.next((f) => f[0] === 'AUTH', 60_000);
    const target = sign(owner, { content: 'during the flood' });
    expect(await victim.publish(target)).toEqual(['OK', target.id, true, '']);
    const answers = [];
    for (const s of flooders) for (let n = 0; n < perSocket; n++) answers.push(await s.next((f) => (f[0] === 'COUNT' || f[0] === 'CLOSED') && f[1] === `c${n}`, 60_000));
    const batches = await runInDurableObject(edge, () => (globalThis as unknown as { floodBatches: string[][] }).floodBatches);
    // The flood's queries ahead of the victim's EVENT went in a few batches (before: 4 a batch, 750 batches).
    const carrying = batches.findIndex((b) => b.includes(`event ${target.id}`));
    expect(carrying).toBeGreaterThanOrEqual(0);
    expect(batches.slice(0, carrying).filter((b) => b.includes('count')).length).toBeLessThanOrEqual(3);
    // The flooder: its cheap COUNTs answered as far as it may have them waiting, the rest refused at once.
    const waiting = `rate-limited: slow down: this address has too many queries waiting (${DEFAULT_LIMITS.edge_queries_per_ip}); send more once they are answered`;
    const refused = answers.filter((f) => f[0] === 'CLOSED');
    expect(refused.length).toBeGreaterThan(0);
    for (const f of refused) expect(f[2]).toBe(waiting);
    for (const f of answers.filter((a) => a[0] === 'COUNT')) expect(f[2]).toEqual({ count: 0 });
    for (const s of [...flooders, victim]) s.close();
  }, 120_000);

  it('REQs an address pipelines on many connections read no more than its read budget (the same answers as one after the other), with edge objects as without', async () => {
    freezeClock();
    const owner = freshOwner();
    const writer = await connect(`/r/${owner.pk}`);
    const notes = Array.from({ length: 5 }, (_, i) => sign(owner, { content: `${i}`.padEnd(120_000, 'x') }));
    for (const e of notes) expect((await writer.publish(e))[2]).toBe(true);
    writer.close();
    const bytes = notes.reduce((n, e) => n + JSON.stringify(e).length, 0);
    const burst = DEFAULT_LIMITS.read_bytes_burst_per_ip;
    const rate = DEFAULT_LIMITS.read_bytes_per_second_per_ip;
    const served = Math.ceil(burst / bytes); // answered while the budget is above zero
    const wait = Math.max(1, Math.ceil((1 + served * bytes - burst) / rate));
    const sockets = [];
    for (let i = 0; i < 3; i++) sockets.push(await connect(`/r/${owner.pk}`, { 'CF-Connecting-IP': '192.0.2.96' }));
    const answers = await pipelined(sockets, 30, (i) => ['REQ', `q${i}`, { kinds: [1], authors: [owner.pk] }]);
    expect(answers.filter((f) => f[0] === 'EOSE')).toHaveLength(served);
    expect(answers.filter((f) => f[0] !== 'EOSE').map((f) => f[2])).toEqual(
      Array.from({ length: 90 - served }, () => `rate-limited: slow down: this address has read too many events (${rate} bytes/s); retry in ${wait} s`),
    );
    for (const s of sockets) s.close();
  }, 60_000);

  it('an address reads at most read_bytes_burst_per_ip of stored events, then waits for its budget to refill (across reconnects); another address is not held', async () => {
    const clock = freezeClock();
    const owner = freshOwner();
    const writer = await connect(`/r/${owner.pk}`);
    const notes = Array.from({ length: 5 }, (_, i) => sign(owner, { content: `${i}`.padEnd(120_000, 'x') }));
    for (const e of notes) expect((await writer.publish(e))[2]).toBe(true);
    const bytes = notes.reduce((n, e) => n + JSON.stringify(e).length, 0);
    const burst = DEFAULT_LIMITS.read_bytes_burst_per_ip;
    const rate = DEFAULT_LIMITS.read_bytes_per_second_per_ip;
    const served = Math.ceil(burst / bytes); // answered while the budget is above zero
    const feed = { kinds: [1], authors: [owner.pk] };
    let s = await connect(`/r/${owner.pk}`, { 'CF-Connecting-IP': '192.0.2.91' });
    for (let i = 0; i < served; i++) {
      if (i === Math.floor(served / 2)) {
        s.close(); // a reconnect does not reset the budget
        s = await connect(`/r/${owner.pk}`, { 'CF-Connecting-IP': '192.0.2.91' });
      }
      expect((await s.req(`r${i}`, feed)).events).toHaveLength(5);
    }
    const debt = served * bytes - burst;
    const wait = Math.max(1, Math.ceil((1 + debt) / rate));
    expect((await s.req('over', feed)).closed).toBe(`rate-limited: slow down: this address has read too many events (${rate} bytes/s); retry in ${wait} s`);
    // COUNT reads no events: it is not held; another address reads at once.
    s.send(['COUNT', 'c', feed]);
    expect(await s.next((f) => f[0] === 'COUNT' && f[1] === 'c')).toEqual(['COUNT', 'c', { count: 5 }]);
    const other = await connect(`/r/${owner.pk}`, { 'CF-Connecting-IP': '192.0.2.92' });
    expect((await other.req('other', feed)).events).toHaveLength(5);
    clock.advance(wait * 1000);
    expect((await s.req('after', feed)).events).toHaveLength(5);
  });

  it('rate-limits REQ and COUNT per connection after the burst, and refills at its rate', async () => {
    const clock = freezeClock();
    const s = await connect(`/r/${freshOwner().pk}`);
    const burst = DEFAULT_LIMITS.reqs_burst_per_connection;
    const rate = DEFAULT_LIMITS.reqs_per_second_per_connection;
    /**
     * Sends n REQ/COUNT (alternating, one reused subscription id) and counts the answers. One at a time
     * (the clock is frozen): at an edge a refused REQ closes the id at once, and an earlier REQ of it
     * whose history is still in flight then gets no EOSE after that CLOSED (edge-link.ts).
     */
    async function queries(n: number) {
      const answers = [];
      for (let i = 0; i < n; i++) {
        s.send([i % 2 ? 'COUNT' : 'REQ', 'q', { kinds: [1], limit: 1 }]);
        answers.push(await s.next((f) => (f[0] === 'EOSE' || f[0] === 'COUNT' || f[0] === 'CLOSED') && f[1] === 'q'));
      }
      return { answered: answers.filter((f) => f[0] !== 'CLOSED').length, refusals: [...new Set(answers.filter((f) => f[0] === 'CLOSED').map((f) => f[2]))] };
    }
    const message = 'rate-limited: slow down: too many requests on this connection';
    expect(await queries(burst + 10)).toEqual({ answered: burst, refusals: [message] });
    clock.advance(1000);
    expect(await queries(rate + 1)).toEqual({ answered: rate, refusals: [message] });
  });
});
