// Hostile upstreams for the outbound-dial tests (served by test/mcp/fixture-server.ts under
// /hostile/…), speaking the real protocols, each counting per ?bucket= of its URL (give each test
// its own) what it saw; GET /hostile/stats?bucket=B answers the counts as JSON:
//   /hostile/legacy      a legacy HTTP+SSE MCP server (POST to it: 405, so clients fall back).
//                        GET opens the event stream (`gets`; `streams` open now): `retry: 0`, then
//                        the `endpoint` event (/hostile/legacy/messages?sid=N). POSTs there
//                        (`posts`) are answered 202 and their answers go on the stream while it is
//                        open; initialize answers tools (`initializes`); tools/list lists `echo`.
//                        ?close=1: the stream ends 100 ms after notifications/initialized, and once
//                        the bucket saw an initialize every GET ends at once (after `retry: 0` and
//                        its endpoint): an EventSource would come back without a pause, again and again.
//                        ?silent=1: the stream sends neither retry nor endpoint (and stays open).
//   /hostile/hang        Streamable HTTP (JSON answers): initialize, tools/list, and two tools that
//                        never answer: `hang` (no response headers ever) and `hang_sse` (200
//                        text/event-stream headers, then nothing). `open` counts the tools/call
//                        requests whose connection is still open, `closed` those the client closed.
//   /hostile/deep        Streamable HTTP (JSON answers) whose answers nest too deep for many JSON
//                        readers, written as text (Node's JSON.stringify cannot write 50,000 levels):
//                        tools/list lists `deep` and `small`; tools/call `deep` {levels, where}
//                        answers a result nesting `levels` levels: where 'structured' (the default,
//                        levels >= 3) a structuredContent {nest} holding levels-2 nested arrays,
//                        'content' (levels >= 5) a text item whose _meta.nest holds levels-4, 'error'
//                        a JSON-RPC error -32000 "deep" whose data holds `levels` nested arrays;
//                        `small` answers "small". ?deep-init=N answers initialize with a result
//                        nesting N levels (N >= 4: capabilities.experimental.nest holding N-3).
//   /hostile/relay-hang  any request (a WebSocket upgrade) is never answered; `open`/`closed` as above.
//   /hostile/relay-refuse  any request is answered 403 with a body that never ends; `open`/`closed` as above.

import type { IncomingMessage, ServerResponse } from 'node:http';

export interface Counts {
  gets: number;
  posts: number;
  initializes: number;
  streams: number;
  open: number;
  closed: number;
}

interface Rpc {
  id?: string | number;
  method?: string;
  params?: Record<string, unknown>;
}

const counts = new Map<string, Counts>();
const countsOf = (bucket: string): Counts => {
  let c = counts.get(bucket);
  if (!c) {
    c = { gets: 0, posts: 0, initializes: 0, streams: 0, open: 0, closed: 0 };
    counts.set(bucket, c);
  }
  return c;
};

/** The event streams of /hostile/legacy (open or ended), by session id, and their options. */
const legacyStreams = new Map<string, { res: ServerResponse; close: boolean }>();
let nextSession = 1;

const result = (id: Rpc['id'], value: unknown): string => JSON.stringify({ jsonrpc: '2.0', id, result: value });
const initialized = (msg: Rpc, name: string): unknown => ({
  protocolVersion: typeof msg.params?.protocolVersion === 'string' ? msg.params.protocolVersion : '2024-11-05',
  capabilities: { tools: {} },
  serverInfo: { name, version: '1.0.0' },
});

async function readJson(req: IncomingMessage): Promise<Rpc> {
  const chunks: Buffer[] = [];
  for await (const chunk of req) chunks.push(chunk as Buffer);
  return JSON.parse(Buffer.concat(chunks).toString('utf8')) as Rpc;
}

/** Counts `res` as an open connection until its client closes it. */
function held(res: ServerResponse, c: Counts): void {
  c.open += 1;
  res.once('close', () => {
    c.open -= 1;
    c.closed += 1;
  });
}

function legacyGet(res: ServerResponse, url: URL, c: Counts): void {
  c.gets += 1;
  c.streams += 1;
  res.once('close', () => (c.streams -= 1));
  res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-store' });
  if (url.searchParams.get('silent') === '1') return void res.write(': nothing\n\n');
  const sid = String(nextSession++);
  const close = url.searchParams.get('close') === '1';
  res.write(`retry: 0\n\nevent: endpoint\ndata: /hostile/legacy/messages?bucket=${encodeURIComponent(url.searchParams.get('bucket') ?? '')}&sid=${sid}\n\n`);
  if (close && c.initializes > 0) return void res.end();
  legacyStreams.set(sid, { res, close }); // kept after the stream ends: its session still takes POSTs
}

async function legacyPost(req: IncomingMessage, res: ServerResponse, url: URL, c: Counts): Promise<void> {
  c.posts += 1;
  const stream = legacyStreams.get(url.searchParams.get('sid') ?? '');
  const msg = await readJson(req);
  res.writeHead(stream ? 202 : 404).end();
  if (!stream) return;
  const answer = (value: unknown): void => void (stream.res.writableEnded || stream.res.write(`event: message\ndata: ${result(msg.id, value)}\n\n`));
  if (msg.method === 'notifications/initialized' && stream.close) {
    setTimeout(() => stream.res.end(), 100);
  } else if (msg.method === 'initialize') {
    c.initializes += 1;
    answer(initialized(msg, 'hostile-legacy'));
  } else if (msg.method === 'tools/list') {
    answer({ tools: [{ name: 'echo', inputSchema: { type: 'object' } }] });
  }
}

async function hangMcp(req: IncomingMessage, res: ServerResponse, c: Counts): Promise<void> {
  if (req.method !== 'POST') return void res.writeHead(405, { allow: 'POST' }).end();
  c.posts += 1;
  const msg = await readJson(req);
  const json = { 'content-type': 'application/json' };
  if (msg.id === undefined) return void res.writeHead(202).end();
  if (msg.method === 'initialize') return void res.writeHead(200, json).end(result(msg.id, initialized(msg, 'hostile-hang')));
  if (msg.method === 'tools/list') {
    return void res.writeHead(200, json).end(result(msg.id, { tools: ['hang', 'hang_sse'].map((name) => ({ name, inputSchema: { type: 'object' } })) }));
  }
  if (msg.method === 'tools/call') {
    held(res, c);
    if (msg.params?.name === 'hang_sse') {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      res.write(': working\n\n');
    }
    return; // never answered
  }
  res.writeHead(200, json).end(JSON.stringify({ jsonrpc: '2.0', id: msg.id, error: { code: -32601, message: 'Method not found' } }));
}

/** `n` arrays nested in one another, as JSON text. */
const nest = (n: number): string => `${'['.repeat(n)}${']'.repeat(n)}`;

async function deepMcp(req: IncomingMessage, res: ServerResponse, url: URL, c: Counts): Promise<void> {
  if (req.method !== 'POST') return void res.writeHead(405, { allow: 'POST' }).end();
  c.posts += 1;
  const msg = await readJson(req);
  const json = { 'content-type': 'application/json' };
  if (msg.id === undefined) return void res.writeHead(202).end();
  if (msg.method === 'initialize') {
    c.initializes += 1;
    const deepInit = url.searchParams.get('deep-init');
    const init = result(msg.id, initialized(msg, 'hostile-deep'));
    // result 1, capabilities 2, experimental 3, nest 4…
    return void res.writeHead(200, json).end(deepInit === null ? init : init.replace('"capabilities":{', `"capabilities":{"experimental":{"nest":${nest(Number(deepInit) - 3)}},`));
  }
  if (msg.method === 'tools/list') {
    return void res.writeHead(200, json).end(result(msg.id, { tools: ['deep', 'small'].map((name) => ({ name, inputSchema: { type: 'object' } })) }));
  }
  const args = (msg.params?.arguments ?? {}) as { levels?: unknown; where?: unknown };
  if (msg.method === 'tools/call' && msg.params?.name === 'small') return void res.writeHead(200, json).end(result(msg.id, { content: [{ type: 'text', text: 'small' }] }));
  if (msg.method === 'tools/call' && msg.params?.name === 'deep') {
    const id = JSON.stringify(msg.id);
    const levels = typeof args.levels === 'number' ? args.levels : 3;
    const body =
      args.where === 'error'
        ? `{"jsonrpc":"2.0","id":${id},"error":{"code":-32000,"message":"deep","data":${nest(levels)}}}`
        : args.where === 'content'
          ? `{"jsonrpc":"2.0","id":${id},"result":{"content":[{"type":"text","text":"deep","_meta":{"nest":${nest(levels - 4)}}}]}}`
          : `{"jsonrpc":"2.0","id":${id},"result":{"content":[{"type":"text","text":"see structuredContent"}],"structuredContent":{"nest":${nest(levels - 2)}}}}`;
    return void res.writeHead(200, json).end(body);
  }
  res.writeHead(200, json).end(JSON.stringify({ jsonrpc: '2.0', id: msg.id, error: { code: -32601, message: 'Method not found' } }));
}

/** Serves /hostile/…; false for any other path. */
export async function hostileRoute(req: IncomingMessage, res: ServerResponse, url: URL): Promise<boolean> {
  const p = url.pathname;
  if (!p.startsWith('/hostile/')) return false;
  const c = countsOf(url.searchParams.get('bucket') ?? '');
  if (p === '/hostile/stats') {
    res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(c));
  } else if (p === '/hostile/legacy') {
    if (req.method === 'GET') legacyGet(res, url, c);
    else res.writeHead(405, { allow: 'GET' }).end();
  } else if (p === '/hostile/legacy/messages' && req.method === 'POST') {
    await legacyPost(req, res, url, c);
  } else if (p === '/hostile/hang') {
    await hangMcp(req, res, c);
  } else if (p === '/hostile/deep') {
    await deepMcp(req, res, url, c);
  } else if (p === '/hostile/relay-hang') {
    held(res, c); // never answered
  } else if (p === '/hostile/relay-refuse') {
    held(res, c);
    res.writeHead(403, { 'content-type': 'text/plain' });
    res.write('no WebSocket here, and this body never ends\n');
  } else {
    res.writeHead(404, { 'content-type': 'text/plain' }).end('not found');
  }
  return true;
}
