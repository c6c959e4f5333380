import { describe, expect, it } from 'vitest';
import { dropLine, frameJson, frameLine, gapLine } from './observe-lines.js';

const agent = 'ab'.repeat(32);
const frame = {
  agent,
  eventId: 'cd'.repeat(32),
  createdAt: 1_750_000_000,
  receivedAt: Date.UTC(2026, 0, 2, 3, 4, 5, 678),
  frame: { seq: 7, timestamp: 1, kind: 'acp_read', agentIndex: null, channelId: 'ef'.repeat(32), sessionId: 's1', turnId: null, payload: { items: ['x'.repeat(300)] } },
};

describe('observe lines', () => {
  it('a frame: time, agent, seq, kind, run, payload cut at 160 characters', () => {
    const line = frameLine(frame);
    expect(line.startsWith(`03:04:05.678 abababab #7 acp_read run=${'ef'.repeat(32)} {"items":["xxx`)).toBe(true);
    expect(line.endsWith('x...')).toBe(true);
    expect(line.length).toBe(`03:04:05.678 abababab #7 acp_read run=${'ef'.repeat(32)} `.length + 160);
    expect(frameLine({ ...frame, frame: { ...frame.frame, channelId: null, payload: { a: 1 } } })).toBe('03:04:05.678 abababab #7 acp_read {"a":1}');
    expect(frameJson(frame)).toMatchObject({ type: 'frame', agent, event: 'cd'.repeat(32), seq: 7, kind: 'acp_read', sessionId: 's1' });
  });

  it('a payload nesting 6,000 levels (a hostile tool result the agent read): a note, not a stack overflow', () => {
    const deep = JSON.parse(`${'['.repeat(6000)}${']'.repeat(6000)}`) as unknown;
    expect(frameLine({ ...frame, frame: { ...frame.frame, channelId: null, payload: { items: [deep] } } })).toBe('03:04:05.678 abababab #7 acp_read (nests deeper than 64 levels: not shown)');
  });

  it('a session_resolved: its outcome and detail whole (one line, terminal-safe), the run id once, the rest cut', () => {
    const run = 'ef'.repeat(32);
    const detail = `the owner’s plan allows the models gpt-4o-mini, gpt-4o, ${'m'.repeat(200)}, not "o1": change the agent’s models (PATCH /api/agents/<its key>) or the owner’s plan`;
    const usage = { provider: 'openai', model: 'o1', input_tokens: 0, output_tokens: 0, tool_calls: 0, duration_ms: 12 };
    const resolved = (payload: Record<string, unknown>) => frameLine({ ...frame, frame: { ...frame.frame, kind: 'session_resolved', channelId: run, payload } });
    expect(resolved({ run_id: run, outcome: 'UNSUPPORTED_MODEL', detail, usage })).toBe(
      `03:04:05.678 abababab #7 session_resolved run=${run} UNSUPPORTED_MODEL · ${detail} {"usage":{"provider":"openai","model":"o1","input_tokens":0,"output_tokens":0,"tool_calls":0,"duration_ms":12}}`,
    );
    expect(resolved({ run_id: run, outcome: 'response', delivered: false, detail: 'the relay refused the answer for good (wss://r.example: restricted: storage quota)\n\u001b]0;x\u0007', usage: {} })).toBe(
      `03:04:05.678 abababab #7 session_resolved run=${run} response (not delivered) · the relay refused the answer for good (wss://r.example: restricted: storage quota)\\u000a\\u001b]0;x\\u0007 {"usage":{}}`,
    );
  });

  it('a turn_started: its tool problems whole', () => {
    const run = 'ef'.repeat(32);
    const line = frameLine({ ...frame, frame: { ...frame.frame, kind: 'turn_started', channelId: run, payload: { run_id: run, model: 'echo', client: 'ab'.repeat(32), tool_problems: ['MCP server srv: unreachable: Network connection lost.', `MCP server big: ${'x'.repeat(200)}`] } } });
    expect(line).toBe(
      `03:04:05.678 abababab #7 turn_started run=${run} {"model":"echo","client":"${'ab'.repeat(32)}"} · tool problems: MCP server srv: unreachable: Network connection lost.; MCP server big: ${'x'.repeat(200)}`,
    );
  });

  it('a tool_detail: the tool and why its call failed, whole (one line, terminal-safe)', () => {
    const run = 'ef'.repeat(32);
    const detail = `the deployment's outbound policy refuses 10.0.0.5:9200: EDGESTR_OUTBOUND_ALLOW lists 10.0.0.5 on its default port only, not 9200 ${'y'.repeat(200)}\n\u001b[2J`;
    expect(frameLine({ ...frame, frame: { ...frame.frame, kind: 'tool_detail', channelId: run, payload: { run_id: run, name: 'web_fetch', detail } } })).toBe(
      `03:04:05.678 abababab #7 tool_detail run=${run} web_fetch · the deployment's outbound policy refuses 10.0.0.5:9200: EDGESTR_OUTBOUND_ALLOW lists 10.0.0.5 on its default port only, not 9200 ${'y'.repeat(200)}\\u000a\\u001b[2J`,
    );
  });

  it('gaps and drops', () => {
    expect(gapLine({ agent, sessionId: 's1', expected: 3, received: 6, missing: 3 })).toBe('gap: abababab session s1: 3 frame(s) missing (expected #3, got #6)');
    expect(gapLine({ agent, sessionId: null, expected: 0, received: 1, missing: 1 })).toBe('gap: abababab session -: 1 frame(s) missing (expected #0, got #1)');
    expect(dropLine(agent, 12)).toBe('dropped: abababab could not deliver 12 frame(s)');
  });
});
