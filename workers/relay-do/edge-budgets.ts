// The read and scan budgets of client addresses (read_bytes_*_per_ip, scan_rows_*_per_ip) across
// one batch of an edge's operations to its primary (docs/SCALING.md "Read budgets with edges"). An
// edge admits a REQ or COUNT when it arrives, as a single object does, but its cost is known only
// when the primary has run it; queries sent before the earlier ones were answered (pipelined, on
// one connection or many of one address) would all find the budget full. So each batch's REQs and
// COUNTs carry what was left of their address's budgets when the batch was sent (edge-wire.ts
// AddressBudget): the edge refuses those of an address already in debt without sending them, and
// the primary, running the others in order, refuses one whose address the batch's earlier queries
// took into debt and spends each one's rows and bytes, exactly as a single object charges a query
// before it reads the next message. The edge charges its own budgets with the answers, as before.

import type { Rejection } from '../../src/shared/errors.js';
import type { AddressBudget } from './edge-wire.js';
import type { RelayLimits } from './limits.js';
import { readBudgetSpent, scanBudgetSpent } from './policy.js';
import { budgetWait } from './rate-limit.js';

/** The refill rates the answers name (RelayLimits). */
export type BudgetRates = Pick<RelayLimits, 'read_bytes_per_second_per_ip' | 'scan_rows_per_second_per_ip'>;

/** What is left of each address's budgets in one batch, from the first of its queries in the batch on. */
export class BatchBudgets {
  private readonly left = new Map<string, { read: number; scan: number }>();

  constructor(private readonly rates: BudgetRates) {}

  /**
   * Why a query carrying `budget` (none: not budgeted) is refused now, as the shard's `rejectFilter`
   * hooks would (policy.ts: the read budget for a REQ's history, `history`, then the scan budget).
   */
  refuse(budget: AddressBudget | undefined, history: boolean): Rejection | undefined {
    if (!budget) return undefined;
    const left = this.of(budget);
    if (history && left.read <= 0) return readBudgetSpent(this.rates, budgetWait(left.read, this.rates.read_bytes_per_second_per_ip));
    if (left.scan <= 0) return scanBudgetSpent(this.rates, budgetWait(left.scan, this.rates.scan_rows_per_second_per_ip));
    return undefined;
  }

  /** A query carrying `budget` returned `bytes` of stored events and read `rows` stored rows. */
  spend(budget: AddressBudget | undefined, bytes: number, rows: number): void {
    if (!budget) return;
    const left = this.of(budget);
    left.read -= bytes;
    left.scan -= rows;
  }

  private of(budget: AddressBudget): { read: number; scan: number } {
    let left = this.left.get(budget.address);
    if (!left) {
      left = { read: budget.read, scan: budget.scan };
      this.left.set(budget.address, left);
    }
    return left;
  }
}
