// The lines `edgestr observe` prints: one per accepted NIP-AO frame, per seq gap and per drop report
// of an agent (text), or the same as JSON objects (--json).
import type { ObservedFrame, SeqGap } from '../shared/ao-observer.js';

const MAX_PAYLOAD_CHARS = 160;

const short = (value: unknown): string => {
  const text = JSON.stringify(value);
  return text.length > MAX_PAYLOAD_CHARS ? `${text.slice(0, MAX_PAYLOAD_CHARS - 3)}...` : text;
};

export const frameLine = (f: ObservedFrame): string =>
  `${new Date(f.receivedAt).toISOString().slice(11, 23)} ${f.agent.slice(0, 8)} #${f.frame.seq} ${f.frame.kind}${f.frame.channelId ? ` run=${f.frame.channelId}` : ''} ${short(f.frame.payload)}`;

export const frameJson = (f: ObservedFrame): object => ({ type: 'frame', agent: f.agent, event: f.eventId, ...f.frame });

export const gapLine = (g: SeqGap): string =>
  `gap: ${g.agent.slice(0, 8)} session ${g.sessionId ?? '-'}: ${g.missing} frame(s) missing (expected #${g.expected}, got #${g.received})`;

export const dropLine = (agent: string, dropped: number): string => `dropped: ${agent.slice(0, 8)} could not deliver ${dropped} frame(s)`;
