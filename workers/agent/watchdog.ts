// The agent's watchdog schedule, so that an idle agent costs the one Accounts object
// (workers/accounts) nothing and wakes rarely. The watchdog wakes every WATCHDOG_MS while anything
// is pending (a run or DVMCP ask in flight, a run report or terminal event to send again, a
// connection not open, dropped-event counts not yet logged), and in time for an announcement due
// again (announcements.ts); while nothing is, each pass after the
// first idle one doubles the wait up to IDLE_WATCHDOG_MAX_MS, and a prompt or ask admitted (or the
// owner's account changing) brings it back to WATCHDOG_MS. The owner's account (owner-copy.ts) is
// fetched (Accounts.snapshot) only when the copy is needed and older than OWNER_COPY_MAX_AGE_MS: to
// admit a prompt, for a run in flight, or when there is none yet (after a start); an idle watchdog
// pass fetches it only once it is an hour old (OWNER_COPY_IDLE_MAX_AGE_MS); after a failed fetch,
// not for REGISTRY_RETRY_MS. Suspension and removal reach the agent at once through the admin API's
// ownerChanged, which fetches it anew; a notice lost is learnt at the next admission.

/** The watchdog's period while anything is pending. */
export const WATCHDOG_MS = 30_000;
/** The longest wait of an idle agent's watchdog (also a retired agent's, REMOVED_OWNER_WATCHDOG_MS). */
export const IDLE_WATCHDOG_MAX_MS = 10 * 60_000;

/** The wait before the next watchdog pass: WATCHDOG_MS while busy and after the first idle pass, then doubling while idle (up to IDLE_WATCHDOG_MAX_MS). */
export class WatchdogSchedule {
  /** The last idle wait; undefined while busy. */
  private wait: number | undefined;

  /** The wait after a pass that found the agent `idle`. */
  next(idle: boolean): number {
    this.wait = !idle ? undefined : this.wait === undefined ? WATCHDOG_MS : Math.min(IDLE_WATCHDOG_MAX_MS, this.wait * 2);
    return this.wait ?? WATCHDOG_MS;
  }

  /** Something became pending (a prompt or ask admitted, the owner's account changed): the next wait is WATCHDOG_MS again. */
  busy(): void {
    this.wait = undefined;
  }
}
