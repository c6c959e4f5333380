// What the sender of a refused prompt or ask, or of a failed run, is told (admission.ts, outbox.ts). A refusal whose
// figures or reason are the owner's — the plan's limits and the owner's spend across all its agents
// (workers/accounts/quota.ts), the agent's daily budget and its spend (budget.ts), why the owner is
// not allowed (admission.ts ownerRefusal) — carries them in `detail` and a message without them
// (that a limit of the day or month is reached, or that the agent is unavailable; `retry_after`
// and `details.quota` say when and which). At admission (no run, no telemetry) and at the end of a
// NIP-XX run (outbox.ts terminalPayload: a model call refused, the owner no longer allowed, a
// provider's own text, runtime.ts Terminal) the agent's owner is told `detail` as the message,
// anyone else the message; a run's `detail` also goes to the owner in its NIP-AO
// `session_resolved` (a DVMCP ask's run answers the message whoever asked: dvmcp-server.ts). So a
// stranger varying its prompts cannot read the owner's plan, spend or standing off the refusals,
// and the owner prompting its own agent reads why (a bad provider key, the plan's models and what
// to change).

/** `r` as `sender` is told it, on an agent of `owner`. */
export function toldTo<R extends { message: string; detail?: string }>(r: R, sender: string, owner: string): R {
  if (sender !== owner || r.detail === undefined) return r;
  const { detail, ...rest } = r;
  return { ...rest, message: detail } as R;
}
