// The tool contract of the agent runtime: tools the agent itself executes (built-ins and tools of
// configured remote MCP servers), advertised in ai.info `tool_schemas` and offered to the model.

export interface ToolDefinition {
  name: string;
  description: string;
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

export type ToolResult = { ok: true; output: ToolOutput } | { ok: false; error: string; output?: ToolOutput };

export interface Tool {
  readonly definition: ToolDefinition;
  /** Runs the tool. Bad arguments and failures are returned as values, never thrown. */
  run(args: unknown, ctx: { signal: AbortSignal }): Promise<ToolResult>;
}
