// How soon a bridge server's health shows an outage (workers/bridge/bridge-do.ts `suspectOutage`,
// upstream.ts `suggestsOutage`): only the bridge's own contacts set `ok`/`error` (a stranger's call
// never does), so a client's call failing at the transport level (unreachable, HTTP 5xx, the
// connection lost: the fixture's /mcp-flood switched down answers every request HTTP 500) books the
// bridge's own check of that server within OUTAGE_CHECK_MS, one at a time per server and at most one
// a minute after its last own contact; the check (a refresh: the bridge's session lists upstream)
// sets the health. A call cut by the bridge's own limits (an answer over MAX_UPSTREAM_ANSWER_BYTES,
// the fixture's /mcp-huge), which a stranger can cause, books nothing.
import { env } from 'cloudflare:test';
import { describe, expect, inject, it } from 'vitest';
import { OUTAGE_CHECK_MS, REFRESH_MS } from '../../workers/bridge/bridge-do.js';
import { MAX_UPSTREAM_ANSWER_BYTES } from '../../workers/common/mcp-client.js';
import { bridgeReady, directBridge, DvmcpClient, floodDown, floodStats, floodUrl, healthWhen, nextWatchdog, refreshAt, refreshDueNow } from './bridge-helpers.js';
import { randomHex } from './helpers.js';

const bridgeOf = (owner: string) => env.BRIDGE.get(env.BRIDGE.idFromName(owner));

/** `n` tools/call of `client` to server `s` sent at once (each its own request); their answers, in order. */
async function burst(client: DvmcpClient, s: string, n: number): Promise<unknown[]> {
  const ids = await Promise.all(Array.from({ length: n }, () => client.send(client.request('tools/call', { name: 'progress', arguments: { count: 0, nonce: randomHex(4) } }, { s }))));
  return Promise.all(ids.map(async (id) => (await client.answer(id, 20_000)).result));
}

describe('a client’s call failing at the transport level', () => {
  it('books the bridge’s own check of the server within a minute, one for a burst; the check sets ok: false with upstream’s error; failures right after it book the next no sooner than a minute after it', { timeout: 60_000 }, async () => {
    const bucket = randomHex(8);
    const id = `down-${randomHex(4)}`;
    const { owner, provider } = await directBridge([{ id, url: floodUrl(bucket), public: false }]);
    await healthWhen(owner, id, (h) => h.ok === true && h.tools === 4);
    await bridgeReady(provider);
    expect(await refreshAt(owner, id)).toBeGreaterThan(Date.now() + REFRESH_MS - 60_000);

    await floodDown(bucket, true);
    const stranger = await DvmcpClient.open(provider);
    try {
      const unreachable = { ok: false, error: { code: -32603, message: `upstream ${id} unreachable (HTTP 500)` } };
      expect(await burst(stranger, id, 4)).toEqual(Array(4).fill(unreachable));
      // The stranger's failures are not the health: the bridge's own check is booked.
      expect((await bridgeOf(owner).view(id))?.health).toMatchObject({ ok: true, error: null });
      expect(OUTAGE_CHECK_MS).toBe(60_000);
      expect(await refreshAt(owner, id)).toBeLessThanOrEqual(Date.now() + OUTAGE_CHECK_MS);

      const listed = (await floodStats(bucket)).lists;
      await refreshDueNow(owner, id); // the booked time has come
      await nextWatchdog(owner);
      expect((await floodStats(bucket)).lists).toBe(listed + 1);
      const checked = (await bridgeOf(owner).view(id))!.health;
      expect(checked).toMatchObject({ ok: false, error: 'Streamable HTTP error (HTTP 500): Error POSTing to endpoint: flood backend down' });

      // More failures right after the check: the next is booked a minute after it, not sooner.
      expect(await burst(stranger, id, 4)).toEqual(Array(4).fill(unreachable));
      expect(await refreshAt(owner, id)).toBeGreaterThanOrEqual(checked.checked_at! * 1000 + OUTAGE_CHECK_MS);
      await nextWatchdog(owner);
      expect((await floodStats(bucket)).lists).toBe(listed + 1);
    } finally {
      stranger.close();
      await floodDown(bucket, false);
    }
  });

  it('a stranger’s call cut by the bridge’s own limits (an answer over MAX_UPSTREAM_ANSWER_BYTES) is the stranger’s error: it books no check and leaves the server’s health', async () => {
    const id = `huge-${randomHex(4)}`;
    const { owner, provider } = await directBridge([{ id, url: `${inject('toolsFixtureUrl')}/mcp-huge?bucket=${randomHex(8)}`, public: false }]);
    await healthWhen(owner, id, (h) => h.ok === true && h.tools > 0);
    await bridgeReady(provider);
    const stranger = await DvmcpClient.open(provider);
    try {
      const huge = await stranger.call('tools/call', { name: 'huge', arguments: {} }, { s: id, timeoutMs: 20_000 });
      expect(huge.result).toEqual({ ok: false, error: { code: -32603, message: `upstream ${id} sent an answer over ${MAX_UPSTREAM_ANSWER_BYTES} bytes` } });
    } finally {
      stranger.close();
    }
    expect(await refreshAt(owner, id)).toBeGreaterThan(Date.now() + REFRESH_MS - 60_000);
    expect((await bridgeOf(owner).view(id))?.health).toMatchObject({ ok: true, error: null, tools: 5 });
  });
});
