// Hosted agents with `dvmcp_servers`: the agent lists a DVMCP server's tools over Nostr (through
// its public-shard connection, authenticated as the agent) and calls them in a run; a priced tool
// fails with the payment message (agents have no wallet); config validation of dvmcp_servers; a
// server's tool definitions bounded as an MCP server's (tools/remote-tools.ts); calls gift-wrapped
// unless the config says `encrypt: false` (a stranger reading 25910/26910 on `/` learns nothing), a
// server that announces no encryption refused rather than called in public.
import { SELF } from 'cloudflare:test';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { npubEncode } from 'nostr-tools/nip19';
import { DvmcpClient } from '../../src/shared/dvmcp-client.js';
import { ConversationKeyCache } from '../../src/shared/nip44.js';
import { RelayClient, type SocketFactory } from '../../src/shared/relay-client.js';
import { nobleVerifier } from '../../src/shared/verify.js';
import { CreateAgentSchema } from '../../workers/agent/config.js';
import { connectDvmcpServer } from '../../workers/agent/tools/dvmcp.js';
import { MAX_MCP_DESCRIPTION_CHARS, MAX_MCP_INPUT_SCHEMA_CHARS, MAX_MCP_TOOL_LIST_CHARS } from '../../workers/agent/tools/remote-tools.js';
import { NipXxClient, agentInfo, createTestAgent } from './agent-helpers.js';
import { DvmcpResponder } from './dvmcp-client-responder.js';
import { Sentinel, connect, keys, randomHex, sign, type Frame, type TestSocket } from './helpers.js';

const socket: SocketFactory = async (u) => {
  const res = await SELF.fetch(u.replace(/^ws/, 'http'), { headers: { Upgrade: 'websocket' } });
  const ws = res.webSocket!;
  ws.accept();
  return ws;
};

const server = `agent-dv-${randomHex(3)}`;
let responder: DvmcpResponder;

beforeAll(async () => {
  responder = new DvmcpResponder('ws://relay.test/', socket, server, true);
  await responder.start();
});
afterAll(() => responder.close());

describe('agent dvmcp tool source', () => {
  it('lists the server tools over DVMCP (ai.info names them <server>__<tool>) and calls one gift-wrapped as the agent', async () => {
    const agent = await createTestAgent({ dvmcp_servers: [{ provider: npubEncode(responder.provider), server, encrypt: true }] });
    const c = await NipXxClient.open(agent);
    const p = c.prompt({ ver: 1, message: `/tool ${server}__echo {"text":"hi over nostr"}` });
    await c.send(p);
    const run = await c.collect(p.id);
    expect(run.tools[1]).toMatchObject({ name: `${server}__echo`, phase: 'result', success: true, output: { stdout: 'hi over nostr', exit_code: 0 } });
    expect(run.terminal.payload['text']).toBe('hi over nostr');
    const calls = responder.requests.filter((q) => q.method === 'tools/call');
    expect(calls.at(-1)).toMatchObject({ form: 'wrapped', client: agent }); // signed (sealed) by the agent key
    // The request's gift wrap (a stored 1059) expires 600 s after it was sent (NIP-40).
    const wrap = calls.at(-1)!.wrap!;
    expect(wrap.tags).toEqual([['p', responder.provider], ['expiration', String(wrap.created_at + 600)]]);
    const info = await agentInfo(agent);
    expect(JSON.stringify(info?.content)).toContain(`${server}__slow`);
  });

  it('a priced tool fails with "payment required" (the agent declines every payment)', async () => {
    const agent = await createTestAgent({ dvmcp_servers: [{ provider: responder.provider, server }] });
    const c = await NipXxClient.open(agent);
    const p = c.prompt({ ver: 1, message: `/tool ${server}__paid {}` });
    await c.send(p);
    const run = await c.collect(p.id);
    expect(run.tools[1]).toMatchObject({
      name: `${server}__paid`,
      phase: 'result',
      success: false,
      output: { stderr: `DVMCP ${server}__paid: payment required: 21 sats (invoice lnbc210n1test)`, exit_code: 1 },
    });
  });

  it('validates dvmcp_servers: provider as hex or npub, server id, at most 10', () => {
    const base = { name: 'a' };
    const ok = CreateAgentSchema.safeParse({ ...base, dvmcp_servers: [{ provider: npubEncode(responder.provider), server: 'x.y-z_1' }] });
    expect(ok.success && ok.data.dvmcp_servers).toEqual([{ provider: responder.provider, server: 'x.y-z_1' }]);
    const bad = CreateAgentSchema.safeParse({ ...base, dvmcp_servers: [{ provider: 'nope', server: 'bad id' }] });
    expect(bad.success ? [] : bad.error.issues.map((i) => i.message)).toEqual(['not a pubkey (64-hex or npub): nope', 'dvmcp server ids are 1-64 characters of [a-zA-Z0-9_.-]']);
    const many = CreateAgentSchema.safeParse({ ...base, dvmcp_servers: Array.from({ length: 11 }, () => ({ provider: responder.provider, server: 's' })) });
    expect(many.success).toBe(false);
  });
});

/** A DVMCP client of a fresh key on the public shard (authenticated), as the agent's. */
function freshClient(): { client: DvmcpClient; relay: RelayClient; pk: string } {
  const me = keys();
  const relay = new RelayClient({ url: 'ws://relay.test/', socket, auth: async (t) => sign(me, t), reconnect: false });
  const client = new DvmcpClient({ relays: relay, secretKey: me.sk, keys: new ConversationKeyCache(), sign: async (t) => sign(me, t), verifier: nobleVerifier });
  return { client, relay, pk: me.pk };
}

describe('an agent\'s DVMCP calls are private unless the config says encrypt: false', () => {
  /** A stranger on `/`, unauthenticated, reading every 25910 and 26910 (kinds.ts lets anyone read them). */
  async function stranger(): Promise<{ sock: TestSocket; sentinel: Sentinel }> {
    const sock = await connect('/');
    const spy = await sock.req('spy', { kinds: [25910, 26910] });
    expect(spy.closed).toBeUndefined();
    return { sock, sentinel: await Sentinel.arm(sock, sock, keys()) };
  }
  const spied = (f: Frame): f is ['EVENT', string, { pubkey: string; tags: string[][]; content: string }] => f[0] === 'EVENT' && f[1] === 'spy';
  /** Runs `/tool <server>__echo {"text": secret}` on `agent` as `user`; the tool's stdout. */
  async function echoRun(agent: string, user: ReturnType<typeof keys>, id: string, secret: string): Promise<unknown> {
    const c = await NipXxClient.open(agent, user);
    const p = c.prompt({ ver: 1, message: `/tool ${id}__echo {"text":"${secret}"}` });
    await c.send(p);
    const run = await c.collect(p.id);
    c.sock.close();
    return run.tools[1];
  }

  it('without encrypt, a private agent calls a private server gift-wrapped: a stranger reading 25910/26910 on / sees neither the server id nor the arguments', async () => {
    const id = `private-${randomHex(8)}`;
    const hidden = new DvmcpResponder('ws://relay.test/', socket, id, true, { announce: false });
    await hidden.start();
    const user = keys();
    const agent = await createTestAgent({ allow: [user.pk], dvmcp_servers: [{ provider: hidden.provider, server: id }] });
    const spy = await stranger();
    try {
      const secret = `secret-${randomHex(8)}`;
      expect(await echoRun(agent, user, id, secret)).toMatchObject({ name: `${id}__echo`, phase: 'result', success: true, output: { stdout: secret, exit_code: 0 } });
      expect(hidden.requests.some((q) => q.method === 'tools/call')).toBe(true);
      expect(hidden.requests.map((q) => `${q.form} ${q.client}`)).toEqual(hidden.requests.map(() => `wrapped ${agent}`));
      const leaks = (f: Frame): boolean => spied(f) && (f[2].pubkey === agent || JSON.stringify(f[2]).includes(id) || JSON.stringify(f[2]).includes(secret));
      expect(await spy.sock.silence(leaks, spy.sentinel)).toBe(true);
    } finally {
      spy.sock.close();
      hidden.close();
    }
  });

  it('with encrypt: false the calls go plain, as before: the stranger reads the server id and the arguments', async () => {
    const id = `public-${randomHex(8)}`;
    const open = new DvmcpResponder('ws://relay.test/', socket, id, true, { announce: false });
    await open.start();
    const user = keys();
    const agent = await createTestAgent({ allow: [user.pk], dvmcp_servers: [{ provider: open.provider, server: id, encrypt: false }] });
    const spy = await stranger();
    try {
      const secret = `secret-${randomHex(8)}`;
      expect(await echoRun(agent, user, id, secret)).toMatchObject({ name: `${id}__echo`, success: true, output: { stdout: secret } });
      expect(open.requests.map((q) => `${q.form} ${q.client}`)).toEqual(open.requests.map(() => `plain ${agent}`));
      const call = await spy.sock.next((f) => spied(f) && f[2].pubkey === agent && f[2].content.includes(secret));
      expect((call[2] as { tags: string[][] }).tags).toContainEqual(['s', id]);
    } finally {
      spy.sock.close();
      open.close();
    }
  });

  it('a server that announces no encryption is refused without a request unless the config says encrypt: false', async () => {
    const id = `plain-only-${randomHex(6)}`;
    const plainOnly = new DvmcpResponder('ws://relay.test/', socket, id, false);
    await plainOnly.start();
    const { client, relay, pk } = freshClient();
    try {
      const options = { client: async () => client, agent: pk };
      const refusal = `DVMCP server ${id}: ${id} does not support encryption; set encrypt: false to call it in public`;
      expect(await connectDvmcpServer({ provider: plainOnly.provider, server: id }, options)).toEqual({ ok: false, error: refusal });
      expect(plainOnly.requests).toEqual([]);
      // Through an agent: its tools are not offered, a run asking for one gets a failed call naming the server (echo answers with it; the owner reads why), nothing is sent.
      const agent = await createTestAgent({ dvmcp_servers: [{ provider: plainOnly.provider, server: id }] });
      const c = await NipXxClient.open(agent);
      const p = c.prompt({ ver: 1, message: `/tool ${id}__echo {"text":"x"}` });
      await c.send(p);
      expect((await c.collect(p.id)).terminal.payload).toMatchObject({ text: `error: tool ${id}__echo is unavailable: its server ${id} could not be used for this run (the agent's owner can see why)` });
      c.sock.close();
      expect(plainOnly.requests).toEqual([]);
      const listed = await connectDvmcpServer({ provider: plainOnly.provider, server: id, encrypt: false }, options);
      expect(listed.ok && listed.value.tools.map((t) => t.definition.name)).toContain(`${id}__echo`);
      expect(plainOnly.requests.map((q) => `${q.method} ${q.form}`)).toEqual(['tools/list plain']);
    } finally {
      await client.close();
      relay.close();
      plainOnly.close();
    }
  });

  it('a server that is not announced and does not answer: the timeout says the request was gift-wrapped and how to call it in public', async () => {
    const id = `silent-${randomHex(6)}`;
    const { client, relay, pk } = freshClient();
    try {
      const r = await connectDvmcpServer({ provider: keys().pk, server: id }, { client: async () => client, agent: pk, listTimeoutMs: 300 });
      expect(r).toEqual({
        ok: false,
        error: `DVMCP server ${id}: timed out: the DVMCP request took over 300 ms (the request was gift-wrapped and ${id} is not announced: if it does not support encryption, set encrypt: false to call it in public)`,
      });
    } finally {
      await client.close();
      relay.close();
    }
  });
});

describe('a DVMCP server\'s tool definitions are bounded as an MCP server\'s', () => {
  it('a description over the cap is cut with a note, a huge input schema leaves its tool out, and so do the tools past one server\'s definitions cap (in skipped, logged once per listing)', async () => {
    const id = `agent-dvbig-${randomHex(3)}`;
    const described = (n: number): string => 'x'.repeat(n);
    const wideSchema = { type: 'object', description: 's'.repeat(MAX_MCP_INPUT_SCHEMA_CHARS) };
    // 8 pages (each one event of at most 100,000 characters of tools): the first wide and long,
    // then 40 tools of 16,384-character descriptions: ~680,000 characters of definitions in all.
    const big = new DvmcpResponder('ws://relay.test/', socket, id, false, {
      tools: [
        { name: 'wide', description: 'w', inputSchema: wideSchema },
        { name: 'long', description: described(MAX_MCP_DESCRIPTION_CHARS + 1000), inputSchema: { type: 'object' } },
        ...Array.from({ length: 40 }, (_, i) => ({ name: `more${i}`, description: described(MAX_MCP_DESCRIPTION_CHARS), inputSchema: { type: 'object' } })),
      ],
    });
    await big.start();
    const me = keys();
    const relay = new RelayClient({ url: 'ws://relay.test/', socket, auth: async (t) => sign(me, t), reconnect: false });
    const client = new DvmcpClient({ relays: relay, secretKey: me.sk, keys: new ConversationKeyCache(), sign: async (t) => sign(me, t), verifier: nobleVerifier });
    const warn = vi.spyOn(console, 'warn').mockImplementation(() => undefined);
    try {
      const config = { provider: big.provider, server: id, encrypt: false };
      const options = { client: async () => client, agent: me.pk };
      const connected = await connectDvmcpServer(config, options);
      if (!connected.ok) throw new Error(connected.error);
      const { tools, skipped } = connected.value;
      expect(big.requests.filter((r) => r.method === 'tools/list')).toHaveLength(8);
      const names = tools.map((t) => t.definition.name);
      expect(names.slice(0, 2)).toEqual([`${id}__long`, `${id}__more0`]);
      expect(tools[0]?.definition.description).toBe(`${described(MAX_MCP_DESCRIPTION_CHARS)}\n[description cut: the first ${MAX_MCP_DESCRIPTION_CHARS} of ${MAX_MCP_DESCRIPTION_CHARS + 1000} characters]`);
      const size = tools.reduce((n, t) => n + JSON.stringify({ name: t.definition.name, description: t.definition.description, input_schema: t.definition.input_schema }).length, 0);
      expect(size).toBeLessThanOrEqual(MAX_MCP_TOOL_LIST_CHARS);
      const kept = names.length - 1;
      // long and 40 descriptions of 16,384 characters: about 30 of them fit in 524,288.
      expect(kept).toBeGreaterThan(25);
      expect(kept).toBeLessThan(32);
      const schemaChars = JSON.stringify(wideSchema).length;
      const leftOut = [
        `wide (its input schema is ${schemaChars} characters, at most ${MAX_MCP_INPUT_SCHEMA_CHARS})`,
        ...Array.from({ length: 40 - kept }, (_, i) => `more${kept + i} (over the ${MAX_MCP_TOOL_LIST_CHARS} characters of tool definitions one server may have)`),
      ];
      expect(skipped).toEqual(leftOut);
      expect(warn.mock.calls.map((args) => args.join(' '))).toEqual([`agent: DVMCP server ${id}: tools left out for their size: ${leftOut.join('; ')}`]);
      // Within the list's lifetime the same bounded tool set, without listing again.
      const again = await connectDvmcpServer(config, options);
      if (!again.ok) throw new Error(again.error);
      expect(again.value.tools.map((t) => t.definition)).toEqual(tools.map((t) => t.definition));
      expect(again.value.skipped).toEqual(leftOut);
      expect(big.requests.filter((r) => r.method === 'tools/list')).toHaveLength(8);
    } finally {
      warn.mockRestore();
      await client.close();
      relay.close();
      big.close();
    }
  });
});
