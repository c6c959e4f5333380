// Calls waiting for their payment and the owner's bridge_calls_per_day (workers/bridge/metering.ts):
// clients other than the owner's key may use OTHERS_PLAN_SHARE of it; their calls waiting for a
// payment may hold at most WAITING_SHARE of that share (rounded up), and hold no room from calls
// that are free or already paid, which only counted calls and the other holds refuse. A refusal
// that holds cause says to retry when the first of them ends (a waiting call: its invoice's
// expiry, EDGESTR_PAYMENT_EXPIRY=5 in vitest.config.ts), one that counted calls cause at the end of
// the UTC day. A paid call runs even when free calls used the share meanwhile, and that overshoot
// is not taken from the owner's kept calls. A waiting call at an invoice is counted from the
// payment rows, so a restart (restartBridge) does not free the waiting calls' part, and no call is
// counted twice (before and after its invoice is recorded). Plan three_bridge_calls: 3 calls a day,
// others 2 of them (of which 1 may wait for a payment), 1 kept for the owner; five_bridge_calls:
// others 4, of which 2 may wait.
import { env, SELF } from 'cloudflare:test';
import { describe, expect, it } from 'vitest';
import type { NostrEvent } from '../../src/shared/event.js';
import { KIND } from '../../src/shared/kinds.js';
import { RPC } from '../../src/shared/dvmcp.js';
import { api } from './api-helpers.js';
import type { Bridge } from '../../workers/bridge/bridge-do.js';
import { bridgeReady, DvmcpClient, everythingUrl, restartBridge, type Answer } from './bridge-helpers.js';
import { BASE, keys, type Keys } from './helpers.js';
import { TEST_ADMIN_SK } from './test-keys.js';

const DAY_MS = 86_400_000;

/** The invoice of the payment-required notification `client` gets for request `id`. */
async function invoiceOf(client: DvmcpClient, id: string): Promise<string> {
  const frame = await client.sock.next((f) => {
    const e = f[2] as NostrEvent | undefined;
    return f[0] === 'EVENT' && e?.kind === KIND.DVMCP_NOTIFICATION && e.tags.some((t) => t[0] === 'e' && t[1] === id) && e.tags.some((t) => t[0] === 'status');
  });
  return (frame[2] as NostrEvent).tags.find((t) => t[0] === 'amount')![2]!;
}

/**
 * A new owner on `plan` with its bridge (provider key provisioned on its shard) serving `paid`
 * (server-everything, echo at 21 sats) and, when `free`, the same server unpriced as `free`; once
 * the bridge listens.
 */
async function pricedBridge(plan: string, free = false): Promise<{ owner: Keys; provider: string; bridge: DurableObjectStub<Bridge> }> {
  const owner = keys();
  expect((await api(TEST_ADMIN_SK, 'POST', '/api/admin/owners', { pubkey: owner.pk, plan })).status).toBe(201);
  const bridge = env.BRIDGE.get(env.BRIDGE.idFromName(owner.pk));
  const provider = await bridge.ensureProvider(owner.pk, BASE);
  await env.RELAY_SHARD.get(env.RELAY_SHARD.idFromName(`owner:${owner.pk}`)).provisionAgent(provider, owner.pk, 'bridge');
  expect((await bridge.addServer({ id: 'paid', url: everythingUrl(), public: false, prices: { echo: { price: '21', unit: 'sats' } } })).ok).toBe(true);
  if (free) expect((await bridge.addServer({ id: 'free', url: everythingUrl(), public: false })).ok).toBe(true);
  await bridgeReady(provider);
  return { owner, provider, bridge };
}

/** The refusal of a priced call while others' waiting calls hold their part, retried within the first hold's end (≤ 6 s with a 5 s expiry). */
function expectWaitingRefusal(answer: Pick<Answer, 'result'>): void {
  expect(answer.result).toEqual({
    ok: false,
    error: {
      code: RPC.RATE_LIMITED,
      message: expect.stringMatching(/^rate-limited: too many calls to this bridge are waiting for a payment \(quota bridge_calls_per_day\); retry in [1-6] s$/),
      data: { quota: 'bridge_calls_per_day', retry_after: expect.any(Number) },
    },
  });
  const retry = !answer.result.ok && (answer.result.error.data as { retry_after: number }).retry_after;
  expect(!answer.result.ok && answer.result.error.message).toBe(`rate-limited: too many calls to this bridge are waiting for a payment (quota bridge_calls_per_day); retry in ${retry} s`);
}

describe('calls waiting for a payment and bridge_calls_per_day', () => {
  it('a stranger’s unpaid invoice does not refuse another stranger’s free call; a second one waiting is refused until the first ends (its expiry), a share used by counted calls until the day ends; the paid call runs, the owner keeps its call', { timeout: 30_000 }, async () => {
    const { owner, provider, bridge } = await pricedBridge('three_bridge_calls', true);
    const [a, b, c] = [await DvmcpClient.open(provider), await DvmcpClient.open(provider), await DvmcpClient.open(provider)];
    const mine = await DvmcpClient.open(provider, '/', owner);
    try {
      expect((await b.call('prompts/list', {}, { s: 'free' })).result.ok).toBe(true);
      const echo = (message: string) => a.send(a.request('tools/call', { name: 'echo', arguments: { message } }, { s: 'paid' }));
      const waiting = await echo('one');
      const invoice = await invoiceOf(a, waiting);

      // Waiting calls may hold 1 of the others' 2: a second is refused until the first one's invoice expires (5 s), with no invoice.
      const second = await echo('two');
      const refused = await a.answer(second);
      expectWaitingRefusal(refused);
      expect(a.notifications(second)).toEqual([]);

      // The waiting call holds no room from a free one: B's second call passes (1 counted + 1 = the others' 2).
      expect((await b.call('tools/list', {}, { s: 'free' })).result).toMatchObject({ ok: true });
      // Now the others' share is counted in full: refused until the UTC day ends.
      const full = await c.call('tools/list', {}, { s: 'free' });
      const untilMidnight = Math.ceil((Math.ceil(Date.now() / DAY_MS) * DAY_MS - Date.now()) / 1000);
      expect(full.result).toEqual({
        ok: false,
        error: {
          code: RPC.RATE_LIMITED,
          message: expect.stringMatching(/^rate-limited: the bridge’s owner reached a usage limit for today \(UTC\) \(quota bridge_calls_per_day\); retry in \d+ s$/),
          data: { quota: 'bridge_calls_per_day', retry_after: expect.any(Number) },
        },
      });
      expect(!full.result.ok && (full.result.error.data as { retry_after: number }).retry_after).toBeGreaterThanOrEqual(untilMidnight - 5);

      // Paid, the waiting call runs, past the others' share; the owner's kept call is still its own.
      const paid = await SELF.fetch(`${BASE}/api/bridge/pay`, { method: 'POST', body: JSON.stringify({ invoice }) });
      expect(paid.status).toBe(200);
      expect((await a.answer(waiting)).result).toMatchObject({ ok: true, value: { content: [{ type: 'text', text: 'Echo: one' }] } });
      expect((await mine.call('tools/list', {}, { s: 'free' })).result.ok).toBe(true);
      const day = new Date().toISOString().slice(0, 10);
      expect((await bridge.usage(day, day)).map((r) => [r.server, r.method, r.calls])).toEqual([
        ['free', 'prompts/list', 1],
        ['free', 'tools/list', 2],
        ['paid', 'tools/call', 1],
      ]);
    } finally {
      for (const client of [a, b, c, mine]) client.close();
    }
  });

  it('a restart (a deploy, an eviction) does not reset the cap: with a stranger’s invoice open, another stranger’s priced call is refused with no invoice; the first, sent again, waits on its invoice and runs once paid; then the second gets one', { timeout: 30_000 }, async () => {
    const { owner, provider } = await pricedBridge('three_bridge_calls');
    const [a, b] = [await DvmcpClient.open(provider), await DvmcpClient.open(provider)];
    const echo = (client: DvmcpClient, message: string) => client.request('tools/call', { name: 'echo', arguments: { message } }, { s: 'paid' });
    try {
      const first = echo(a, 'one');
      const invoice = await invoiceOf(a, await a.send(first));
      await restartBridge(owner.pk, provider);

      // A's invoice is still open (EDGESTR_PAYMENT_EXPIRY=5): it holds the waiting calls' 1.
      const second = await b.send(echo(b, 'two'));
      const refused = await b.answer(second);
      expectWaitingRefusal(refused);
      expect(b.notifications(second)).toEqual([]);

      // A's request sent again (the restart dropped its wait) is not refused for its own invoice: it waits on it, and runs once paid.
      await a.send(first);
      expect(await invoiceOf(a, first.id)).toBe(invoice);
      expect((await SELF.fetch(`${BASE}/api/bridge/pay`, { method: 'POST', body: JSON.stringify({ invoice }) })).status).toBe(200);
      expect((await a.answer(first.id)).result).toMatchObject({ ok: true, value: { content: [{ type: 'text', text: 'Echo: one' }] } });

      // Paid, it waits no more: B's next priced call gets an invoice.
      const third = await b.send(echo(b, 'three'));
      expect(await invoiceOf(b, third)).toMatch(/^lnbcrt210n1edgestrdev/);
    } finally {
      a.close();
      b.close();
    }
  });

  it('each waiting call counts once, before its invoice is recorded and after: plan five_bridge_calls (others 4, of which 2 may wait), two strangers get invoices, a third is refused', { timeout: 30_000 }, async () => {
    const { provider } = await pricedBridge('five_bridge_calls');
    const clients = [await DvmcpClient.open(provider), await DvmcpClient.open(provider), await DvmcpClient.open(provider)];
    const [a, b, c] = clients;
    const echo = (client: DvmcpClient, message: string) => client.send(client.request('tools/call', { name: 'echo', arguments: { message } }, { s: 'paid' }));
    try {
      expect(await invoiceOf(a!, await echo(a!, 'one'))).toMatch(/^lnbcrt210n1edgestrdev/);
      expect(await invoiceOf(b!, await echo(b!, 'two'))).toMatch(/^lnbcrt210n1edgestrdev/);
      const third = await echo(c!, 'three');
      expect((await c!.answer(third)).result).toMatchObject({ ok: false, error: { code: RPC.RATE_LIMITED, message: expect.stringMatching(/^rate-limited: too many calls to this bridge are waiting for a payment \(quota bridge_calls_per_day\); retry in [1-6] s$/) } });
      expect(c!.notifications(third)).toEqual([]);
    } finally {
      for (const client of clients) client.close();
    }
  });
});
