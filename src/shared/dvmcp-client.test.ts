// The pure parts of the DVMCP client: spendCap (cumulative, reserved before paying, released when
// a payment fails) and the client-side message shapes of dvmcp.ts (request, cancel, payment-required);
// and its warnings, which quote a relay's words, against a fake relay (test/helpers-node/fake-relay.ts).
import { afterEach, describe, expect, it, vi } from 'vitest';
import { finalizeEvent, generateSecretKey, getPublicKey } from 'nostr-tools/pure';
import { fakeRelay } from '../../test/helpers-node/fake-relay.js';
import { relayClient } from '../client/relay.js';
import { DvmcpClient, spendCap } from './dvmcp-client.js';
import { cancelTemplate, parseMessage, parsePaymentRequired, paymentRequiredTemplate, requestTemplate } from './dvmcp.js';
import { KIND } from './kinds.js';
import { ConversationKeyCache } from './nip44.js';
import { nobleVerifier } from './verify.js';

const provider = getPublicKey(generateSecretKey());
const ask = (sats: number) => ({ sats, invoice: `lnbc${sats}`, target: { provider }, method: 'tools/call' });

describe('spendCap', () => {
  it('pays while the running total stays within the cap, then declines', async () => {
    const cap = spendCap(50);
    expect(await cap(ask(20))).toBe(true);
    expect(await cap(ask(30))).toBe(true);
    expect(await cap(ask(1))).toBe(false);
    expect(cap.spent()).toBe(50);
  });

  it('reserves before paying, so concurrent payments cannot pass the cap together', async () => {
    let release: () => void = () => undefined;
    const slow = new Promise<void>((r) => (release = r));
    const cap = spendCap(30, async () => {
      await slow;
      return true;
    });
    const first = cap(ask(20));
    const second = await cap(ask(20)); // decided while the first is still paying
    release();
    expect([await first, second]).toEqual([true, false]);
    expect(cap.spent()).toBe(20);
  });

  it('a payment that fails gives its amount back', async () => {
    const cap = spendCap(30, (p) => p.sats !== 25);
    expect(await cap(ask(25))).toBe(false);
    expect(await cap(ask(30))).toBe(true);
    expect(cap.spent()).toBe(30);
  });
});

describe('client message shapes', () => {
  it('requestTemplate: 25910 with p, method and s; the content is {method, params}', () => {
    const t = requestTemplate(provider, 'tools/call', { name: 'echo', arguments: {} }, 'srv');
    expect(t).toMatchObject({ kind: 25910, tags: [['p', provider], ['method', 'tools/call'], ['s', 'srv']] });
    expect(JSON.parse(t.content)).toEqual({ method: 'tools/call', params: { name: 'echo', arguments: {} } });
    expect(requestTemplate(provider, 'ping', undefined).tags).toEqual([['p', provider], ['method', 'ping']]);
  });

  it('cancelTemplate: a 21316 notifications/cancel naming the request with e, read back by parseMessage as a notification', () => {
    const t = cancelTemplate(provider, 'ab'.repeat(32), 'srv', 'why');
    expect(t.tags).toEqual([['p', provider], ['method', 'notifications/cancel'], ['s', 'srv'], ['e', 'ab'.repeat(32)]]);
    const m = parseMessage({ ...t, id: 'cd'.repeat(32), pubkey: 'ef'.repeat(32) });
    expect(m.ok && m.value).toMatchObject({ type: 'notification', method: 'notifications/cancel', refersTo: 'ab'.repeat(32), serverId: 'srv' });
  });

  it('parsePaymentRequired reads what paymentRequiredTemplate writes; malformed amounts are not payment requests', () => {
    const t = paymentRequiredTemplate({ requestId: 'ab'.repeat(32), client: provider }, 21, 'lnbc210n1x');
    expect(parsePaymentRequired(t)).toEqual({ ok: true, value: { sats: 21, invoice: 'lnbc210n1x' } });
    for (const amount of ['x', '-1', '', ' ', '-0', '1e3', '0x10', ' 5', '1.5']) {
      expect(parsePaymentRequired({ tags: [['status', 'payment-required'], ['amount', amount, 'lnbc']] }), amount).toBeUndefined();
    }
    expect(parsePaymentRequired({ tags: [['status', 'processing'], ['amount', '5', 'lnbc']] })).toBeUndefined();
    expect(parsePaymentRequired({ tags: [['status', 'payment-required'], ['amount', '5']] })).toEqual({ ok: true, value: { sats: 5, invoice: '' } });
  });

  it('parsePaymentRequired refuses an invoice that charges another amount than the sats stated, or none', () => {
    const ask = (sats: string, invoice: string) => parsePaymentRequired({ tags: [['status', 'payment-required'], ['amount', sats, invoice]] });
    expect(ask('0', 'lnbc10m1x')).toEqual({ ok: false, error: { sats: 0, invoice: 'lnbc10m1x', reason: 'its invoice asks 1000000 sats, not the 0 stated' } });
    expect(ask('1', 'lnbc20n1x')).toEqual({ ok: false, error: { sats: 1, invoice: 'lnbc20n1x', reason: 'its invoice asks 2 sats, not the 1 stated' } });
    expect(ask('21', 'lnbc1x')).toEqual({ ok: false, error: { sats: 21, invoice: 'lnbc1x', reason: 'its invoice cannot be paid (the invoice has no amount)' } });
    expect(ask('21', 'lnbcrt210n1edgestrdevx')).toEqual({ ok: true, value: { sats: 21, invoice: 'lnbcrt210n1edgestrdevx' } });
  });
});

describe("the client's warnings quote a relay's words with their control characters escaped", () => {
  afterEach(() => vi.restoreAllMocks());

  it('a CLOSED of its subscription by request id, and an OK false of its cancel, carrying OSC 52, CSI 2J (also the C1 CSI) and a CRLF', async () => {
    const EVIL = '\x1b]52;c;Y3VybCBldmlsfHNo\x07\x1b[2J\u009b2J\r\nnext line';
    const relay = await fakeRelay({
      refuseReq: (filters) => (filters.some((f) => f['#e'] !== undefined) ? `blocked: ${EVIL}` : undefined),
      refuseEvent: (e) => (e.kind === KIND.DVMCP_NOTIFICATION ? `blocked: ${EVIL}` : undefined),
    });
    const warnings: string[] = [];
    vi.spyOn(console, 'warn').mockImplementation((...args: unknown[]) => void warnings.push(args.map(String).join(' ')));
    const sk = generateSecretKey();
    const socket = relayClient(relay.url.replace(/^http/, 'ws'), { sk, pk: getPublicKey(sk) });
    const client = new DvmcpClient({ relays: socket, secretKey: sk, keys: new ConversationKeyCache(4), sign: async (t) => finalizeEvent(t, sk), verifier: nobleVerifier, subscribeTimeoutMs: 2_000 });
    try {
      const r = client.request({ provider: getPublicKey(generateSecretKey()), serverId: 'srv', encrypt: false }, 'tools/call', { name: 'x' }, { timeoutMs: 10_000 });
      await vi.waitFor(() => expect(warnings).toHaveLength(1));
      await client.close(); // the waiting request is cancelled: its notifications/cancel is refused
      expect(await r).toMatchObject({ ok: false, error: { kind: 'cancelled' } });
      const shown = String.raw`blocked: \u001b]52;c;Y3VybCBldmlsfHNo\u0007\u001b[2J\u009b2J\u000d\u000anext line`;
      expect(warnings).toContain(`dvmcp-client: ${socket.url} refused the subscription to answers by request id: ${shown}`);
      expect(warnings.some((w) => w.endsWith(` not delivered: ${socket.url}: ${shown}`))).toBe(true);
      for (const w of warnings) expect(w).not.toMatch(/[\x00-\x1f\x7f-\x9f]/);
    } finally {
      socket.close();
      await relay.close();
    }
  });
});
