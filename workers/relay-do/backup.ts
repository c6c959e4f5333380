// Scheduled backups of the shards to an R2 bucket (binding BACKUPS, optional) and reading them back.
// A backup is a shard's export (export.ts, JSONL), preceded by the owners' revocations of agent
// keys the shard keeps (one ["REVOKED_AGENT", …] line each, export.ts), stored at
//   shards/<shard>/<name>.jsonl   <shard> = "public" or "owner:<hex>", <name> = UTC time "2026-12-01T05-00-00Z"
// A restore reads it back through the import path (import.ts), revocations first; a backup made
// before revocations were carried has none and restores as before.
// The cron run (runBackups, from the Worker's `scheduled` handler) backs up the public shard and the
// shards of the owners in EDGESTR_OWNERS and in the Accounts registry (workers/accounts), at most BACKUP_SHARDS_PER_RUN of them per run (rotating
// through the list, see shardsOfRun), skipping empty shards (no events, no revocations); a failed shard is logged and the run goes on. A shard's export is written in parts of
// exactly BACKUP_PART_BYTES (R2 multipart; one plain put when it is smaller), so memory stays bounded.
// Old backups are not removed here: set an R2 lifecycle rule on the bucket (docs/OPERATIONS.md).

import { z } from 'zod';
import { staticOwners, type OwnerEnv } from '../common/owners.js';
import { shardName, shardStub, type ShardBindings } from '../common/shards.js';
import type { RelayShard } from './shard.js';
import { accountsStub, type AccountsBindings } from '../accounts/accounts-do.js';
import type { ExportCursor, RevocationCursor } from './export.js';
import { IMPORT_BATCH, importBatches } from './import.js';

export interface BackupBindings {
  BACKUPS?: R2Bucket;
}

export const BACKUP_SHARDS_PER_RUN = 25;
/** R2 multipart parts (every part but the last must be at least 5 MiB). */
export const BACKUP_PART_BYTES = 5 * 1024 * 1024;

export const BackupNameSchema = z.string().regex(/^\d{4}-\d{2}-\d{2}T\d{2}-\d{2}-\d{2}Z$/, 'a backup name looks like 2026-12-01T05-00-00Z');

/** The backup name of an instant (unix ms): its UTC time, colons replaced (safe in keys and URLs). */
export const backupName = (ms: number): string => new Date(ms).toISOString().replace(/\.\d{3}Z$/, 'Z').replace(/:/g, '-');

const prefixOf = (owner: string | null) => `shards/${shardName(owner)}/`;
export const backupKey = (owner: string | null, name: string) => `${prefixOf(owner)}${name}.jsonl`;

/** A shard's backup lines, a page at a time (each fetched when wanted): its revocations, then its export. */
async function* backupPages(shard: DurableObjectStub<RelayShard>): AsyncGenerator<string[]> {
  let after: RevocationCursor | undefined;
  do {
    const page = await shard.revocationsPage(after);
    after = page.next;
    yield page.lines;
  } while (after);
  let cursor: ExportCursor | undefined;
  do {
    const page = await shard.exportPage(cursor ? { after: cursor } : {});
    cursor = page.next;
    yield page.lines;
  } while (cursor);
}

/**
 * Writes one shard's backup to `key`; returns its size in bytes (0: the shard is empty, nothing
 * written). It is cut into parts of exactly BACKUP_PART_BYTES (R2 wants every part but the last of
 * one size), whatever the pages' sizes; one plain put when it fits in one part.
 */
export async function backupShard(env: ShardBindings, bucket: R2Bucket, owner: string | null, key: string): Promise<number> {
  const shard = shardStub(env, owner);
  const encoder = new TextEncoder();
  const httpMetadata = { contentType: 'application/x-ndjson' };
  let part = new Uint8Array(BACKUP_PART_BYTES);
  let filled = 0;
  let total = 0;
  let upload: R2MultipartUpload | undefined;
  const parts: R2UploadedPart[] = [];
  const uploadPart = async (bytes: Uint8Array) => {
    upload ??= await bucket.createMultipartUpload(key, { httpMetadata });
    parts.push(await upload.uploadPart(parts.length + 1, bytes));
  };
  try {
    for await (const lines of backupPages(shard)) {
      const bytes = encoder.encode(lines.map((l) => `${l}\n`).join(''));
      total += bytes.byteLength;
      for (let offset = 0; offset < bytes.byteLength; ) {
        const n = Math.min(bytes.byteLength - offset, BACKUP_PART_BYTES - filled);
        part.set(bytes.subarray(offset, offset + n), filled);
        filled += n;
        offset += n;
        if (filled === BACKUP_PART_BYTES) {
          await uploadPart(part);
          part = new Uint8Array(BACKUP_PART_BYTES);
          filled = 0;
        }
      }
    }
    if (!upload) {
      if (total > 0) await bucket.put(key, part.subarray(0, filled), { httpMetadata });
      return total;
    }
    if (filled > 0) await uploadPart(part.subarray(0, filled));
    await upload.complete(parts);
    return total;
  } catch (e) {
    await upload?.abort();
    throw e;
  }
}

export interface BackupRun {
  written: Array<{ key: string; bytes: number }>;
  failed: Array<{ key: string; error: string }>;
}

/**
 * The shards a run at `nowMs` backs up (null: the public shard): at most BACKUP_SHARDS_PER_RUN of the
 * public shard and the shards of the EDGESTR_OWNERS and `registered` owners, the window moving on by
 * that many every minute of `nowMs`, so that successive runs go round the whole list.
 */
export function shardsOfRun(env: OwnerEnv, nowMs: number, registered: readonly string[] = []): Array<string | null> {
  const shards: Array<string | null> = [null, ...[...new Set([...staticOwners(env), ...registered])].sort()];
  if (shards.length <= BACKUP_SHARDS_PER_RUN) return shards;
  const start = (Math.floor(nowMs / 60_000) * BACKUP_SHARDS_PER_RUN) % shards.length;
  return Array.from({ length: BACKUP_SHARDS_PER_RUN }, (_, i) => shards[(start + i) % shards.length] ?? null);
}

/** One cron run at `nowMs`: each shard of shardsOfRun that holds events, as backup `backupName(nowMs)`. */
export async function runBackups(env: ShardBindings & OwnerEnv & AccountsBindings, bucket: R2Bucket, nowMs: number): Promise<BackupRun> {
  const registered = (await accountsStub(env).states()).map((o) => o.pubkey);
  const name = backupName(nowMs);
  const run: BackupRun = { written: [], failed: [] };
  for (const owner of shardsOfRun(env, nowMs, registered)) {
    const key = backupKey(owner, name);
    try {
      const bytes = await backupShard(env, bucket, owner, key);
      if (bytes > 0) run.written.push({ key, bytes });
    } catch (e) {
      run.failed.push({ key, error: e instanceof Error ? e.message : String(e) });
    }
  }
  return run;
}

/** The backups of `owner`'s shard (null: the public shard), newest first. */
export async function listBackups(bucket: R2Bucket, owner: string | null): Promise<Array<{ name: string; bytes: number; uploaded: string }>> {
  const prefix = prefixOf(owner);
  const out: Array<{ name: string; bytes: number; uploaded: string }> = [];
  let cursor: string | undefined;
  do {
    const page = await bucket.list({ prefix, ...(cursor ? { cursor } : {}) });
    for (const o of page.objects) out.push({ name: o.key.slice(prefix.length).replace(/\.jsonl$/, ''), bytes: o.size, uploaded: o.uploaded.toISOString() });
    cursor = page.truncated ? page.cursor : undefined;
  } while (cursor);
  return out.sort((a, b) => (a.name < b.name ? 1 : -1));
}

/**
 * The lines of `owner`'s (null: the public shard's) backup `name`, read as a stream, in import
 * batches (import.ts's importBatches: at most `maxLines` lines and IMPORT_BATCH_BYTES each);
 * undefined when there is no such backup.
 */
export async function readBackupLines(bucket: R2Bucket, owner: string | null, name: string, maxLines = IMPORT_BATCH): Promise<AsyncIterable<string[]> | undefined> {
  const object = await bucket.get(backupKey(owner, name));
  if (!object) return undefined;
  const body = object.body;
  async function* lines(): AsyncGenerator<string> {
    const reader = body.pipeThrough(new TextDecoderStream()).getReader();
    let rest = '';
    for (;;) {
      const { done, value } = await reader.read();
      const parts = (rest + (value ?? '')).split('\n');
      rest = done ? '' : (parts.pop() ?? '');
      for (const p of parts) if (p.trim() !== '') yield p.replace(/\r$/, '');
      if (done) break;
    }
  }
  return importBatches(lines(), maxLines);
}
