// /mcp against a stranger's DVMCP server that answers calls with JSON nested deeper than
// MAX_JSON_DEPTH (64, src/shared/json-depth.ts): a real peer on the public shard (its own key and
// relay connection) answering a structuredContent 50,000 levels deep (100 KB, one plain event), a
// content item 70 levels deep, and an error whose data nests 50,000. The gateway passed each on
// to the HTTP MCP client whole (many JSON readers cannot read it; vitest's own comparison
// overflows its stack on it); now a deep result is -32603 "the DVMCP server <id>'s result nests
// deeper than 64 levels" and a deep error keeps its code and message without its data. A result
// of 64 levels passes. Its own file: the gateway caches the catalog per isolate.
import { McpError } from '@modelcontextprotocol/sdk/types.js';
import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LISTS, listAnnouncement, responseTemplate, serverAnnouncement } from '../../src/shared/dvmcp.js';
import type { NostrEvent } from '../../src/shared/event.js';
import { KIND } from '../../src/shared/kinds.js';
import { nestsWithin } from '../../src/shared/json-depth.js';
import { connect, keys, now, randomHex, sign, type TestSocket } from './helpers.js';
import { gatewayClient } from './mcp-gateway-helpers.js';

const server = `deepres-${randomHex(4)}`;
const peer = keys();
let socket: TestSocket;
let client: Client;
let serving = true;

const nest = (n: number): string => `${'['.repeat(n)}${']'.repeat(n)}`;

/** What the peer answers to a call of each tool: the content of its 26910, as text (JSON.stringify cannot write 50,000 levels). */
const ANSWERS: Record<string, string> = {
  // result 1, structuredContent 2, nest 3…: 50,000 levels in all
  structured: `{"content":[{"type":"text","text":"see structuredContent"}],"structuredContent":{"nest":${nest(49_998)}}}`,
  // result 1, content 2, item 3, _meta 4, nest 5…70
  content: `{"content":[{"type":"text","text":"deep","_meta":{"nest":${nest(66)}}}]}`,
  // 64 levels: passes
  edge: `{"content":[{"type":"text","text":"edge","_meta":{"nest":${nest(60)}}}]}`,
  error: `{"error":{"code":-32000,"message":"deep","data":${nest(50_000)}}}`,
};

/** Answers each tools/call request the peer receives with ANSWERS[name], until the file ends. */
async function serve(): Promise<void> {
  while (serving) {
    const f = await socket.next((x) => x[0] === 'EVENT' && x[1] === 'requests', 60_000).catch(() => undefined);
    if (!f) continue;
    const request = f[2] as NostrEvent;
    const name = (JSON.parse(request.content) as { params?: { name?: string } }).params?.name ?? '';
    const t = responseTemplate({ requestId: request.id, client: request.pubkey }, {});
    const ok = await socket.publish(sign(peer, { ...t, content: ANSWERS[name] ?? '{"error":{"code":-32602,"message":"unknown"}}' }));
    if (!ok[2]) throw new Error(`answer refused: ${ok[3]}`);
  }
}

beforeAll(async () => {
  socket = await connect('/');
  await socket.auth(peer);
  const init = { protocolVersion: '2025-03-26', capabilities: { tools: {} }, serverInfo: { name: 'deep', version: '1' } };
  const tools = Object.keys(ANSWERS).map((name) => ({ name, inputSchema: { type: 'object' } }));
  for (const t of [serverAnnouncement({ id: server, encryption: false }, init), listAnnouncement(server, LISTS[0], tools)]) {
    expect((await socket.publish(sign(peer, t))).slice(2)).toEqual([true, '']);
  }
  await socket.req('requests', { kinds: [KIND.DVMCP_REQUEST], '#p': [peer.pk], since: now() - 5 });
  void serve();
  client = await gatewayClient('gateway-deep-results');
});

afterAll(async () => {
  serving = false;
  await client.close();
  socket.close();
});

/** The McpError a call of `tool` fails with (the test fails when it succeeds). */
async function callError(tool: string): Promise<McpError> {
  const outcome = await client.callTool({ name: `${server}__${tool}`, arguments: {} }).then(
    () => 'answered',
    (e: unknown) => e,
  );
  expect(outcome).toBeInstanceOf(McpError);
  return outcome as McpError;
}

describe('/mcp and a DVMCP server answering JSON nested deeper than 64 levels', () => {
  it.each(['structured', 'content'])('a %s result nesting too deep is -32603 naming the limit', async (tool) => {
    const e = await callError(tool);
    expect(e.code).toBe(-32603);
    expect(e.message).toBe(`MCP error -32603: the DVMCP server ${server}'s result nests deeper than 64 levels`);
  });

  it('a result of 64 levels is passed on', async () => {
    const r = await client.callTool({ name: `${server}__edge`, arguments: {} });
    expect(nestsWithin(r, 64)).toBe(true);
    expect(nestsWithin(r, 63)).toBe(false);
  });

  it('an error whose data nests 50,000 levels keeps its code and message, without the data', async () => {
    const e = await callError('error');
    expect(e.data === undefined).toBe(true); // (deep data would overflow the stack of a comparison)
    expect([e.code, e.message]).toEqual([-32000, 'MCP error -32000: deep']);
  });
});
