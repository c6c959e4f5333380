// Management API of the caller's own relay shard (/api/relay), NIP-98 authenticated, for owners
// only (EDGESTR_OWNERS, checked before any Durable Object is touched); import, retention and restore
// for an owner not suspended only (403 OWNER_SUSPENDED, common/owners.ts notAnActiveOwner: a
// suspended owner still exports and lists its backups):
//   GET   /export[?since=&until=]  the shard as JSONL (application/x-ndjson), streamed page by page (until < since: 422)
//   POST  /import                  JSONL body (at most IMPORT_MAX_BYTES) through the shard's write policy
//   PATCH /retention               {rules: [{kinds, days}]} → the rules in force
//   GET   /backups                 the caller's backups in BACKUPS (R2, optional)
//   POST  /restore                 {backup: <name>} imports one of them through the import path
// Export, import and restore take the shard's bulk lease (workers/relay-do/bulk-jobs.ts): one at a
// time per shard, 409 with the reason while another runs. importInto also drives the operators'
// restores (admin.ts), where a restore of the public shard lists a bridge as this deployment's again
// only if its owner is vetted now (vettedBridgeOwners).

import { Hono, type Context } from 'hono';
import { z } from 'zod';
import { MAX_TIMESTAMP } from '../../src/shared/event.js';
import { notAnActiveOwner, notAnOwner } from '../common/owners.js';
import { shardStub, type RouterBindings } from '../common/shards.js';
import { relayRequestUrl } from '../common/public-url.js';
import { exportStream, parseProvisionedLine, PROVISIONED } from '../relay-do/export.js';
import { emptyReport, importBatches, jsonLines, mergeReports, type ImportReport } from '../relay-do/import.js';
import { ok, type Result } from '../../src/shared/errors.js';
import { RetentionSchema } from '../relay-do/retention.js';
import { BackupNameSchema, listBackups, readBackupLines, vettedOf, type BackupBindings } from '../relay-do/backup.js';
import { bodyAs, issuesOf } from './agents.js';
import type { ApiStateBindings } from './api-state.js';
import { nip98, type AuthedVariables } from './nip98-auth.js';

export interface RelayApiBindings extends RouterBindings, ApiStateBindings, BackupBindings {}

type ApiEnv = { Bindings: RelayApiBindings; Variables: AuthedVariables };

/** Largest import body: 8 MiB of JSONL (larger exports are imported in several calls, split by created_at). */
export const IMPORT_MAX_BYTES = 8 * 1024 * 1024;

const Timestamp = z.coerce.number().int().min(0).max(MAX_TIMESTAMP);
/** since and until are inclusive (since = until: one second); an until before since is refused, not answered with nothing. */
const ExportQuerySchema = z
  .strictObject({ since: Timestamp.optional(), until: Timestamp.optional() })
  .refine((q) => q.since === undefined || q.until === undefined || q.since <= q.until, { message: 'until is before since', path: ['until'] });
export const RestoreSchema = z.strictObject({ backup: BackupNameSchema });

/** The URL clients reach `owner`'s shard (null: the public shard) at (what a kind 62 must name). */
export const shardUrl = (env: RouterBindings, requestUrl: string, owner: string | null): string =>
  `${(relayRequestUrl(env, requestUrl) ?? new URL(requestUrl)).origin.replace(/^http/, 'ws')}/${owner ? `r/${owner}` : ''}`;

/**
 * The owners that the bridge lines of `batch` (a backup's ["PROVISIONED", provider, owner, "bridge",
 * t], export.ts) name and the operators vet now (vettedOf: one registry call for the batch, none
 * without such lines). A line written otherwise than the backups write it is not looked at here,
 * so the shard restores it as provisioned only (ownership.ts restoreProvisioned).
 */
async function vettedBridgeOwners(env: RouterBindings, batch: readonly string[]): Promise<string[]> {
  const owners = new Set<string>();
  for (const line of batch) {
    if (!line.startsWith(`["${PROVISIONED}",`)) continue;
    let input: unknown;
    try {
      input = JSON.parse(line);
    } catch {
      continue;
    }
    const record = parseProvisionedLine(input);
    if (record?.ok && record.value.source === 'bridge') owners.add(record.value.owner);
  }
  return owners.size === 0 ? [] : [...(await vettedOf(env, [...owners]))];
}

/**
 * Imports `batches` of lines (importBatches: bounded in lines and bytes) into `owner`'s shard (null:
 * the public shard), one call each, as `job` ('restore': one of this deployment's backups) under
 * the shard's bulk lease; the reason (409) when another job holds it. A restore of the public shard
 * tells the shard which owners of each batch's bridge lines are vetted now (vettedBridgeOwners):
 * only their bridges are listed again as this deployment's.
 */
export async function importInto(
  env: RouterBindings,
  owner: string | null,
  relayUrl: string,
  job: 'import' | 'restore',
  batches: AsyncIterable<string[]>,
): Promise<Result<ImportReport, string>> {
  const shard = shardStub(env, owner);
  const lease = await shard.beginBulk(job);
  if (!lease.ok) return lease;
  try {
    let report = emptyReport();
    const publicRestore = owner === null && job === 'restore';
    for await (const batch of batches) {
      const vetted = publicRestore ? await vettedBridgeOwners(env, batch) : [];
      const done = await shard.importEvents(owner, batch, relayUrl, lease.value, job, vetted);
      if (!done.ok) return done;
      report = mergeReports(report, done.value);
    }
    return ok(report);
  } finally {
    await shard.endBulk(lease.value);
  }
}

/** The answer to an import or restore: its report, or 409 with the reason another job kept the shard. */
export const importAnswer = (c: Context, done: Result<ImportReport, string>): Response => (done.ok ? c.json(done.value) : c.json({ error: done.error }, 409));

export function relayApiRoutes() {
  const app = new Hono<ApiEnv>();
  const owners = nip98<RelayApiBindings>(notAnOwner);
  const activeOwners = nip98<RelayApiBindings>(notAnActiveOwner);

  app.get('/export', owners, async (c) => {
    const query = ExportQuerySchema.safeParse(c.req.query());
    if (!query.success) return c.json({ error: 'invalid query', issues: issuesOf(query.error) }, 422);
    const shard = shardStub(c.env, c.get('caller'));
    const lease = await shard.beginBulk('export');
    if (!lease.ok) return c.json({ error: lease.error }, 409);
    const body = exportStream(
      query.data,
      (range) => shard.exportPage(range, lease.value),
      () => shard.endBulk(lease.value),
    );
    return new Response(body, { headers: { 'Content-Type': 'application/x-ndjson' } });
  });

  app.post('/import', nip98<RelayApiBindings>(notAnActiveOwner, IMPORT_MAX_BYTES), async (c) => {
    const caller = c.get('caller');
    const lines = jsonLines(new TextDecoder().decode(c.get('body')));
    return importAnswer(c, await importInto(c.env, caller, shardUrl(c.env, c.req.url, caller), 'import', importBatches(lines)));
  });

  app.patch('/retention', activeOwners, async (c) => {
    const parsed = bodyAs(c.get('body'), RetentionSchema, 'retention');
    if (!parsed.ok) return c.json(parsed.error, 422);
    return c.json({ rules: await shardStub(c.env, c.get('caller')).setRetentionRules(parsed.data.rules) });
  });

  app.get('/backups', owners, async (c) => {
    if (!c.env.BACKUPS) return c.json({ error: 'backups are not configured on this deployment (no BACKUPS bucket)' }, 404);
    return c.json({ backups: await listBackups(c.env.BACKUPS, c.get('caller')) });
  });

  app.post('/restore', activeOwners, async (c) => {
    const bucket = c.env.BACKUPS;
    if (!bucket) return c.json({ error: 'backups are not configured on this deployment (no BACKUPS bucket)' }, 404);
    const parsed = bodyAs(c.get('body'), RestoreSchema, 'restore');
    if (!parsed.ok) return c.json(parsed.error, 422);
    const caller = c.get('caller');
    const lines = await readBackupLines(bucket, caller, parsed.data.backup);
    if (!lines) return c.json({ error: `no backup named ${parsed.data.backup} for this owner` }, 404);
    return importAnswer(c, await importInto(c.env, caller, shardUrl(c.env, c.req.url, caller), 'restore', lines));
  });

  return app;
}
