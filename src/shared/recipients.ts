// Kinds addressed to one recipient: the one rule, for the relay (which refuses an event of these
// kinds with more than one `p` tag) and for clients. Each spec addresses such an event to one key:
// NIP-XX (every kind 25800–25806 has one `p`, the agent or the client, and its content is NIP-44
// encrypted to that key alone), DVMCP (25910 requests and 21316 notifications name the provider or
// the client, 26910 responses the client), NIP-59 (a gift wrap is encrypted to its one `p`; a
// message to several keys is one wrap each) and NIP-57 (a zap request has exactly one `p`, which
// its receipt copies). Refusing the rest keeps one EVENT from reaching every agent and bridge it
// would name (an event may carry max_event_tags tags, and the deployment's own connections have no
// delivery budget). No `p` at all is left to the kinds' own rules. The receivers' side
// (`soleRecipient`): a hosted agent or a bridge acts only on an event that names it, and it alone,
// whatever relay brought it (its owner's other relays need not refuse the rest).

import { reject, type Rejection } from './errors.js';
import { KIND } from './kinds.js';
import type { NostrEvent } from './event.js';

/** The kinds addressed to one recipient, by the name their spec gives them. */
export const SINGLE_RECIPIENT_KINDS: ReadonlyMap<number, string> = new Map([
  [KIND.AI_STATUS, 'ai.status'],
  [KIND.AI_DELTA, 'ai.delta'],
  [KIND.AI_PROMPT, 'ai.prompt'],
  [KIND.AI_RESPONSE, 'ai.response'],
  [KIND.AI_TOOL_CALL, 'ai.tool_call'],
  [KIND.AI_ERROR, 'ai.error'],
  [KIND.AI_CANCEL, 'ai.cancel'],
  [KIND.DVMCP_REQUEST, 'DVMCP request'],
  [KIND.DVMCP_RESPONSE, 'DVMCP response'],
  [KIND.DVMCP_NOTIFICATION, 'DVMCP notification'],
  [KIND.GIFT_WRAP, 'gift wrap'],
  [KIND.EPHEMERAL_GIFT_WRAP, 'ephemeral gift wrap'],
  [KIND.ZAP_RECEIPT, 'zap receipt'],
]);

/** Why `e` is refused: a kind addressed to one recipient with more than one `p` tag (the same key twice counts twice). */
export function tooManyRecipients(e: Pick<NostrEvent, 'kind' | 'tags'>): Rejection | undefined {
  const name = SINGLE_RECIPIENT_KINDS.get(e.kind);
  if (name === undefined) return undefined;
  let recipients = 0;
  for (const t of e.tags) if (t[0] === 'p' && ++recipients > 1) return reject('invalid', `kind ${e.kind} (${name}) is addressed to one recipient: at most one "p" tag`);
  return undefined;
}

/** Why an agent or a bridge dropped an event by soleRecipient, as its logs say it. */
export const NOT_SOLE_RECIPIENT = 'not addressed to it alone (exactly one p tag, naming it)';

/** Whether `e` carries exactly one `p` tag, and it names `key` (the same key twice is two tags). */
export function soleRecipient(e: Pick<NostrEvent, 'tags'>, key: string): boolean {
  let named: string | undefined;
  let count = 0;
  for (const t of e.tags) {
    if (t[0] !== 'p') continue;
    if (++count > 1) return false;
    named = t[1];
  }
  return count === 1 && named === key;
}
