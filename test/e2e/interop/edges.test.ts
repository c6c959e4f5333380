// nostr-tools against `wrangler dev` with every shard split into four edge objects
// (RELAY_EDGES={"*":4}, docs/SCALING.md), its own instance started here: each socket lands on an
// edge picked at random by the router, as deployed. Many sockets see every event once; the
// primary's one order holds across sockets (replaceable events, NIP-09 deletion); AUTH-gated reads;
// the demo agent answers through its shard's edges.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Relay } from 'nostr-tools/relay';
import { finalizeEvent, type Event } from 'nostr-tools/pure';
import type { Filter } from 'nostr-tools/filter';
import { startWrangler, type RunningWorker } from '../global-setup.js';
import { demo, newKey, note, nowSeconds, prompt, RunCollector, unwrappedText, within, wrapToSelf } from './demo.js';
import { authenticate, fetchAll, Opened, signer } from './nostr-tools-relays.js';

let worker: RunningWorker | undefined;
let httpUrl = '';
let relayUrl = '';
const opened = new Opened();
const connect = opened.connect.bind(opened);

beforeAll(async () => {
  worker = await startWrangler('edges', ['EDGESTR_ENV:development', 'RELAY_EDGES:{"*":4}']);
  httpUrl = worker.httpUrl;
  relayUrl = httpUrl.replace(/^http/, 'ws');
}, 90_000);

afterAll(async () => {
  opened.closeAll();
  await worker?.cleanup();
});

/** A live subscription that keeps every event it gets; resolves once its EOSE arrived. */
async function watch(r: Relay, filter: Filter): Promise<Event[]> {
  const got: Event[] = [];
  await new Promise<void>((resolve, reject) => {
    r.subscribe([filter], { onevent: (e) => got.push(e), oneose: resolve, onclose: (m) => reject(new Error(m)) });
  });
  return got;
}

describe('a relay with four edges per shard (wrangler dev)', () => {
  it('twelve sockets each see every stored and ephemeral event of a stream exactly once, in order', async () => {
    const author = newKey();
    const watchers = await Promise.all(Array.from({ length: 12 }, () => connect(`${relayUrl}/`)));
    const seen = await Promise.all(watchers.map((r) => watch(r, { kinds: [1, 20001], authors: [author.pk] })));
    const publisher = await connect(`${relayUrl}/`);
    const events = Array.from({ length: 30 }, (_, n) =>
      finalizeEvent({ kind: n % 3 === 0 ? 20001 : 1, created_at: nowSeconds(), tags: [], content: `event ${n}` }, author.sk),
    );
    for (const e of events) expect(await publisher.publish(e)).toBe('');
    const ids = events.map((e) => e.id);
    await within(
      (async () => {
        while (seen.some((s) => s.length < events.length)) await new Promise((r) => setTimeout(r, 20));
      })(),
      10_000,
      'every event on every socket',
    );
    await new Promise((r) => setTimeout(r, 200)); // a duplicate would arrive by now
    for (const s of seen) expect(s.map((e) => e.id)).toEqual(ids);
    // History from any socket: the stored ones, newest first.
    const stored = events.filter((e) => e.kind === 1).map((e) => e.id);
    const history = await fetchAll(await connect(`${relayUrl}/`), { kinds: [1], authors: [author.pk] });
    expect(new Set(history.map((e) => e.id))).toEqual(new Set(stored));
  });

  it('replaceable events and a NIP-09 deletion sent on different sockets follow the one order of the shard', async () => {
    const me = newKey();
    const [a, b, reader] = await Promise.all([connect(`${relayUrl}/`), connect(`${relayUrl}/`), connect(`${relayUrl}/`)]);
    const t = nowSeconds();
    const older = finalizeEvent({ kind: 0, created_at: t - 10, tags: [], content: '{"name":"old"}' }, me.sk);
    const newer = finalizeEvent({ kind: 0, created_at: t, tags: [], content: '{"name":"new"}' }, me.sk);
    expect(await a.publish(newer)).toBe('');
    await expect(b.publish(older)).rejects.toThrow(/^duplicate: /);
    expect((await fetchAll(reader, { kinds: [0], authors: [me.pk] })).map((e) => e.id)).toEqual([newer.id]);

    const doomed = note(me, 'to be deleted');
    expect(await a.publish(doomed)).toBe('');
    const deletion = finalizeEvent({ kind: 5, created_at: nowSeconds(), tags: [['e', doomed.id]], content: '' }, me.sk);
    expect(await b.publish(deletion)).toBe('');
    expect(await fetchAll(reader, { ids: [doomed.id] })).toEqual([]);
    await expect(a.publish(doomed)).rejects.toThrow(/^blocked: /);
  });

  it('a gift wrap is served only to its authenticated recipient, whichever edge holds the socket', async () => {
    const me = newKey();
    const wrap = wrapToSelf(me, 'through the edges');
    expect(await (await connect(`${relayUrl}/`)).publish(wrap)).toBe('');
    const filter = { kinds: [1059], '#p': [me.pk] };
    const r = await connect(`${relayUrl}/`, me);
    await expect(fetchAll(r, filter)).rejects.toThrow(/^auth-required: /);
    expect(await within(r.auth(signer(me)), 10_000, 'the AUTH OK')).toBe('');
    const got = await fetchAll(r, filter);
    expect(got.map((e) => e.id)).toEqual([wrap.id]);
    expect(unwrappedText(me, got[0]!)).toBe('through the edges');
    const stranger = await connect(`${relayUrl}/`, newKey());
    await expect(fetchAll(stranger, filter)).rejects.toThrow(/^auth-required: /);
  });

  it('the demo agent answers a prompt sent through its shard’s edges', async () => {
    const { agent, ownerShard } = await demo(httpUrl, relayUrl);
    const me = newKey();
    const r = await connect(ownerShard);
    await authenticate(r, me);
    const p = prompt(me, agent, 'hello through the edges');
    const run = new RunCollector(me, agent);
    await new Promise<void>((resolve, reject) => {
      r.subscribe([{ kinds: [25801, 25803, 25805], '#p': [me.pk], '#e': [p.id] }], { onevent: (e) => run.take(e), oneose: resolve, onclose: (m) => reject(new Error(m)) });
    });
    expect(await r.publish(p)).toBe('');
    await within(run.done, 20_000, 'the answer');
    expect(run.terminal).toMatchObject({ kind: 25803, payload: { text: 'echo: hello through the edges' } });
    expect(run.streamed).toBe('echo: hello through the edges');
  });
});
