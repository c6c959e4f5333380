// The DVMCP client (src/shared/dvmcp-client.ts) and discovery (src/shared/dvmcp-discovery.ts)
// through the real relay (public shard) against a DVMCP server peer (dvmcp-client-responder.ts):
// concurrent correlation, progress, cancel, timeouts, payment-required with a spend cap, wrapped
// round trips (the default: plain only with encrypt: false; a server announcing no encryption
// refused), forged and misaddressed answers ignored, bounds; discovery from the relay. The pure
// parts (catalog rules, spendCap, message shapes) are unit-tested beside the source in src/shared.
import { SELF } from 'cloudflare:test';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { DvmcpClient, spendCap, type DvmcpClientOptions } from '../../src/shared/dvmcp-client.js';
import { discover } from '../../src/shared/dvmcp-discovery.js';
import { ConversationKeyCache } from '../../src/shared/nip44.js';
import { RelayClient, type SocketFactory } from '../../src/shared/relay-client.js';
import { giftWrap, makeRumor } from '../../src/shared/nip59.js';
import { nobleVerifier, type SchnorrVerifier } from '../../src/shared/verify.js';
import { DvmcpResponder } from './dvmcp-client-responder.js';
import { closeSubscriptionsOf, keys, LIVE_EVENTS_LOST, sign, subscriptionsOf, type Keys } from './helpers.js';

const socket: SocketFactory = async (u) => {
  const res = await SELF.fetch(u.replace(/^ws/, 'http'), { headers: { Upgrade: 'websocket' } });
  const ws = res.webSocket!;
  ws.accept();
  return ws;
};
const URL_PUBLIC = 'ws://relay.test/';

type Frame = ['>' | '<', unknown[]];
/** The socket factory above, recording the frames the client sends (`>`) and receives (`<`), in order. */
const recording =
  (frames: Frame[]): SocketFactory =>
  async (u) => {
    const ws = await socket(u);
    ws.addEventListener('message', (m) => frames.push(['<', JSON.parse(String(m.data)) as unknown[]]));
    return {
      get readyState() {
        return ws.readyState;
      },
      send: (d: string) => {
        frames.push(['>', JSON.parse(d) as unknown[]]);
        ws.send(d);
      },
      close: (code?: number, reason?: string) => ws.close(code, reason),
      addEventListener: (type, listener) => ws.addEventListener(type, listener),
    };
  };

const open: Array<{ close(): void | Promise<void> }> = [];
afterEach(async () => {
  for (const c of open.splice(0).reverse()) await c.close();
});

async function responder(serverId = 'test-server'): Promise<DvmcpResponder> {
  const r = new DvmcpResponder(URL_PUBLIC, socket, serverId);
  open.push(r);
  await r.start();
  return r;
}

function relayAs(k: Keys, withAuth = true): RelayClient {
  const relay = new RelayClient({ url: URL_PUBLIC, socket, reconnect: false, ...(withAuth ? { auth: async (t) => sign(k, t) } : {}) });
  open.push(relay);
  return relay;
}

function client(opts: Partial<DvmcpClientOptions> & { me?: Keys; withAuth?: boolean } = {}): { c: DvmcpClient; me: Keys } {
  const me = opts.me ?? keys();
  const c = new DvmcpClient({
    relays: relayAs(me, opts.withAuth ?? true),
    secretKey: me.sk,
    keys: new ConversationKeyCache(),
    sign: async (t) => sign(me, t),
    verifier: nobleVerifier,
    ...opts,
  });
  open.push(c);
  return { c, me };
}

const text = (r: { ok: boolean; value?: Record<string, unknown> }): unknown => (r.value?.content as Array<{ text: string }> | undefined)?.[0]?.text;

describe('DvmcpClient', () => {
  it('answers concurrent requests each with its own result (correlation by e)', async () => {
    const r = await responder();
    const { c } = client();
    const target = { provider: r.provider, serverId: r.serverId };
    const results = await Promise.all(['a', 'b', 'c', 'd', 'e'].map((t) => c.request(target, 'tools/call', { name: 'echo', arguments: { text: t } })));
    expect(results.map(text)).toEqual(['a', 'b', 'c', 'd', 'e']);
    expect(c.pending).toBe(0);
  });

  it('a relay that closes its answer subscriptions with error: (live events lost) does not end the client: they are sent again, and the next request is answered', async () => {
    const r = await responder();
    const { c, me } = client();
    const target = { provider: r.provider, serverId: r.serverId, encrypt: false };
    expect(text(await c.request(target, 'tools/call', { name: 'echo', arguments: { text: 'before' } }))).toBe('before');
    // The plain, the gift-wrap and the by-request-id subscription. They come back after their backoff
    // (an answer sent meanwhile, ephemeral, would be lost: its request would time out).
    expect(await closeSubscriptionsOf(null, me.pk, LIVE_EVENTS_LOST)).toBe(3);
    expect(await subscriptionsOf(null, me.pk)).toBe(0);
    await vi.waitFor(async () => expect(await subscriptionsOf(null, me.pk)).toBe(3), { timeout: 5_000, interval: 100 });
    expect(text(await c.request(target, 'tools/call', { name: 'echo', arguments: { text: 'after' } }))).toBe('after');
  });

  it('passes progress notifications to onProgress and they keep the request alive past the idle timeout', async () => {
    const r = await responder();
    const { c } = client();
    const progress: unknown[] = [];
    const result = await c.request({ provider: r.provider, serverId: r.serverId }, 'tools/call', { name: 'slow', arguments: { steps: 4, ms: 250 } }, {
      timeoutMs: 600,
      onProgress: (p) => progress.push(p),
    });
    expect(text(result)).toBe('done');
    expect(progress).toEqual([1, 2, 3, 4].map((i) => ({ progress: i, total: 4, message: `step ${i}` })));
  });

  it('cancels on abort: fails with "cancelled" and sends notifications/cancel with the request id', async () => {
    const r = await responder();
    const { c } = client();
    const abort = new AbortController();
    const pending = c.request({ provider: r.provider, serverId: r.serverId }, 'tools/call', { name: 'hang', arguments: {} }, { signal: abort.signal });
    await vi_waitFor(() => r.requests.length === 1);
    abort.abort();
    expect(await pending).toEqual({ ok: false, error: { kind: 'cancelled', message: 'cancelled' } });
    await vi_waitFor(() => r.cancels.length === 1);
    expect(r.cancels).toEqual([r.requests[0]!.id]);
  });

  it('times out with a clear message when the server never answers', async () => {
    const r = await responder();
    const { c } = client();
    const result = await c.request({ provider: r.provider, serverId: r.serverId }, 'tools/call', { name: 'hang', arguments: {} }, { timeoutMs: 300 });
    expect(result).toEqual({ ok: false, error: { kind: 'timeout', message: 'timed out: no answer from the DVMCP server in 300 ms' } });
  });

  it('bounds the whole request even while progress keeps arriving', async () => {
    const r = await responder();
    const { c } = client();
    const result = await c.request({ provider: r.provider, serverId: r.serverId }, 'tools/call', { name: 'slow', arguments: { steps: 20, ms: 100 } }, { timeoutMs: 1000, maxTotalMs: 700 });
    expect(result).toEqual({ ok: false, error: { kind: 'timeout', message: 'timed out: the DVMCP request took over 700 ms' } });
  });

  it('maps a protocol error answer to {kind: protocol, code, message}', async () => {
    const r = await responder();
    const { c } = client();
    const result = await c.request({ provider: r.provider, serverId: r.serverId }, 'tools/call', { name: 'nope', arguments: {} });
    expect(result).toEqual({ ok: false, error: { kind: 'protocol', code: -32602, message: 'Unknown tool: nope' } });
  });

  it('a request too large for one message fails at once with a clear reason, wrapped or plain, and nothing stays pending', async () => {
    const r = await responder();
    const { c } = client();
    const huge = { name: 'echo', arguments: { text: 'x'.repeat(200_000) } };
    const wrapped = await c.request({ provider: r.provider, serverId: r.serverId, encrypt: true }, 'tools/call', huge);
    expect(wrapped).toEqual({ ok: false, error: { kind: 'relay', message: expect.stringMatching(/^request too large for one DVMCP message: \d+ bytes, at most \d+ gift-wrapped$/) } });
    expect(await c.request({ provider: r.provider, serverId: r.serverId }, 'tools/call', huge)).toEqual(wrapped);
    const plain = await c.request({ provider: r.provider, serverId: r.serverId, encrypt: false }, 'tools/call', huge);
    expect(plain).toEqual({ ok: false, error: { kind: 'relay', message: expect.stringMatching(/^request too large for one DVMCP message: \d+ bytes, at most \d+$/) } });
    expect(c.pending).toBe(0);
  });

  it('payment-required with no handler fails with the amount and invoice, and cancels the request', async () => {
    const r = await responder();
    const { c } = client();
    const result = await c.request({ provider: r.provider, serverId: r.serverId }, 'tools/call', { name: 'paid', arguments: {} });
    expect(result).toEqual({ ok: false, error: { kind: 'payment', message: 'payment required: 21 sats (invoice lnbc210n1test)', sats: 21, invoice: 'lnbc210n1test' } });
    await vi_waitFor(() => r.cancels.length === 1);
  });

  it('spend cap: pays within the cap (the request is answered once paid), declines the call that would pass it', async () => {
    const r = await responder();
    const { c } = client();
    const seen: number[] = [];
    const cap = spendCap(50, (p) => {
      seen.push(p.sats);
      r.markPaid(r.requests.at(-1)!.id); // the local verifier learns of the payment
      return true;
    });
    const target = { provider: r.provider, serverId: r.serverId };
    const call = () => c.request(target, 'tools/call', { name: 'paid', arguments: {} }, { onPaymentRequired: cap });
    expect(text(await call())).toBe('paid');
    expect(text(await call())).toBe('paid');
    expect(cap.spent()).toBe(42);
    const third = await call();
    expect(third).toEqual({ ok: false, error: { kind: 'payment', message: 'payment required: 21 sats (invoice lnbc210n1test)', sats: 21, invoice: 'lnbc210n1test' } });
    expect(seen).toEqual([21, 21]);
    expect(cap.spent()).toBe(42);
  });

  it('an invoice charging more than the sats it states is refused before the handler: a cap of 0 pays nothing', async () => {
    const r = await responder();
    const { c } = client();
    const cap = spendCap(0, () => {
      throw new Error('the handler must not be asked');
    });
    const result = await c.request({ provider: r.provider, serverId: r.serverId }, 'tools/call', { name: 'underpriced', arguments: {} }, { onPaymentRequired: cap });
    expect(result).toEqual({
      ok: false,
      error: { kind: 'payment', message: 'payment required: 0 sats (invoice lnbc10m1test): its invoice asks 1000000 sats, not the 0 stated; nothing was paid', sats: 0, invoice: 'lnbc10m1test' },
    });
    expect(cap.spent()).toBe(0);
    await vi_waitFor(() => r.cancels.length === 1);
  });

  it('a declined payment (handler answers false) ends the request', async () => {
    const r = await responder();
    const { c } = client();
    const result = await c.request({ provider: r.provider, serverId: r.serverId }, 'tools/call', { name: 'paid', arguments: {} }, { onPaymentRequired: () => false });
    expect(result.ok ? undefined : result.error.kind).toBe('payment');
  });

  it('wrapped round trip: the request travels gift-wrapped and the wrapped answer is read', async () => {
    const r = await responder();
    const { c } = client();
    const progress: unknown[] = [];
    const result = await c.request({ provider: r.provider, serverId: r.serverId, encrypt: true }, 'tools/call', { name: 'slow', arguments: { steps: 2, ms: 20 } }, { onProgress: (p) => progress.push(p) });
    expect(text(result)).toBe('done');
    expect(progress).toHaveLength(2);
    expect(r.requests.map((q) => q.form)).toEqual(['wrapped']);
  });

  it('a wrapped answer whose wrap is dated an hour back (NIP-59 randomizes it up to two days back) resolves the call', async () => {
    const r = await responder();
    const { c } = client();
    const result = await c.request({ provider: r.provider, serverId: r.serverId, encrypt: true }, 'tools/call', { name: 'backdated', arguments: { text: 'from the past' } }, { timeoutMs: 5_000 });
    expect(result.ok ? text(result) : result.error.message).toBe('from the past');
  });

  it('an answer tagged as the spec’s templates (only ["e", request id], no p) resolves the call', async () => {
    const r = await responder();
    const me = keys();
    const frames: Frame[] = [];
    const relays = new RelayClient({ url: URL_PUBLIC, socket: recording(frames), reconnect: false, auth: async (t) => sign(me, t) });
    open.push(relays);
    const { c } = client({ me, relays });
    const target = { provider: r.provider, serverId: r.serverId, encrypt: false };
    const result = await c.request(target, 'tools/call', { name: 'spec-tags', arguments: { text: 'e only' } }, { timeoutMs: 5_000 });
    expect(result.ok ? text(result) : result.error.message).toBe('e only');
    // Several at once, each matched to its own request.
    const many = await Promise.all(['a', 'b', 'c'].map((t) => c.request(target, 'tools/call', { name: 'spec-tags', arguments: { text: t } }, { timeoutMs: 5_000 })));
    expect(many.map((m) => (m.ok ? text(m) : m.error.message))).toEqual(['a', 'b', 'c']);
    // One subscription per kind of filter on the relay, however many requests were sent.
    expect(await subscriptionsOf(null, me.pk)).toBe(3);
    // Each request went out only after the relay confirmed (EOSE) a REQ naming its id: a relay may
    // apply a REQ after a later EVENT of the connection (workerd was seen reordering a burst of
    // REQs), and an ephemeral answer sent before the filter holds its id would be lost.
    const byRequest = frames.find(([d, m]) => d === '>' && m[0] === 'REQ' && (m[2] as { '#e'?: unknown })['#e'] !== undefined)![1][1];
    const reqs: string[][] = [];
    let eoses = 0;
    const sent: string[] = [];
    for (const [d, m] of frames) {
      if (d === '>' && m[0] === 'REQ' && m[1] === byRequest) reqs.push((m[2] as { '#e': string[] })['#e']);
      if (d === '<' && m[0] === 'EOSE' && m[1] === byRequest) eoses++;
      if (d === '>' && m[0] === 'EVENT' && (m[1] as { kind: number }).kind === 25910) {
        const id = (m[1] as { id: string }).id;
        sent.push(id);
        expect(reqs.slice(0, eoses).some((ids) => ids.includes(id))).toBe(true);
      }
    }
    expect(sent).toHaveLength(4);
    // The burst of three shared a REQ: one for the first, one for the other two.
    expect(reqs).toHaveLength(3);
  });

  it('the stored wraps the two-day look-back returns are not opened while no encrypted request waits', async () => {
    const r = await responder();
    const me = keys();
    // Five wraps to me dated a day back, stored before the client subscribes.
    const cache = new ConversationKeyCache();
    const pub = relayAs(me);
    for (let i = 0; i < 5; i++) {
      const rumor = makeRumor({ pubkey: r.provider, created_at: Math.floor(Date.now() / 1000), kind: 26910, tags: [['e', 'f'.repeat(64)]], content: `{"n":${i}}` });
      expect((await pub.publish(giftWrap(rumor, r.sk, me.pk, cache, Math.floor(Date.now() / 1000) - 86_400, { kind: 1059, exactTime: true }))).ok).toBe(true);
    }
    let checks = 0;
    const counting: SchnorrVerifier = { name: 'counting', verify: (sig, msg, pk) => (checks++, nobleVerifier.verify(sig, msg, pk)) };
    const { c } = client({ me, verifier: counting });
    expect(text(await c.request({ provider: r.provider, serverId: r.serverId, encrypt: false }, 'tools/call', { name: 'echo', arguments: { text: 'plain' } }))).toBe('plain');
    expect(checks).toBe(1); // the plain answer's signature only
  });

  it('an encrypted request without AUTH fails at once with the relay reason', async () => {
    const r = await responder();
    const { c } = client({ withAuth: false });
    const result = await c.request({ provider: r.provider, serverId: r.serverId, encrypt: true }, 'tools/call', { name: 'echo', arguments: { text: 'x' } });
    expect(result.ok).toBe(false);
    expect(!result.ok && result.error.kind).toBe('relay');
    expect(!result.ok && result.error.message).toMatch(/^cannot receive encrypted DVMCP answers: ws:\/\/relay\.test\/: auth-required: /);
    // so does one without encrypt (gift-wrapped by default), rather than going plain
    expect(await c.request({ provider: r.provider, serverId: r.serverId }, 'tools/call', { name: 'echo', arguments: { text: 'x' } })).toEqual(result);
    expect(r.requests).toHaveLength(0);
    // plain requests (encrypt: false) still work on that client
    expect(text(await c.request({ provider: r.provider, serverId: r.serverId, encrypt: false }, 'tools/call', { name: 'echo', arguments: { text: 'y' } }))).toBe('y');
  });

  it('a target without encrypt goes gift-wrapped; one whose announcement says no encryption is refused unsent (encrypt: false sends plain, encrypt: true wraps without reading the announcement)', async () => {
    const plainOnly = new DvmcpResponder(URL_PUBLIC, socket, 'plain-only', false);
    open.push(plainOnly);
    await plainOnly.start();
    const me = keys();
    const frames: Frame[] = [];
    const relays = new RelayClient({ url: URL_PUBLIC, socket: recording(frames), reconnect: false, auth: async (t) => sign(me, t) });
    open.push(relays);
    const { c } = client({ me, relays });
    const echo = (t: string) => ({ name: 'echo', arguments: { text: t } });
    const r = await responder();
    expect(text(await c.request({ provider: r.provider, serverId: r.serverId }, 'tools/call', echo('private')))).toBe('private');
    expect(r.requests.map((q) => q.form)).toEqual(['wrapped']);
    const target = { provider: plainOnly.provider, serverId: plainOnly.serverId };
    expect(await c.request(target, 'tools/call', echo('x'))).toEqual({ ok: false, error: { kind: 'encryption', message: 'plain-only does not support encryption; set encrypt: false to call it in public' } });
    expect(text(await c.request({ ...target, encrypt: false }, 'tools/call', echo('public')))).toBe('public');
    expect(text(await c.request({ ...target, encrypt: true }, 'tools/call', echo('asserted')))).toBe('asserted');
    expect(plainOnly.requests.map((q) => q.form)).toEqual(['plain', 'wrapped']);
    // One announcement read per server (the refusal's kept for the next request), none for encrypt: true.
    const reads = frames.filter(([d, m]) => d === '>' && m[0] === 'REQ' && JSON.stringify((m[2] as { kinds?: number[] }).kinds) === '[31316]');
    expect(reads.map(([, m]) => (m[2] as { '#d': string[] })['#d'])).toEqual([[r.serverId], ['plain-only']]);
    expect(await c.request(target, 'tools/call', echo('again'))).toMatchObject({ ok: false, error: { kind: 'encryption' } });
    expect(frames.filter(([d, m]) => d === '>' && m[0] === 'REQ' && JSON.stringify((m[2] as { kinds?: number[] }).kinds) === '[31316]')).toHaveLength(2);
  });

  it('ignores answers from another author and answers with another e (plain and wrapped)', async () => {
    const r = await responder();
    const { c } = client();
    for (const encrypt of [false, true]) {
      const result = await c.request({ provider: r.provider, serverId: r.serverId, encrypt }, 'tools/call', { name: 'noisy', arguments: {} });
      expect(text(result)).toBe('real');
    }
  });

  it('refuses requests over maxPending with a clear error', async () => {
    const r = await responder();
    const { c } = client({ maxPending: 2 });
    const target = { provider: r.provider, serverId: r.serverId };
    const abort = new AbortController();
    // Three started at once: the cap holds although all three pass the first check together.
    const started = [1, 2, 3].map(() => c.request(target, 'tools/call', { name: 'hang', arguments: {} }, { signal: abort.signal }));
    await vi_waitFor(() => r.requests.length === 2); // identical requests: each gets its own id
    expect(new Set(r.requests.map((q) => q.id)).size).toBe(2);
    expect(await started[2]).toEqual({ ok: false, error: { kind: 'busy', message: 'too many DVMCP requests in flight (at most 2)' } });
    expect(await c.request(target, 'ping', {})).toEqual({ ok: false, error: { kind: 'busy', message: 'too many DVMCP requests in flight (at most 2)' } });
    abort.abort();
    await Promise.all(started);
    expect(r.requests).toHaveLength(2);
  });

  it('close() ends waiting requests as cancelled', async () => {
    const r = await responder();
    const { c } = client();
    const pending = c.request({ provider: r.provider, serverId: r.serverId }, 'tools/call', { name: 'hang', arguments: {} });
    await vi_waitFor(() => r.requests.length === 1);
    const closing = c.close();
    expect(await pending).toEqual({ ok: false, error: { kind: 'cancelled', message: 'cancelled: the DVMCP client is closed' } });
    await closing;
    await vi_waitFor(() => r.cancels.length === 1); // the cancel was published before close() resolved
  });
});

describe('DVMCP discovery', () => {
  it('reads the responder announcement from the relay into a catalog with prices', async () => {
    const r = await responder('disc-server');
    const relay = relayAs(keys());
    const catalog = await discover(relay, { verifier: nobleVerifier, providers: [r.provider] });
    expect(catalog.ok).toBe(true);
    const servers = catalog.ok ? catalog.value.servers : [];
    expect(servers).toHaveLength(1);
    expect(servers[0]).toMatchObject({ provider: r.provider, id: 'disc-server', name: 'Test responder', encryption: true, serverInfo: { name: 'responder' } });
    expect(servers[0]!.tools.map((t) => t.name)).toEqual(['echo', 'slow', 'hang', 'paid', 'noisy']);
    expect(servers[0]!.tools.find((t) => t.name === 'paid')!.price).toEqual({ price: '21', unit: 'sats' });
  });

});

async function vi_waitFor(cond: () => boolean, ms = 5000): Promise<void> {
  const end = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > end) throw new Error('condition not met in time');
    await new Promise((r) => setTimeout(r, 20));
  }
}
