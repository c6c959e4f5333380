// LLM providers inside workerd: the OpenAI-compatible and Anthropic providers against the fake
// provider (a real HTTP server in the vitest Node process: test/fake-provider), Workers AI against
// a binding stand-in that returns the captured SSE bytes of the real binding, the echo model, the
// provider selection, and the SSE reader's edge cases.

import { describe, expect, inject, it } from 'vitest';
import { AnthropicProvider, anthropicRequestBody, THINKING_BUDGET } from '../../workers/agent/providers/anthropic.js';
import { EchoProvider } from '../../workers/agent/providers/echo.js';
import { httpError, parseRetryAfter, retryAfterFromHeaders } from '../../workers/agent/providers/http.js';
import { defaultProvider, providerFor, type ProviderEnv } from '../../workers/agent/providers/index.js';
import { OpenAiProvider, openAiRequestBody } from '../../workers/agent/providers/openai.js';
import { readSse, SseParser, type SseItem } from '../../workers/agent/providers/sse.js';
import {
  ProviderError,
  type ChatMessage,
  type Provider,
  type ProviderRequest,
  type StreamChunk,
  type ToolSpec,
} from '../../workers/agent/providers/types.js';
import { WorkersAiProvider, workersAiInput, type WorkersAiBinding } from '../../workers/agent/providers/workers-ai.js';

declare module 'vitest' {
  export interface ProvidedContext {
    fakeProviderUrl: string;
  }
}

const FAKE = inject('fakeProviderUrl');
if (!FAKE) throw new Error("fakeProviderUrl is not provided: add 'test/fake-provider/global-setup.ts' to test.globalSetup");
const utf8 = new TextEncoder();

/** The fields of the fake provider's request records that the tests read. */
interface Recorded {
  api: string;
  path: string;
  headers: Record<string, string>;
  body: Record<string, unknown>;
  scenario: string;
  status?: number;
  firstDeltaAt?: number;
  clientClosed: boolean;
}

const marker = (): string => `m-${crypto.randomUUID()}`;

async function recorded(mark: string): Promise<Recorded[]> {
  const res = await fetch(`${FAKE}/_requests?contains=${encodeURIComponent(mark)}`);
  return (await res.json()) as Recorded[];
}

async function waitFor<T>(probe: () => Promise<T | undefined>, ms = 3000): Promise<T> {
  const deadline = Date.now() + ms;
  for (;;) {
    const v = await probe();
    if (v !== undefined) return v;
    if (Date.now() > deadline) throw new Error('condition not met in time');
    await new Promise((r) => setTimeout(r, 25));
  }
}

interface Outcome {
  chunks: StreamChunk[];
  error?: ProviderError;
}

async function collect(stream: AsyncIterable<StreamChunk>): Promise<Outcome> {
  const chunks: StreamChunk[] = [];
  try {
    for await (const c of stream) chunks.push(c);
    return { chunks };
  } catch (e) {
    if (e instanceof ProviderError) return { chunks, error: e };
    throw e;
  }
}

const errorOf = (e: ProviderError | undefined): unknown =>
  e && { kind: e.kind, message: e.message, details: e.details, name: e.name };

const WEATHER: ToolSpec = {
  name: 'get_weather',
  description: 'Current weather of a city',
  input_schema: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
};

function request(messages: ChatMessage[], extra: Partial<ProviderRequest> = {}): ProviderRequest {
  return { model: 'test-model', messages, tools: [], signal: new AbortController().signal, ...extra };
}

const user = (content: string): ChatMessage => ({ role: 'user', content });

const openai = (apiKey: string | null = 'sk-test'): Provider => {
  const made = providerFor('openai', { OPENAI_BASE_URL: `${FAKE}/v1`, ...(apiKey ? { OPENAI_API_KEY: apiKey } : {}) });
  if (!made.ok) throw new Error(made.error);
  return made.value;
};
const anthropic = (apiKey: string | null = 'sk-ant-test'): Provider => {
  const made = providerFor('anthropic', { ANTHROPIC_BASE_URL: FAKE, ...(apiKey ? { ANTHROPIC_API_KEY: apiKey } : {}) });
  if (!made.ok) throw new Error(made.error);
  return made.value;
};

const text = (t: string): StreamChunk => ({ type: 'text', text: t });
const thinking = (t: string): StreamChunk => ({ type: 'thinking', text: t });
const usage = (input_tokens: number, output_tokens: number): StreamChunk => ({ type: 'usage', input_tokens, output_tokens });
const done = (finish_reason: 'stop' | 'tool_calls' | 'length' | 'other'): StreamChunk => ({ type: 'done', finish_reason });

// -----------------------------------------------------------------------------------------------
// The SSE reader

function streamOf(parts: (string | Uint8Array)[], onCancel?: (reason: unknown) => void): ReadableStream<Uint8Array> {
  let i = 0;
  return new ReadableStream<Uint8Array>({
    pull(controller) {
      const part = parts[i++];
      if (part === undefined) controller.close();
      else controller.enqueue(typeof part === 'string' ? utf8.encode(part) : part);
    },
    cancel(reason) {
      onCancel?.(reason);
    },
  });
}

async function items(stream: ReadableStream<Uint8Array>, terminal = '[DONE]'): Promise<SseItem[]> {
  const out: SseItem[] = [];
  for await (const item of readSse(stream, { isTerminal: (r) => r.data === terminal })) out.push(item);
  return out;
}

const rec = (data: string, event?: string): SseItem => ({ type: 'record', record: event === undefined ? { data } : { event, data } });

describe('SSE reader', () => {
  const wire =
    ': comment line\n' +
    'event: message_start\ndata: {"a":"héllo ✓ 😀"}\n\n' +
    'data: first line\ndata: second line\n\n' +
    'data:no-space\ndata:  two-spaces\n\n' +
    'event: ping\n\n' + // no data: not dispatched
    'data: [DONE]\n\n';
  const expected = [
    rec('{"a":"héllo ✓ 😀"}', 'message_start'),
    rec('first line\nsecond line'),
    rec('no-space\n two-spaces'),
    rec('[DONE]'),
  ];

  it('parses events, multi-line data, comments, field spacing, and stops at the terminal record', async () => {
    expect(await items(streamOf([wire]))).toEqual(expected);
  });

  it('gives the same records when the bytes arrive one at a time (UTF-8 code points split)', async () => {
    const bytes = utf8.encode(wire);
    const parts = Array.from(bytes, (b) => new Uint8Array([b]));
    expect(await items(streamOf(parts))).toEqual(expected);
  });

  it('handles CRLF and CR line endings, including a CRLF split across chunks', async () => {
    const crlf = wire.replaceAll('\n', '\r\n');
    expect(await items(streamOf([crlf]))).toEqual(expected);
    expect(await items(streamOf([wire.replaceAll('\n', '\r')]))).toEqual(expected);
    // "\r" | "\n" is one line break: the two data lines stay one event.
    expect(await items(streamOf(['data: a\r', '\ndata: b\r\n\r\n', 'data: [DONE]\r\n\r\n']))).toEqual([rec('a\nb'), rec('[DONE]')]);
  });

  it('drops a leading BOM', async () => {
    expect(await items(streamOf(['\uFEFFdata: x\n\ndata: [DONE]\n\n']))).toEqual([rec('x'), rec('[DONE]')]);
  });

  it('reports a body that ends before the terminal record as truncated', async () => {
    expect(await items(streamOf(['data: one\n\n', 'data: two\n\n']))).toEqual([rec('one'), rec('two'), { type: 'truncated' }]);
  });

  it('at the end, dispatches an event missing only its blank line, and drops an unterminated line', async () => {
    expect(await items(streamOf(['data: one\n\ndata: [DONE]\n']))).toEqual([rec('one'), rec('[DONE]')]);
    expect(await items(streamOf(['data: one\n\ndata: [DONE]']))).toEqual([rec('one'), { type: 'truncated' }]);
    expect(await items(streamOf(['data: one\n\ndata: [DONE]\r']))).toEqual([rec('one'), rec('[DONE]')]);
    // The terminated lines of the last event are dispatched without its cut-off line.
    expect(await items(streamOf(['data: a\ndata: b']))).toEqual([rec('a'), { type: 'truncated' }]);
  });

  it('cancels the body after the terminal record and when the consumer stops early', async () => {
    const cancelled: unknown[] = [];
    const afterTerminal = await items(streamOf(['data: [DONE]\n\n', 'data: ignored\n\n'], (r) => cancelled.push(r)));
    expect(afterTerminal).toEqual([rec('[DONE]')]);
    expect(cancelled).toHaveLength(1);

    const cancelled2: unknown[] = [];
    for await (const item of readSse(streamOf(['data: 1\n\n', 'data: 2\n\n'], (r) => cancelled2.push(r)), { isTerminal: () => false })) {
      expect(item).toEqual(rec('1'));
      break;
    }
    expect(cancelled2).toHaveLength(1);
  });

  it('throws the abort reason and cancels a pending read when the signal fires', async () => {
    const cancelled: unknown[] = [];
    const never = new ReadableStream<Uint8Array>({
      start(c) {
        c.enqueue(utf8.encode('data: first\n\n'));
      },
      pull: () => new Promise<void>(() => undefined),
      cancel: (r) => void cancelled.push(r),
    });
    const ac = new AbortController();
    const seen: SseItem[] = [];
    const run = (async () => {
      for await (const item of readSse(never, { isTerminal: () => false, signal: ac.signal })) {
        seen.push(item);
        ac.abort(new Error('stop now'));
      }
    })();
    await expect(run).rejects.toThrow('stop now');
    expect(seen).toEqual([rec('first')]);
    expect(cancelled.length).toBeGreaterThanOrEqual(1);
  });

  it('SseParser keeps state across pushes', () => {
    const p = new SseParser();
    expect(p.push('data: {"x":')).toEqual([]);
    expect(p.push('1}\n')).toEqual([]);
    expect(p.push('\n')).toEqual([{ data: '{"x":1}' }]);
    expect(p.push('event: e\ndata: y\n')).toEqual([]);
    expect(p.end()).toEqual([{ event: 'e', data: 'y' }]);
  });
});

describe('Retry-After', () => {
  const at = Date.parse('Wed, 21 Oct 2026 07:28:00 GMT');
  it('reads delta-seconds and HTTP-dates', () => {
    expect(parseRetryAfter('7')).toBe(7);
    expect(parseRetryAfter(' 1.2 ')).toBe(2);
    expect(parseRetryAfter('Wed, 21 Oct 2026 07:28:07 GMT', at)).toBe(7);
    expect(parseRetryAfter('Wed, 21 Oct 2026 07:27:00 GMT', at)).toBe(0);
    expect(parseRetryAfter('soon')).toBeUndefined();
    expect(parseRetryAfter(null)).toBeUndefined();
  });
  it('is kept on a 5xx that sends it, not on other 4xx; long error text is truncated', async () => {
    const e503 = await httpError('openai', new Response('busy', { status: 503, headers: { 'retry-after': '2' } }));
    expect(errorOf(e503)).toEqual({ kind: 'unavailable', message: 'HTTP 503: busy', details: { provider: 'openai', status: 503, retryAfterSeconds: 2 }, name: 'ProviderError' });
    const long = JSON.stringify({ error: { message: 'x'.repeat(1000) } });
    const e404 = await httpError('openai', new Response(long, { status: 404, headers: { 'retry-after': '2' } }));
    expect(e404.kind).toBe('rejected');
    expect(e404.details).toEqual({ provider: 'openai', status: 404 });
    expect(e404.message).toBe(`HTTP 404: ${'x'.repeat(299)}…`);
    expect((await httpError('anthropic', new Response(null, { status: 502 }))).message).toBe('HTTP 502');
  });
  it('falls back to retry-after-ms', () => {
    expect(retryAfterFromHeaders(new Headers({ 'retry-after-ms': '1500' }))).toBe(2);
    expect(retryAfterFromHeaders(new Headers({ 'Retry-After': '3', 'retry-after-ms': '1500' }))).toBe(3);
    expect(retryAfterFromHeaders(new Headers())).toBeUndefined();
  });
});

// -----------------------------------------------------------------------------------------------
// OpenAI-compatible and Anthropic against the fake provider

interface Case {
  scenario: string;
  openai: Outcome | ((o: Outcome) => void);
  anthropic: Outcome | ((o: Outcome) => void);
}

const err = (kind: ProviderError['kind'], message: string, details: ProviderError['details']): ProviderError =>
  new ProviderError(kind, message, details);

const CASES: Case[] = [
  {
    scenario: 'text',
    openai: { chunks: [text('Hello'), text(' from'), text(' the fake'), text(' provider ✓'), usage(21, 9), done('stop')] },
    anthropic: { chunks: [text('Hello'), text(' from'), text(' the fake'), text(' provider ✓'), usage(21, 9), done('stop')] },
  },
  {
    scenario: 'thinking',
    openai: { chunks: [thinking('Let me think'), thinking(' about this.'), text('The answer'), text(' is 42.'), usage(21, 9), done('stop')] },
    anthropic: { chunks: [thinking('Let me think'), thinking(' about this.'), text('The answer'), text(' is 42.'), usage(21, 9), done('stop')] },
  },
  {
    scenario: 'empty',
    openai: { chunks: [usage(21, 9), done('stop')] },
    anthropic: { chunks: [usage(21, 9), done('stop')] },
  },
  {
    scenario: '429',
    openai: {
      chunks: [],
      error: err(
        'rate_limit',
        'HTTP 429: Rate limit reached for test-model in organization org-fake on requests per min (RPM): Limit 3, Used 3, Requested 1. Please try again in 7s.',
        { provider: 'openai', status: 429, retryAfterSeconds: 7 },
      ),
    },
    anthropic: {
      chunks: [],
      error: err('rate_limit', 'HTTP 429: Number of request tokens has exceeded your per-minute rate limit.', {
        provider: 'anthropic',
        status: 429,
        retryAfterSeconds: 7,
      }),
    },
  },
  {
    scenario: 'overloaded',
    openai: { chunks: [], error: err('unavailable', 'HTTP 503: The server is overloaded or not ready yet.', { provider: 'openai', status: 503 }) },
    anthropic: { chunks: [], error: err('unavailable', 'HTTP 529: Overloaded', { provider: 'anthropic', status: 529 }) },
  },
  {
    scenario: '400',
    openai: { chunks: [], error: err('rejected', 'HTTP 400: fake rejection: bad request', { provider: 'openai', status: 400 }) },
    anthropic: { chunks: [], error: err('rejected', 'HTTP 400: fake rejection: bad request', { provider: 'anthropic', status: 400 }) },
  },
  {
    scenario: '401',
    openai: { chunks: [], error: err('rejected', 'HTTP 401: Incorrect API key provided: sk-fake***1234.', { provider: 'openai', status: 401 }) },
    anthropic: { chunks: [], error: err('rejected', 'HTTP 401: invalid x-api-key', { provider: 'anthropic', status: 401 }) },
  },
  {
    scenario: '500-html',
    openai: {
      chunks: [],
      error: err('unavailable', 'HTTP 500: <html><body><h1>500 Internal Server Error</h1></body></html>', { provider: 'openai', status: 500 }),
    },
    anthropic: {
      chunks: [],
      error: err('unavailable', 'HTTP 500: <html><body><h1>500 Internal Server Error</h1></body></html>', { provider: 'anthropic', status: 500 }),
    },
  },
  {
    scenario: 'error',
    openai: {
      chunks: [text('Hello'), text(' from')],
      error: err('unavailable', 'stream error (server_error): The server had an error while processing your request. Sorry about that!', {
        provider: 'openai',
      }),
    },
    anthropic: {
      // message_start reported 21 input and 1 output token: the failed call is still counted.
      chunks: [text('Hello'), text(' from'), usage(21, 1)],
      error: err('unavailable', 'stream error (overloaded_error): Overloaded', { provider: 'anthropic' }),
    },
  },
  {
    scenario: 'error-rate',
    openai: {
      chunks: [text('Hello'), text(' from')],
      error: err('rate_limit', 'stream error (rate_limit_exceeded): Rate limit reached for requests', { provider: 'openai' }),
    },
    anthropic: {
      chunks: [text('Hello'), text(' from'), usage(21, 1)],
      error: err('rate_limit', 'stream error (rate_limit_error): Number of request tokens has exceeded your per-minute rate limit.', {
        provider: 'anthropic',
      }),
    },
  },
  {
    scenario: 'truncated',
    openai: { chunks: [text('Hello'), text(' from')], error: err('unavailable', 'truncated stream', { provider: 'openai' }) },
    anthropic: { chunks: [text('Hello'), text(' from'), usage(21, 1)], error: err('unavailable', 'truncated stream', { provider: 'anthropic' }) },
  },
  {
    scenario: 'reset',
    openai: { chunks: [text('Hello'), text(' from')], error: err('unavailable', 'truncated stream', { provider: 'openai' }) },
    anthropic: { chunks: [text('Hello'), text(' from'), usage(21, 1)], error: err('unavailable', 'truncated stream', { provider: 'anthropic' }) },
  },
];

function expectOutcome(actual: Outcome, expected: Outcome | ((o: Outcome) => void)): void {
  if (typeof expected === 'function') {
    expected(actual);
    return;
  }
  expect(actual.chunks).toEqual(expected.chunks);
  expect(errorOf(actual.error)).toEqual(errorOf(expected.error));
}

for (const api of ['openai', 'anthropic'] as const) {
  const make = api === 'openai' ? openai : anthropic;

  describe(`${api} provider × fake scenarios`, () => {
    for (const c of CASES) {
      it(`scenario ${c.scenario}`, async () => {
        const m = marker();
        const outcome = await collect(make().stream(request([user(`scenario:${c.scenario} ${m}`)])));
        expectOutcome(outcome, c[api]);
        const [r] = await recorded(m);
        expect(r?.scenario).toBe(c.scenario);
        expect(r?.api).toBe(api);
      });
    }

    it('selects the scenario by model name too (fake-429)', async () => {
      const m = marker();
      const outcome = await collect(make().stream(request([user(m)], { model: 'fake-429' })));
      expect(outcome.error?.kind).toBe('rate_limit');
      expect(outcome.error?.details.retryAfterSeconds).toBe(7);
    });

    it('runs a tool round trip: the call, then the answer built from the tool result', async () => {
      const m = marker();
      const first: ChatMessage[] = [{ role: 'system', content: 'Be brief.' }, user(`scenario:tool ${m} weather in Paris?`)];
      const one = await collect(make().stream(request(first, { tools: [WEATHER] })));
      expect(one.error).toBeUndefined();
      const calls = one.chunks.filter((c) => c.type === 'tool_call');
      const id = api === 'openai' ? 'call_fake_1' : 'toolu_fake_1';
      expect(calls).toEqual([{ type: 'tool_call', call: { id, name: 'get_weather', arguments: '{"city": "Paris"}' } }]);
      expect(one.chunks.at(-2)).toEqual(usage(21, 9));
      expect(one.chunks.at(-1)).toEqual(done('tool_calls'));
      if (api === 'anthropic') expect(one.chunks[0]).toEqual(text('Let me check.'));

      const assistantText = api === 'anthropic' ? 'Let me check.' : '';
      const second: ChatMessage[] = [
        ...first,
        { role: 'assistant', content: assistantText, tool_calls: [{ id, name: 'get_weather', arguments: '{"city": "Paris"}' }] },
        { role: 'tool', tool_call_id: id, name: 'get_weather', content: 'sunny, 21°C' },
      ];
      const two = await collect(make().stream(request(second, { tools: [WEATHER] })));
      expect(two).toEqual({ chunks: [text('Tool result: '), text('sunny, 21°C'), usage(21, 9), done('stop')] });

      const reqs = await recorded(m);
      expect(reqs).toHaveLength(2);
      const body = reqs[1]?.body;
      if (api === 'openai') {
        expect(body?.messages).toEqual([
          { role: 'system', content: 'Be brief.' },
          { role: 'user', content: `scenario:tool ${m} weather in Paris?` },
          {
            role: 'assistant',
            content: null,
            tool_calls: [{ id, type: 'function', function: { name: 'get_weather', arguments: '{"city": "Paris"}' } }],
          },
          { role: 'tool', tool_call_id: id, content: 'sunny, 21°C' },
        ]);
      } else {
        expect(body?.system).toBe('Be brief.');
        expect(body?.messages).toEqual([
          { role: 'user', content: [{ type: 'text', text: `scenario:tool ${m} weather in Paris?` }] },
          {
            role: 'assistant',
            content: [
              { type: 'text', text: 'Let me check.' },
              { type: 'tool_use', id, name: 'get_weather', input: { city: 'Paris' } },
            ],
          },
          { role: 'user', content: [{ type: 'tool_result', tool_use_id: id, content: 'sunny, 21°C' }] },
        ]);
      }
    });

    it('assembles parallel tool calls by index and sends all results back in one turn', async () => {
      const m = marker();
      const first = [user(`scenario:parallel-tools ${m}`)];
      const one = await collect(make().stream(request(first, { tools: [WEATHER] })));
      const ids = api === 'openai' ? ['call_fake_1', 'call_fake_2'] : ['toolu_fake_1', 'toolu_fake_2'];
      const calls = one.chunks.flatMap((c) => (c.type === 'tool_call' ? [c.call] : []));
      expect(calls).toEqual([
        { id: ids[0], name: 'get_weather', arguments: '{"city": "Paris"}' },
        { id: ids[1], name: 'get_weather', arguments: '{}' },
      ]);
      expect(one.chunks.at(-1)).toEqual(done('tool_calls'));
      const second: ChatMessage[] = [
        ...first,
        { role: 'assistant', content: '', tool_calls: calls },
        { role: 'tool', tool_call_id: ids[0] ?? '', name: 'get_weather', content: 'sunny' },
        { role: 'tool', tool_call_id: ids[1] ?? '', name: 'get_weather', content: 'rainy' },
      ];
      // The fake refuses (400) results split over two user turns, as Anthropic does.
      const two = await collect(make().stream(request(second, { tools: [WEATHER] })));
      expect(two).toEqual({ chunks: [text('Tool result: '), text('sunny | rainy'), usage(21, 9), done('stop')] });
    });

    it('aborts mid-stream: ProviderError aborted, and the connection to the server is closed', async () => {
      const m = marker();
      const ac = new AbortController();
      const started = Date.now();
      const seen: StreamChunk[] = [];
      let error: unknown;
      try {
        for await (const c of make().stream(request([user(`scenario:slow ${m}`)], { signal: ac.signal }))) {
          seen.push(c);
          if (seen.length === 2) ac.abort();
        }
      } catch (e) {
        error = e;
      }
      expect(error).toBeInstanceOf(ProviderError);
      expect(errorOf(error as ProviderError)).toEqual({ kind: 'aborted', message: 'aborted', details: { provider: api }, name: 'ProviderError' });
      // Anthropic's message_start reported the input: a cancelled call still yields that usage.
      expect(seen).toEqual([text('tick 0 '), text('tick 1 '), ...(api === 'anthropic' ? [usage(21, 1)] : [])]);
      expect(Date.now() - started).toBeLessThan(3000); // 50 deltas × 200 ms would take 10 s
      const r = await waitFor(async () => (await recorded(m)).find((x) => x.clientClosed));
      expect(r.firstDeltaAt).toBeTypeOf('number');
    });

    it('aborts before sending when the signal has already fired (no request made)', async () => {
      const m = marker();
      const ac = new AbortController();
      ac.abort();
      const outcome = await collect(make().stream(request([user(m)], { signal: ac.signal })));
      expect(outcome.error?.kind).toBe('aborted');
      expect(await recorded(m)).toEqual([]);
    });

    it('maps a network failure to unavailable', async () => {
      const p =
        api === 'openai'
          ? new OpenAiProvider({ baseUrl: 'http://127.0.0.1:9/v1' })
          : new AnthropicProvider({ baseUrl: 'http://127.0.0.1:9' });
      const outcome = await collect(p.stream(request([user('hi')])));
      expect(outcome.error?.kind).toBe('unavailable');
      expect(outcome.error?.message).toMatch(/^network error: /);
    });

    it('reports the wire to the observer: the request body and every data payload', async () => {
      const m = marker();
      const bodies: unknown[] = [];
      const raws: string[] = [];
      const outcome = await collect(
        make().stream(request([user(m)], { observe: { request: (b) => bodies.push(b), response: (r) => raws.push(r) } })),
      );
      expect(outcome.error).toBeUndefined();
      const [r] = await recorded(m);
      expect(bodies).toEqual([r?.body]);
      if (api === 'openai') {
        // role+4 text chunks (the first carries role), finish, usage, [DONE]
        expect(raws).toHaveLength(7);
        expect(raws.at(-1)).toBe('[DONE]');
        expect(JSON.parse(raws[0] ?? '')).toMatchObject({ object: 'chat.completion.chunk' });
      } else {
        expect(raws.map((x) => (JSON.parse(x) as { type: string }).type)).toEqual([
          'message_start',
          'content_block_start',
          'ping',
          'content_block_delta',
          'content_block_delta',
          'content_block_delta',
          'content_block_delta',
          'content_block_stop',
          'message_delta',
          'message_stop',
        ]);
      }
    });
  });
}

describe('openai request shape', () => {
  it('sends stream_options, function tools, reasoning_effort (max → high), max_tokens and the Bearer key', async () => {
    const m = marker();
    const outcome = await collect(
      openai().stream(
        request([{ role: 'system', content: 'sys' }, user(m)], { model: 'gpt-test', tools: [WEATHER], thinking: 'max', maxOutputTokens: 123 }),
      ),
    );
    expect(outcome.error).toBeUndefined();
    const [r] = await recorded(m);
    expect(r?.path).toBe('/v1/chat/completions');
    expect(r?.headers.authorization).toBe('Bearer sk-test');
    expect(r?.body).toEqual({
      model: 'gpt-test',
      messages: [
        { role: 'system', content: 'sys' },
        { role: 'user', content: m },
      ],
      stream: true,
      stream_options: { include_usage: true },
      tools: [{ type: 'function', function: { name: 'get_weather', description: WEATHER.description, parameters: WEATHER.input_schema } }],
      reasoning_effort: 'high',
      max_tokens: 123,
    });
  });

  it('works without a key (a local OpenAI-compatible server): no Authorization, no tools field', async () => {
    const m = marker();
    const outcome = await collect(openai(null).stream(request([user(m)])));
    expect(outcome.chunks.at(-1)).toEqual(done('stop'));
    const [r] = await recorded(m);
    expect(r?.headers.authorization).toBeUndefined();
    expect(r?.body).not.toHaveProperty('tools');
    expect(r?.body).not.toHaveProperty('reasoning_effort');
  });

  it('maps thinking levels, and uses max_completion_tokens on api.openai.com', () => {
    const levels = (['low', 'medium', 'high', 'max'] as const).map(
      (t) => openAiRequestBody(request([user('x')], { thinking: t }), 'http://x/v1').reasoning_effort,
    );
    expect(levels).toEqual(['low', 'medium', 'high', 'high']);
    const body = openAiRequestBody(request([user('x')], { maxOutputTokens: 50 }), 'https://api.openai.com/v1');
    expect(body.max_completion_tokens).toBe(50);
    expect(body).not.toHaveProperty('max_tokens');
  });

  it('decodes the `reasoning` field (OpenRouter / Ollama) as thinking', async () => {
    const outcome = await collect(openai().stream(request([user(`scenario:reasoning ${marker()}`)])));
    expect(outcome.chunks).toEqual([thinking('Let me think'), thinking(' about this.'), text('The answer'), text(' is 42.'), usage(21, 9), done('stop')]);
  });
});

describe('anthropic request shape', () => {
  it('sends the headers, system, tools, thinking budget and raised max_tokens', async () => {
    const m = marker();
    const outcome = await collect(
      anthropic().stream(
        request([{ role: 'system', content: 'one' }, { role: 'system', content: 'two' }, user(m)], {
          model: 'claude-test',
          tools: [WEATHER],
          thinking: 'high',
        }),
      ),
    );
    expect(outcome.error).toBeUndefined();
    const [r] = await recorded(m);
    expect(r?.path).toBe('/v1/messages');
    expect(r?.headers['x-api-key']).toBe('sk-ant-test');
    expect(r?.headers['anthropic-version']).toBe('2023-06-01');
    expect(r?.headers.authorization).toBeUndefined();
    expect(r?.body).toEqual({
      model: 'claude-test',
      max_tokens: 16384 + 4096,
      system: 'one\n\ntwo',
      messages: [{ role: 'user', content: [{ type: 'text', text: m }] }],
      tools: [{ name: 'get_weather', description: WEATHER.description, input_schema: WEATHER.input_schema }],
      thinking: { type: 'enabled', budget_tokens: 16384 },
      stream: true,
    });
  });

  it('maps every thinking level to a budget below max_tokens', () => {
    for (const level of ['low', 'medium', 'high', 'max'] as const) {
      const body = anthropicRequestBody(request([user('x')], { thinking: level, maxOutputTokens: 1000 }));
      expect(body.thinking).toEqual({ type: 'enabled', budget_tokens: THINKING_BUDGET[level] });
      expect(body.max_tokens).toBe(THINKING_BUDGET[level] + 1000);
    }
    expect(THINKING_BUDGET).toEqual({ low: 1024, medium: 4096, high: 16384, max: 32000 });
    expect(anthropicRequestBody(request([user('x')])).max_tokens).toBe(4096);
  });

  it('maxTotalOutputTokens (the budget’s room) lowers max_tokens, taking from the thinking first, leaving it out under 1,024; outputBound is what a call could produce without it', () => {
    const body = (maxTotalOutputTokens?: number, thinking?: 'high') =>
      anthropicRequestBody(request([user('x')], { maxOutputTokens: 1000, ...(thinking ? { thinking } : {}), ...(maxTotalOutputTokens !== undefined ? { maxTotalOutputTokens } : {}) }));
    expect(anthropic().outputBound({ messages: [user('x')], thinking: 'high', maxOutputTokens: 1000 })).toBe(17_384);
    expect(anthropic().outputBound({ messages: [user('x')], maxOutputTokens: 1000 })).toBe(1000);
    expect(body(17_384, 'high')).toMatchObject({ max_tokens: 17_384, thinking: { budget_tokens: 16_384 } });
    expect(body(10_000, 'high')).toMatchObject({ max_tokens: 10_000, thinking: { budget_tokens: 9_000 } });
    expect(body(2_024, 'high')).toMatchObject({ max_tokens: 2_024, thinking: { budget_tokens: 1_024 } });
    const short = body(2_023, 'high');
    expect(short).toMatchObject({ max_tokens: 1_000 });
    expect(short).not.toHaveProperty('thinking');
    expect(body(600)).toMatchObject({ max_tokens: 600 });
    expect(body(600, 'high')).toMatchObject({ max_tokens: 600 });
    // OpenAI and Workers AI: one limit covers reasoning too, lowered the same way.
    expect(openAiRequestBody(request([user('x')], { maxOutputTokens: 1000, maxTotalOutputTokens: 300 }), 'http://x/v1').max_tokens).toBe(300);
    expect(openAiRequestBody(request([user('x')], { maxOutputTokens: 1000, maxTotalOutputTokens: 3000 }), 'https://api.openai.com/v1').max_completion_tokens).toBe(1000);
    expect(workersAiInput(request([user('x')], { maxOutputTokens: 1000, maxTotalOutputTokens: 300 })).max_tokens).toBe(300);
  });

  it('sends no x-api-key without a key', async () => {
    const m = marker();
    await collect(anthropic(null).stream(request([user(m)])));
    const [r] = await recorded(m);
    expect(r?.headers).not.toHaveProperty('x-api-key');
  });

  it('leaves thinking out inside a tool loop (no signed thinking block to send back), and the API accepts it', async () => {
    const m = marker();
    const first = [user(`scenario:tool ${m}`)];
    const one = await collect(anthropic().stream(request(first, { tools: [WEATHER], thinking: 'low' })));
    const calls = one.chunks.flatMap((c) => (c.type === 'tool_call' ? [c.call] : []));
    const second: ChatMessage[] = [
      ...first,
      { role: 'assistant', content: 'Let me check.', tool_calls: calls },
      { role: 'tool', tool_call_id: calls[0]?.id ?? '', name: 'get_weather', content: 'cloudy' },
    ];
    const two = await collect(anthropic().stream(request(second, { tools: [WEATHER], thinking: 'low' })));
    expect(two.error).toBeUndefined();
    expect(two.chunks.map((c) => (c.type === 'text' ? c.text : '')).join('')).toBe('Tool result: cloudy');
    const reqs = await recorded(m);
    expect(reqs.map((r) => r.body.thinking)).toEqual([{ type: 'enabled', budget_tokens: 1024 }, undefined]);
    expect(reqs.map((r) => r.body.max_tokens)).toEqual([1024 + 4096, 4096]);

    // The fake enforces the rule the provider works around, as the real API does.
    const res = await fetch(`${FAKE}/v1/messages`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'anthropic-version': '2023-06-01' },
      body: JSON.stringify({ ...reqs[1]?.body, thinking: { type: 'enabled', budget_tokens: 1024 }, max_tokens: 5120 }),
    });
    expect(res.status).toBe(400);
    expect(await res.text()).toContain('must start with a thinking block');
  });
});

// -----------------------------------------------------------------------------------------------
// Workers AI through a binding stand-in that returns the real wire bytes

/** Native frames as the binding streams them for @cf/meta/llama-3.x models. */
const NATIVE = [
  'data: {"response":"Hel","p":"abcdefghijklmnopqrstuvwxyz0123456789abcdefghijklmnopqrstuvwxyz0123"}\n\n',
  'data: {"response":"lo","p":"abcdefghijklmnopqrstuvwxyz0123456789abcd"}\n\n',
  'data: {"response":" wörld","p":"abcdefghijklmnop"}\n\n',
  'data: {"response":"","usage":{"prompt_tokens":21,"completion_tokens":14,"total_tokens":35}}\n\n',
  'data: [DONE]\n\n',
];
/** OpenAI-format frames (gpt-oss / qwen style), a zero-filled usage, then the native usage frame. */
const OPENAI_FORMAT = [
  'data: {"choices":[{"delta":{"content":"","role":"assistant"},"finish_reason":null,"index":0}],"object":"chat.completion.chunk"}\n\n',
  'data: {"choices":[{"delta":{"reasoning":"the user wants","reasoning_content":"the user wants"},"finish_reason":null,"index":0}],"object":"chat.completion.chunk"}\n\n',
  'data: {"choices":[{"delta":{"content":"你"},"finish_reason":null,"index":0}],"object":"chat.completion.chunk"}\n\n',
  'data: {"choices":[{"delta":{"content":"好"},"finish_reason":null,"index":0}],"object":"chat.completion.chunk"}\n\n',
  'data: {"choices":[{"delta":{},"finish_reason":"stop","index":0}],"object":"chat.completion.chunk"}\n\n',
  'data: {"choices":[],"object":"chat.completion.chunk","usage":{"prompt_tokens":0,"completion_tokens":0,"total_tokens":0}}\n\n',
  'data: {"response":"","usage":{"prompt_tokens":57,"completion_tokens":28,"total_tokens":85,"neurons":10.47}}\n\n',
  'data: [DONE]\n\n',
];
const TOOL_FRAMES = [
  'data: {"choices":[{"delta":{"tool_calls":[{"function":{"name":"get_weather"},"id":"chatcmpl-tool-abc","index":0,"type":"function"}]},"finish_reason":null,"index":0}]}\n\n',
  'data: {"choices":[{"delta":{"tool_calls":[{"function":{"arguments":"{\\"city\\": \\""},"index":0}]},"finish_reason":null,"index":0}]}\n\n',
  'data: {"choices":[{"delta":{"tool_calls":[{"function":{"arguments":"Tok"},"index":0}]},"finish_reason":null,"index":0}]}\n\n',
  'data: {"choices":[{"delta":{"tool_calls":[{"function":{"arguments":"yo\\"}"},"index":0}]},"finish_reason":null,"index":0}]}\n\n',
  'data: {"choices":[{"delta":{},"finish_reason":"tool_calls","index":0}]}\n\n',
  'data: [DONE]\n\n',
];

interface RunCall {
  model: string;
  input: object;
  options?: object;
}

function binding(answer: (call: RunCall) => Promise<ReadableStream | object>): { ai: WorkersAiBinding; calls: RunCall[] } {
  const calls: RunCall[] = [];
  return {
    calls,
    ai: {
      run: (model, input, options) => {
        const call: RunCall = options === undefined ? { model, input } : { model, input, options };
        calls.push(call);
        return answer(call);
      },
    },
  };
}

describe('workers-ai provider', () => {
  it('streams native frames: text, usage, done; passes messages, tools, max_tokens and the signal', async () => {
    const { ai, calls } = binding(async () => streamOf(NATIVE));
    const req = request(
      [
        { role: 'system', content: 'sys' },
        user('q'),
        { role: 'assistant', content: '', tool_calls: [{ id: 'c1', name: 'get_weather', arguments: '{}' }] },
        { role: 'tool', tool_call_id: 'c1', name: 'get_weather', content: 'sunny' },
      ],
      { model: '@cf/meta/llama-3.3-70b-instruct-fp8-fast', tools: [WEATHER], maxOutputTokens: 256, thinking: 'high' },
    );
    const outcome = await collect(new WorkersAiProvider(ai).stream(req));
    expect(outcome).toEqual({ chunks: [text('Hel'), text('lo'), text(' wörld'), usage(21, 14), done('stop')] });
    expect(calls).toEqual([
      {
        model: '@cf/meta/llama-3.3-70b-instruct-fp8-fast',
        input: {
          messages: [
            { role: 'system', content: 'sys' },
            { role: 'user', content: 'q' },
            { role: 'assistant', content: '', tool_calls: [{ id: 'c1', type: 'function', function: { name: 'get_weather', arguments: '{}' } }] },
            { role: 'tool', tool_call_id: 'c1', name: 'get_weather', content: 'sunny' },
          ],
          stream: true,
          tools: [{ type: 'function', function: { name: 'get_weather', description: WEATHER.description, parameters: WEATHER.input_schema } }],
          max_tokens: 256,
        },
        options: { signal: req.signal },
      },
    ]);
  });

  it('decodes OpenAI-format frames: reasoning as thinking, the largest usage report wins', async () => {
    const { ai } = binding(async () => streamOf(OPENAI_FORMAT));
    const outcome = await collect(new WorkersAiProvider(ai).stream(request([user('hi')])));
    expect(outcome).toEqual({ chunks: [thinking('the user wants'), text('你'), text('好'), usage(57, 28), done('stop')] });
  });

  it('assembles streamed tool calls, and reads the legacy complete {name, arguments} shape', async () => {
    const a = await collect(new WorkersAiProvider(binding(async () => streamOf(TOOL_FRAMES)).ai).stream(request([user('hi')])));
    expect(a).toEqual({
      chunks: [{ type: 'tool_call', call: { id: 'chatcmpl-tool-abc', name: 'get_weather', arguments: '{"city": "Tokyo"}' } }, done('tool_calls')],
    });
    const legacy = [
      'data: {"response":"","tool_calls":[{"name":"get_weather","arguments":{"city":"Paris"}}]}\n\n',
      'data: {"response":"","usage":{"prompt_tokens":5,"completion_tokens":3,"total_tokens":8}}\n\n',
      'data: [DONE]\n\n',
    ];
    const b = await collect(new WorkersAiProvider(binding(async () => streamOf(legacy)).ai).stream(request([user('hi')])));
    expect(b.chunks).toHaveLength(3);
    const call = b.chunks[0];
    expect(call?.type === 'tool_call' && call.call.name).toBe('get_weather');
    expect(call?.type === 'tool_call' && call.call.arguments).toBe('{"city":"Paris"}');
    expect(call?.type === 'tool_call' && call.call.id).toMatch(/^call_/);
    expect(b.chunks.slice(1)).toEqual([usage(5, 3), done('tool_calls')]);
  });

  it('reports a stream without [DONE] as truncated', async () => {
    const outcome = await collect(new WorkersAiProvider(binding(async () => streamOf(NATIVE.slice(0, 2))).ai).stream(request([user('hi')])));
    expect(outcome.chunks).toEqual([text('Hel'), text('lo')]);
    expect(errorOf(outcome.error)).toEqual({ kind: 'unavailable', message: 'truncated stream', details: { provider: 'workers-ai' }, name: 'ProviderError' });
  });

  it('maps errors thrown by run() by their Workers AI code', async () => {
    const kinds: Record<string, string | undefined> = {};
    for (const message of [
      '3040: Capacity temporarily exceeded, please try again.',
      '3036: You have used up your daily free allocation of 10,000 neurons.',
      '5007: No such model @cf/nope or task',
      'InferenceUpstreamError: internal error',
    ]) {
      const outcome = await collect(
        new WorkersAiProvider(binding(() => Promise.reject(new Error(message))).ai).stream(request([user('hi')])),
      );
      kinds[message.slice(0, 4)] = outcome.error?.kind;
      expect(outcome.error?.message).toBe(message);
    }
    expect(kinds).toEqual({ '3040': 'unavailable', '3036': 'rate_limit', '5007': 'rejected', Infe: 'unavailable' });
  });

  it('aborts mid-stream and cancels the binding stream', async () => {
    const cancelled: unknown[] = [];
    const hanging = new ReadableStream<Uint8Array>({
      start(c) {
        c.enqueue(utf8.encode(NATIVE[0] ?? ''));
      },
      pull: () => new Promise<void>(() => undefined),
      cancel: (r) => void cancelled.push(r),
    });
    const ac = new AbortController();
    const seen: StreamChunk[] = [];
    let error: unknown;
    try {
      for await (const c of new WorkersAiProvider(binding(async () => hanging).ai).stream(request([user('hi')], { signal: ac.signal }))) {
        seen.push(c);
        ac.abort();
      }
    } catch (e) {
      error = e;
    }
    expect(seen).toEqual([text('Hel')]);
    expect(error instanceof ProviderError && error.kind).toBe('aborted');
    expect(cancelled.length).toBeGreaterThanOrEqual(1);
  });

  it('accepts a non-streamed object answer', async () => {
    const outcome = await collect(
      new WorkersAiProvider(binding(async () => ({ response: 'whole answer', usage: { prompt_tokens: 3, completion_tokens: 2, total_tokens: 5 } })).ai).stream(
        request([user('hi')]),
      ),
    );
    expect(outcome).toEqual({ chunks: [text('whole answer'), usage(3, 2), done('stop')] });
  });
});

// -----------------------------------------------------------------------------------------------
// echo

describe('echo provider', () => {
  const echo = new EchoProvider();

  it('streams "echo: <last user message>" in a few chunks with the runtime’s estimate as usage (4 bytes of UTF-8 per token)', async () => {
    const messages: ChatMessage[] = [{ role: 'system', content: 'be nice' }, user('first'), { role: 'assistant', content: 'ok' }, user('hello there big world')];
    const outcome = await collect(echo.stream(request(messages)));
    expect(outcome.error).toBeUndefined();
    const texts = outcome.chunks.flatMap((c) => (c.type === 'text' ? [c.text] : []));
    expect(texts.join('')).toBe('echo: hello there big world');
    expect(texts.length).toBeGreaterThan(1);
    expect(texts.length).toBeLessThanOrEqual(4);
    // input: each message's bytes / 4 rounded up, plus 4 (7, 5, 2, 21 bytes); output: 27 bytes
    expect(outcome.chunks.slice(-2)).toEqual([usage(6 + 6 + 5 + 10, 7), done('stop')]);
    // a text without whitespace counts its size (it counted 1 token before), its tool definitions too
    const page = await collect(echo.stream(request([user('x'.repeat(4000))], { tools: [WEATHER] })));
    expect(page.chunks.slice(-2)).toEqual([usage(1004 + Math.ceil(new TextEncoder().encode(JSON.stringify([WEATHER])).length / 4), 1002), done('stop')]);
  });

  it('asks for a tool on "/tool <name> <json>", then answers with the tool output', async () => {
    const first = [user('/tool calculator {"expression": "2+2"}')];
    const one = await collect(echo.stream(request(first)));
    expect(one.chunks).toEqual([
      { type: 'tool_call', call: { id: 'echo_call_1', name: 'calculator', arguments: '{"expression": "2+2"}' } },
      // 38 bytes in (10 + 4), the name and arguments out (31 bytes)
      usage(14, 8),
      done('tool_calls'),
    ]);
    const call = one.chunks[0]?.type === 'tool_call' ? one.chunks[0].call : undefined;
    const second: ChatMessage[] = [
      ...first,
      { role: 'assistant', content: '', tool_calls: call ? [call] : [] },
      { role: 'tool', tool_call_id: call?.id ?? '', name: 'calculator', content: '4' },
    ];
    const two = await collect(echo.stream(request(second)));
    expect(two.chunks.filter((c) => c.type !== 'usage')).toEqual([text('4'), done('stop')]);
    const bare = await collect(echo.stream(request([user('/tool clock')])));
    expect(bare.chunks[0]).toEqual({ type: 'tool_call', call: { id: 'echo_call_1', name: 'clock', arguments: '{}' } });
  });

  it('cuts at maxOutputTokens with done "length", observes, and honours the signal', async () => {
    const raws: string[] = [];
    const cut = await collect(echo.stream(request([user('a b c d e')], { maxOutputTokens: 3, observe: { request: () => undefined, response: (r) => raws.push(r) } })));
    expect(cut.chunks.flatMap((c) => (c.type === 'text' ? [c.text] : [])).join('')).toBe('echo: a b c ');
    expect(cut.chunks.slice(-2)).toEqual([usage(7, 3), done('length')]);
    // 8 bytes for 2 tokens: whole characters only ('ü' is 2 bytes)
    const wide = await collect(echo.stream(request([user('üüüü')], { maxOutputTokens: 2 })));
    expect(wide.chunks.flatMap((c) => (c.type === 'text' ? [c.text] : [])).join('')).toBe('echo: ü');
    expect(raws.map((r) => JSON.parse(r) as unknown)).toEqual(cut.chunks);
    const ac = new AbortController();
    ac.abort();
    expect((await collect(echo.stream(request([user('x')], { signal: ac.signal })))).error?.kind).toBe('aborted');
  });
});

// -----------------------------------------------------------------------------------------------
// Selection

describe('provider selection', () => {
  const ai: WorkersAiBinding = { run: async () => ({}) };
  it('defaults to echo without keys, to openai, then anthropic, when configured', () => {
    const cases: [ProviderEnv, string][] = [
      [{}, 'echo'],
      [{ OPENAI_API_KEY: '  ', ANTHROPIC_API_KEY: '' }, 'echo'],
      [{ AI: ai }, 'echo'],
      [{ OPENAI_API_KEY: 'k' }, 'openai'],
      [{ OPENAI_BASE_URL: 'http://localhost:11434/v1' }, 'openai'],
      [{ ANTHROPIC_API_KEY: 'k', AI: ai }, 'anthropic'],
      [{ ANTHROPIC_API_KEY: 'k', OPENAI_API_KEY: 'k' }, 'openai'],
    ];
    expect(cases.map(([env]) => defaultProvider(env).id)).toEqual(cases.map(([, id]) => id));
  });

  it('providerFor builds configured providers and explains the others', () => {
    expect(providerFor('echo', {})).toMatchObject({ ok: true, value: { id: 'echo' } });
    expect(providerFor('workers-ai', { AI: ai })).toMatchObject({ ok: true, value: { id: 'workers-ai' } });
    expect(providerFor('anthropic', { ANTHROPIC_BASE_URL: 'http://localhost:1' })).toMatchObject({ ok: true, value: { id: 'anthropic' } });
    expect(providerFor('openai', {})).toEqual({ ok: false, error: 'provider "openai" is not configured (set OPENAI_API_KEY or OPENAI_BASE_URL)' });
    expect(providerFor('workers-ai', {})).toEqual({ ok: false, error: 'provider "workers-ai" is not configured (add the AI binding)' });
    expect(providerFor('gemini', {})).toEqual({
      ok: false,
      error: 'unknown provider "gemini" (expected one of openai, anthropic, workers-ai, echo)',
    });
  });
});
