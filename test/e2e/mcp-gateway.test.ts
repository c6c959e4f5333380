// /mcp under `wrangler dev`, from Node with the official SDK Client over Streamable HTTP, against a
// DVMCP server peer (test/workers/dvmcp-client-responder.ts) announcing on the public shard over a
// real WebSocket: prefixed tools listed, a call answered, progress of a long-running tool received,
// an unknown tool an error, and the round trip time of a call.
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { McpError } from '@modelcontextprotocol/sdk/types.js';
import WebSocket from 'ws';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import type { SocketLike } from '../../src/shared/relay-client.js';
import { bytesToHex } from '../../src/shared/hex.js';
import { DvmcpResponder } from '../workers/dvmcp-client-responder.js';

const server = `e2e-${bytesToHex(crypto.getRandomValues(new Uint8Array(3)))}`;
let responder: DvmcpResponder;
let client: Client;

beforeAll(async () => {
  responder = new DvmcpResponder(`${inject('relayUrl')}/`, (u) => new WebSocket(u) as unknown as SocketLike, server, true);
  await responder.start();
  client = new Client({ name: 'e2e-gateway', version: '1.0.0' });
  await client.connect(new StreamableHTTPClientTransport(new URL(`${inject('httpUrl')}/mcp`)));
});

afterAll(async () => {
  await client?.close();
  responder?.close();
});

const firstText = (r: unknown): string | undefined => ((r as { content?: Array<{ text?: string }> }).content ?? [])[0]?.text;

describe('/mcp from Node (wrangler dev)', () => {
  it('lists the DVMCP tools announced on the relay, prefixed by server', async () => {
    // The gateway caches its catalog for 10 s: poll until the new announcements are in it.
    let names: string[] = [];
    for (let i = 0; i < 30 && !names.includes(`${server}__echo`); i++) {
      names = (await client.listTools()).tools.map((t) => t.name);
      if (!names.includes(`${server}__echo`)) await new Promise((r) => setTimeout(r, 1000));
    }
    expect(names).toEqual(expect.arrayContaining(['echo', 'slow', 'hang', 'paid', 'noisy'].map((t) => `${server}__${t}`)));
  }, 40_000);

  it('calls a tool over Nostr (gift-wrapped, as announced)', async () => {
    const started = Date.now();
    const r = await client.callTool({ name: `${server}__echo`, arguments: { text: 'through the gateway' } });
    expect(firstText(r)).toBe('through the gateway');
    expect(responder.requests.at(-1)).toMatchObject({ method: 'tools/call', form: 'wrapped' });
    expect(Date.now() - started).toBeLessThan(5_000);
  });

  it('passes progress of a long-running tool through to the MCP client', async () => {
    const progress: number[] = [];
    const r = await client.callTool({ name: `${server}__slow`, arguments: { steps: 3, ms: 100 } }, undefined, { onprogress: (p) => progress.push(p.progress) });
    expect(firstText(r)).toBe('done');
    expect(progress).toEqual([1, 2, 3]);
  });

  it('an unknown tool is a JSON-RPC error', async () => {
    const e = await client.callTool({ name: `${server}__missing`, arguments: {} }).then(
      () => undefined,
      (x: unknown) => x,
    );
    expect(e).toBeInstanceOf(McpError);
    expect((e as McpError).code).toBe(-32602);
    expect((e as McpError).message).toBe(`MCP error -32602: Unknown tool: ${server}__missing`);
  });
});
