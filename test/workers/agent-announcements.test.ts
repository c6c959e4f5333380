// The hosted agent's announcements (kind 0, relay list, ai.info 31340, DVMCP 31316/31317) on a
// relay, workers/agent/relay-links.ts and announcements.ts. While its owner is suspended the agent
// publishes none (as while removed): a reconnection announces nothing new on the public shard, and
// the announcements come back once the owner is resumed, on the connections already open. One the
// relay refused for a passing reason (`rate-limited:`, `error:`, no answer, a `created_at` its clock
// refuses) is sent again by the watchdog with back-off, on the same connection, until it is taken.
// The public shard refuses through the test seam RelayShard.clock (an hour behind: `invalid:
// created_at is too far in the future`), set only once the agent's connection is authenticated.
import { env, runDurableObjectAlarm, runInDurableObject } from 'cloudflare:test';
import { describe, expect, it, vi } from 'vitest';
import type { NostrEvent } from '../../src/shared/event.js';
import type { Agent } from '../../workers/agent/agent-do.js';
import { ANNOUNCE_RETRY_MS } from '../../workers/agent/announcements.js';
import { api } from './api-helpers.js';
import { announcements, publicShardClock } from './bridge-helpers.js';
import { BASE, keys, socketObjects, type Keys } from './helpers.js';
import { TEST_ADMIN_SK } from './test-keys.js';

const admin = (method: string, path: string, body?: unknown) => api(TEST_ADMIN_SK, method, path, body);
const stubOf = (agent: string) => env.AGENT.get(env.AGENT.idFromName(agent));
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const PUBLIC_SHARD = `${BASE.replace(/^http/, 'ws')}/`;
/** The agent's profile and ai.info. */
const PROFILE = [0, 31340];

async function ownerWithAgent(): Promise<{ owner: Keys; agent: string }> {
  const owner = keys();
  expect(await admin('POST', '/api/admin/owners', { pubkey: owner.pk })).toMatchObject({ status: 201 });
  const r = await api(owner.sk, 'POST', '/api/agents', { name: 'announced agent', provider: 'echo' });
  expect(r.status).toBe(201);
  const agent = (r.json as { pubkey: string }).pubkey;
  expect(await announcements(agent, PROFILE, (es) => es.length === 2)).toHaveLength(2);
  return { owner, agent };
}

const suspend = async (owner: Keys, suspended: boolean) =>
  expect(await admin('PATCH', `/api/admin/owners/${owner.pk}`, { suspended })).toMatchObject({ status: 200, json: { suspended } });

/** The ids of the public shard's connections authenticated as `agent`. */
async function publicConnections(agent: string): Promise<string[]> {
  const cids: string[] = [];
  for (const shard of socketObjects(null)) {
    cids.push(...(await runInDurableObject(shard, (_i, state) => state.storage.sql.exec<{ cid: string }>('SELECT cid FROM conn_auth WHERE pubkey = ?', agent).toArray().map((r) => r.cid))));
  }
  return cids.sort();
}

/** Closes, from the public shard's side, its connections authenticated as `agent`, and waits (~10 s at most) until the agent has authenticated a new one. */
async function reconnectOnPublicShard(agent: string): Promise<void> {
  const before = await publicConnections(agent);
  expect(before).toHaveLength(1);
  for (const shard of socketObjects(null)) {
    await runInDurableObject(shard, (_i, state) => {
      for (const ws of state.getWebSockets()) {
        const att = ws.deserializeAttachment() as { cid: string } | null;
        if (att && before.includes(att.cid)) ws.close(1012, 'service restart');
      }
    });
  }
  await vi.waitFor(async () => expect((await publicConnections(agent)).filter((c) => !before.includes(c))).toHaveLength(1), { timeout: 10_000, interval: 100 });
}

/** The agent's kind 0 and ai.info on the public shard, by kind: [kind, id, created_at]. */
const profileOf = async (agent: string, ready: (es: NostrEvent[]) => boolean = (es) => es.length === 2) =>
  (await announcements(agent, PROFILE, ready)).map((e) => [e.kind, e.id, e.created_at] as const).sort((a, b) => a[0] - b[0]);

describe('a suspended owner’s agent announces nothing new', () => {
  it('reconnected while suspended: no new kind 0 or ai.info on the public shard; resumed: announced again on the open connection', async () => {
    const { owner, agent } = await ownerWithAgent();
    const before = await profileOf(agent);
    // A second later, so that a new announcement would have a new created_at (and id).
    await sleep(1100);
    await suspend(owner, true);
    const errors = vi.spyOn(console, 'error');
    try {
      await reconnectOnPublicShard(agent);
      // Its setup (AUTH, subscriptions, then the announcements) had time to publish.
      await sleep(1500);
      expect(await profileOf(agent)).toEqual(before);
      expect(errors.mock.calls.filter((c) => String(c[0]).includes('announcement'))).toEqual([]);
    } finally {
      errors.mockRestore();
    }
    const connection = await publicConnections(agent);

    const resumedAt = Math.floor(Date.now() / 1000);
    await suspend(owner, false);
    const after = await profileOf(agent, (es) => es.length === 2 && es.every((e) => e.created_at >= resumedAt));
    expect(after.map(([kind, , at]) => [kind, at >= resumedAt])).toEqual([
      [0, true],
      [31340, true],
    ]);
    // On the connection it had: the announcements came without a reconnection.
    expect(await publicConnections(agent)).toEqual(connection);
  }, 40_000);
});

describe('an announcement the relay did not take', () => {
  it('is sent again by the watchdog on the same connection once the back-off has passed, and lands; then nothing more is due', async () => {
    const { owner, agent } = await ownerWithAgent();
    await suspend(owner, true);
    // Reconnected while suspended: the new connection's announcements are due, not sent.
    await reconnectOnPublicShard(agent);
    const connection = await publicConnections(agent);
    const before = await profileOf(agent);
    await sleep(1100);
    const logged = vi.spyOn(console, 'warn');
    const refusals = () => logged.mock.calls.map((c) => c.map(String).join(' ')).filter((l) => l.startsWith(`agent ${agent}: `) && l.includes('announcement'));
    try {
      await publicShardClock(-3600_000);
      try {
        // Resumed: the agent announces on its open connection, which the public shard refuses (its clock is an hour behind).
        await suspend(owner, false);
        await vi.waitFor(() => expect(refusals().length).toBeGreaterThanOrEqual(3), { timeout: 10_000, interval: 100 });
        await sleep(500);
      } finally {
        await publicShardClock(0);
      }
      expect(new Set(refusals())).toEqual(
        new Set([31340, 0, 10002].map((kind) => `agent ${agent}: ${PUBLIC_SHARD} did not take its kind ${kind} announcement (invalid: created_at is too far in the future); sent again in ${ANNOUNCE_RETRY_MS / 1000} s`)),
      );
      expect(await profileOf(agent)).toEqual(before);

      // A watchdog pass before the back-off has passed sends nothing.
      expect(await runDurableObjectAlarm(stubOf(agent))).toBe(true);
      await sleep(500);
      expect(await profileOf(agent)).toEqual(before);

      // Past it (the agent's clock moved on): the next pass sends them again, on the same connection.
      const retriedAt = Math.floor(Date.now() / 1000);
      await runInDurableObject(stubOf(agent), (i) => void ((i as Agent).now = () => Date.now() + ANNOUNCE_RETRY_MS + 1000));
      expect(await runDurableObjectAlarm(stubOf(agent))).toBe(true);
      const after = await profileOf(agent, (es) => es.length === 2 && es.every((e) => e.created_at >= retriedAt));
      expect(after.map(([kind, , at]) => [kind, at >= retriedAt])).toEqual([
        [0, true],
        [31340, true],
      ]);
      expect(await publicConnections(agent)).toEqual(connection);
      expect(refusals()).toHaveLength(3);
      // Taken: a later pass sends nothing more.
      await sleep(1100);
      expect(await runDurableObjectAlarm(stubOf(agent))).toBe(true);
      await sleep(500);
      expect(await profileOf(agent)).toEqual(after);
    } finally {
      logged.mockRestore();
    }
  }, 60_000);
});
