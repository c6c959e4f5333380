// Conversation history per session (the NIP-XX `s` tag) in the Agent DO's SQLite, trimmed to the
// agent's max_context_tokens so multi-turn conversations stay within the model's context.

import type { ChatMessage } from './providers/types.js';

/** A rough token estimate (4 characters per token), the same for every provider. */
export const estimateTokens = (m: ChatMessage): number => {
  const extra = m.role === 'assistant' && m.tool_calls ? JSON.stringify(m.tool_calls).length : 0;
  return Math.ceil((m.content.length + extra) / 4) + 4;
};

export class SessionStore {
  constructor(private readonly sql: SqlStorage) {
    this.migrate();
  }

  /** Creates the table (again, after the Durable Object's storage was wiped). */
  migrate(): void {
    this.sql.exec(`CREATE TABLE IF NOT EXISTS history (
      session TEXT NOT NULL,
      idx INTEGER NOT NULL,
      turn TEXT NOT NULL,
      message TEXT NOT NULL,
      tokens INTEGER NOT NULL,
      PRIMARY KEY (session, idx)
    ) WITHOUT ROWID`);
  }

  /** The session's messages, oldest first. */
  load(session: string): ChatMessage[] {
    return this.sql
      .exec<{ message: string }>('SELECT message FROM history WHERE session = ? ORDER BY idx', session)
      .toArray()
      .map((r) => JSON.parse(r.message) as ChatMessage);
  }

  /** Appends one turn's messages, then drops whole turns from the start until the session fits `maxTokens`. */
  append(session: string, turn: string, messages: readonly ChatMessage[], maxTokens: number): void {
    const next = this.sql.exec<{ n: number | null }>('SELECT max(idx) AS n FROM history WHERE session = ?', session).one().n ?? -1;
    messages.forEach((m, i) => {
      this.sql.exec(
        'INSERT INTO history (session, idx, turn, message, tokens) VALUES (?, ?, ?, ?, ?)',
        session,
        next + 1 + i,
        turn,
        JSON.stringify(m),
        estimateTokens(m),
      );
    });
    for (;;) {
      const total = this.sql.exec<{ t: number | null }>('SELECT sum(tokens) AS t FROM history WHERE session = ?', session).one().t ?? 0;
      if (total <= maxTokens) break;
      const oldest = this.sql.exec<{ turn: string }>('SELECT turn FROM history WHERE session = ? ORDER BY idx LIMIT 1', session).toArray()[0];
      if (!oldest) break;
      this.sql.exec('DELETE FROM history WHERE session = ? AND turn = ?', session, oldest.turn);
    }
  }

  tokens(session: string): number {
    return this.sql.exec<{ t: number | null }>('SELECT sum(tokens) AS t FROM history WHERE session = ?', session).one().t ?? 0;
  }
}
