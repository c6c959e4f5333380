// Import of JSONL into a shard (POST /api/relay/import, and restores from a backup): each line is
// parsed, its id and signature verified, and the event put through the shard's write path as if its
// owner had published it on an authenticated connection (the `rejectEvent` hooks, storage, the
// hooks after a write). The owner's import skips the rate buckets (like edgestr's own agents: it is
// bounded by the body cap instead, and by one import, restore or export at a time per shard:
// bulk-jobs.ts); every other rule applies, NIP-70's included (a protected event of another author
// is refused). Events that are not stored (ephemeral kinds) are refused. The report counts
// accepted, duplicate (already stored: importing twice accepts nothing new) and refused lines by the
// relay's OK message. No signature is verified for nothing: an id the shard stores already is a
// duplicate as soon as the line's shape is read, and so is an id verified earlier in the same import
// (a file of one line repeated costs one verification). Lines go to the shard in batches
// (importBatches) of at most IMPORT_BATCH lines and IMPORT_BATCH_BYTES, so that one RPC never
// carries more than an export page (plus one line longer than that alone, and in a restore the
// counted line of the batch's events, below).
// A backup's revocation lines (export.ts) are handed to `revocation` (ownership.ts
// `restoreRevocation`: on an owner shard only its owner's, within the per-owner bound) and counted
// like events: accepted when new, duplicate when the shard had it, else refused with the reason. Its
// provisioning lines go to `provisioned` likewise, and its retention line to `retention`, in a
// restore only: an import refuses them (NOT_RESTORED, NOT_RESTORED_RETENTION), since they make a key
// the owner's or remove events, and the file is the owner's own. Its counted lines (the sides the
// next page's events were counted in, owner-plan.ts) go to `counted` in a restore, before those
// events, and are not counted in the report (they are no record); an import refuses them
// (NOT_RESTORED_COUNTED) and judges its events as they come. A shard keeps no restore state from one
// RPC call to the next (it may restart between them: a deploy, an eviction): when a page's events
// go on in the next batch, that batch starts with a counted line of its own events' sides
// (importBatches `carrySides`, what readBackupLines asks), and a counted line holds only for the
// rest of its own batch.

import { checkIdAndSignature, parseEvent, type NostrEvent } from '../../src/shared/event.js';
import { formatRejection, reject } from '../../src/shared/errors.js';
import { isStored } from '../../src/shared/kinds.js';
import type { SchnorrVerifier } from '../../src/shared/verify.js';
import { utf8Bytes } from '../../src/shared/json-cut.js';
import { COUNTED, countedLine, EXPORT_PAGE_BYTES, parseCountedLine, parseProvisionedLine, parseRetentionLine, parseRevocationLine } from './export.js';
import type { ProvisionedRecord, RestoredRecord, Revocation } from './ownership.js';
import type { CountedSide } from './owner-plan.js';
import type { RetentionRule } from './retention.js';

/** Lines sent to the shard per RPC call, at most. */
export const IMPORT_BATCH = 500;
/** Bytes (UTF-8) of the lines sent to the shard per RPC call, at most (a longer line goes alone): an export page's. */
export const IMPORT_BATCH_BYTES = EXPORT_PAGE_BYTES;

export interface ImportReport {
  accepted: number;
  duplicate: number;
  refused: Record<string, number>;
}

export const emptyReport = (): ImportReport => ({ accepted: 0, duplicate: 0, refused: {} });

export function mergeReports(a: ImportReport, b: ImportReport): ImportReport {
  const refused = { ...a.refused };
  for (const [reason, n] of Object.entries(b.refused)) refused[reason] = (refused[reason] ?? 0) + n;
  return { accepted: a.accepted + b.accepted, duplicate: a.duplicate + b.duplicate, refused };
}

/** The non-empty lines of a JSONL text (LF or CRLF). */
export const jsonLines = (text: string): string[] => text.split(/\r?\n/).filter((l) => l.trim() !== '');

/**
 * `lines` in order, in batches of at most `maxLines` lines and IMPORT_BATCH_BYTES bytes of UTF-8 (a
 * longer line alone): one RPC each. `carrySides` (a restore): a batch that goes on with the events of
 * a page whose counted line an earlier batch held starts with a counted line of those of its events
 * that line names (its size on top of the bounds: at most one page's sides).
 */
export async function* importBatches(lines: AsyncIterable<string> | Iterable<string>, maxLines = IMPORT_BATCH, carrySides = false): AsyncGenerator<string[]> {
  let batch: string[] = [];
  let bytes = 0;
  let sides: Map<string, CountedSide> | undefined; // the last counted line's, while its page may go on
  let carried: Map<string, CountedSide> | undefined; // those the current batch began with
  const withSides = (lines: string[]): string[] => {
    const named = carried;
    if (!named) return lines;
    const next = lines.findIndex(isCountedLine); // the lines after it follow their own counted line
    const ids = (next < 0 ? lines : lines.slice(0, next)).map(eventIdOf).filter((id) => id !== undefined);
    const own = ids.flatMap((id) => named.get(id) ?? []);
    return own.length > 0 ? [countedLine(own), ...lines] : lines;
  };
  for await (const line of lines) {
    const size = utf8Bytes(line);
    if (batch.length > 0 && (batch.length >= maxLines || bytes + size > IMPORT_BATCH_BYTES)) {
      yield withSides(batch);
      batch = [];
      bytes = 0;
      carried = sides;
    }
    if (carrySides && isCountedLine(line)) {
      const parsed = parseCountedLine(parseJson(line));
      sides = parsed?.ok ? new Map(parsed.value.map((side) => [side.id, side])) : undefined;
    }
    batch.push(line);
    bytes += size;
  }
  if (batch.length > 0) yield withSides(batch);
}

const isCountedLine = (line: string): boolean => line.startsWith(`["${COUNTED}"`);

/** A line's JSON value, undefined when it is not JSON (the shard says so when it reads it). */
function parseJson(line: string): unknown {
  try {
    return JSON.parse(line) as unknown;
  } catch {
    return undefined;
  }
}

/** The id of the event a line holds (an object with a string id), else undefined. */
function eventIdOf(line: string): string | undefined {
  const value = line.startsWith('{') ? parseJson(line) : undefined;
  return typeof value === 'object' && value !== null && 'id' in value && typeof value.id === 'string' ? value.id : undefined;
}

type Write = (e: NostrEvent, ack: (accepted: boolean, message: string) => void) => Promise<void>;

/** Where a batch of lines goes: the shard (importEvents). */
export interface ImportSink {
  verifier: SchnorrVerifier;
  /** Whether the shard stores an event of this id (the line is a duplicate, not verified). */
  stored(id: string): boolean;
  /** The write path of a verified event. */
  write: Write;
  /** A revocation line. */
  revocation(r: Revocation): RestoredRecord;
  /** A provisioning line, in a restore of one of this deployment's backups; absent in an import (refused). */
  provisioned?: (r: ProvisionedRecord) => RestoredRecord;
  /** A retention line, in a restore; absent in an import (refused). */
  retention?: (rules: RetentionRule[]) => RestoredRecord;
  /** A counted line (the sides of the events that follow), in a restore; absent in an import (refused). */
  counted?: (sides: CountedSide[]) => void;
  /** The ids verified earlier in this import (kept across its batches); absent in a restore. */
  verified?: Set<string>;
}

const NOT_JSON = formatRejection(reject('invalid', 'line is not JSON'));
const NOT_STORED = formatRejection(reject('invalid', 'ephemeral events are not imported'));
const ONLY_RESTORED = "come back only with a restore of this deployment's backups (POST /api/relay/restore), not in an import";
export const NOT_RESTORED = formatRejection(reject('restricted', `provisioning records ${ONLY_RESTORED}`));
export const NOT_RESTORED_RETENTION = formatRejection(reject('restricted', `retention rules ${ONLY_RESTORED}: set them with PATCH /api/relay/retention`));
export const NOT_RESTORED_COUNTED = formatRejection(reject('restricted', `the sides events were counted in ${ONLY_RESTORED}: an import's events are judged as they come`));

/** Puts each line through the sink (in order) and counts the answers. */
export async function importLines(lines: readonly string[], sink: ImportSink): Promise<ImportReport> {
  const report = emptyReport();
  const refuse = (reason: string) => {
    report.refused[reason] = (report.refused[reason] ?? 0) + 1;
  };
  const count = (restored: RestoredRecord) => {
    if (restored === 'restored') report.accepted++;
    else if (restored === 'known') report.duplicate++;
    else refuse(formatRejection(restored));
  };
  for (const line of lines) {
    let input: unknown;
    try {
      input = JSON.parse(line);
    } catch {
      refuse(NOT_JSON);
      continue;
    }
    const revocation = parseRevocationLine(input);
    if (revocation !== undefined) {
      count(revocation.ok ? sink.revocation(revocation.value) : reject('invalid', revocation.error));
      continue;
    }
    const provisioned = parseProvisionedLine(input);
    if (provisioned !== undefined) {
      if (!sink.provisioned) refuse(NOT_RESTORED);
      else count(provisioned.ok ? sink.provisioned(provisioned.value) : reject('invalid', provisioned.error));
      continue;
    }
    const retention = parseRetentionLine(input);
    if (retention !== undefined) {
      if (!sink.retention) refuse(NOT_RESTORED_RETENTION);
      else count(retention.ok ? sink.retention(retention.value) : reject('invalid', retention.error));
      continue;
    }
    const counted = parseCountedLine(input);
    if (counted !== undefined) {
      if (!sink.counted) refuse(NOT_RESTORED_COUNTED);
      else if (!counted.ok) refuse(formatRejection(reject('invalid', counted.error)));
      else sink.counted(counted.value);
      continue;
    }
    const shaped = parseEvent(input);
    if (!shaped.ok) {
      refuse(formatRejection(shaped.error));
      continue;
    }
    if (!isStored(shaped.value.kind)) {
      refuse(NOT_STORED);
      continue;
    }
    // Before any signature work: what is stored, or was verified earlier in this import, is a duplicate.
    if (sink.verified?.has(shaped.value.id) || sink.stored(shaped.value.id)) {
      report.duplicate++;
      continue;
    }
    const checked = checkIdAndSignature(shaped.value, sink.verifier);
    if (!checked.ok) {
      refuse(formatRejection(checked.error));
      continue;
    }
    sink.verified?.add(checked.value.id);
    await sink.write(checked.value, (accepted, message) => {
      if (!accepted) refuse(message);
      else if (message.startsWith('duplicate:')) report.duplicate++;
      else report.accepted++;
    });
  }
  return report;
}
