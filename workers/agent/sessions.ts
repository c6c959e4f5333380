// Conversation history per conversation — the pair (sender pubkey, NIP-XX `s` tag), never the `s`
// tag alone: `s` values are predictable (`sender:<hex>`) or visible in run event tags, so keying by
// `s` would let anyone read and write another person's conversation. History is kept in the Agent
// DO's SQLite, trimmed to the agent's max_context_tokens; each conversation also records its
// completed turns (for SESSION_LIMIT) and when it was last used (for retention).

import { utf8Bytes } from '../../src/shared/json-cut.js';
import type { ChatMessage } from './providers/types.js';

/**
 * A rough token estimate (4 bytes of UTF-8 per token, plus 4 per message), the same for every
 * provider: English text runs about 4 characters per token; bytes rather than characters keep
 * text of fewer characters per token (CJK: about one token per character, 3 bytes) from counting
 * at a quarter of its cost.
 */
export const estimateTokens = (m: ChatMessage): number => {
  const extra = m.role === 'assistant' && m.tool_calls ? utf8Bytes(JSON.stringify(m.tool_calls)) : 0;
  return Math.ceil((utf8Bytes(m.content) + extra) / 4) + 4;
};

/** One conversation: whose (the sender's pubkey) and which (the `s` tag). */
export interface SessionKey {
  sender: string;
  session: string;
}

export class SessionStore {
  constructor(private readonly sql: SqlStorage) {
    this.migrate();
  }

  /**
   * Creates the tables (again, after the Durable Object's storage was wiped). History of the first
   * schema (keyed by `s` only) is moved under the sender of the run that wrote each turn (the
   * `runs` table knows it); turns whose run is unknown are dropped.
   */
  private migrate(): void {
    const old = this.sql.exec<{ name: string }>("SELECT name FROM pragma_table_info('history')").toArray();
    const legacy = old.length > 0 && !old.some((c) => c.name === 'sender');
    if (legacy) this.sql.exec('ALTER TABLE history RENAME TO history_v1');
    this.sql.exec(`CREATE TABLE IF NOT EXISTS history (
      sender TEXT NOT NULL,
      session TEXT NOT NULL,
      idx INTEGER NOT NULL,
      turn TEXT NOT NULL,
      message TEXT NOT NULL,
      tokens INTEGER NOT NULL,
      PRIMARY KEY (sender, session, idx)
    ) WITHOUT ROWID;
    CREATE TABLE IF NOT EXISTS conversations (
      sender TEXT NOT NULL,
      session TEXT NOT NULL,
      turns INTEGER NOT NULL DEFAULT 0,
      touched_at INTEGER NOT NULL,
      PRIMARY KEY (sender, session)
    ) WITHOUT ROWID;
    CREATE INDEX IF NOT EXISTS conversations_touched ON conversations(touched_at);`);
    if (legacy) {
      const hasRuns = this.sql.exec("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'runs'").toArray().length > 0;
      if (hasRuns) {
        this.sql.exec(`INSERT OR IGNORE INTO history (sender, session, idx, turn, message, tokens)
          SELECT r.client, h.session, h.idx, h.turn, h.message, h.tokens FROM history_v1 h JOIN runs r ON r.id = h.turn`);
        this.sql.exec(`INSERT OR IGNORE INTO conversations (sender, session, turns, touched_at)
          SELECT client, session, count(*), max(started_at) FROM runs WHERE outcome = 'response' GROUP BY client, session`);
      }
      this.sql.exec('DROP TABLE history_v1');
    }
  }

  /** The conversation's messages, oldest first. */
  load(k: SessionKey): ChatMessage[] {
    return this.sql
      .exec<{ message: string }>('SELECT message FROM history WHERE sender = ? AND session = ? ORDER BY idx', k.sender, k.session)
      .toArray()
      .map((r) => JSON.parse(r.message) as ChatMessage);
  }

  /** Completed turns of the conversation (for SESSION_LIMIT). */
  turns(k: SessionKey): number {
    return this.sql.exec<{ turns: number }>('SELECT turns FROM conversations WHERE sender = ? AND session = ?', k.sender, k.session).toArray()[0]?.turns ?? 0;
  }

  /** Appends one turn's messages, then drops whole turns from the start until the conversation fits `maxTokens`. */
  append(k: SessionKey, turn: string, messages: readonly ChatMessage[], maxTokens: number, now = Date.now()): void {
    const { sender, session } = k;
    const next =
      this.sql.exec<{ n: number | null }>('SELECT max(idx) AS n FROM history WHERE sender = ? AND session = ?', sender, session).one().n ?? -1;
    messages.forEach((m, i) => {
      this.sql.exec(
        'INSERT INTO history (sender, session, idx, turn, message, tokens) VALUES (?, ?, ?, ?, ?, ?)',
        sender,
        session,
        next + 1 + i,
        turn,
        JSON.stringify(m),
        estimateTokens(m),
      );
    });
    this.sql.exec(
      `INSERT INTO conversations (sender, session, turns, touched_at) VALUES (?, ?, 1, ?)
       ON CONFLICT (sender, session) DO UPDATE SET turns = turns + 1, touched_at = excluded.touched_at`,
      sender,
      session,
      now,
    );
    for (;;) {
      if (this.tokens(k) <= maxTokens) break;
      const oldest = this.sql
        .exec<{ turn: string }>('SELECT turn FROM history WHERE sender = ? AND session = ? ORDER BY idx LIMIT 1', sender, session)
        .toArray()[0];
      if (!oldest) break;
      this.sql.exec('DELETE FROM history WHERE sender = ? AND session = ? AND turn = ?', sender, session, oldest.turn);
    }
  }

  tokens(k: SessionKey): number {
    return (
      this.sql.exec<{ t: number | null }>('SELECT sum(tokens) AS t FROM history WHERE sender = ? AND session = ?', k.sender, k.session).one().t ?? 0
    );
  }

  /**
   * Forgets up to `batch` conversations untouched since `before` (ms), oldest first. They are
   * deleted by their stored keys, in SQL, never by keys read back: a session stored with a lone
   * surrogate (before admission refused them) reads back as U+FFFD, matches no row, and would fill
   * every batch for ever.
   */
  prune(before: number, batch: number): void {
    const stale = 'SELECT sender, session FROM conversations WHERE touched_at < ?1 ORDER BY touched_at, sender, session LIMIT ?2';
    this.sql.exec(`DELETE FROM history WHERE (sender, session) IN (${stale})`, before, batch);
    this.sql.exec(`DELETE FROM conversations WHERE (sender, session) IN (${stale})`, before, batch);
  }
}
