// What the sender of a refused prompt or ask is told at admission (admission.ts). A refusal whose
// figures or reason are the owner's — the plan's limits and the owner's spend across all its agents
// (workers/accounts/quota.ts), the agent's daily budget and its spend (budget.ts), why the owner is
// not allowed (admission.ts ownerRefusal) — carries them in `detail` and a message without them
// (that a limit of the day or month is reached, or that the agent is unavailable; `retry_after`
// and `details.quota` say when and which). A refusal at admission starts no run and no telemetry:
// the agent's owner is told `detail` as the message, anyone else the message. A run such a refusal
// ends (a model call refused, the owner no longer allowed: run-driver.ts, agent-do.ts) ends with the
// message whoever its client is, and `detail` goes to the owner in the run's NIP-AO
// `session_resolved`, as a provider's own text does (runtime.ts Terminal). outbox.ts
// terminalPayload never publishes `detail`. So a stranger varying its prompts cannot read the
// owner's plan, spend or standing off the refusals.

/** `r` as `sender` is told it at admission, on an agent of `owner`. */
export function toldTo<R extends { message: string; detail?: string }>(r: R, sender: string, owner: string): R {
  if (sender !== owner || r.detail === undefined) return r;
  const { detail, ...rest } = r;
  return { ...rest, message: detail } as R;
}
