// An operator's restore of the public shard brings back this deployment's bridges only as the
// operators vet them now: a backup's ["PROVISIONED", provider, owner, "bridge", t] line is restored
// as `bridge` (NIP-11 bridge_providers, listed first by /mcp and the clients) only for an owner
// vetted at the restore, else as `provisioned` (its ownership known, never listed), as the API
// records an owner that is not vetted (common/deployment-bridges.ts recordPublicBridge). Before, an
// owner un-vetted (or removed) after the backup was listed again as one of the deployment's bridges.
import { createScheduledController, env, runInDurableObject } from 'cloudflare:test';
import { describe, expect, it } from 'vitest';
import worker from '../../workers/index.js';
import { shardStub } from '../../workers/common/shards.js';
import { backupKey, backupName } from '../../workers/relay-do/backup.js';
import { api } from './api-helpers.js';
import { everythingUrl } from './bridge-helpers.js';
import { keys, type Keys } from './helpers.js';
import { TEST_ADMIN_SK } from './test-keys.js';

const admin = (method: string, path: string, body?: unknown) => api(TEST_ADMIN_SK, method, path, body);

/** A bridge of a new owner the operator added (vetted): registered through the management API. */
async function bridgeOfNewOwner(): Promise<{ owner: Keys; provider: string }> {
  const owner = keys();
  expect(await admin('POST', '/api/admin/owners', { pubkey: owner.pk })).toMatchObject({ status: 201 });
  const added = await api(owner.sk, 'POST', '/api/bridge/servers', { id: 'restored', url: everythingUrl(), public: false });
  expect(added).toMatchObject({ status: 201, json: { id: 'restored' } });
  return { owner, provider: (added.json as { provider: string }).provider };
}

/** The public shard forgets `provider`'s records (as a shard restored fresh, or a bridge withdrawn). */
const forget = (provider: string) =>
  runInDurableObject(shardStub(env, null), (_i, state) => void state.storage.sql.exec('DELETE FROM agent_owners WHERE agent = ?', provider));

describe('a restore of the public shard lists a bridge as this deployment’s only if its owner is vetted now', () => {
  it('un-vetted or removed after the backup: restored as provisioned, not in bridge_providers; a vetted owner’s lost record comes back as bridge', async () => {
    const [unvetted, removed, vetted] = [await bridgeOfNewOwner(), await bridgeOfNewOwner(), await bridgeOfNewOwner()];
    const shard = shardStub(env, null);
    expect(await shard.bridgeProviders()).toEqual(expect.arrayContaining([unvetted.provider, removed.provider, vetted.provider]));

    const at = Date.UTC(2026, 11, 1, 3, 0, 0);
    await worker.scheduled(createScheduledController({ scheduledTime: at, cron: '0 * * * *' }), env);
    const lines = (await (await env.BACKUPS!.get(backupKey(null, backupName(at))))!.text())
      .split('\n')
      .filter((l) => l !== '')
      .map((l) => JSON.parse(l) as unknown);
    for (const b of [unvetted, removed, vetted]) expect(lines).toContainEqual(['PROVISIONED', b.provider, b.owner.pk, 'bridge', expect.any(Number)]);

    expect(await admin('PATCH', `/api/admin/owners/${unvetted.owner.pk}`, { vetted: false })).toMatchObject({ status: 200, json: { vetted: false } });
    expect(await admin('DELETE', `/api/admin/owners/${removed.owner.pk}`)).toEqual({ status: 204, json: null });
    await forget(removed.provider);
    await forget(vetted.provider);
    expect(await shard.bridgeProviders()).not.toContain(unvetted.provider);

    const restored = await admin('POST', '/api/admin/shards/public/restore', { backup: backupName(at) });
    expect(restored).toMatchObject({ status: 200, json: { refused: {} } });
    const providers = await shard.bridgeProviders();
    expect(providers).toContain(vetted.provider);
    expect(providers).not.toContain(unvetted.provider);
    expect(providers).not.toContain(removed.provider);
    // Their ownership is still known there, as provisioned only.
    expect(await shard.isAgentOwner(unvetted.provider, unvetted.owner.pk)).toBe(true);
    expect(await shard.isAgentOwner(removed.provider, removed.owner.pk)).toBe(true);
    await runInDurableObject(shard, (_i, state) => {
      const sources = (p: string) => state.storage.sql.exec<{ source: string }>('SELECT source FROM agent_owners WHERE agent = ?', p).toArray().map((r) => r.source);
      expect(sources(unvetted.provider)).toEqual(['provisioned']);
      expect(sources(removed.provider)).toEqual(['provisioned']);
      expect(sources(vetted.provider)).toEqual(['bridge']);
    });
  });
});
