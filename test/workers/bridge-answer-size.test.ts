// Upstream answers are read up to a byte cap (MAX_UPSTREAM_ANSWER_BYTES, workers/common/mcp-client.ts):
// a fixture upstream (test/mcp/fixture-server.ts /mcp-huge) answers tools/call `huge` with 32 MiB,
// as JSON or as one SSE event, through a real bridge. The bridge stops reading past the cap (the
// fixture sees its connection closed before the body went out in full), answers the exact error,
// and answers the next call.
import { beforeAll, describe, expect, inject, it } from 'vitest';
import { MAX_UPSTREAM_ANSWER_BYTES } from '../../workers/common/mcp-client.js';
import { bridgeReady, directBridge, DvmcpClient } from './bridge-helpers.js';
import { randomHex } from './helpers.js';

const HUGE = 32 * 1024 * 1024;
const bucket = randomHex(8);
const fixture = (path: string): string => `${inject('toolsFixtureUrl')}${path}`;
let client: DvmcpClient;

beforeAll(async () => {
  const { provider } = await directBridge([
    { id: 'json', url: fixture(`/mcp-huge?bucket=${bucket}-json`), public: false },
    { id: 'sse', url: fixture(`/mcp-huge?bucket=${bucket}-sse&sse=1`), public: false },
  ]);
  await bridgeReady(provider);
  client = await DvmcpClient.open(provider);
});

type Stats = { begun: number; finished: number; cut: number; written: number };
const stats = async (b: string): Promise<Stats> => (await (await fetch(fixture(`/mcp-huge/stats?bucket=${b}`))).json()) as Stats;

/** The fixture's stats once its huge answer ended (cut or finished), polled for at most ~5 s. */
async function ended(b: string): Promise<Stats> {
  let s = await stats(b);
  for (let i = 0; i < 50 && s.cut + s.finished < s.begun; i++) {
    await new Promise((r) => setTimeout(r, 100));
    s = await stats(b);
  }
  return s;
}

describe('bridge: upstream answers are read up to a byte cap', () => {
  it.each(['json', 'sse'])('a 32 MiB %s answer is cut at the cap, answered with the error, and the next call works', async (server) => {
    expect(MAX_UPSTREAM_ANSWER_BYTES).toBe(4 * 1024 * 1024);
    const started = Date.now();
    const huge = await client.call('tools/call', { name: 'huge', arguments: {} }, { s: server, timeoutMs: 20_000 });
    expect(huge.result).toEqual({ ok: false, error: { code: -32603, message: `upstream ${server} sent an answer over ${MAX_UPSTREAM_ANSWER_BYTES} bytes` } });
    expect(Date.now() - started).toBeLessThan(15_000);
    const s = await ended(`${bucket}-${server}`);
    expect(s).toMatchObject({ begun: 1, finished: 0, cut: 1 });
    expect(s.written).toBeLessThan(HUGE);

    const small = await client.call('tools/call', { name: 'small', arguments: {} }, { s: server });
    expect(small.result.ok && small.result.value.content).toEqual([{ type: 'text', text: 'small' }]);
  });
});
