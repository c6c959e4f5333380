// What one stranger's event may make a bridge do on the public shard (audit round 16):
//   - an event addressed to the provider and to other keys (a DVMCP request or notification, a
//     gift wrap, a zap receipt: anything whose p tags are not exactly one naming the provider) is
//     dropped before any work: not verified, opened or answered, counted in one log line a minute
//     (src/shared/recipient.ts soleRecipient): one ping cannot make every bridge answer;
//   - initialize without s is answered from each public server's capabilities as the bridge's own
//     session has them: one request does not open an upstream session per server for its client;
//     the daily quota is checked for every call a request is charged (one per server it reaches);
//   - gift-wrapped answers and notifications (stored 1059s) expire 10 minutes after they are sent
//     (NIP-40); pings are held to the provider's ping window (limits.ts).
import { env, runInDurableObject } from 'cloudflare:test';
import { describe, expect, it } from 'vitest';
import { RPC } from '../../src/shared/dvmcp.js';
import type { NostrEvent } from '../../src/shared/event.js';
import { ConversationKeyCache, encrypt, getConversationKey } from '../../src/shared/nip44.js';
import { makeRumor } from '../../src/shared/nip59.js';
import type { McpSessionCache } from '../../workers/common/mcp-session-cache.js';
import { ErrorAnswers, Limiter } from '../../workers/common/dvmcp-server/limits.js';
import { api } from './api-helpers.js';
import { bridgeReady, directBridge, DvmcpClient, everythingUrl, warnings } from './bridge-helpers.js';
import { BASE, keys, now, sign, type Keys } from './helpers.js';
import { TEST_ADMIN_SK } from './test-keys.js';

const bridgeOf = (owner: string) => env.BRIDGE.get(env.BRIDGE.idFromName(owner));
const PUBLIC_URL = `${BASE.replace(/^http/, 'ws')}/`;
/** Hands `e` to the bridge of `owner` as its public shard subscription does. */
const deliver = (owner: string, e: NostrEvent) =>
  runInDurableObject(bridgeOf(owner), (i) => (i as unknown as { onEvent(e: NostrEvent, url: string): Promise<void> }).onEvent(e, PUBLIC_URL));
const cache = new ConversationKeyCache(64);
const INIT = { protocolVersion: '2025-03-26', capabilities: {}, clientInfo: { name: 't', version: '1' } };

/** A gift wrap of `rumor` from `k` to `to`, with the wrap's tags `tags` (NIP-59 puts one p; this may put more). */
function wrapWithTags(k: Keys, to: string, rumor: Parameters<typeof makeRumor>[0], tags: string[][]): NostrEvent {
  const seal = sign(k, { kind: 13, tags: [], content: encrypt(JSON.stringify(makeRumor(rumor)), cache.get(k.sk, to)) });
  const oneTime = keys();
  return sign(oneTime, { kind: 1059, tags, content: encrypt(JSON.stringify(seal), getConversationKey(oneTime.sk, to)) });
}

describe('an event that names the provider and other keys is dropped', () => {
  it('a ping naming two bridges is answered by neither, nor is a wrap naming one and another key; each answers a ping naming it alone; one log line per bridge', async () => {
    const one = await directBridge([{ id: 'one', url: everythingUrl(), public: false }]);
    const two = await directBridge([{ id: 'two', url: everythingUrl(), public: false }]);
    await bridgeReady(one.provider);
    await bridgeReady(two.provider);
    const c = await DvmcpClient.open(one.provider);
    const toTwo = await DvmcpClient.open(two.provider, '/', c.k);
    const both = c.request('ping', undefined, { tags: [['p', one.provider], ['p', two.provider], ['method', 'ping']] });
    const rumor = { pubkey: c.k.pk, kind: 25910, created_at: now(), tags: [['p', one.provider], ['method', 'ping']], content: JSON.stringify({ method: 'ping' }) };
    const wrap = wrapWithTags(c.k, one.provider, rumor, [['p', one.provider], ['p', keys().pk]]);
    const logged = await warnings(async () => {
      // The deployment's shards refuse such events (src/shared/recipients.ts); any other relay, or a
      // shard without that rule, would deliver them as a subscription does: to the bridge's onEvent.
      await deliver(one.owner, both);
      await deliver(one.owner, wrap);
      await deliver(two.owner, both);
      expect((await c.call('ping')).result).toEqual({ ok: true, value: {} });
      expect((await toTwo.call('ping')).result).toEqual({ ok: true, value: {} });
      await expect(c.answer(both.id, 300)).rejects.toThrow();
      await expect(c.answer(makeRumor(rumor).id, 10)).rejects.toThrow();
    });
    expect(logged.filter((l) => l.includes('not addressed to it alone')).sort()).toEqual(
      [
        `bridge: provider ${one.provider}: 1 event not addressed to it alone (exactly one p tag, naming it) dropped since the last report; reported at most once a minute`,
        `bridge: provider ${two.provider}: 1 event not addressed to it alone (exactly one p tag, naming it) dropped since the last report; reported at most once a minute`,
      ].sort(),
    );
    c.close();
    toTwo.close();
  });
});

describe('initialize without s', () => {
  it('each public server answers from the bridge’s own session: no upstream session is opened for the client', async () => {
    const { owner, provider } = await directBridge([
      { id: 'a', url: everythingUrl(), public: true },
      { id: 'b', url: everythingUrl(), public: true },
    ]);
    await bridgeReady(provider);
    const c = await DvmcpClient.open(provider);
    const id = await c.send(c.request('initialize', INIT));
    const answered = [await c.answer(id), await c.answer(id)].map((a) => a.tags.find((t) => t[0] === 'd')![1]).sort();
    expect(answered).toEqual(['a', 'b']);
    const sessions = await runInDurableObject(bridgeOf(owner), (i) => {
      const sessionCache = (i as unknown as { cache: McpSessionCache }).cache;
      return ['a', 'b'].map((s) => [sessionCache.has(`${s}:${c.k.pk}`), sessionCache.has(`${s}:bridge`)]);
    });
    expect(sessions).toEqual([
      [false, true],
      [false, true],
    ]);
    c.close();
  });

  it('the daily quota is checked for every call a request is charged: with 1 of a stranger’s 2 calls left, initialize to 2 servers is refused and nothing more is metered', async () => {
    const owner = keys();
    expect((await api(TEST_ADMIN_SK, 'POST', '/api/admin/owners', { pubkey: owner.pk, plan: 'three_bridge_calls' })).status).toBe(201);
    const stub = bridgeOf(owner.pk);
    const provider = await stub.ensureProvider(owner.pk, BASE);
    await env.RELAY_SHARD.get(env.RELAY_SHARD.idFromName(`owner:${owner.pk}`)).provisionAgent(provider, owner.pk, 'bridge');
    for (const id of ['a', 'b']) expect((await stub.addServer({ id, url: everythingUrl(), public: true })).ok).toBe(true);
    await bridgeReady(provider);
    const c = await DvmcpClient.open(provider);
    expect((await c.call('tools/list', {}, { s: 'a' })).result.ok).toBe(true);
    const refused = await c.call('initialize', INIT);
    expect(refused.result).toEqual({
      ok: false,
      error: {
        code: RPC.RATE_LIMITED,
        // A stranger: which quota and when, not the owner's limit nor its calls (metering.ts).
        message: expect.stringMatching(/^rate-limited: the bridge’s owner reached a usage limit for today \(UTC\) \(quota bridge_calls_per_day\); retry in \d+ s$/),
        data: { quota: 'bridge_calls_per_day', retry_after: expect.any(Number) },
      },
    });
    const day = new Date().toISOString().slice(0, 10);
    expect((await stub.usage(day, day)).map((r) => [r.server, r.method, r.calls])).toEqual([['a', 'tools/list', 1]]);
    c.close();
  });
});

describe('what the bridge stores for others expires; pings are bounded', () => {
  it('a gift-wrapped answer and its progress notifications expire 10 minutes after they are sent', async () => {
    const { provider } = await directBridge([{ id: 'ev', url: everythingUrl(), public: false }]);
    await bridgeReady(provider);
    const c = await DvmcpClient.open(provider);
    const id = await c.send(c.request('tools/call', { name: 'trigger-long-running-operation', arguments: { duration: 1, steps: 2 } }, { s: 'ev' }), 'wrapped');
    const a = await c.answer(id);
    expect(a.event.kind).toBe(1059);
    expect(a.event.tags).toEqual([['p', c.k.pk], ['expiration', String(a.event.created_at + 600)]]);
    const progress = c.notifications(id);
    expect(progress.length).toBeGreaterThan(0);
    for (const n of progress) expect(n.event.tags).toEqual([['p', c.k.pk], ['expiration', String(n.event.created_at + 600)]]);
    const error = await c.call('tools/list', {}, { s: 'nope', form: 'wrapped' });
    expect(error.result).toEqual({ ok: false, error: { code: -32602, message: 'Unknown server id nope' } });
    expect(error.event.tags).toEqual([['p', c.k.pk], ['expiration', String(error.event.created_at + 600)]]);
    c.close();
  });

  it('pings: past the provider’s 300 a minute each stranger is told once (rate-limited), and past the error answers’ cap nothing is answered', async () => {
    const { owner, provider } = await directBridge([{ id: 'p', url: everythingUrl(), public: false }]);
    await bridgeReady(provider);
    // 300 pings from as many keys this minute (the first from bridgeReady), through the bridge's own Limiter.
    const filled = await runInDurableObject(bridgeOf(owner), (i) => {
      const limiter = (i as unknown as { limiter: Limiter }).limiter;
      let n = 0;
      while (n < 1000 && limiter.admit(`flood-${n}`, [], 'ping').ok) n++;
      return n;
    });
    expect(filled).toBeLessThan(300);
    const late = await DvmcpClient.open(provider);
    const refused = await late.call('ping');
    expect(refused.result).toEqual({ ok: false, error: { code: RPC.RATE_LIMITED, message: expect.stringMatching(/^rate-limited: this provider answered 300 pings this minute; retry in \d+ s$/) } });
    await runInDurableObject(bridgeOf(owner), (i) => {
      const errors = (i as unknown as { errors: ErrorAnswers }).errors;
      for (let n = 0; n < 1000 && errors.allow(); n++);
    });
    const last = await DvmcpClient.open(provider);
    const id = await last.send(last.request('ping', undefined, { s: 'p' }));
    await expect(last.answer(id, 800)).rejects.toThrow();
    late.close();
    last.close();
  });

  it('the Limiter: a ping takes one of the client’s requests of the minute and one of the provider’s pings (serverPerMinute), none of a server’s', () => {
    const limiter = new Limiter({ clientPerMinute: 100, clientConcurrent: 10, serverPerMinute: 2 });
    let clock = 1_000_000;
    limiter.now = () => clock;
    for (const client of ['a', 'b']) expect(limiter.admit(client, [], 'ping').ok).toBe(true);
    expect(limiter.admit('c', [], 'ping')).toEqual({ ok: false, error: { code: RPC.RATE_LIMITED, message: 'rate-limited: this provider answered 2 pings this minute; retry in 60 s' }, retryMs: 60_000 });
    expect(limiter.admit('c', ['s1']).ok).toBe(true);
    clock += 60_000;
    expect(limiter.admit('c', [], 'ping').ok).toBe(true);
  });
});
