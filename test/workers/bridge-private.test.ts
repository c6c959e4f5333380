// A private server (public: false) answers only clients that name it: a request without `s` never
// reaches it (initialize without s lists public servers only, and it is never the implicit single
// server), so a stranger who knows only the provider key learns neither its id nor that it exists;
// with its id in `s` it answers as usual. Upstreams are the fixture's endpoints (/mcp-expire counts
// the tools/call requests it receives).
import { beforeAll, describe, expect, inject, it } from 'vitest';
import type { NostrEvent } from '../../src/shared/event.js';
import { KIND } from '../../src/shared/kinds.js';
import { bridgeReady, directBridge, DvmcpClient } from './bridge-helpers.js';
import { randomHex } from './helpers.js';

const fixtureUrl = (): string => inject('toolsFixtureUrl');
const INIT = { protocolVersion: '2025-03-26', capabilities: {}, clientInfo: { name: 't', version: '1' } };

/** A counting upstream of its own: the tools/call requests it received. */
function counting(): { url: string; calls: () => Promise<number> } {
  const bucket = `bridge-private-${randomHex(4)}`;
  return {
    url: `${fixtureUrl()}/mcp-expire?bucket=${bucket}&keep=1`,
    calls: async () => ((await (await fetch(`${fixtureUrl()}/mcp-expire/stats?bucket=${bucket}`)).json()) as { calls: number }).calls,
  };
}

/** The `d` tags of the 26910 answers to request `id` that `c` received and has not taken yet. */
const answeredBy = (c: DvmcpClient, id: string): string[] =>
  c.sock.frames
    .map((f) => f[2] as NostrEvent | undefined)
    .filter((e): e is NostrEvent => e?.kind === KIND.DVMCP_RESPONSE && e.tags.some((t) => t[0] === 'e' && t[1] === id))
    .map((e) => e.tags.find((t) => t[0] === 'd')?.[1] ?? '(no d)');

describe('bridge: private servers', () => {
  let mixed: string;
  const secret = counting();

  beforeAll(async () => {
    ({ provider: mixed } = await directBridge([
      { id: 'pub', url: `${fixtureUrl()}/mcp-paged`, public: true },
      { id: 'secret-1f3a', url: secret.url, public: false },
    ]));
    await bridgeReady(mixed);
  });

  it('initialize without s from a stranger: only the public server answers; the private one is not reached', async () => {
    const stranger = await DvmcpClient.open(mixed);
    const id = await stranger.send(stranger.request('initialize', INIT));
    const first = await stranger.answer(id);
    expect(first.tags).toContainEqual(['d', 'pub']);
    // A client that knows the id calls the private server: it works, and by then an answer from it to the stranger would be in.
    const friend = await DvmcpClient.open(mixed);
    const call = await friend.call('tools/call', { name: 'ping', arguments: {} }, { s: 'secret-1f3a' });
    expect(call.result.ok).toBe(true);
    expect(answeredBy(stranger, id)).toEqual([]);
    stranger.close();
    friend.close();
  });

  it('a method without s goes to the one public server, not to the private one', async () => {
    const stranger = await DvmcpClient.open(mixed);
    const tools = await stranger.call('tools/list', {});
    expect(tools.result.ok && tools.result.value).toMatchObject({ nextCursor: 'page-2' }); // /mcp-paged's first page
    stranger.close();
  });

  describe('a provider with only a private server', () => {
    let provider: string;
    const only = counting();

    beforeAll(async () => {
      ({ provider } = await directBridge([{ id: 'only-9c2e', url: only.url, public: false }]));
      await bridgeReady(provider);
    });

    it('without s: the error of a provider that runs no servers, for initialize and for a call; with s: answered', async () => {
      const stranger = await DvmcpClient.open(provider);
      const noServer = { ok: false, error: { code: -32602, message: 'this provider runs no servers' } };
      expect((await stranger.call('initialize', INIT)).result).toEqual(noServer);
      expect((await stranger.call('tools/call', { name: 'ping', arguments: {} })).result).toEqual(noServer);
      expect(await only.calls()).toBe(0);

      const init = await stranger.call('initialize', INIT, { s: 'only-9c2e' });
      expect(init.tags).toContainEqual(['d', 'only-9c2e']);
      expect(init.result.ok && init.result.value).toMatchObject({ serverInfo: { name: 'expire' } });
      const call = await stranger.call('tools/call', { name: 'ping', arguments: {} }, { s: 'only-9c2e' });
      expect(call.result.ok && call.result.value).toMatchObject({ content: [{ type: 'text', text: expect.stringMatching(/^pong from session-\d+$/) }] });
      stranger.close();
    });
  });
});
