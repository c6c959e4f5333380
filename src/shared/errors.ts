// Machine-readable prefixes for OK/CLOSED messages (NIP-01), and the Result type used for
// errors-as-values throughout the core.

const PREFIXES = [
  'duplicate',
  'pow',
  'blocked',
  'rate-limited',
  'invalid',
  'restricted',
  'auth-required',
  'error',
] as const;

export type Prefix = (typeof PREFIXES)[number];

/** A rejection with a standard prefix and a human reason: rendered as "prefix: reason". */
export interface Rejection {
  readonly prefix: Prefix;
  readonly reason: string;
}

export const reject = (prefix: Prefix, reason: string): Rejection => ({ prefix, reason });

export const formatRejection = (r: Rejection): string => `${r.prefix}: ${r.reason}`;

/** Parses "prefix: reason" back into a Rejection (used by clients reading OK/CLOSED). */
export function parseRejection(message: string): Rejection | undefined {
  const i = message.indexOf(':');
  if (i < 0) return undefined;
  const prefix = message.slice(0, i) as Prefix;
  if (!PREFIXES.includes(prefix)) return undefined;
  return { prefix, reason: message.slice(i + 1).trim() };
}

/**
 * Whether an OK or CLOSED message gives a passing reason (`rate-limited:`, `error:`), so that the
 * same request may succeed later; any other prefix is a final answer.
 */
export function isTransient(message: string): boolean {
  const prefix = parseRejection(message)?.prefix;
  return prefix === 'rate-limited' || prefix === 'error';
}

/**
 * Whether an OK message refuses the event for good (`blocked:`, `invalid:`, `pow:`, `restricted:`):
 * sending the same event again cannot succeed. (`duplicate:` means the relay has it; `auth-required:`,
 * `rate-limited:`, `error:` and messages without a prefix may pass later.)
 */
export function isRefusedForGood(message: string): boolean {
  const prefix = parseRejection(message)?.prefix;
  return prefix === 'blocked' || prefix === 'invalid' || prefix === 'pow' || prefix === 'restricted';
}

/** The reasons this relay gives for an event dated outside its window (write-rules.ts `withinLimits`). */
export const CREATED_AT_TOO_OLD = 'created_at is too far in the past';
export const CREATED_AT_TOO_NEW = 'created_at is too far in the future';

/**
 * Whether a refusal is about the event's `created_at` (a clock problem: an event signed anew, with a
 * new `created_at`, may pass). This relay's reasons are CREATED_AT_TOO_OLD/NEW; other relays word it
 * their own way, so any reason naming `created_at` counts.
 */
export function isClockRefusal(message: string): boolean {
  return /created_at/.test(parseRejection(message)?.reason ?? '');
}

export type Result<T, E = Rejection> = { ok: true; value: T } | { ok: false; error: E };

export const ok = <T>(value: T): Result<T, never> => ({ ok: true, value });
export const err = <E>(error: E): Result<never, E> => ({ ok: false, error });

/** The message of a thrown value (an Error's message, anything else as text), for error values and logs. */
export const errorMessage = (e: unknown): string => (e instanceof Error ? e.message : String(e));
