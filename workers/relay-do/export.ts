// Export of a shard as JSONL (one canonical event per line, oldest first, ties by id: the format
// strfry and nak read and write). The shard answers one page at a time (exportPage, at most
// EXPORT_PAGE events and EXPORT_PAGE_BYTES of their JSON, at least one event); `exportStream` turns
// pages into a ReadableStream that asks for the next page only when the reader wants more, so
// memory stays bounded whatever the shard's size and its events' sizes, and says when it ends (read
// to the end, cancelled or failed: GET /api/relay/export then gives back the shard's bulk lease,
// bulk-jobs.ts). Resumable: `since`/`until`
// bound created_at (inclusive), and a page names the cursor of the next one.
//
// A backup (backup.ts) is that export preceded by the shard's retention rules (retention.ts), the
// owners' revocations of agent keys kept on the shard (ownership.ts: NIP-OA attestations the owner
// revoked) and the records of edgestr's own provisioning (a hosted agent's key, a bridge's provider
// key), one line each:
//   ["RETENTION", [{"kinds": [..], "days": n}, …]]
//   ["REVOKED_AGENT", <agent hex>, <owner hex>, <revoked_at>]
//   ["PROVISIONED", <key hex>, <owner hex>, "provisioned" | "bridge", <recorded_at>]
// and each page of its events by the side each was counted in when it was stored (owner-plan.ts
// `carriedSides`: on an owner shard the owner's data or the inbox's, on the public shard an owner's
// share of the reserve), for those events whose side a restore cannot tell from the event alone:
//   ["COUNTED", [[<event id>, <inbox 0 | 1>, <owner hex> | null], …]]   (before the page's events)
// JSON arrays, never events, read back by the import (import.ts, `parseRetentionLine`,
// `parseRevocationLine`, `parseProvisionedLine`, `parseCountedLine`; all but revocations only by a
// restore). The records come first, so a restore judges the events by the rules in force, refuses
// the revoked keys' attestations from its first event on, and the owner's hosted agents are its own
// again before their events come. The export of GET /api/relay/export holds events only (the format
// other relays read).

import { z } from 'zod';
import { MAX_TIMESTAMP } from '../../src/shared/event.js';
import { err, ok, type Result } from '../../src/shared/errors.js';
import { HEX64 } from '../../src/shared/hex.js';
import type { ReadScope } from './query-sql.js';
import type { EventStore } from './store.js';
import type { OwnershipRegistry, ProvisionedRecord, Revocation } from './ownership.js';
import type { CountedSide } from './owner-plan.js';
import { RetentionRulesSchema, type RetentionRule } from './retention.js';

export const EXPORT_PAGE = 500;
/**
 * Bytes of event JSON one page carries at most (and one import batch, import.ts): 4 MiB, as a REQ's
 * max_query_bytes. 500 events near max_message_length would be 125 MiB in one RPC, past a Durable
 * Object's memory and the 32 MiB RPC limit.
 */
export const EXPORT_PAGE_BYTES = 4 * 1024 * 1024;

const Cursor = z.strictObject({ created_at: z.number().int(), id: z.string() });

export const ExportRangeSchema = z.strictObject({
  since: z.number().int().min(0).max(MAX_TIMESTAMP).default(0),
  until: z.number().int().min(0).max(MAX_TIMESTAMP).default(MAX_TIMESTAMP),
  after: Cursor.optional(),
});
export type ExportRange = z.input<typeof ExportRangeSchema>;
export type ExportCursor = z.infer<typeof Cursor>;

/** One page: the events' JSON lines and the cursor of the next page (absent on the last). */
export interface ExportPage {
  lines: string[];
  next?: ExportCursor;
}

/** The page of `range`: `next` is set whenever the page stopped at `limit` events or `maxBytes`. */
export function exportPage(
  store: EventStore,
  range: ExportRange,
  scope: Omit<ReadScope, 'readers'>,
  limit = EXPORT_PAGE,
  maxBytes = EXPORT_PAGE_BYTES,
): ExportPage {
  return backupEventsPage(store, range, scope, () => [], limit, maxBytes);
}

/**
 * The page of `range` as a backup holds it: its events, preceded by one COUNTED line of the sides
 * `sides` carries for them (none: no line).
 */
export function backupEventsPage(
  store: EventStore,
  range: ExportRange,
  scope: Omit<ReadScope, 'readers'>,
  sides: (ids: readonly string[]) => CountedSide[],
  limit = EXPORT_PAGE,
  maxBytes = EXPORT_PAGE_BYTES,
): ExportPage {
  const r = ExportRangeSchema.parse(range);
  const { events, full } = store.page(r, limit, maxBytes, scope);
  const carried = events.length > 0 ? sides(events.map((row) => row.id)) : [];
  const last = events[events.length - 1];
  const lines = events.map((row) => row.raw);
  if (carried.length > 0) lines.unshift(countedLine(carried));
  return { lines, ...(full && last ? { next: { created_at: last.created_at, id: last.id } } : {}) };
}

/**
 * A JSONL stream of every page `fetchPage` returns, from `range` on; each page is fetched when the
 * reader pulls. `end` runs once when the stream ends: read to the end, cancelled by the reader, or
 * failed.
 */
export function exportStream(range: ExportRange, fetchPage: (range: ExportRange) => Promise<ExportPage>, end: () => Promise<void> = async () => {}): ReadableStream<Uint8Array> {
  const encoder = new TextEncoder();
  let cursor: ExportCursor | undefined;
  let ended = false;
  const finish = async () => {
    if (ended) return;
    ended = true;
    await end();
  };
  return new ReadableStream<Uint8Array>({
    async pull(controller) {
      let page: ExportPage;
      try {
        page = await fetchPage({ ...range, ...(cursor ? { after: cursor } : {}) });
      } catch (e) {
        await finish();
        throw e;
      }
      cursor = page.next;
      if (page.lines.length > 0) controller.enqueue(encoder.encode(page.lines.map((l) => `${l}\n`).join('')));
      if (page.next === undefined) {
        await finish();
        controller.close();
      }
    },
    cancel: finish,
  });
}

/** The first element of a revocation line. */
export const REVOKED_AGENT = 'REVOKED_AGENT';

/** The cursor of the next page of revocations: the last one's key. */
export type RevocationCursor = Pick<Revocation, 'agent' | 'owner'>;

/** One page of backup lines and the cursor of the next page (absent on the last). */
export interface LinePage<Cursor> {
  lines: string[];
  next?: Cursor;
}
export type RevocationPage = LinePage<RevocationCursor>;

const revocationLine = (r: Revocation): string => JSON.stringify([REVOKED_AGENT, r.agent, r.owner, r.revoked_at]);

/** The revocations after `after` as backup lines, at most `limit` (each under 200 bytes): `next` is set when the page is full. */
export function revocationsPage(registry: OwnershipRegistry, after?: RevocationCursor, limit = EXPORT_PAGE): RevocationPage {
  const rows = registry.revocations(after, limit);
  const last = rows[rows.length - 1];
  return { lines: rows.map(revocationLine), ...(rows.length === limit && last ? { next: { agent: last.agent, owner: last.owner } } : {}) };
}

export const REVOCATION_LINE_FORM = `a revocation line is ["${REVOKED_AGENT}", <agent hex>, <owner hex>, <revoked_at>]`;

const Hex64 = z.string().regex(HEX64);
const RevocationLineSchema = z.tuple([z.literal(REVOKED_AGENT), Hex64, Hex64, z.number().int().min(0).max(MAX_TIMESTAMP)]);

/**
 * A parsed line that is a revocation line (an array starting with REVOKED_AGENT): the revocation,
 * or the reason it is malformed; undefined for anything else (the import judges it as an event).
 */
export function parseRevocationLine(input: unknown): Result<Revocation, string> | undefined {
  if (!Array.isArray(input) || input[0] !== REVOKED_AGENT) return undefined;
  const line = RevocationLineSchema.safeParse(input);
  return line.success ? ok({ agent: line.data[1], owner: line.data[2], revoked_at: line.data[3] }) : err(REVOCATION_LINE_FORM);
}

/** The first element of a provisioning line. */
export const PROVISIONED = 'PROVISIONED';

/** The cursor of the next page of provisioning records: the last one's key. */
export type ProvisionedCursor = Pick<ProvisionedRecord, 'agent' | 'owner' | 'source'>;
export type ProvisionedPage = LinePage<ProvisionedCursor>;

const provisionedLine = (r: ProvisionedRecord): string => JSON.stringify([PROVISIONED, r.agent, r.owner, r.source, r.recorded_at]);

/** The provisioning records after `after` as backup lines, at most `limit` (each under 200 bytes): `next` is set when the page is full. */
export function provisionedPage(registry: OwnershipRegistry, after?: ProvisionedCursor, limit = EXPORT_PAGE): ProvisionedPage {
  const rows = registry.provisionedRecords(after, limit);
  const last = rows[rows.length - 1];
  return { lines: rows.map(provisionedLine), ...(rows.length === limit && last ? { next: { agent: last.agent, owner: last.owner, source: last.source } } : {}) };
}

export const PROVISIONED_LINE_FORM = `a provisioning line is ["${PROVISIONED}", <key hex>, <owner hex>, "provisioned" | "bridge", <recorded_at>]`;

const ProvisionedLineSchema = z.tuple([z.literal(PROVISIONED), Hex64, Hex64, z.enum(['provisioned', 'bridge']), z.number().int().min(0).max(MAX_TIMESTAMP)]);

/**
 * A parsed line that is a provisioning line (an array starting with PROVISIONED): the record, or
 * the reason it is malformed; undefined for anything else.
 */
export function parseProvisionedLine(input: unknown): Result<ProvisionedRecord, string> | undefined {
  if (!Array.isArray(input) || input[0] !== PROVISIONED) return undefined;
  const line = ProvisionedLineSchema.safeParse(input);
  return line.success ? ok({ agent: line.data[1], owner: line.data[2], source: line.data[3], recorded_at: line.data[4] }) : err(PROVISIONED_LINE_FORM);
}

/** The first element of a line of the sides a page's events were counted in. */
export const COUNTED = 'COUNTED';

/** The counted line of `sides` (the events that follow it). */
export const countedLine = (sides: readonly CountedSide[]): string => JSON.stringify([COUNTED, sides.map((c) => [c.id, c.inbox ? 1 : 0, c.owner])]);

export const COUNTED_LINE_FORM = `a counted line is ["${COUNTED}", [[<event id>, 0 | 1, <owner hex> | null], …]] (at most ${EXPORT_PAGE})`;

const CountedLineSchema = z.tuple([z.literal(COUNTED), z.array(z.tuple([Hex64, z.union([z.literal(0), z.literal(1)]), Hex64.nullable()])).max(EXPORT_PAGE)]);

/**
 * A parsed line that is a counted line (an array starting with COUNTED): the sides, or the reason
 * it is malformed; undefined for anything else.
 */
export function parseCountedLine(input: unknown): Result<CountedSide[], string> | undefined {
  if (!Array.isArray(input) || input[0] !== COUNTED) return undefined;
  const line = CountedLineSchema.safeParse(input);
  return line.success ? ok(line.data[1].map(([id, inbox, owner]) => ({ id, inbox: inbox === 1, owner }))) : err(COUNTED_LINE_FORM);
}

/** The first element of a retention line. */
export const RETENTION = 'RETENTION';

/** The backup line of a shard's retention rules (none: no line). */
export const retentionLines = (rules: readonly RetentionRule[]): string[] => (rules.length > 0 ? [JSON.stringify([RETENTION, rules])] : []);

export const RETENTION_LINE_FORM = `a retention line is ["${RETENTION}", [{"kinds": [<kind>, …], "days": <days>}, …]] (as PATCH /api/relay/retention takes them)`;

const RetentionLineSchema = z.tuple([z.literal(RETENTION), RetentionRulesSchema]);

/**
 * A parsed line that is a retention line (an array starting with RETENTION): the rules, or the
 * reason it is malformed; undefined for anything else.
 */
export function parseRetentionLine(input: unknown): Result<RetentionRule[], string> | undefined {
  if (!Array.isArray(input) || input[0] !== RETENTION) return undefined;
  const line = RetentionLineSchema.safeParse(input);
  return line.success ? ok(line.data[1]) : err(RETENTION_LINE_FORM);
}
