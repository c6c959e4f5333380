// A bridge with nothing to do goes idle (workers/bridge/bridge-do.ts, the watchdog): once it has no
// server, no deletion of announcements left to send again and no invoice a payment may still come
// for, its next watchdog closes its relay connections (an outbound WebSocket keeps a Durable Object
// in memory) and books no alarm. Before, a bridge whose servers were all deleted dialled both shards
// and woke every 30 s for as long as it existed (a stranger on open sign-up: register a server,
// delete it, 2,880 alarms a day and two held sockets for good). Registering a server wakes it:
// connected, announced, answering. Sockets are counted on the shards' side (the objects holding the
// sockets of a shard, its edges at K > 1): those authenticated (NIP-42) as the provider.
import { env, runDurableObjectAlarm, runInDurableObject } from 'cloudflare:test';
import { describe, expect, inject, it, vi } from 'vitest';
import '../lnurl/provided.js';
import type { NostrEvent } from '../../src/shared/event.js';
import { KIND } from '../../src/shared/kinds.js';
import { api } from './api-helpers.js';
import { announcements, bridgeReady, DvmcpClient, everythingUrl } from './bridge-helpers.js';
import { connect, keys, randomHex, socketObjects, type Keys } from './helpers.js';
import { TEST_ADMIN_SK } from './test-keys.js';

const bridgeOf = (owner: string) => env.BRIDGE.get(env.BRIDGE.idFromName(owner));
const ANNOUNCED = [KIND.DVMCP_SERVER, KIND.DVMCP_TOOLS];
const alarmAt = (owner: string) => runInDurableObject(bridgeOf(owner), (_i, state) => state.storage.getAlarm());
const IDLE = (provider: string) => `bridge: provider ${provider}: no server and nothing pending: connections closed, no watchdog until a server is registered`;

/** A new owner added by the operator. */
async function addedOwner(): Promise<Keys> {
  const owner = keys();
  expect((await api(TEST_ADMIN_SK, 'POST', '/api/admin/owners', { pubkey: owner.pk })).status).toBe(201);
  return owner;
}

/** Registers `owner`'s server `id` on server-everything; the provider. */
async function register(owner: Keys, id: string, extra: Record<string, unknown> = {}): Promise<string> {
  const r = await api(owner.sk, 'POST', '/api/bridge/servers', { id, url: everythingUrl(), ...extra });
  expect(r.status).toBe(201);
  return (r.json as { provider: string }).provider;
}

/** Open WebSockets authenticated as `pubkey` on the shard of `owner` (null: the public shard). */
async function socketsOn(owner: string | null, pubkey: string): Promise<number> {
  let n = 0;
  for (const shard of socketObjects(owner)) {
    n += await runInDurableObject(shard, (_i, state) => {
      const cids = new Set(state.storage.sql.exec<{ cid: string }>('SELECT cid FROM conn_auth WHERE pubkey = ?', pubkey).toArray().map((r) => r.cid));
      return state.getWebSockets().filter((ws) => cids.has((ws.deserializeAttachment() as { cid?: string } | null)?.cid ?? '')).length;
    });
  }
  return n;
}

/** The bridge's sockets on its owner's shard and on the public shard. */
const bridgeSockets = async (owner: string, provider: string): Promise<number[]> => [await socketsOn(owner, provider), await socketsOn(null, provider)];

/** What the bridge logged (console.log and console.warn) while `run` ran. */
async function bridgeLines(run: () => Promise<unknown>): Promise<string[]> {
  const log = vi.spyOn(console, 'log');
  const warn = vi.spyOn(console, 'warn');
  try {
    await run();
    return [...log.mock.calls, ...warn.mock.calls].map((args) => args.map(String).join(' ')).filter((l) => l.startsWith('bridge: '));
  } finally {
    log.mockRestore();
    warn.mockRestore();
  }
}

describe('a bridge with no server', () => {
  it('its only server deleted (the deletion landed): the next watchdog closes its connections to both shards and books no alarm; a server registered again wakes it, announced and answering', async () => {
    const owner = await addedOwner();
    const id = `idle-${randomHex(4)}`;
    const provider = await register(owner, id);
    expect(await announcements(provider, ANNOUNCED, (es) => es.length === 2)).toHaveLength(2);
    await bridgeReady(provider);
    expect(await bridgeSockets(owner.pk, provider)).toEqual([1, 1]);

    expect(await api(owner.sk, 'DELETE', `/api/bridge/servers/${id}`)).toEqual({ status: 204, json: null });
    expect(await announcements(provider, ANNOUNCED, (es) => es.length === 0)).toEqual([]);
    expect(await runInDurableObject(bridgeOf(owner.pk), (_i, state) => state.storage.sql.exec('SELECT id FROM pending_deletions').toArray())).toEqual([]);

    const lines = await bridgeLines(async () => expect(await runDurableObjectAlarm(bridgeOf(owner.pk))).toBe(true));
    expect(lines).toContain(IDLE(provider));
    expect(await alarmAt(owner.pk)).toBeNull();
    await vi.waitFor(async () => expect(await bridgeSockets(owner.pk, provider)).toEqual([0, 0]), { timeout: 5_000, interval: 50 });
    expect(await runDurableObjectAlarm(bridgeOf(owner.pk))).toBe(false);

    // Registered again: connected, announced, answering, its watchdog back.
    const again = `${id}-again`;
    expect(await register(owner, again)).toBe(provider);
    const mine = (es: NostrEvent[]) => es.filter((e) => e.tags.some((t) => (t[0] === 'd' || t[0] === 's') && t[1] === again));
    expect(mine(await announcements(provider, ANNOUNCED, (es) => mine(es).length === 2))).toHaveLength(2);
    const c = await DvmcpClient.open(provider);
    try {
      const answer = await c.call('tools/call', { name: 'echo', arguments: { message: 'awake again' } }, { s: again });
      expect(answer.result).toEqual({ ok: true, value: { content: [{ type: 'text', text: 'Echo: awake again' }] } });
    } finally {
      c.close();
    }
    expect(await bridgeSockets(owner.pk, provider)).toEqual([1, 1]);
    const next = await alarmAt(owner.pk);
    expect(next).not.toBeNull();
    expect(next).toBeLessThanOrEqual(Date.now() + 30_000);
  });

  it('keeps listening while an invoice it handed out is open: a payment for it after the server was deleted is recorded and logged for a refund; once the invoice expired, idle', async () => {
    const owner = await addedOwner();
    // This bridge takes zaps (receipts come through its relays): a Lightning address (the local LNURL-pay server), set before its payments are first used.
    await runInDurableObject(bridgeOf(owner.pk), (i) => {
      const e = (i as unknown as { env: Record<string, string | undefined> }).env;
      e.EDGESTR_LN_ADDRESS = `${inject('lnurlUrl')}/.well-known/lnurlp/bridge`;
      e.EDGESTR_PAYMENT_EXPIRY = '600';
    });
    const id = `idle-priced-${randomHex(4)}`;
    const provider = await register(owner, id, { public: false, prices: { echo: { price: '21', unit: 'sats' } } });
    await bridgeReady(provider);
    const c = await DvmcpClient.open(provider);
    const log = vi.spyOn(console, 'warn');
    try {
      const request = await c.send(c.request('tools/call', { name: 'echo', arguments: { message: 'paid after the deletion' } }, { s: id }));
      const note = (await c.sock.next((f) => f[0] === 'EVENT' && (f[2] as NostrEvent).kind === KIND.DVMCP_NOTIFICATION && (f[2] as NostrEvent).tags.some((t) => t[0] === 'e' && t[1] === request)))[2] as NostrEvent;
      const invoice = note.tags.find((t) => t[0] === 'amount')![2]!;
      expect(await api(owner.sk, 'DELETE', `/api/bridge/servers/${id}`)).toEqual({ status: 204, json: null });

      // The invoice is open for 10 minutes: the watchdog goes on, connected.
      expect(await runDurableObjectAlarm(bridgeOf(owner.pk))).toBe(true);
      expect(await alarmAt(owner.pk)).toBeLessThanOrEqual(Date.now() + 30_000);
      expect(await bridgeSockets(owner.pk, provider)).toEqual([1, 1]);
      const paid = await fetch(`${inject('lnurlUrl')}/test/pay`, { method: 'POST', body: JSON.stringify({ invoice }) });
      const { receipt } = (await paid.json()) as { receipt: NostrEvent };
      const s = await connect('/');
      expect((await s.publish(receipt)).slice(2)).toEqual([true, '']);
      s.close();
      const row = () => runInDurableObject(bridgeOf(owner.pk), (_i, state) => state.storage.sql.exec<{ paid_at: number | null }>('SELECT paid_at FROM payments WHERE invoice = ?', invoice).one());
      await vi.waitFor(async () => expect((await row()).paid_at).not.toBeNull(), { timeout: 10_000, interval: 50 });
      expect(log.mock.calls.map((args) => String(args[0])).filter((l) => l.includes(`request ${request}`))).toEqual([
        expect.stringMatching(new RegExp(`^bridge: payment of 21 sats for invoice [0-9a-f]{64} \\(request ${request} of client ${c.k.pk}\\) arrived after its request was cancelled: no call runs for it; refund the client if due$`)),
      ]);

      // Another invoice never paid, expired: nothing left to wait for.
      await runInDurableObject(bridgeOf(owner.pk), (_i, state) => {
        state.storage.sql.exec("INSERT INTO payments (id, invoice, request_id, client, server, capability, sats, created, expires) VALUES ('x', 'lnbc-expired', 'r', 'c', ?, 'tools/call echo', 21, 1, ?)", id, Math.floor(Date.now() / 1000) - 1);
      });
      expect(await runDurableObjectAlarm(bridgeOf(owner.pk))).toBe(true);
      expect(await alarmAt(owner.pk)).toBeNull();
      await vi.waitFor(async () => expect(await bridgeSockets(owner.pk, provider)).toEqual([0, 0]), { timeout: 5_000, interval: 50 });
    } finally {
      c.close();
      log.mockRestore();
    }
  });
});
