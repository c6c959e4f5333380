// The keys of GET /api/usage rows (by=agent|sender|model|day) that are not an agent, a sender, a
// model or a day: the Accounts object sums under OTHERS what passes its rows per owner-day or per
// day (workers/accounts/accounts-do.ts), and the console names that row (src/console/usage.ts).

/** The row key (agent, sender and model alike) of runs summed past the usage table's row limits. */
export const USAGE_OTHERS = 'others';
