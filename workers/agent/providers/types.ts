// The provider contract of the agent runtime: one streaming chat interface over OpenAI-compatible,
// Anthropic, Workers AI and the offline echo model. Providers turn wire-level streams into these
// chunks and wire-level failures into ProviderError values with a kind the runtime maps to NIP-XX
// error codes.

export type Thinking = 'low' | 'medium' | 'high' | 'max';

export interface ToolCall {
  id: string;
  name: string;
  /** The arguments as the JSON text the model produced (parsed and validated by the runtime). */
  arguments: string;
}

export type ChatMessage =
  | { role: 'system'; content: string }
  | { role: 'user'; content: string }
  | { role: 'assistant'; content: string; tool_calls?: ToolCall[] }
  | { role: 'tool'; tool_call_id: string; name: string; content: string };

export interface ToolSpec {
  name: string;
  description: string;
  /** JSON Schema of the tool's input object. */
  input_schema: Record<string, unknown>;
}

/** Hooks through which the runtime observes the wire (NIP-AO acp_write / acp_read telemetry). */
export interface WireObserver {
  /** The request body sent to the provider (before the network call). */
  request(body: unknown): void;
  /** A raw chunk of provider output (an SSE data line's payload). */
  response(raw: string): void;
}

export interface ProviderRequest {
  model: string;
  messages: ChatMessage[];
  tools: ToolSpec[];
  thinking?: Thinking;
  /** Room for the answer, in tokens (Anthropic adds the thinking budget on top, anthropic.ts). */
  maxOutputTokens?: number;
  /**
   * The most output tokens of the call, answer and thinking together: what the agent's token budget
   * and its owner's plan leave for it (runtime.ts). A provider lowers its own limits to it.
   * Unset: maxOutputTokens (and the thinking budget) alone.
   */
  maxTotalOutputTokens?: number;
  signal: AbortSignal;
  observe?: WireObserver;
}

export type StreamChunk =
  | { type: 'text'; text: string }
  | { type: 'thinking'; text: string }
  /** A complete tool call, assembled from the provider's deltas. */
  | { type: 'tool_call'; call: ToolCall }
  | { type: 'usage'; input_tokens: number; output_tokens: number }
  | { type: 'done'; finish_reason: 'stop' | 'tool_calls' | 'length' | 'other' };

export type ProviderErrorKind =
  /** 429 or a rate-limit error event: maps to RATE_LIMIT (retry_after from Retry-After). */
  | 'rate_limit'
  /** 5xx, 529/overloaded, a mid-stream error event, a truncated stream: maps to MODEL_UNAVAILABLE. */
  | 'unavailable'
  /** The provider refused the request (4xx other than 429), e.g. an unknown model or a bad key. */
  | 'rejected'
  /** The caller's AbortSignal fired. */
  | 'aborted';

export interface ProviderErrorDetails {
  status?: number;
  retryAfterSeconds?: number;
  provider: string;
  /**
   * UTF-8 bytes of output the provider had received and not passed on when the stream failed: the
   * names and arguments of tool calls it keeps until they are complete (emitted whole). The model
   * wrote them and they are billed; the runtime counts them (runtime.ts, CallTokens). Absent: none.
   */
  heldBytes?: number;
}

export class ProviderError extends Error {
  constructor(
    readonly kind: ProviderErrorKind,
    message: string,
    readonly details: ProviderErrorDetails,
  ) {
    super(message);
    this.name = 'ProviderError';
  }
}

/** `e` (what a provider's stream threw) saying that `heldBytes` of tool calls were kept unsent, when any were. */
export function withHeldBytes(e: unknown, heldBytes: number): unknown {
  if (!(e instanceof ProviderError) || heldBytes === 0) return e;
  return new ProviderError(e.kind, e.message, { ...e.details, heldBytes: (e.details.heldBytes ?? 0) + heldBytes });
}

export interface Provider {
  readonly id: 'openai' | 'anthropic' | 'workers-ai' | 'echo';
  /** Streams a completion. Failures are thrown as ProviderError (never other error types). */
  stream(req: ProviderRequest): AsyncIterable<StreamChunk>;
  /** The most output tokens (answer and thinking) a call of `req` can produce without maxTotalOutputTokens: what it may cost. */
  outputBound(req: OutputBoundRequest): number;
}

export type OutputBoundRequest = Pick<ProviderRequest, 'messages' | 'thinking'> & { maxOutputTokens: number };

/** maxOutputTokens lowered to maxTotalOutputTokens (providers whose output limit covers thinking too); undefined: neither is set. */
export function outputLimit(req: Pick<ProviderRequest, 'maxOutputTokens' | 'maxTotalOutputTokens'>): number | undefined {
  const limits = [req.maxOutputTokens, req.maxTotalOutputTokens].filter((n) => n !== undefined);
  return limits.length === 0 ? undefined : Math.min(...limits);
}
