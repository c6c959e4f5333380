// The record of a retired agent's withdrawal (agent-do.ts `alarm`): once its owner is removed, the
// agent deletes its DVMCP announcements from the public shard (NIP-09), once; the record says it
// was done (accepted by the shard), with the deletion's created_at, until the owner is back and the
// agent announces anew. One row in the agent's SQLite, emptied with the rest when the agent is deleted.

export class Withdrawal {
  constructor(private readonly sql: SqlStorage) {
    this.sql.exec('CREATE TABLE IF NOT EXISTS withdrawal (k INTEGER PRIMARY KEY CHECK (k = 1), deleted_at INTEGER NOT NULL)');
  }

  /** The created_at (s) of the deletion the public shard accepted (0: there was nothing announced to delete); undefined: not withdrawn. */
  deletedAt(): number | undefined {
    return this.sql.exec<{ deleted_at: number }>('SELECT deleted_at FROM withdrawal WHERE k = 1').toArray()[0]?.deleted_at;
  }

  record(deletedAt: number): void {
    this.sql.exec('INSERT INTO withdrawal (k, deleted_at) VALUES (1, ?) ON CONFLICT (k) DO UPDATE SET deleted_at = excluded.deleted_at', deletedAt);
  }

  clear(): void {
    this.sql.exec('DELETE FROM withdrawal');
  }
}
