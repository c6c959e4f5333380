// What a hostile upstream can make the MCP client (workers/common/mcp-client.ts) dial, and how long
// it can hold a connection, against the real protocols served by test/mcp/hostile-upstreams.ts
// (counted on the server's side): a legacy HTTP+SSE server that ends its event stream with
// `retry: 0` is not dialled again by itself (the connection is lost; the next request opens a new
// one); a legacy stream that never names its endpoint ends the open at connectTimeoutMs and its GET;
// a request that times out or is aborted closes its own upstream connection (no answer headers yet,
// or an SSE answer stream open), not only the wait for it.

import { describe, expect, inject, it } from 'vitest';
import '../mcp/provided.js';
import { outboundPolicy } from '../../src/shared/outbound-url.js';
import { openMcpSession, type McpSession } from '../../workers/common/mcp-client.js';
import type { Counts as Stats } from '../mcp/hostile-upstreams.js';

const FIXTURE = inject('toolsFixtureUrl');
const LOCAL = outboundPolicy({ EDGESTR_OUTBOUND_ALLOW: '127.0.0.1:*' });

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));
const bucket = (name: string): string => `${name}-${Math.random().toString(36).slice(2)}`;
const stats = async (b: string): Promise<Stats> => (await (await fetch(`${FIXTURE}/hostile/stats?bucket=${b}`)).json()) as Stats;

/** The server's counts once `done` holds (polled every 50 ms, at most ~5 s), or the last ones. */
async function statsWhen(b: string, done: (s: Stats) => boolean): Promise<Stats> {
  let s = await stats(b);
  for (let i = 0; i < 100 && !done(s); i++) {
    await sleep(50);
    s = await stats(b);
  }
  return s;
}

async function open(url: string, options: Parameters<typeof openMcpSession>[1] = {}): Promise<McpSession> {
  const opened = await openMcpSession({ url }, { policy: LOCAL, ...options });
  if (!opened.ok) throw new Error(opened.error.message);
  return opened.value;
}

describe('a legacy HTTP+SSE server ending its stream with retry: 0', () => {
  it('is not dialled again by the EventSource: the connection is lost, and only the next request opens a new one', async () => {
    const b = bucket('retry0');
    const session = await open(`${FIXTURE}/hostile/legacy?close=1&bucket=${b}`);
    expect(session.identity).toMatchObject({ serverInfo: { name: 'hostile-legacy' }, transport: 'sse' });
    // The stream ended after the initialize answer; then a window in which an EventSource with
    // `retry: 0` would have come back hundreds of times.
    expect(await statsWhen(b, (s) => s.streams === 0)).toMatchObject({ gets: 1, initializes: 1, streams: 0 });
    await sleep(500);
    expect(await stats(b)).toMatchObject({ gets: 1, streams: 0 });

    // The next request opens a new connection (one GET; this server ends that stream at once, so it fails).
    expect(await session.request('tools/list', {}, { timeoutMs: 2_000 })).toEqual({ ok: false, error: { kind: 'transport', message: 'the server ended its event stream' } });
    expect(session.closed).toBe(false);
    await sleep(500);
    expect(await stats(b)).toMatchObject({ gets: 2, streams: 0 });
    await session.close();
  });

  it('a stream that never names its endpoint: the open fails at connectTimeoutMs and its GET is closed', async () => {
    const b = bucket('silent');
    const opened = await Promise.race([
      openMcpSession({ url: `${FIXTURE}/hostile/legacy?silent=1&bucket=${b}` }, { policy: LOCAL, connectTimeoutMs: 500 }),
      sleep(8_000).then(() => 'still waiting after 8 s'),
    ]);
    expect(opened).toEqual({ ok: false, error: { kind: 'transport', message: 'Streamable HTTP error (HTTP 405): Error POSTing to endpoint:  (legacy HTTP+SSE: timed out after 500 ms)', status: 405 } });
    expect(await statsWhen(b, (s) => s.streams === 0)).toMatchObject({ gets: 1, streams: 0 });
  });
});

describe('a request that fails on its timeout or abort closes its upstream connection', () => {
  it.each(['hang', 'hang_sse'])('%s: the POST is closed once the call failed; the session stays usable', async (tool) => {
    const b = bucket(tool);
    const session = await open(`${FIXTURE}/hostile/hang?bucket=${b}`);
    expect(await session.request('tools/call', { name: tool, arguments: {} }, { timeoutMs: 300 })).toEqual({
      ok: false,
      error: { kind: 'transport', message: 'timed out after 300 ms' },
    });
    expect(await statsWhen(b, (s) => s.open === 0)).toMatchObject({ open: 0, closed: 1 });

    const abort = new AbortController();
    const aborted = session.request('tools/call', { name: tool, arguments: {} }, { signal: abort.signal });
    expect(await statsWhen(b, (s) => s.open === 1)).toMatchObject({ open: 1, closed: 1 });
    abort.abort();
    expect(await aborted).toEqual({ ok: false, error: { kind: 'transport', message: 'aborted' } });
    expect(await statsWhen(b, (s) => s.open === 0)).toMatchObject({ open: 0, closed: 2 });

    expect(await session.request('tools/list')).toMatchObject({ ok: true, value: { tools: [{ name: 'hang' }, { name: 'hang_sse' }] } });
    await session.close();
  });
});
