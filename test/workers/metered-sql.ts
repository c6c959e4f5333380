// A Durable Object's SqlStorage with what SQLite read counted, so that a test can assert that work
// is bounded by its input (rows of tables and indexes read, cursor.rowsRead), not by what is stored.

/**
 * `sql` with every statement's cursor recorded: `read()` is what SQLite read for them (rows of
 * tables and indexes, cursor.rowsRead) since the last `read()`.
 */
export function meteredSql(sql: SqlStorage): { sql: SqlStorage; read: () => number } {
  let cursors: SqlStorageCursor<Record<string, SqlStorageValue>>[] = [];
  const metered = new Proxy(sql, {
    get(target, prop) {
      if (prop === 'exec') {
        return (query: string, ...bindings: SqlStorageValue[]) => {
          const cursor = target.exec(query, ...bindings);
          cursors.push(cursor);
          return cursor;
        };
      }
      const value: unknown = Reflect.get(target, prop, target);
      return typeof value === 'function' ? value.bind(target) : value;
    },
  });
  return {
    sql: metered,
    read: () => {
      const n = cursors.reduce((sum, c) => sum + c.rowsRead, 0);
      cursors = [];
      return n;
    },
  };
}
