// The offline model "echo": the default when no provider is configured, so that `npm start`, the
// demo and the tests run with no account and no network. Deterministic:
// - it answers `echo: <text of the last user message>` in up to 4 text chunks (split on word
//   boundaries), then usage, then done 'stop';
// - when the last user message is exactly `/tool <name> [<json-args>]` (trimmed) and no tool result
//   has come back since, it asks for that tool instead: one tool_call {id: `echo_call_<n>` with n =
//   the number of messages, name, arguments: the args text as given, "{}" when absent}, done
//   'tool_calls'. The tool need not be among req.tools and the args are not checked, so the
//   runtime's own validation paths (unknown tool, bad arguments) can be exercised offline;
// - after tool results (the messages after the last assistant tool call are tool messages), it
//   answers with the tool output text verbatim (several results joined with "\n"), no prefix;
// - usage is what the runtime estimates everywhere else (runtime.ts: 4 bytes of UTF-8 per token,
//   rounded up): input = estimateInput of the request (messages, tool results and tool-call
//   arguments included, plus 4 per message, and the tool definitions), output = estimateOutput of the
//   answer text (a tool result it echoes too) or of the tool call's name and arguments; so that a
//   text without whitespace (a fetched page) costs what its size does, not one token;
// - maxOutputTokens (lowered to maxTotalOutputTokens) cuts the answer to that many tokens' bytes
//   (4 each, whole characters), with done 'length';
// - thinking is ignored; the signal is checked before every chunk (→ ProviderError 'aborted').
// observe.request() gets {model, messages}; observe.response() gets each chunk as JSON.

import { outputLimit, type ChatMessage, type OutputBoundRequest, type Provider, type ProviderRequest, type StreamChunk } from './types.js';
import { abortedError } from './http.js';
import { estimateInput, estimateOutput } from '../runtime.js';
import { cutJsonString } from '../../../src/shared/json-cut.js';

export const ECHO_PREFIX = 'echo: ';
const MAX_CHUNKS = 4;
const TOOL_COMMAND = /^\/tool\s+(\S+)(?:\s+([\s\S]*\S))?$/;
/** The UTF-8 bytes of one token, as the runtime estimates (estimateOutput). */
const BYTES_PER_TOKEN = 4;

/** Splits text on word boundaries into at most `max` contiguous pieces that join back to it. */
export function splitChunks(text: string, max = MAX_CHUNKS): string[] {
  const words = text.match(/\s*\S+\s*|\s+/g) ?? [];
  if (words.length === 0) return text === '' ? [] : [text];
  const n = Math.min(max, words.length);
  const out: string[] = [];
  for (let i = 0; i < n; i++) {
    const from = Math.floor((i * words.length) / n);
    const to = Math.floor(((i + 1) * words.length) / n);
    out.push(words.slice(from, to).join(''));
  }
  return out;
}

/** The tool results that answer the latest assistant tool call, when they are the conversation's tail. */
function pendingToolResults(messages: ChatMessage[]): string[] | undefined {
  const tail: string[] = [];
  for (let i = messages.length - 1; i >= 0; i--) {
    const m = messages[i];
    if (!m) break;
    if (m.role === 'tool') {
      tail.unshift(m.content);
      continue;
    }
    return m.role === 'assistant' && (m.tool_calls?.length ?? 0) > 0 && tail.length > 0 ? tail : undefined;
  }
  return undefined;
}

export class EchoProvider implements Provider {
  readonly id = 'echo' as const;

  outputBound(req: OutputBoundRequest): number {
    return req.maxOutputTokens;
  }

  async *stream(req: ProviderRequest): AsyncGenerator<StreamChunk> {
    const provider = this.id;
    const emit = (chunk: StreamChunk): StreamChunk => {
      if (req.signal.aborted) throw abortedError(provider);
      req.observe?.response(JSON.stringify(chunk));
      return chunk;
    };
    if (req.signal.aborted) throw abortedError(provider);
    req.observe?.request({ model: req.model, messages: req.messages });
    const input = estimateInput(req.messages, req.tools);

    const results = pendingToolResults(req.messages);
    const lastUser = [...req.messages].reverse().find((m) => m.role === 'user');
    const command = results === undefined && lastUser ? TOOL_COMMAND.exec(lastUser.content.trim()) : null;
    if (command) {
      const name = command[1] ?? '';
      const args = command[2] ?? '{}';
      yield emit({ type: 'tool_call', call: { id: `echo_call_${req.messages.length}`, name, arguments: args } });
      yield emit({ type: 'usage', input_tokens: input, output_tokens: estimateOutput(name + args) });
      yield emit({ type: 'done', finish_reason: 'tool_calls' });
      return;
    }

    let text = results !== undefined ? results.join('\n') : `${ECHO_PREFIX}${lastUser?.content ?? ''}`;
    let finish: 'stop' | 'length' = 'stop';
    const limit = outputLimit(req);
    if (limit !== undefined && estimateOutput(text) > limit) {
      text = cutJsonString(text, limit * BYTES_PER_TOKEN, 0);
      finish = 'length';
    }
    for (const piece of splitChunks(text)) {
      await Promise.resolve(); // a real suspension point between chunks, like a network stream
      yield emit({ type: 'text', text: piece });
    }
    yield emit({ type: 'usage', input_tokens: input, output_tokens: estimateOutput(text) });
    yield emit({ type: 'done', finish_reason: finish });
  }
}
