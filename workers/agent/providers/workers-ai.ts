// Workers AI through its binding: `env.AI.run(model, {messages, stream: true, tools?, max_tokens?},
// {signal})` answers with a ReadableStream of SSE bytes. The binding is typed minimally
// (WorkersAiBinding) so that tests can hand in a stand-in whose `run` returns a stream with the
// real captured wire shape: that stream is this provider's network boundary.
//
// Wire shapes decoded (both appear on Workers AI, depending on the model):
// - native frames `data: {"response":"Hel","p":"…"}` (`p` is padding, ignored), top-level
//   `tool_calls` (complete legacy `{name, arguments}` entries or indexed OpenAI-style fragments,
//   a null "finalization" entry is skipped) and a final `{"response":"","usage":{…}}` frame;
// - OpenAI-format frames (`choices[0].delta`, as the OpenAI provider decodes them: text,
//   reasoning → thinking, tool-call fragments), followed by the same native usage frame;
// then `data: [DONE]` (terminal; a stream without it → 'truncated stream'). The answer limits
// (limits.ts) apply as in the OpenAI provider, to both shapes and to a non-streamed answer. Several usage reports
// arrive on OpenAI-format models (a zero-filled one among them): the largest total wins.
//
// Request mapping: messages as in the OpenAI provider, except that assistant content stays a
// string and tool results carry `name` too; tools in the OpenAI function format. `thinking` is not
// sent: Workers AI has no common reasoning knob (each model has its own), so it is ignored.
// Errors thrown by `run` carry Workers AI's internal code in their message: 3036 (daily allocation
// used up) → rate_limit; 3040 (out of capacity), 3007/3008 (timeouts) and errors without a known
// code → unavailable; 3003/3006/3023/3039/3041/3042/5004/5005/5007/5016/5018/5019 (bad input,
// unknown model, access refused) → rejected. A thrown error after the signal fired → aborted.

import { outputLimit, ProviderError, type OutputBoundRequest, type Provider, type ProviderRequest, type StreamChunk } from './types.js';
import { abortedError, isObject, str, truncate, type JsonObject } from './http.js';
import { chatCompletionPayloads, ChatCompletionsDecoder, functionTools, toChatMessages, type MessageDialect } from './openai.js';
import { errorMessage } from '../../../src/shared/errors.js';
import { AnswerLimits } from './limits.js';

/** The part of the Workers AI binding (`Ai`) this provider uses. */
export interface WorkersAiBinding {
  run(model: string, input: object, options?: object): Promise<ReadableStream | object>;
}

const RATE_LIMIT_CODES = new Set([3036]);
const REJECTED_CODES = new Set([3003, 3006, 3023, 3039, 3041, 3042, 5004, 5005, 5007, 5016, 5018, 5019]);

/** The ProviderError of an exception thrown by `AI.run`. */
export function workersAiError(e: unknown): ProviderError {
  const message = errorMessage(e);
  const provider = 'workers-ai';
  const code = /\b([35]\d{3})\b/.exec(message);
  const n = code ? Number(code[1]) : undefined;
  let kind: ProviderError['kind'] = 'unavailable';
  if (n !== undefined && RATE_LIMIT_CODES.has(n)) kind = 'rate_limit';
  else if (n !== undefined && REJECTED_CODES.has(n)) kind = 'rejected';
  else if (n === undefined && /rate.?limit|too many requests/i.test(message)) kind = 'rate_limit';
  return new ProviderError(kind, truncate(message || 'Workers AI error'), { provider });
}

/** Workers AI reads OpenAI's messages, except that assistant content stays a string and tool results name their tool. */
const WORKERS_AI_DIALECT: MessageDialect = { emptyCallContent: '', toolResultName: true };

/** The `inputs` object passed to `AI.run` (the model is the first argument). */
export function workersAiInput(req: ProviderRequest): JsonObject {
  const input: JsonObject = { messages: toChatMessages(req.messages, WORKERS_AI_DIALECT), stream: true };
  if (req.tools.length > 0) input.tools = functionTools(req.tools);
  const limit = outputLimit(req);
  if (limit !== undefined) input.max_tokens = limit;
  return input;
}

export class WorkersAiProvider implements Provider {
  readonly id = 'workers-ai' as const;

  constructor(private readonly ai: WorkersAiBinding) {}

  outputBound(req: OutputBoundRequest): number {
    return req.maxOutputTokens;
  }

  async *stream(req: ProviderRequest): AsyncGenerator<StreamChunk> {
    const provider = this.id;
    if (req.signal.aborted) throw abortedError(provider);
    const input = workersAiInput(req);
    req.observe?.request({ model: req.model, ...input });
    let result: ReadableStream | object;
    try {
      result = await this.ai.run(req.model, input, { signal: req.signal });
    } catch (e) {
      if (req.signal.aborted) throw abortedError(provider);
      throw workersAiError(e);
    }
    const decoder = new ChatCompletionsDecoder(new AnswerLimits(provider, req.messages));
    try {
      if (!(result instanceof ReadableStream)) {
        // A model that does not stream answers with one object ({response, tool_calls?, usage?}).
        req.observe?.response(JSON.stringify(result));
        if (isObject(result)) yield* this.frame(decoder, result);
      } else {
        for await (const payload of chatCompletionPayloads(result as ReadableStream<Uint8Array>, provider, req)) yield* this.frame(decoder, payload);
      }
    } catch (e) {
      throw decoder.failure(e);
    }
    yield* decoder.finish();
  }

  /** One native or OpenAI-format frame. */
  private frame(decoder: ChatCompletionsDecoder, payload: JsonObject): StreamChunk[] {
    const out: StreamChunk[] = [];
    const text = str(payload.response);
    if (text) {
      decoder.limits.write(text.length);
      out.push({ type: 'text', text });
    }
    if (Array.isArray(payload.tool_calls)) {
      const entries = payload.tool_calls.filter(isObject);
      decoder.toolCallDeltas(entries.filter((e) => isObject(e.function) || e.index !== undefined));
      for (const entry of entries) {
        if (!(isObject(entry.function) || entry.index !== undefined)) {
          const name = str(entry.name);
          if (!name) continue;
          const args = entry.arguments;
          const id = str(entry.id);
          decoder.completeCall(name, typeof args === 'string' ? args : JSON.stringify(args ?? {}), id);
        }
      }
    }
    const finish = str(payload.finish_reason);
    if (finish) decoder.noteFinishReason(finish);
    out.push(...decoder.accept(payload));
    return out;
  }
}
