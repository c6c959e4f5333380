// Anthropic Messages API over fetch + SSE: `POST {baseUrl}/v1/messages` with `x-api-key` (only when
// a key is configured), `anthropic-version: 2023-06-01` and `stream: true`. The base URL has no
// `/v1` (the Anthropic SDK convention for ANTHROPIC_BASE_URL).
//
// Request mapping:
// - system messages are joined (blank line between) into `system`; the rest become user/assistant
//   turns of content blocks: assistant tool calls → `tool_use` blocks (arguments parsed to the
//   `input` object; text that is not a JSON object becomes {}), tool results → `tool_result` blocks
//   in a user turn; consecutive turns of one role are merged (all the results of a parallel call
//   go back in one user turn, as the API requires); empty text blocks are left out (refused).
// - tools → `{name, description, input_schema}`, omitted when there are none.
// - max_tokens = maxOutputTokens ?? 4096. thinking → `thinking: {type: 'enabled', budget_tokens}`
//   with low 1024 / medium 4096 / high 16384 / max 32000, and max_tokens raised to
//   budget + (maxOutputTokens ?? 4096) so that the answer keeps its own room above the budget
//   (models whose output limit is below that refuse the request: `rejected`). maxTotalOutputTokens
//   (the token budget's room) lowers max_tokens, taking from the thinking budget first; thinking is
//   left out when less than 1,024 tokens (the API's minimum budget) would remain for it.
// - Inside a tool loop (an assistant tool call after the last user message) thinking is NOT sent:
//   the API requires such a turn to start with the model's signed thinking block, which the
//   ChatMessage contract does not carry; without `thinking` the continuation is accepted.
//
// Stream decoding: message_start (usage.input_tokens + cache tokens), content_block_start (text,
// tool_use with id + name, thinking), content_block_delta (text_delta → text, thinking_delta →
// thinking, input_json_delta → accumulated, signature_delta and others ignored), content_block_stop
// (a tool_use block → one tool_call chunk; empty input → "{}"), message_delta (stop_reason,
// cumulative usage), message_stop (terminal: usage then done), ping (ignored), error (overloaded_error
// and api_error → unavailable, rate_limit_error → rate_limit, anything else → rejected).
// A stream that fails or is cancelled after message_start still yields the usage it reported
// (the input was processed and is billed), then throws, the bytes of the tool_use blocks it kept
// unemitted in the error (ProviderError heldBytes); the runtime estimates the output (runtime.ts,
// CallTokens).
// stop_reason: end_turn/stop_sequence → stop, tool_use → tool_calls, max_tokens → length, else other.
// The answer limits (limits.ts) apply as the blocks arrive: a tool_use block's input, the number
// of tool_use blocks, and what the model wrote in the run (text, tool names and ids, inputs). Only
// tool_use blocks are kept until their content_block_stop (text and thinking are passed on).

import {
  ProviderError,
  type ChatMessage,
  type Provider,
  type ProviderErrorKind,
  type OutputBoundRequest,
  type ProviderRequest,
  type StreamChunk,
  type Thinking,
  withHeldBytes,
} from './types.js';
import { utf8Bytes } from '../../../src/shared/json-cut.js';
import { isObject, num, parseJson, postStream, sseRecords, str, tokenCount, truncate, type JsonObject } from './http.js';
import { malformedError } from './openai.js';
import { AnswerLimits } from './limits.js';

export const ANTHROPIC_DEFAULT_BASE_URL = 'https://api.anthropic.com';
export const ANTHROPIC_VERSION = '2023-06-01';
export const ANTHROPIC_DEFAULT_MAX_TOKENS = 4096;
export const THINKING_BUDGET: Record<Thinking, number> = { low: 1024, medium: 4096, high: 16384, max: 32000 };

export interface AnthropicConfig {
  /** Without `/v1`, e.g. https://api.anthropic.com. */
  baseUrl: string;
  /** Sent as x-api-key when present. */
  apiKey?: string;
}

type FinishReason = Extract<StreamChunk, { type: 'done' }>['finish_reason'];
interface AnthropicMessage {
  role: 'user' | 'assistant';
  content: JsonObject[];
}

export function mapStopReason(reason: string): FinishReason {
  if (reason === 'end_turn' || reason === 'stop_sequence') return 'stop';
  if (reason === 'tool_use') return 'tool_calls';
  if (reason === 'max_tokens') return 'length';
  return 'other';
}

/** The ProviderError kind of an Anthropic error type (an `error` event or an error body). */
export function kindForErrorType(type: string): ProviderErrorKind {
  if (type === 'overloaded_error' || type === 'api_error') return 'unavailable';
  if (type === 'rate_limit_error') return 'rate_limit';
  return 'rejected';
}

function toolInput(args: string): JsonObject {
  const parsed = parseJson(args);
  return isObject(parsed) ? parsed : {};
}

/** ChatMessage[] → {system, messages} of the Messages API. */
export function toAnthropicMessages(messages: ChatMessage[]): { system: string | undefined; messages: AnthropicMessage[] } {
  const system: string[] = [];
  const out: AnthropicMessage[] = [];
  const push = (role: 'user' | 'assistant', blocks: JsonObject[]): void => {
    if (blocks.length === 0) return;
    const last = out[out.length - 1];
    if (last && last.role === role) last.content.push(...blocks);
    else out.push({ role, content: blocks });
  };
  for (const m of messages) {
    switch (m.role) {
      case 'system':
        if (m.content !== '') system.push(m.content);
        break;
      case 'user':
        push('user', m.content === '' ? [] : [{ type: 'text', text: m.content }]);
        break;
      case 'assistant': {
        const blocks: JsonObject[] = m.content === '' ? [] : [{ type: 'text', text: m.content }];
        for (const c of m.tool_calls ?? []) {
          blocks.push({ type: 'tool_use', id: c.id, name: c.name, input: toolInput(c.arguments) });
        }
        push('assistant', blocks);
        break;
      }
      case 'tool':
        push('user', [{ type: 'tool_result', tool_use_id: m.tool_call_id, content: m.content }]);
        break;
    }
  }
  return { system: system.length > 0 ? system.join('\n\n') : undefined, messages: out };
}

/** True when the conversation is inside a tool loop: an assistant tool call after the last user message. */
export function insideToolLoop(messages: ChatMessage[]): boolean {
  let lastUser = -1;
  messages.forEach((m, i) => {
    if (m.role === 'user') lastUser = i;
  });
  return messages.slice(lastUser + 1).some((m) => m.role === 'assistant' && (m.tool_calls?.length ?? 0) > 0);
}

/** The thinking budget `req` asks for (0: none; never inside a tool loop, see the header). */
const thinkingBudget = (req: Pick<ProviderRequest, 'messages' | 'thinking'>): number => (req.thinking && !insideToolLoop(req.messages) ? THINKING_BUDGET[req.thinking] : 0);

/** The smallest thinking budget the API accepts. */
const MIN_THINKING_BUDGET = 1024;

/**
 * max_tokens and the thinking budget of `req`: the answer's room (maxOutputTokens) plus the thinking
 * budget, lowered to maxTotalOutputTokens by taking from the thinking first; thinking is left out
 * when less than the API's minimum budget would remain for it.
 */
function outputTokens(req: ProviderRequest): { max_tokens: number; thinking?: number } {
  const base = req.maxOutputTokens ?? ANTHROPIC_DEFAULT_MAX_TOKENS;
  const budget = thinkingBudget(req);
  const total = Math.min(base + budget, req.maxTotalOutputTokens ?? Infinity);
  if (budget > 0 && total - base >= MIN_THINKING_BUDGET) return { max_tokens: total, thinking: Math.min(budget, total - base) };
  return { max_tokens: Math.min(base, total) };
}

/** The request body sent to `{baseUrl}/v1/messages`. */
export function anthropicRequestBody(req: ProviderRequest): JsonObject {
  const { system, messages } = toAnthropicMessages(req.messages);
  const out = outputTokens(req);
  const body: JsonObject = { model: req.model, max_tokens: out.max_tokens };
  if (system !== undefined) body.system = system;
  body.messages = messages;
  if (req.tools.length > 0) {
    body.tools = req.tools.map((t) => ({ name: t.name, description: t.description, input_schema: t.input_schema }));
  }
  if (out.thinking !== undefined) body.thinking = { type: 'enabled', budget_tokens: out.thinking };
  body.stream = true;
  return body;
}

/** A tool_use block until its content_block_stop. */
interface ToolUseBlock {
  id: string;
  name: string;
  json: string;
}

function inputTokens(usage: JsonObject): number | undefined {
  const input = tokenCount(usage.input_tokens);
  if (input === undefined) return undefined;
  return input + (tokenCount(usage.cache_creation_input_tokens) ?? 0) + (tokenCount(usage.cache_read_input_tokens) ?? 0);
}

export class AnthropicProvider implements Provider {
  readonly id = 'anthropic' as const;
  private readonly baseUrl: string;

  constructor(private readonly config: AnthropicConfig) {
    this.baseUrl = config.baseUrl.replace(/\/+$/, '');
  }

  /** max_tokens covers the thinking budget too: the answer's room plus that budget. */
  outputBound(req: OutputBoundRequest): number {
    return req.maxOutputTokens + thinkingBudget(req);
  }

  async *stream(req: ProviderRequest): AsyncGenerator<StreamChunk> {
    const provider = this.id;
    const headers: Record<string, string> = { 'anthropic-version': ANTHROPIC_VERSION };
    if (this.config.apiKey) headers['x-api-key'] = this.config.apiKey;
    const res = await postStream({
      provider,
      url: `${this.baseUrl}/v1/messages`,
      headers,
      body: anthropicRequestBody(req),
      signal: req.signal,
      observe: req.observe,
    });
    const blocks = new Map<number, ToolUseBlock>();
    const limits = new AnswerLimits(provider, req.messages);
    let input: number | undefined;
    let output: number | undefined;
    let stopReason: FinishReason | undefined;
    let toolCalls = 0;
    const records = sseRecords(res.body, {
      provider,
      signal: req.signal,
      observe: req.observe,
      isTerminal: (r) => {
        if (r.event !== undefined) return r.event === 'message_stop';
        const p = parseJson(r.data);
        return isObject(p) && p.type === 'message_stop';
      },
    });
    try {
      for await (const record of records) {
        const payload = parseJson(record.data);
        if (!isObject(payload)) throw malformedError(provider, record.data);
        const type = str(payload.type) ?? record.event ?? '';
        switch (type) {
          case 'message_start': {
            const usage = isObject(payload.message) && isObject(payload.message.usage) ? payload.message.usage : {};
            input = inputTokens(usage) ?? input;
            output = tokenCount(usage.output_tokens) ?? output;
            break;
          }
          case 'content_block_start': {
            const index = num(payload.index) ?? blocks.size;
            const cb = isObject(payload.content_block) ? payload.content_block : {};
            const blockType = str(cb.type);
            if (blockType === 'tool_use') {
              limits.call();
              const block: ToolUseBlock = { id: str(cb.id) ?? '', name: str(cb.name) ?? '', json: '' };
              limits.write(block.id.length + block.name.length);
              if (isObject(cb.input) && Object.keys(cb.input).length > 0) {
                const json = JSON.stringify(cb.input);
                limits.arguments(0, json.length);
                block.json = json;
              }
              blocks.set(index, block);
            }
            const text = str(cb.text);
            if (blockType === 'text' && text) {
              limits.write(text.length);
              yield { type: 'text', text };
            }
            const thinking = str(cb.thinking);
            if (blockType === 'thinking' && thinking) yield { type: 'thinking', text: thinking };
            break;
          }
          case 'content_block_delta': {
            const delta = isObject(payload.delta) ? payload.delta : {};
            const dtype = str(delta.type);
            if (dtype === 'text_delta') {
              const text = str(delta.text);
              if (text) {
                limits.write(text.length);
                yield { type: 'text', text };
              }
            } else if (dtype === 'thinking_delta') {
              const text = str(delta.thinking);
              if (text) yield { type: 'thinking', text };
            } else if (dtype === 'input_json_delta') {
              const block = blocks.get(num(payload.index) ?? -1);
              const part = str(delta.partial_json);
              if (block && part) {
                limits.arguments(block.json.length, part.length);
                block.json += part;
              }
            }
            break;
          }
          case 'content_block_stop': {
            const index = num(payload.index) ?? -1;
            const block = blocks.get(index);
            blocks.delete(index);
            if (block) {
              toolCalls++;
              yield { type: 'tool_call', call: { id: block.id, name: block.name, arguments: block.json || '{}' } };
            }
            break;
          }
          case 'message_delta': {
            const delta = isObject(payload.delta) ? payload.delta : {};
            const reason = str(delta.stop_reason);
            if (reason) stopReason = mapStopReason(reason);
            const usage = isObject(payload.usage) ? payload.usage : {};
            input = inputTokens(usage) ?? input;
            output = tokenCount(usage.output_tokens) ?? output;
            break;
          }
          case 'message_stop': {
            if (input !== undefined || output !== undefined) {
              yield { type: 'usage', input_tokens: input ?? 0, output_tokens: output ?? 0 };
            }
            yield { type: 'done', finish_reason: stopReason ?? (toolCalls > 0 ? 'tool_calls' : 'stop') };
            return;
          }
          case 'error': {
            const e = isObject(payload.error) ? payload.error : {};
            const etype = str(e.type) ?? 'error';
            const message = str(e.message) ?? '';
            throw new ProviderError(kindForErrorType(etype), truncate(`stream error (${etype}): ${message}`), { provider });
          }
          default:
            // ping, and event types added after this was written.
            break;
        }
      }
    } catch (e) {
      // The call was made: the tokens message_start reported are spent even though the stream
      // failed (or was cancelled) before message_stop; the runtime counts them.
      if (input !== undefined || output !== undefined) yield { type: 'usage', input_tokens: input ?? 0, output_tokens: output ?? 0 };
      let held = 0;
      for (const b of blocks.values()) held += utf8Bytes(b.name) + utf8Bytes(b.json);
      throw withHeldBytes(e, held);
    }
  }
}
