// What the sender of a refused prompt or ask, or of a failed run, is told (admission.ts, outbox.ts). A refusal whose
// figures or reason are the owner's — the plan's limits and the owner's spend across all its agents
// (workers/accounts/quota.ts), the agent's daily budget and its spend (budget.ts), why the owner is
// not allowed (admission.ts ownerRefusal) — carries them in `detail` and a message without them
// (that a limit of the day or month is reached, or that the agent is unavailable; `retry_after`
// and `details.quota` say when and which). At admission (no run, no telemetry) and at the end of a
// run (a NIP-XX run's 25805, outbox.ts terminalPayload; a DVMCP ask's isError content,
// dvmcp-server.ts: a model call refused, the owner no longer allowed, a provider's own text,
// runtime.ts Terminal) the agent's owner is told `detail` as the message, anyone else the message;
// a run's `detail` also goes to the owner in its NIP-AO `session_resolved`. So a
// stranger varying its prompts cannot read the owner's plan, spend or standing off the refusals,
// and the owner prompting its own agent reads why (a bad provider key, the plan's models and what
// to change).
// Every such text the owner is told (its 25805's message, an ask's isError text, and in its NIP-AO frames a run's
// `detail`, its tool set's `tool_problems`, a tool's `detail`: run-driver.ts) is cut to one bound,
// OWNER_MESSAGE_MAX_BYTES, by ownerDetail.

import { cutWithNote } from '../../src/shared/json-cut.js';

/**
 * The most bytes (of JSON string) of a text told to the agent's owner alone; a longer one is cut
 * and marked. Provider texts are at most 300 characters (providers/http.ts MAX_ERROR_TEXT); a tool
 * set's problems can be many (a server's tools over the limit, each named).
 */
export const OWNER_MESSAGE_MAX_BYTES = 4096;

/** `text` for the owner: at most OWNER_MESSAGE_MAX_BYTES, cut and marked `…[cut: the first N of M bytes]`. */
export const ownerDetail = (text: string): string =>
  cutWithNote(text, OWNER_MESSAGE_MAX_BYTES, (shown, total) => `…[cut: the first ${shown} of ${total} bytes]`).text;

/** `r` as `sender` is told it, on an agent of `owner`. */
export function toldTo<R extends { message: string; detail?: string }>(r: R, sender: string, owner: string): R {
  if (sender !== owner || r.detail === undefined) return r;
  const { detail, ...rest } = r;
  return { ...rest, message: detail } as R;
}
