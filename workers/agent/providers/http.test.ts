// postStream against local HTTP servers: a provider endpoint that redirects is refused, and the
// request (prompt and API key headers) never reaches where the redirect points. httpError on the
// providers' real error answers: an account out of credit (OpenAI's 429 insufficient_quota,
// Anthropic's 400 "credit balance is too low" and its billing_error) is refused, not rate limited.
import { createServer, type IncomingMessage, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { httpError, NO_CREDIT, postStream, REDIRECT_REFUSED } from './http.js';
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

describe('httpError: an account out of credit is refused (no retry), not rate limited', () => {
  const answer = (status: number, body: object, headers: Record<string, string> = {}) =>
    new Response(JSON.stringify(body), { status, headers: { 'content-type': 'application/json', ...headers } });
  const OPENAI_QUOTA = 'You exceeded your current quota, please check your plan and billing details. For more information on this error, read the docs: https://platform.openai.com/docs/guides/error-codes/api-errors.';
  const ANTHROPIC_CREDIT = 'Your credit balance is too low to access the Anthropic API. Please go to Plans & Billing to upgrade or purchase credits.';

  it('OpenAI 429 insufficient_quota (its code, or its type alone as older answers had) → rejected, no retry-after', async () => {
    for (const code of ['insufficient_quota', null]) {
      const e = await httpError('openai', answer(429, { error: { message: OPENAI_QUOTA, type: 'insufficient_quota', param: null, code } }, { 'retry-after': '20' }));
      expect(e).toMatchObject({ kind: 'rejected', message: `${NO_CREDIT}: HTTP 429: ${OPENAI_QUOTA}`, details: { provider: 'openai', status: 429 } });
      expect(e.details.retryAfterSeconds).toBeUndefined();
    }
  });

  it('Anthropic 400 invalid_request_error "credit balance is too low" → rejected, named as billing', async () => {
    const e = await httpError('anthropic', answer(400, { type: 'error', error: { type: 'invalid_request_error', message: ANTHROPIC_CREDIT } }));
    expect(e).toMatchObject({ kind: 'rejected', message: `${NO_CREDIT}: HTTP 400: ${ANTHROPIC_CREDIT}` });
  });

  it('Anthropic billing_error (402) and any 402 Payment Required → rejected, named as billing', async () => {
    const billing = await httpError('anthropic', answer(402, { type: 'error', error: { type: 'billing_error', message: 'There is an issue with your billing.' } }));
    expect(billing).toMatchObject({ kind: 'rejected', message: `${NO_CREDIT}: HTTP 402: There is an issue with your billing.` });
    const payment = await httpError('openai', new Response('Payment Required', { status: 402 }));
    expect(payment).toMatchObject({ kind: 'rejected', message: `${NO_CREDIT}: HTTP 402: Payment Required` });
  });

  it('a rate limit stays a rate limit, another 400 a plain refusal', async () => {
    const rate = await httpError('openai', answer(429, { error: { message: 'Rate limit reached for requests', type: 'requests', param: null, code: 'rate_limit_exceeded' } }, { 'retry-after': '7' }));
    expect(rate).toMatchObject({ kind: 'rate_limit', message: 'HTTP 429: Rate limit reached for requests', details: { retryAfterSeconds: 7 } });
    const bad = await httpError('anthropic', answer(400, { type: 'error', error: { type: 'invalid_request_error', message: 'max_tokens: Field required' } }));
    expect(bad).toMatchObject({ kind: 'rejected', message: 'HTTP 400: max_tokens: Field required' });
  });
});
