// A fake LLM provider for tests and benchmarks: a real node:http server on 127.0.0.1 (random port)
// that speaks the streaming wire formats of the OpenAI Chat Completions API and the Anthropic
// Messages API, byte for byte in their real shapes, and checks requests the way those APIs do.
//
// Endpoints (base URLs: OpenAI `${url}/v1`, Anthropic `${url}`):
//   POST /v1/chat/completions   OpenAI: `chat.completion.chunk` SSE objects with choices[0].delta,
//                               `"usage": null` on every chunk but the usage-only last one (empty
//                               choices, when stream_options.include_usage), then `data: [DONE]`.
//   POST /v1/messages           Anthropic: `event: message_start` … `event: message_stop` with their
//                               JSON bodies (content_block_start/delta/stop, ping, message_delta).
//   GET  /_requests[?contains=s] the recorded requests as JSON (those whose raw body contains s),
//                               for tests that run inside workerd and cannot see this process.
//
// Scenario convention: the text of the last user message (OpenAI: a string or text parts;
// Anthropic: a string or text blocks; tool_result-only user turns are skipped) starting with
// `scenario:<name>` selects <name>; else a model named `fake-<name>` does; else `text`.
// Scenarios:
//   text            several text deltas ("Hello", " from", " the fake", " provider ✓"), stop
//   tool            asks for the first tool of the request (else get_weather) with
//                   {"city": "Paris"} in argument fragments; once the request carries tool results
//                   (after the last user message) it answers "Tool result: <results joined ' | '>"
//   parallel-tools  two calls of that tool: {"city": "Paris"} and {} (empty input); then as `tool`
//   many-tools      MANY_TOOL_CALLS (40) calls of that tool in one response, call i (from 0) with
//                   {"expr": "<i> + 1"} (the calculator's arguments); then as `tool`
//   thinking        reasoning first (OpenAI `reasoning_content`, Anthropic a thinking block with
//                   thinking_delta + signature_delta), then text
//   reasoning       OpenAI only: like thinking with the `reasoning` field (OpenRouter / Ollama)
//   429             HTTP 429 with Retry-After: 7 and the API's rate-limit error body
//   quota           the account out of credit (quota.ts): OpenAI HTTP 429 insufficient_quota;
//                   Anthropic HTTP 400 invalid_request_error "Your credit balance is too low…"
//   overloaded      Anthropic HTTP 529 overloaded_error; OpenAI HTTP 503 server_error
//   400             HTTP 400 invalid_request_error "fake rejection: bad request"
//   401             HTTP 401 authentication_error / invalid_api_key
//   500-html        HTTP 500 with a text/html body (no JSON)
//   error           two deltas, then a mid-stream error (Anthropic `event: error` overloaded_error;
//                   OpenAI a `data: {"error": {…server_error…}}` line) and the end of the body
//   error-rate      the same with a rate-limit error (rate_limit_error / rate_limit_exceeded)
//   truncated       two deltas, then the body ends cleanly without [DONE] / message_stop
//   reset           two deltas, then the TCP connection is destroyed (no terminating chunk)
//   slow            50 deltas ("tick 0 " …), one every slowIntervalMs (default 200 ms)
//   empty           a complete response with no text at all
//   long-text       LONG_TEXT (big-outputs.ts: over 150,000 UTF-16 units with quotes, backslashes,
//                   newlines and 2- to 4-byte characters) in deltas of about 1,000 units, stop
//   huge-args       as `tool`, the call's arguments HUGE_ARGUMENTS ({"city": <over 200 KiB>}) in
//                   fragments of about 4,096 units
//   huge-name       as `tool`, the call's tool name HUGE_TOOL_NAME (over 200 KiB)
//   no-usage        OpenAI only: as `text`, without the usage chunk although include_usage asked
//                   for it (as some compatible servers stream)
//   args-hang       OpenAI only: one tool call whose arguments, HANGING_ARGUMENTS (40,000
//                   characters), come in fragments of 4,000 without a finish_reason; then nothing
//                   more until the client goes away (at most 60 s), as a model still writing
//                   them would (the record's `hangingAt` says when the fragments were written)
// Request checks (answered with the real APIs' 400 error shapes): OpenAI — messages non-empty,
// tools non-empty when present and in function format, stream_options only with stream, a tool
// message must answer a preceding assistant tool_call id, reasoning_effort a known level.
// Anthropic — anthropic-version header, max_tokens a positive integer, roles user/assistant only,
// first message from the user, no empty text blocks, tool_result ids matching the previous
// assistant turn's tool_use ids, thinking.budget_tokens ≥ 1024 and < max_tokens, and with thinking
// enabled a final assistant turn holding tool_use must start with a thinking block.
//
// Every request is recorded (headers, parsed body, scenario, timings, whether the client went
// away early). Timing hooks for a time-to-first-token benchmark: `receivedAt` and `firstDeltaAt`
// (epoch ms with sub-ms precision, taken when the first text/thinking/tool delta was written) on
// each record, and `onFirstDelta(listener)`.

import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { performance } from 'node:perf_hooks';
import { HANGING_ARGUMENTS, HUGE_ARGUMENTS, HUGE_TOOL_NAME, LONG_TEXT, MANY_TOOL_CALLS, manyToolArguments, pieces } from './big-outputs.js';
import { QUOTA_MESSAGES } from './quota.js';

export type FakeApi = 'openai' | 'anthropic';

export interface RecordedRequest {
  seq: number;
  api: FakeApi | 'other';
  method: string;
  path: string;
  headers: Record<string, string>;
  /** The raw request body. */
  raw: string;
  /** The parsed JSON body (undefined when not JSON). */
  body: unknown;
  scenario: string;
  /** HTTP status answered. */
  status?: number;
  /** When the request arrived (before its body was read). */
  receivedAt: number;
  /** When the first model-output event (text, thinking or tool-call delta) was written. */
  firstDeltaAt?: number;
  /** When a scenario that hangs (args-hang) wrote its last event and began waiting for the client to go. */
  hangingAt?: number;
  finishedAt?: number;
  /** The client closed the connection before the response was complete. */
  clientClosed: boolean;
}

export interface FakeProviderOptions {
  /** Interval between the deltas of the `slow` scenario (default 200 ms). */
  slowIntervalMs?: number;
  /** Pause between the events of the other streaming scenarios (default 2 ms). */
  eventIntervalMs?: number;
}

export interface FakeProvider {
  url: string;
  port: number;
  requests: RecordedRequest[];
  /** Called when the first delta of a response was written; returns an unsubscribe function. */
  onFirstDelta(listener: (request: RecordedRequest) => void): () => void;
  close(): Promise<void>;
}

type Json = Record<string, unknown>;
const isObj = (v: unknown): v is Json => typeof v === 'object' && v !== null && !Array.isArray(v);
const now = (): number => performance.timeOrigin + performance.now();
const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

export const SCENARIOS = [
  'text',
  'tool',
  'parallel-tools',
  'many-tools',
  'thinking',
  'reasoning',
  '429',
  'quota',
  'overloaded',
  '400',
  '401',
  '500-html',
  'error',
  'error-rate',
  'truncated',
  'reset',
  'slow',
  'empty',
  'long-text',
  'huge-args',
  'huge-name',
  'no-usage',
  'args-hang',
] as const;
export type Scenario = (typeof SCENARIOS)[number];

export const TEXT_DELTAS = ['Hello', ' from', ' the fake', ' provider ✓'];
export const THINKING_DELTAS = ['Let me think', ' about this.'];
export const ANSWER_DELTAS = ['The answer', ' is 42.'];
export const TOOL_ARGS_FRAGMENTS = ['{"ci', 'ty": "Pa', 'ris"}'];
export const USAGE = { input: 21, output: 9 };
export const SLOW_DELTAS = 50;
export const SIGNATURE = 'EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds';

/** The tool call of the tool scenarios: its name and argument fragments. */
function toolCallOf(scenario: string, body: Json): { name: string; fragments: string[] } {
  if (scenario === 'huge-name') return { name: HUGE_TOOL_NAME, fragments: TOOL_ARGS_FRAGMENTS };
  return { name: firstToolName(body), fragments: scenario === 'huge-args' ? pieces(HUGE_ARGUMENTS, 4096) : TOOL_ARGS_FRAGMENTS };
}

// ---------------------------------------------------------------------------------------------
// Request inspection

function textOf(content: unknown): string | undefined {
  if (typeof content === 'string') return content;
  if (!Array.isArray(content)) return undefined;
  const texts = content.filter((b): b is Json => isObj(b) && b.type === 'text' && typeof b.text === 'string');
  return texts.length > 0 ? texts.map((b) => b.text as string).join('\n') : undefined;
}

function lastUserText(body: Json): string | undefined {
  const messages = Array.isArray(body.messages) ? body.messages : [];
  for (let i = messages.length - 1; i >= 0; i--) {
    const m: unknown = messages[i];
    if (!isObj(m) || m.role !== 'user') continue;
    const t = textOf(m.content);
    if (t !== undefined) return t;
  }
  return undefined;
}

export function scenarioOf(body: unknown): string {
  if (!isObj(body)) return 'text';
  const text = lastUserText(body);
  const fromText = text !== undefined ? /^scenario:([\w-]+)/.exec(text.trim()) : null;
  if (fromText?.[1]) return fromText[1];
  const model = typeof body.model === 'string' ? body.model : '';
  if (model.startsWith('fake-')) return model.slice('fake-'.length);
  return 'text';
}

function firstToolName(body: Json): string {
  const tools = Array.isArray(body.tools) ? body.tools : [];
  const t: unknown = tools[0];
  if (isObj(t)) {
    if (isObj(t.function) && typeof t.function.name === 'string') return t.function.name;
    if (typeof t.name === 'string') return t.name;
  }
  return 'get_weather';
}

/** Tool results sent after the last user text message (OpenAI tool messages / Anthropic tool_result blocks). */
function toolResults(body: Json): string[] {
  const messages = (Array.isArray(body.messages) ? body.messages : []).filter(isObj);
  let lastText = -1;
  messages.forEach((m, i) => {
    if (m.role === 'user' && textOf(m.content) !== undefined) lastText = i;
  });
  const out: string[] = [];
  for (const m of messages.slice(lastText + 1)) {
    if (m.role === 'tool' && typeof m.content === 'string') out.push(m.content);
    if (m.role === 'user' && Array.isArray(m.content)) {
      for (const b of m.content) {
        if (!isObj(b) || b.type !== 'tool_result') continue;
        const c = b.content;
        out.push(typeof c === 'string' ? c : (textOf(c) ?? JSON.stringify(c)));
      }
    }
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// Request checks, mirroring the real APIs' 400s

function checkOpenAi(body: Json): string | undefined {
  if (typeof body.model !== 'string' || body.model === '') return "you must provide a model parameter";
  if (!Array.isArray(body.messages) || body.messages.length === 0) return "[] is too short - 'messages'";
  if (body.stream_options !== undefined && body.stream !== true) {
    return "The 'stream_options' parameter is only allowed when 'stream' is enabled.";
  }
  if (body.tools !== undefined) {
    if (!Array.isArray(body.tools) || body.tools.length === 0) return "[] is too short - 'tools'";
    for (const [i, t] of body.tools.entries()) {
      if (!isObj(t) || t.type !== 'function' || !isObj(t.function) || typeof t.function.name !== 'string') {
        return `Missing required parameter: 'tools[${i}].function'.`;
      }
    }
  }
  if (body.reasoning_effort !== undefined && !['minimal', 'low', 'medium', 'high'].includes(String(body.reasoning_effort))) {
    return `Invalid value: '${String(body.reasoning_effort)}'. Supported values are: 'minimal', 'low', 'medium', and 'high'.`;
  }
  const callIds = new Set<string>();
  for (const [i, m] of body.messages.entries()) {
    if (!isObj(m)) return `Invalid type for 'messages[${i}]'.`;
    if (m.role === 'assistant' && Array.isArray(m.tool_calls)) {
      for (const c of m.tool_calls) if (isObj(c) && typeof c.id === 'string') callIds.add(c.id);
    }
    if (m.role === 'assistant' && m.content === null && !Array.isArray(m.tool_calls)) {
      return `Invalid value for 'messages[${i}].content': expected a string, got null.`;
    }
    if (m.role === 'tool' && (typeof m.tool_call_id !== 'string' || !callIds.has(m.tool_call_id))) {
      return "Invalid parameter: messages with role 'tool' must be a response to a preceeding message with 'tool_calls'.";
    }
  }
  return undefined;
}

function checkAnthropic(headers: Record<string, string>, body: Json): string | undefined {
  if (!headers['anthropic-version']) return 'anthropic-version: header is required';
  if (typeof body.model !== 'string' || body.model === '') return 'model: Field required';
  if (typeof body.max_tokens !== 'number' || !Number.isInteger(body.max_tokens) || body.max_tokens < 1) {
    return 'max_tokens: Field required';
  }
  if (!Array.isArray(body.messages) || body.messages.length === 0) return 'messages: at least one message is required';
  if (body.tools !== undefined) {
    if (!Array.isArray(body.tools)) return 'tools: Input should be a valid list';
    for (const [i, t] of body.tools.entries()) {
      if (!isObj(t) || typeof t.name !== 'string' || !isObj(t.input_schema)) return `tools.${i}.input_schema: Field required`;
    }
  }
  const thinking = isObj(body.thinking) && body.thinking.type === 'enabled' ? body.thinking : undefined;
  if (thinking) {
    const budget = thinking.budget_tokens;
    if (typeof budget !== 'number' || budget < 1024) {
      return 'thinking.enabled.budget_tokens: Input should be greater than or equal to 1024';
    }
    if (body.max_tokens <= budget) return '`max_tokens` must be greater than `thinking.budget_tokens`.';
  }
  let previousToolUses = new Set<string>();
  const messages = body.messages;
  for (const [i, m] of messages.entries()) {
    if (!isObj(m) || (m.role !== 'user' && m.role !== 'assistant')) {
      return `messages.${i}.role: Input should be 'user' or 'assistant'`;
    }
    if (i === 0 && m.role !== 'user') return 'messages: first message must use the "user" role';
    const blocks: unknown[] = typeof m.content === 'string' ? [{ type: 'text', text: m.content }] : Array.isArray(m.content) ? m.content : [];
    if (blocks.length === 0) return `messages.${i}: all messages must have non-empty content`;
    const toolUses = new Set<string>();
    for (const [j, b] of blocks.entries()) {
      if (!isObj(b)) return `messages.${i}.content.${j}: Input should be a valid dictionary`;
      if (b.type === 'text' && (typeof b.text !== 'string' || b.text === '')) {
        return 'messages: text content blocks must be non-empty';
      }
      if (b.type === 'tool_use') {
        if (m.role !== 'assistant') return `messages.${i}.content.${j}: tool_use blocks are only allowed in assistant messages`;
        if (typeof b.id === 'string') toolUses.add(b.id);
        if (!isObj(b.input)) return `messages.${i}.content.${j}.tool_use.input: Input should be a valid dictionary`;
      }
      if (b.type === 'tool_result') {
        if (m.role !== 'user') return `messages.${i}.content.${j}: tool_result blocks are only allowed in user messages`;
        if (typeof b.tool_use_id !== 'string' || !previousToolUses.has(b.tool_use_id)) {
          return (
            `messages.${i}.content.${j}: unexpected \`tool_use_id\` found in \`tool_result\` blocks: ${String(b.tool_use_id)}. ` +
            'Each `tool_result` block must have a corresponding `tool_use` block in the previous message.'
          );
        }
      }
    }
    if (thinking && m.role === 'assistant' && i === messages.length - 2 && toolUses.size > 0) {
      const first = blocks[0];
      if (!isObj(first) || (first.type !== 'thinking' && first.type !== 'redacted_thinking')) {
        return (
          `messages.${i}.content.0.type: Expected \`thinking\` or \`redacted_thinking\`, but found \`${isObj(first) ? String(first.type) : '?'}\`. ` +
          'When `thinking` is enabled, a final `assistant` message must start with a thinking block.'
        );
      }
    }
    previousToolUses = toolUses;
  }
  return undefined;
}

// ---------------------------------------------------------------------------------------------
// Response writing

class Writer {
  private closed = false;

  constructor(
    private readonly res: ServerResponse,
    private readonly rec: RecordedRequest,
    private readonly firstDelta: (rec: RecordedRequest) => void,
    private readonly pause: number,
  ) {
    res.on('close', () => {
      this.closed = true;
      if (!res.writableFinished) rec.clientClosed = true;
    });
  }

  get gone(): boolean {
    return this.closed;
  }

  start(): void {
    this.rec.status = 200;
    this.res.writeHead(200, {
      'content-type': 'text/event-stream; charset=utf-8',
      'cache-control': 'no-cache',
      connection: 'keep-alive',
    });
    this.res.flushHeaders();
  }

  /** Writes one SSE event; `delta` marks events that carry model output (for firstDeltaAt). */
  async event(text: string, delta = false, pause = this.pause): Promise<void> {
    if (this.closed) return;
    this.res.write(text);
    if (delta && this.rec.firstDeltaAt === undefined) {
      this.rec.firstDeltaAt = now();
      this.firstDelta(this.rec);
    }
    if (pause > 0) await sleep(pause);
  }

  /** Writes nothing more until the client goes away or `maxMs` passed (recorded as `hangingAt`). */
  async hang(maxMs: number): Promise<void> {
    this.rec.hangingAt = now();
    for (const until = now() + maxMs; !this.closed && now() < until; ) await sleep(50);
  }

  end(): void {
    if (this.closed) return;
    this.rec.finishedAt = now();
    this.res.end();
  }

  destroy(): void {
    this.rec.finishedAt = now();
    this.res.socket?.destroy();
  }

  json(status: number, body: unknown, headers: Record<string, string> = {}): void {
    this.rec.status = status;
    this.rec.finishedAt = now();
    this.res.writeHead(status, { 'content-type': 'application/json', ...headers });
    this.res.end(JSON.stringify(body));
  }

  text(status: number, body: string, contentType: string): void {
    this.rec.status = status;
    this.rec.finishedAt = now();
    this.res.writeHead(status, { 'content-type': contentType });
    this.res.end(body);
  }
}

const data = (payload: unknown): string => `data: ${typeof payload === 'string' ? payload : JSON.stringify(payload)}\n\n`;
const named = (event: string, payload: unknown): string => `event: ${event}\ndata: ${JSON.stringify(payload)}\n\n`;

// ---------------------------------------------------------------------------------------------
// OpenAI

const OPENAI_USAGE = {
  prompt_tokens: USAGE.input,
  completion_tokens: USAGE.output,
  total_tokens: USAGE.input + USAGE.output,
  prompt_tokens_details: { cached_tokens: 0, audio_tokens: 0 },
  completion_tokens_details: { reasoning_tokens: 0, audio_tokens: 0, accepted_prediction_tokens: 0, rejected_prediction_tokens: 0 },
};

async function openAi(w: Writer, body: Json, scenario: string, slowMs: number): Promise<void> {
  const id = `chatcmpl-fake${Date.now().toString(36)}`;
  const created = Math.floor(Date.now() / 1000);
  const model = typeof body.model === 'string' ? body.model : 'gpt-fake';
  const includeUsage = isObj(body.stream_options) && body.stream_options.include_usage === true;
  const chunk = (delta: Json, finish: string | null = null): Json => ({
    id,
    object: 'chat.completion.chunk',
    created,
    model,
    service_tier: 'default',
    system_fingerprint: 'fp_fake0001',
    choices: [{ index: 0, delta, logprobs: null, finish_reason: finish }],
    ...(includeUsage ? { usage: null } : {}),
  });
  const usageChunk = (): Json => ({
    id,
    object: 'chat.completion.chunk',
    created,
    model,
    service_tier: 'default',
    system_fingerprint: 'fp_fake0001',
    choices: [],
    usage: OPENAI_USAGE,
  });
  const finish = async (reason: string): Promise<void> => {
    await w.event(data(chunk({}, reason)));
    if (includeUsage && scenario !== 'no-usage') await w.event(data(usageChunk()));
    await w.event(data('[DONE]'));
    w.end();
  };
  const texts = async (parts: string[], first = true): Promise<void> => {
    for (const [i, t] of parts.entries()) {
      await w.event(data(chunk(i === 0 && first ? { role: 'assistant', content: t, refusal: null } : { content: t })), true);
    }
  };

  switch (scenario) {
    case '429':
      return w.json(
        429,
        {
          error: {
            message: `Rate limit reached for ${model} in organization org-fake on requests per min (RPM): Limit 3, Used 3, Requested 1. Please try again in 7s.`,
            type: 'requests',
            param: null,
            code: 'rate_limit_exceeded',
          },
        },
        { 'retry-after': '7', 'x-ratelimit-limit-requests': '3', 'x-ratelimit-remaining-requests': '0' },
      );
    case 'quota':
      return w.json(429, { error: { message: QUOTA_MESSAGES.openai, type: 'insufficient_quota', param: null, code: 'insufficient_quota' } });
    case 'overloaded':
      return w.json(503, { error: { message: 'The server is overloaded or not ready yet.', type: 'server_error', param: null, code: null } });
    case '400':
      return w.json(400, { error: { message: 'fake rejection: bad request', type: 'invalid_request_error', param: null, code: null } });
    case '401':
      return w.json(401, {
        error: { message: 'Incorrect API key provided: sk-fake***1234.', type: 'invalid_request_error', param: null, code: 'invalid_api_key' },
      });
    case '500-html':
      return w.text(500, '<html><body><h1>500 Internal Server Error</h1></body></html>', 'text/html');
  }

  w.start();
  switch (scenario) {
    case 'tool':
    case 'parallel-tools':
    case 'many-tools':
    case 'huge-args':
    case 'huge-name': {
      const results = toolResults(body);
      if (results.length > 0) {
        await texts(['Tool result: ', results.join(' | ')]);
        return finish('stop');
      }
      if (scenario === 'many-tools') {
        // As OpenAI streams parallel calls: each call's first chunk has its index, id, type and
        // name (the first also the role), then its arguments in fragments.
        const name = firstToolName(body);
        for (let i = 0; i < MANY_TOOL_CALLS; i++) {
          const head = { index: i, id: `call_fake_${i + 1}`, type: 'function', function: { name, arguments: '' } };
          await w.event(data(chunk(i === 0 ? { role: 'assistant', content: null, tool_calls: [head], refusal: null } : { tool_calls: [head] })), true);
          const args = manyToolArguments(i);
          for (const part of [args.slice(0, 5), args.slice(5)]) await w.event(data(chunk({ tool_calls: [{ index: i, function: { arguments: part } }] })));
        }
        return finish('tool_calls');
      }
      const { name, fragments } = toolCallOf(scenario, body);
      await w.event(
        data(
          chunk({
            role: 'assistant',
            content: null,
            tool_calls: [{ index: 0, id: 'call_fake_1', type: 'function', function: { name, arguments: '' } }],
            refusal: null,
          }),
        ),
        true,
      );
      for (const part of fragments) {
        await w.event(data(chunk({ tool_calls: [{ index: 0, function: { arguments: part } }] })));
      }
      if (scenario === 'parallel-tools') {
        await w.event(data(chunk({ tool_calls: [{ index: 1, id: 'call_fake_2', type: 'function', function: { name, arguments: '' } }] })));
        await w.event(data(chunk({ tool_calls: [{ index: 1, function: { arguments: '{}' } }] })));
      }
      return finish('tool_calls');
    }
    case 'thinking':
    case 'reasoning': {
      const field = scenario === 'thinking' ? 'reasoning_content' : 'reasoning';
      for (const [i, t] of THINKING_DELTAS.entries()) {
        await w.event(data(chunk(i === 0 ? { role: 'assistant', content: '', [field]: t } : { [field]: t })), true);
      }
      await texts(ANSWER_DELTAS, false);
      return finish('stop');
    }
    case 'error':
    case 'error-rate':
      await texts(TEXT_DELTAS.slice(0, 2));
      await w.event(
        data(
          scenario === 'error'
            ? { error: { message: 'The server had an error while processing your request. Sorry about that!', type: 'server_error', param: null, code: null } }
            : { error: { message: 'Rate limit reached for requests', type: 'requests', param: null, code: 'rate_limit_exceeded' } },
        ),
      );
      return w.end();
    case 'truncated':
      await texts(TEXT_DELTAS.slice(0, 2));
      return w.end();
    case 'reset':
      await texts(TEXT_DELTAS.slice(0, 2));
      return w.destroy();
    case 'slow':
      for (let i = 0; i < SLOW_DELTAS && !w.gone; i++) {
        await w.event(data(chunk(i === 0 ? { role: 'assistant', content: `tick ${i} `, refusal: null } : { content: `tick ${i} ` })), true, slowMs);
      }
      return finish('stop');
    case 'empty':
      await w.event(data(chunk({ role: 'assistant', content: '', refusal: null })));
      return finish('stop');
    case 'long-text':
      await texts(pieces(LONG_TEXT, 1000));
      return finish('stop');
    case 'args-hang': {
      const head = { index: 0, id: 'call_fake_hang', type: 'function', function: { name: firstToolName(body), arguments: '' } };
      await w.event(data(chunk({ role: 'assistant', content: null, tool_calls: [head], refusal: null })), true);
      for (const part of pieces(HANGING_ARGUMENTS, 4000)) await w.event(data(chunk({ tool_calls: [{ index: 0, function: { arguments: part } }] })));
      await w.hang(60_000);
      return w.end();
    }
    default:
      await texts(TEXT_DELTAS);
      return finish('stop');
  }
}

// ---------------------------------------------------------------------------------------------
// Anthropic

async function anthropic(w: Writer, body: Json, scenario: string, slowMs: number): Promise<void> {
  const model = typeof body.model === 'string' ? body.model : 'claude-fake';
  const errorBody = (type: string, message: string): Json => ({
    type: 'error',
    error: { type, message },
    request_id: 'req_fake0001',
  });
  switch (scenario) {
    case '429':
      return w.json(429, errorBody('rate_limit_error', 'Number of request tokens has exceeded your per-minute rate limit.'), {
        'retry-after': '7',
        'anthropic-ratelimit-requests-remaining': '0',
      });
    case 'quota':
      return w.json(400, errorBody('invalid_request_error', QUOTA_MESSAGES.anthropic));
    case 'overloaded':
      return w.json(529, errorBody('overloaded_error', 'Overloaded'));
    case '400':
      return w.json(400, errorBody('invalid_request_error', 'fake rejection: bad request'));
    case '401':
      return w.json(401, errorBody('authentication_error', 'invalid x-api-key'));
    case '500-html':
      return w.text(500, '<html><body><h1>500 Internal Server Error</h1></body></html>', 'text/html');
  }

  w.start();
  let index = 0;
  await w.event(
    named('message_start', {
      type: 'message_start',
      message: {
        id: `msg_fake${Date.now().toString(36)}`,
        type: 'message',
        role: 'assistant',
        model,
        content: [],
        stop_reason: null,
        stop_sequence: null,
        usage: { input_tokens: USAGE.input, cache_creation_input_tokens: 0, cache_read_input_tokens: 0, output_tokens: 1, service_tier: 'standard' },
      },
    }),
  );
  const textBlock = async (parts: string[], withPing = false): Promise<void> => {
    await w.event(named('content_block_start', { type: 'content_block_start', index, content_block: { type: 'text', text: '' } }));
    if (withPing) await w.event(named('ping', { type: 'ping' }));
    for (const t of parts) {
      await w.event(named('content_block_delta', { type: 'content_block_delta', index, delta: { type: 'text_delta', text: t } }), true);
    }
    await w.event(named('content_block_stop', { type: 'content_block_stop', index }));
    index++;
  };
  const toolBlock = async (id: string, name: string, fragments: string[]): Promise<void> => {
    await w.event(
      named('content_block_start', { type: 'content_block_start', index, content_block: { type: 'tool_use', id, name, input: {} } }),
      true,
    );
    for (const partial_json of fragments) {
      await w.event(named('content_block_delta', { type: 'content_block_delta', index, delta: { type: 'input_json_delta', partial_json } }));
    }
    await w.event(named('content_block_stop', { type: 'content_block_stop', index }));
    index++;
  };
  const finish = async (stopReason: string): Promise<void> => {
    await w.event(
      named('message_delta', {
        type: 'message_delta',
        delta: { stop_reason: stopReason, stop_sequence: null },
        usage: { output_tokens: USAGE.output },
      }),
    );
    await w.event(named('message_stop', { type: 'message_stop' }));
    w.end();
  };

  switch (scenario) {
    case 'tool':
    case 'parallel-tools':
    case 'many-tools':
    case 'huge-args':
    case 'huge-name': {
      const results = toolResults(body);
      if (results.length > 0) {
        await textBlock(['Tool result: ', results.join(' | ')], true);
        return finish('end_turn');
      }
      if (scenario === 'many-tools') {
        await textBlock(['Let me check.'], true);
        const args = (i: number): string[] => [manyToolArguments(i).slice(0, 5), manyToolArguments(i).slice(5)];
        for (let i = 0; i < MANY_TOOL_CALLS; i++) await toolBlock(`toolu_fake_${i + 1}`, firstToolName(body), args(i));
        return finish('tool_use');
      }
      const { name, fragments } = toolCallOf(scenario, body);
      await textBlock(['Let me check.'], true);
      await toolBlock('toolu_fake_1', name, fragments);
      if (scenario === 'parallel-tools') await toolBlock('toolu_fake_2', name, ['']);
      return finish('tool_use');
    }
    case 'thinking': {
      await w.event(named('content_block_start', { type: 'content_block_start', index, content_block: { type: 'thinking', thinking: '', signature: '' } }));
      await w.event(named('ping', { type: 'ping' }));
      for (const t of THINKING_DELTAS) {
        await w.event(named('content_block_delta', { type: 'content_block_delta', index, delta: { type: 'thinking_delta', thinking: t } }), true);
      }
      await w.event(named('content_block_delta', { type: 'content_block_delta', index, delta: { type: 'signature_delta', signature: SIGNATURE } }));
      await w.event(named('content_block_stop', { type: 'content_block_stop', index }));
      index++;
      await textBlock(ANSWER_DELTAS);
      return finish('end_turn');
    }
    case 'error':
    case 'error-rate': {
      await w.event(named('content_block_start', { type: 'content_block_start', index, content_block: { type: 'text', text: '' } }));
      for (const t of TEXT_DELTAS.slice(0, 2)) {
        await w.event(named('content_block_delta', { type: 'content_block_delta', index, delta: { type: 'text_delta', text: t } }), true);
      }
      await w.event(
        named(
          'error',
          scenario === 'error'
            ? errorBody('overloaded_error', 'Overloaded')
            : errorBody('rate_limit_error', 'Number of request tokens has exceeded your per-minute rate limit.'),
        ),
      );
      return w.end();
    }
    case 'truncated':
    case 'reset': {
      await w.event(named('content_block_start', { type: 'content_block_start', index, content_block: { type: 'text', text: '' } }));
      for (const t of TEXT_DELTAS.slice(0, 2)) {
        await w.event(named('content_block_delta', { type: 'content_block_delta', index, delta: { type: 'text_delta', text: t } }), true);
      }
      return scenario === 'truncated' ? w.end() : w.destroy();
    }
    case 'slow': {
      await w.event(named('content_block_start', { type: 'content_block_start', index, content_block: { type: 'text', text: '' } }));
      for (let i = 0; i < SLOW_DELTAS && !w.gone; i++) {
        await w.event(named('content_block_delta', { type: 'content_block_delta', index, delta: { type: 'text_delta', text: `tick ${i} ` } }), true, slowMs);
      }
      await w.event(named('content_block_stop', { type: 'content_block_stop', index }));
      return finish('end_turn');
    }
    case 'empty':
      return finish('end_turn');
    case 'long-text':
      await textBlock(pieces(LONG_TEXT, 1000), true);
      return finish('end_turn');
    default:
      await textBlock(TEXT_DELTAS, true);
      return finish('end_turn');
  }
}

// ---------------------------------------------------------------------------------------------
// Server

function readBody(req: IncomingMessage): Promise<string> {
  return new Promise((resolve, reject) => {
    const parts: Buffer[] = [];
    req.on('data', (c: Buffer) => parts.push(c));
    req.on('end', () => resolve(Buffer.concat(parts).toString('utf8')));
    req.on('error', reject);
  });
}

function flatHeaders(req: IncomingMessage): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(req.headers)) {
    if (v !== undefined) out[k] = Array.isArray(v) ? v.join(', ') : v;
  }
  return out;
}

export async function startFakeProvider(options: FakeProviderOptions = {}): Promise<FakeProvider> {
  const slowMs = options.slowIntervalMs ?? 200;
  const pause = options.eventIntervalMs ?? 2;
  const requests: RecordedRequest[] = [];
  const listeners = new Set<(r: RecordedRequest) => void>();
  const firstDelta = (r: RecordedRequest): void => {
    for (const l of listeners) l(r);
  };
  let seq = 0;

  const handle = async (req: IncomingMessage, res: ServerResponse): Promise<void> => {
    const receivedAt = now();
    const url = new URL(req.url ?? '/', 'http://fake');
    if (req.method === 'GET' && url.pathname === '/_requests') {
      const contains = url.searchParams.get('contains');
      const list = contains === null ? requests : requests.filter((r) => r.raw.includes(contains));
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify(list));
      return;
    }
    const raw = await readBody(req);
    let body: unknown;
    try {
      body = JSON.parse(raw) as unknown;
    } catch {
      body = undefined;
    }
    const headers = flatHeaders(req);
    const api: RecordedRequest['api'] =
      req.method === 'POST' && url.pathname === '/v1/chat/completions'
        ? 'openai'
        : req.method === 'POST' && url.pathname === '/v1/messages'
          ? 'anthropic'
          : 'other';
    const rec: RecordedRequest = {
      seq: seq++,
      api,
      method: req.method ?? '',
      path: url.pathname,
      headers,
      raw,
      body,
      scenario: scenarioOf(body),
      receivedAt,
      clientClosed: false,
    };
    requests.push(rec);
    const w = new Writer(res, rec, firstDelta, pause);
    if (api === 'other') {
      return w.json(404, { error: { message: `no route ${req.method ?? ''} ${url.pathname}`, type: 'invalid_request_error' } });
    }
    if (!isObj(body)) {
      return api === 'openai'
        ? w.json(400, { error: { message: 'We could not parse the JSON body of your request.', type: 'invalid_request_error', param: null, code: null } })
        : w.json(400, { type: 'error', error: { type: 'invalid_request_error', message: 'invalid JSON body' } });
    }
    if (api === 'openai') {
      const problem = checkOpenAi(body);
      if (problem) return w.json(400, { error: { message: problem, type: 'invalid_request_error', param: null, code: null } });
      return openAi(w, body, rec.scenario, slowMs);
    }
    const problem = checkAnthropic(headers, body);
    if (problem) return w.json(400, { type: 'error', error: { type: 'invalid_request_error', message: problem }, request_id: 'req_fake0001' });
    return anthropic(w, body, rec.scenario, slowMs);
  };

  const server = createServer({ noDelay: true, keepAlive: true }, (req, res) => {
    handle(req, res).catch((e: unknown) => {
      if (!res.headersSent) {
        res.writeHead(500, { 'content-type': 'text/plain' });
        res.end(e instanceof Error ? e.message : String(e));
      } else {
        res.destroy();
      }
    });
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => resolve());
  });
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    port,
    requests,
    onFirstDelta(listener) {
      listeners.add(listener);
      return () => listeners.delete(listener);
    },
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
