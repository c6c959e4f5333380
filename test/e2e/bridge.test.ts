// The DVMCP bridge end to end under `wrangler dev` (the development instance of
// test/e2e/global-setup.ts: the demo owner may register servers and loopback MCP servers are
// allowed), from Node with nostr-tools: the real server-everything on a local port registered over
// the NIP-98 management API, its 31316/31317 found on the public relay, and a tool called plain and
// gift-wrapped through the relay.
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import type { ChildProcess } from 'node:child_process';
import type { NostrEvent } from '../../src/shared/event.js';
import { parseResponse } from '../../src/shared/dvmcp.js';
import { unwrapDvmcp, wrapDvmcp } from '../../src/shared/dvmcp-wrap.js';
import { ConversationKeyCache } from '../../src/shared/nip44.js';
import { makeRumor } from '../../src/shared/nip59.js';
import { nobleVerifier } from '../../src/shared/verify.js';
import { sha256 } from '@noble/hashes/sha2.js';
import { startEverything, stop } from '../mcp/global-setup.js';
import { clientFactory, fetchIds, newKey, nowSeconds, signed, signedApi, signer, waitFor } from './helpers.js';

/** The local demo owner (workers/common/owners.ts): development only, derived from a public label. */
const DEMO_OWNER_SK = sha256(new TextEncoder().encode('edgestr demo owner (local development only)'));
const httpUrl = inject('httpUrl');
const api = signedApi(httpUrl, DEMO_OWNER_SK);
const relayUrl = inject('relayUrl');
const clients = clientFactory();
const cache = new ConversationKeyCache(16);

let everything: { url: string; child: ChildProcess };

beforeAll(async () => {
  everything = await startEverything('streamableHttp');
}, 40_000);

afterAll(async () => {
  clients.closeAll();
  await stop(everything.child);
});


describe('DVMCP bridge under wrangler dev', () => {
  it('registers server-everything over NIP-98, announces it on the public relay, and answers a tool call plain and gift-wrapped', async () => {
    const id = `e2e-${nowSeconds()}`;
    const reg = await api('POST', '/api/bridge/servers', { id, url: everything.url, name: 'Everything (e2e)' });
    expect(reg.status).toBe(201);
    const { provider } = reg.json as { provider: string; id: string };
    expect(reg.json).toEqual({ provider: expect.stringMatching(/^[0-9a-f]{64}$/), id });

    // Its announcements on the public shard (the provider key is the owner's, shared with the
    // servers other e2e files register, so only this server's d tags are looked at).
    const reader = clients.create(`${relayUrl}/`).client;
    let announced: string[] = [];
    const found: NostrEvent[] = [];
    for (let i = 0; i < 100 && found.length < 2; i++) {
      found.length = 0;
      await new Promise<void>((resolve) => {
        const sub = reader.subscribe([{ kinds: [31316, 31317], authors: [provider], '#d': [id, `${id}/tools/list`] }], {
          onEvent: (e) => found.push(e),
          onEose: () => {
            sub.close();
            resolve();
          },
        });
      });
      announced = found.map((e) => e.tags.find((t) => t[0] === 'd')?.[1] ?? '');
      if (found.length < 2) await new Promise((r) => setTimeout(r, 200));
    }
    expect(announced.sort()).toEqual([id, `${id}/tools/list`]);
    const tools = found.find((e) => e.kind === 31317)!;
    expect(tools.tags).toContainEqual(['cap', 'echo']);

    // A client: plain request, then a gift-wrapped one.
    const me = newKey();
    const { client } = clients.create(`${relayUrl}/`, { auth: signer(me), authOn: 'challenge' });
    const received: NostrEvent[] = [];
    await client.authenticate({ timeoutMs: 10_000 });
    client.subscribe([{ kinds: [26910], '#p': [me.pk], since: nowSeconds() - 5 }, { kinds: [1059], '#p': [me.pk], since: nowSeconds() - 5 }], { onEvent: (e) => received.push(e) });
    expect(await fetchIds(client, [{ kinds: [1], limit: 1 }])).toBeDefined(); // subscriptions are in place

    const request = signed(me, 25910, JSON.stringify({ method: 'tools/call', params: { name: 'echo', arguments: { message: 'plain e2e' } } }), [['p', provider], ['method', 'tools/call'], ['s', id]]);
    expect((await client.publish(request, { timeoutMs: 5000 })).ok).toBe(true);
    await waitFor(() => received.some((e) => e.kind === 26910 && e.tags.some((t) => t[0] === 'e' && t[1] === request.id)), 'the plain answer', 20_000);
    const answer = received.find((e) => e.kind === 26910 && e.tags.some((t) => t[0] === 'e' && t[1] === request.id))!;
    expect(answer.pubkey).toBe(provider);
    expect(parseResponse(answer.content)).toEqual({ ok: true, value: { content: [{ type: 'text', text: 'Echo: plain e2e' }] } });

    const t = { kind: 25910, created_at: nowSeconds(), tags: [['p', provider], ['method', 'tools/call'], ['s', id]], content: JSON.stringify({ method: 'tools/call', params: { name: 'echo', arguments: { message: 'sealed e2e' } } }) };
    const rumorId = makeRumor({ pubkey: me.pk, ...t }).id;
    expect((await client.publish(wrapDvmcp(t, me.sk, me.pk, provider, cache), { timeoutMs: 5000 })).ok).toBe(true);
    const opened = () =>
      received
        .filter((e) => e.kind === 1059)
        .map((e) => unwrapDvmcp(e, me.sk, cache, nobleVerifier))
        .flatMap((r) => (r.ok ? [r.value] : []))
        .find((r) => r.message.tags.some((x) => x[0] === 'e' && x[1] === rumorId));
    await waitFor(() => opened() !== undefined, 'the gift-wrapped answer', 20_000);
    const sealed = opened()!;
    expect(sealed.form).toBe('wrapped');
    expect(sealed.message.pubkey).toBe(provider);
    expect(parseResponse(sealed.message.content)).toEqual({ ok: true, value: { content: [{ type: 'text', text: 'Echo: sealed e2e' }] } });

    expect((await api('DELETE', `/api/bridge/servers/${id}`)).status).toBe(204);
  }, 90_000);
});
