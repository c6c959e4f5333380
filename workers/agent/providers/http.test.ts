// postStream against local HTTP servers: a provider endpoint that redirects is refused, and the
// request (prompt and API key headers) never reaches where the redirect points.
import { createServer, type IncomingMessage, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { postStream, REDIRECT_REFUSED } from './http.js';
import { ProviderError } from './types.js';

const listen = (handler: (req: IncomingMessage, res: import('node:http').ServerResponse) => void): Promise<Server> =>
  new Promise((resolve) => {
    const server = createServer(handler);
    server.listen(0, '127.0.0.1', () => resolve(server));
  });
const urlOf = (s: Server) => `http://127.0.0.1:${(s.address() as AddressInfo).port}`;

let target: Server;
let redirector: Server;
const reached: string[] = [];

beforeAll(async () => {
  target = await listen((req, res) => {
    reached.push(`${req.method} ${req.url} ${String(req.headers['x-api-key'])}`);
    res.writeHead(200, { 'content-type': 'text/event-stream' }).end('data: {}\n\n');
  });
  redirector = await listen((req, res) => {
    req.resume();
    const status = Number(req.url?.split('/')[1]);
    res.writeHead(status, { location: `${urlOf(target)}/internal/admin` }).end();
  });
});

afterAll(() => {
  target.close();
  redirector.close();
});

describe('postStream', () => {
  it.each([301, 302, 303, 307, 308])('a %i redirect is refused (rejected, the status kept) and not followed', async (status) => {
    const failure = await postStream({
      provider: 'anthropic',
      url: `${urlOf(redirector)}/${status}/v1/messages`,
      headers: { 'x-api-key': 'sk-ant-operator' },
      body: { messages: [{ role: 'user', content: 'a stranger prompt' }] },
      signal: new AbortController().signal,
    }).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(failure).toBeInstanceOf(ProviderError);
    expect(failure).toMatchObject({ kind: 'rejected', message: `HTTP ${status}: ${REDIRECT_REFUSED}`, details: { provider: 'anthropic', status } });
    expect(reached).toEqual([]);
  });

  it('a 200 answer is returned to be streamed', async () => {
    const res = await postStream({ provider: 'openai', url: `${urlOf(target)}/v1/chat/completions`, headers: {}, body: {}, signal: new AbortController().signal });
    expect(res.status).toBe(200);
    expect(await res.text()).toBe('data: {}\n\n');
    reached.length = 0;
  });
});
