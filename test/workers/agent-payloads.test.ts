// Every payload a hosted agent sends is a NIP-XX payload: real runs with the echo model (a text
// answer, a tool loop, an error) are decrypted as a client sees them and each payload is parsed
// with the NIP-XX schemas of src/shared/nip-xx.ts; the ai.info content with InfoSchema.
import { describe, expect, it } from 'vitest';
import type { z } from 'zod';
import { DeltaSchema, ErrorSchema, InfoSchema, ResponseSchema, StatusSchema, ToolCallSchema } from '../../src/shared/nip-xx.js';
import { NipXxClient, agentInfo, createTestAgent, type RunEvents } from './agent-helpers.js';

function conforms(schema: z.ZodType, payload: unknown, what: string): void {
  const r = schema.safeParse(payload);
  if (!r.success) expect.fail(`${what} ${JSON.stringify(payload)} is not a NIP-XX payload: ${r.error.message}`);
}

function checkRun(run: RunEvents): void {
  for (const s of run.status) conforms(StatusSchema, s, 'status (25800)');
  for (const d of run.deltas) conforms(DeltaSchema, d, 'delta (25801)');
  for (const t of run.tools) conforms(ToolCallSchema, t, 'tool call (25804)');
  if (run.terminal.kind === 25803) conforms(ResponseSchema, run.terminal.payload, 'response (25803)');
  else conforms(ErrorSchema, run.terminal.payload, `error (${run.terminal.kind})`);
}

async function run(agentConfig: object, message: string): Promise<RunEvents> {
  const c = await NipXxClient.open(await createTestAgent(agentConfig));
  const p = c.prompt({ ver: 1, message });
  await c.send(p);
  return c.collect(p.id);
}

describe("the agent's outgoing payloads match the NIP-XX schemas", () => {
  it('a text answer: status, deltas and the response', async () => {
    const r = await run({}, 'hello there, agent');
    expect(r.terminal.kind).toBe(25803);
    expect(r.status.length).toBeGreaterThan(0);
    expect(r.deltas.length).toBeGreaterThan(0);
    checkRun(r);
  });

  it('a tool loop: tool call telemetry at start and result', async () => {
    const r = await run({ tools: ['calculator'] }, '/tool calculator {"expr":"12 * 7"}');
    expect(r.terminal.kind).toBe(25803);
    expect(r.tools.map((t) => t['phase'])).toEqual(['start', 'result']);
    checkRun(r);
  });

  it('an error', async () => {
    const r = await run({ tools: ['calculator'], limits: { max_tool_steps: 1 } }, '/tool calculator {"expr":"1+1"}');
    expect(r.terminal.kind).toBe(25805);
    expect(r.terminal.payload['code']).toBe('TOOL_ERROR');
    checkRun(r);
  });

  it('the ai.info announcement', async () => {
    const agent = await createTestAgent({ tools: ['calculator'] });
    const info = await agentInfo(agent);
    expect(info).toBeDefined();
    conforms(InfoSchema, JSON.parse(info!.content), 'ai.info (31340)');
  });
});
