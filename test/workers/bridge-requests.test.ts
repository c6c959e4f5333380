// Every DVMCP request method through the relay, as a real client sends it (25910 on the public
// shard, answers 26910/21316 p-tagging the client), against the real server-everything: initialize
// with and without `s` (the public servers), tools/list (with pagination), tools/call, resources,
// prompts, completion, ping, progress, cancel, and the errors a client gets. While the owner
// registry cannot be read (Accounts down, the isolate holding no copy), a request is answered
// -32603 at once and counted in the bridge's drop summary, not left for the client's timeout.
import { beforeAll, describe, expect, inject, it, vi } from 'vitest';
import { env, runInDurableObject } from 'cloudflare:test';
import { accountsStub } from '../../workers/accounts/accounts-do.js';
import { REGISTRY_UNREADABLE } from '../../workers/bridge/bridge-do.js';
import { forgetOwnerState } from '../../workers/common/owners.js';
import { RPC } from '../../src/shared/dvmcp.js';
import { bridgeReady, directBridge, DvmcpClient, everythingUrl } from './bridge-helpers.js';
import { holdObject } from './hold-object.js';
import { closeSubscriptionsOf, LIVE_EVENTS_LOST, now, sign, socketObjects, subscriptionsOf } from './helpers.js';

const fixtureUrl = (): string => inject('toolsFixtureUrl');

let provider: string;
let owner: string;
let client: DvmcpClient;

beforeAll(async () => {
  ({ provider, owner } = await directBridge([
    { id: 'ev', url: everythingUrl(), name: 'Everything', public: false },
    { id: 'paged', url: `${fixtureUrl()}/mcp-paged`, public: true },
    { id: 'expire', url: `${fixtureUrl()}/mcp-expire`, public: false },
    { id: 'down', url: 'http://127.0.0.1:1/mcp', public: true },
    { id: 'priced', url: everythingUrl(), public: false, prices: { echo: { price: '21', unit: 'sats' } } },
    { id: 'noenc', url: everythingUrl(), public: false, encryption: false },
    { id: 'err500', url: `${fixtureUrl()}/status?code=500`, public: false },
    { id: 'priced500', url: `${fixtureUrl()}/status?code=500`, public: false, prices: { 'demo://paid': { price: '21', unit: 'sats' } } },
  ]));
  await bridgeReady(provider);
  client = await DvmcpClient.open(provider);
});

const text = (r: Record<string, unknown>): string => (r.content as Array<{ text: string }>)[0]!.text;

describe('bridge: requests through the relay', () => {
  it('initialize with s: upstream result with d and support_encryption tags', async () => {
    const a = await client.call('initialize', { protocolVersion: '2025-03-26', capabilities: {}, clientInfo: { name: 't', version: '1' } }, { s: 'ev' });
    expect(a.tags).toContainEqual(['d', 'ev']);
    expect(a.tags).toContainEqual(['support_encryption', 'true']);
    expect(a.tags).toContainEqual(['p', client.k.pk]);
    expect(a.result.ok && a.result.value).toMatchObject({ protocolVersion: expect.any(String), capabilities: { tools: expect.any(Object) }, serverInfo: { name: expect.any(String) } });
    expect(JSON.parse(a.content)).not.toHaveProperty('jsonrpc');
  });

  it('initialize without s: every public server of the provider answers, each with its d (private ones: bridge-private.test.ts)', async () => {
    const id = await client.send(client.request('initialize', { protocolVersion: '2025-03-26', capabilities: {}, clientInfo: { name: 't', version: '1' } }));
    const seen = new Map<string, string>();
    for (let i = 0; i < 2; i++) {
      const a = await client.answer(id);
      seen.set(a.tags.find((t) => t[0] === 'd')![1]!, a.content);
    }
    expect([...seen.keys()].sort()).toEqual(['down', 'paged']);
    expect(JSON.parse(seen.get('paged')!)).toMatchObject({ serverInfo: { name: 'paged' } });
    expect(JSON.parse(seen.get('down')!).error).toEqual({ code: -32603, message: 'upstream down unreachable' });
  });

  it('tools/list follows pagination cursors as the client asks; tools/call answers at the root', async () => {
    const page1 = await client.call('tools/list', {}, { s: 'paged' });
    expect(page1.result.ok && page1.result.value).toMatchObject({ nextCursor: 'page-2' });
    const page2 = await client.call('tools/list', { cursor: 'page-2' }, { s: 'paged' });
    expect(page2.result.ok && page2.result.value.nextCursor).toBeUndefined();
    expect(page2.result.ok && (page2.result.value.tools as unknown[]).length).toBeGreaterThan(0);

    const tools = await client.call('tools/list', {}, { s: 'ev' });
    expect(tools.result.ok && (tools.result.value.tools as Array<{ name: string }>).map((t) => t.name)).toEqual(expect.arrayContaining(['echo', 'get-sum', 'trigger-long-running-operation']));
    const call = await client.call('tools/call', { name: 'get-sum', arguments: { a: 20, b: 22 } }, { s: 'ev' });
    expect(call.result.ok && text(call.result.value)).toBe('The sum of 20 and 22 is 42.');
    expect(call.tags).toEqual([['e', call.tags[0]![1]], ['p', client.k.pk]]);
  });

  it('resources/list, resources/templates/list, resources/read; prompts/list, prompts/get; completion/complete; ping', async () => {
    const resources = await client.call('resources/list', {}, { s: 'ev' });
    expect(resources.result.ok && (resources.result.value.resources as Array<{ uri: string }>).map((r) => r.uri)).toContain('demo://resource/static/document/architecture.md');
    const templates = await client.call('resources/templates/list', {}, { s: 'ev' });
    expect(templates.result.ok && (templates.result.value.resourceTemplates as Array<{ uriTemplate: string }>).map((r) => r.uriTemplate)).toContain('demo://resource/dynamic/text/{resourceId}');
    const read = await client.call('resources/read', { uri: 'demo://resource/dynamic/text/1' }, { s: 'ev' });
    expect(read.result.ok && read.result.value.contents).toEqual([expect.objectContaining({ uri: 'demo://resource/dynamic/text/1', text: expect.any(String) })]);
    const prompts = await client.call('prompts/list', {}, { s: 'ev' });
    expect(prompts.result.ok && (prompts.result.value.prompts as Array<{ name: string }>).map((p) => p.name)).toEqual(expect.arrayContaining(['simple-prompt', 'args-prompt']));
    const prompt = await client.call('prompts/get', { name: 'args-prompt', arguments: { city: 'Lisbon' } }, { s: 'ev' });
    expect(JSON.stringify(prompt.result.ok && prompt.result.value.messages)).toContain('Lisbon');
    const completion = await client.call('completion/complete', { ref: { type: 'ref/prompt', name: 'completable-prompt' }, argument: { name: 'department', value: 'S' } }, { s: 'ev' });
    expect(completion.result.ok && completion.result.value.completion).toMatchObject({ values: ['Sales', 'Support'] });
    const ping = await client.call('ping', undefined, { s: 'ev' });
    expect(ping.content).toBe('{}');
  });

  it('progress of a long-running tool arrives as 21316 notifications/progress with e = request id, before the result', async () => {
    const id = await client.send(client.request('tools/call', { name: 'trigger-long-running-operation', arguments: { duration: 2, steps: 4 } }, { s: 'ev' }));
    const a = await client.answer(id);
    expect(a.result.ok && text(a.result.value)).toBe('Long running operation completed. Duration: 2 seconds, Steps: 4.');
    const progress = client.notifications(id);
    expect(progress.length).toBeGreaterThanOrEqual(3);
    for (const p of progress) {
      expect(p.tags).toEqual(expect.arrayContaining([['p', client.k.pk], ['method', 'notifications/progress'], ['s', 'ev'], ['e', id]]));
      // The spec's Progress names the request as `id`; MCP's progressToken is the same id.
      expect(JSON.parse(p.content)).toMatchObject({ method: 'notifications/progress', params: { id, progressToken: id, progress: expect.any(Number), total: 4 } });
    }
  });

  it('a cancel naming the request only in params.id (the spec\'s form: the e tag is optional) stops the call', async () => {
    const id = await client.send(client.request('tools/call', { name: 'trigger-long-running-operation', arguments: { duration: 3, steps: 2 } }, { s: 'ev' }));
    const cancel = sign(client.k, { kind: 21316, content: JSON.stringify({ method: 'notifications/cancel', params: { id } }), tags: [['p', provider], ['method', 'notifications/cancel']] });
    expect((await client.sock.publish(cancel))[2]).toBe(true);
    await expect(client.answer(id, 4500)).rejects.toThrow(/timed out waiting for a frame/);
  });

  it('a client cancel (21316 notifications/cancel, e = request) stops the call: no answer; a stranger cannot cancel it', async () => {
    const id = await client.send(client.request('tools/call', { name: 'trigger-long-running-operation', arguments: { duration: 3, steps: 3 } }, { s: 'ev' }));
    const stranger = await DvmcpClient.open(provider);
    await stranger.sock.publish(stranger.sign21316('notifications/cancel', id));
    const other = await client.send(client.request('tools/call', { name: 'trigger-long-running-operation', arguments: { duration: 3, steps: 2 } }, { s: 'ev' }));
    await client.sock.publish(client.sign21316('notifications/cancel', other));
    // The stranger's cancel did nothing: the first call completes; the second was cancelled.
    const first = await client.answer(id);
    expect(first.result.ok && text(first.result.value)).toMatch(/^Long running operation completed/);
    await expect(client.answer(other, 1500)).rejects.toThrow(/timed out waiting for a frame/);
    stranger.close();
  });

  it('errors: unknown server id, unknown method, unknown tool, bad params, not JSON, several servers and no s, upstream down', async () => {
    // A client of its own: errors count in a client's requests of the minute (bridge limits), as the calls of `client` do.
    const errs = await DvmcpClient.open(provider);
    const unknownServer = await errs.call('tools/list', {}, { s: 'nope' });
    expect(unknownServer.result).toEqual({ ok: false, error: { code: -32602, message: 'Unknown server id nope' } });
    const unknownMethod = await errs.call('tools/destroy', {}, { s: 'ev' });
    expect(unknownMethod.result).toEqual({ ok: false, error: { code: -32601, message: 'Method not found: tools/destroy' } });
    // Where upstream notifications of a server go (256 kept): only for servers it runs, so requests
    // naming made-up ids from fresh keys cannot push real clients' entries out.
    const kept = await runInDurableObject(env.BRIDGE.get(env.BRIDGE.idFromName(owner)), (bridge) => {
      const replies = (bridge as unknown as { replies: { has(key: string): boolean } }).replies;
      return { nope: replies.has(`nope:${errs.k.pk}`), ev: replies.has(`ev:${errs.k.pk}`) };
    });
    expect(kept).toEqual({ nope: false, ev: true });
    const noS = await errs.call('tools/list', {});
    expect(noS.result).toEqual({ ok: false, error: { code: -32602, message: 'this provider runs 2 servers (down, paged): name one with an s tag' } });
    const unknownTool = await errs.call('tools/call', { name: 'no-such-tool', arguments: {} }, { s: 'ev' });
    expect(unknownTool.result.ok ? unknownTool.result.value : unknownTool.result.error).toMatchObject(
      unknownTool.result.ok ? { isError: true, content: [{ type: 'text', text: expect.stringContaining('no-such-tool') }] } : { code: -32602, message: expect.stringContaining('no-such-tool') },
    );
    const badParams = await errs.call('tools/call', { name: 'get-sum', arguments: { a: 'x', b: 2 } }, { s: 'ev' });
    expect(badParams.result.ok ? badParams.result.value : badParams.result.error).toMatchObject(badParams.result.ok ? { isError: true } : { code: -32602 });
    const raw = await errs.send(errs.request('tools/list', undefined, { s: 'ev', content: '{not json' }));
    expect((await errs.answer(raw)).result).toEqual({ ok: false, error: { code: -32700, message: 'Parse error: content is not JSON' } });
    const down = await errs.call('tools/list', {}, { s: 'down' });
    expect(down.result.ok).toBe(false);
    expect(!down.result.ok && down.result.error).toEqual({ code: -32603, message: 'upstream down unreachable' });
    errs.close();
  });

  it('an upstream failure tells the caller its HTTP status only; the owner’s health has the upstream’s text', async () => {
    // Upstream answers 500 with its body ("status 500"): an error page, a stack trace, an internal name.
    const c = await DvmcpClient.open(provider);
    const failed = await c.call('tools/list', {}, { s: 'err500' });
    expect(failed.result).toEqual({ ok: false, error: { code: -32603, message: 'upstream err500 unreachable (HTTP 500)' } });
    const unpriced = await c.call('resources/read', { uri: 'demo://other' }, { s: 'priced500' });
    expect(unpriced.result).toEqual({ ok: false, error: { code: -32603, message: 'the price of demo://other on priced500 could not be determined (its resource list failed); try again later' } });
    // A connection refused (workerd's own text): no status, no text.
    const down = await c.call('tools/list', {}, { s: 'down' });
    expect(down.result).toEqual({ ok: false, error: { code: -32603, message: 'upstream down unreachable' } });
    c.close();
    // The bridge's own listing (its refresh since registration) met the same answer: the owner reads upstream's text.
    await vi.waitFor(async () => {
      const health = await env.BRIDGE.get(env.BRIDGE.idFromName(owner)).view('err500');
      expect(health?.health).toMatchObject({ ok: false, error: 'Streamable HTTP error (HTTP 500): Error POSTing to endpoint: status 500' });
    }, { timeout: 10_000, interval: 100 });
  });

  it('a call named after a member of Object.prototype is not priced: upstream gets it and its unknown-tool answer comes back', async () => {
    // Prices are a record: `prices.constructor` was Object's constructor, taken for a price, and the request was never answered.
    const c = await DvmcpClient.open(provider);
    for (const name of ['constructor', '__proto__', 'toString', 'hasOwnProperty']) {
      const a = await c.call('tools/call', { name, arguments: {} }, { s: 'priced' });
      // The SDK's McpServer looks tools up in a record too: a prototype member is "disabled" rather than "not found".
      expect(a.result.ok && a.result.value).toEqual({ isError: true, content: [{ type: 'text', text: expect.stringMatching(new RegExp(`^MCP error -32602: Tool ${name} (not found|disabled)$`)) }] });
      expect(c.notifications(a.tags.find((t) => t[0] === 'e')![1]!)).toEqual([]);
    }
    const read = await c.call('resources/read', { uri: 'constructor' }, { s: 'priced' });
    // Not priced, nor sent upstream: on a server with prices, a uri that is not a URI cannot be priced.
    expect(read.result).toEqual({ ok: false, error: { code: -32602, message: 'invalid params: the resources/read uri "constructor" is not an absolute URI' } });
    c.close();
  });

  it('upstream session loss: the bridge re-initializes and the call is answered', async () => {
    const before = (await (await fetch(`${fixtureUrl()}/mcp-expire/stats`)).json()) as { initializes: number };
    const first = await client.call('tools/call', { name: 'ping', arguments: { n: 1 } }, { s: 'expire' });
    expect(first.result.ok && text(first.result.value)).toMatch(/^pong from session-\d+$/);
    const second = await client.call('tools/call', { name: 'ping', arguments: { n: 2 } }, { s: 'expire' });
    expect(second.result.ok && text(second.result.value)).toMatch(/^pong from session-\d+$/);
    expect(second.result.ok && text(second.result.value)).not.toBe(first.result.ok && text(first.result.value));
    const after = (await (await fetch(`${fixtureUrl()}/mcp-expire/stats`)).json()) as { initializes: number };
    // The second call found its session forgotten (404) and initialized a new one.
    expect(after.initializes - before.initializes).toBeGreaterThanOrEqual(1);
  });

  it('a priced capability waits for payment (the local verifier of the test deployment; unpaid: NOT_PAID at expiry); unpriced ones run', async () => {
    const priced = await client.call('tools/call', { name: 'echo', arguments: { message: 'hi' } }, { s: 'priced' });
    expect(priced.result).toEqual({ ok: false, error: { code: -32010, message: 'payment not received within 5 s: the invoice expired' } });
    const free = await client.call('tools/call', { name: 'get-sum', arguments: { a: 1, b: 2 } }, { s: 'priced' });
    expect(free.result.ok && text(free.result.value)).toBe('The sum of 1 and 2 is 3.');
  });

  it('gift-wrapped round trips in both rumor forms are answered in the form asked; wrapped requests to a server with encryption off are not answered', async () => {
    const wrapped = await client.call('tools/call', { name: 'echo', arguments: { message: 'sealed' } }, { s: 'ev', form: 'wrapped' });
    expect(wrapped.event.kind).toBe(1059);
    expect(wrapped.result.ok && text(wrapped.result.value)).toBe('Echo: sealed');
    const dm = await client.call('tools/call', { name: 'echo', arguments: { message: 'dm' } }, { s: 'ev', form: 'wrapped-dm' });
    expect(dm.event.kind).toBe(1059);
    expect(dm.result.ok && text(dm.result.value)).toBe('Echo: dm');
    const off = await client.send(client.request('tools/list', {}, { s: 'noenc' }), 'wrapped');
    const plainOff = await client.call('resources/list', {}, { s: 'noenc' });
    expect(plainOff.result.ok).toBe(true);
    await expect(client.answer(off, 1000)).rejects.toThrow(/timed out waiting for a frame/);
  });

  it('on the owner’s shard a stranger’s request p-tagging the provider is admitted and answered there; the same request on both shards is answered once', async () => {
    const onOwner = await DvmcpClient.open(provider, `/r/${owner}`);
    const a = await onOwner.call('tools/call', { name: 'echo', arguments: { message: 'owner shard' } }, { s: 'ev' });
    expect(a.result.ok && text(a.result.value)).toBe('Echo: owner shard');
    const onPublic = await DvmcpClient.open(provider, '/', onOwner.k);
    const e = onOwner.request('ping', { both: true }, { s: 'ev' });
    await onOwner.send(e);
    expect((await onOwner.answer(e.id)).content).toBe('{}');
    await onPublic.send(e);
    const later = await onPublic.call('ping', { later: true }, { s: 'ev' });
    expect(later.content).toBe('{}');
    await expect(onPublic.answer(e.id, 500)).rejects.toThrow(/timed out waiting for a frame/);
    onOwner.close();
    onPublic.close();
  });

  it('a keep-alive progress is sent while upstream is silent for 10 s', async () => {
    const id = await client.send(client.request('tools/call', { name: 'trigger-long-running-operation', arguments: { duration: 12, steps: 1 } }, { s: 'ev' }));
    const a = await client.answer(id, 18_000);
    expect(a.result.ok && text(a.result.value)).toBe('Long running operation completed. Duration: 12 seconds, Steps: 1.');
    const keepAlive = client.notifications(id).map((n) => JSON.parse(n.content) as { params: Record<string, unknown> });
    expect(keepAlive[0]!.params).toEqual({ id, progressToken: id, progress: 0, message: 'waiting for ev' });
  }, 25_000);

  it('stale requests (created_at over 60 s old) are ignored', async () => {
    const stale = client.request('ping', undefined, { s: 'ev', created_at: now() - 120 });
    await client.send(stale);
    const fresh = client.request('ping', undefined, { s: 'ev' });
    await client.send(fresh);
    await client.answer(fresh.id);
    await expect(client.answer(stale.id, 1000)).rejects.toThrow(/timed out waiting for a frame/);
  });
});

describe('bridge: its relay connection', () => {
  it('is set up once per connection: one subscription, whichever of the open event and the connect call comes first', async () => {
    const { provider: p } = await directBridge([{ id: 'ev', url: everythingUrl(), public: false }]);
    await bridgeReady(p);
    // Both the connection's open event and the caller that opened it used to set it up, each with
    // its own REQ (the second closing the first): the relay briefly held two. Ids count per relay.
    const subs = async () => {
      const ids: string[] = [];
      for (const shard of socketObjects(null)) {
        ids.push(
          ...(await runInDurableObject(shard, (_i, state) =>
            state.storage.sql.exec<{ sid: string }>('SELECT sid FROM conn_subs WHERE cid IN (SELECT cid FROM conn_auth WHERE pubkey = ?)', p).toArray().map((r) => r.sid),
          )),
        );
      }
      return ids;
    };
    expect(await subs()).toEqual(['dvmcp:1']);
  });
});

describe('bridge: its subscription closed by the relay', () => {
  it('after a CLOSED with error: (live events lost on the way) the bridge sends its subscription again and answers requests', async () => {
    const { provider: p } = await directBridge([{ id: 'ev', url: everythingUrl(), public: false }]);
    await bridgeReady(p);
    const held = await subscriptionsOf(null, p);
    expect(held).toBeGreaterThan(0);
    expect(await closeSubscriptionsOf(null, p, LIVE_EVENTS_LOST)).toBe(held);
    expect(await subscriptionsOf(null, p)).toBe(0);
    await vi.waitFor(async () => expect(await subscriptionsOf(null, p)).toBe(held), { timeout: 5_000, interval: 100 });
    const c = await DvmcpClient.open(p);
    const ping = await c.call('ping', undefined, { s: 'ev' });
    expect(ping.result).toEqual({ ok: true, value: {} });
  });
});

describe('bridge: while the owner registry cannot be read', () => {
  it('an isolate with no copy of the registry answers each request -32603 at once (plain and wrapped), counts them in one drop-summary line, and serves again once Accounts answers', { timeout: 30_000 }, async () => {
    const warn = vi.spyOn(console, 'warn');
    const error = vi.spyOn(console, 'error');
    const lines = (spy: typeof warn): string[] => spy.mock.calls.map((args) => args.map(String).join(' ')).filter((l) => l.startsWith('bridge'));
    forgetOwnerState(); // a new isolate: no copy of the registry
    const release = await holdObject(accountsStub(env));
    try {
      const first = await client.send(client.request('tools/list', {}, { s: 'ev' }));
      await new Promise((r) => setTimeout(r, 200)); // the bridge asks Accounts, which does not answer
      await release(new Error('simulated Accounts reset'));
      const expected = { ok: false, error: { code: RPC.INTERNAL_ERROR, message: 'the owner registry could not be read; try again later' } };
      expect(REGISTRY_UNREADABLE).toBe('the owner registry could not be read; try again later');
      expect((await client.answer(first, 5_000)).result).toEqual(expected);
      // Within REGISTRY_RETRY_MS of the failure Accounts is not asked again: answered at once, in the form asked.
      expect((await client.call('tools/call', { name: 'get-sum', arguments: { a: 1, b: 2 } }, { s: 'ev', timeoutMs: 5_000 })).result).toEqual(expected);
      const wrapped = await client.call('ping', undefined, { s: 'ev', form: 'wrapped', timeoutMs: 5_000 });
      expect(wrapped.event.kind).toBe(1059);
      expect(wrapped.result).toEqual(expected);
      const provider = client.provider;
      expect(lines(warn).filter((l) => l.includes('owner registry'))).toEqual([
        `bridge: provider ${provider}: 1 request refused while the owner registry could not be read since the last report (1 "simulated Accounts reset"); reported at most once a minute`,
      ]);
      expect(lines(error).filter((l) => l.includes('failed'))).toEqual([]);
      // Accounts answers again: served.
      forgetOwnerState();
      const served = await client.call('tools/call', { name: 'get-sum', arguments: { a: 20, b: 22 } }, { s: 'ev' });
      expect(served.result.ok && text(served.result.value)).toBe('The sum of 20 and 22 is 42.');
    } finally {
      warn.mockRestore();
      error.mockRestore();
      forgetOwnerState();
    }
  });
});
