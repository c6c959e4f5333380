// The upstream MCP client (workers/common/mcp-client.ts) inside workerd, against the real
// @modelcontextprotocol/server-everything (Streamable HTTP, and a second instance in the legacy
// HTTP+SSE mode) and the hand-written endpoints of test/mcp/fixture-server.ts, all started by
// test/mcp/global-setup.ts on 127.0.0.1.

import { afterAll, beforeAll, describe, expect, it, inject } from 'vitest';
import '../mcp/provided.js';
import { outboundPolicy } from '../../src/shared/outbound-url.js';
import { openMcpSession, type McpNotification, type McpProgress, type McpSession } from '../../workers/common/mcp-client.js';
import { MAX_KEPT_TOOL_LISTS_CHARS, MAX_TOOL_LIST_JSON_CHARS, McpSessionCache, type McpListedTool } from '../../workers/common/mcp-session-cache.js';

const EVERYTHING = inject('mcpEverythingUrl');
const EVERYTHING_SSE = inject('mcpEverythingSseUrl');
const FIXTURE = inject('toolsFixtureUrl');
const LOCAL = outboundPolicy({ EDGESTR_OUTBOUND_ALLOW: '127.0.0.1:*' });
const PLAIN_HTTP = 'plain http:// is allowed only in development or for hosts in EDGESTR_OUTBOUND_ALLOW; use https://';

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

async function open(url: string, options: Parameters<typeof openMcpSession>[1] = {}): Promise<McpSession> {
  const opened = await openMcpSession({ url }, { policy: LOCAL, ...options });
  if (!opened.ok) throw new Error(opened.error.message);
  return opened.value;
}

/** The value of an ok Result, or a thrown error naming the failure. */
function value<T>(r: { ok: true; value: T } | { ok: false; error: unknown }): T {
  if (!r.ok) throw new Error(`unexpected failure: ${JSON.stringify(r.error)}`);
  return r.value;
}

const LONG_OP = 'trigger-long-running-operation';

describe('server-everything over Streamable HTTP', () => {
  let session: McpSession;
  beforeAll(async () => {
    session = await open(EVERYTHING);
  });
  afterAll(async () => {
    await session.close();
  });

  it('exposes the initialize result', () => {
    expect(session.identity).toMatchObject({
      serverInfo: { name: 'mcp-servers/everything', version: '2.0.0' },
      protocolVersion: '2025-11-25',
      transport: 'streamable-http',
      capabilities: { tools: { listChanged: true }, resources: { subscribe: true, listChanged: true }, prompts: { listChanged: true } },
    });
    expect(session.identity.instructions).toMatch(/^# Everything Server/);
    expect(session.sessionId).toMatch(/^[0-9a-f-]{36}$/);
  });

  it('lists tools with every field the server sent', async () => {
    const listed = value(await session.request('tools/list')) as { tools: Record<string, unknown>[]; nextCursor?: string };
    const echo = listed.tools.find((t) => t.name === 'echo');
    expect(echo).toMatchObject({ title: 'Echo Tool', description: 'Echoes back the input string', annotations: expect.any(Object) });
    expect(listed.tools.map((t) => t.name)).toContain(LONG_OP);
    // This server-everything lists everything in one page (no nextCursor); cursors are tested below.
    expect(listed.nextCursor).toBeUndefined();
  });

  it('calls a tool, and reads resources, templates, prompts, completions and ping', async () => {
    expect(value(await session.request('tools/call', { name: 'echo', arguments: { message: 'hi' } }))).toEqual({
      content: [{ type: 'text', text: 'Echo: hi' }],
    });
    const resources = value(await session.request('resources/list')) as { resources: { uri: string }[] };
    expect(resources.resources.map((r) => r.uri)).toContain('demo://resource/static/document/architecture.md');
    const templates = value(await session.request('resources/templates/list')) as { resourceTemplates: { uriTemplate: string }[] };
    expect(templates.resourceTemplates.map((t) => t.uriTemplate)).toContain('demo://resource/dynamic/text/{resourceId}');
    const read = value(await session.request('resources/read', { uri: 'demo://resource/dynamic/text/7' })) as {
      contents: { uri: string; text?: string }[];
    };
    expect(read.contents[0]?.uri).toBe('demo://resource/dynamic/text/7');
    expect(read.contents[0]?.text).toContain('7');
    const prompts = value(await session.request('prompts/list')) as { prompts: { name: string }[] };
    expect(prompts.prompts.map((p) => p.name)).toEqual(expect.arrayContaining(['simple-prompt', 'args-prompt', 'completable-prompt']));
    const prompt = value(await session.request('prompts/get', { name: 'args-prompt', arguments: { city: 'Paris' } })) as {
      messages: { content: { text: string } }[];
    };
    expect(prompt.messages[0]?.content.text).toContain('Paris');
    const completion = value(
      await session.request('completion/complete', {
        ref: { type: 'ref/prompt', name: 'completable-prompt' },
        argument: { name: 'department', value: 'E' },
      }),
    ) as { completion: { values: string[] } };
    expect(completion.completion.values).toEqual(['Engineering']);
    expect(value(await session.request('ping'))).toEqual({});
  });

  it('passes progress notifications of a request to onProgress', async () => {
    const progress: McpProgress[] = [];
    const result = await session.request('tools/call', { name: LONG_OP, arguments: { duration: 0.6, steps: 3 } }, { onProgress: (p) => progress.push(p) });
    expect(value(result)).toEqual({ content: [{ type: 'text', text: 'Long running operation completed. Duration: 0.6 seconds, Steps: 3.' }] });
    expect(progress).toEqual([
      { progress: 1, total: 3 },
      { progress: 2, total: 3 },
      { progress: 3, total: 3 },
    ]);
  });

  it('restarts the timeout on progress; maxTotalMs bounds the whole request', async () => {
    const args = { name: LONG_OP, arguments: { duration: 1.2, steps: 4 } }; // progress every 300 ms
    expect(await session.request('tools/call', args, { timeoutMs: 700 })).toEqual({
      ok: false,
      error: { kind: 'transport', message: 'timed out after 700 ms' },
    });
    expect((await session.request('tools/call', args, { timeoutMs: 700, onProgress: () => undefined })).ok).toBe(true);
    expect(await session.request('tools/call', args, { timeoutMs: 700, maxTotalMs: 500, onProgress: () => undefined })).toEqual({
      ok: false,
      error: { kind: 'transport', message: 'timed out after 500 ms' },
    });
  });

  it('reports JSON-RPC errors from upstream as protocol failures', async () => {
    expect(await session.request('no/such-method', {})).toEqual({ ok: false, error: { kind: 'protocol', code: -32601, message: 'Method not found' } });
    const missingArg = await session.request('prompts/get', { name: 'args-prompt', arguments: {} });
    expect(!missingArg.ok && missingArg.error).toMatchObject({ kind: 'protocol', code: -32602 });
    expect(await session.request('prompts/get', { name: 'no-such-prompt' })).toEqual({
      ok: false,
      // The server's own message text carries the "MCP error <code>:" prefix.
      error: { kind: 'protocol', code: -32602, message: 'MCP error -32602: Prompt no-such-prompt not found' },
    });
    // The SDK's McpServer answers an unknown tool and bad tool arguments as tool errors (isError
    // content carrying the -32602 text), not as JSON-RPC errors.
    expect(value(await session.request('tools/call', { name: 'no-such-tool', arguments: {} }))).toEqual({
      content: [{ type: 'text', text: 'MCP error -32602: Tool no-such-tool not found' }],
      isError: true,
    });
    const badArgs = value(await session.request('tools/call', { name: 'get-sum', arguments: { a: 'x', b: 1 } })) as {
      content: { text: string }[];
      isError: boolean;
    };
    expect(badArgs.isError).toBe(true);
    expect(badArgs.content[0]?.text).toMatch(/^MCP error -32602: Input validation error: Invalid arguments for tool get-sum/);
  });

  it('aborts a request (the session stays usable)', async () => {
    const caller = new AbortController();
    setTimeout(() => caller.abort(), 150);
    const started = Date.now();
    expect(await session.request('tools/call', { name: LONG_OP, arguments: { duration: 3, steps: 3 } }, { signal: caller.signal })).toEqual({
      ok: false,
      error: { kind: 'transport', message: 'aborted' },
    });
    expect(Date.now() - started).toBeLessThan(1_000);
    expect(await session.request('ping', undefined, { signal: AbortSignal.abort() })).toEqual({ ok: false, error: { kind: 'transport', message: 'aborted' } });
    expect(value(await session.request('ping'))).toEqual({});
  });

  it('sends client notifications, except those of capabilities we do not declare', async () => {
    expect(await session.notify('notifications/cancelled', { requestId: 999_999, reason: 'test' })).toEqual({ ok: true, value: undefined });
    expect(await session.notify('notifications/roots/list_changed')).toEqual({
      ok: false,
      error: { kind: 'transport', message: 'Client does not support roots list changed notifications (required for notifications/roots/list_changed)' },
    });
  });
});

describe('session loss', () => {
  it('re-initializes once when server-everything forgets the session (400 "No valid session ID")', async () => {
    const session = await open(EVERYTHING);
    try {
      const first = session.sessionId;
      if (first === undefined) throw new Error('no session id');
      // End the session out of band, as a server restart or expiry would.
      const deleted = await fetch(EVERYTHING, { method: 'DELETE', headers: { 'mcp-session-id': first, 'mcp-protocol-version': '2025-11-25' } });
      await deleted.body?.cancel();
      expect(deleted.status).toBe(200);
      expect(value(await session.request('tools/call', { name: 'echo', arguments: { message: 'again' } }))).toEqual({
        content: [{ type: 'text', text: 'Echo: again' }],
      });
      expect(session.sessionId).toMatch(/^[0-9a-f-]{36}$/);
      expect(session.sessionId).not.toBe(first);
    } finally {
      await session.close();
    }
  });

  it('re-initializes when the server answers 404 for the session', async () => {
    const stats = async (): Promise<{ initializes: number }> => (await (await fetch(`${FIXTURE}/mcp-expire/stats?bucket=client-loss`)).json()) as { initializes: number };
    const session = await open(`${FIXTURE}/mcp-expire?bucket=client-loss`);
    try {
      const before = await stats();
      const call = async (): Promise<unknown> => value(await session.request('tools/call', { name: 'ping', arguments: {} }));
      const first = await call();
      const second = await call(); // the fixture forgot the session after the first call
      expect(first).not.toEqual(second);
      expect(second).toEqual({ content: [{ type: 'text', text: `pong from ${session.sessionId}` }] });
      expect((await stats()).initializes).toBe(before.initializes + 1);
    } finally {
      await session.close();
    }
  });

  it('sends DELETE on close, and refuses requests afterwards', async () => {
    const session = await open(EVERYTHING);
    const id = session.sessionId ?? '';
    await session.close();
    const probe = await fetch(EVERYTHING, { method: 'DELETE', headers: { 'mcp-session-id': id } });
    expect(probe.status).toBe(400); // the server no longer knows the session
    await probe.body?.cancel();
    expect(await session.request('ping')).toEqual({ ok: false, error: { kind: 'transport', message: 'session is closed' } });
    expect(session.closed).toBe(true);
  });
});

describe('hand-written endpoint (JSON answers)', () => {
  it('follows pagination cursors as given', async () => {
    const session = await open(`${FIXTURE}/mcp-paged`);
    try {
      const first = value(await session.request('tools/list')) as { tools: { name: string }[]; nextCursor?: string };
      expect(first.nextCursor).toBe('page-2');
      const second = value(await session.request('tools/list', { cursor: first.nextCursor })) as { tools: { name: string }[]; nextCursor?: string };
      expect(second.nextCursor).toBeUndefined();
      expect([...first.tools, ...second.tools].map((t) => t.name)).toHaveLength(7);
      expect(await session.request('tools/list', { cursor: 'bogus' })).toEqual({ ok: false, error: { kind: 'protocol', code: -32602, message: 'bad cursor' } });
    } finally {
      await session.close();
    }
  });

  it('speaks each protocol revision the server picks, and refuses one the SDK does not know', async () => {
    for (const version of ['2025-03-26', '2025-06-18', '2025-11-25']) {
      const tag = crypto.randomUUID();
      const session = await openMcpSession({ url: `${FIXTURE}/mcp-paged?version=${version}`, headers: { 'x-test-tag': tag } }, { policy: LOCAL });
      expect(value(session).identity.protocolVersion).toBe(version);
      // notifications/initialized already carries the negotiated MCP-Protocol-Version header.
      const seen = (await (await fetch(`${FIXTURE}/mcp-paged/notifications?tag=${tag}`)).json()) as unknown[];
      expect(seen).toEqual([{ method: 'notifications/initialized', protocolVersion: version }]);
      await value(session).close();
    }
    expect(await openMcpSession({ url: `${FIXTURE}/mcp-paged?version=2023-01-01` }, { policy: LOCAL })).toEqual({
      ok: false,
      error: { kind: 'transport', message: "Server's protocol version is not supported: 2023-01-01" },
    });
  });

  it('tells upstream when a request is cancelled or timed out (notifications/cancelled)', async () => {
    const tag = crypto.randomUUID();
    const opened = await openMcpSession({ url: `${FIXTURE}/mcp-paged`, headers: { 'x-test-tag': tag } }, { policy: LOCAL });
    const session = value(opened);
    try {
      const caller = new AbortController();
      setTimeout(() => caller.abort(), 100);
      expect(await session.request('tools/call', { name: 'slow', arguments: { ms: 2000 } }, { signal: caller.signal })).toEqual({
        ok: false,
        error: { kind: 'transport', message: 'aborted' },
      });
      expect(await session.request('tools/call', { name: 'slow', arguments: { ms: 2000 } }, { timeoutMs: 200 })).toEqual({
        ok: false,
        error: { kind: 'transport', message: 'timed out after 200 ms' },
      });
      let seen: { method: string; params?: { requestId?: unknown; reason?: string } }[] = [];
      for (let i = 0; i < 20 && seen.filter((n) => n.method === 'notifications/cancelled').length < 2; i++) {
        await sleep(50);
        seen = (await (await fetch(`${FIXTURE}/mcp-paged/notifications?tag=${tag}`)).json()) as typeof seen;
      }
      const cancelled = seen.filter((n) => n.method === 'notifications/cancelled');
      expect(cancelled).toHaveLength(2);
      expect(cancelled.every((n) => typeof n.params?.requestId === 'number')).toBe(true);
      expect(cancelled[1]?.params?.reason).toContain('Request timed out');
    } finally {
      await session.close();
    }
  });
});

describe('upstream notifications', () => {
  it('opens the standalone GET stream only with standaloneGet, and delivers what arrives on it', async () => {
    const received: McpNotification[] = [];
    const session = await open(EVERYTHING, { standaloneGet: true, onNotification: (n) => received.push(n) });
    try {
      // The subscribe acknowledgement is a logging message sent on the standalone stream; the
      // stream opens right after initialize, so a first one may go out before it is there.
      for (let i = 0; i < 20 && !received.some((n) => n.method === 'notifications/message'); i++) {
        if (i % 5 === 0) value(await session.request('resources/subscribe', { uri: 'demo://resource/static/document/features.md' }));
        await sleep(100);
      }
      const message = received.find((n) => n.method === 'notifications/message');
      expect(message?.params?.data).toContain('Received Subscribe Resource request for URI: demo://resource/static/document/features.md');
    } finally {
      await session.close();
    }
  });
});

describe('legacy HTTP+SSE fallback', () => {
  it('falls back when Streamable HTTP is refused, and works the same', async () => {
    const received: McpNotification[] = [];
    const session = await open(EVERYTHING_SSE, { onNotification: (n) => received.push(n) });
    try {
      expect(session.identity).toMatchObject({ transport: 'sse', protocolVersion: '2025-11-25', serverInfo: { name: 'mcp-servers/everything' } });
      expect(session.sessionId).toBeUndefined();
      expect(value(await session.request('tools/call', { name: 'echo', arguments: { message: 'old' } }))).toEqual({
        content: [{ type: 'text', text: 'Echo: old' }],
      });
      const progress: McpProgress[] = [];
      value(await session.request('tools/call', { name: LONG_OP, arguments: { duration: 0.2, steps: 2 } }, { onProgress: (p) => progress.push(p) }));
      expect(progress).toEqual([
        { progress: 1, total: 2 },
        { progress: 2, total: 2 },
      ]);
      expect(await session.request('no/such-method')).toEqual({ ok: false, error: { kind: 'protocol', code: -32601, message: 'Method not found' } });
      value(await session.request('resources/subscribe', { uri: 'demo://resource/static/document/features.md' }));
      for (let i = 0; i < 20 && !received.some((n) => n.method === 'notifications/message'); i++) await sleep(50);
      expect(received.map((n) => n.method)).toContain('notifications/message');
    } finally {
      await session.close();
    }
  });

  it('is not tried when disabled, and both failures are reported when neither transport works', async () => {
    expect(await openMcpSession({ url: EVERYTHING_SSE }, { policy: LOCAL, legacySse: false })).toEqual({
      ok: false,
      error: { kind: 'transport', message: expect.stringMatching(/^Streamable HTTP error \(HTTP 404\): Error POSTing to endpoint: .*Cannot POST \/sse/s), status: 404 },
    });
    expect(await openMcpSession({ url: `${FIXTURE}/nothing-here` }, { policy: LOCAL })).toEqual({
      ok: false,
      error: { kind: 'transport', message: 'Streamable HTTP error (HTTP 404): Error POSTing to endpoint: not found (legacy HTTP+SSE: SSE error: Non-200 status code (404))', status: 404 },
    });
  });
});

describe('failures when opening', () => {
  it('refuses a URL outside the outbound policy before any fetch', async () => {
    const stats = async (): Promise<{ initializes: number }> => (await (await fetch(`${FIXTURE}/mcp-expire/stats?bucket=client-refused`)).json()) as { initializes: number };
    const before = await stats();
    expect(await openMcpSession({ url: `${FIXTURE}/mcp-expire?bucket=client-refused` })).toEqual({ ok: false, error: { kind: 'transport', message: `refused: ${PLAIN_HTTP}` } });
    expect(await openMcpSession({ url: 'https://169.254.169.254/mcp' }, { policy: LOCAL })).toEqual({
      ok: false,
      error: { kind: 'transport', message: 'refused: 169.254.169.254 is a link-local address' },
    });
    expect(await openMcpSession({ url: 'not a url' })).toEqual({ ok: false, error: { kind: 'transport', message: 'invalid URL' } });
    expect((await stats()).initializes).toBe(before.initializes);
  });

  it('reports an unreachable server quickly and clearly', async () => {
    const started = Date.now();
    expect(await openMcpSession({ url: 'http://127.0.0.1:1/mcp' }, { policy: LOCAL })).toEqual({
      ok: false,
      error: { kind: 'transport', message: 'unreachable: Network connection lost.' },
    });
    expect(Date.now() - started).toBeLessThan(2_000);
  });

  it('cuts a long upstream error text at 1,000 characters', async () => {
    const opened = await openMcpSession({ url: `${FIXTURE}/status?code=500&n=5000` }, { policy: LOCAL });
    const prefix = 'Streamable HTTP error (HTTP 500): Error POSTing to endpoint: ';
    expect(!opened.ok && opened.error).toEqual({
      kind: 'transport',
      message: `${prefix}${'0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ+/'.repeat(16).slice(0, 1_000 - prefix.length)}…`,
      status: 500,
    });
  });

  it('times out and aborts the initialize', async () => {
    const started = Date.now();
    expect(await openMcpSession({ url: `${FIXTURE}/slow-headers?ms=3000` }, { policy: LOCAL, connectTimeoutMs: 300 })).toEqual({
      ok: false,
      error: { kind: 'transport', message: 'timed out after 300 ms' },
    });
    expect(Date.now() - started).toBeLessThan(1_500);
    expect(await openMcpSession({ url: EVERYTHING }, { policy: LOCAL, signal: AbortSignal.abort() })).toEqual({ ok: false, error: { kind: 'transport', message: 'aborted' } });
  });
});

describe('McpSessionCache', () => {
  const PAGED = `${FIXTURE}/mcp-paged`;
  /** The session of `key`, its lease ended (as a caller would hold it only inside `use`). */
  const sessionOf = (cache: McpSessionCache, key: string, server: { url: string; headers?: Record<string, string> }, options: Parameters<McpSessionCache['use']>[2] = {}) =>
    cache.use(key, server, options, async (s) => s);

  it('keeps one session per key, and a new one when the server changes', async () => {
    const cache = new McpSessionCache();
    try {
      const a = value(await sessionOf(cache, 'a', { url: EVERYTHING }, { policy: LOCAL }));
      const [again, concurrent] = await Promise.all([
        sessionOf(cache, 'a', { url: EVERYTHING }, { policy: LOCAL }),
        sessionOf(cache, 'a', { url: EVERYTHING }, { policy: LOCAL }),
      ]);
      expect(value(again)).toBe(a);
      expect(value(concurrent)).toBe(a);
      const b = value(await sessionOf(cache, 'b', { url: EVERYTHING }, { policy: LOCAL }));
      expect(b).not.toBe(a);
      expect(b.sessionId).not.toBe(a.sessionId);
      const moved = value(await sessionOf(cache, 'a', { url: EVERYTHING, headers: { authorization: 'Bearer x' } }, { policy: LOCAL }));
      expect(moved).not.toBe(a);
      expect(a.closed).toBe(true);
      expect(cache.size).toBe(2);
    } finally {
      await cache.closeAll();
    }
    expect(cache.size).toBe(0);
  });

  it('closes the least recently used session beyond maxSessions, and idle sessions', async () => {
    const cache = new McpSessionCache({ maxSessions: 2, idleTtlMs: 400 });
    try {
      const a = value(await sessionOf(cache, 'a', { url: PAGED }, { policy: LOCAL }));
      const b = value(await sessionOf(cache, 'b', { url: PAGED }, { policy: LOCAL }));
      value(await sessionOf(cache, 'a', { url: PAGED }, { policy: LOCAL })); // a is now the most recent
      const c = value(await sessionOf(cache, 'c', { url: PAGED }, { policy: LOCAL }));
      expect([a.closed, b.closed, c.closed]).toEqual([false, true, false]);
      expect(cache.size).toBe(2);
      await sleep(500);
      const fresh = value(await sessionOf(cache, 'a', { url: PAGED }, { policy: LOCAL }));
      expect(fresh).not.toBe(a);
      expect([a.closed, c.closed]).toEqual([true, true]);
      expect(cache.size).toBe(1);
    } finally {
      await cache.closeAll();
    }
  });

  it('does not keep failed opens', async () => {
    const cache = new McpSessionCache();
    expect(await sessionOf(cache, 'x', { url: EVERYTHING })).toEqual({ ok: false, error: { kind: 'open', message: `refused: ${PLAIN_HTTP}` } });
    expect(cache.size).toBe(0);
    expect(await cache.tools('x', { url: 'http://127.0.0.1:1/mcp' }, { policy: LOCAL })).toEqual({
      ok: false,
      error: 'unreachable: Network connection lost.',
    });
    expect(cache.size).toBe(0);
  });

  it('caches the tool list (every page) until it expires or is invalidated', async () => {
    const cache = new McpSessionCache({ toolsTtlMs: 300 });
    try {
      const first = value(await cache.tools('p', { url: PAGED }, { policy: LOCAL }));
      expect(first.map((t) => t.name)).toHaveLength(7);
      expect(first[0]).toEqual({
        name: 'lookup',
        description: 'Looks a word up',
        inputSchema: { type: 'object', properties: { word: { type: 'string' } }, required: ['word'] },
      });
      expect(value(await cache.tools('p', { url: PAGED }, { policy: LOCAL }))).toBe(first);
      cache.invalidateTools('p');
      const relisted = value(await cache.tools('p', { url: PAGED }, { policy: LOCAL }));
      expect(relisted).not.toBe(first);
      expect(relisted).toEqual(first);
      await sleep(350);
      expect(value(await cache.tools('p', { url: PAGED }, { policy: LOCAL }))).not.toBe(relisted);
    } finally {
      await cache.closeAll();
    }
  });

  it('lists again after upstream sends tools/list_changed, and still passes it on', async () => {
    const cache = new McpSessionCache();
    const server = { url: `${FIXTURE}/mcp-changing` };
    const seen: string[] = [];
    const options = { policy: LOCAL, onNotification: (n: McpNotification) => seen.push(n.method) };
    try {
      const before = value(await cache.tools('c', server, options)).map((t) => t.name);
      expect(value(await cache.tools('c', server, options)).map((t) => t.name)).toEqual(before);
      const session = value(await sessionOf(cache, 'c', server, options));
      const bumped = value(await session.request('tools/call', { name: 'bump', arguments: {} })) as { content: { text: string }[] };
      const after = value(await cache.tools('c', server, options)).map((t) => t.name);
      expect(after).toEqual([bumped.content[0]?.text.replace('now ', ''), 'bump']);
      expect(after).not.toEqual(before);
      expect(seen).toEqual(['notifications/tools/list_changed']);
    } finally {
      await cache.closeAll();
    }
  });

  /** tools/list requests the fixture's /mcp-huge received for `bucket`. */
  const listsOf = async (bucket: string): Promise<number> => ((await (await fetch(`${FIXTURE}/mcp-huge/stats?bucket=${bucket}`)).json()) as { lists: number }).lists;
  const bucketOf = (name: string): string => `${name}-${crypto.randomUUID()}`;

  it(`fails a listing whose tools pass ${MAX_TOOL_LIST_JSON_CHARS} characters of JSON over all pages, reading no page after, keeping nothing`, async () => {
    expect(MAX_TOOL_LIST_JSON_CHARS).toBe(4 * 1024 * 1024);
    const bucket = bucketOf('pages');
    // 20 pages of about 1 MiB each (4 descriptions of 262,144 characters): 20 MiB of tools if read whole.
    const server = { url: `${FIXTURE}/mcp-huge?bucket=${bucket}&pages=20&more=4&description=262144` };
    const cache = new McpSessionCache();
    const tooMuch = { ok: false, error: `tools/list answered more than ${MAX_TOOL_LIST_JSON_CHARS} characters of tools (their JSON, over all pages), the most one listing may hold` };
    try {
      expect(await cache.tools('k', server, { policy: LOCAL })).toEqual(tooMuch);
      // The fourth page passes 4 MiB; the 16 after it are not asked for.
      expect(await listsOf(bucket)).toBe(4);
      // Nothing was kept: the next use lists again (and fails the same way).
      expect(await cache.tools('k', server, { policy: LOCAL })).toEqual(tooMuch);
      expect(await listsOf(bucket)).toBe(8);
      // The session itself still works.
      expect(value(await cache.use('k', server, { policy: LOCAL }, (s) => s.request('tools/call', { name: 'small', arguments: {} })))).toEqual({ ok: true, value: { content: [{ type: 'text', text: 'small' }] } });
    } finally {
      await cache.closeAll();
    }
  });

  it('keeps one tool list per server (URL and headers), shared by its keys: listed once; invalidateTools or list_changed on one key lists again for all', async () => {
    const cache = new McpSessionCache();
    const bucket = bucketOf('shared');
    const server = { url: `${FIXTURE}/mcp-huge?bucket=${bucket}` };
    const options = { policy: LOCAL };
    try {
      const [a, b] = await Promise.all([cache.tools('s:a', server, options), cache.tools('s:b', server, options)]);
      expect(value(b)).toBe(value(a));
      expect(value(await cache.tools('s:c', server, options))).toBe(value(a));
      expect(await listsOf(bucket)).toBe(1);
      expect(cache.size).toBe(3); // one session per key still
      // Other headers: another server, its own list.
      const other = value(await cache.tools('s:d', { ...server, headers: { 'x-test-tag': 'other' } }, options));
      expect(other).not.toBe(value(a));
      expect(other).toEqual(value(a));
      expect(await listsOf(bucket)).toBe(2);
      cache.invalidateTools('s:a');
      const relisted = value(await cache.tools('s:b', server, options));
      expect(relisted).not.toBe(value(a));
      expect(value(await cache.tools('s:c', server, options))).toBe(relisted);
      expect(await listsOf(bucket)).toBe(3);

      const changing = { url: `${FIXTURE}/mcp-changing` };
      const before = value(await cache.tools('c:1', changing, options));
      expect(value(await cache.tools('c:2', changing, options))).toBe(before);
      // c:1's session gets notifications/tools/list_changed: c:2 sees the new list too.
      const session = value(await sessionOf(cache, 'c:1', changing, options));
      const bumped = value(await session.request('tools/call', { name: 'bump', arguments: {} })) as { content: { text: string }[] };
      const after = value(await cache.tools('c:2', changing, options)).map((t) => t.name);
      expect(after).toEqual([bumped.content[0]?.text.replace('now ', ''), 'bump']);
      expect(after).not.toEqual(before.map((t) => t.name));
    } finally {
      await cache.closeAll();
    }
  });

  it(`keeps at most ${MAX_KEPT_TOOL_LISTS_CHARS} characters of tool lists in all: the least recently used one is listed again`, async () => {
    expect(MAX_KEPT_TOOL_LISTS_CHARS).toBe(8 * 1024 * 1024);
    const cache = new McpSessionCache();
    // Three servers listing about 3 MiB each (3 pages of 3 descriptions of 349,525 characters).
    const buckets = ['a', 'b', 'c'].map(bucketOf);
    const server = (bucket: string) => ({ url: `${FIXTURE}/mcp-huge?bucket=${bucket}&pages=3&more=3&description=349525` });
    const listed = async (i: number): Promise<McpListedTool[]> => value(await cache.tools(`k${i}`, server(buckets[i]!), { policy: LOCAL }));
    try {
      const first = await listed(0);
      expect(first).toHaveLength(5 + 3 * 3);
      await listed(1);
      expect(await listed(0)).toBe(first); // two fit, a is now the most recently used
      await listed(2); // the third passes 8 MiB: b goes
      expect(await Promise.all(buckets.map(listsOf))).toEqual([3, 3, 3]);
      expect(await listed(0)).toBe(first);
      await listed(2);
      expect(await Promise.all(buckets.map(listsOf))).toEqual([3, 3, 3]);
      await listed(1); // listed again; a, the least recently used, goes
      expect(await Promise.all(buckets.map(listsOf))).toEqual([3, 6, 3]);
      expect(await listed(0)).not.toBe(first);
      expect(await Promise.all(buckets.map(listsOf))).toEqual([6, 6, 3]);
    } finally {
      await cache.closeAll();
    }
  });
});
