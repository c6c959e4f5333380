// The runs an owner's agents admitted and Accounts has not counted yet, when the owner's plan sets
// runs_per_day (accounts-do.ts reserveRun). An agent reserves each run it admits (a prompt or a
// DVMCP ask) with one call at admission, which Accounts checks against the owner's runs of the day
// plus every agent's reservations (quota.ts planRefusal), so strangers prompting several agents of
// one owner at once cannot each take the others' share: the agents' copies of the totals do not see
// each other's admissions, Accounts does. The agent reserves a run just before it starts (its
// prompt decrypted and validated), and every run started is metered and reported, however it ends.
// A reservation ends when the run's report names it (the report adds the run to the totals in the
// same step: a run counts once), or at its expiry, which the agent sets past the run's longest
// duration (its max_run_seconds) plus RESERVATION_MARGIN_MS, so that a run whose agent restarted
// (its report comes later, from the watchdog) or whose report failed does not hold a run for ever. Kept in memory: a restart of Accounts forgets them, and the runs in progress then count
// only on their own agent until their reports. One entry per run admitted and not reported, at
// most what the owners' agents run at once (each its max_concurrent_runs) plus the runs whose
// report failed in the last expiry; expired ones are swept at most once per RESERVATION_MARGIN_MS.
// Times are the callers' clocks (ms), as every Accounts call takes them.

/** How long past a run's longest duration its reservation lasts when no report ends it. */
export const RESERVATION_MARGIN_MS = 60_000;

/** One run an agent admitted, as it reserves it. */
export interface RunReservation {
  owner: string;
  agent: string;
  /** The run's id (its prompt's event id, or its DVMCP request's): the one its report names. */
  run: string;
  /** When it expires (ms) if no report or release ends it first. */
  until: number;
}

export class RunReservations {
  /** Per owner: "<agent>:<run>" → until. */
  private readonly owners = new Map<string, Map<string, number>>();
  private sweptAt = -Infinity;

  /** Keeps `r` until `r.until`. */
  add(r: RunReservation, now: number): void {
    this.sweep(now);
    let runs = this.owners.get(r.owner);
    if (!runs) this.owners.set(r.owner, (runs = new Map()));
    runs.set(`${r.agent}:${r.run}`, r.until);
  }

  /** Ends the reservation of `agent`'s run `run` (its report), if there is one. */
  release(owner: string, agent: string, run: string): void {
    const runs = this.owners.get(owner);
    if (!runs?.delete(`${agent}:${run}`) || runs.size > 0) return;
    this.owners.delete(owner);
  }

  /** The reservations of `owner`'s agents that have not expired at `now`. */
  count(owner: string, now: number): number {
    let n = 0;
    for (const until of this.owners.get(owner)?.values() ?? []) if (until > now) n++;
    return n;
  }

  /** Entries kept (all owners). */
  get size(): number {
    let n = 0;
    for (const runs of this.owners.values()) n += runs.size;
    return n;
  }

  /** Forgets the reservations expired at `now`, at most once per RESERVATION_MARGIN_MS. */
  private sweep(now: number): void {
    if (now - this.sweptAt < RESERVATION_MARGIN_MS) return;
    this.sweptAt = now;
    for (const [owner, runs] of this.owners) {
      for (const [key, until] of runs) if (until <= now) runs.delete(key);
      if (runs.size === 0) this.owners.delete(owner);
    }
  }
}
