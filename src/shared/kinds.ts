// Kind classes (DESIGN.md "Kind policy of a shard"): the one place that says how a kind is stored
// and who may read it.

export const KIND = {
  METADATA: 0,
  CONTACTS: 3,
  DELETION: 5,
  GIFT_WRAP: 1059,
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

/** Whether events of this kind are delivered only to authenticated parties (author or p-tagged). */
export const isPrivateKind = (kind: number): boolean => {
  const c = kindClass(kind);
  return c === 'nipxx-durable' || c === 'gift-wrap';
};

/** Who may read a private kind: the NIP-XX durable kinds go to author or recipient; gift wraps to the recipient only. */
export const authorMayRead = (kind: number): boolean => kindClass(kind) === 'nipxx-durable';
