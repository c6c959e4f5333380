// A count of events dropped unanswered for one reason, logged as one summary line at most once a
// minute instead of one line each (a stranger can send them as fast as a relay takes them): the
// first drop is logged at once, later ones in the next line once a minute has passed. In memory.

/** A summary line is logged at most once per this window. */
export const DROP_LOG_WINDOW_MS = 60_000;

export class DropSummary {
  private count = 0;
  private loggedAt = -Infinity;
  now: () => number = () => Date.now();

  /** `log` gets each line; `what` says which events (e.g. NOT_SOLE_RECIPIENT). */
  constructor(
    private readonly log: (line: string) => void,
    private readonly what: string,
  ) {}

  /** Counts one dropped event; logs the count since the last line when a window has passed. */
  drop(): void {
    this.count++;
    const now = this.now();
    if (now - this.loggedAt < DROP_LOG_WINDOW_MS) return;
    this.log(`${this.count} event${this.count === 1 ? '' : 's'} ${this.what} dropped since the last report; reported at most once a minute`);
    this.loggedAt = now;
    this.count = 0;
  }
}
