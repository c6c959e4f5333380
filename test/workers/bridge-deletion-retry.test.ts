// A server's announcements deleted (NIP-09) when it is removed or made private
// (workers/bridge/bridge-do.ts): the deletion counts as done only once the public shard, the one
// /mcp and DVMCP discovery read, took it (OK true or `duplicate:`). One refused or unanswered is kept
// (the signed event, by server id: a removed server has no row any more), logged and sent again to
// the public shard at each watchdog until it lands, for at most PENDING_DELETION_MS; at most
// MAX_PENDING_DELETIONS are kept, the oldest given up first. The public shard refuses through the
// test seam RelayShard.clock (an hour behind: `created_at is too far in the future`). A server made
// private has its announcements deleted also while its upstream does not answer. A bridge left with
// no server stays awake (its watchdog every 30 s) until its deletions landed or were given up.
import { env, runInDurableObject } from 'cloudflare:test';
import { describe, expect, it, vi } from 'vitest';
import type { NostrEvent } from '../../src/shared/event.js';
import { KIND } from '../../src/shared/kinds.js';
import { MAX_PENDING_DELETIONS, PENDING_DELETION_MS, ServerStore } from '../../workers/bridge/server-store.js';
import { announcements, directBridge, everythingUrl, nextWatchdog, warnings, whilePublicShardRefuses } from './bridge-helpers.js';
import { BASE, randomHex } from './helpers.js';

const bridgeOf = (owner: string) => env.BRIDGE.get(env.BRIDGE.idFromName(owner));
const ANNOUNCED = [KIND.DVMCP_SERVER, KIND.DVMCP_TOOLS];
const PUBLIC_SHARD = `${BASE.replace(/^http/, 'ws')}/`;
const REFUSED = new RegExp(`^bridge: ${PUBLIC_SHARD} refused 5 [0-9a-f]{64}: invalid: created_at is too far in the future$`);

/** A fresh owner's bridge with one public server `id` on server-everything, its announcements on the public shard. */
async function announcedServer(id: string): Promise<{ owner: string; provider: string }> {
  const { owner, provider } = await directBridge([{ id, url: everythingUrl() }]);
  expect(await announcements(provider, ANNOUNCED, (es) => es.length === 2)).toHaveLength(2);
  return { owner, provider };
}

/** The deletions the bridge of `owner` keeps to send again: server id and the deletion's reason. */
const pending = (owner: string) =>
  runInDurableObject(bridgeOf(owner), (_i, state) =>
    state.storage.sql.exec<{ id: string; event: string }>('SELECT id, event FROM pending_deletions ORDER BY id').toArray().map((r) => [r.id, (JSON.parse(r.event) as NostrEvent).content]),
  );

/** Whether deletion `d` names the 31316 of `provider`'s server `id`. */
const deletes = (d: NostrEvent, provider: string, id: string): boolean => d.tags.some((t) => t[0] === 'a' && t[1] === `${KIND.DVMCP_SERVER}:${provider}:${id}`);

const notLanded = (provider: string, id: string, reason: string) =>
  `bridge: provider ${provider}: the deletion of the announcements of ${id} (${reason}) did not land on the public shard; sent again at each watchdog for 7 days`;

describe('bridge: a deletion of announcements the public shard did not take', () => {
  it('a server removed while the public shard refuses its deletion: kept, sent again at the next watchdog, where it lands (the same event the owner’s shard got), though the bridge has no server left; the one after sends nothing', async () => {
    const id = `removed-${randomHex(4)}`;
    const { owner, provider } = await announcedServer(id);
    const logged = await whilePublicShardRefuses(async () => expect(await bridgeOf(owner).removeServer(id)).toBe(true));
    expect(logged.filter((l) => REFUSED.test(l) || l.includes('did not land'))).toEqual([expect.stringMatching(REFUSED), notLanded(provider, id, 'server removed')]);
    expect(await announcements(provider, ANNOUNCED, () => true)).toHaveLength(2);
    expect(await announcements(provider, [KIND.DELETION], () => true)).toEqual([]);
    const onOwnerShard = await announcements(provider, [KIND.DELETION], (es) => es.length > 0, `/r/${owner}`);
    expect(onOwnerShard.map((d) => [d.content, deletes(d, provider, id)])).toEqual([['server removed', true]]);
    expect(await pending(owner)).toEqual([[id, 'server removed']]);

    await nextWatchdog(owner);
    expect(await announcements(provider, ANNOUNCED, (es) => es.length === 0)).toEqual([]);
    expect(await announcements(provider, [KIND.DELETION], (es) => es.length > 0)).toEqual(onOwnerShard);
    expect(await pending(owner)).toEqual([]);
    // Landed: the next watchdog sends nothing, even to a public shard that would refuse it; with no
    // server left and nothing pending, the bridge goes idle (bridge-idle.test.ts): no alarm after it.
    const after = await whilePublicShardRefuses(() => nextWatchdog(owner));
    expect(after.filter((l) => l.includes(' refused 5 '))).toEqual([]);
    expect(await runInDurableObject(bridgeOf(owner), (_i, state) => state.storage.getAlarm())).toBeNull();
  });

  it('a server made private while the public shard refuses the deletion: kept, sent again at the next watchdog, where it lands', async () => {
    const id = `private-${randomHex(4)}`;
    const { owner, provider } = await announcedServer(id);
    const logged = await whilePublicShardRefuses(async (sofar) => {
      expect(await bridgeOf(owner).updateServer(id, { public: false })).toMatchObject({ id, public: false });
      // The refresh it asks for runs in the alarm (due at once).
      await vi.waitFor(() => expect(sofar()).toContain(notLanded(provider, id, 'server made private')), { timeout: 10_000, interval: 50 });
    });
    expect(logged.filter((l) => REFUSED.test(l))).toHaveLength(1);
    expect(await announcements(provider, ANNOUNCED, () => true)).toHaveLength(2);
    expect(await pending(owner)).toEqual([[id, 'server made private']]);

    await nextWatchdog(owner);
    expect(await announcements(provider, ANNOUNCED, (es) => es.length === 0)).toEqual([]);
    const deletions = await announcements(provider, [KIND.DELETION], (es) => es.length > 0);
    expect(deletions.map((d) => [d.content, deletes(d, provider, id)])).toEqual([['server made private', true]]);
    expect(await pending(owner)).toEqual([]);
  });

  it('a server made private while its upstream does not answer has its announcements deleted all the same', async () => {
    const id = `private-down-${randomHex(4)}`;
    const { owner, provider } = await announcedServer(id);
    const gone = `${new URL(everythingUrl()).origin}/gone`;
    expect(await bridgeOf(owner).updateServer(id, { public: false, url: gone })).toMatchObject({ id, public: false, url: gone });
    expect(await announcements(provider, ANNOUNCED, (es) => es.length === 0)).toEqual([]);
    const deletions = await announcements(provider, [KIND.DELETION], (es) => es.length > 0);
    expect(deletions.map((d) => [d.content, deletes(d, provider, id)])).toEqual([['server made private', true]]);
  });

  it('a kept deletion is given up (logged) once PENDING_DELETION_MS passed without it landing: not sent again', async () => {
    const id = `given-up-${randomHex(4)}`;
    const { owner, provider } = await announcedServer(id);
    await whilePublicShardRefuses(async () => expect(await bridgeOf(owner).removeServer(id)).toBe(true));
    expect(await pending(owner)).toEqual([[id, 'server removed']]);
    // Kept since just over the bound.
    await runInDurableObject(bridgeOf(owner), (_i, state) => {
      state.storage.sql.exec('UPDATE pending_deletions SET since = ?', Date.now() - PENDING_DELETION_MS - 60_000);
    });
    const logged = await warnings(() => nextWatchdog(owner));
    expect(logged).toContain(`bridge: provider ${provider}: gave up the deletion of the announcements of ${id} (server removed): the public shard did not take it in 7 days; check its clock and its logs`);
    expect(await pending(owner)).toEqual([]);
    expect(await announcements(provider, ANNOUNCED, () => true)).toHaveLength(2);
    expect(await announcements(provider, [KIND.DELETION], () => true)).toEqual([]);
  });

  it(`at most MAX_PENDING_DELETIONS (${MAX_PENDING_DELETIONS}) are kept: one more gives up the oldest`, async () => {
    const dropped = await runInDurableObject(bridgeOf(`cap-${randomHex(8)}`), (_i, state) => {
      const store = new ServerStore(state.storage.sql, env);
      const deletion = (i: number): NostrEvent => ({ id: i.toString(16).padStart(64, '0'), pubkey: '0'.repeat(64), created_at: i, kind: KIND.DELETION, tags: [], content: 'server removed', sig: '0'.repeat(128) });
      const given: string[][] = [];
      for (let i = 0; i <= MAX_PENDING_DELETIONS; i++) given.push(store.keepDeletion(`s${i}`, deletion(i), 1000 + i).map((d) => d.id));
      return { given, kept: store.pendingDeletions().map((d) => d.id) };
    });
    expect(dropped.given.slice(0, MAX_PENDING_DELETIONS).flat()).toEqual([]);
    expect(dropped.given[MAX_PENDING_DELETIONS]).toEqual(['s0']);
    expect(dropped.kept).toHaveLength(MAX_PENDING_DELETIONS);
    expect(dropped.kept).not.toContain('s0');
  });
});
