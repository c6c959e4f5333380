// The agent's structured log: one JSON line per lifecycle step (created, connected, removed) and
// per finished run, at info level (console.log), for the `wrangler dev` terminal and Workers Logs.
// Counts, names and codes only: never prompt or answer text, never a key (docs/OPERATIONS.md "Logs").

import { z } from 'zod';

export const AgentLifecycleLogSchema = z.strictObject({
  msg: z.enum(['agent.created', 'agent.connected', 'agent.removed']),
  agent: z.string(),
  owner: z.string().optional(),
  relay: z.string().optional(),
});
export type AgentLifecycleLog = z.infer<typeof AgentLifecycleLogSchema>;

export const AgentRunLogSchema = z.strictObject({
  msg: z.literal('agent.run'),
  agent: z.string(),
  run: z.string(),
  provider: z.string(),
  model: z.string(),
  input_tokens: z.number().int(),
  output_tokens: z.number().int(),
  tool_calls: z.number().int(),
  duration_ms: z.number().int(),
  /** "response", or the NIP-XX error code the run ended with. */
  outcome: z.string(),
});
export type AgentRunLog = z.infer<typeof AgentRunLogSchema>;

export function logAgent(line: AgentLifecycleLog | AgentRunLog): void {
  console.log(JSON.stringify(line));
}
