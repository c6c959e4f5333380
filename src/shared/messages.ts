// NIP-01 wire messages: parsing of client → relay frames into typed values (with a standard
// rejection when malformed) and builders for relay → client frames.

import { z } from 'zod';
import { describeIssue, eventIdOf } from './event.js';
import { FilterSchema, type Filter } from './filters.js';
import { err, ok, parseRejection, reject, type Rejection, type Result } from './errors.js';
import { hasLoneSurrogate, utf8Bytes } from './json-cut.js';

export type ClientMessage =
  | { type: 'EVENT'; event: unknown }
  | { type: 'REQ'; subId: string; filters: Filter[] }
  | { type: 'COUNT'; subId: string; filters: Filter[] }
  | { type: 'CLOSE'; subId: string }
  | { type: 'AUTH'; event: unknown }
  /** `["PING"]`: a client keep-alive (not in NIP-01; welshman sends it); answered with nothing. */
  | { type: 'PING' }
  /** `["AUTH"]` with no event: the client asks for the connection's NIP-42 challenge. */
  | { type: 'CHALLENGE' };

/** The subscription a REQ or COUNT frame names: a refusal of the frame is answered with CLOSED for it. */
export interface NamedSubscription {
  verb: 'REQ' | 'COUNT';
  subId: string;
}

/** A message that could not be parsed; `sub` is set when a REQ or COUNT named a subscription id (a non-empty string: answer with CLOSED for it). */
export interface MessageError {
  rejection: Rejection;
  sub?: NamedSubscription;
  eventId?: string;
}

export interface MessageLimits {
  maxSubIdLength: number;
  maxFilters: number;
}

/**
 * The id of an EVENT frame read from its first 512 characters without parsing it (for a message too
 * long to parse, so that the answer can still be an OK false for that id).
 */
export const sniffEventId = (text: string): string | undefined =>
  /^\s*\[\s*"EVENT"\s*,\s*\{[^}]*?"id"\s*:\s*"([0-9a-f]{64})"/.exec(text.slice(0, 512))?.[1];

/**
 * The verb and subscription id of a REQ or COUNT frame, read from its first 512 characters without
 * parsing it (for a message too long, or over its address's budget, to parse, so that the answer can
 * still be a CLOSED for that id). The id is decoded as JSON.parse would and held to the rules of
 * `parseClientMessage` (`subIdProblem`); undefined when it breaks one, or is not there.
 */
export function sniffSubId(text: string, maxSubIdLength: number): NamedSubscription | undefined {
  const m = SUB_ID_FRAME.exec(text.slice(0, 512));
  if (!m) return undefined;
  const subId = JSON.parse(`"${m[2]!}"`) as string; // a valid JSON string body (SUB_ID_FRAME)
  return subIdProblem(subId, maxSubIdLength) === undefined ? { verb: m[1] as NamedSubscription['verb'], subId } : undefined;
}

/** `["REQ"` or `["COUNT"` and a non-empty JSON string (its body: no raw control character, only JSON's escapes), JSON whitespace between. */
const SUB_ID_FRAME = /^[ \t\n\r]*\[[ \t\n\r]*"(REQ|COUNT)"[ \t\n\r]*,[ \t\n\r]*"((?:[^"\\\u0000-\u001f]|\\["\\/bfnrt]|\\u[0-9a-fA-F]{4})+)"/;

/** Why a REQ's or COUNT's non-empty subscription id is refused: too long, or not valid Unicode. */
function subIdProblem(subId: string, maxSubIdLength: number): Rejection | undefined {
  if (subId.length > maxSubIdLength) return reject('invalid', `subscription id is longer than ${maxSubIdLength} characters`);
  // A subscription is kept by its id in the shard's storage (over hibernation): the id must come back as it went in.
  if (hasLoneSurrogate(subId)) return reject('invalid', 'subscription id must be valid Unicode (it has a lone surrogate)');
  return undefined;
}

export function parseClientMessage(text: string, limits: MessageLimits): Result<ClientMessage, MessageError> {
  let frame: unknown;
  try {
    frame = JSON.parse(text);
  } catch {
    return err({ rejection: reject('invalid', 'message is not valid JSON') });
  }
  if (!Array.isArray(frame) || frame.length === 0) {
    return err({ rejection: reject('invalid', 'message must be a non-empty JSON array') });
  }
  const [verb, ...rest] = frame as unknown[];
  switch (verb) {
    case 'EVENT':
    case 'AUTH': {
      if (verb === 'AUTH' && rest.length === 0) return ok({ type: 'CHALLENGE' });
      if (rest.length !== 1) {
        return err({ rejection: reject('invalid', `${verb} takes exactly one event`), eventId: eventIdOf(rest[0]) });
      }
      return ok({ type: verb, event: rest[0] });
    }
    case 'CLOSE': {
      if (rest.length !== 1 || typeof rest[0] !== 'string') {
        return err({ rejection: reject('invalid', 'CLOSE takes exactly one subscription id') });
      }
      return ok({ type: 'CLOSE', subId: rest[0] });
    }
    case 'REQ':
    case 'COUNT': {
      const subId = rest[0];
      if (typeof subId !== 'string' || subId.length === 0) {
        return err({ rejection: reject('invalid', 'subscription id must be a non-empty string') });
      }
      const sub: NamedSubscription = { verb, subId };
      const badId = subIdProblem(subId, limits.maxSubIdLength);
      if (badId) return err({ rejection: badId, sub });
      const rawFilters = rest.slice(1);
      if (rawFilters.length === 0) return err({ rejection: reject('invalid', `${verb} needs at least one filter`), sub });
      if (rawFilters.length > limits.maxFilters) {
        return err({ rejection: reject('invalid', `too many filters (max ${limits.maxFilters})`), sub });
      }
      const filters: Filter[] = [];
      for (const raw of rawFilters) {
        const parsed = FilterSchema.safeParse(raw);
        if (!parsed.success) return err({ rejection: reject('invalid', describeIssue(parsed.error)), sub });
        filters.push(parsed.data as Filter);
      }
      return ok({ type: verb, subId, filters });
    }
    case 'PING':
      return ok({ type: 'PING' });
    default:
      return err({
        rejection: reject('invalid', typeof verb === 'string' ? `unknown message type: ${verb.slice(0, 32)}` : 'message type must be a string'),
      });
  }
}

/** Relay → client frames. `raw` is the event JSON exactly as it was received and stored. */
export const relayMessage = {
  event: (subId: string, raw: string) => `["EVENT",${JSON.stringify(subId)},${raw}]`,
  ok: (id: string, accepted: boolean, message: string) => JSON.stringify(['OK', id, accepted, message]),
  eose: (subId: string) => JSON.stringify(['EOSE', subId]),
  closed: (subId: string, message: string) => JSON.stringify(['CLOSED', subId, message]),
  notice: (message: string) => JSON.stringify(['NOTICE', message]),
  auth: (challenge: string) => JSON.stringify(['AUTH', challenge]),
  count: (subId: string, { count, approximate }: CountedEvents) => JSON.stringify(['COUNT', subId, approximate ? { count, approximate } : { count }]),
};

/** The message of OK, CLOSED and NOTICE: a non-string or missing one reads as ''. */
const FrameMessage = z.string().catch('');

/**
 * Relay → client frames as parsed by a client. Elements after the ones named are ignored; the COUNT
 * payload is checked by `CountAnswerSchema`, so that a malformed one still answers the request.
 */
export const RelayMessageSchema = z.union([
  z.tuple([z.literal('EVENT'), z.string(), z.unknown()]).rest(z.unknown()),
  z.tuple([z.literal('OK'), z.string(), z.boolean(), FrameMessage]).rest(z.unknown()),
  z.tuple([z.literal('EOSE'), z.string()]).rest(z.unknown()),
  z.tuple([z.literal('CLOSED'), z.string(), FrameMessage]).rest(z.unknown()),
  z.tuple([z.literal('NOTICE'), z.string()]).rest(z.unknown()),
  z.tuple([z.literal('AUTH'), z.string()]).rest(z.unknown()),
  z.tuple([z.literal('COUNT'), z.string(), z.unknown()]).rest(z.unknown()),
]);
export type RelayMessage = z.infer<typeof RelayMessageSchema>;

/** What a relay counted for a COUNT (NIP-45): `approximate` when it stopped at its bound (then a lower bound). */
export interface CountedEvents {
  count: number;
  approximate: boolean;
}

/** The payload of a NIP-45 COUNT answer. */
export const CountAnswerSchema = z
  .object({ count: z.number().int().nonnegative(), approximate: z.unknown().optional() })
  .loose();

/** A relay → client frame, or undefined when it is not JSON or not a known, well-formed frame. */
export function parseRelayMessage(text: string): RelayMessage | undefined {
  let frame: unknown;
  try {
    frame = JSON.parse(text);
  } catch {
    return undefined;
  }
  const parsed = RelayMessageSchema.safeParse(frame);
  return parsed.success ? parsed.data : undefined;
}

/**
 * Whether a relay → client frame (as built by `relayMessage`) is an OK false or a CLOSED whose
 * message has the `auth-required:` prefix: the answers a NIP-42 challenge must precede.
 */
export function isAuthRequiredAnswer(frame: string): boolean {
  // Cheap tests first: EVENT frames (up to the largest event) are never scanned.
  if (!(frame.startsWith('["OK",') || frame.startsWith('["CLOSED",')) || !frame.includes('"auth-required:')) return false;
  const m = parseRelayMessage(frame);
  if (!m) return false;
  const message = m[0] === 'OK' && !m[2] ? m[3] : m[0] === 'CLOSED' ? m[2] : undefined;
  return message !== undefined && parseRejection(message)?.prefix === 'auth-required';
}

/**
 * Whether a string has more than `max` Unicode characters (code points: NIP-11 counts
 * `max_content_length` so; a surrogate pair is one), counted only when its UTF-16 length says it may.
 */
export function charactersOver(s: string, max: number): boolean {
  if (s.length <= max) return false;
  let n = 0;
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c >= 0xd800 && c <= 0xdbff && i + 1 < s.length) {
      const d = s.charCodeAt(i + 1);
      if (d >= 0xdc00 && d <= 0xdfff) i++;
    }
    if (++n > max) return true;
  }
  return false;
}

/** Whether a string's UTF-8 encoding exceeds `max` bytes, without encoding short strings. */
export function byteLengthOver(s: string, max: number): boolean {
  if (s.length > max) return true;
  if (s.length * 3 <= max) return false;
  return utf8Bytes(s) > max;
}
