// What a model answer may hold, against a hostile or broken provider (the threat model's "huge or
// endless streams"): everything a provider streams is kept in the agent object's memory (the
// tool calls until the answer ends, the text in the run's messages and history), so without caps
// one stream could push the object past its 128 MB and end every run in flight. The figures are
// far above what a real provider sends (docs/AGENTS.md, "Provider limits"); past one, the call
// fails with a ProviderError (unavailable) naming it. One SSE event is capped in sse.ts.
//
// - A tool call's arguments: at most MAX_TOOL_ARGUMENTS_CHARS characters (UTF-16 units), the
//   figure of an MCP tool's result: `a tool call's arguments over 262144 characters`.
// - Tool calls of one answer: at most MAX_TOOL_CALLS_PER_ANSWER (the runtime runs at most
//   max_tool_calls_per_step, at most 64, and answers each other one): `over 128 tool calls in one
//   answer`.
// - What the model writes in one run (its answers' text, tool names and ids, tool arguments; not
//   thinking, which is passed on and not kept): at most MAX_RUN_OUTPUT_CHARS characters, counted
//   over the run's earlier answers too (the assistant messages after the last user message of the
//   request, so no state is kept between calls): `the model wrote over 2097152 characters in this run`.

import { MAX_RUN_OUTPUT_CHARS } from '../../../src/shared/nip-xx.js';
import { ProviderError, type ChatMessage } from './types.js';

export const MAX_TOOL_ARGUMENTS_CHARS = 262_144;
export const MAX_TOOL_CALLS_PER_ANSWER = 128;
/** Defined with the protocol (src/shared/nip-xx.ts): clients bound what they keep of a run's deltas by it. */
export { MAX_RUN_OUTPUT_CHARS };

/** The characters the model wrote in the run so far: its answers after the last user message. */
export function writtenThisRun(messages: readonly ChatMessage[]): number {
  let written = 0;
  for (const m of messages) {
    if (m.role === 'user') written = 0;
    else if (m.role === 'assistant') {
      written += m.content.length;
      for (const c of m.tool_calls ?? []) written += c.id.length + c.name.length + c.arguments.length;
    }
  }
  return written;
}

/** The limits of one answer: each method throws the ProviderError of the limit it would pass. */
export class AnswerLimits {
  private left: number;
  private calls = 0;

  constructor(
    private readonly provider: string,
    messages: readonly ChatMessage[],
  ) {
    this.left = MAX_RUN_OUTPUT_CHARS - writtenThisRun(messages);
  }

  /** `chars` more characters of text, a tool name or id. */
  write(chars: number): void {
    this.left -= chars;
    if (this.left < 0) throw this.failure(`the model wrote over ${MAX_RUN_OUTPUT_CHARS} characters in this run`);
  }

  /** One more tool call in this answer. */
  call(): void {
    this.calls++;
    if (this.calls > MAX_TOOL_CALLS_PER_ANSWER) throw this.failure(`over ${MAX_TOOL_CALLS_PER_ANSWER} tool calls in one answer`);
  }

  /** `added` characters appended to a call's arguments of `current` characters. */
  arguments(current: number, added: number): void {
    if (current + added > MAX_TOOL_ARGUMENTS_CHARS) throw this.failure(`a tool call's arguments over ${MAX_TOOL_ARGUMENTS_CHARS} characters`);
    this.write(added);
  }

  private failure(message: string): ProviderError {
    return new ProviderError('unavailable', message, { provider: this.provider });
  }
}
