// The bridge of an owner the operator removed or suspended (workers/bridge/bridge-do.ts), with open
// shards on (as in the test configuration, where every key has a shard): whether the bridge may serve
// is the owner rule (workers/common/owners.ts), never whether a shard exists. A removed owner's
// bridge answers nothing; at its next watchdog it withdraws (its announcements deleted, so its servers
// leave the /mcp catalog; no longer one of the deployment's bridges; its relay connections closed; its
// alarm only checks the registry every OWNER_RECHECK_MS) and comes back by itself once the owner is
// added again. A server's announcements count as withdrawn only once the public shard (the one /mcp
// reads) took their deletion: one refused is sent again at the next check. The deletions go to the
// public shard only, all at once: the removed owner's shard (read-only; outside EDGESTR_OPEN_SHARDS
// not served, so each deletion there waited 5 s for a connection) gets none. A suspended owner's
// bridge still records a zap receipt: a call made before the suspension does not run, and the
// operator is told to refund it. A shard RPC that fails while the bridge withdraws or is reinstated
// (a shard reset) does not end its watchdog: the failure is logged and the next check booked.
import { env, runDurableObjectAlarm, runInDurableObject } from 'cloudflare:test';
import { describe, expect, inject, it, vi } from 'vitest';
import '../lnurl/provided.js';
import type { NostrEvent } from '../../src/shared/event.js';
import { KIND } from '../../src/shared/kinds.js';
import { OWNER_RECHECK_MS } from '../../workers/bridge/bridge-do.js';
import { shardStub } from '../../workers/common/shards.js';
import type { RelayEnv } from '../../workers/relay-do/shard.js';
import { api } from './api-helpers.js';
import { announcements, bridgeReady, DvmcpClient, everythingUrl, publicShardClock, registerServer, warnings } from './bridge-helpers.js';
import { BASE, connect, keys, now, randomHex, socketObjects, subscriptionsOf, type Keys } from './helpers.js';
import { allToolNames, gatewayClient } from './mcp-gateway-helpers.js';
import { TEST_ADMIN_SK } from './test-keys.js';
import { holdObject } from './hold-object.js';

const admin = (method: string, path: string, body?: unknown) => api(TEST_ADMIN_SK, method, path, body);
const bridgeOf = (owner: string) => env.BRIDGE.get(env.BRIDGE.idFromName(owner));
const ANNOUNCED = [KIND.DVMCP_SERVER, KIND.DVMCP_TOOLS];

/** A new owner added by the operator, with one bridge server `id` on server-everything (answering); its provider. */
async function ownerWithServer(id: string, extra: Record<string, unknown> = {}): Promise<{ owner: Keys; provider: string }> {
  return ownerWithServers([id], extra);
}

/** A new owner added by the operator, with bridge servers `ids` on server-everything (answering); its provider. */
async function ownerWithServers(ids: string[], extra: Record<string, unknown> = {}): Promise<{ owner: Keys; provider: string }> {
  const owner = keys();
  expect((await admin('POST', '/api/admin/owners', { pubkey: owner.pk })).status).toBe(201);
  let provider = '';
  for (const id of ids) {
    const r = await api(owner.sk, 'POST', '/api/bridge/servers', { id, url: everythingUrl(), ...extra });
    expect(r.status).toBe(201);
    provider = (r.json as { provider: string }).provider;
  }
  await bridgeReady(provider);
  return { owner, provider };
}

/** Each server of the bridge of `owner` and whether it is marked announced (the hash of its last announcement set, '' when none is out). */
const marked = (owner: string) =>
  runInDurableObject(bridgeOf(owner), (_i, state) =>
    state.storage.sql.exec<{ id: string; announced: string }>('SELECT id, announced FROM servers ORDER BY id').toArray().map((r) => [r.id, r.announced !== '']),
  );

/**
 * Runs the objects of `owner`'s shard as a deployment with closed shards (EDGESTR_OPEN_SHARDS
 * unset; `closed` false: set again), as the test configuration cannot: there a removed owner's
 * shard is no longer served (its sockets closed, new ones 404).
 */
async function closedShards(owner: string, closed: boolean): Promise<void> {
  for (const stub of new Set([shardStub(env, owner), ...socketObjects(owner)])) {
    await runInDurableObject(stub, (instance) => {
      const shard = instance as unknown as { env: RelayEnv };
      shard.env = { ...shard.env, EDGESTR_OPEN_SHARDS: closed ? undefined : 'true' };
    });
  }
}

/** The still-allowed owner's (EDGESTR_OWNERS) server on server-everything, announced and answering: the sentinel's target. */
async function keptServer(): Promise<{ provider: string; id: string }> {
  const kept = await registerServer({ id: `kept-${randomHex(4)}` });
  await announcements(kept.provider, [KIND.DVMCP_TOOLS], (es) => es.some((e) => e.tags.some((t) => t[0] === 's' && t[1] === kept.id)));
  await bridgeReady(kept.provider);
  return kept;
}

/** The 26910 answers `c` received to request `id`. */
const answersTo = (c: DvmcpClient, id: string): NostrEvent[] =>
  c.sock.frames
    .map((f) => (f[0] === 'EVENT' ? (f[2] as NostrEvent) : undefined))
    .filter((e): e is NostrEvent => e?.kind === KIND.DVMCP_RESPONSE && e.tags.some((t) => t[0] === 'e' && t[1] === id));

/**
 * Sends `c`'s ping and tools/list to its provider's server `s`, then, on the same socket, a
 * tools/list to the kept server (the sentinel: more work than a ping, which needs no upstream, and
 * as much as the tools/list); once the sentinel is answered, the answers to the first two.
 */
async function unansweredBehindSentinel(c: DvmcpClient, s: string, kept: { provider: string; id: string }): Promise<NostrEvent[]> {
  const ids = [await c.send(c.request('ping', undefined, { s })), await c.send(c.request('tools/list', undefined, { s }))];
  const sentinel = c.request('tools/list', undefined, { tags: [['p', kept.provider], ['method', 'tools/list'], ['s', kept.id]] });
  await c.send(sentinel);
  const answer = await c.answer(sentinel.id);
  expect(answer.result.ok).toBe(true);
  return ids.flatMap((id) => answersTo(c, id));
}

/** The names of every tool /mcp lists now. */
async function gatewayTools(): Promise<string[]> {
  const client = await gatewayClient('owner-removal');
  try {
    return await allToolNames(client);
  } finally {
    await client.close();
  }
}

describe('a removed owner’s bridge', () => {
  it('answers nothing once the operator removed the owner (open shards): a stranger’s request is not answered, the request behind it to another owner’s bridge is', async () => {
    const kept = await keptServer();
    const id = `gone-${randomHex(4)}`;
    const { owner, provider } = await ownerWithServer(id);
    const c = await DvmcpClient.open(provider);
    try {
      expect((await c.call('tools/list', undefined, { s: id })).result.ok).toBe(true);
      expect(await admin('DELETE', `/api/admin/owners/${owner.pk}`)).toEqual({ status: 204, json: null });
      expect(await unansweredBehindSentinel(c, id, kept)).toEqual([]);
    } finally {
      c.close();
    }
  });

  it('withdraws at its next watchdog: announcements deleted (gone from /mcp), no longer a deployment bridge, connections closed, the registry checked every 10 min; re-added, it comes back by itself', async () => {
    const kept = await keptServer();
    const id = `gone-${randomHex(4)}`;
    const { owner, provider } = await ownerWithServer(id);
    await announcements(provider, ANNOUNCED, (es) => es.length === 2);
    expect(await shardStub(env, null).bridgeProviders()).toContain(provider);
    expect(await admin('DELETE', `/api/admin/owners/${owner.pk}`)).toEqual({ status: 204, json: null });

    expect(await runDurableObjectAlarm(bridgeOf(owner.pk))).toBe(true);
    const next = await runInDurableObject(bridgeOf(owner.pk), (_i, state) => state.storage.getAlarm());
    expect(next).toBeGreaterThan(Date.now() + 9 * 60_000);
    expect(OWNER_RECHECK_MS).toBe(600_000);
    expect(next).toBeLessThanOrEqual(Date.now() + OWNER_RECHECK_MS);
    expect(await announcements(provider, ANNOUNCED, (es) => es.length === 0)).toEqual([]);
    const deletion = (await announcements(provider, [KIND.DELETION], (es) => es.length > 0))[0]!;
    expect(deletion.tags).toEqual(expect.arrayContaining([['a', `${KIND.DVMCP_SERVER}:${provider}:${id}`]]));
    expect(deletion.content).toBe('the owner was removed from this deployment');
    expect(await shardStub(env, null).bridgeProviders()).not.toContain(provider);
    // The shards drop a closed connection's subscriptions as they see it close.
    await vi.waitFor(async () => expect([await subscriptionsOf(null, provider), await subscriptionsOf(owner.pk, provider)]).toEqual([0, 0]), { timeout: 5_000, interval: 50 });
    const tools = await gatewayTools();
    expect(tools).toContain(`${kept.id}__echo`);
    expect(tools.filter((t) => t.includes(id))).toEqual([]);
    // Another watchdog while removed publishes nothing more (the alarm has ended: what it publishes is stored) and keeps the long interval.
    expect(await runDurableObjectAlarm(bridgeOf(owner.pk))).toBe(true);
    expect(await announcements(provider, [KIND.DELETION], () => true)).toEqual([deletion]);
    expect(await runInDurableObject(bridgeOf(owner.pk), (_i, state) => state.storage.getAlarm())).toBeGreaterThan(Date.now() + OWNER_RECHECK_MS - 60_000);

    // Added again: the check due in 10 min (run now) brings the bridge back, its servers announced again.
    while (now() <= deletion.created_at) await new Promise((r) => setTimeout(r, 50)); // a re-announcement dated as the deletion would count as deleted
    expect((await admin('POST', '/api/admin/owners', { pubkey: owner.pk })).status).toBe(201);
    expect(await runDurableObjectAlarm(bridgeOf(owner.pk))).toBe(true);
    await bridgeReady(provider);
    expect(await announcements(provider, ANNOUNCED, (es) => es.length === 2)).toHaveLength(2);
    expect(await shardStub(env, null).bridgeProviders()).toContain(provider);
    const watchdog = await runInDurableObject(bridgeOf(owner.pk), (_i, state) => state.storage.getAlarm());
    expect(watchdog).toBeLessThanOrEqual(Date.now() + 30_000);
  });
});

describe('a removed owner’s bridge withdrawing its announcements', () => {
  it('a deletion the public shard refused is sent again at the next check until it lands: the server stays marked announced (its announcements on the public shard) meanwhile, the key revoked all the same', async () => {
    const id = `refused-${randomHex(4)}`;
    const { owner, provider } = await ownerWithServer(id);
    await announcements(provider, ANNOUNCED, (es) => es.length === 2);
    expect(await admin('DELETE', `/api/admin/owners/${owner.pk}`)).toEqual({ status: 204, json: null });

    // The public shard's clock an hour behind: it refuses the deletion dated now.
    await publicShardClock(-3600_000);
    let logged: string[];
    try {
      logged = await warnings(async () => expect(await runDurableObjectAlarm(bridgeOf(owner.pk))).toBe(true));
    } finally {
      await publicShardClock(0);
    }
    const publicShard = `${BASE.replace(/^http/, 'ws')}/`;
    expect(logged.filter((l) => l.startsWith(`bridge: ${publicShard} refused`))).toEqual([expect.stringMatching(new RegExp(`^bridge: ${publicShard} refused 5 [0-9a-f]{64}: invalid: created_at is too far in the future$`))]);
    expect(await marked(owner.pk)).toEqual([[id, true]]);
    expect(await announcements(provider, ANNOUNCED, () => true)).toHaveLength(2);
    expect(await announcements(provider, [KIND.DELETION], () => true)).toEqual([]);
    expect(logged).toContain(`bridge: provider ${provider}: the deletion of the announcements of ${id} did not land on the public shard; sent again in 10 min`);
    // The rest of the withdrawal is done: the key revoked, the alarm 10 min away.
    expect(await shardStub(env, null).bridgeProviders()).not.toContain(provider);
    expect(await runInDurableObject(bridgeOf(owner.pk), (_i, state) => state.storage.getAlarm())).toBeGreaterThan(Date.now() + OWNER_RECHECK_MS - 60_000);

    // The next check (due in 10 min, run now) sends it again: it lands (the public shard is what /mcp reads).
    expect(await runDurableObjectAlarm(bridgeOf(owner.pk))).toBe(true);
    expect(await announcements(provider, ANNOUNCED, (es) => es.length === 0)).toEqual([]);
    const deletions = await announcements(provider, [KIND.DELETION], (es) => es.length > 0);
    expect(deletions.map((d) => [d.content, d.tags.some((t) => t[0] === 'a' && t[1] === `${KIND.DVMCP_SERVER}:${provider}:${id}`)])).toEqual([['the owner was removed from this deployment', true]]);
    expect(await marked(owner.pk)).toEqual([[id, false]]);
    // Landed: the check after it publishes nothing more.
    expect(await runDurableObjectAlarm(bridgeOf(owner.pk))).toBe(true);
    expect(await announcements(provider, [KIND.DELETION], () => true)).toEqual(deletions);
  });

  it('outside EDGESTR_OPEN_SHARDS, with several servers: one check deletes every server’s announcements on the public shard and sends none to the owner’s shard, which is no longer served (each one there waited 5 s for a connection)', { timeout: 60_000 }, async () => {
    const ids = [0, 1, 2].map((i) => `many${i}-${randomHex(4)}`);
    const { owner, provider } = await ownerWithServers(ids);
    await announcements(provider, ANNOUNCED, (es) => es.length === 2 * ids.length);
    await closedShards(owner.pk, true);
    try {
      expect(await admin('DELETE', `/api/admin/owners/${owner.pk}`)).toEqual({ status: 204, json: null });
      const logged = await warnings(async () => expect(await runDurableObjectAlarm(bridgeOf(owner.pk))).toBe(true));
      expect(logged.filter((l) => l.includes(`/r/${owner.pk}`))).toEqual([]);
      expect(logged.filter((l) => l.includes('did not land'))).toEqual([]);
      expect(await marked(owner.pk)).toEqual(ids.map((id) => [id, false]));
      expect(await announcements(provider, ANNOUNCED, (es) => es.length === 0)).toEqual([]);
      const deletions = await announcements(provider, [KIND.DELETION], (es) => es.length === ids.length);
      expect(ids.map((id) => deletions.filter((d) => d.tags.some((t) => t[0] === 'a' && t[1] === `${KIND.DVMCP_SERVER}:${provider}:${id}`)).length)).toEqual([1, 1, 1]);
      expect(await shardStub(env, null).bridgeProviders()).not.toContain(provider);
    } finally {
      await closedShards(owner.pk, false);
    }
  });
});

describe('a suspended owner’s bridge', () => {
  it('records a zap receipt for a call made before the suspension: the payment row paid, the call not run, the operator told to refund the client', async () => {
    const kept = await keptServer();
    const owner = keys();
    expect((await admin('POST', '/api/admin/owners', { pubkey: owner.pk })).status).toBe(201);
    // This bridge takes zaps: a Lightning address (the local LNURL-pay server), set before its payments are first used.
    const bridgeEnv = await runInDurableObject(bridgeOf(owner.pk), (i) => (i as unknown as { env: Record<string, string | undefined> }).env);
    const saved = { address: bridgeEnv.EDGESTR_LN_ADDRESS, expiry: bridgeEnv.EDGESTR_PAYMENT_EXPIRY };
    await runInDurableObject(bridgeOf(owner.pk), (i) => {
      const e = (i as unknown as { env: Record<string, string | undefined> }).env;
      e.EDGESTR_LN_ADDRESS = `${inject('lnurlUrl')}/.well-known/lnurlp/bridge`;
      e.EDGESTR_PAYMENT_EXPIRY = '600';
    });
    const warn = vi.spyOn(console, 'warn');
    const id = `zapped-${randomHex(4)}`;
    let c: DvmcpClient | undefined;
    try {
      const r = await api(owner.sk, 'POST', '/api/bridge/servers', { id, url: everythingUrl(), prices: { echo: { price: '21', unit: 'sats' } } });
      expect(r.status).toBe(201);
      const { provider } = r.json as { provider: string };
      await bridgeReady(provider);
      c = await DvmcpClient.open(provider);
      const request = await c.send(c.request('tools/call', { name: 'echo', arguments: { message: 'paid before the suspension' } }, { s: id }));
      const note = (await c.sock.next((f) => f[0] === 'EVENT' && (f[2] as NostrEvent).kind === KIND.DVMCP_NOTIFICATION && (f[2] as NostrEvent).tags.some((t) => t[0] === 'e' && t[1] === request)))[2] as NostrEvent;
      const invoice = note.tags.find((t) => t[0] === 'amount')![2]!;
      expect(invoice).toMatch(/^lnbc210n1/);

      expect(await admin('PATCH', `/api/admin/owners/${owner.pk}`, { suspended: true })).toMatchObject({ status: 200, json: { suspended: true } });
      const paid = await fetch(`${inject('lnurlUrl')}/test/pay`, { method: 'POST', body: JSON.stringify({ invoice }) });
      const { receipt } = (await paid.json()) as { receipt: NostrEvent };
      const s = await connect('/');
      expect((await s.publish(receipt)).slice(2)).toEqual([true, '']);
      s.close();

      const row = () => runInDurableObject(bridgeOf(owner.pk), (_i, state) => state.storage.sql.exec<{ paid_at: number | null; cancelled_at: number | null; served_at: number | null; request_id: string }>('SELECT paid_at, cancelled_at, served_at, request_id FROM payments WHERE invoice = ?', invoice).one());
      await vi.waitFor(async () => expect((await row()).paid_at).not.toBeNull(), { timeout: 10_000, interval: 50 });
      expect(await row()).toMatchObject({ request_id: request, cancelled_at: expect.any(Number), served_at: null });
      const line = warn.mock.calls.map((args) => String(args[0])).find((l) => l.includes(invoice) || l.includes(`request ${request}`));
      expect(line).toMatch(new RegExp(`^bridge: payment of 21 sats for invoice [0-9a-f]{64} \\(request ${request} of client ${c.k.pk}\\) arrived after its request was cancelled: no call runs for it; refund the client if due$`));
      // Nothing answers the call: the request behind it to another owner's bridge is answered first.
      expect(await unansweredBehindSentinel(c, id, kept)).toEqual([]);
      expect(answersTo(c, request)).toEqual([]);
    } finally {
      c?.close();
      warn.mockRestore();
      await runInDurableObject(bridgeOf(owner.pk), (i) => {
        const e = (i as unknown as { env: Record<string, string | undefined> }).env;
        e.EDGESTR_LN_ADDRESS = saved.address;
        e.EDGESTR_PAYMENT_EXPIRY = saved.expiry;
      });
    }
  });
});

describe('a removed owner’s bridge whose shard RPC fails (a shard reset)', () => {
  /** The bridge's error lines logged while `run` ran. */
  async function errors(run: () => Promise<unknown>): Promise<string[]> {
    const error = vi.spyOn(console, 'error');
    try {
      await run();
      return error.mock.calls.map((args) => args.map(String).join(' ')).filter((l) => l.startsWith('bridge'));
    } finally {
      error.mockRestore();
    }
  }
  const alarmAt = (owner: string) => runInDurableObject(bridgeOf(owner), (_i, state) => state.storage.getAlarm());

  it('withdrawing: the owner’s shard failing its revokeAgent, the rest of the withdrawal is done (public shard revoked, connections closed), the check is booked in 10 min and revokes again', async () => {
    const id = `reset-${randomHex(4)}`;
    const { owner, provider } = await ownerWithServer(id);
    await announcements(provider, ANNOUNCED, (es) => es.length === 2);
    expect(await admin('DELETE', `/api/admin/owners/${owner.pk}`)).toEqual({ status: 204, json: null });
    const release = await holdObject(shardStub(env, owner.pk));
    const logged = await errors(async () => {
      const alarm = runDurableObjectAlarm(bridgeOf(owner.pk));
      await announcements(provider, [KIND.DELETION], (es) => es.length > 0); // landed on the public shard: the revocations come next
      await new Promise((r) => setTimeout(r, 200));
      await release(new Error('simulated shard reset'));
      expect(await alarm).toBe(true);
    });
    expect(logged).toEqual([`bridge: provider ${provider}: its key could not be revoked as a bridge of the deployment (the owner’s shard: simulated shard reset); tried again in 10 min`]);
    expect(await alarmAt(owner.pk)).toBeGreaterThan(Date.now() + OWNER_RECHECK_MS - 60_000);
    expect(await shardStub(env, null).bridgeProviders()).not.toContain(provider);
    expect(await shardStub(env, owner.pk).bridgeProviders()).toContain(provider);
    await vi.waitFor(async () => expect(await subscriptionsOf(null, provider)).toBe(0), { timeout: 5_000, interval: 50 });
    // The next check revokes on the owner's shard too: withdrawn, logged once.
    const warned = await warnings(async () => expect(await runDurableObjectAlarm(bridgeOf(owner.pk))).toBe(true));
    expect(warned.filter((l) => l.includes('withdrawn'))).toEqual([`bridge: owner ${owner.pk} is no longer allowed: provider ${provider} withdrawn (its announcements deleted on the public shard, connections closed)`]);
    expect(await shardStub(env, owner.pk).bridgeProviders()).not.toContain(provider);
    expect(await alarmAt(owner.pk)).toBeGreaterThan(Date.now() + OWNER_RECHECK_MS - 60_000);
  });

  it('reinstating: the public shard failing the record of its key, the check is booked in 30 s (not lost) and reinstates then', { timeout: 60_000 }, async () => {
    const id = `reset-${randomHex(4)}`;
    const { owner, provider } = await ownerWithServer(id);
    await announcements(provider, ANNOUNCED, (es) => es.length === 2);
    expect(await admin('DELETE', `/api/admin/owners/${owner.pk}`)).toEqual({ status: 204, json: null });
    expect(await runDurableObjectAlarm(bridgeOf(owner.pk))).toBe(true);
    expect(await shardStub(env, null).bridgeProviders()).not.toContain(provider);
    expect((await admin('POST', '/api/admin/owners', { pubkey: owner.pk })).status).toBe(201);

    const release = await holdObject(shardStub(env, null));
    const logged = await errors(async () => {
      const alarm = runDurableObjectAlarm(bridgeOf(owner.pk));
      await new Promise((r) => setTimeout(r, 300));
      await release(new Error('simulated shard reset'));
      expect(await alarm).toBe(true);
    });
    expect(logged).toEqual([`bridge: provider ${provider}: watchdog pass failed (simulated shard reset); next pass in 30 s`]);
    const next = await alarmAt(owner.pk);
    expect(next).not.toBeNull();
    expect(next).toBeLessThanOrEqual(Date.now() + 30_000);
    expect(await shardStub(env, null).bridgeProviders()).not.toContain(provider);
    // That pass (run now) reinstates the bridge: its key recorded again, answering.
    expect(await runDurableObjectAlarm(bridgeOf(owner.pk))).toBe(true);
    expect(await shardStub(env, null).bridgeProviders()).toContain(provider);
    await bridgeReady(provider);
  });
});
