// ToolResult builders shared by the agent's tools, so that every tool reports the same way:
//   ok: true   the tool ran to completion; output.exit_code 0 = success, 1 = the tool itself
//              reported a failure (HTTP status >= 400, an MCP result with isError)
//   ok: false  the call did not complete (bad arguments, a refused URL, a parse or evaluation
//              error, a timeout, a transport failure); `error` is the message for the model and
//              `output` carries the same text in stderr with exit_code 1, so the runtime can
//              publish every ai.tool_call result with one code path; `detail` (optional) is what
//              the agent's owner alone is told besides (types.ts ToolResult).

import type { ToolOutput, ToolResult } from './types.js';

export const succeed = (stdout: string, stderr = '', exit_code = 0): ToolResult => ({
  ok: true,
  output: { stdout, stderr, exit_code },
});

export const fail = (error: string, detail?: string): ToolResult => ({
  ok: false,
  error,
  output: { stdout: '', stderr: error, exit_code: 1 } satisfies ToolOutput,
  ...(detail === undefined ? {} : { detail }),
});

