// /mcp end to end under `wrangler dev` (the development instance): the demo owner registers the
// real @modelcontextprotocol/server-everything with the DVMCP bridge (/api/bridge/servers, NIP-98),
// the bridge announces it on the public shard, and the official SDK Client from Node lists its
// tools through /mcp (prefixed by the server id), calls one, receives progress of the long-running
// tool, and gets an error for an unknown tool — every call crossing the relay and the bridge.
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { McpError } from '@modelcontextprotocol/sdk/types.js';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { bytesToHex } from '../../src/shared/hex.js';
import { makeHttpAuthHeader } from '../../src/shared/nip98.js';
import { sha256 } from '@noble/hashes/sha2.js';
import '../mcp/provided.js';

const httpUrl = inject('httpUrl');
/** The demo owner of development mode: its key is derived from a public label (workers/common/owners.ts). */
const DEMO_OWNER_SK = sha256(new TextEncoder().encode('edgestr demo owner (local development only)'));
const id = `ev${bytesToHex(crypto.getRandomValues(new Uint8Array(3)))}`;
let client: Client;

async function register(): Promise<void> {
  const url = `${httpUrl}/api/bridge/servers`;
  const body = JSON.stringify({ id, url: inject('mcpEverythingUrl'), name: 'Everything', public: true, encryption: true });
  const res = await fetch(url, { method: 'POST', headers: { Authorization: makeHttpAuthHeader(DEMO_OWNER_SK, url, 'POST', body), 'Content-Type': 'application/json' }, body });
  if (res.status !== 201) throw new Error(`bridge server not registered: ${res.status} ${await res.text()}`);
}

beforeAll(async () => {
  await register();
  client = new Client({ name: 'e2e-gateway-bridge', version: '1.0.0' });
  await client.connect(new StreamableHTTPClientTransport(new URL(`${httpUrl}/mcp`)));
}, 30_000);

afterAll(async () => {
  await client?.close();
});

const text = (r: unknown): string | undefined => ((r as { content?: Array<{ text?: string }> }).content ?? [])[0]?.text;

describe('/mcp → relay → bridge → server-everything (wrangler dev)', () => {
  it('lists server-everything’s tools prefixed by the server id (once the bridge has announced them)', async () => {
    // The gateway caches its catalog for 10 s: poll until the new announcements are in it.
    let names: string[] = [];
    for (let i = 0; i < 30 && !names.includes(`${id}__echo`); i++) {
      names = (await client.listTools()).tools.map((t) => t.name);
      if (!names.includes(`${id}__echo`)) await new Promise((r) => setTimeout(r, 1000));
    }
    expect(names).toEqual(expect.arrayContaining([`${id}__echo`, `${id}__get-sum`, `${id}__trigger-long-running-operation`]));
  }, 40_000);

  it('calls a tool', async () => {
    expect(text(await client.callTool({ name: `${id}__echo`, arguments: { message: 'over nostr' } }))).toBe('Echo: over nostr');
  });

  it('passes progress of the long-running tool through', async () => {
    const progress: number[] = [];
    const r = await client.callTool({ name: `${id}__trigger-long-running-operation`, arguments: { duration: 2, steps: 4 } }, undefined, { onprogress: (p) => progress.push(p.progress) });
    expect(text(r)).toMatch(/^Long running operation completed/);
    expect(progress.length).toBeGreaterThanOrEqual(3);
    expect(progress).toEqual([...progress].sort((a, b) => a - b));
  });

  it('an unknown tool is a JSON-RPC error', async () => {
    const e = await client.callTool({ name: `${id}__no-such-tool`, arguments: {} }).then(
      () => undefined,
      (x: unknown) => x,
    );
    expect(e).toBeInstanceOf(McpError);
    expect((e as McpError).message).toBe(`MCP error -32602: Unknown tool: ${id}__no-such-tool`);
  });
});
