// Hosted agents with `dvmcp_servers`: the agent lists a DVMCP server's tools over Nostr (through
// its public-shard connection, authenticated as the agent) and calls them in a run; a priced tool
// fails with the payment message (agents have no wallet); config validation of dvmcp_servers.
import { SELF } from 'cloudflare:test';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { npubEncode } from 'nostr-tools/nip19';
import type { SocketFactory } from '../../src/shared/relay-client.js';
import { CreateAgentSchema } from '../../workers/agent/config.js';
import { NipXxClient, agentInfo, createTestAgent } from './agent-helpers.js';
import { DvmcpResponder } from './dvmcp-client-responder.js';
import { randomHex } from './helpers.js';

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
      output: { stderr: `DVMCP ${server}__paid: payment required: 21 sats (invoice lnbc21test)`, exit_code: 1 },
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
