// The bound on an owner's bulk work: one import, restore or export at a time per shard (409 with the
// reason while another runs, the lease freed when the job ends, is cancelled, or idles), and no
// signature verified for a line the shard stores already or that came earlier in the same import.
import { env } from 'cloudflare:test';
import { describe, expect, it } from 'vitest';
import { shardStub } from '../../workers/common/shards.js';
import { BULK_IDLE_MS, BulkJobs, bulkBusy, bulkLost } from '../../workers/relay-do/bulk-jobs.js';
import { EXPORT_PAGE } from '../../workers/relay-do/export.js';
import { IMPORT_BATCH } from '../../workers/relay-do/import.js';
import { backupKey, backupName, backupShard } from '../../workers/relay-do/backup.js';
import { keys, now, sign } from './helpers.js';
import { exportOf, importInto, jsonl, notes, opsCall } from './relay-ops-helpers.js';

const PROTECTED = 'restricted: this event is protected: only its author may publish it';

describe('one import, restore or export at a time per shard', () => {
  it('an export being read holds the shard: import, restore and another export are 409 until it is cancelled', async () => {
    const owner = keys();
    // More than a page, so that the export is still running after its first page.
    expect(await importInto(owner, jsonl(notes(owner, EXPORT_PAGE + 1, (i) => now() - 1000 + i)))).toMatchObject({ status: 200 });
    const name = backupName(Date.now());
    const running = await opsCall(owner, 'GET', '/api/relay/export');
    expect(running.status).toBe(200);
    // The operator's backups do not wait for it.
    expect(await backupShard(env, env.BACKUPS!, owner.pk, backupKey(owner.pk, name))).toBeGreaterThan(0);
    const busy = { error: 'an export is already running on this shard (one import, restore or export at a time); try again when it ends' };
    const note = jsonl(notes(owner, 1, () => now()));
    const imported = await opsCall(owner, 'POST', '/api/relay/import', note);
    expect([imported.status, await imported.json()]).toEqual([409, busy]);
    const restored = await opsCall(owner, 'POST', '/api/relay/restore', JSON.stringify({ backup: name }));
    expect([restored.status, await restored.json()]).toEqual([409, busy]);
    const second = await opsCall(owner, 'GET', '/api/relay/export');
    expect([second.status, await second.json()]).toEqual([409, busy]);
    // Another owner's shard is not held.
    const other = keys();
    expect(await importInto(other, jsonl(notes(other, 1, () => now())))).toEqual({ status: 200, json: { accepted: 1, duplicate: 0, refused: {} } });

    await running.body!.cancel();
    expect(await importInto(owner, note)).toEqual({ status: 200, json: { accepted: 1, duplicate: 0, refused: {} } });
    const again = await opsCall(owner, 'POST', '/api/relay/restore', JSON.stringify({ backup: name }));
    expect([again.status, await again.json()]).toEqual([200, { accepted: 0, duplicate: EXPORT_PAGE + 1, refused: {} }]);
  });

  it('an export read to its end frees the shard', async () => {
    const owner = keys();
    await importInto(owner, jsonl(notes(owner, EXPORT_PAGE + 1, (i) => now() - 1000 + i)));
    expect(await exportOf(owner)).toHaveLength(EXPORT_PAGE + 1);
    expect(await importInto(owner, jsonl(notes(owner, 1, () => now())))).toEqual({ status: 200, json: { accepted: 1, duplicate: 0, refused: {} } });
  });

  it('an import in flight: a second one is 409 with its reason; after it ended, the next goes through', async () => {
    const owner = keys();
    const shard = shardStub(env, owner.pk);
    const lease = await shard.beginBulk('import');
    expect(lease.ok).toBe(true);
    expect(await importInto(owner, jsonl(notes(owner, 1, () => now())))).toEqual({
      status: 409,
      json: { error: 'an import is already running on this shard (one import, restore or export at a time); try again when it ends' },
    });
    if (lease.ok) await shard.endBulk(lease.value);
    expect(await importInto(owner, jsonl(notes(owner, 1, () => now())))).toEqual({ status: 200, json: { accepted: 1, duplicate: 0, refused: {} } });
  });

  it(`a lease idle for ${BULK_IDLE_MS / 1000} s goes to the next job; the idle job's next call is refused with its reason`, () => {
    const jobs = new BulkJobs();
    const first = jobs.begin('restore', 0);
    expect(first.ok).toBe(true);
    expect(jobs.begin('import', BULK_IDLE_MS - 1)).toEqual({ ok: false, error: bulkBusy('restore') });
    expect(bulkBusy('restore')).toBe('a restore is already running on this shard (one import, restore or export at a time); try again when it ends');
    if (!first.ok) return;
    expect(jobs.use(first.value, 'restore', BULK_IDLE_MS - 1)).toMatchObject({ ok: true, value: { job: 'restore' } }); // renewed
    expect(jobs.begin('import', 2 * BULK_IDLE_MS - 2).ok).toBe(false);
    const next = jobs.begin('import', 2 * BULK_IDLE_MS);
    expect(next.ok).toBe(true);
    expect(jobs.use(first.value, 'restore', 2 * BULK_IDLE_MS + 1)).toEqual({ ok: false, error: bulkLost('restore') });
    expect(bulkLost('restore')).toBe('this restore was idle for more than 60 s and another import, restore or export took the shard meanwhile; run it again');
    jobs.end(first.value); // not its lease any more: nothing
    expect(jobs.begin('export', 2 * BULK_IDLE_MS + 2).ok).toBe(false);
    if (next.ok) jobs.end(next.value);
    expect(jobs.begin('export', 2 * BULK_IDLE_MS + 2).ok).toBe(true);
  });
});

describe('no signature verified for nothing', () => {
  it('a line whose id the shard stores is a duplicate before its signature is looked at', async () => {
    const owner = keys();
    const stored = sign(owner, { content: 'stored', created_at: now() - 10 });
    expect(await importInto(owner, jsonl([stored]))).toEqual({ status: 200, json: { accepted: 1, duplicate: 0, refused: {} } });
    const badSig = { ...stored, sig: 'f'.repeat(128) };
    expect(await importInto(owner, jsonl([badSig]))).toEqual({ status: 200, json: { accepted: 0, duplicate: 1, refused: {} } });
    // The same bad signature on an id the shard does not have is verified, and refused.
    const fresh = sign(owner, { content: 'fresh', created_at: now() - 10 });
    expect(await importInto(owner, jsonl([{ ...fresh, sig: 'f'.repeat(128) }]))).toEqual({
      status: 200,
      json: { accepted: 0, duplicate: 0, refused: { 'invalid: signature verification failed': 1 } },
    });
  });

  it(`a line repeated in one import is verified and judged once, across its batches (${IMPORT_BATCH} lines each): the repeats are duplicates`, async () => {
    const owner = keys();
    const stranger = keys();
    // Refused by the write path (NIP-70), so never stored: only the import's own memory makes the repeats duplicates.
    const refused = sign(stranger, { content: 'protected', tags: [['-']], created_at: now() - 10 });
    const repeats = IMPORT_BATCH + 100;
    expect(await importInto(owner, jsonl(Array.from({ length: repeats }, () => refused)))).toEqual({
      status: 200,
      json: { accepted: 0, duplicate: repeats - 1, refused: { [PROTECTED]: 1 } },
    });
    const good = sign(owner, { content: 'good', created_at: now() - 10 });
    expect(await importInto(owner, jsonl([good, good, good]))).toEqual({ status: 200, json: { accepted: 1, duplicate: 2, refused: {} } });
    // A new import judges the refused line again (its memory was that import's).
    expect(await importInto(owner, jsonl([refused]))).toEqual({ status: 200, json: { accepted: 0, duplicate: 0, refused: { [PROTECTED]: 1 } } });
  });
});
