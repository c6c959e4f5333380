// A hostile or broken model provider against the answer limits (limits.ts, sse.ts): a local HTTP
// server streams what no real provider does (a line that never ends, an event of megabytes, one
// tool call's arguments of 10 MiB, 100,000 tool calls, megabytes of text) in the real OpenAI and
// Anthropic wire shapes; each stream ends in a ProviderError naming the limit, and what is at a
// limit still goes through.
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AnthropicProvider } from './anthropic.js';
import { MAX_RUN_OUTPUT_CHARS, MAX_TOOL_ARGUMENTS_CHARS, MAX_TOOL_CALLS_PER_ANSWER } from './limits.js';
import { OpenAiProvider } from './openai.js';
import { MAX_SSE_EVENT_CHARS } from './sse.js';
import { ProviderError, type ChatMessage, type Provider, type StreamChunk } from './types.js';

const MiB = 1024 * 1024;

/** A stream's parts, made lazily (10 MiB are never held at once). */
type Parts = () => Iterable<string>;

const openAiChunk = (delta: Record<string, unknown>, finish: string | null = null): string =>
  `data: ${JSON.stringify({ id: 'c', object: 'chat.completion.chunk', model: 'm', choices: [{ index: 0, delta, finish_reason: finish }] })}\n\n`;
const anthropicEvent = (type: string, body: Record<string, unknown>): string => `event: ${type}\ndata: ${JSON.stringify({ type, ...body })}\n\n`;
const MESSAGE_START = anthropicEvent('message_start', { message: { id: 'msg', type: 'message', role: 'assistant', content: [], usage: { input_tokens: 5, output_tokens: 1 } } });
const MESSAGE_END = anthropicEvent('message_delta', { delta: { stop_reason: 'end_turn' }, usage: { output_tokens: 9 } }) + anthropicEvent('message_stop', {});

function* repeat(n: number, part: (i: number) => string): Iterable<string> {
  for (let i = 0; i < n; i++) yield part(i);
}
/** `total` characters of 'x' in pieces of `size`, each wrapped by `wrap`. */
function* filler(total: number, size: number, wrap: (piece: string) => string): Iterable<string> {
  for (let left = total; left > 0; left -= size) yield wrap('x'.repeat(Math.min(size, left)));
}
/** Arguments JSON text of exactly `n` characters: {"a":"xxx…"}. */
const argumentsOf = (n: number): string => `{"a":"${'x'.repeat(n - 8)}"}`;

const OPENAI: Record<string, Parts> = {
  'no-line-end': () => ['data: ', ...filler(10 * MiB, 64 * 1024, (p) => p)],
  'one-big-event': () => [openAiChunk({ content: 'x'.repeat(2 * MiB) }), 'data: [DONE]\n\n'],
  'data-lines-without-end': () => repeat(2000, () => `data: ${'x'.repeat(1000)}\n`),
  'huge-arguments': () => [
    openAiChunk({ tool_calls: [{ index: 0, id: 'call_1', type: 'function', function: { name: 'f', arguments: '' } }] }),
    ...filler(10 * MiB, 64 * 1024, (p) => openAiChunk({ tool_calls: [{ index: 0, function: { arguments: p } }] })),
    openAiChunk({}, 'tool_calls'),
    'data: [DONE]\n\n',
  ],
  'arguments-at-limit': () => [
    openAiChunk({ tool_calls: [{ index: 0, id: 'call_1', type: 'function', function: { name: 'f', arguments: argumentsOf(MAX_TOOL_ARGUMENTS_CHARS) } }] }),
    openAiChunk({}, 'tool_calls'),
    'data: [DONE]\n\n',
  ],
  'many-indexes': () =>
    repeat(1000, (e) => openAiChunk({ tool_calls: Array.from({ length: 100 }, (_, i) => ({ index: e * 100 + i, id: `call_${e * 100 + i}`, type: 'function', function: { name: 'f', arguments: '{}' } })) })),
  'calls-at-limit': () => [
    openAiChunk({ tool_calls: Array.from({ length: MAX_TOOL_CALLS_PER_ANSWER }, (_, i) => ({ index: i, id: `call_${i}`, type: 'function', function: { name: 'f', arguments: '{}' } })) }),
    openAiChunk({}, 'tool_calls'),
    'data: [DONE]\n\n',
  ],
  'much-text': () => [...filler(3 * MiB, 32 * 1024, (p) => openAiChunk({ content: p })), openAiChunk({}, 'stop'), 'data: [DONE]\n\n'],
  'some-text': () => [...filler(100_000, 32 * 1024, (p) => openAiChunk({ content: p })), openAiChunk({}, 'stop'), 'data: [DONE]\n\n'],
  'negative-usage': () => [openAiChunk({ content: 'ok' }, 'stop'), `data: ${JSON.stringify({ id: 'c', object: 'chat.completion.chunk', model: 'm', choices: [], usage: { prompt_tokens: -1_000_000, completion_tokens: 3 } })}\n\n`, 'data: [DONE]\n\n'],
  'huge-usage': () => [openAiChunk({ content: 'ok' }, 'stop'), `data: ${JSON.stringify({ id: 'c', object: 'chat.completion.chunk', model: 'm', choices: [], usage: { prompt_tokens: 1.5e308, completion_tokens: 2.5 } })}\n\n`, 'data: [DONE]\n\n'],
};

const toolUseStart = (index: number): string =>
  anthropicEvent('content_block_start', { index, content_block: { type: 'tool_use', id: `toolu_${index}`, name: 'f', input: {} } });

const ANTHROPIC: Record<string, Parts> = {
  'negative-usage': () => [
    anthropicEvent('message_start', { message: { id: 'msg', type: 'message', role: 'assistant', content: [], usage: { input_tokens: 7, cache_read_input_tokens: -1_000_000, output_tokens: 1 } } }),
    anthropicEvent('message_delta', { delta: { stop_reason: 'end_turn' }, usage: { output_tokens: -5 } }),
    anthropicEvent('message_stop', {}),
  ],
  'no-line-end': () => [MESSAGE_START, 'data: ', ...filler(10 * MiB, 64 * 1024, (p) => p)],
  'huge-arguments': () => [
    MESSAGE_START,
    toolUseStart(0),
    ...filler(10 * MiB, 64 * 1024, (p) => anthropicEvent('content_block_delta', { index: 0, delta: { type: 'input_json_delta', partial_json: p } })),
    anthropicEvent('content_block_stop', { index: 0 }),
    MESSAGE_END,
  ],
  'arguments-at-limit': () => [
    MESSAGE_START,
    toolUseStart(0),
    anthropicEvent('content_block_delta', { index: 0, delta: { type: 'input_json_delta', partial_json: argumentsOf(MAX_TOOL_ARGUMENTS_CHARS) } }),
    anthropicEvent('content_block_stop', { index: 0 }),
    MESSAGE_END,
  ],
  'many-indexes': () => [MESSAGE_START, ...repeat(100_000, toolUseStart)],
  'much-text': () => [
    MESSAGE_START,
    anthropicEvent('content_block_start', { index: 0, content_block: { type: 'text', text: '' } }),
    ...filler(3 * MiB, 32 * 1024, (p) => anthropicEvent('content_block_delta', { index: 0, delta: { type: 'text_delta', text: p } })),
    anthropicEvent('content_block_stop', { index: 0 }),
    MESSAGE_END,
  ],
};

let server: Server;
let base = '';
/** Per scenario: whether the server wrote its whole stream (false: the client closed it first). */
const finished = new Map<string, boolean>();

async function answer(req: IncomingMessage, res: ServerResponse): Promise<void> {
  req.resume();
  const [, api, scenario] = (req.url ?? '').split('/');
  const parts = (api === 'openai' ? OPENAI : ANTHROPIC)[scenario ?? ''];
  if (!parts) return void res.writeHead(404).end();
  res.writeHead(200, { 'content-type': 'text/event-stream' });
  let closed = false;
  res.once('close', () => (closed = true));
  for (const part of parts()) {
    if (closed) break;
    if (!res.write(part)) await new Promise<void>((r) => (res.once('drain', () => r()), res.once('close', () => r())));
  }
  finished.set(`${api}/${scenario}`, !closed);
  res.end();
}

beforeAll(async () => {
  server = createServer((req, res) => void answer(req, res));
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});
afterAll(() => {
  server.closeAllConnections();
  server.close();
});

const providers: Record<'openai' | 'anthropic', (scenario: string) => Provider> = {
  openai: (scenario) => new OpenAiProvider({ baseUrl: `${base}/openai/${scenario}` }),
  // Anthropic's path is {baseUrl}/v1/messages.
  anthropic: (scenario) => new AnthropicProvider({ baseUrl: `${base}/anthropic/${scenario}` }),
};

async function run(api: 'openai' | 'anthropic', scenario: string, messages: ChatMessage[] = [{ role: 'user', content: 'hi' }]): Promise<{ chunks: StreamChunk[]; error?: unknown }> {
  const chunks: StreamChunk[] = [];
  try {
    for await (const c of providers[api](scenario).stream({ model: 'm', messages, tools: [], signal: new AbortController().signal })) chunks.push(c);
    return { chunks };
  } catch (error) {
    return { chunks, error };
  }
}

const failure = (message: string, provider: string) => ({ kind: 'unavailable', message, details: { provider } });
const EVENT_TOO_LARGE = `a stream event over ${MAX_SSE_EVENT_CHARS} characters`;
const ARGUMENTS_TOO_LARGE = `a tool call's arguments over ${MAX_TOOL_ARGUMENTS_CHARS} characters`;
const TOO_MANY_CALLS = `over ${MAX_TOOL_CALLS_PER_ANSWER} tool calls in one answer`;
const RUN_OUTPUT_TOO_LARGE = `the model wrote over ${MAX_RUN_OUTPUT_CHARS} characters in this run`;

describe.each(['openai', 'anthropic'] as const)('%s: a hostile stream', (api) => {
  it('a 10 MiB line that never ends fails naming the event limit, and the connection is closed before the rest is read', async () => {
    const { error } = await run(api, 'no-line-end');
    expect(error).toBeInstanceOf(ProviderError);
    expect(error).toMatchObject(failure(EVENT_TOO_LARGE, api));
    await expect.poll(() => finished.get(`${api}/no-line-end`)).toBe(false);
  });

  it("one tool call's 10 MiB of arguments fail naming the arguments limit", async () => {
    const { chunks, error } = await run(api, 'huge-arguments');
    expect(error).toMatchObject(failure(ARGUMENTS_TOO_LARGE, api));
    expect(chunks.filter((c) => c.type === 'tool_call')).toEqual([]);
  });

  it('arguments of exactly the limit are passed on whole', async () => {
    const { chunks, error } = await run(api, 'arguments-at-limit');
    expect(error).toBeUndefined();
    const calls = chunks.flatMap((c) => (c.type === 'tool_call' ? [c.call] : []));
    expect(calls.map((c) => c.arguments.length)).toEqual([MAX_TOOL_ARGUMENTS_CHARS]);
  });

  it('100,000 tool calls fail naming the tool-call limit, none of them passed on', async () => {
    const { chunks, error } = await run(api, 'many-indexes');
    expect(error).toMatchObject(failure(TOO_MANY_CALLS, api));
    expect(chunks.filter((c) => c.type === 'tool_call')).toEqual([]);
  });

  it('3 MiB of answer text fail naming the run output limit, after at most that much text', async () => {
    const { chunks, error } = await run(api, 'much-text');
    expect(error).toMatchObject(failure(RUN_OUTPUT_TOO_LARGE, api));
    const text = chunks.reduce((n, c) => n + (c.type === 'text' ? c.text.length : 0), 0);
    expect(text).toBeGreaterThan(0);
    expect(text).toBeLessThanOrEqual(MAX_RUN_OUTPUT_CHARS);
  });
});

describe('openai: limits the SSE reader and the run enforce', () => {
  it('one complete event of 2 MiB fails naming the event limit (its text is not passed on)', async () => {
    const { chunks, error } = await run('openai', 'one-big-event');
    expect(error).toMatchObject(failure(EVENT_TOO_LARGE, 'openai'));
    expect(chunks).toEqual([]);
  });

  it('2,000 data lines of one event whose blank line never comes fail naming the event limit', async () => {
    const { error } = await run('openai', 'data-lines-without-end');
    expect(error).toMatchObject(failure(EVENT_TOO_LARGE, 'openai'));
  });

  it('128 tool calls in one answer are passed on', async () => {
    const { chunks, error } = await run('openai', 'calls-at-limit');
    expect(error).toBeUndefined();
    expect(chunks.filter((c) => c.type === 'tool_call')).toHaveLength(MAX_TOOL_CALLS_PER_ANSWER);
  });

  it('token counts a provider reports that are negative, fractional or past 2^53 are not taken: a report can neither refund tokens nor exhaust a plan with Infinity', async () => {
    const usage = (chunks: StreamChunk[]) => chunks.filter((c) => c.type === 'usage');
    expect(usage((await run('openai', 'negative-usage')).chunks)).toEqual([{ type: 'usage', input_tokens: 0, output_tokens: 3 }]);
    expect(usage((await run('openai', 'huge-usage')).chunks)).toEqual([]);
    expect(usage((await run('anthropic', 'negative-usage')).chunks)).toEqual([{ type: 'usage', input_tokens: 7, output_tokens: 1 }]);
  });

  it("the run's earlier answers count: after 2,000,000 characters written in this run, 100,000 more fail; history before the prompt does not count", async () => {
    const earlier: ChatMessage[] = [
      { role: 'assistant', content: 'x'.repeat(1_000_000), tool_calls: [{ id: 'call_1', name: 'f', arguments: argumentsOf(1_000_000) }] },
      { role: 'tool', tool_call_id: 'call_1', name: 'f', content: 'done' },
    ];
    const inRun = await run('openai', 'some-text', [{ role: 'user', content: 'hi' }, ...earlier]);
    expect(inRun.error).toMatchObject(failure(RUN_OUTPUT_TOO_LARGE, 'openai'));
    const inHistory = await run('openai', 'some-text', [{ role: 'user', content: 'before' }, ...earlier, { role: 'user', content: 'hi' }]);
    expect(inHistory.error).toBeUndefined();
    expect(inHistory.chunks.reduce((n, c) => n + (c.type === 'text' ? c.text.length : 0), 0)).toBe(100_000);
  });
});
