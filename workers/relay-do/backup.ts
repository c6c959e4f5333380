// Scheduled backups of the shards to an R2 bucket (binding BACKUPS, optional) and reading them back.
// A backup is a shard's export (export.ts, JSONL), preceded by the owners' revocations of agent
// keys the shard keeps and the records of edgestr's own provisioning (hosted agents, bridge keys),
// one line each (["REVOKED_AGENT", …], ["PROVISIONED", …], export.ts), stored at
//   shards/<shard>/<name>.jsonl   <shard> = "public" or "owner:<hex>", <name> = UTC time "2026-12-01T05-00-00Z"
// A restore reads it back through the import path (import.ts) as a restore (provisioning lines and
// kind 62s naming the shard at another host are taken from a backup only), those lines first; a
// backup made before they were carried has none and restores as before.
// The cron run (runBackups, from the Worker's `scheduled` handler) goes round the public shard and
// the shards of the owners in EDGESTR_OWNERS and in the Accounts registry (workers/accounts), in
// the order of their names (backupShards), at most BACKUP_SHARDS_PER_RUN a run: each run goes on
// after the last shard backed up, named in the bucket's BACKUP_CURSOR_KEY object (written after each
// shard, so a run cut short loses nothing done), whatever shards were added or removed since. A
// round (every shard once) begins at most once per BACKUP_ROUND_MS: with the hourly cron a deployment
// of up to 24 × BACKUP_SHARDS_PER_RUN shards is backed up once a day, a larger one round after round
// (planRun). The registry's keys are read REGISTRY_KEYS_PAGE at a time (each RPC answer stays small
// whatever the registry's size). Empty shards (no events, no lines above) are passed without a
// write; a failed shard is logged and the run goes on. A shard's backup is written in parts of
// exactly BACKUP_PART_BYTES (R2 multipart; one plain put when it is smaller), so memory stays bounded.
// The cursor lives in the bucket itself (not in the Accounts object or a shard): it belongs with the
// backups (no bucket, no backups, no cursor), needs no migration, and the lifecycle rule on shards/
// does not touch it. Old backups are not removed here: set an R2 lifecycle rule on the bucket
// (docs/OPERATIONS.md).

import { z } from 'zod';
import { staticOwners, type OwnerEnv } from '../common/owners.js';
import { ownerOfShardName, shardName, shardStub, type ShardBindings } from '../common/shards.js';
import type { RelayShard } from './shard.js';
import { accountsStub, type AccountsBindings } from '../accounts/accounts-do.js';
import type { ExportCursor, ProvisionedCursor, RevocationCursor } from './export.js';
import { IMPORT_BATCH, importBatches } from './import.js';

export interface BackupBindings {
  BACKUPS?: R2Bucket;
}

export const BACKUP_SHARDS_PER_RUN = 25;
/** A round of backups (every shard once) begins at most this often (ms): a day. */
export const BACKUP_ROUND_MS = 86_400_000;
/** The bucket's object naming where the cron's round stands (outside shards/). */
export const BACKUP_CURSOR_KEY = 'state/backup-cursor.json';
/** R2 multipart parts (every part but the last must be at least 5 MiB). */
export const BACKUP_PART_BYTES = 5 * 1024 * 1024;

export const BackupNameSchema = z.string().regex(/^\d{4}-\d{2}-\d{2}T\d{2}-\d{2}-\d{2}Z$/, 'a backup name looks like 2026-12-01T05-00-00Z');

/** The backup name of an instant (unix ms): its UTC time, colons replaced (safe in keys and URLs). */
export const backupName = (ms: number): string => new Date(ms).toISOString().replace(/\.\d{3}Z$/, 'Z').replace(/:/g, '-');

const prefixOf = (owner: string | null) => `shards/${shardName(owner)}/`;
export const backupKey = (owner: string | null, name: string) => `${prefixOf(owner)}${name}.jsonl`;

/** A shard's backup lines, a page at a time (each fetched when wanted): its revocations, its provisioning records, then its export. */
async function* backupPages(shard: DurableObjectStub<RelayShard>): AsyncGenerator<string[]> {
  let after: RevocationCursor | undefined;
  do {
    const page = await shard.revocationsPage(after);
    after = page.next;
    yield page.lines;
  } while (after);
  let provisioned: ProvisionedCursor | undefined;
  do {
    const page = await shard.provisionedPage(provisioned);
    provisioned = page.next;
    yield page.lines;
  } while (provisioned);
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
  /** The shards of the deployment, and how many this run took. */
  shards: number;
  taken: number;
  written: Array<{ key: string; bytes: number }>;
  failed: Array<{ key: string; error: string }>;
}

/** Where the cron's round stands: the name of the last shard backed up, and when its round began (unix ms). */
const CursorSchema = z.strictObject({ after: z.string(), round: z.number().int().min(0) });
export type BackupCursor = z.infer<typeof CursorSchema>;

/** Every shard a round backs up (null: the public shard), in the order of their names: the EDGESTR_OWNERS and `registered` owners', and the public shard. */
export function backupShards(env: OwnerEnv, registered: readonly string[] = []): Array<string | null> {
  return [...[...new Set([...staticOwners(env), ...registered])].sort(), null];
}

/**
 * The shards a run at `nowMs` backs up, with the round each belongs to: the next ones of `shards`
 * (backupShards) after `cursor` (none: a first run), at most BACKUP_SHARDS_PER_RUN and never one
 * twice. At the end of the list the next round begins, when BACKUP_ROUND_MS have passed since the
 * last one began; else the run stops there.
 */
export function planRun(shards: ReadonlyArray<string | null>, cursor: BackupCursor | undefined, nowMs: number): Array<{ owner: string | null; round: number }> {
  const names = shards.map(shardName);
  let next = cursor ? names.findIndex((n) => n > cursor.after) : 0;
  let round = cursor?.round ?? nowMs;
  const plan: Array<{ owner: string | null; round: number }> = [];
  while (plan.length < Math.min(BACKUP_SHARDS_PER_RUN, shards.length)) {
    if (next === -1 || next === shards.length) {
      if (nowMs - round < BACKUP_ROUND_MS) break;
      round = nowMs;
      next = 0;
    }
    plan.push({ owner: shards[next] ?? null, round });
    next++;
  }
  return plan;
}

async function readCursor(bucket: R2Bucket): Promise<BackupCursor | undefined> {
  const object = await bucket.get(BACKUP_CURSOR_KEY);
  if (!object) return undefined;
  let stored: unknown;
  try {
    stored = JSON.parse(await object.text());
  } catch {
    stored = undefined;
  }
  const parsed = CursorSchema.safeParse(stored);
  if (!parsed.success || ownerOfShardName(parsed.data.after) === undefined) {
    console.error(`backups: ${BACKUP_CURSOR_KEY} is not a cursor; a new round begins with the first shard`);
    return undefined;
  }
  return parsed.data;
}

/** Keys of the registry one RPC of the cron reads (about 0.7 MB). */
export const REGISTRY_KEYS_PAGE = 10_000;

/** Every registered owner's key, read a page at a time. */
async function registeredKeys(env: AccountsBindings): Promise<string[]> {
  const keys: string[] = [];
  for (;;) {
    const page = await accountsStub(env).ownerKeys(REGISTRY_KEYS_PAGE, keys.at(-1));
    keys.push(...page);
    if (page.length < REGISTRY_KEYS_PAGE) return keys;
  }
}

/** One cron run at `nowMs`: the shards of planRun, each that holds anything as backup `backupName(nowMs)`; the cursor moves past each. */
export async function runBackups(env: ShardBindings & OwnerEnv & AccountsBindings, bucket: R2Bucket, nowMs: number): Promise<BackupRun> {
  const shards = backupShards(env, await registeredKeys(env));
  const plan = planRun(shards, await readCursor(bucket), nowMs);
  const name = backupName(nowMs);
  const run: BackupRun = { shards: shards.length, taken: plan.length, written: [], failed: [] };
  for (const { owner, round } of plan) {
    const key = backupKey(owner, name);
    try {
      const bytes = await backupShard(env, bucket, owner, key);
      if (bytes > 0) run.written.push({ key, bytes });
    } catch (e) {
      run.failed.push({ key, error: e instanceof Error ? e.message : String(e) });
    }
    await bucket.put(BACKUP_CURSOR_KEY, JSON.stringify({ after: shardName(owner), round } satisfies BackupCursor));
  }
  return run;
}

/** The log line of a run: the deployment's shards, this run's, and how many runs a round takes. */
export const runSummary = (run: BackupRun): string =>
  `backups: ${run.shards} shards, this run ${run.taken} (a full round every ~${Math.ceil(run.shards / BACKUP_SHARDS_PER_RUN)} runs, at most one a day): ${run.written.length} written, ${run.failed.length} failed`;

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
