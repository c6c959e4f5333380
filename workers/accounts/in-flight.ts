// What each agent's runs in progress hold, as the agent last told Accounts (accounts-do.ts): model
// tokens spent so far and held by their model calls in flight (workers/agent/budget.ts
// inProgressTokens), which Accounts does not have until each run's report. An agent sends its
// figure with every fetch of its owner's snapshot (at admission when its copy is older than 30 s,
// and every 30 s by its watchdog while a run is in flight: workers/agent/owner-copy.ts) and with
// every run report (then without the run reported, which the report adds to the totals in the same
// step: the run is counted once). Each snapshot answers the sum of the owner's OTHER agents' figures
// (the asker counts its own), so a stranger prompting several agents of one owner at once cannot
// spend the plan's share once per agent. A figure counts for IN_FLIGHT_MAX_AGE_MS after it was sent
// (an agent whose watchdog stopped does not hold tokens forever), and one sent earlier than the one
// kept (RPCs may arrive out of order) is ignored. Kept in memory, one entry per agent that sent a
// figure in the last 2 × IN_FLIGHT_MAX_AGE_MS at most (stale entries are swept at most once per
// IN_FLIGHT_MAX_AGE_MS, with a figure set): a restart of Accounts forgets them, and the agents with
// runs in progress send theirs again within one refresh (30 s).
// Times are the callers' clocks (ms), as every Accounts call takes them.

/** How long an agent's figure counts after it was sent: three of its refresh periods (OWNER_COPY_MAX_AGE_MS, 30 s). */
export const IN_FLIGHT_MAX_AGE_MS = 90_000;

/** What an agent's runs in progress hold when it calls Accounts. */
export interface AgentInFlight {
  agent: string;
  /** Model tokens its runs in progress spent so far and hold by their model calls in flight. */
  tokens: number;
}

interface Figure {
  tokens: number;
  at: number;
}

export class InFlightTokens {
  /** Per owner, per agent: the last figure and when it was sent. */
  private readonly owners = new Map<string, Map<string, Figure>>();
  private sweptAt = -Infinity;

  /** `owner`'s agent told its figure at `at` (ms): kept in place of its earlier one, unless that one was sent later. */
  set(owner: string, { agent, tokens }: AgentInFlight, at: number): void {
    this.sweep(at);
    let agents = this.owners.get(owner);
    if (!agents) this.owners.set(owner, (agents = new Map()));
    const kept = agents.get(agent);
    if (!kept || kept.at <= at) agents.set(agent, { tokens, at });
  }

  /** The sum of `owner`'s agents' figures that count at `now` (ms), but `except`'s. */
  others(owner: string, now: number, except?: string): number {
    let n = 0;
    for (const [agent, f] of this.owners.get(owner) ?? []) if (agent !== except && now - f.at <= IN_FLIGHT_MAX_AGE_MS) n += f.tokens;
    return n;
  }

  /** Entries kept (all owners). */
  get size(): number {
    let n = 0;
    for (const agents of this.owners.values()) n += agents.size;
    return n;
  }

  /** Forgets the figures that no longer count at `now`, at most once per IN_FLIGHT_MAX_AGE_MS. */
  private sweep(now: number): void {
    if (now - this.sweptAt < IN_FLIGHT_MAX_AGE_MS) return;
    this.sweptAt = now;
    for (const [owner, agents] of this.owners) {
      for (const [agent, f] of agents) if (now - f.at > IN_FLIGHT_MAX_AGE_MS) agents.delete(agent);
      if (agents.size === 0) this.owners.delete(owner);
    }
  }
}
