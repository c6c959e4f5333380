// The bridge's payment rows in its Durable Object's SQLite: one row per invoice handed out (who
// asked, for which request, capability and server, how much, until when, paid when, used when (its
// call went upstream), served when (its answer was published), what the verifier needs to confirm
// it, cancelled when, dropped when: paid but given up without an answer, logged for a refund: its
// call never ran, or was cut off before its answer was published). Rows outlive the DO's memory: a
// payment that arrives while the bridge sleeps is recorded, and a client that re-sends the same
// request after paying is served without paying twice (also when a restart cut its call off before
// the answer was published). An invoice is pending (counted against the
// caps) while it is unpaid, not cancelled and not expired. Rows are deleted a day after they expire
// (bounded per pass).

/** Unix seconds. */
export const nowSeconds = (): number => Math.floor(Date.now() / 1000);

/** Expired rows are kept this long (to answer "expired" rather than "unknown"), then pruned. */
const RETENTION_SECONDS = 24 * 3600;
const PRUNE_BATCH = 500;

export type PaymentRow = {
  id: string;
  invoice: string;
  request_id: string;
  client: string;
  server: string;
  capability: string;
  sats: number;
  created: number;
  expires: number;
  paid_at: number | null;
  /** When its call last went upstream. */
  used_at: number | null;
  /** When its call's answer was published: the row is spent. */
  served_at: number | null;
  proof: string | null;
  /** When its request was cancelled while unpaid (or its payment request could not be sent): the invoice no longer counts as pending. */
  cancelled_at: number | null;
  /** When the gate gave up its paid call without an answer and logged it for a refund (never run: cancelled, expired, its request dropped by a restart for good; or cut off before its answer was published): it never runs (again). */
  dropped_at: number | null;
};

export type NewPayment = Omit<PaymentRow, 'paid_at' | 'used_at' | 'served_at' | 'cancelled_at' | 'dropped_at'>;

export class PaymentStore {
  constructor(private readonly sql: SqlStorage) {
    this.sql.exec(`
      CREATE TABLE IF NOT EXISTS payments (
        id TEXT PRIMARY KEY, invoice TEXT NOT NULL UNIQUE, request_id TEXT NOT NULL, client TEXT NOT NULL,
        server TEXT NOT NULL, capability TEXT NOT NULL, sats INTEGER NOT NULL, created INTEGER NOT NULL,
        expires INTEGER NOT NULL, paid_at INTEGER, used_at INTEGER, proof TEXT
      ) WITHOUT ROWID;
      CREATE INDEX IF NOT EXISTS payments_request ON payments(request_id);
      CREATE INDEX IF NOT EXISTS payments_pending ON payments(client, paid_at, expires);
      CREATE INDEX IF NOT EXISTS payments_expires ON payments(expires);
      CREATE INDEX IF NOT EXISTS payments_created ON payments(client, created);
    `);
    const columns = this.sql.exec<{ name: string }>("SELECT name FROM pragma_table_info('payments')").toArray();
    for (const added of ['cancelled_at', 'served_at', 'dropped_at']) {
      if (!columns.some((c) => c.name === added)) this.sql.exec(`ALTER TABLE payments ADD COLUMN ${added} INTEGER`);
    }
    // Paid rows whose call never ran nor was given up: few, read at every alarm (`unrunBefore`).
    this.sql.exec('CREATE INDEX IF NOT EXISTS payments_unrun ON payments(created) WHERE paid_at IS NOT NULL AND used_at IS NULL AND dropped_at IS NULL');
    // Paid rows whose call went upstream and was neither answered nor given up: few, read at every alarm (`cutOffBefore`).
    this.sql.exec('CREATE INDEX IF NOT EXISTS payments_unanswered ON payments(used_at) WHERE used_at IS NOT NULL AND served_at IS NULL AND dropped_at IS NULL');
  }

  insert(p: NewPayment): void {
    this.sql.exec(
      'INSERT INTO payments (id, invoice, request_id, client, server, capability, sats, created, expires, proof) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)',
      p.id, p.invoice, p.request_id, p.client, p.server, p.capability, p.sats, p.created, p.expires, p.proof,
    );
  }

  byId(id: string): PaymentRow | undefined {
    return this.sql.exec<PaymentRow>('SELECT * FROM payments WHERE id = ?', id).toArray()[0];
  }

  isPaid(id: string): boolean {
    return this.sql.exec('SELECT 1 FROM payments WHERE id = ? AND paid_at IS NOT NULL', id).toArray().length > 0;
  }

  byInvoice(invoice: string): PaymentRow | undefined {
    return this.sql.exec<PaymentRow>('SELECT * FROM payments WHERE invoice = ?', invoice).toArray()[0];
  }

  /** The newest row of a request by this client. */
  byRequest(requestId: string, client: string): PaymentRow | undefined {
    return this.sql.exec<PaymentRow>('SELECT * FROM payments WHERE request_id = ? AND client = ? ORDER BY created DESC LIMIT 1', requestId, client).toArray()[0];
  }

  /** Unpaid invoices still open at `now` (not cancelled, not expired): the client's, the server's (when named) and everybody's. */
  pendingCounts(client: string, now: number, server = ''): { client: number; server: number; total: number } {
    const row = this.sql
      .exec<{ mine: number; server: number; total: number }>(
        `SELECT COALESCE(SUM(client = ?), 0) AS mine, COALESCE(SUM(server = ?), 0) AS server, COUNT(*) AS total
         FROM payments WHERE paid_at IS NULL AND cancelled_at IS NULL AND expires > ?`,
        client,
        server,
        now,
      )
      .one();
    return { client: row.mine, server: row.server, total: row.total };
  }

  /**
   * Unpaid invoices still open at `now` (not cancelled, not expired) of `owner`'s key and of every
   * other client: one entry per side that has any, how many and the first expiry (Unix seconds).
   */
  openInvoices(owner: string, now: number): Array<{ owner: boolean; count: number; first: number }> {
    return this.sql
      .exec<{ owner: number; count: number; first: number }>(
        `SELECT client = ?1 AS owner, COUNT(*) AS count, MIN(expires) AS first
         FROM payments WHERE paid_at IS NULL AND cancelled_at IS NULL AND expires > ?2 GROUP BY client = ?1`,
        owner,
        now,
      )
      .toArray()
      .map((r) => ({ owner: r.owner === 1, count: r.count, first: r.first }));
  }

  /** The creation times of the client's invoices made after `since`, oldest first, at most `limit`. */
  createdSince(client: string, since: number, limit: number): number[] {
    return this.sql.exec<{ created: number }>('SELECT created FROM payments WHERE client = ? AND created > ? ORDER BY created LIMIT ?', client, since, limit).toArray().map((r) => r.created);
  }

  /** The request of an unpaid invoice was cancelled (or its payment request could not be sent): it stops counting as pending. False when paid or already cancelled. */
  markCancelled(id: string, at: number): boolean {
    return this.sql.exec('UPDATE payments SET cancelled_at = ? WHERE id = ? AND paid_at IS NULL AND cancelled_at IS NULL RETURNING id', at, id).toArray().length > 0;
  }

  /** Records the payment once; false when the row is unknown or was already paid. */
  markPaid(id: string, at: number): boolean {
    return this.sql.exec('UPDATE payments SET paid_at = ? WHERE id = ? AND paid_at IS NULL RETURNING id', at, id).toArray().length > 0;
  }

  /** A paid row's call goes upstream; false when unpaid, already served or dropped. */
  markUsed(id: string, at: number): boolean {
    return this.sql.exec('UPDATE payments SET used_at = ? WHERE id = ? AND paid_at IS NOT NULL AND served_at IS NULL AND dropped_at IS NULL RETURNING id', at, id).toArray().length > 0;
  }

  /** A paid row whose call never went upstream is given up (it never runs); false when unpaid, used or already dropped. */
  markDropped(id: string, at: number): boolean {
    return this.sql.exec('UPDATE payments SET dropped_at = ? WHERE id = ? AND paid_at IS NOT NULL AND used_at IS NULL AND dropped_at IS NULL RETURNING id', at, id).toArray().length > 0;
  }

  /** A paid row whose call went upstream is given up unanswered (it never runs again); false when unused, served or already dropped. */
  markCutOff(id: string, at: number): boolean {
    return this.sql.exec('UPDATE payments SET dropped_at = ? WHERE id = ? AND used_at IS NOT NULL AND served_at IS NULL AND dropped_at IS NULL RETURNING id', at, id).toArray().length > 0;
  }

  /**
   * Rows whose call last went upstream before `usedBefore` and was neither answered nor given up
   * (oldest first, at most `limit`): a restart cut their call off, and nobody ran it again.
   */
  cutOffBefore(usedBefore: number, limit: number): PaymentRow[] {
    return this.sql
      .exec<PaymentRow>('SELECT * FROM payments WHERE used_at IS NOT NULL AND served_at IS NULL AND dropped_at IS NULL AND used_at < ? ORDER BY used_at LIMIT ?', usedBefore, limit)
      .toArray();
  }

  /**
   * Rows paid in time for their open request whose call never went upstream nor was given up,
   * made before `created` (oldest first, at most `limit`): a restart dropped their request.
   */
  unrunBefore(created: number, limit: number): PaymentRow[] {
    return this.sql
      .exec<PaymentRow>(
        'SELECT * FROM payments WHERE paid_at IS NOT NULL AND used_at IS NULL AND dropped_at IS NULL AND created < ? AND cancelled_at IS NULL AND paid_at < expires ORDER BY created LIMIT ?',
        created,
        limit,
      )
      .toArray();
  }

  /** A paid row's call was answered: the row is spent. */
  markServed(id: string, at: number): void {
    this.sql.exec('UPDATE payments SET served_at = ? WHERE id = ? AND paid_at IS NOT NULL', at, id);
  }

  /** The earliest expiry of an unpaid invoice after `now` (when the gate must wake next). */
  nextExpiry(now: number): number | undefined {
    const row = this.sql.exec<{ at: number | null }>('SELECT MIN(expires) AS at FROM payments WHERE paid_at IS NULL AND cancelled_at IS NULL AND expires > ?', now).one();
    return row.at ?? undefined;
  }

  /**
   * Whether the gate still has a payment to look after at `now`: an unpaid invoice still open,
   * cancelled or not (a payment for it may still arrive; it is recorded, payments-gate.ts), or a
   * paid row whose call neither ran nor was given up (its alarm logs it for a refund: `unrunBefore`),
   * or went upstream and was neither answered nor given up (likewise: `cutOffBefore`).
   */
  awaitingPayment(now: number): boolean {
    return (
      this.sql.exec('SELECT 1 FROM payments WHERE paid_at IS NULL AND expires > ? LIMIT 1', now).toArray().length > 0 ||
      this.sql
        .exec('SELECT 1 FROM payments WHERE paid_at IS NOT NULL AND used_at IS NULL AND dropped_at IS NULL AND cancelled_at IS NULL AND paid_at < expires LIMIT 1')
        .toArray().length > 0 ||
      this.sql.exec('SELECT 1 FROM payments WHERE used_at IS NOT NULL AND served_at IS NULL AND dropped_at IS NULL LIMIT 1').toArray().length > 0
    );
  }

  /** Deletes rows expired more than a day before `now` (at most 500 a pass); how many went. */
  prune(now: number): number {
    return this.sql.exec('DELETE FROM payments WHERE id IN (SELECT id FROM payments WHERE expires < ? LIMIT ?)', now - RETENTION_SECONDS, PRUNE_BATCH).rowsWritten;
  }
}
