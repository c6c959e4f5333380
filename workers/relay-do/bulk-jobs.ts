// The shard's bound on bulk work from the management API: at most one import, restore or export in
// flight per shard (an owner's, or an operator's restore). The Worker takes a lease before it starts
// (`begin`: refused with an actionable reason while another job holds it), names it in every batch
// or page call (`use`: each one renews it) and gives it back at the end (`end`). A job idle for
// BULK_IDLE_MS (the Worker died, a client stopped reading its export) loses the lease to the next
// one; until then its own next call takes it back. Kept in the primary object's memory: a restart
// forgets the lease, as it ends whatever held it.
// An import's lease also keeps the ids whose lines were verified in it (the body bounds them, 8 MiB),
// so that a repeated line is neither verified nor written again (import.ts). A restore keeps none: a
// backup holds each event once, and what is stored is looked up before any verification anyway.
// The cron's backups (backup.ts) read pages without a lease: they are the operator's, one per shard
// and run, and an owner's export must not make them fail.

import { err, ok, type Result } from '../../src/shared/errors.js';

export type BulkJob = 'import' | 'restore' | 'export';

/** A lease not used for this long (ms) goes to the next job that asks. */
export const BULK_IDLE_MS = 60_000;

const A_JOB: Record<BulkJob, string> = { import: 'an import', restore: 'a restore', export: 'an export' };

/** The refusal of a job while `running` holds the lease. */
export const bulkBusy = (running: BulkJob): string =>
  `${A_JOB[running]} is already running on this shard (one import, restore or export at a time); try again when it ends`;

/** The refusal of a call whose lease another job took meanwhile. */
export const bulkLost = (job: BulkJob): string =>
  `this ${job} was idle for more than ${BULK_IDLE_MS / 1000} s and another import, restore or export took the shard meanwhile; run it again`;

/** What a held lease knows: its job, and (an import) the ids verified so far. */
export interface BulkLease {
  job: BulkJob;
  verified?: Set<string>;
}

interface Held extends BulkLease {
  token: string;
  usedAt: number;
}

export class BulkJobs {
  #held: Held | undefined;

  /** A lease for `job` at `nowMs` (its token), or the reason another job keeps it. */
  begin(job: BulkJob, nowMs: number): Result<string, string> {
    const held = this.#held;
    if (held && nowMs - held.usedAt < BULK_IDLE_MS) return err(bulkBusy(held.job));
    const token = crypto.randomUUID();
    this.#held = { token, job, usedAt: nowMs, ...(job === 'import' ? { verified: new Set<string>() } : {}) };
    return ok(token);
  }

  /** The lease `token` names, renewed at `nowMs`; taken back when it was idle and nobody took it; the reason when another job holds it now. */
  use(token: string, job: BulkJob, nowMs: number): Result<BulkLease, string> {
    const held = this.#held;
    if (held?.token === token) {
      held.usedAt = nowMs;
      return ok(held);
    }
    if (held && nowMs - held.usedAt < BULK_IDLE_MS) return err(bulkLost(job));
    this.#held = { token, job, usedAt: nowMs, ...(job === 'import' ? { verified: new Set<string>() } : {}) };
    return ok(this.#held);
  }

  /** Gives the lease `token` back (nothing when another job holds it). */
  end(token: string): void {
    if (this.#held?.token === token) this.#held = undefined;
  }
}
