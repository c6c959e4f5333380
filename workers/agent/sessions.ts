// Conversation history per conversation — the pair (sender pubkey, NIP-XX `s` tag), never the `s`
// tag alone: `s` values are predictable (`sender:<hex>`) or visible in run event tags, so keying by
// `s` would let anyone read and write another person's conversation. History is kept in the Agent
// DO's SQLite, trimmed to the agent's max_context_tokens per conversation; each conversation also
// records its completed turns (for SESSION_LIMIT) and when it was last used (for retention). All
// conversations together are kept within MAX_HISTORY_BYTES (their rows' bytes, counted by triggers
// in `history_size`): past it, whole conversations are forgotten, the least recently used first and
// every stranger's before any of the owner's, so that strangers' prompts (each from a fresh key if
// they like) cannot fill the object's storage nor push out the owner's conversations; the
// conversation just answered is the last to go, by its oldest turns.

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

/** The bytes all of an agent's conversations may take together (see the header): 64 MiB. */
export const MAX_HISTORY_BYTES = 64 * 1024 * 1024;

/** What a stored row counts beyond its text: its integers and SQLite's record and page overhead, roughly. */
const ROW_OVERHEAD = 32;
/** The bytes a `history` row (`r`: NEW or OLD in a trigger) counts: its message and keys. */
const historyRowBytes = (r: string): string =>
  `octet_length(${r}.message) + octet_length(${r}.sender) + octet_length(${r}.session) + octet_length(${r}.turn) + ${ROW_OVERHEAD}`;
/** The bytes a `conversations` row counts: its keys twice (the table and its index on touched_at). */
const conversationRowBytes = (r: string): string => `2 * (octet_length(${r}.sender) + octet_length(${r}.session)) + ${ROW_OVERHEAD}`;

/** Keeps `history_size` the sum of the bytes of every row of `history` and `conversations`, however rows come and go. */
const SIZE_TRIGGERS = `
CREATE TRIGGER IF NOT EXISTS history_added AFTER INSERT ON history BEGIN
  UPDATE history_size SET bytes = bytes + ${historyRowBytes('NEW')};
END;
CREATE TRIGGER IF NOT EXISTS history_removed AFTER DELETE ON history BEGIN
  UPDATE history_size SET bytes = bytes - (${historyRowBytes('OLD')});
END;
CREATE TRIGGER IF NOT EXISTS conversation_added AFTER INSERT ON conversations BEGIN
  UPDATE history_size SET bytes = bytes + ${conversationRowBytes('NEW')};
END;
CREATE TRIGGER IF NOT EXISTS conversation_removed AFTER DELETE ON conversations BEGIN
  UPDATE history_size SET bytes = bytes - (${conversationRowBytes('OLD')});
END;`;

export class SessionStore {
  /** The bound of all conversations' bytes (MAX_HISTORY_BYTES; tests lower it). */
  maxBytes = MAX_HISTORY_BYTES;

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
    CREATE INDEX IF NOT EXISTS conversations_touched ON conversations(touched_at);
    CREATE TABLE IF NOT EXISTS history_size (k INTEGER PRIMARY KEY CHECK (k = 1), bytes INTEGER NOT NULL);
    ${SIZE_TRIGGERS}`);
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
    // Counted once from the rows, when the total is not kept yet (history stored before it was).
    if (this.sql.exec('SELECT 1 FROM history_size WHERE k = 1').toArray().length === 0) {
      this.sql.exec(
        `INSERT INTO history_size (k, bytes) VALUES (1,
          coalesce((SELECT sum(${historyRowBytes('h')}) FROM history h), 0) + coalesce((SELECT sum(${conversationRowBytes('c')}) FROM conversations c), 0))`,
      );
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

  /**
   * Appends one turn's messages, then drops whole turns from the start until the conversation fits
   * `maxTokens`, then forgets conversations until all of them fit maxBytes (fit). `owner` is the
   * agent's owner, whose conversations go after every stranger's.
   */
  append(k: SessionKey, turn: string, messages: readonly ChatMessage[], bounds: { maxTokens: number; owner: string }, now = Date.now()): void {
    const { sender, session } = k;
    // Absent only once every table was emptied (the agent removed): the counted rows are none.
    this.sql.exec('INSERT OR IGNORE INTO history_size (k, bytes) VALUES (1, 0)');
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
    while (this.tokens(k) > bounds.maxTokens && this.dropOldestTurn(k));
    this.fit(k, bounds.owner);
  }

  /** The bytes all conversations take (see the header). */
  bytes(): number {
    return this.sql.exec<{ bytes: number }>('SELECT bytes FROM history_size WHERE k = 1').toArray()[0]?.bytes ?? 0;
  }

  /**
   * Forgets conversations until all fit maxBytes: the least recently used first, every stranger's
   * (a sender other than `owner`) before any of the owner's. The conversation `current` (just
   * answered, so the most recently used) loses its oldest turns instead, once it is the one to go.
   * Conversations are chosen and deleted by their stored keys, in SQL (as prune does).
   */
  private fit(current: SessionKey, owner: string): void {
    for (const whose of ['!=', '='] as const) {
      const victim = `SELECT sender, session FROM conversations WHERE sender ${whose} ?1 ORDER BY touched_at, sender, session LIMIT 1`;
      while (this.bytes() > this.maxBytes) {
        const found = this.sql
          .exec<{ current: number }>(`SELECT sender = ?2 AND session = ?3 AS current FROM (${victim})`, owner, current.sender, current.session)
          .toArray()[0];
        if (!found) break;
        if (found.current && this.dropOldestTurn(current)) continue;
        this.sql.exec(`DELETE FROM history WHERE (sender, session) IN (${victim})`, owner);
        this.sql.exec(`DELETE FROM conversations WHERE (sender, session) IN (${victim})`, owner);
      }
    }
  }

  /** Deletes the conversation's oldest turn; false when it has none. */
  private dropOldestTurn(k: SessionKey): boolean {
    const oldest = this.sql
      .exec<{ turn: string }>('SELECT turn FROM history WHERE sender = ? AND session = ? ORDER BY idx LIMIT 1', k.sender, k.session)
      .toArray()[0];
    if (!oldest) return false;
    this.sql.exec('DELETE FROM history WHERE sender = ? AND session = ? AND turn = ?', k.sender, k.session, oldest.turn);
    return true;
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
