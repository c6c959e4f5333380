// What a bridge server's health (GET /api/bridge/servers: the Bridge's `view`) tells its owner
// (workers/bridge/config.ts ServerHealth): whether its announcements are on the public shard and,
// when not, the relay's refusal (`announced`, `announce_error`: a refused set is not recorded as
// published and is sent again RETRY_MS later, test seam RelayShard.clock as in
// bridge-deletion-retry.test.ts); a list upstream answers with a JSON-RPC error is left out of the
// announcements, the others published, and named (`list_errors`; the fixture's
// /mcp-flood?list-error=resources); an item nesting deeper than 64 levels, which DVMCP discovery
// drops, is not announced nor counted and is named there too, and an initialize result that deep
// announces nothing, with `announce_error` saying why (the fixture's /mcp-huge?deep=70,
// ?deep-capabilities=70). A refresh a restart cuts (restartBridge while upstream is slow, the
// fixture's /slow-headers) leaves its retry booked RETRY_MS away, not REFRESH_MS. `ok` and `error`
// are the bridge's own contacts, never a stranger's call (bridge-health-checks.test.ts).
import { env, runDurableObjectAlarm } from 'cloudflare:test';
import { describe, expect, inject, it, vi } from 'vitest';
import { KIND } from '../../src/shared/kinds.js';
import { RETRY_MS } from '../../workers/bridge/bridge-do.js';
import type { ServerHealth } from '../../workers/bridge/config.js';
import { announcements, directBridge, everythingUrl, healthWhen, nextWatchdog, refreshAt, refreshDueNow, restartBridge, whilePublicShardRefuses } from './bridge-helpers.js';
import { BASE, randomHex } from './helpers.js';

const bridgeOf = (owner: string) => env.BRIDGE.get(env.BRIDGE.idFromName(owner));
const fixture = (path: string): string => `${inject('toolsFixtureUrl')}${path}`;
const PUBLIC_SHARD = `${BASE.replace(/^http/, 'ws')}/`;

describe('bridge health: the announcements', () => {
  it('a server registered while the public shard refuses its announcements: health says not announced with the relay’s refusal; sent again RETRY_MS later, then on `/` and health says announced', async () => {
    const id = `refused-${randomHex(4)}`;
    let owner = '';
    let provider = '';
    let refused: ServerHealth | undefined;
    await whilePublicShardRefuses(async () => {
      ({ owner, provider } = await directBridge([{ id, url: everythingUrl() }]));
      refused = await healthWhen(owner, id, (h) => h.checked_at !== null && h.tools > 0 && h.announce_error !== null);
    });
    expect(refused).toMatchObject({ ok: true, error: null, announced: false, announce_error: `${PUBLIC_SHARD}: invalid: created_at is too far in the future`, list_errors: {} });
    expect(await announcements(provider, [KIND.DVMCP_SERVER], () => true)).toEqual([]);
    const retry = await refreshAt(owner, id);
    expect(retry).toBeLessThanOrEqual(Date.now() + RETRY_MS);
    expect(retry).toBeGreaterThan(Date.now() + RETRY_MS - 60_000);

    // RETRY_MS later (the booked time moved to now), the public shard's clock right again.
    await refreshDueNow(owner, id);
    await nextWatchdog(owner);
    const out = await announcements(provider, [KIND.DVMCP_SERVER, KIND.DVMCP_TOOLS], (es) => es.length === 2);
    expect(out.map((e) => e.kind).sort()).toEqual([KIND.DVMCP_SERVER, KIND.DVMCP_TOOLS]);
    expect((await bridgeOf(owner).view(id))?.health).toMatchObject({ ok: true, error: null, announced: true, announce_error: null });
  });

  it('a private server is not announced, and that is no error', async () => {
    const id = `private-${randomHex(4)}`;
    const { owner } = await directBridge([{ id, url: everythingUrl(), public: false }]);
    expect(await healthWhen(owner, id, (h) => h.checked_at !== null && h.tools > 0)).toMatchObject({ ok: true, error: null, announced: false, announce_error: null, list_errors: {} });
  });
});

describe('bridge health: a refresh a restart cuts', () => {
  it('a server registered just before a restart, whose first refresh the restart cut while it waited for upstream: refreshed again RETRY_MS later (not 6 hours), and its health then says why it is not announced', { timeout: 60_000 }, async () => {
    const id = `slow-${randomHex(4)}`;
    const { owner, provider } = await directBridge([{ id, url: fixture('/slow-headers?ms=15000'), public: true }]);
    // The registration's refresh has begun (it booked the next one) and waits for upstream's headers.
    await vi.waitFor(async () => expect(await refreshAt(owner, id)).toBeGreaterThan(0), { timeout: 10_000, interval: 20 });
    await restartBridge(owner, provider);
    expect(await refreshAt(owner, id)).toBeLessThanOrEqual(Date.now() + RETRY_MS);
    expect((await bridgeOf(owner).view(id))?.health).toMatchObject({ ok: null, checked_at: null, announced: false, announce_error: null });

    // RETRY_MS later (the booked time moved to now): upstream is still slow, and the health says so.
    await refreshDueNow(owner, id);
    expect(await runDurableObjectAlarm(bridgeOf(owner))).toBe(true); // the watchdog the restart booked, run now: it waits for the refresh
    expect((await bridgeOf(owner).view(id))?.health).toMatchObject({
      ok: false,
      error: 'timed out after 10000 ms',
      announced: false,
      announce_error: `not refreshed: upstream ${id} timed out after 10000 ms`,
    });
    expect(await refreshAt(owner, id)).toBeLessThanOrEqual(Date.now() + RETRY_MS);
  });
});

describe('bridge health: a list upstream answers with an error', () => {
  it('resources/list answered -32603: tools still announced (31316, 31317, no 31318), health names the error', async () => {
    const id = `lists-${randomHex(4)}`;
    const { owner, provider } = await directBridge([{ id, url: fixture(`/mcp-flood?bucket=${randomHex(8)}&list-error=resources`) }]);
    const out = await announcements(provider, [KIND.DVMCP_SERVER, KIND.DVMCP_TOOLS], (es) => es.length === 2);
    expect(out.map((e) => e.kind).sort()).toEqual([KIND.DVMCP_SERVER, KIND.DVMCP_TOOLS]);
    expect(await announcements(provider, [KIND.DVMCP_RESOURCES], () => true)).toEqual([]);
    expect(await healthWhen(owner, id, (h) => h.announced)).toEqual({
      ok: true,
      checked_at: expect.any(Number),
      error: null,
      tools: 4,
      resources: 0,
      resource_templates: 0,
      prompts: 0,
      list_errors: { 'resources/list': '-32603 resources backend down: check DATABASE_URL' },
      announced: true,
      announce_error: null,
    });
    // A failing list may be passing: the refresh is tried again RETRY_MS later, not 6 hours.
    expect(await refreshAt(owner, id)).toBeLessThanOrEqual(Date.now() + RETRY_MS);
  });
});

describe('bridge health: an item DVMCP readers would drop', () => {
  it('a tool nesting deeper than 64 levels: not announced, not counted, named in list_errors; the other tools announced', async () => {
    const id = `deep-${randomHex(4)}`;
    const { owner, provider } = await directBridge([{ id, url: fixture(`/mcp-huge?bucket=${randomHex(8)}&deep=70`) }]);
    const out = await announcements(provider, [KIND.DVMCP_TOOLS], (es) => es.length === 1);
    expect((JSON.parse(out[0]!.content) as { tools: Array<{ name: string }> }).tools.map((t) => t.name)).toEqual(['huge', 'small', 'repeat', 'structured', 'error']);
    expect(await healthWhen(owner, id, (h) => h.announced)).toEqual({
      ok: true,
      checked_at: expect.any(Number),
      error: null,
      tools: 5,
      resources: 0,
      resource_templates: 0,
      prompts: 0,
      list_errors: { 'tools/list': 'left out, nesting deeper than 64 levels: deep' },
      announced: true,
      announce_error: null,
    });
  });

  it('a private server, never announced, counts such a tool and names no error', async () => {
    const id = `deep-private-${randomHex(4)}`;
    const { owner } = await directBridge([{ id, url: fixture(`/mcp-huge?bucket=${randomHex(8)}&deep=70&deep-capabilities=70`), public: false }]);
    expect(await healthWhen(owner, id, (h) => h.checked_at !== null && h.tools > 0)).toMatchObject({ ok: true, tools: 6, list_errors: {}, announced: false, announce_error: null });
  });

  it('an initialize result nesting deeper than 64 levels: nothing announced, health says why', async () => {
    const id = `deep-init-${randomHex(4)}`;
    const { owner, provider } = await directBridge([{ id, url: fixture(`/mcp-huge?bucket=${randomHex(8)}&deep-capabilities=70`) }]);
    expect(await healthWhen(owner, id, (h) => h.announced || h.announce_error !== null)).toMatchObject({
      ok: true,
      announced: false,
      announce_error: "not refreshed: upstream's initialize result nests deeper than 64 levels (DVMCP readers would not list the server)",
    });
    expect(await announcements(provider, [KIND.DVMCP_SERVER, KIND.DVMCP_TOOLS], () => true)).toEqual([]);
  });
});
