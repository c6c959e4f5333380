// The lines `edgestr observe` prints: one per accepted NIP-AO frame, per seq gap and per drop report
// of an agent (text), or the same as JSON objects (--json). A frame's payload is shown cut to
// MAX_PAYLOAD_CHARS (a payload nesting deeper than MAX_JSON_DEPTH: a note), without the run id its `run=` already shows; what the owner reads a frame for is
// shown whole, on the same line and terminal-safe: a session_resolved's outcome (marked when the
// answer was not delivered) and `detail` (a provider's text, a limit's figures and its action), a
// turn_started's `tool_problems`, a tool_detail's tool name and `detail` (why a tool call failed,
// for the owner alone).
import type { ObservedFrame, SeqGap } from '../shared/ao-observer.js';
import { terminalSafe } from './terminal-safe.js';
import { nestsWithin, NOT_SHOWN } from '../shared/json-depth.js';

const MAX_PAYLOAD_CHARS = 160;

const short = (value: unknown): string => {
  if (!nestsWithin(value)) return NOT_SHOWN;
  const text = JSON.stringify(value);
  return text.length > MAX_PAYLOAD_CHARS ? `${text.slice(0, MAX_PAYLOAD_CHARS - 3)}...` : text;
};

const oneLine = (text: string): string => terminalSafe(text, { singleLine: true });

const isStrings = (v: unknown): v is string[] => Array.isArray(v) && v.every((x) => typeof x === 'string');

/** What a frame's line shows of its payload: the fields shown whole, then the rest cut. */
function shown(kind: string, channelId: string | null, payload: Record<string, unknown>): string {
  const { run_id, ...rest } = payload;
  const others: Record<string, unknown> = run_id === channelId && channelId !== null ? rest : payload;
  if (kind === 'session_resolved' && typeof others.outcome === 'string') {
    const { outcome, detail, delivered, ...usage } = others;
    const whole = typeof detail === 'string' ? ` · ${oneLine(detail)}` : '';
    return `${oneLine(outcome)}${delivered === false ? ' (not delivered)' : ''}${whole} ${short(usage)}`;
  }
  if (kind === 'turn_started' && isStrings(others.tool_problems)) {
    const { tool_problems, ...started } = others;
    return `${short(started)} · tool problems: ${oneLine(tool_problems.join('; '))}`;
  }
  if (kind === 'tool_detail' && typeof others.name === 'string' && typeof others.detail === 'string') {
    const { name, detail, ...more } = others;
    return `${oneLine(name)} · ${oneLine(detail)}${Object.keys(more).length > 0 ? ` ${short(more)}` : ''}`;
  }
  return short(others);
}

export const frameLine = (f: ObservedFrame): string =>
  `${new Date(f.receivedAt).toISOString().slice(11, 23)} ${f.agent.slice(0, 8)} #${f.frame.seq} ${f.frame.kind}${f.frame.channelId ? ` run=${f.frame.channelId}` : ''} ${shown(f.frame.kind, f.frame.channelId, f.frame.payload)}`;

export const frameJson = (f: ObservedFrame): object => ({ type: 'frame', agent: f.agent, event: f.eventId, ...f.frame });

export const gapLine = (g: SeqGap): string =>
  `gap: ${g.agent.slice(0, 8)} session ${g.sessionId ?? '-'}: ${g.missing} frame(s) missing (expected #${g.expected}, got #${g.received})`;

export const dropLine = (agent: string, dropped: number): string => `dropped: ${agent.slice(0, 8)} could not deliver ${dropped} frame(s)`;
