// A tiny node:http server for the in-runtime tool tests (started by test/mcp/global-setup.ts):
// web_fetch fixtures (text, JSON, sizes, slow answers, redirects, content types) and two
// hand-written MCP Streamable HTTP endpoints that answer with plain JSON (no SSE):
//   /mcp-paged   tools/list in two pages, tool names that need the naming rule, isError,
//                mixed content, a tool that answers late (timeouts), one that echoes Authorization
//                GET /mcp-paged/notifications?tag=T lists the notifications (method, params,
//                MCP-Protocol-Version header) received with the request header x-test-tag: T;
//                /mcp-paged?version=V answers initialize with protocol revision V;
//                /mcp-paged?bearer-sha256=H answers 401 to every request whose Authorization is
//                not "Bearer <token>" with sha256(token) = H (hex; the token stays out of the URL);
//                /mcp-paged?resource-pages=P declares resources and answers resources/list in P pages
//                of one resource each (page p: uri paged://resource/<p>, name r<p>; cursor rpage-<p>),
//                resources/read of any uri with one text content "resource <uri>"
//   /mcp-changing  tools/list gives one tool named v<version>; tools/call `bump` raises the
//                version and answers as SSE: notifications/tools/list_changed, then the result
//   /mcp-expire  forgets the session after each tools/call, so the next request gets 404
//                (the client must start a new session); GET /mcp-expire/stats counts initializes
//                and GET requests to the endpoint (standalone SSE stream attempts) and tools/call
//                requests, per ?bucket= of the endpoint URL (give each test its own); with ?keep=1
//                sessions are kept
//   /mcp-huge    tools/call `huge` answers with a body of 32 MiB (JSON; with ?sse=1 one SSE event),
//                written as fast as the client reads; `small` answers "small". GET
//                /mcp-huge/stats?bucket=B: per bucket of the endpoint URL, the huge answers begun,
//                finished (all bytes written) and cut (the connection closed first), and the bytes written;
//                `repeat` {unit, count, items?} answers `items` (default 1) text items, each `unit`
//                repeated `count` times (e.g. '語' × 100,000: 300,000 bytes); `structured` {count}
//                answers a short text and a structuredContent {data} of `count` 'x'; `error`
//                {message, data} answers a JSON-RPC error -32000 whose message is 'm' × `message`
//                and whose data (when given) is 'd' × `data`; /mcp-huge?instructions=N answers
//                initialize with instructions of N 'i', ?capabilities=N with capabilities.experimental
//                {pad: {text: N 'c'}}, ?description=N lists `huge` with a description of N 'x',
//                ?schema=N lists `small` with an inputSchema whose description is N 's', ?more=K
//                lists K more tools more0…more<K-1> (with the description of ?description, if any),
//                ?pages=P answers tools/list in P pages (cursor page-<p>): the first as above, each
//                next one with the K more tools only, named p<p>-more<i>; ?deep=N lists also
//                `deep` (after `error`) whose inputSchema nests N levels (N >= 2: {type, default}
//                holding N-1 nested arrays), ?deep-capabilities=N answers initialize with a result
//                nesting N levels (N >= 5: capabilities.experimental.deep.default holding N-4
//                nested arrays); the stats
//                count the tools/list requests (`lists`)
//   /mcp-flood   a hostile upstream: tools/call answers as SSE with `count` notifications before
//                the result ("flooded"): `list_changed` sends notifications/tools/list_changed,
//                `updated` {count, uris} notifications/resources/updated cycling over `uris` (default
//                1) uris file:///r<i>, `progress` notifications/progress for the request's
//                progressToken (progress 1…count); `huge_note` {bytes, method} sends one notification
//                of over `bytes` bytes: `progress` with a message of `bytes` 'm', or `updated` with
//                a uri file:///<`bytes` 'u'>. GET /mcp-flood/stats?bucket=B counts its tools/list and
//                tools/call requests per bucket of the endpoint URL; /mcp-flood?list-error=resources
//                answers resources/list with the JSON-RPC error -32603 "resources backend down: check
//                DATABASE_URL" (a backend of upstream failing, its tools still listed); POST
//                /mcp-flood/down?bucket=B&down=1 (0: up again) makes every request to that bucket's
//                endpoint answer HTTP 500 "flood backend down" (still counted), as a server gone down
// and, under /hostile/…, the hostile upstreams of test/mcp/hostile-upstreams.ts.

import { createHash } from 'node:crypto';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { hostileRoute } from './hostile-upstreams.js';

export interface FixtureServer {
  url: string;
  close(): Promise<void>;
}

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

function send(res: ServerResponse, status: number, headers: Record<string, string>, body?: string | Buffer): void {
  res.writeHead(status, headers);
  res.end(body);
}

async function readBody(req: IncomingMessage): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const chunk of req) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks).toString('utf8');
}

/** 64 printable ASCII bytes, repeated to build bodies of exact sizes. */
const PATTERN = '0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ+/';

async function streamBytes(res: ServerResponse, n: number): Promise<void> {
  res.writeHead(200, { 'content-type': 'text/plain; charset=utf-8' });
  const chunk = PATTERN.repeat(256); // 16 KiB
  let left = n;
  while (left > 0 && !res.destroyed) {
    const part = chunk.slice(0, Math.min(left, chunk.length));
    left -= part.length;
    if (!res.write(part)) await new Promise<void>((r) => res.once('drain', () => r()));
  }
  res.end();
}

// ---- web_fetch fixtures ----------------------------------------------------------------------

async function webRoute(req: IncomingMessage, res: ServerResponse, url: URL): Promise<boolean> {
  const p = url.pathname;
  if (p === '/text') {
    send(res, 200, { 'content-type': 'text/plain; charset=utf-8' }, 'hello from the fixture');
  } else if (p === '/json') {
    send(res, 200, { 'content-type': 'application/json' }, '{"ok":true,"n":42}');
  } else if (p === '/xml') {
    send(res, 200, { 'content-type': 'application/rss+xml' }, '<rss version="2.0"/>');
  } else if (p === '/latin1') {
    send(res, 200, { 'content-type': 'text/plain; charset=iso-8859-1' }, Buffer.from([0x63, 0x61, 0x66, 0xe9]));
  } else if (p === '/utf8') {
    // "é" is two bytes (c3 a9): a limit of 3 bytes cuts the second "é" in half.
    send(res, 200, { 'content-type': 'text/plain; charset=utf-8' }, 'éé');
  } else if (p === '/big') {
    await streamBytes(res, Number(url.searchParams.get('n') ?? '0'));
  } else if (p === '/slow-headers') {
    await sleep(Number(url.searchParams.get('ms') ?? '2000'));
    send(res, 200, { 'content-type': 'text/plain' }, 'late');
  } else if (p === '/slow-body') {
    res.writeHead(200, { 'content-type': 'text/plain' });
    res.write('first part;');
    await sleep(Number(url.searchParams.get('ms') ?? '2000'));
    if (!res.destroyed) res.end('second part');
  } else if (p === '/image') {
    send(res, 200, { 'content-type': 'image/png' }, Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]));
  } else if (p === '/no-type') {
    res.writeHead(200, {}); // node adds no content-type of its own
    res.end('untyped');
  } else if (p === '/no-content') {
    send(res, 204, {});
  } else if (p === '/status') {
    const code = Number(url.searchParams.get('code') ?? '500');
    const size = url.searchParams.get('n'); // a body of n bytes instead of "status <code>"
    send(res, code, { 'content-type': 'text/plain' }, size === null ? `status ${code}` : PATTERN.repeat(Math.ceil(Number(size) / 64)).slice(0, Number(size)));
  } else if (p === '/redirect') {
    const to = url.searchParams.get('to') ?? '/text';
    const status = Number(url.searchParams.get('status') ?? '302');
    send(res, status, { location: to, 'content-type': 'text/plain' }, 'moved');
  } else if (p.startsWith('/chain/')) {
    // /chain/N redirects N times (relative Location headers), then serves /text.
    const n = Number(p.slice('/chain/'.length));
    const next = n <= 1 ? '/text' : `/chain/${n - 1}`;
    send(res, 302, { location: next }, '');
  } else if (p === '/echo-headers') {
    send(res, 200, { 'content-type': 'application/json' }, JSON.stringify(req.headers));
  } else {
    return false;
  }
  return true;
}

// ---- hand-written MCP endpoints ------------------------------------------------------------

interface RpcMessage {
  jsonrpc?: string;
  id?: string | number;
  method?: string;
  params?: Record<string, unknown>;
}

const LONG_TOOL = 'an_extremely_long_tool_name_that_goes_on_and_on_past_the_sixty_four_character_limit';

const PAGE_1 = [
  {
    name: 'lookup',
    description: 'Looks a word up',
    inputSchema: { type: 'object', properties: { word: { type: 'string' } }, required: ['word'] },
  },
  { name: 'search.web', description: 'A name with a dot', inputSchema: { type: 'object', properties: {} } },
  { name: 'whoami', title: 'Who am I', inputSchema: { type: 'object', properties: {} } },
];
const PAGE_2 = [
  { name: LONG_TOOL, description: 'A long name', inputSchema: { type: 'object' } },
  { name: 'fails', description: 'Always reports an error', inputSchema: { type: 'object', properties: {} } },
  { name: 'mixed', description: 'Text, an image and a resource', inputSchema: { type: 'object', properties: {} } },
  {
    name: 'slow',
    description: 'Answers after ms milliseconds',
    inputSchema: { type: 'object', properties: { ms: { type: 'number' } } },
  },
];

function rpcResult(id: RpcMessage['id'], result: unknown): string {
  return JSON.stringify({ jsonrpc: '2.0', id, result });
}
function rpcError(id: RpcMessage['id'], code: number, message: string): string {
  return JSON.stringify({ jsonrpc: '2.0', id: id ?? null, error: { code, message } });
}

function initializeResult(msg: RpcMessage, name: string): unknown {
  const requested = typeof msg.params?.protocolVersion === 'string' ? msg.params.protocolVersion : '2025-06-18';
  return { protocolVersion: requested, capabilities: { tools: {} }, serverInfo: { name, version: '1.0.0' } };
}

async function pagedToolCall(msg: RpcMessage, req: IncomingMessage): Promise<unknown> {
  const name = msg.params?.name;
  const args = (msg.params?.arguments ?? {}) as Record<string, unknown>;
  if (name === 'lookup') return { content: [{ type: 'text', text: `definition of ${String(args.word)}` }] };
  if (name === 'search.web') return { content: [{ type: 'text', text: 'searched' }] };
  if (name === 'whoami') return { content: [{ type: 'text', text: `authorization: ${req.headers.authorization ?? '(none)'}` }] };
  if (name === LONG_TOOL) return { content: [{ type: 'text', text: 'long' }] };
  if (name === 'fails') return { content: [{ type: 'text', text: 'it went wrong' }], isError: true };
  if (name === 'mixed') {
    return {
      content: [
        { type: 'text', text: 'line one' },
        { type: 'image', data: 'iVBORw0KGgo=', mimeType: 'image/png' },
        { type: 'resource', resource: { uri: 'file:///notes.txt', mimeType: 'text/plain', text: 'embedded text' } },
        { type: 'resource_link', uri: 'file:///other.bin', name: 'other' },
        { type: 'text', text: 'line two' },
      ],
    };
  }
  if (name === 'slow') {
    await sleep(typeof args.ms === 'number' ? args.ms : 2000);
    return { content: [{ type: 'text', text: 'finally' }] };
  }
  return undefined;
}

/** Whether the request's Authorization is "Bearer <token>" with sha256(token) = `hash` (hex). */
function hasBearer(req: IncomingMessage, hash: string): boolean {
  const m = /^Bearer (.+)$/.exec(req.headers.authorization ?? '');
  return m !== null && createHash('sha256').update(m[1]!).digest('hex') === hash;
}

/** Notifications received by /mcp-paged, by the x-test-tag header of their request. */
const pagedNotifications = new Map<string, { method?: string; params?: RpcMessage['params']; protocolVersion?: string }[]>();

async function pagedMcp(req: IncomingMessage, res: ServerResponse, url: URL): Promise<void> {
  if (url.pathname === '/mcp-paged/notifications') {
    const list = pagedNotifications.get(url.searchParams.get('tag') ?? '') ?? [];
    return send(res, 200, { 'content-type': 'application/json' }, JSON.stringify(list));
  }
  if (req.method !== 'POST') return send(res, 405, { allow: 'POST' });
  const bearerHash = url.searchParams.get('bearer-sha256');
  if (bearerHash !== null && !hasBearer(req, bearerHash)) return send(res, 401, { 'www-authenticate': 'Bearer' });
  const msg = JSON.parse(await readBody(req)) as RpcMessage;
  const json = { 'content-type': 'application/json' };
  if (msg.id === undefined) {
    const tag = req.headers['x-test-tag'];
    const protocol = req.headers['mcp-protocol-version'];
    const seen = { method: msg.method, params: msg.params, protocolVersion: typeof protocol === 'string' ? protocol : undefined };
    if (typeof tag === 'string') pagedNotifications.set(tag, [...(pagedNotifications.get(tag) ?? []), seen]);
    return send(res, 202, {}); // a notification
  }
  const resourcePages = url.searchParams.get('resource-pages');
  if (msg.method === 'initialize') {
    const base = initializeResult(msg, 'paged') as { capabilities: Record<string, unknown> };
    const result = resourcePages === null ? base : { ...base, capabilities: { ...base.capabilities, resources: {} } };
    const version = url.searchParams.get('version'); // answer with this protocol revision instead
    return send(res, 200, json, rpcResult(msg.id, version === null ? result : { ...result, protocolVersion: version }));
  }
  if (resourcePages !== null && msg.method === 'resources/list') {
    const page = typeof msg.params?.cursor === 'string' ? Number(msg.params.cursor.replace('rpage-', '')) : 0;
    const resources = [{ uri: `paged://resource/${page}`, name: `r${page}` }];
    return send(res, 200, json, rpcResult(msg.id, page + 1 < Number(resourcePages) ? { resources, nextCursor: `rpage-${page + 1}` } : { resources }));
  }
  if (resourcePages !== null && msg.method === 'resources/read') {
    const uri = String(msg.params?.uri);
    return send(res, 200, json, rpcResult(msg.id, { contents: [{ uri, mimeType: 'text/plain', text: `resource ${uri}` }] }));
  }
  if (msg.method === 'tools/list') {
    const cursor = msg.params?.cursor;
    if (cursor === undefined) return send(res, 200, json, rpcResult(msg.id, { tools: PAGE_1, nextCursor: 'page-2' }));
    if (cursor === 'page-2') return send(res, 200, json, rpcResult(msg.id, { tools: PAGE_2 }));
    return send(res, 200, json, rpcError(msg.id, -32602, 'bad cursor'));
  }
  if (msg.method === 'tools/call') {
    const result = await pagedToolCall(msg, req);
    if (res.destroyed) return;
    if (result === undefined) return send(res, 200, json, rpcError(msg.id, -32602, `Unknown tool: ${String(msg.params?.name)}`));
    return send(res, 200, json, rpcResult(msg.id, result));
  }
  return send(res, 200, json, rpcError(msg.id, -32601, 'Method not found'));
}

let changingVersion = 1;

async function changingMcp(req: IncomingMessage, res: ServerResponse): Promise<void> {
  if (req.method !== 'POST') return send(res, 405, { allow: 'POST' });
  const msg = JSON.parse(await readBody(req)) as RpcMessage;
  const json = { 'content-type': 'application/json' };
  if (msg.id === undefined) return send(res, 202, {});
  if (msg.method === 'initialize') return send(res, 200, json, rpcResult(msg.id, initializeResult(msg, 'changing')));
  if (msg.method === 'tools/list') {
    const tools = [{ name: `v${changingVersion}`, inputSchema: { type: 'object' } }, { name: 'bump', inputSchema: { type: 'object' } }];
    return send(res, 200, json, rpcResult(msg.id, { tools }));
  }
  if (msg.method === 'tools/call' && msg.params?.name === 'bump') {
    changingVersion += 1;
    const changed = JSON.stringify({ jsonrpc: '2.0', method: 'notifications/tools/list_changed' });
    const result = rpcResult(msg.id, { content: [{ type: 'text', text: `now v${changingVersion}` }] });
    return send(res, 200, { 'content-type': 'text/event-stream' }, `event: message\ndata: ${changed}\n\nevent: message\ndata: ${result}\n\n`);
  }
  return send(res, 200, json, rpcError(msg.id, -32601, 'Method not found'));
}

const expire = { sessions: new Set<string>(), next: 1 };
/** Counts per ?bucket= of the URL, so that test files running at once do not see each other's. */
const expireCounts = new Map<string, { initializes: number; gets: number; calls: number }>();

async function expiringMcp(req: IncomingMessage, res: ServerResponse, url: URL): Promise<void> {
  const bucket = url.searchParams.get('bucket') ?? '';
  const counts = expireCounts.get(bucket) ?? { initializes: 0, gets: 0, calls: 0 };
  expireCounts.set(bucket, counts);
  if (url.pathname === '/mcp-expire/stats') return send(res, 200, { 'content-type': 'application/json' }, JSON.stringify(counts));
  if (req.method === 'GET') counts.gets += 1; // a standalone SSE stream attempt
  if (req.method !== 'POST') return send(res, 405, { allow: 'POST' });
  const msg = JSON.parse(await readBody(req)) as RpcMessage;
  const json = { 'content-type': 'application/json' };
  const session = req.headers['mcp-session-id'];
  if (msg.method === 'initialize') {
    counts.initializes += 1;
    const id = `session-${expire.next++}`;
    expire.sessions.add(id);
    return send(res, 200, { ...json, 'mcp-session-id': id }, rpcResult(msg.id, initializeResult(msg, 'expire')));
  }
  if (typeof session !== 'string' || !expire.sessions.has(session)) {
    return send(res, 404, json, rpcError(msg.id, -32001, 'Session not found'));
  }
  if (msg.id === undefined) return send(res, 202, {});
  if (msg.method === 'tools/list') {
    const tools = [{ name: 'ping', description: 'Pong', inputSchema: { type: 'object', properties: {} } }];
    return send(res, 200, json, rpcResult(msg.id, { tools }));
  }
  if (msg.method === 'tools/call') {
    counts.calls += 1;
    if (url.searchParams.get('keep') !== '1') expire.sessions.delete(session); // the next request of this session gets 404
    return send(res, 200, json, rpcResult(msg.id, { content: [{ type: 'text', text: `pong from ${session}` }] }));
  }
  return send(res, 200, json, rpcError(msg.id, -32601, 'Method not found'));
}

/** The size of /mcp-huge's huge answer. */
export const HUGE_ANSWER_BYTES = 32 * 1024 * 1024;
const hugeCounts = new Map<string, { begun: number; finished: number; cut: number; written: number; lists: number }>();

/** Writes `prefix`, filler up to HUGE_ANSWER_BYTES, `suffix`, as fast as the client reads; whether all of it went. */
async function writeHuge(res: ServerResponse, prefix: string, suffix: string, counts: { written: number }): Promise<boolean> {
  const chunk = PATTERN.repeat(1024); // 64 KiB
  let closed = false;
  res.once('close', () => (closed = true));
  const write = async (part: string): Promise<void> => {
    counts.written += part.length;
    if (!res.write(part)) await new Promise<void>((r) => (res.once('drain', () => r()), res.once('close', () => r())));
  };
  await write(prefix);
  for (let left = HUGE_ANSWER_BYTES - prefix.length - suffix.length; left > 0 && !closed && !res.destroyed; left -= chunk.length) {
    await write(chunk.slice(0, Math.min(left, chunk.length)));
  }
  if (closed || res.destroyed) return false;
  await write(suffix);
  res.end();
  return !closed;
}

/** `levels` (at least 1) arrays nested in one another: `[[…[]…]]`. */
function nestedArrays(levels: number): unknown[] {
  let nested: unknown[] = [];
  for (let level = 1; level < levels; level++) nested = [nested];
  return nested;
}

async function hugeMcp(req: IncomingMessage, res: ServerResponse, url: URL): Promise<void> {
  const bucket = url.searchParams.get('bucket') ?? '';
  const counts = hugeCounts.get(bucket) ?? { begun: 0, finished: 0, cut: 0, written: 0, lists: 0 };
  hugeCounts.set(bucket, counts);
  if (url.pathname === '/mcp-huge/stats') return send(res, 200, { 'content-type': 'application/json' }, JSON.stringify(counts));
  if (req.method !== 'POST') return send(res, 405, { allow: 'POST' });
  const msg = JSON.parse(await readBody(req)) as RpcMessage;
  const json = { 'content-type': 'application/json' };
  if (msg.id === undefined) return send(res, 202, {});
  if (msg.method === 'initialize') {
    const result = initializeResult(msg, 'huge') as { capabilities: Record<string, unknown> };
    const instructions = url.searchParams.get('instructions');
    const capabilities = url.searchParams.get('capabilities');
    const deepCapabilities = url.searchParams.get('deep-capabilities');
    return send(
      res,
      200,
      json,
      rpcResult(msg.id, {
        ...result,
        ...(instructions === null ? {} : { instructions: 'i'.repeat(Number(instructions)) }),
        ...(capabilities === null ? {} : { capabilities: { ...result.capabilities, experimental: { pad: { text: 'c'.repeat(Number(capabilities)) } } } }),
        ...(deepCapabilities === null ? {} : { capabilities: { ...result.capabilities, experimental: { deep: { default: nestedArrays(Number(deepCapabilities) - 4) } } } }),
      }),
    );
  }
  if (msg.method === 'tools/list') {
    counts.lists += 1;
    const description = url.searchParams.get('description');
    const schema = url.searchParams.get('schema');
    const pages = Number(url.searchParams.get('pages') ?? 1);
    const page = typeof msg.params?.cursor === 'string' ? Number(msg.params.cursor.replace('page-', '')) : 0;
    const more = Array.from({ length: Number(url.searchParams.get('more') ?? 0) }, (_, i) => (page === 0 ? `more${i}` : `p${page}-more${i}`));
    const described = description === null ? {} : { description: 'x'.repeat(Number(description)) };
    const deep = url.searchParams.get('deep');
    const inputSchema = (name: string): Record<string, unknown> =>
      name === 'small' && schema !== null
        ? { type: 'object', description: 's'.repeat(Number(schema)) }
        : name === 'deep'
          ? { type: 'object', default: nestedArrays(Number(deep) - 1) }
          : { type: 'object' };
    const first = ['huge', 'small', 'repeat', 'structured', 'error', ...(deep === null ? [] : ['deep'])];
    const tools = [...(page === 0 ? first : []), ...more].map((name) => ({
      name,
      ...(name === 'huge' || name.includes('more') ? described : {}),
      inputSchema: inputSchema(name),
    }));
    return send(res, 200, json, rpcResult(msg.id, page + 1 < pages ? { tools, nextCursor: `page-${page + 1}` } : { tools }));
  }
  if (msg.method === 'tools/call' && msg.params?.name === 'small') {
    return send(res, 200, json, rpcResult(msg.id, { content: [{ type: 'text', text: 'small' }] }));
  }
  const args = (msg.params?.arguments ?? {}) as { unit?: unknown; count?: unknown; items?: unknown; message?: unknown; data?: unknown };
  const count = typeof args.count === 'number' ? args.count : 0;
  if (msg.method === 'tools/call' && msg.params?.name === 'error') {
    const message = 'm'.repeat(typeof args.message === 'number' ? args.message : 0);
    const error = typeof args.data === 'number' ? { code: -32000, message, data: 'd'.repeat(args.data) } : { code: -32000, message };
    return send(res, 200, json, JSON.stringify({ jsonrpc: '2.0', id: msg.id, error }));
  }
  if (msg.method === 'tools/call' && msg.params?.name === 'repeat') {
    const text = (typeof args.unit === 'string' ? args.unit : 'x').repeat(count);
    const items = typeof args.items === 'number' ? args.items : 1;
    return send(res, 200, json, rpcResult(msg.id, { content: Array.from({ length: items }, () => ({ type: 'text', text })) }));
  }
  if (msg.method === 'tools/call' && msg.params?.name === 'structured') {
    return send(res, 200, json, rpcResult(msg.id, { content: [{ type: 'text', text: 'see structuredContent' }], structuredContent: { data: 'x'.repeat(count) } }));
  }
  if (msg.method === 'tools/call' && msg.params?.name === 'huge') {
    const sse = url.searchParams.get('sse') === '1';
    counts.begun += 1;
    res.writeHead(200, { 'content-type': sse ? 'text/event-stream' : 'application/json' });
    const open = `${sse ? 'event: message\ndata: ' : ''}{"jsonrpc":"2.0","id":${JSON.stringify(msg.id)},"result":{"content":[{"type":"text","text":"`;
    const close = `"}]}}${sse ? '\n\n' : ''}`;
    if (await writeHuge(res, open, close, counts)) counts.finished += 1;
    else counts.cut += 1;
    return;
  }
  return send(res, 200, json, rpcError(msg.id, -32601, 'Method not found'));
}

const floodCounts = new Map<string, { lists: number; calls: number }>();
/** The /mcp-flood buckets answering HTTP 500 to everything (POST /mcp-flood/down). */
const floodDown = new Set<string>();

async function floodMcp(req: IncomingMessage, res: ServerResponse, url: URL): Promise<void> {
  const bucket = url.searchParams.get('bucket') ?? '';
  const counts = floodCounts.get(bucket) ?? { lists: 0, calls: 0 };
  floodCounts.set(bucket, counts);
  if (url.pathname === '/mcp-flood/stats') return send(res, 200, { 'content-type': 'application/json' }, JSON.stringify(counts));
  if (url.pathname === '/mcp-flood/down') {
    if (url.searchParams.get('down') === '1') floodDown.add(bucket);
    else floodDown.delete(bucket);
    return send(res, 200, { 'content-type': 'application/json' }, JSON.stringify({ down: floodDown.has(bucket) }));
  }
  if (req.method !== 'POST') return send(res, 405, { allow: 'POST' });
  const msg = JSON.parse(await readBody(req)) as RpcMessage;
  const json = { 'content-type': 'application/json' };
  if (floodDown.has(bucket)) {
    if (msg.method === 'tools/list') counts.lists += 1;
    if (msg.method === 'tools/call') counts.calls += 1;
    return send(res, 500, { 'content-type': 'text/plain' }, 'flood backend down');
  }
  if (msg.id === undefined) return send(res, 202, {});
  if (msg.method === 'initialize') {
    const result = initializeResult(msg, 'flood') as { capabilities: Record<string, unknown> };
    return send(res, 200, json, rpcResult(msg.id, { ...result, capabilities: { tools: { listChanged: true }, resources: { subscribe: true } } }));
  }
  if (msg.method === 'tools/list') {
    counts.lists += 1;
    return send(res, 200, json, rpcResult(msg.id, { tools: ['list_changed', 'updated', 'progress', 'huge_note'].map((name) => ({ name, inputSchema: { type: 'object' } })) }));
  }
  if (msg.method === 'resources/list') {
    if (url.searchParams.get('list-error') === 'resources') return send(res, 200, json, rpcError(msg.id, -32603, 'resources backend down: check DATABASE_URL'));
    return send(res, 200, json, rpcResult(msg.id, { resources: [] }));
  }
  if (msg.method === 'tools/call') {
    counts.calls += 1;
    const args = (msg.params?.arguments ?? {}) as { count?: unknown; uris?: unknown; bytes?: unknown; method?: unknown };
    const count = typeof args.count === 'number' ? args.count : 0;
    const uris = typeof args.uris === 'number' ? args.uris : 1;
    const token = (msg.params?._meta as { progressToken?: unknown } | undefined)?.progressToken;
    const name = msg.params?.name;
    const bytes = typeof args.bytes === 'number' ? args.bytes : 0;
    const note = (i: number): unknown =>
      name === 'list_changed'
        ? { jsonrpc: '2.0', method: 'notifications/tools/list_changed' }
        : name === 'updated'
          ? { jsonrpc: '2.0', method: 'notifications/resources/updated', params: { uri: `file:///r${i % uris}` } }
          : { jsonrpc: '2.0', method: 'notifications/progress', params: { progressToken: token, progress: i + 1, total: count } };
    const huge =
      args.method === 'updated'
        ? { jsonrpc: '2.0', method: 'notifications/resources/updated', params: { uri: `file:///${'u'.repeat(bytes)}` } }
        : { jsonrpc: '2.0', method: 'notifications/progress', params: { progressToken: token, progress: 1, message: 'm'.repeat(bytes) } };
    let out = '';
    if (name === 'huge_note') out += `event: message\ndata: ${JSON.stringify(huge)}\n\n`;
    else for (let i = 0; i < count; i++) out += `event: message\ndata: ${JSON.stringify(note(i))}\n\n`;
    out += `event: message\ndata: ${rpcResult(msg.id, { content: [{ type: 'text', text: 'flooded' }] })}\n\n`;
    return send(res, 200, { 'content-type': 'text/event-stream' }, out);
  }
  return send(res, 200, json, rpcError(msg.id, -32601, 'Method not found'));
}

// ---- server ----------------------------------------------------------------------------------

async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
  const url = new URL(req.url ?? '/', 'http://fixture');
  if (url.pathname === '/mcp-changing') return changingMcp(req, res);
  if (url.pathname.startsWith('/mcp-paged')) return pagedMcp(req, res, url);
  if (url.pathname.startsWith('/mcp-expire')) return expiringMcp(req, res, url);
  if (url.pathname.startsWith('/mcp-huge')) return hugeMcp(req, res, url);
  if (url.pathname.startsWith('/mcp-flood')) return floodMcp(req, res, url);
  if (await hostileRoute(req, res, url)) return;
  if (await webRoute(req, res, url)) return;
  send(res, 404, { 'content-type': 'text/plain' }, 'not found');
}

export function startFixtureServer(): Promise<FixtureServer> {
  const server: Server = createServer((req, res) => {
    handle(req, res).catch((e: unknown) => {
      if (!res.headersSent) send(res, 500, { 'content-type': 'text/plain' }, String(e));
      else res.destroy();
    });
  });
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      if (typeof address !== 'object' || !address) return reject(new Error('fixture server has no address'));
      resolve({
        url: `http://127.0.0.1:${address.port}`,
        close: () =>
          new Promise<void>((r) => {
            server.closeAllConnections();
            server.close(() => r());
          }),
      });
    });
  });
}
