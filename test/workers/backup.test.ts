// Backups under miniflare's local R2 (binding BACKUPS): the cron handler writes each shard's export,
// an owner lists and restores its own backups through the import path, large exports go in parts,
// and the runs take only the shards marked as written since their backup (the public shard and
// vetted owners' first, 25 a run), so owners that never write cost nothing; after an upgrade from a
// version without marks, one round takes every shard once. A backup
// carries the owners' revocations of agent keys (NIP-OA) and edgestr's provisioning records before
// the events, so a shard restored fresh, or after losing them, still refuses the revoked keys'
// attestations and still lists the owner's hosted agents; a restore at another host keeps the
// requests to vanish, and the deletion requests stored with an expiration before they were kept
// for good.
import { abortAllDurableObjects, createScheduledController, env, listDurableObjectIds, runInDurableObject } from 'cloudflare:test';
import { afterEach, describe, expect, it, vi } from 'vitest';
import worker from '../../workers/index.js';
import { shardName, shardStub } from '../../workers/common/shards.js';
import {
  BACKUP_PART_BYTES,
  BACKUP_SHARDS_PER_RUN,
  backupKey,
  backupName,
  backupShards,
  LEGACY_CURSOR_KEY,
  readBackupLines,
  runBackups,
  UPGRADE_ROUND_KEY,
} from '../../workers/relay-do/backup.js';
import { DIRTY_PREFIX, dirtyKey } from '../../workers/relay-do/backup-marker.js';
import { accountsStub } from '../../workers/accounts/accounts-do.js';
import { emptyReport, IMPORT_BATCH, IMPORT_BATCH_BYTES, mergeReports, NOT_RESTORED, NOT_RESTORED_COUNTED, type ImportReport } from '../../workers/relay-do/import.js';
import { MAX_REVOKED_PER_OWNER, OwnershipRegistry } from '../../workers/relay-do/ownership.js';
import { provisionedPage, revocationsPage } from '../../workers/relay-do/export.js';
import type { RelayShard } from '../../workers/relay-do/shard.js';
import { signAttestation } from '../../src/shared/nip-oa.js';
import { makeHttpAuthHeader } from '../../src/shared/nip98.js';
import { fetchWithEnv } from './app-env.js';
import { connect, keys, now, sign, type Keys } from './helpers.js';
import { npubEncode } from 'nostr-tools/nip19';
import { NOT_AN_ADMIN } from '../../workers/api/admin.js';
import { TEST_ADMIN, TEST_ADMIN_SK } from './test-keys.js';
import { bigNotes, bytesOf, exportOf, importAllOf, importInto, importRpc, jsonl, notes, opsCall, publishAsOwner, queryShard } from './relay-ops-helpers.js';

/** Runs the Worker's cron handler at `ms` with `owners` in EDGESTR_OWNERS. */
async function cron(ms: number, owners: readonly Keys[]): Promise<void> {
  await worker.scheduled(createScheduledController({ scheduledTime: ms, cron: '0 * * * *' }), { ...env, EDGESTR_OWNERS: owners.map((k) => k.pk).join(',') });
}

const urlOf = (owner: string | null) => `ws://relay.test/${owner ? `r/${owner}` : ''}`;

/** Restores `owner`'s backup `name` (null: the public shard's) into `shard` through its import RPC under one lease, as the restore routes do. */
async function restoreInto(shard: DurableObjectStub<RelayShard>, owner: string | null, name: string): Promise<ImportReport> {
  const lease = await shard.beginBulk('restore');
  if (!lease.ok) throw new Error(lease.error);
  let report = emptyReport();
  try {
    for await (const batch of (await readBackupLines(env.BACKUPS!, owner, name))!) {
      const done = await shard.importEvents(owner, batch, urlOf(owner), lease.value, 'restore');
      if (!done.ok) throw new Error(done.error);
      report = mergeReports(report, done.value);
    }
  } finally {
    await shard.endBulk(lease.value);
  }
  return report;
}

const call = async (k: Keys, method: string, path: string, body?: unknown) => {
  const res = await opsCall(k, method, path, body === undefined ? undefined : JSON.stringify(body));
  return { status: res.status, json: await res.json() };
};

// A distinct day per run (backup names are UTC seconds): each run may begin a new round.
let day = 0;
const runAt = () => Date.UTC(2026, 11, 1 + day++, 3, 0, 0);
const HOUR = 3_600_000;

afterEach(() => {
  vi.restoreAllMocks();
});

describe('scheduled backups to BACKUPS', () => {
  it('writes each shard with events as its export, listed for its owner; empty shards are skipped', async () => {
    const owner = keys();
    const empty = keys();
    await importInto(owner, jsonl(notes(owner, 3, (i) => now() - 100 + i)));
    const at = runAt();
    await cron(at, [owner, empty]);
    const object = await env.BACKUPS!.get(backupKey(owner.pk, backupName(at)));
    expect(object).not.toBeNull();
    const text = await object!.text();
    expect(text).toBe(jsonl(await exportOf(owner)));
    expect(await env.BACKUPS!.head(backupKey(empty.pk, backupName(at)))).toBeNull();
    const listed = await call(owner, 'GET', '/api/relay/backups');
    expect(listed).toEqual({ status: 200, json: { backups: [{ name: backupName(at), bytes: text.length, uploaded: expect.any(String) }] } });
    expect(await call(empty, 'GET', '/api/relay/backups')).toEqual({ status: 200, json: { backups: [] } });
  });

  it('backup → restore brings back what retention removed, through the import path', async () => {
    const owner = keys();
    const events = notes(owner, 4, (i) => now() - 10 * 86_400 + i);
    await importInto(owner, jsonl(events));
    const before = await exportOf(owner);
    const at = runAt();
    await cron(at, [owner]);
    await call(owner, 'PATCH', '/api/relay/retention', { rules: [{ kinds: [1], days: 1 }] });
    await runInDurableObject(shardStub(env, owner.pk), (shard) => shard.alarm());
    expect(await exportOf(owner)).toEqual([]);
    await call(owner, 'PATCH', '/api/relay/retention', { rules: [] });
    expect(await call(owner, 'POST', '/api/relay/restore', { backup: backupName(at) })).toEqual({
      status: 200,
      json: { accepted: 4, duplicate: 0, refused: {} },
    });
    expect(await exportOf(owner)).toEqual(before);
    expect((await call(owner, 'POST', '/api/relay/restore', { backup: backupName(at) })).json).toEqual({ accepted: 0, duplicate: 4, refused: {} });
  });

  it("an owner restores only its own backups: another owner's name is 404, a malformed name 422", async () => {
    const a = keys();
    const b = keys();
    await importInto(a, jsonl(notes(a, 1, () => now() - 5)));
    const at = runAt();
    await cron(at, [a, b]);
    expect(await call(b, 'POST', '/api/relay/restore', { backup: backupName(at) })).toEqual({
      status: 404,
      json: { error: `no backup named ${backupName(at)} for this owner` },
    });
    const bad = await call(b, 'POST', '/api/relay/restore', { backup: `../owner:${a.pk}/${backupName(at)}` });
    expect(bad.status).toBe(422);
    expect(bad.json).toMatchObject({ error: 'invalid restore', issues: [{ path: 'backup', message: 'a backup name looks like 2026-12-01T05-00-00Z' }] });
  });

  it('writes an export larger than one part as a multipart object, and restores it', async () => {
    const owner = keys();
    const big = 'x'.repeat(120_000);
    const events = Array.from({ length: Math.ceil(BACKUP_PART_BYTES / big.length) + 2 }, (_, i) => sign(owner, { content: `${i}${big}`, created_at: now() - 100 + i }));
    for (let i = 0; i < events.length; i += 20) await importInto(owner, jsonl(events.slice(i, i + 20)));
    const at = runAt();
    await cron(at, [owner]);
    const object = await env.BACKUPS!.get(backupKey(owner.pk, backupName(at)));
    expect(object!.size).toBeGreaterThan(BACKUP_PART_BYTES);
    expect(await object!.text()).toBe(jsonl(await exportOf(owner)));
    expect((await call(owner, 'POST', '/api/relay/restore', { backup: backupName(at) })).json).toEqual({ accepted: 0, duplicate: events.length, refused: {} });
  });

  it('a shard of 140 events of ~250 KB at one created_at: backed up page by page in parts of one size (R2 refuses others), restored in batches within the byte budget, identical after', async () => {
    const owner = keys();
    const events = await bigNotes(owner, 140, now() - 10 * 86_400);
    await importAllOf(owner, events);
    const before = await exportOf(owner);
    expect(before.map((e) => e.id)).toEqual(events.map((e) => e.id).sort());
    const at = runAt();
    await cron(at, [owner]);
    const object = await env.BACKUPS!.get(backupKey(owner.pk, backupName(at)));
    expect(object).not.toBeNull();
    expect(await object!.text()).toBe(jsonl(before));

    const batches: string[][] = [];
    for await (const batch of (await readBackupLines(env.BACKUPS!, owner.pk, backupName(at)))!) batches.push(batch);
    expect(batches.flat()).toEqual(before.map((e) => JSON.stringify(e)));
    for (const batch of batches) {
      expect(batch.length).toBeLessThanOrEqual(IMPORT_BATCH);
      expect(bytesOf(batch)).toBeLessThanOrEqual(IMPORT_BATCH_BYTES);
    }

    await call(owner, 'PATCH', '/api/relay/retention', { rules: [{ kinds: [1], days: 1 }] });
    await runInDurableObject(shardStub(env, owner.pk), (shard) => shard.alarm());
    expect(await exportOf(owner)).toEqual([]);
    await call(owner, 'PATCH', '/api/relay/retention', { rules: [] });
    expect(await call(owner, 'POST', '/api/relay/restore', { backup: backupName(at) })).toEqual({
      status: 200,
      json: { accepted: events.length, duplicate: 0, refused: {} },
    });
    expect(await exportOf(owner)).toEqual(before);
  });

  /** Runs the cron's backups at `ms` with `owners` in EDGESTR_OWNERS; the run. */
  const runWith = (ms: number, owners: readonly Keys[]) => runBackups({ ...env, EDGESTR_OWNERS: owners.map((k) => k.pk).join(',') }, env.BACKUPS!, ms);

  /** Backs up what earlier tests left waiting (and ends any upgrade round), so that a test's runs see only its own shards. */
  async function drain(): Promise<void> {
    await env.BACKUPS!.delete([LEGACY_CURSOR_KEY, UPGRADE_ROUND_KEY]);
    for (let i = 0; i < 20; i++) if ((await runWith(runAt(), [])).taken === 0) return;
    throw new Error('backups: shards still waiting after 20 runs');
  }

  /** Every key of the bucket under `prefix`. */
  async function keysUnder(prefix: string): Promise<string[]> {
    const found: string[] = [];
    let cursor: string | undefined;
    do {
      const page = await env.BACKUPS!.list({ prefix, ...(cursor ? { cursor } : {}) });
      found.push(...page.objects.map((o) => o.key));
      cursor = page.truncated ? page.cursor : undefined;
    } while (cursor);
    return found;
  }
  /** The keys of the backups named `name`, of any shard. */
  const backupsNamed = async (name: string) => (await keysUnder('shards/')).filter((k) => k.endsWith(`/${name}.jsonl`)).sort();
  /** Adds `owners` to the registry as an operator does (vetted), 100 calls at a time. */
  async function register(owners: readonly string[]): Promise<void> {
    for (let i = 0; i < owners.length; i += 100) expect(await Promise.all(owners.slice(i, i + 100).map((pk) => accountsStub(env).add(pk)))).not.toContain(false);
  }
  const shardIds = async () => (await listDurableObjectIds(env.RELAY_SHARD)).map((id) => id.toString()).sort();
  /** Publishes `k`'s note on its own shard (`/r/<k>`, authenticated), and waits for the shard's mark, which is put after the OK. */
  async function publishMarked(k: Keys): Promise<void> {
    expect(await publishAsOwner(k, [note(k)])).toEqual([['OK', expect.any(String), true, '']]);
    await vi.waitFor(async () => expect(await env.BACKUPS!.head(dirtyKey(k.pk))).not.toBeNull());
  }
  /** Publishes a stranger's note on the public shard, and waits for its mark. */
  async function publishOnPublic(): Promise<void> {
    const ws = await connect('/');
    expect((await ws.publish(note(keys())))[2]).toBe(true);
    ws.close();
    await vi.waitFor(async () => expect(await env.BACKUPS!.head(dirtyKey(null))).not.toBeNull());
  }
  let notesMade = 0;
  const note = (k: Keys) => sign(k, { content: `note ${notesMade++} of ${k.pk.slice(0, 8)}`, created_at: now() - 5 });
  const summary = (waiting: number, first: number, taken: number, written: number, rest = '') =>
    `backups: ${waiting} waiting (changed since their backup; ${first} the public shard or vetted owners'), this run ${taken} (at most ${BACKUP_SHARDS_PER_RUN}): ${written} written, 0 failed${rest}`;

  it('after an upgrade from a version without marks (its old cursor in the bucket), one round backs up every shard once, 25 a run, then runs take only marked shards', async () => {
    await drain();
    const owners = Array.from({ length: 29 }, () => keys());
    for (const owner of owners) await importRpc(shardStub(env, owner.pk), owner.pk, [JSON.stringify(note(owner))], urlOf(owner.pk));
    await publishOnPublic();
    await drain(); // their marks are gone, as for shards written before the upgrade
    const round = backupShards({ EDGESTR_OWNERS: owners.map((o) => o.pk).join(',') }, await accountsStub(env).ownerKeys(100));
    expect(round.length).toBe(30); // the public shard and the 29 (this file registers owners only later)
    await env.BACKUPS!.put(LEGACY_CURSOR_KEY, JSON.stringify({ after: 'owner:00', round: 0 }));
    const log = vi.spyOn(console, 'log');
    const at = runAt();
    await cron(at, owners);
    const first = round.slice(0, BACKUP_SHARDS_PER_RUN);
    expect(log).toHaveBeenLastCalledWith(summary(0, 0, 25, 25, `; the upgrade round (every shard once) is at ${shardName(first.at(-1)!)}`));
    expect(await backupsNamed(backupName(at))).toEqual(first.map((o) => backupKey(o, backupName(at))).sort());
    expect(await env.BACKUPS!.head(LEGACY_CURSOR_KEY)).toBeNull();
    await cron(at + HOUR, owners);
    expect(log).toHaveBeenLastCalledWith(summary(0, 0, 5, 5, '; the upgrade round (every shard once) is over'));
    expect(await backupsNamed(backupName(at + HOUR))).toEqual(round.slice(BACKUP_SHARDS_PER_RUN).map((o) => backupKey(o, backupName(at + HOUR))).sort());
    expect(await env.BACKUPS!.head(UPGRADE_ROUND_KEY)).toBeNull();
    await cron(at + 2 * HOUR, owners);
    expect(log).toHaveBeenLastCalledWith(summary(0, 0, 0, 0));
    expect(await backupsNamed(backupName(at + 2 * HOUR))).toEqual([]);
  });

  it('sign-ups that never write cost the backups nothing: of 1,000 registered owners that never wrote and 3 that did, one run backs up the 3 and the public shard and wakes no other shard; then only a shard written since', async () => {
    await drain();
    const silent = Array.from({ length: 1000 }, () => keys().pk);
    const writers = [keys(), keys(), keys()];
    await register([...silent, ...writers.map((w) => w.pk)]);
    for (const w of writers) await publishMarked(w);
    await publishOnPublic();
    const before = await shardIds();
    const log = vi.spyOn(console, 'log');
    const at = runAt();
    await cron(at, []);
    expect(log).toHaveBeenLastCalledWith(summary(4, 4, 4, 4));
    expect(await backupsNamed(backupName(at))).toEqual([...writers.map((w) => backupKey(w.pk, backupName(at))), backupKey(null, backupName(at))].sort());
    // No silent owner's shard was backed up, nor woken: the Durable Objects with storage are those of before the run.
    const silentPrefixes = new Set(silent.map((pk) => `shards/${shardName(pk)}/`));
    expect((await keysUnder('shards/')).filter((k) => silentPrefixes.has(k.slice(0, k.lastIndexOf('/') + 1)))).toEqual([]);
    const silentIds = new Set(silent.map((pk) => env.RELAY_SHARD.idFromName(shardName(pk)).toString()));
    expect(await shardIds()).toEqual(before);
    expect(before.filter((id) => silentIds.has(id))).toEqual([]);
    expect(await keysUnder(DIRTY_PREFIX)).toEqual([]);

    // One writer writes again: the next run backs up that shard alone; the one after, none.
    await publishMarked(writers[1]!);
    expect(await keysUnder(DIRTY_PREFIX)).toEqual([dirtyKey(writers[1]!.pk)]);
    await cron(at + HOUR, []);
    expect(log).toHaveBeenLastCalledWith(summary(1, 1, 1, 1));
    expect(await backupsNamed(backupName(at + HOUR))).toEqual([backupKey(writers[1]!.pk, backupName(at + HOUR))]);
    await cron(at + 2 * HOUR, []);
    expect(log).toHaveBeenLastCalledWith(summary(0, 0, 0, 0));
    expect(await backupsNamed(backupName(at + 2 * HOUR))).toEqual([]);
    expect(await shardIds()).toEqual(before);
  });

  it('the public shard and vetted owners’ shards go first, then the others, each oldest mark first; at most 25 a run', async () => {
    await drain();
    // 26 keys that are no owners (open shards) write first, then two owners the operators added, one listed owner, the public shard.
    const strangers = Array.from({ length: 26 }, () => keys());
    for (const k of strangers) await publishMarked(k);
    const added = [keys(), keys()];
    await register(added.map((k) => k.pk));
    for (const k of added) await publishMarked(k);
    const listed = keys();
    await publishMarked(listed);
    await publishOnPublic();
    const at = runAt();
    const run = await runWith(at, [listed]);
    expect(run).toMatchObject({ waiting: 30, first: 4, taken: 25, failed: [] });
    const name = backupName(at);
    expect(run.written.map((w) => w.key)).toEqual([null, added[0]!.pk, added[1]!.pk, listed.pk, ...strangers.slice(0, 21).map((k) => k.pk)].map((o) => backupKey(o, name)));
    const next = await runWith(at + HOUR, [listed]);
    expect(next).toMatchObject({ waiting: 5, first: 0, taken: 5, failed: [] });
    expect(next.written.map((w) => w.key)).toEqual(strangers.slice(21).map((k) => backupKey(k.pk, backupName(at + HOUR))));
  });

  it('a shard that changes while its backup is written keeps its mark for the next run; a change whose mark was not put (the object reset between the commit and the put) is marked at the next wake', async () => {
    await drain();
    const owner = keys();
    const shard = shardStub(env, owner.pk);
    const write = () => importRpc(shard, owner.pk, [JSON.stringify(note(owner))], urlOf(owner.pk));
    expect(await write()).toMatchObject({ accepted: 1 });
    expect(await keysUnder(DIRTY_PREFIX)).toEqual([dirtyKey(owner.pk)]);
    const since = await shard.backupBegins();
    expect(await write()).toMatchObject({ accepted: 1 });
    await shard.backupWritten(since);
    expect(await keysUnder(DIRTY_PREFIX)).toEqual([dirtyKey(owner.pk)]);
    // A backup with no change since it began: the mark goes.
    await shard.backupWritten(await shard.backupBegins());
    expect(await keysUnder(DIRTY_PREFIX)).toEqual([]);
    // The change is recorded with its commit; the object is reset before its mark is put.
    await runInDurableObject(shard, (_i, state) => void state.storage.sql.exec("INSERT OR REPLACE INTO meta (key, value) VALUES ('backup_mark', 'pending')"));
    await abortAllDurableObjects();
    expect(await keysUnder(DIRTY_PREFIX)).toEqual([]);
    expect((await shardStub(env, owner.pk).storedUsage()).events).toBe(2); // any wake (a new stub: the old one was reset)
    await vi.waitFor(async () => expect(await keysUnder(DIRTY_PREFIX)).toEqual([dirtyKey(owner.pk)]));
    const at = runAt();
    expect((await runWith(at, [])).written.map((w) => w.key)).toEqual([backupKey(owner.pk, backupName(at))]);
    expect(await keysUnder(DIRTY_PREFIX)).toEqual([]);
  });

  /**
   * Holds the R2 delete of `owner`'s mark (as a slow round trip of a real bucket does): the delete
   * is made only when `release` is called, and its answer only if `answer` (else it never answers,
   * as when the object is reset in between). `entered`: the delete was asked for.
   */
  async function holdMarkDelete(shard: DurableObjectStub<RelayShard>, answer: boolean) {
    const gate = { entered: false, released: false };
    await runInDurableObject(shard, (instance) => {
      const marker = (instance as unknown as { marker: { bucket: R2Bucket } }).marker;
      const real = marker.bucket;
      const held: Pick<R2Bucket, 'head' | 'put' | 'delete'> = {
        head: real.head.bind(real),
        put: real.put.bind(real),
        delete: async (key) => {
          gate.entered = true;
          while (!gate.released) await scheduler.wait(5);
          await real.delete(key);
          if (!answer) await new Promise<never>(() => {});
        },
      };
      marker.bucket = held as R2Bucket;
    });
    return {
      entered: () => vi.waitFor(() => expect(gate.entered).toBe(true)),
      release: () => void (gate.released = true),
    };
  }

  it('a write that lands while a backup deletes the mark keeps the shard marked, and the next run backs it up; also when the object is reset after the delete', async () => {
    await drain();
    const owner = keys();
    const shard = shardStub(env, owner.pk);
    const write = () => importRpc(shard, owner.pk, [JSON.stringify(note(owner))], urlOf(owner.pk));
    expect(await write()).toMatchObject({ accepted: 1 });
    expect(await keysUnder(DIRTY_PREFIX)).toEqual([dirtyKey(owner.pk)]);
    const held = await holdMarkDelete(shard, true);
    const done = shard.backupWritten(await shard.backupBegins()); // nothing changed since it began: the mark goes
    await held.entered();
    // A note the backup lacks, published on the owner's shard (answered before its mark is put).
    expect(await publishAsOwner(owner, [note(owner)])).toEqual([['OK', expect.any(String), true, '']]);
    held.release();
    await done;
    await vi.waitFor(async () => expect(await keysUnder(DIRTY_PREFIX)).toEqual([dirtyKey(owner.pk)]));
    const at = runAt();
    expect((await runWith(at, [])).written.map((w) => w.key)).toEqual([backupKey(owner.pk, backupName(at))]);
    expect(await (await env.BACKUPS!.get(backupKey(owner.pk, backupName(at))))!.text()).toBe(jsonl(await exportOf(owner)));
    expect(await keysUnder(DIRTY_PREFIX)).toEqual([]);

    // Again, but the object is reset once the mark is deleted, before the backup's step after it.
    expect(await write()).toMatchObject({ accepted: 1 });
    expect(await keysUnder(DIRTY_PREFIX)).toEqual([dirtyKey(owner.pk)]);
    const cut = await holdMarkDelete(shard, false);
    void shard.backupWritten(await shard.backupBegins()).catch(() => undefined); // never answers: the object is reset
    await cut.entered();
    expect(await publishAsOwner(owner, [note(owner)])).toEqual([['OK', expect.any(String), true, '']]);
    cut.release();
    await vi.waitFor(async () => expect(await keysUnder(DIRTY_PREFIX)).toEqual([]));
    await abortAllDurableObjects();
    expect((await shardStub(env, owner.pk).storedUsage()).events).toBe(4); // any wake
    await vi.waitFor(async () => expect(await keysUnder(DIRTY_PREFIX)).toEqual([dirtyKey(owner.pk)]));
    const next = runAt();
    expect((await runWith(next, [])).written.map((w) => w.key)).toEqual([backupKey(owner.pk, backupName(next))]);
  });

  it('404 on /api/relay/backups and /restore without a BACKUPS binding', async () => {
    const owner = keys();
    const url = 'http://relay.test/api/relay/backups';
    const res = await fetchWithEnv({ EDGESTR_OWNERS: owner.pk, BACKUPS: undefined }, new Request(url, { headers: { Authorization: makeHttpAuthHeader(owner.sk, url, 'GET') } }));
    expect(res.status).toBe(404);
    expect(await res.json()).toEqual({ error: 'backups are not configured on this deployment (no BACKUPS bucket)' });
  });
});

describe('operators restore any shard (/api/admin/shards/<shard>)', () => {
  const admin: Keys = { sk: TEST_ADMIN_SK, pk: TEST_ADMIN };

  it('the public shard: backup → retention removes two notes → restore brings them back, each as published by its author', async () => {
    const authors = [keys(), keys()];
    const old = authors.map((k, i) => sign(k, { content: `public ${i}`, created_at: now() - 10 * 86_400 + i }));
    const ws = await connect('/');
    for (const e of old) expect((await ws.publish(e))[2]).toBe(true);
    const at = runAt();
    await cron(at, []);
    const listed = await call(admin, 'GET', '/api/admin/shards/public/backups');
    expect(listed.status).toBe(200);
    expect((listed.json as { backups: Array<{ name: string }> }).backups.map((b) => b.name)).toContain(backupName(at));

    const shard = shardStub(env, null);
    await shard.setRetentionRules([{ kinds: [1], days: 1 }]);
    await runInDurableObject(shard, (s) => s.alarm());
    expect((await ws.req('gone', { ids: old.map((e) => e.id) })).events).toEqual([]);
    await shard.setRetentionRules([]);

    const restored = await call(admin, 'POST', '/api/admin/shards/public/restore', { backup: backupName(at) });
    expect(restored.status).toBe(200);
    expect(restored.json).toMatchObject({ refused: {} });
    expect((restored.json as { accepted: number }).accepted).toBeGreaterThanOrEqual(2);
    expect((await ws.req('back', { ids: old.map((e) => e.id) })).events.map((e) => e.id).sort()).toEqual(old.map((e) => e.id).sort());
    ws.close();
  });

  it('an owner’s shard by npub; only operators (403); unknown shards and backups 404; a bad name 422', async () => {
    const owner = keys();
    await importInto(owner, jsonl(notes(owner, 2, (i) => now() - 50 + i)));
    const at = runAt();
    await cron(at, [owner]);
    const path = `/api/admin/shards/${npubEncode(owner.pk)}`;
    expect(await call(admin, 'POST', `${path}/restore`, { backup: backupName(at) })).toEqual({ status: 200, json: { accepted: 0, duplicate: 2, refused: {} } });
    expect(await call(owner, 'GET', `${path}/backups`)).toEqual({ status: 403, json: { error: NOT_AN_ADMIN } });
    expect(await call(owner, 'POST', '/api/admin/shards/public/restore', { backup: backupName(at) })).toEqual({ status: 403, json: { error: NOT_AN_ADMIN } });
    expect(await call(admin, 'GET', '/api/admin/shards/owner:x/backups')).toEqual({ status: 404, json: { error: 'no such shard: "public" or an owner’s 64-hex pubkey or npub' } });
    expect(await call(admin, 'POST', `${path}/restore`, { backup: '2020-01-01T00-00-00Z' })).toEqual({ status: 404, json: { error: 'no backup named 2020-01-01T00-00-00Z for this shard' } });
    expect((await call(admin, 'POST', `${path}/restore`, { backup: 'latest' })).status).toBe(422);
  });
});

describe('backups carry the owners’ revocations of agent keys (NIP-OA)', () => {
  /** An owner and an agent key it attested in the agent's stored profile, then revoked (DELETE /api/agents/<key>). */
  async function revokedAgent(): Promise<{ owner: Keys; agent: Keys; profile: ReturnType<typeof sign> }> {
    const owner = keys();
    const agent = keys();
    const profile = sign(agent, { kind: 0, content: '{}', created_at: now() - 60, tags: [signAttestation(owner.sk, agent.pk, '')] });
    expect(await importInto(owner, jsonl([profile]))).toEqual({ status: 200, json: { accepted: 1, duplicate: 0, refused: {} } });
    expect(await shardStub(env, owner.pk).isAgentOwner(agent.pk, owner.pk)).toBe(true);
    expect((await opsCall(owner, 'DELETE', `/api/agents/${agent.pk}`)).status).toBe(200); // a revocation (not a hosted agent): 200 {revoked}
    expect(await shardStub(env, owner.pk).isAgentOwner(agent.pk, owner.pk)).toBe(false);
    return { owner, agent, profile };
  }

  it('revoke, back up, restore into a fresh shard: neither the attested profile in the backup nor the old attestation makes the key the owner’s agent again', async () => {
    const { owner, agent, profile } = await revokedAgent();
    const at = runAt();
    await cron(at, [owner]);
    const fresh = env.RELAY_SHARD.get(env.RELAY_SHARD.newUniqueId());
    const report = await restoreInto(fresh, owner.pk, backupName(at));
    expect(await fresh.isAgentOwner(agent.pk, owner.pk)).toBe(false);
    expect(report).toEqual({ accepted: 2, duplicate: 0, refused: {} });
    // The revocation comes first (with its time), then the events, after the sides they were counted in (the profile is not the owner's own).
    const text = await (await env.BACKUPS!.get(backupKey(owner.pk, backupName(at))))!.text();
    const lines = text.split('\n').filter((l) => l !== '');
    expect(lines).toHaveLength(3);
    expect(JSON.parse(lines[0]!)).toEqual(['REVOKED_AGENT', agent.pk, owner.pk, expect.any(Number)]);
    expect(JSON.parse(lines[1]!)).toEqual(['COUNTED', [[profile.id, expect.any(Number), null]]]);
    expect(lines[2]).toBe(JSON.stringify(profile));
    // Restored again: the revocation is known (a duplicate), as the profile is.
    expect(await restoreInto(fresh, owner.pk, backupName(at))).toEqual({ accepted: 0, duplicate: 2, refused: {} });
    // The old attestation in a newer profile (stored, as the owner's import stores what it is given) proves nothing.
    const again = sign(agent, { kind: 0, content: '{"name":"back"}', created_at: profile.created_at + 1, tags: profile.tags });
    expect(await importRpc(fresh, owner.pk, [JSON.stringify(again)], urlOf(owner.pk))).toEqual({ accepted: 1, duplicate: 0, refused: {} });
    expect(await fresh.isAgentOwner(agent.pk, owner.pk)).toBe(false);
  });

  it('a restore puts back the revocations a shard lost: the owner’s restore, and an operator’s of the public shard', async () => {
    const { owner, agent } = await revokedAgent();
    const at = runAt();
    await cron(at, [owner]);
    // Both shards lose the row (a wipe, a recovery to before the revocation): the old attestation proves the key again.
    for (const shard of [owner.pk, null]) {
      await runInDurableObject(shardStub(env, shard), (_i, state) => void state.storage.sql.exec('DELETE FROM revoked_agents WHERE agent = ?', agent.pk));
    }
    const tag = signAttestation(owner.sk, agent.pk, '');
    for (const path of [urlOf(owner.pk), urlOf(null)]) {
      const s = await connect(new URL(path).pathname);
      s.send(['AUTH', sign(agent, { kind: 22242, content: '', tags: [['relay', s.url], ['challenge', s.challenge], tag] })]);
      expect((await s.next((f) => f[0] === 'OK')).slice(2)).toEqual([true, '']);
      s.close();
    }
    expect(await shardStub(env, owner.pk).isAgentOwner(agent.pk, owner.pk)).toBe(true);
    expect(await shardStub(env, null).isAgentOwner(agent.pk, owner.pk)).toBe(true);

    expect(await call(owner, 'POST', '/api/relay/restore', { backup: backupName(at) })).toEqual({ status: 200, json: { accepted: 1, duplicate: 1, refused: {} } });
    expect(await shardStub(env, owner.pk).isAgentOwner(agent.pk, owner.pk)).toBe(false);
    const admin: Keys = { sk: TEST_ADMIN_SK, pk: TEST_ADMIN };
    const restored = await call(admin, 'POST', '/api/admin/shards/public/restore', { backup: backupName(at) });
    expect(restored).toMatchObject({ status: 200, json: { refused: {} } });
    expect(await shardStub(env, null).isAgentOwner(agent.pk, owner.pk)).toBe(false);
  });

  it('an owner’s import restores only its own revocations; a malformed line is refused with its form', async () => {
    const owner = keys();
    const other = keys();
    const agent = keys();
    const line = (by: Keys) => JSON.stringify(['REVOKED_AGENT', agent.pk, by.pk, now() - 5]);
    const body = [line(other), line(owner), JSON.stringify(['REVOKED_AGENT', agent.pk, owner.pk]), JSON.stringify(['REVOKED_AGENT', 'x', owner.pk, 1])].join('\n');
    const form = 'invalid: a revocation line is ["REVOKED_AGENT", <agent hex>, <owner hex>, <revoked_at>]';
    expect(await importInto(owner, body)).toEqual({
      status: 200,
      json: { accepted: 1, duplicate: 0, refused: { "restricted: an owner's shard keeps only its owner's revocations of agent keys": 1, [form]: 2 } },
    });
    // The revocation holds: the key's attested profile no longer makes it the owner's agent (it did in revokedAgent).
    const profile = sign(agent, { kind: 0, content: '{}', tags: [signAttestation(owner.sk, agent.pk, '')] });
    expect(await importInto(owner, jsonl([profile]))).toEqual({ status: 200, json: { accepted: 1, duplicate: 0, refused: {} } });
    expect(await shardStub(env, owner.pk).isAgentOwner(agent.pk, owner.pk)).toBe(false);
  });

  it(`a restore keeps the live bound (at most ${MAX_REVOKED_PER_OWNER} revocations per owner on a shard) and their times; they are backed up page by page`, async () => {
    const owner = keys().pk;
    await runInDurableObject(env.RELAY_SHARD.get(env.RELAY_SHARD.newUniqueId()), (_i, state) => {
      const registry = new OwnershipRegistry(state.storage.sql, () => owner, undefined, 2);
      const [a, b, c] = [keys().pk, keys().pk, keys().pk];
      expect(registry.restoreRevocation(a, owner, 100)).toBe('restored');
      expect(registry.restoreRevocation(a, owner, 100)).toBe('known');
      expect(registry.restoreRevocation(b, owner, 200)).toBe('restored');
      expect(registry.restoreRevocation(c, owner, 300)).toEqual({ prefix: 'restricted', reason: 'the owner has revoked 2 agent keys on this shard, the most it keeps per owner: this revocation is not restored' });
      expect([a, b, c].map((k) => registry.isRevoked(k, owner))).toEqual([true, true, false]);
      expect(state.storage.sql.exec('SELECT revoked_at FROM revoked_agents ORDER BY revoked_at').toArray()).toEqual([{ revoked_at: 100 }, { revoked_at: 200 }]);
      // Backed up a page at a time, each naming the next.
      const [first, second] = [a, b].sort();
      const page = revocationsPage(registry, undefined, 1);
      expect(page).toEqual({ lines: [JSON.stringify(['REVOKED_AGENT', first, owner, first === a ? 100 : 200])], next: { agent: first, owner } });
      expect(revocationsPage(registry, page.next, 1)).toEqual({ lines: [JSON.stringify(['REVOKED_AGENT', second, owner, second === a ? 100 : 200])], next: { agent: second, owner } });
      expect(revocationsPage(registry, { agent: second!, owner }, 1)).toEqual({ lines: [] });
    });
  });
});

describe('backups carry the records of edgestr’s own provisioning (hosted agents, bridge keys)', () => {
  /** An owner with a hosted agent created through the management API (echo provider); the agent's key. */
  async function hostedAgent(): Promise<{ owner: Keys; agent: string }> {
    const owner = keys();
    const created = await call(owner, 'POST', '/api/agents', { name: 'backed-up agent', provider: 'echo' });
    expect(created).toMatchObject({ status: 201, json: { pubkey: expect.any(String) } });
    return { owner, agent: (created.json as { pubkey: string }).pubkey };
  }
  const linesOf = async (owner: string, at: number) => (await (await env.BACKUPS!.get(backupKey(owner, backupName(at))))!.text()).split('\n').filter((l) => l !== '');

  it('a shard that lost them gets them back with a restore: the management API finds the hosted agent again (404 before)', async () => {
    const { owner, agent } = await hostedAgent();
    const at = runAt();
    await cron(at, [owner]);
    const lines = await linesOf(owner.pk, at);
    expect(lines.map((l) => JSON.parse(l) as unknown)).toContainEqual(['PROVISIONED', agent, owner.pk, 'provisioned', expect.any(Number)]);
    await runInDurableObject(shardStub(env, owner.pk), (_i, state) => void state.storage.sql.exec('DELETE FROM agent_owners WHERE agent = ?', agent));
    expect(await call(owner, 'GET', `/api/agents/${agent}`)).toEqual({ status: 404, json: { error: 'no such agent' } });

    expect(await call(owner, 'POST', '/api/relay/restore', { backup: backupName(at) })).toEqual({ status: 200, json: { accepted: 1, duplicate: lines.length - 1, refused: {} } });
    expect(await call(owner, 'GET', `/api/agents/${agent}`)).toMatchObject({ status: 200, json: { pubkey: agent, owner: owner.pk } });
    expect(await shardStub(env, owner.pk).provisionedAgents(owner.pk)).toEqual([agent]);
    // Restored again: known.
    expect(await call(owner, 'POST', '/api/relay/restore', { backup: backupName(at) })).toEqual({ status: 200, json: { accepted: 0, duplicate: lines.length, refused: {} } });
  });

  it('restored into a fresh shard, the hosted agent is the owner’s there (it counts for the plan)', async () => {
    const { owner, agent } = await hostedAgent();
    const at = runAt();
    await cron(at, [owner]);
    const fresh = env.RELAY_SHARD.get(env.RELAY_SHARD.newUniqueId());
    const report = await restoreInto(fresh, owner.pk, backupName(at));
    expect(report).toEqual({ accepted: (await linesOf(owner.pk, at)).length, duplicate: 0, refused: {} });
    expect(await fresh.provisionedAgents(owner.pk)).toEqual([agent]);
    expect(await fresh.isAgentOwner(agent, owner.pk)).toBe(true);
    // The plan's agents cap counts it: a cap of 1 refuses a second agent.
    expect(await fresh.provisionAgent(keys().pk, owner.pk, 'provisioned', 1)).toBe(false);
  });

  it('an owner’s import cannot plant them: refused, the key is not the owner’s', async () => {
    const owner = keys();
    const stranger = keys();
    const line = JSON.stringify(['PROVISIONED', stranger.pk, owner.pk, 'provisioned', now() - 5]);
    const bridge = JSON.stringify(['PROVISIONED', stranger.pk, owner.pk, 'bridge', now() - 5]);
    expect(await importInto(owner, `${line}\n${bridge}\n`)).toEqual({ status: 200, json: { accepted: 0, duplicate: 0, refused: { [NOT_RESTORED]: 2 } } });
    expect(NOT_RESTORED).toBe("restricted: provisioning records come back only with a restore of this deployment's backups (POST /api/relay/restore), not in an import");
    expect(await shardStub(env, owner.pk).provisionedAgents(owner.pk)).toEqual([]);
    expect(await shardStub(env, owner.pk).isAgentOwner(stranger.pk, owner.pk)).toBe(false);
  });

  it('a restore keeps on an owner shard only its owner’s records, with their time; a malformed line is refused with its form; paged', async () => {
    const owner = keys().pk;
    const other = keys().pk;
    await runInDurableObject(env.RELAY_SHARD.get(env.RELAY_SHARD.newUniqueId()), (_i, state) => {
      const registry = new OwnershipRegistry(state.storage.sql, () => owner);
      const [a, b] = [keys().pk, keys().pk].sort() as [string, string];
      expect(registry.restoreProvisioned({ agent: a, owner, source: 'provisioned', recorded_at: 100 })).toBe('restored');
      expect(registry.restoreProvisioned({ agent: a, owner, source: 'provisioned', recorded_at: 100 })).toBe('known');
      expect(registry.restoreProvisioned({ agent: b, owner, source: 'bridge', recorded_at: 200 })).toBe('restored');
      expect(registry.restoreProvisioned({ agent: b, owner: other, source: 'provisioned', recorded_at: 300 })).toEqual({
        prefix: 'restricted',
        reason: "an owner's shard keeps only its owner's provisioning records",
      });
      expect(registry.agentsOf(owner, 'provisioned')).toEqual([a]);
      expect(registry.ownersOf(b, 'bridge')).toEqual([owner]);
      const page = provisionedPage(registry, undefined, 1);
      expect(page).toEqual({ lines: [JSON.stringify(['PROVISIONED', a, owner, 'provisioned', 100])], next: { agent: a, owner, source: 'provisioned' } });
      expect(provisionedPage(registry, page.next, 1)).toEqual({ lines: [JSON.stringify(['PROVISIONED', b, owner, 'bridge', 200])], next: { agent: b, owner, source: 'bridge' } });
      expect(provisionedPage(registry, { agent: b, owner, source: 'bridge' }, 1)).toEqual({ lines: [] });
    });
    const fresh = env.RELAY_SHARD.get(env.RELAY_SHARD.newUniqueId());
    expect(await importRpc(fresh, owner, [JSON.stringify(['PROVISIONED', keys().pk, owner, 'agent', 1])], urlOf(owner), 'restore')).toEqual({
      accepted: 0,
      duplicate: 0,
      refused: { 'invalid: a provisioning line is ["PROVISIONED", <key hex>, <owner hex>, "provisioned" | "bridge", <recorded_at>]': 1 },
    });
  });
});

describe('a restore at another host keeps the requests to vanish (NIP-62)', () => {
  const BLOCKED = 'blocked: this pubkey asked to vanish from this relay (NIP-62)';
  const newUrlOf = (owner: string) => `wss://moved.test/r/${owner}`;

  /** An owner shard holding a stranger's note and, later, the stranger's request to vanish naming the shard's URL; backed up. */
  async function vanishedAndBackedUp(): Promise<{ owner: Keys; note: ReturnType<typeof sign>; at: number }> {
    const owner = keys();
    const stranger = keys();
    const note = sign(stranger, { content: 'forget me', created_at: now() - 60 });
    const request = sign(stranger, { kind: 62, content: '', tags: [['relay', urlOf(owner.pk)]], created_at: now() - 30 });
    expect(await importInto(owner, jsonl([note, request]))).toEqual({ status: 200, json: { accepted: 2, duplicate: 0, refused: {} } });
    expect(await importInto(owner, jsonl([note]))).toEqual({ status: 200, json: { accepted: 0, duplicate: 0, refused: { [BLOCKED]: 1 } } });
    const at = runAt();
    await cron(at, [owner]);
    return { owner, note, at };
  }

  it('restored into a fresh shard reached at a new host, the old kind 62 is accepted and the vanished key’s note is refused again', async () => {
    const { owner, note, at } = await vanishedAndBackedUp();
    const fresh = env.RELAY_SHARD.get(env.RELAY_SHARD.newUniqueId());
    let report = emptyReport();
    for await (const batch of (await readBackupLines(env.BACKUPS!, owner.pk, backupName(at)))!) {
      report = mergeReports(report, await importRpc(fresh, owner.pk, batch, newUrlOf(owner.pk), 'restore'));
    }
    expect(report).toEqual({ accepted: 1, duplicate: 0, refused: {} });
    expect(await importRpc(fresh, owner.pk, [JSON.stringify(note)], newUrlOf(owner.pk))).toEqual({ accepted: 0, duplicate: 0, refused: { [BLOCKED]: 1 } });
  });

  it('the restore route at a new host (EDGESTR_PUBLIC_URL) accepts it as well', async () => {
    const { owner, at } = await vanishedAndBackedUp();
    await runInDurableObject(shardStub(env, owner.pk), (_i, state) => {
      // The shard lost the request (as a shard restored fresh has none).
      state.storage.sql.exec('DELETE FROM tags WHERE rid IN (SELECT rid FROM events WHERE kind = 62)');
      state.storage.sql.exec('DELETE FROM events WHERE kind = 62');
      state.storage.sql.exec('DELETE FROM vanished');
    });
    const url = 'http://relay.test/api/relay/restore';
    const body = JSON.stringify({ backup: backupName(at) });
    const res = await fetchWithEnv(
      { EDGESTR_OWNERS: owner.pk, EDGESTR_PUBLIC_URL: 'https://moved.test' },
      new Request(url, { method: 'POST', body, headers: { Authorization: makeHttpAuthHeader(owner.sk, url, 'POST', body) } }),
    );
    expect(await res.json()).toEqual({ accepted: 1, duplicate: 0, refused: {} });
  });

  it('a plain import at the new host keeps the live rule: the old kind 62 is refused', async () => {
    const { owner, at } = await vanishedAndBackedUp();
    const fresh = env.RELAY_SHARD.get(env.RELAY_SHARD.newUniqueId());
    const lines: string[] = [];
    for await (const batch of (await readBackupLines(env.BACKUPS!, owner.pk, backupName(at)))!) lines.push(...batch);
    expect(await importRpc(fresh, owner.pk, lines, newUrlOf(owner.pk))).toEqual({
      accepted: 0,
      duplicate: 0,
      // The backup's line of the sides its events were counted in (a stranger's) is a restore's only.
      refused: { [`invalid: a request to vanish must name this relay (${newUrlOf(owner.pk)}) or ALL_RELAYS in a relay tag`]: 1, [NOT_RESTORED_COUNTED]: 1 },
    });
  });

  it('a restore does not take a kind 62 naming another shard', async () => {
    const owner = keys();
    const stranger = keys();
    const elsewhere = sign(stranger, { kind: 62, content: '', tags: [['relay', `wss://moved.test/r/${keys().pk}`]] });
    const fresh = env.RELAY_SHARD.get(env.RELAY_SHARD.newUniqueId());
    expect(await importRpc(fresh, owner.pk, [JSON.stringify(elsewhere)], newUrlOf(owner.pk), 'restore')).toEqual({
      accepted: 0,
      duplicate: 0,
      refused: { [`invalid: a request to vanish must name this relay (${newUrlOf(owner.pk)}) or ALL_RELAYS in a relay tag`]: 1 },
    });
  });
});

describe('a restore keeps deletion requests stored before they were kept for good (NIP-09)', () => {
  const DELETED = 'blocked: this event was deleted by its author';

  it('a kind 5 with an expiration tag in a backup comes back without its expiration: the events it deleted stay deleted', async () => {
    const owner = keys();
    const older = sign(owner, { content: 'deleted long ago', created_at: now() - 300 });
    const lately = sign(owner, { content: 'deleted lately', created_at: now() - 250 });
    // As shards stored them before deletion requests were kept for good: one whose expiration has
    // passed (the purge kept it, clearing only its expires_at), one whose expiration is still ahead.
    const expired = sign(owner, { kind: 5, content: '', tags: [['e', older.id], ['expiration', String(now() - 100)]], created_at: now() - 200 });
    const ahead = sign(owner, { kind: 5, content: '', tags: [['e', lately.id], ['expiration', String(now() + 3600)]], created_at: now() - 150 });
    const name = backupName(runAt());
    await env.BACKUPS!.put(backupKey(owner.pk, name), jsonl([expired, ahead]));
    // An import (the owner's own file) keeps the live rules.
    expect(await importInto(owner, jsonl([expired, ahead]))).toEqual({
      status: 200,
      json: { accepted: 0, duplicate: 0, refused: { 'invalid: event has expired': 1, 'invalid: a deletion request (NIP-09) is kept for good: publish it without an expiration tag': 1 } },
    });
    expect(await call(owner, 'POST', '/api/relay/restore', { backup: name })).toEqual({ status: 200, json: { accepted: 2, duplicate: 0, refused: {} } });
    expect(await publishAsOwner(owner, [older, lately])).toEqual([
      ['OK', older.id, false, DELETED],
      ['OK', lately.id, false, DELETED],
    ]);
    // Kept for good: no expiration is held for them, so no purge removes them.
    await runInDurableObject(shardStub(env, owner.pk), (_i, state) => {
      expect(state.storage.sql.exec('SELECT id, expires_at FROM events WHERE kind = 5 ORDER BY created_at').toArray()).toEqual([
        { id: expired.id, expires_at: null },
        { id: ahead.id, expires_at: null },
      ]);
    });
    expect((await queryShard(owner, owner, { kinds: [5] })).map((e) => e.id).sort()).toEqual([expired.id, ahead.id].sort());
  });
});
