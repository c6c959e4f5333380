// The tool contract of the agent runtime: tools the agent itself executes (built-ins and tools of
// configured remote MCP servers), offered to the model and advertised in ai.info (info.ts: the
// names, and for a public agent `tool_schemas`).

export interface ToolDefinition {
  name: string;
  /** What the model is told. */
  description: string;
  /** What ai.info publishes instead, when the model's description holds what strangers may not read (web_fetch's hosts). */
  published_description?: string;
  schema_version: number;
  requires_approval: boolean;
  /** JSON Schema of the input object. */
  input_schema: Record<string, unknown>;
}

/** NIP-XX ai.tool_call `output` shape. */
export interface ToolOutput {
  stdout: string;
  stderr: string;
  exit_code: number;
}

/**
 * A tool call's result. A failure's `error` is what the model reads (and so whoever prompted the
 * run); its `detail`, when there is one, is for the agent's owner alone (the run's NIP-AO
 * `tool_detail` frame, run-driver.ts): e.g. the reason of the deployment's outbound policy that the
 * model is told only generically (web-fetch.ts).
 */
export type ToolResult = { ok: true; output: ToolOutput } | { ok: false; error: string; output?: ToolOutput; detail?: string };

/** A call of a tool the agent does not have (NIP-XX UNSUPPORTED_FEATURE); `detail` is for the owner alone. */
export interface UnknownTool {
  ok: false;
  unknown: true;
  error: string;
  detail?: string;
}

/** The arguments of a tool call: a JSON object. */
export type ToolArgs = Record<string, unknown>;

/**
 * A tool. Its arguments are checked once, by the registry, against `definition.input_schema`
 * (tools/args.ts); a built-in tool's `A` is the type of the zod schema that input schema is derived
 * from, so `run` trusts its input. Failures are returned as values, never thrown.
 */
export interface Tool<A extends ToolArgs = ToolArgs> {
  readonly definition: ToolDefinition;
  run(args: A, ctx: { signal: AbortSignal }): Promise<ToolResult>;
}
