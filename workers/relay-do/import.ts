// Import of JSONL into a shard (POST /api/relay/import, and restores from a backup): each line is
// parsed, its id and signature verified, and the event put through the shard's write path as if its
// owner had published it on an authenticated connection (the `rejectEvent` hooks, storage, the
// hooks after a write). The owner's import skips the rate buckets (like edgestr's own agents: it is
// bounded by the body cap instead); every other rule applies, NIP-70's included (a protected event
// of another author is refused). Events that are not stored (ephemeral kinds) are refused. The
// report counts accepted, duplicate (already stored: importing twice accepts nothing new) and
// refused lines by the relay's OK message. Lines go to the shard in batches (importBatches) of at
// most IMPORT_BATCH lines and IMPORT_BATCH_BYTES, so that one RPC never carries more than an
// export page (plus one line longer than that alone).
// A backup's revocation lines (export.ts) are handed to `restore` (ownership.ts
// `restoreRevocation`: on an owner shard only its owner's, within the per-owner bound) and counted
// like events: accepted when new, duplicate when the shard had it, else refused with the reason.

import { checkIdAndSignature, parseEvent, type NostrEvent } from '../../src/shared/event.js';
import { formatRejection, reject } from '../../src/shared/errors.js';
import { isStored } from '../../src/shared/kinds.js';
import type { SchnorrVerifier } from '../../src/shared/verify.js';
import { utf8Bytes } from '../../src/shared/json-cut.js';
import { EXPORT_PAGE_BYTES, parseRevocationLine } from './export.js';
import type { RestoredRevocation, Revocation } from './ownership.js';

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

/** `lines` in order, in batches of at most `maxLines` lines and IMPORT_BATCH_BYTES bytes of UTF-8 (a longer line alone): one RPC each. */
export async function* importBatches(lines: AsyncIterable<string> | Iterable<string>, maxLines = IMPORT_BATCH): AsyncGenerator<string[]> {
  let batch: string[] = [];
  let bytes = 0;
  for await (const line of lines) {
    const size = utf8Bytes(line);
    if (batch.length > 0 && (batch.length >= maxLines || bytes + size > IMPORT_BATCH_BYTES)) {
      yield batch;
      batch = [];
      bytes = 0;
    }
    batch.push(line);
    bytes += size;
  }
  if (batch.length > 0) yield batch;
}

type Write = (e: NostrEvent, ack: (accepted: boolean, message: string) => void) => Promise<void>;
type Restore = (r: Revocation) => RestoredRevocation;

const NOT_JSON = formatRejection(reject('invalid', 'line is not JSON'));
const NOT_STORED = formatRejection(reject('invalid', 'ephemeral events are not imported'));

/** Puts each line through `write`, or `restore` for a revocation line (in order), and counts the answers. */
export async function importLines(lines: readonly string[], verifier: SchnorrVerifier, write: Write, restore: Restore): Promise<ImportReport> {
  const report = emptyReport();
  const refuse = (reason: string) => {
    report.refused[reason] = (report.refused[reason] ?? 0) + 1;
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
      const restored = revocation.ok ? restore(revocation.value) : reject('invalid', revocation.error);
      if (restored === 'restored') report.accepted++;
      else if (restored === 'known') report.duplicate++;
      else refuse(formatRejection(restored));
      continue;
    }
    const checked = ((shaped) => (shaped.ok ? checkIdAndSignature(shaped.value, verifier) : shaped))(parseEvent(input));
    if (!checked.ok) {
      refuse(formatRejection(checked.error));
      continue;
    }
    if (!isStored(checked.value.kind)) {
      refuse(NOT_STORED);
      continue;
    }
    await write(checked.value, (accepted, message) => {
      if (!accepted) refuse(message);
      else if (message.startsWith('duplicate:')) report.duplicate++;
      else report.accepted++;
    });
  }
  return report;
}
