// What a stranger's events make a Worker log: each event a bridge or a hosted agent drops, refuses
// or cannot answer because of what a stranger sent is counted here by kind (DROPS, the one list of
// them) and reason, and logged as one summary line per kind at most once a minute instead of one
// line each (a stranger can send them as fast as a relay takes them): the first of a kind at once,
// later ones in the next line once a minute has passed, written by the next one of that kind or by
// `flush` (the object's watchdog alarm). A line names at most MAX_REASONS reasons (the most
// frequent first; the others counted together), each cut to MAX_REASON_CHARS and JSON-quoted. In
// memory: an evicted object loses the counts not yet written.

import { NOT_SOLE_RECIPIENT } from '../../src/shared/recipients.js';

/** A summary line of a kind is logged at most once per this window. */
export const DROP_LOG_WINDOW_MS = 60_000;
/** Distinct reasons one line names; further ones are counted as OTHER_REASONS. */
export const MAX_REASONS = 8;
/** Characters of a reason kept. */
export const MAX_REASON_CHARS = 200;
export const OTHER_REASONS = 'other reasons';

/** A kind of drop: `noun` (one event; an s makes it plural) and what happened to it. */
export interface DropKind {
  noun: string;
  what: string;
}

/** Every kind of drop a summary line is written for (docs/OBSERVABILITY.md "Log lines"). */
export const DROPS = {
  /** An event whose p tags are not exactly one naming the recipient (recipients.ts soleRecipient). */
  notAlone: { noun: 'event', what: `${NOT_SOLE_RECIPIENT} dropped` },
  /** A 1059 to a bridge that does not open to a DVMCP message (reason: why). */
  giftWrap: { noun: 'gift wrap', what: 'refused' },
  /** A 9735 that settles no invoice of the bridge (reason: why). */
  zapReceipt: { noun: 'zap receipt', what: 'ignored' },
  /** An answer or notification to a DVMCP client that its relay did not take (reason: the relay and its message). */
  refusedByRelay: { noun: 'event', what: 'to a client refused by the relay' },
  /** A gift-wrapped DVMCP request to a server with encryption off, not answered (reason: the servers). */
  encryptionOff: { noun: 'encrypted request', what: 'to a server with encryption off not answered' },
  /** A DVMCP request to a bridge while the owner registry cannot be read, answered -32603 unserved (reason: why it could not be read). */
  registryUnreadable: { noun: 'request', what: 'refused while the owner registry could not be read' },
  /** An event past an external relay's token bucket, dropped unread by a hosted agent (reason: the relay and its limit). */
  externalRelay: { noun: 'event', what: "over an external relay's limit dropped" },
  /** A priced call to a bridge for which its Lightning address made no invoice, answered -32012 without the reason (reason: why, workers/bridge/payments-gate.ts). */
  noInvoice: { noun: 'priced call', what: 'answered "the Lightning address could not make an invoice"' },
} as const satisfies Record<string, DropKind>;

interface Tally {
  count: number;
  reasons: Map<string, number>;
  loggedAt: number;
}

export class DropSummary {
  private readonly tallies = new Map<DropKind, Tally>();
  now: () => number = () => Date.now();

  /** `log` gets each line (the caller prefixes who logs it). */
  constructor(private readonly log: (line: string) => void) {}

  /** Counts one event of `kind` dropped for `reason`; logs the kind's count since its last line when a window has passed. */
  drop(kind: DropKind, reason?: string): void {
    let t = this.tallies.get(kind);
    if (!t) this.tallies.set(kind, (t = { count: 0, reasons: new Map(), loggedAt: -Infinity }));
    t.count++;
    if (reason !== undefined) {
      const r = reason.slice(0, MAX_REASON_CHARS);
      const key = t.reasons.has(r) || t.reasons.size < MAX_REASONS ? r : OTHER_REASONS;
      t.reasons.set(key, (t.reasons.get(key) ?? 0) + 1);
    }
    this.writeDue(kind, t);
  }

  /** Whether a count is not yet written (the next flush may have a line to write). */
  get pending(): boolean {
    return [...this.tallies.values()].some((t) => t.count > 0);
  }

  /** Logs every kind with a count not yet written whose window has passed. */
  flush(): void {
    for (const [kind, t] of this.tallies) if (t.count > 0) this.writeDue(kind, t);
  }

  private writeDue(kind: DropKind, t: Tally): void {
    const now = this.now();
    if (now - t.loggedAt < DROP_LOG_WINDOW_MS) return;
    const reasons = [...t.reasons].sort((a, b) => b[1] - a[1]).map(([r, n]) => `${n} ${JSON.stringify(r)}`);
    const why = reasons.length > 0 ? ` (${reasons.join(', ')})` : '';
    this.log(`${t.count} ${kind.noun}${t.count === 1 ? '' : 's'} ${kind.what} since the last report${why}; reported at most once a minute`);
    t.loggedAt = now;
    t.count = 0;
    t.reasons.clear();
  }
}
