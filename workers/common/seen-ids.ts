// Event ids handled, kept in a Durable Object's SQLite so that they survive an eviction: the `seen`
// table (id, at), pruned by `at` in bounded batches. The caller chooses what `at` is (the time of
// receipt, or the event's created_at) and how long ids are kept: at least as long as it would
// accept the event again.

export class SeenIds {
  constructor(private readonly sql: SqlStorage) {
    sql.exec(`
      CREATE TABLE IF NOT EXISTS seen (id TEXT PRIMARY KEY, at INTEGER NOT NULL) WITHOUT ROWID;
      CREATE INDEX IF NOT EXISTS seen_at ON seen(at);
    `);
  }

  has(id: string): boolean {
    return this.sql.exec('SELECT 1 FROM seen WHERE id = ?', id).toArray().length > 0;
  }

  /** Records `id` (kept with its first `at` when it is there already). */
  add(id: string, at: number): void {
    this.sql.exec('INSERT INTO seen (id, at) VALUES (?, ?) ON CONFLICT (id) DO NOTHING', id, at);
  }

  /** Forgets at most `limit` ids whose `at` is before `before`; how many. */
  prune(before: number, limit: number): number {
    return this.sql.exec('DELETE FROM seen WHERE id IN (SELECT id FROM seen WHERE at < ? LIMIT ?) RETURNING id', before, limit).toArray().length;
  }
}
