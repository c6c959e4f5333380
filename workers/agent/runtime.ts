// One NIP-XX run, independent of transport: negotiates the model, streams the provider's output
// as coalesced deltas, runs the tool loop (bounded in steps and time), and returns exactly one
// terminal outcome. The Agent Durable Object feeds it a validated prompt and turns its callbacks
// into encrypted events.

import { ok, type Result } from '../../src/shared/errors.js';
import { utf8Bytes } from '../../src/shared/json-cut.js';
import { THINKING_LEVELS, type ErrorCode, type Prompt } from '../../src/shared/nip-xx.js';
import type { AgentLimits } from './config.js';
import { ProviderError, type ChatMessage, type Provider, type StreamChunk, type Thinking, type ToolCall, type ToolSpec, type WireObserver } from './providers/types.js';
import type { ToolDefinition, ToolOutput, ToolResult, UnknownTool } from './tools/types.js';
import { shownStatusInfo, shownToolName } from './event-fit.js';
import { estimateTokens } from './sessions.js';

/** Delta events are emitted for the first text at once, then when this much text is buffered or this long after the previous one. */
export const DELTA_FLUSH_CHARS = 256;
export const DELTA_FLUSH_MS = 50;
/**
 * A delta event carries at most this many UTF-16 units (a provider chunk may be far larger): at most
 * 24 KiB of JSON even if every unit were escaped, so that each fits one NIP-44 message, also inside
 * a gift wrap; longer text goes out as several deltas.
 */
export const DELTA_MAX_UNITS = 4096;

/**
 * The one outcome of a run. An error's `message` goes to the client (who may be a stranger): it
 * never carries upstream text; `detail` (provider or tool error text, which may name internal
 * hosts, or the figures and reasons of a limit's refusal that are the owner's: told-to.ts) goes
 * only to the owner: through NIP-AO, and as the message of its own run's 25805 (outbox.ts).
 */
export type Terminal =
  | { type: 'response'; text: string; usage: Usage; model: string }
  | { type: 'error'; code: ErrorCode; message: string; retry_after?: number; details?: Record<string, unknown>; detail?: string };

/** The terminal of a run its client (or the owner) cancelled. */
export const RUN_CANCELLED: Terminal = { type: 'error', code: 'CANCELLED', message: 'run cancelled' };

export interface Usage {
  input_tokens: number;
  output_tokens: number;
  /** Some of the tokens are the agent's estimate: a model call's stream ended without its usage report (CallTokens). */
  estimated?: true;
}

export interface ToolRunner {
  definitions(): ToolDefinition[];
  /** A tool's result, or UnknownTool: the run ends UNSUPPORTED_FEATURE, with its `detail` for the owner. */
  run(name: string, args: unknown, signal: AbortSignal): Promise<ToolResult | UnknownTool>;
}

export interface RunSink {
  status(state: 'thinking' | 'tool_use' | 'done', progress: number, info?: string): Promise<void>;
  delta(text: string, seq: number): Promise<void>;
  /**
   * A tool call's ai.tool_call event (`t`); `detail`, with a failed result that has one, is the
   * agent's owner's alone (ToolResult): it is never in `t`, nor in what the model reads.
   */
  toolCall(
    t: {
      name: string;
      phase: 'start' | 'result';
      arguments?: Record<string, unknown>;
      output?: ToolOutput;
      success?: boolean;
      duration_ms?: number;
    },
    detail?: string,
  ): Promise<void>;
}

/** Why a model call is not made: the run ends with this error (`code` RATE_LIMIT when absent; `detail`: the owner's, as a Terminal's). */
export interface ModelCallRefusal {
  code?: ErrorCode;
  message: string;
  detail?: string;
  retry_after?: number;
  details?: Record<string, unknown>;
}

export interface RunInput {
  prompt: Prompt;
  model: string;
  thinking?: Thinking;
  systemPrompt?: string;
  history: ChatMessage[];
  provider: Provider;
  tools: ToolRunner;
  limits: AgentLimits;
  sink: RunSink;
  /** The run's token counts, added to as each model call ends (so they are known whatever way the run ends). */
  usage: Usage;
  signal: AbortSignal;
  observe?: WireObserver;
  now?: () => number;
  /**
   * Asked before each model call with the input it would send, estimated (estimateInput), and the
   * most output it could produce (Provider.outputBound): the output tokens the call may use (at most
   * that bound; less lowers the call's limits, maxTotalOutputTokens), or a refusal (the day's token
   * budget is used, or this call would pass it; the owner is no longer allowed), which ends the run
   * with its code (RATE_LIMIT when it names none) instead.
   */
  beforeModelCall?: (estimatedInput: number, outputBound: number) => Result<number, ModelCallRefusal>;
  /** Told after each model call that went out, however it ended: its tokens are in `usage` by then. */
  afterModelCall?: () => void;
}

/** Models the agent accepts for a prompt: the requested one, else the first supported fallback. */
export function negotiateModel(
  prompt: Pick<Prompt, 'model' | 'fallback_models'>,
  supported: readonly string[],
  defaultModel: string,
): { ok: true; model: string } | { ok: false; message: string } {
  if (!prompt.model) return { ok: true, model: defaultModel };
  if (supported.includes(prompt.model)) return { ok: true, model: prompt.model };
  const fallback = prompt.fallback_models?.find((m) => supported.includes(m));
  if (fallback) return { ok: true, model: fallback };
  return { ok: false, message: `model ${JSON.stringify(prompt.model)} is not supported; supported: ${supported.join(', ')}` };
}

/**
 * The thinking level a run uses: what the prompt asks for, at most the owner's level (a prompt may
 * lower it, never raise it), as thinking costs the owner tokens. None configured = no thinking
 * setting is sent: a model that reasons by default (OpenAI's o-series and gpt-5) still reasons at
 * its own default effort, within its output limit (the call's allowance, which a call cut off
 * counts whole: CallTokens).
 */
export function allowedThinking(requested: Thinking | undefined, configured: Thinking | undefined): Thinking | undefined {
  if (!configured || !requested) return configured;
  return THINKING_LEVELS.indexOf(requested) < THINKING_LEVELS.indexOf(configured) ? requested : configured;
}

/** What the client is told about a provider failure (the provider's own text goes to the owner only). */
export const PROVIDER_MESSAGES = {
  rate_limit: 'the model provider is rate limiting this agent; retry later',
  unavailable: 'the model provider is unavailable; retry later',
  rejected: 'the model provider refused the request; the agent owner can see why',
} as const;

/** Maps a provider failure to the NIP-XX error it becomes. */
export function providerFailure(e: ProviderError): Terminal {
  const details = { provider: e.details.provider, ...(e.details.status ? { status: e.details.status } : {}) };
  const detail = e.message;
  switch (e.kind) {
    case 'rate_limit':
      return { type: 'error', code: 'RATE_LIMIT', message: PROVIDER_MESSAGES.rate_limit, retry_after: Math.max(1, Math.ceil(e.details.retryAfterSeconds ?? 30)), details, detail };
    case 'unavailable':
      return { type: 'error', code: 'MODEL_UNAVAILABLE', message: PROVIDER_MESSAGES.unavailable, retry_after: 30, details, detail };
    case 'rejected':
      return { type: 'error', code: 'MODEL_UNAVAILABLE', message: PROVIDER_MESSAGES.rejected, details, detail };
    case 'aborted':
      return RUN_CANCELLED;
  }
}

/** Coalesces text into delta events (seq contiguous from 0). */
class DeltaBuffer {
  private buffer = '';
  private seq = 0;
  private lastFlush: number;

  constructor(
    private readonly sink: RunSink,
    private readonly now: () => number,
  ) {
    this.lastFlush = now();
  }

  async push(text: string): Promise<void> {
    this.buffer += text;
    // The first text goes out at once (time to first delta); later text is coalesced.
    if (this.seq === 0 || this.buffer.length >= DELTA_FLUSH_CHARS || this.now() - this.lastFlush >= DELTA_FLUSH_MS) await this.flush();
  }

  async flush(): Promise<void> {
    if (!this.buffer) return;
    let text = this.buffer;
    this.buffer = '';
    this.lastFlush = this.now();
    while (text) {
      let end = Math.min(text.length, DELTA_MAX_UNITS);
      // never between the two halves of a surrogate pair
      const last = text.charCodeAt(end - 1);
      if (end < text.length && last >= 0xd800 && last <= 0xdbff) end--;
      await this.sink.delta(text.slice(0, end), this.seq++);
      text = text.slice(end);
    }
  }

  get count(): number {
    return this.seq;
  }
}

/** Tokens of `bytes` bytes (UTF-8) at 4 bytes per token, rounded up. */
const bytesTokens = (bytes: number): number => Math.ceil(bytes / 4);

/** The estimated tokens of model output `text`: its UTF-8 bytes at 4 per token, rounded up. */
export const estimateOutput = (text: string): number => bytesTokens(utf8Bytes(text));

/**
 * The estimated input of a model call: its messages as the history is estimated (estimateTokens: 4
 * bytes of UTF-8 per token, rounded up, plus 4 per message) and its tool definitions' JSON at 4
 * bytes per token.
 */
export function estimateInput(messages: readonly ChatMessage[], tools: readonly ToolSpec[]): number {
  return messages.reduce((n, m) => n + estimateTokens(m), 0) + (tools.length > 0 ? estimateOutput(JSON.stringify(tools)) : 0);
}

/**
 * The tokens of one model call. A stream that ends with its usage report counts what the provider
 * reported. Otherwise the call is counted by estimate, so that a call cut short is never free:
 * - its input: what the provider reported (Anthropic's message_start), else estimateInput;
 * - its output, when the stream ended (done) without a report (a server that sends none): the
 *   larger of what it reported and what it streamed (text, thinking, tool calls' names and
 *   arguments) at 4 bytes of UTF-8 per token;
 * - its output, when the call was cut off after its request went out (cancelled, timed out, failed
 *   mid-stream, before or after any byte came back): at least the output allowance it held
 *   (`allowedOutput`, at most its bound), as the provider bills what it generated and the agent
 *   never saw: reasoning that is not streamed (OpenAI's reasoning models), tool calls it keeps until
 *   they are complete (whose bytes received come in the error, ProviderError `heldBytes`); and at
 *   least what was received at 4 bytes per token.
 * Nothing when the request never went out (the run was cancelled first) or the provider refused it
 * with an HTTP error status (nothing was generated).
 */
class CallTokens {
  private reported: { input_tokens: number; output_tokens: number } | undefined;
  private sent = false;
  private done = false;
  private refused = false;
  private outputBytes = 0;

  constructor(
    private readonly estimatedInput: number,
    private readonly allowedOutput: number,
  ) {}

  /** The request went out (Provider observe.request). */
  requested(): void {
    this.sent = true;
  }

  /** A chunk of the call's stream. */
  note(chunk: StreamChunk): void {
    if (chunk.type === 'text' || chunk.type === 'thinking') this.outputBytes += utf8Bytes(chunk.text);
    else if (chunk.type === 'tool_call') this.outputBytes += utf8Bytes(chunk.call.name) + utf8Bytes(chunk.call.arguments);
    else if (chunk.type === 'usage') {
      const r = this.reported ?? { input_tokens: 0, output_tokens: 0 };
      this.reported = { input_tokens: r.input_tokens + chunk.input_tokens, output_tokens: r.output_tokens + chunk.output_tokens };
    } else this.done = true;
  }

  /** The call failed with `e`. */
  failed(e: unknown): void {
    if (!(e instanceof ProviderError)) return;
    this.refused = e.details.status !== undefined;
    this.outputBytes += e.details.heldBytes ?? 0;
  }

  /** Adds the call's tokens to the run's. */
  addTo(usage: Usage): void {
    if (this.reported && this.done) {
      usage.input_tokens += this.reported.input_tokens;
      usage.output_tokens += this.reported.output_tokens;
      return;
    }
    if (this.refused || (!this.sent && !this.reported)) return;
    const streamed = Math.max(this.reported?.output_tokens ?? 0, bytesTokens(this.outputBytes));
    usage.input_tokens += this.reported?.input_tokens ?? this.estimatedInput;
    usage.output_tokens += this.done ? streamed : Math.max(streamed, this.allowedOutput);
    usage.estimated = true;
  }
}

const parseArgs = (raw: string): Record<string, unknown> | undefined => {
  try {
    const v: unknown = JSON.parse(raw || '{}');
    return typeof v === 'object' && v !== null && !Array.isArray(v) ? (v as Record<string, unknown>) : undefined;
  } catch {
    return undefined;
  }
};

/** What the model reads back for a tool call over max_tool_calls_per_step (not run). */
export const skippedCallContent = (perStep: number): string => `error: not run: at most ${perStep} tool calls per step`;

/** What the model reads back from a tool: its output, and its errors and exit code when there are any. */
export function toolMessageContent(error: string | undefined, output: ToolOutput): string {
  if (error !== undefined) return `error: ${error}`;
  const parts = [output.stdout];
  if (output.stderr) parts.push(`stderr: ${output.stderr}`);
  if (output.exit_code !== 0) parts.push(`exit code: ${output.exit_code}`);
  return parts.filter((p) => p !== '').join('\n');
}

/**
 * Runs the prompt to its one terminal outcome; `transcript` holds the turns to keep in history. The
 * tokens of each model call go into `input.usage` when the call ends, as the provider reported them or
 * estimated (CallTokens), whatever way it ended: a run that fails, or throws, spent them all the same.
 */
export async function executeRun(input: RunInput): Promise<{ terminal: Terminal; transcript: ChatMessage[] }> {
  const now = input.now ?? Date.now;
  const deltas = new DeltaBuffer(input.sink, now);
  const transcript: ChatMessage[] = [{ role: 'user', content: input.prompt.message }];
  const messages: ChatMessage[] = [
    ...(input.systemPrompt ? [{ role: 'system' as const, content: input.systemPrompt }] : []),
    ...input.history,
    ...transcript,
  ];
  const usage = input.usage;
  const toolSpecs = input.tools.definitions().map((d) => ({ name: d.name, description: d.description, input_schema: d.input_schema }));
  let finalText = '';
  await input.sink.status('thinking', 0);
  for (let step = 0; ; step++) {
    if (step >= input.limits.max_tool_steps) {
      return { terminal: { type: 'error', code: 'TOOL_ERROR', message: `the tool loop exceeded ${input.limits.max_tool_steps} steps` }, transcript };
    }
    // The call's input is known before it goes out: the budget is checked with it (a tool result may
    // be 256 KiB, and a step may bring 16 of them), not only with what the earlier calls cost.
    const estimatedInput = estimateInput(messages, toolSpecs);
    const outputBound = input.provider.outputBound({ messages, thinking: input.thinking, maxOutputTokens: input.limits.max_output_tokens });
    const allowed = input.beforeModelCall?.(estimatedInput, outputBound) ?? ok(outputBound);
    if (!allowed.ok) {
      const refused = allowed.error;
      const retry = refused.retry_after !== undefined ? { retry_after: refused.retry_after } : {};
      const forOwner = refused.detail !== undefined ? { detail: refused.detail } : {};
      return { terminal: { type: 'error', code: refused.code ?? 'RATE_LIMIT', message: refused.message, ...retry, ...(refused.details ? { details: refused.details } : {}), ...forOwner }, transcript };
    }
    let text = '';
    const calls: ToolCall[] = [];
    const tokens = new CallTokens(estimatedInput, Math.max(0, Math.min(allowed.value, outputBound)));
    const observe = input.observe;
    try {
      for await (const chunk of input.provider.stream({
        model: input.model,
        messages,
        tools: toolSpecs,
        thinking: input.thinking,
        maxOutputTokens: input.limits.max_output_tokens,
        ...(allowed.value < outputBound ? { maxTotalOutputTokens: allowed.value } : {}),
        signal: input.signal,
        // Every provider tells its observer just before the request goes out: a call the run was
        // cancelled before costs nothing.
        observe: {
          request: (body) => {
            tokens.requested();
            observe?.request(body);
          },
          response: (raw) => observe?.response(raw),
        },
      })) {
        tokens.note(chunk);
        if (chunk.type === 'text') {
          text += chunk.text;
          await deltas.push(chunk.text);
        } else if (chunk.type === 'tool_call') calls.push(chunk.call);
      }
    } catch (e) {
      tokens.failed(e);
      if (input.signal.aborted) return { terminal: RUN_CANCELLED, transcript };
      if (e instanceof ProviderError) return { terminal: providerFailure(e), transcript };
      throw e;
    } finally {
      // However the call ended (also a failure inside the agent): the run spent its tokens.
      tokens.addTo(usage);
      input.afterModelCall?.();
    }
    await deltas.flush();
    const assistant: ChatMessage = { role: 'assistant', content: text, ...(calls.length ? { tool_calls: calls } : {}) };
    messages.push(assistant);
    transcript.push(assistant);
    finalText += text;
    if (calls.length === 0) break;
    // At most max_tool_calls_per_step calls of one response run: one response can ask for hundreds
    // (bounded only by max_output_tokens), each a tool run and two 25804 events. A further call is
    // not run and has no events; the model is told in its tool message (every call must be answered).
    const perStep = input.limits.max_tool_calls_per_step;
    const running = calls.slice(0, perStep);
    // The model names the tools: what the client is shown of a name is bounded (event-fit.ts);
    // the tool is looked up and the model told by the name as written.
    await input.sink.status('tool_use', Math.min(90, 10 + step * 10), shownStatusInfo(running.map((c) => shownToolName(c.name)).join(', ')));
    for (const call of running) {
      const args = parseArgs(call.arguments);
      const name = shownToolName(call.name);
      await input.sink.toolCall({ name, phase: 'start', arguments: args ?? {} });
      const started = now();
      const result: ToolResult | UnknownTool = args
        ? await input.tools.run(call.name, args, input.signal)
        : { ok: false, error: 'tool arguments are not a JSON object' };
      const duration_ms = Math.max(0, Math.round(now() - started));
      if (input.signal.aborted) return { terminal: RUN_CANCELLED, transcript };
      if (!result.ok && 'unknown' in result) {
        await input.sink.toolCall({ name, phase: 'result', success: false, duration_ms });
        const forOwner = result.detail !== undefined ? { detail: result.detail } : {};
        return { terminal: { type: 'error', code: 'UNSUPPORTED_FEATURE', message: `unknown tool ${JSON.stringify(name)}`, ...forOwner }, transcript };
      }
      const output: ToolOutput = result.ok ? result.output : (result.output ?? { stdout: '', stderr: result.error, exit_code: 1 });
      const success = result.ok && output.exit_code === 0;
      await input.sink.toolCall({ name, phase: 'result', output, success, duration_ms }, result.ok ? undefined : result.detail);
      const content = toolMessageContent(result.ok ? undefined : result.error, output);
      const toolMessage: ChatMessage = { role: 'tool', tool_call_id: call.id, name: call.name, content };
      messages.push(toolMessage);
      transcript.push(toolMessage);
    }
    for (const call of calls.slice(perStep)) {
      const toolMessage: ChatMessage = { role: 'tool', tool_call_id: call.id, name: call.name, content: skippedCallContent(perStep) };
      messages.push(toolMessage);
      transcript.push(toolMessage);
    }
    await input.sink.status('thinking', Math.min(95, 20 + step * 10));
  }
  if (!finalText.trim()) return { terminal: { type: 'error', code: 'EMPTY_RESPONSE', message: 'the model produced no text' }, transcript };
  await input.sink.status('done', 100);
  const reported = { input_tokens: usage.input_tokens, output_tokens: usage.output_tokens, ...(usage.estimated ? { estimated: true as const } : {}) };
  return { terminal: { type: 'response', text: finalText, usage: reported, model: input.model }, transcript };
}
