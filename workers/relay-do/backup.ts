// Scheduled backups of the shards to an R2 bucket (binding BACKUPS, optional) and reading them back.
// A backup is a shard's export (export.ts, JSONL), preceded by the shard's retention rules, the
// owners' revocations of agent keys the shard keeps and the records of edgestr's own provisioning
// (hosted agents, bridge keys), one line each (["RETENTION", …], ["REVOKED_AGENT", …],
// ["PROVISIONED", …], export.ts), each page of events by the sides a restore takes for them
// (["COUNTED", …]: how each was counted in the shard's storage, owner-plan.ts), stored at
//   shards/<shard>/<name>.jsonl   <shard> = "public" or "owner:<hex>", <name> = UTC time "2026-12-01T05-00-00Z"
// A restore reads it back through the import path (import.ts) as a restore (retention, provisioning
// and counted lines, and kind 62s naming the shard at another host, are taken from a backup only),
// those lines first; a backup made before they were carried has none and restores as before.
// The cron run (runBackups, from the Worker's `scheduled` handler) backs up only the shards written
// since their last backup: a shard marks itself in the bucket at its first change after a backup
// (backup-marker.ts: the empty object `state/dirty/<shard>`), and the run lists those marks (one
// R2 list per 1,000), never waking a shard that has none, so sign-ups that never write cost the
// backups nothing and a shard never written is never created by them. Each run takes at most
// BACKUP_SHARDS_PER_RUN shards: the public shard first, then the shards of vetted owners
// (EDGESTR_OWNERS, and those the Accounts registry says the operators vetted: one RPC per
// REGISTRY_KEYS_PAGE marks), then the others, each group oldest mark first. A backup tells the shard
// when it begins and when it is written (backupShard): the mark goes then, unless the shard changed
// meanwhile (it waits for the next run). A failed shard is logged, its mark put again (behind the
// others of its group) and the run goes on; an empty one is passed without a write.
// A deployment that backed up before the marks existed has its old cursor object (LEGACY_CURSOR_KEY):
// shards changed after their last backup and never since would not be marked, so the first run
// after the upgrade begins one round of every shard (the public one and those of the owners in
// EDGESTR_OWNERS and the registry, in the order of their names; the registry's keys read
// REGISTRY_KEYS_PAGE at a time), taken in the places the marked shards leave in each run, its place
// kept in UPGRADE_ROUND_KEY (written after each shard, so a run cut short loses nothing done) and
// deleted at the end. A shard's backup is written in parts of exactly BACKUP_PART_BYTES (R2
// multipart; one plain put when it is smaller), so memory stays bounded. The marks and the round
// live in the bucket itself, outside shards/ (the lifecycle rule on it does not touch them): they
// belong with the backups (no bucket, no backups, no marks) and need no migration. Old backups are
// not removed here: set an R2 lifecycle rule on the bucket (docs/OPERATIONS.md).

import { z } from 'zod';
import { staticOwners, type OwnerEnv } from '../common/owners.js';
import { ownerOfShardName, shardName, shardStub, type ShardBindings } from '../common/shards.js';
import type { RelayShard } from './shard.js';
import { accountsStub, type AccountsBindings } from '../accounts/accounts-do.js';
import type { ExportCursor, ProvisionedCursor, RevocationCursor } from './export.js';
import { IMPORT_BATCH, importBatches } from './import.js';
import { DIRTY_PREFIX, dirtyKey } from './backup-marker.js';
import { errorMessage } from '../../src/shared/errors.js';

export interface BackupBindings {
  BACKUPS?: R2Bucket;
}

/** Shards one cron run backs up at most (a run has the time limits of one Worker invocation). */
export const BACKUP_SHARDS_PER_RUN = 25;
/** The object in which versions before the marks kept their round: present, the deployment upgrades from one (see the header). */
export const LEGACY_CURSOR_KEY = 'state/backup-cursor.json';
/** Where the upgrade round stands (see the header): `{"after": "<the last shard name backed up>"}`. */
export const UPGRADE_ROUND_KEY = 'state/upgrade-round.json';
/** R2 multipart parts (every part but the last must be at least 5 MiB). */
export const BACKUP_PART_BYTES = 5 * 1024 * 1024;

export const BackupNameSchema = z.string().regex(/^\d{4}-\d{2}-\d{2}T\d{2}-\d{2}-\d{2}Z$/, 'a backup name looks like 2026-12-01T05-00-00Z');

/** The backup name of an instant (unix ms): its UTC time, colons replaced (safe in keys and URLs). */
export const backupName = (ms: number): string => new Date(ms).toISOString().replace(/\.\d{3}Z$/, 'Z').replace(/:/g, '-');

const prefixOf = (owner: string | null) => `shards/${shardName(owner)}/`;
export const backupKey = (owner: string | null, name: string) => `${prefixOf(owner)}${name}.jsonl`;

/** A shard's backup lines, a page at a time (each fetched when wanted): its retention rules, its revocations, its provisioning records, then its events with their sides. */
async function* backupPages(shard: DurableObjectStub<RelayShard>): AsyncGenerator<string[]> {
  yield await shard.retentionLines();
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
    const page = await shard.backupEventsPage(cursor ? { after: cursor } : {});
    cursor = page.next;
    yield page.lines;
  } while (cursor);
}

/**
 * Writes one shard's backup to `key`; returns its size in bytes (0: the shard is empty, nothing
 * written). It is cut into parts of exactly BACKUP_PART_BYTES (R2 wants every part but the last of
 * one size), whatever the pages' sizes; one plain put when it fits in one part. The shard is told
 * when it begins and when it is written (its mark goes then unless it changed meanwhile, backup-marker.ts).
 */
export async function backupShard(env: ShardBindings, bucket: R2Bucket, owner: string | null, key: string): Promise<number> {
  const shard = shardStub(env, owner);
  const since = await shard.backupBegins();
  const total = await writeBackup(bucket, shard, key);
  await shard.backupWritten(since);
  return total;
}

async function writeBackup(bucket: R2Bucket, shard: DurableObjectStub<RelayShard>, key: string): Promise<number> {
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
  /** The shards marked as changed since their backup when the run began, and how many of them are the public shard or vetted owners'. */
  waiting: number;
  first: number;
  /** The shards this run took (marked ones, then the upgrade round's). */
  taken: number;
  written: Array<{ key: string; bytes: number }>;
  failed: Array<{ key: string; error: string }>;
  /** The upgrade round (see the header): the last shard it has backed up, null when it ended in this run; absent when there is none. */
  upgrade?: string | null;
}

/** A shard marked as changed since its backup, and when it was marked (unix ms). */
export interface Waiting {
  owner: string | null;
  since: number;
}

/** Every shard marked in `bucket` (backup-marker.ts). */
async function waitingShards(bucket: R2Bucket): Promise<Waiting[]> {
  const waiting: Waiting[] = [];
  let cursor: string | undefined;
  do {
    const page = await bucket.list({ prefix: DIRTY_PREFIX, ...(cursor ? { cursor } : {}) });
    for (const o of page.objects) {
      const owner = ownerOfShardName(o.key.slice(DIRTY_PREFIX.length));
      if (owner === undefined) console.error(`backups: ${o.key} names no shard; left alone`);
      else waiting.push({ owner, since: o.uploaded.getTime() });
    }
    cursor = page.truncated ? page.cursor : undefined;
  } while (cursor);
  return waiting;
}

/** Keys the cron names in one RPC to the Accounts object (about 0.7 MB): registry pages, vetted look-ups. */
export const REGISTRY_KEYS_PAGE = 10_000;

/** Which of `owners` are vetted: listed in EDGESTR_OWNERS, or vetted in the registry (the backup order; a restore of the public shard's bridges). */
export async function vettedOf(env: OwnerEnv & AccountsBindings, owners: readonly string[]): Promise<Set<string>> {
  const listed = staticOwners(env);
  const vetted = new Set(owners.filter((o) => listed.has(o)));
  const others = owners.filter((o) => !listed.has(o));
  for (let i = 0; i < others.length; i += REGISTRY_KEYS_PAGE) {
    for (const k of await accountsStub(env).vettedAmong(others.slice(i, i + REGISTRY_KEYS_PAGE))) vetted.add(k);
  }
  return vetted;
}

/** The order in which `waiting` shards are backed up: the public shard, then the `vetted` owners', then the others, each group oldest mark first (then by name). */
export function backupOrder(waiting: readonly Waiting[], vetted: ReadonlySet<string>): Array<string | null> {
  const group = (w: Waiting) => (w.owner === null ? 0 : vetted.has(w.owner) ? 1 : 2);
  return [...waiting]
    .sort((a, b) => group(a) - group(b) || a.since - b.since || (shardName(a.owner) < shardName(b.owner) ? -1 : 1))
    .map((w) => w.owner);
}

/** Every shard the upgrade round backs up (null: the public shard), in the order of their names: the EDGESTR_OWNERS and `registered` owners', and the public shard. */
export function backupShards(env: OwnerEnv, registered: readonly string[] = []): Array<string | null> {
  return [...[...new Set([...staticOwners(env), ...registered])].sort(), null];
}

/** Every registered owner's key, read a page at a time. */
async function registeredKeys(env: AccountsBindings): Promise<string[]> {
  const keys: string[] = [];
  for (;;) {
    const page = await accountsStub(env).ownerKeys(REGISTRY_KEYS_PAGE, keys.at(-1));
    keys.push(...page);
    if (page.length < REGISTRY_KEYS_PAGE) return keys;
  }
}

const RoundSchema = z.strictObject({ after: z.string() });

/** Where the upgrade round stands (the last shard name it backed up; '' before the first), or undefined when there is none; begun when the old cursor is there. */
async function upgradeRound(bucket: R2Bucket): Promise<string | undefined> {
  const object = await bucket.get(UPGRADE_ROUND_KEY);
  if (object) {
    let stored: unknown;
    try {
      stored = JSON.parse(await object.text());
    } catch {
      stored = undefined;
    }
    const parsed = RoundSchema.safeParse(stored);
    if (parsed.success) return parsed.data.after;
    console.error(`backups: ${UPGRADE_ROUND_KEY} is not {"after": "<shard name>"}; the upgrade round begins again with the first shard`);
    return '';
  }
  if (!(await bucket.head(LEGACY_CURSOR_KEY))) return undefined;
  await bucket.put(UPGRADE_ROUND_KEY, JSON.stringify({ after: '' }));
  await bucket.delete(LEGACY_CURSOR_KEY);
  return '';
}

/** Backs up `owner`'s shard as backup `name` into `run`; a failure puts the shard's mark again (behind the others of its group). */
async function backUp(env: ShardBindings, bucket: R2Bucket, owner: string | null, name: string, run: BackupRun): Promise<void> {
  const key = backupKey(owner, name);
  run.taken++;
  try {
    const bytes = await backupShard(env, bucket, owner, key);
    if (bytes > 0) run.written.push({ key, bytes });
  } catch (e) {
    let error = errorMessage(e);
    try {
      await bucket.put(dirtyKey(owner), new Uint8Array(0));
    } catch (m) {
      error += `; its mark ${dirtyKey(owner)} could not be put again (${errorMessage(m)}): it is backed up at its next change`;
    }
    run.failed.push({ key, error });
  }
}

/**
 * One cron run at `nowMs`: the marked shards in backupOrder, then the upgrade round's (if any) in
 * the places left, at most BACKUP_SHARDS_PER_RUN in all, each that holds anything as backup
 * `backupName(nowMs)`.
 */
export async function runBackups(env: ShardBindings & OwnerEnv & AccountsBindings, bucket: R2Bucket, nowMs: number): Promise<BackupRun> {
  const waiting = await waitingShards(bucket);
  const vetted = await vettedOf(
    env,
    waiting.flatMap((w) => (w.owner === null ? [] : [w.owner])),
  );
  const plan = backupOrder(waiting, vetted).slice(0, BACKUP_SHARDS_PER_RUN);
  const name = backupName(nowMs);
  const first = waiting.filter((w) => w.owner === null || vetted.has(w.owner)).length;
  const run: BackupRun = { waiting: waiting.length, first, taken: 0, written: [], failed: [] };
  for (const owner of plan) await backUp(env, bucket, owner, name, run);
  const after = await upgradeRound(bucket);
  if (after === undefined) return run;
  run.upgrade = after;
  if (run.taken >= BACKUP_SHARDS_PER_RUN) return run;
  const taken = new Set(plan);
  for (const owner of backupShards(env, await registeredKeys(env)).filter((o) => shardName(o) > after)) {
    if (run.taken >= BACKUP_SHARDS_PER_RUN) return run;
    if (!taken.has(owner)) await backUp(env, bucket, owner, name, run);
    run.upgrade = shardName(owner);
    await bucket.put(UPGRADE_ROUND_KEY, JSON.stringify({ after: run.upgrade }));
  }
  await bucket.delete(UPGRADE_ROUND_KEY);
  run.upgrade = null;
  return run;
}

/** The log line of a run: the shards waiting (changed since their backup), this run's, and the upgrade round's place. */
export function runSummary(run: BackupRun): string {
  const upgrade =
    run.upgrade === undefined ? '' : run.upgrade === null ? '; the upgrade round (every shard once) is over' : `; the upgrade round (every shard once) is at ${run.upgrade || 'its beginning'}`;
  return `backups: ${run.waiting} waiting (changed since their backup; ${run.first} the public shard or vetted owners'), this run ${run.taken} (at most ${BACKUP_SHARDS_PER_RUN}): ${run.written.length} written, ${run.failed.length} failed${upgrade}`;
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
 * batches (import.ts's importBatches: at most `maxLines` lines and IMPORT_BATCH_BYTES each, a
 * batch that goes on with a page's events starting with their counted line);
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
  return importBatches(lines(), maxLines, true);
}
