// OpenAI-compatible Chat Completions over fetch + SSE (OpenAI, Ollama, vLLM, llama.cpp, OpenRouter…):
// `POST {baseUrl}/chat/completions` with `stream: true` and `stream_options.include_usage`.
//
// Request mapping:
// - messages keep their roles; an assistant turn with tool calls carries `tool_calls` in the
//   function format (content null when it had no text); a tool result is `{role: 'tool',
//   tool_call_id, content}`; tools are `{type: 'function', function: {name, description,
//   parameters}}` and omitted when there are none (OpenAI rejects an empty array).
// - thinking → `reasoning_effort`: low/medium/high as is, max → high (the highest level every
//   reasoning model accepts). Models without reasoning reject the field (a `rejected` error).
// - maxOutputTokens → `max_completion_tokens` on api.openai.com (reasoning models refuse
//   `max_tokens`), `max_tokens` on every other server (what the compatible servers read).
// - Authorization: Bearer <key> only when a key is configured (a local Ollama needs none).
//
// Stream decoding: `choices[0].delta.content` → text; `delta.reasoning_content` (vLLM, DeepSeek)
// or else `delta.reasoning` (OpenRouter, Ollama) → thinking; `delta.tool_calls` fragments are
// assembled by index (id, function.name, concatenated function.arguments) and emitted whole when
// the choice finishes (or at [DONE]); the usage with the largest total is emitted once, just before
// `done`, which is sent at `data: [DONE]` (a stream that fails before it yields none: the runtime
// estimates the call, runtime.ts CallTokens; the bytes of the calls it kept unemitted are in the
// error, ProviderError heldBytes). finish_reason: stop → stop, tool_calls/function_call →
// tool_calls, length → length, anything else → other; 'stop' with tool calls counts as tool_calls
// (some compatible servers report it so). A `{"error": …}` payload mid-stream → rate_limit when its
// type/code names a rate limit, else unavailable; a stream without [DONE] → 'truncated stream'.
// The decoder applies the answer limits (limits.ts) as it assembles: a call's arguments, the
// number of calls, and what the model wrote in the run (text, tool names and ids, arguments).

import {
  ProviderError,
  type ChatMessage,
  type Provider,
  type OutputBoundRequest,
  type ProviderRequest,
  type StreamChunk,
  type ToolCall,
  outputLimit,
  withHeldBytes,
} from './types.js';
import { utf8Bytes } from '../../../src/shared/json-cut.js';
import { isObject, num, parseJson, postStream, sseRecords, str, tokenCount, truncate, type JsonObject } from './http.js';
import { AnswerLimits } from './limits.js';

export const OPENAI_DEFAULT_BASE_URL = 'https://api.openai.com/v1';

export interface OpenAiConfig {
  /** Without the trailing `/chat/completions`, e.g. https://api.openai.com/v1 or http://localhost:11434/v1. */
  baseUrl: string;
  /** Sent as a Bearer token when present. */
  apiKey?: string;
}

type FinishReason = Extract<StreamChunk, { type: 'done' }>['finish_reason'];

export const REASONING_EFFORT = { low: 'low', medium: 'medium', high: 'high', max: 'high' } as const;

export function mapFinishReason(reason: string): FinishReason {
  if (reason === 'stop') return 'stop';
  if (reason === 'tool_calls' || reason === 'function_call') return 'tool_calls';
  if (reason === 'length') return 'length';
  return 'other';
}

/** Where the Chat Completions servers this project speaks to differ in the messages they read. */
export interface MessageDialect {
  /** The content of an assistant turn with tool calls and no text: OpenAI wants null, Workers AI a string. */
  emptyCallContent: null | '';
  /** Whether a tool result names its tool (`name`, Workers AI) besides `tool_call_id`. */
  toolResultName: boolean;
}

export const OPENAI_DIALECT: MessageDialect = { emptyCallContent: null, toolResultName: false };

/** ChatMessage[] → Chat Completions messages, in `dialect`. */
export function toChatMessages(messages: ChatMessage[], dialect: MessageDialect): JsonObject[] {
  return messages.map((m): JsonObject => {
    switch (m.role) {
      case 'system':
      case 'user':
        return { role: m.role, content: m.content };
      case 'assistant':
        if (m.tool_calls && m.tool_calls.length > 0) {
          return {
            role: 'assistant',
            content: m.content === '' ? dialect.emptyCallContent : m.content,
            tool_calls: m.tool_calls.map((c) => ({
              id: c.id,
              type: 'function',
              function: { name: c.name, arguments: c.arguments },
            })),
          };
        }
        return { role: 'assistant', content: m.content };
      case 'tool':
        return dialect.toolResultName
          ? { role: 'tool', tool_call_id: m.tool_call_id, name: m.name, content: m.content }
          : { role: 'tool', tool_call_id: m.tool_call_id, content: m.content };
    }
  });
}

/** Tool definitions in the function format: `{type: 'function', function: {name, description, parameters}}`. */
export const functionTools = (tools: ProviderRequest['tools']): JsonObject[] =>
  tools.map((t) => ({
    type: 'function',
    function: { name: t.name, description: t.description, parameters: t.input_schema },
  }));

function usesMaxCompletionTokens(baseUrl: string): boolean {
  try {
    return new URL(baseUrl).hostname === 'api.openai.com';
  } catch {
    return false;
  }
}

/** The request body sent to `{baseUrl}/chat/completions`. */
export function openAiRequestBody(req: ProviderRequest, baseUrl: string): JsonObject {
  const body: JsonObject = {
    model: req.model,
    messages: toChatMessages(req.messages, OPENAI_DIALECT),
    stream: true,
    stream_options: { include_usage: true },
  };
  if (req.tools.length > 0) body.tools = functionTools(req.tools);
  if (req.thinking) body.reasoning_effort = REASONING_EFFORT[req.thinking];
  const limit = outputLimit(req);
  if (limit !== undefined) body[usesMaxCompletionTokens(baseUrl) ? 'max_completion_tokens' : 'max_tokens'] = limit;
  return body;
}

interface PartialCall {
  id: string;
  name: string;
  arguments: string;
}

let generatedIds = 0;
/** For servers that stream a tool call without an id (the runtime needs one to pair the result). */
const generatedCallId = (): string => `call_${Date.now().toString(36)}_${(generatedIds++).toString(36)}`;

/** Token usage: the report with the largest total wins (some servers send zero-filled or running counts). */
export class UsageTracker {
  private best: { input_tokens: number; output_tokens: number } | undefined;

  note(input: number | undefined, output: number | undefined): void {
    if (input === undefined && output === undefined) return;
    const next = { input_tokens: input ?? 0, output_tokens: output ?? 0 };
    const total = (u: { input_tokens: number; output_tokens: number }): number => u.input_tokens + u.output_tokens;
    if (!this.best || total(next) >= total(this.best)) this.best = next;
  }

  /** Reads an OpenAI-style `usage` object (prompt_tokens / completion_tokens). */
  noteOpenAi(usage: unknown): void {
    if (isObject(usage)) this.note(tokenCount(usage.prompt_tokens), tokenCount(usage.completion_tokens));
  }

  chunks(): StreamChunk[] {
    return this.best ? [{ type: 'usage', ...this.best }] : [];
  }
}

/** Counts `next` replacing `previous` (a tool call's id or name) against the answer limits: only what it adds. */
const replaced = (limits: AnswerLimits, previous: string, next: string): string => {
  if (next.length > previous.length) limits.write(next.length - previous.length);
  return next;
};

/**
 * Decodes parsed `chat.completion.chunk` objects into StreamChunks. Shared with the Workers AI
 * provider, whose OpenAI-format models stream the same shape. Throws the ProviderError of an
 * answer limit it would pass (`limits`).
 */
export class ChatCompletionsDecoder {
  readonly usage = new UsageTracker();
  private calls = new Map<number, PartialCall>();
  private finishReason: FinishReason | undefined;
  private emittedCalls = 0;

  constructor(readonly limits: AnswerLimits) {}

  /** The chunks of one payload object (without its error handling: see payloadError). */
  accept(payload: JsonObject): StreamChunk[] {
    const out: StreamChunk[] = [];
    if (payload.usage !== undefined) this.usage.noteOpenAi(payload.usage);
    const choices = Array.isArray(payload.choices) ? payload.choices : [];
    const choice = choices.find((c) => isObject(c) && (c.index === 0 || c.index === undefined)) ?? choices[0];
    if (!isObject(choice)) return out;
    const delta = choice.delta;
    if (isObject(delta)) {
      const thinking = str(delta.reasoning_content) ?? str(delta.reasoning);
      if (thinking) out.push({ type: 'thinking', text: thinking });
      const text = str(delta.content);
      if (text) {
        this.limits.write(text.length);
        out.push({ type: 'text', text });
      }
      if (Array.isArray(delta.tool_calls)) this.toolCallDeltas(delta.tool_calls);
    }
    const finish = str(choice.finish_reason);
    if (finish) {
      this.finishReason = mapFinishReason(finish);
      out.push(...this.flushCalls());
    }
    return out;
  }

  /** Adds `tool_calls` delta entries ({index, id?, function: {name?, arguments?}}). */
  toolCallDeltas(entries: unknown[]): void {
    entries.forEach((entry, position) => {
      if (!isObject(entry)) return;
      const fn = isObject(entry.function) ? entry.function : {};
      const id = str(entry.id);
      const name = str(fn.name);
      const rawArgs = fn.arguments;
      const args = typeof rawArgs === 'string' ? rawArgs : isObject(rawArgs) ? JSON.stringify(rawArgs) : undefined;
      // A null "finalization" entry (no id, no name, no arguments) carries nothing.
      if (!id && !name && !args) return;
      const index = num(entry.index) ?? position;
      let call = this.calls.get(index);
      if (!call) {
        this.limits.call();
        call = { id: '', name: '', arguments: '' };
        this.calls.set(index, call);
      }
      if (id) call.id = replaced(this.limits, call.id, id);
      if (name) call.name = replaced(this.limits, call.name, name);
      if (args) {
        this.limits.arguments(call.arguments.length, args.length);
        call.arguments += args;
      }
    });
  }

  /** Records a finish reason reported outside `choices` (Workers AI's native frames). */
  noteFinishReason(reason: string): void {
    this.finishReason = mapFinishReason(reason);
  }

  /** Adds one complete call (Workers AI's legacy `{name, arguments}` shape). */
  completeCall(name: string, args: string, id?: string): void {
    this.limits.call();
    this.limits.write(name.length + (id?.length ?? 0));
    this.limits.arguments(0, args.length);
    this.calls.set(this.nextFreeIndex(), { id: id ?? '', name, arguments: args });
  }

  /** The assembled calls, in index order, as tool_call chunks (each emitted once). */
  flushCalls(): StreamChunk[] {
    const out: StreamChunk[] = [];
    for (const index of [...this.calls.keys()].sort((a, b) => a - b)) {
      const c = this.calls.get(index);
      if (!c) continue;
      const call: ToolCall = { id: c.id || generatedCallId(), name: c.name, arguments: c.arguments || '{}' };
      out.push({ type: 'tool_call', call });
      this.emittedCalls++;
    }
    this.calls.clear();
    return out;
  }

  /** UTF-8 bytes of the names and arguments of the calls assembled and not yet emitted. */
  heldBytes(): number {
    let n = 0;
    for (const c of this.calls.values()) n += utf8Bytes(c.name) + utf8Bytes(c.arguments);
    return n;
  }

  /** `e`, thrown while decoding, saying how much of the calls it kept were never emitted (ProviderError heldBytes). */
  failure(e: unknown): unknown {
    return withHeldBytes(e, this.heldBytes());
  }

  /** At the terminal marker: pending calls, the usage, then done. */
  finish(): StreamChunk[] {
    const out = this.flushCalls();
    out.push(...this.usage.chunks());
    let reason = this.finishReason ?? (this.emittedCalls > 0 ? 'tool_calls' : 'stop');
    if (reason === 'stop' && this.emittedCalls > 0) reason = 'tool_calls';
    out.push({ type: 'done', finish_reason: reason });
    return out;
  }

  private nextFreeIndex(): number {
    let i = 0;
    while (this.calls.has(i)) i++;
    return i;
  }
}

/**
 * The ProviderError of an `{"error": …}` payload: rate_limit when its type or code names a rate
 * limit, else unavailable. Undefined when the payload is not an error.
 */
export function payloadError(provider: string, payload: JsonObject): ProviderError | undefined {
  const e = payload.error;
  if (e === undefined || e === null) return undefined;
  const obj = isObject(e) ? e : {};
  const type = str(obj.type) ?? '';
  const code = str(obj.code) ?? '';
  const message = str(obj.message) ?? (typeof e === 'string' ? e : JSON.stringify(e));
  const isRate = /rate.?limit/i.test(`${type} ${code}`);
  const name = code || type;
  const label = name ? `stream error (${name})` : 'stream error';
  return new ProviderError(isRate ? 'rate_limit' : 'unavailable', truncate(`${label}: ${message}`), { provider });
}

export const malformedError = (provider: string, data: string): ProviderError =>
  new ProviderError('unavailable', truncate(`malformed stream data: ${data}`, 120), { provider });

export class OpenAiProvider implements Provider {
  readonly id = 'openai' as const;
  private readonly baseUrl: string;

  constructor(private readonly config: OpenAiConfig) {
    this.baseUrl = config.baseUrl.replace(/\/+$/, '');
  }

  /** Reasoning tokens count within max_completion_tokens / max_tokens. */
  outputBound(req: OutputBoundRequest): number {
    return req.maxOutputTokens;
  }

  async *stream(req: ProviderRequest): AsyncGenerator<StreamChunk> {
    const provider = this.id;
    const headers: Record<string, string> = {};
    if (this.config.apiKey) headers.authorization = `Bearer ${this.config.apiKey}`;
    const res = await postStream({
      provider,
      url: `${this.baseUrl}/chat/completions`,
      headers,
      body: openAiRequestBody(req, this.baseUrl),
      signal: req.signal,
      observe: req.observe,
    });
    const decoder = new ChatCompletionsDecoder(new AnswerLimits(provider, req.messages));
    try {
      for await (const payload of chatCompletionPayloads(res.body, provider, req)) yield* decoder.accept(payload);
    } catch (e) {
      throw decoder.failure(e);
    }
    yield* decoder.finish();
  }
}

/**
 * The JSON objects of a Chat Completions SSE stream, up to its `data: [DONE]`; an error payload is
 * thrown as a ProviderError, and a stream that ends without [DONE] as a truncated stream.
 */
export async function* chatCompletionPayloads(
  body: ReadableStream<Uint8Array> | null,
  provider: string,
  req: Pick<ProviderRequest, 'signal' | 'observe'>,
): AsyncGenerator<JsonObject> {
  const isDone = (data: string) => data.trim() === '[DONE]';
  const records = sseRecords(body, { provider, signal: req.signal, observe: req.observe, isTerminal: (r) => isDone(r.data) });
  for await (const record of records) {
    if (isDone(record.data)) return;
    const payload = parseJson(record.data);
    if (!isObject(payload)) throw malformedError(provider, record.data);
    const failure = payloadError(provider, payload);
    if (failure) throw failure;
    yield payload;
  }
}
