// Event ids handled, kept in a Durable Object's SQLite so that they survive an eviction: the `seen`
// table (id, at), pruned by `at` in bounded batches. The caller chooses what `at` is (the time of
// receipt, or the event's created_at) and how long ids are kept: at least as long as it would
// accept the event again. The Bridge records request ids once handled (`add`); the Agent claims each
// incoming event id on arrival (`claim`, atomic) and gives a claim back for a forged copy (`forget`).

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

  /** Records `id` at `at` unless it is there, in one statement (no await between check and insert): whether it was new. */
  claim(id: string, at: number): boolean {
    return this.sql.exec('INSERT INTO seen (id, at) VALUES (?, ?) ON CONFLICT (id) DO NOTHING RETURNING id', id, at).toArray().length > 0;
  }

  /** Forgets `id`. */
  forget(id: string): void {
    this.sql.exec('DELETE FROM seen WHERE id = ?', id);
  }

  /** Forgets at most `limit` ids whose `at` is before `before`; how many. */
  prune(before: number, limit: number): number {
    return this.sql.exec('DELETE FROM seen WHERE id IN (SELECT id FROM seen WHERE at < ? LIMIT ?) RETURNING id', before, limit).toArray().length;
  }
}
