// NIP-AO payload shapes shared by the emitter and observers: a coalesced batch (`{coalesced: [...]}`)
// and the parts of a split frame (`{split, part, parts, chunk}`), with the helpers that build and
// undo them. Pure: no Worker or Node APIs, no state.

import type { Result } from './errors.js';

export type Payload = Record<string, unknown>;

export const isPlainObject = (v: unknown): v is Payload => typeof v === 'object' && v !== null && !Array.isArray(v);

/** Payload of one part of a split frame. */
export interface SplitPart {
  split: number;
  part: number;
  parts: number;
  chunk: string;
}

export function isSplitPart(payload: Payload): payload is Payload & SplitPart {
  const { split, part, parts, chunk } = payload;
  return (
    Number.isSafeInteger(split) &&
    Number.isSafeInteger(parts) &&
    (parts as number) >= 2 &&
    Number.isSafeInteger(part) &&
    (part as number) >= 0 &&
    (part as number) < (parts as number) &&
    typeof chunk === 'string'
  );
}

/**
 * Reassembles a split payload from its parts (any order, duplicates tolerated). Errors name what is
 * missing or inconsistent.
 */
export function joinSplit(parts: readonly Payload[]): Result<Payload, string> {
  if (parts.length === 0) return { ok: false, error: 'no parts' };
  const first = parts[0]!;
  if (!isSplitPart(first)) return { ok: false, error: 'not a split part: expected {split, part, parts, chunk}' };
  const chunks = new Array<string | undefined>(first.parts);
  for (const p of parts) {
    if (!isSplitPart(p)) return { ok: false, error: 'not a split part: expected {split, part, parts, chunk}' };
    if (p.split !== first.split || p.parts !== first.parts) return { ok: false, error: `parts of different splits (${first.split} and ${p.split})` };
    chunks[p.part] = p.chunk;
  }
  const missing = [...chunks.keys()].filter((i) => chunks[i] === undefined);
  if (missing.length) return { ok: false, error: `missing part(s) ${missing.join(', ')} of ${first.parts}` };
  let value: unknown;
  try {
    value = JSON.parse(chunks.join(''));
  } catch {
    return { ok: false, error: 'the joined chunks are not JSON' };
  }
  return isPlainObject(value) ? { ok: true, value } : { ok: false, error: 'the joined chunks are not a JSON object' };
}

/** The items of a frame's payload: `coalesced` for a batch, else the payload itself. */
export function coalescedItems(payload: Payload): unknown[] {
  return Array.isArray(payload.coalesced) ? payload.coalesced : [payload];
}

/** UTF-8 size of one UTF-16 unit (or surrogate pair) once written inside a JSON string. */
function escapedUnitSize(s: string, i: number): [bytes: number, units: number] {
  const c = s.charCodeAt(i);
  if (c === 0x22 || c === 0x5c) return [2, 1];
  if (c < 0x20) return [c === 8 || c === 9 || c === 10 || c === 12 || c === 13 ? 2 : 6, 1];
  if (c < 0x80) return [1, 1];
  if (c < 0x800) return [2, 1];
  if (c >= 0xd800 && c <= 0xdbff) {
    const d = s.charCodeAt(i + 1);
    return d >= 0xdc00 && d <= 0xdfff ? [4, 2] : [6, 1];
  }
  if (c >= 0xdc00 && c <= 0xdfff) return [6, 1]; // lone low surrogate: JSON.stringify escapes it
  return [3, 1];
}

/** Cuts `s` into slices whose JSON-string-escaped UTF-8 size is ≤ budget, never inside a pair. */
export function chunkForJson(s: string, budget: number): string[] {
  if (budget < 6) throw new RangeError('chunkForJson: budget too small');
  const out: string[] = [];
  let start = 0;
  let size = 0;
  for (let i = 0; i < s.length; ) {
    const [bytes, units] = escapedUnitSize(s, i);
    if (size + bytes > budget) {
      out.push(s.slice(start, i));
      start = i;
      size = 0;
    }
    size += bytes;
    i += units;
  }
  if (start < s.length || out.length === 0) out.push(s.slice(start));
  return out;
}
