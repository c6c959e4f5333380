// A suspended owner's bridge (workers/bridge/bridge-do.ts, `watch`): while the operators keep the
// owner suspended its watchdog neither dials the owner's servers (the fixture's /mcp-flood counts
// the tools/list of each refresh) nor publishes or refreshes their announcements on the public
// shard, nor records its key as one of the deployment's bridges again; what was announced before
// stays. Resumed, its next watchdog runs the refreshes that fell due meanwhile and announces.
import { env, runDurableObjectAlarm } from 'cloudflare:test';
import { describe, expect, it } from 'vitest';
import { KIND } from '../../src/shared/kinds.js';
import { shardStub } from '../../workers/common/shards.js';
import { api } from './api-helpers.js';
import { announcements, directBridge, floodStats, floodUrl, healthWhen, nextWatchdog, refreshAt, refreshDueNow, whilePublicShardRefuses } from './bridge-helpers.js';
import { now, randomHex } from './helpers.js';
import { TEST_ADMIN_SK } from './test-keys.js';

const admin = (method: string, path: string, body?: unknown) => api(TEST_ADMIN_SK, method, path, body);
const bridgeOf = (owner: string) => env.BRIDGE.get(env.BRIDGE.idFromName(owner));
const ANNOUNCED = [KIND.DVMCP_SERVER, KIND.DVMCP_TOOLS];

const suspend = async (owner: string, suspended: boolean) => expect(await admin('PATCH', `/api/admin/owners/${owner}`, { suspended })).toMatchObject({ status: 200, json: { suspended } });

describe('a suspended owner’s bridge', () => {
  it('does not dial its server nor announce it when a refresh falls due (its announcements once refused by the public shard); resumed, the next watchdog refreshes and announces', async () => {
    const bucket = randomHex(8);
    const id = `paused-${randomHex(4)}`;
    let owner = '';
    let provider = '';
    await whilePublicShardRefuses(async () => {
      ({ owner, provider } = await directBridge([{ id, url: floodUrl(bucket) }]));
      await healthWhen(owner, id, (h) => h.tools > 0 && h.announce_error !== null);
    });
    expect(await announcements(provider, ANNOUNCED, () => true)).toEqual([]);
    await suspend(owner, true);

    // The retry booked RETRY_MS after the refusal has come: the watchdog passes it by.
    const listed = (await floodStats(bucket)).lists;
    await refreshDueNow(owner, id);
    await nextWatchdog(owner);
    expect((await floodStats(bucket)).lists).toBe(listed);
    expect(await announcements(provider, ANNOUNCED, () => true)).toEqual([]);
    expect(await refreshAt(owner, id)).toBeLessThanOrEqual(Date.now()); // still due: it runs once the owner is resumed
    // Another pass while suspended: the same.
    await nextWatchdog(owner);
    expect((await floodStats(bucket)).lists).toBe(listed);

    await suspend(owner, false);
    await nextWatchdog(owner);
    expect((await floodStats(bucket)).lists).toBe(listed + 1);
    expect((await announcements(provider, ANNOUNCED, (es) => es.length === 2)).map((e) => e.kind).sort()).toEqual(ANNOUNCED);
    expect((await bridgeOf(owner).view(id))?.health).toMatchObject({ ok: true, announced: true, announce_error: null });
  });

  it('removed, withdrawn, added again and suspended before its next watchdog: not reinstated (no deployment bridge, nothing announced, its server not dialled) until resumed', async () => {
    const bucket = randomHex(8);
    const id = `readded-${randomHex(4)}`;
    const { owner, provider } = await directBridge([{ id, url: floodUrl(bucket) }]);
    await announcements(provider, ANNOUNCED, (es) => es.length === 2);
    expect(await admin('DELETE', `/api/admin/owners/${owner}`)).toEqual({ status: 204, json: null });
    expect(await runDurableObjectAlarm(bridgeOf(owner))).toBe(true);
    const deletion = (await announcements(provider, [KIND.DELETION], (es) => es.length > 0))[0]!;
    expect(await shardStub(env, null).bridgeProviders()).not.toContain(provider);
    while (now() <= deletion.created_at) await new Promise((r) => setTimeout(r, 50)); // a re-announcement dated as the deletion would count as deleted

    expect((await admin('POST', '/api/admin/owners', { pubkey: owner })).status).toBe(201);
    await suspend(owner, true);
    const listed = (await floodStats(bucket)).lists;
    expect(await runDurableObjectAlarm(bridgeOf(owner))).toBe(true); // the check booked 10 min after the withdrawal, run now
    expect(await shardStub(env, null).bridgeProviders()).not.toContain(provider);
    expect(await announcements(provider, ANNOUNCED, () => true)).toEqual([]);
    expect((await floodStats(bucket)).lists).toBe(listed);

    await suspend(owner, false);
    await nextWatchdog(owner);
    expect(await shardStub(env, null).bridgeProviders()).toContain(provider);
    expect(await announcements(provider, ANNOUNCED, (es) => es.length === 2)).toHaveLength(2);
    expect((await floodStats(bucket)).lists).toBe(listed + 1);
  });
});
