// Kind classes (../shared/DESIGN.md "Kind policy of a shard"): the one place that says how a kind is stored
// and who may read it.

/** The largest kind number (NIP-01: kinds are 0..65535). */
export const MAX_KIND = 65535;

export const KIND = {
  METADATA: 0,
  CONTACTS: 3,
  DELETION: 5,
  VANISH: 62,
  SEAL: 13,
  PRIVATE_DM: 14,
  GIFT_WRAP: 1059,
  ZAP_REQUEST: 9734,
  ZAP_RECEIPT: 9735,
  RELAY_LIST: 10002,
  EPHEMERAL_GIFT_WRAP: 21059,
  AUTH: 22242,
  HTTP_AUTH: 27235,
  AO_FRAME: 24200,
  AI_STATUS: 25800,
  AI_DELTA: 25801,
  AI_PROMPT: 25802,
  AI_RESPONSE: 25803,
  AI_TOOL_CALL: 25804,
  AI_ERROR: 25805,
  AI_CANCEL: 25806,
  AI_INFO: 31340,
  DVMCP_SERVER: 31316,
  DVMCP_TOOLS: 31317,
  DVMCP_RESOURCES: 31318,
  DVMCP_PROMPTS: 31319,
  DVMCP_REQUEST: 25910,
  DVMCP_RESPONSE: 26910,
  DVMCP_NOTIFICATION: 21316,
} as const;

export type KindClass =
  | 'regular'
  | 'replaceable'
  | 'addressable'
  | 'ephemeral'
  | 'nipxx-durable'
  | 'gift-wrap'
  | 'ao-frame'
  | 'auth'
  | 'deletion';

/** NIP-XX kinds that are stored despite the ephemeral range (the spec requires replay). */
export const NIPXX_DURABLE_KINDS: ReadonlySet<number> = new Set([KIND.AI_PROMPT, KIND.AI_RESPONSE, KIND.AI_ERROR]);

export function kindClass(kind: number): KindClass {
  if (kind === KIND.DELETION) return 'deletion';
  if (kind === KIND.GIFT_WRAP) return 'gift-wrap';
  if (kind === KIND.AUTH) return 'auth';
  if (kind === KIND.AO_FRAME) return 'ao-frame';
  if (NIPXX_DURABLE_KINDS.has(kind)) return 'nipxx-durable';
  if (kind === KIND.METADATA || kind === KIND.CONTACTS || (kind >= 10000 && kind < 20000)) return 'replaceable';
  if (kind >= 20000 && kind < 30000) return 'ephemeral';
  if (kind >= 30000 && kind < 40000) return 'addressable';
  return 'regular';
}

/** Whether events of this kind are written to storage. */
export const isStored = (kind: number): boolean => {
  const c = kindClass(kind);
  return c !== 'ephemeral' && c !== 'ao-frame' && c !== 'auth';
};

/** NIP-XX run events: never stored (ephemeral range), but their tags say who talks to which agent, when. */
export const NIPXX_RUN_KINDS: ReadonlySet<number> = new Set([KIND.AI_STATUS, KIND.AI_DELTA, KIND.AI_TOOL_CALL, KIND.AI_CANCEL]);

/**
 * Who may read an event of this kind (../shared/DESIGN.md kind policy), stored or live:
 * - 'anyone';
 * - 'author-or-recipient': a connection authenticated (NIP-42) as the author or a p-tagged pubkey
 *   (every NIP-XX kind, 25800–25806);
 * - 'recipient': a connection authenticated as a p-tagged pubkey (gift wraps 1059 and 21059, whose
 *   author is a one-time key).
 * Kind 24200 (NIP-AO) has its own, stricter rule in the relay (workers/relay-do/read-policy.ts).
 */
export type ReadRule = 'anyone' | 'author-or-recipient' | 'recipient';

/** The kinds that are not 'anyone', by rule: the SQL form of the read rule is built from these lists. */
export const READ_RESTRICTED_KINDS: Readonly<Record<Exclude<ReadRule, 'anyone'>, readonly number[]>> = {
  'author-or-recipient': [...NIPXX_DURABLE_KINDS, ...NIPXX_RUN_KINDS].sort((a, b) => a - b),
  recipient: [KIND.GIFT_WRAP, KIND.EPHEMERAL_GIFT_WRAP],
};

export function readRule(kind: number): ReadRule {
  if (NIPXX_DURABLE_KINDS.has(kind) || NIPXX_RUN_KINDS.has(kind)) return 'author-or-recipient';
  if (kind === KIND.GIFT_WRAP || kind === KIND.EPHEMERAL_GIFT_WRAP) return 'recipient';
  return 'anyone';
}

/** Whether events of this kind are delivered only to authenticated parties (author or p-tagged). */
export const isPrivateKind = (kind: number): boolean => readRule(kind) !== 'anyone';
