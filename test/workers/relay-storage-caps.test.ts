// Storage bounds of relay shards: what a shard counts as stored (owner-plan.ts, kept with each
// stored event and removed with it, so a deletion, a replaced version or an expired event frees its
// room at once).
import { env, runInDurableObject } from 'cloudflare:test';
import { describe, expect, it } from 'vitest';
import { api } from './api-helpers.js';
import { connect, keys, now, sign, type Keys } from './helpers.js';
import { TEST_ADMIN_SK } from './test-keys.js';
import { OwnerPlan } from '../../workers/relay-do/owner-plan.js';

const bytesOf = (e: object) => new TextEncoder().encode(JSON.stringify(e)).length;
const primary = (owner: string) => env.RELAY_SHARD.get(env.RELAY_SHARD.idFromName(`owner:${owner}`));

async function addOwner(plan: string): Promise<Keys> {
  const k = keys();
  const r = await api(TEST_ADMIN_SK, 'POST', '/api/admin/owners', { pubkey: k.pk, plan });
  expect(r.status).toBe(201);
  return k;
}

describe('what a shard counts as stored', () => {
  it('a deletion and a replaced version free their bytes at once: the owner fills its plan again right after', async () => {
    const owner = await addOwner('small_shard'); // stored_bytes 1000
    const sock = await connect(`/r/${owner.pk}`);
    await sock.auth(owner);
    const note = sign(owner, { content: 'n'.repeat(100) });
    const deletion = sign(owner, { kind: 5, tags: [['e', note.id]], content: '' });
    expect(await sock.publish(note)).toEqual(['OK', note.id, true, '']);
    expect(await sock.publish(deletion)).toEqual(['OK', deletion.id, true, '']);
    // The note is gone: what is stored is the deletion alone, and the rest of the plan is free.
    const profile = (content: string, created_at: number) => sign(owner, { kind: 0, content, created_at });
    const empty = profile('', now() - 10);
    const first = profile('p'.repeat(1000 - bytesOf(deletion) - bytesOf(empty)), now() - 10);
    expect(bytesOf(deletion) + bytesOf(first)).toBe(1000);
    expect(await sock.publish(first)).toEqual(['OK', first.id, true, '']);
    // A newer version replaces it: its bytes are freed as it is removed.
    const second = profile('q'.repeat(1000 - bytesOf(deletion) - bytesOf(empty)), now() - 9);
    expect(await sock.publish(second)).toEqual(['OK', second.id, true, '']);
    expect(await primary(owner.pk).storedUsage()).toEqual({ events: 2, bytes: 1000 });
    const over = sign(owner, { content: '' });
    expect(await sock.publish(over)).toEqual(['OK', over.id, false, 'restricted: storage quota: the owner’s plan allows 1000 stored bytes on this shard']);
    sock.close();
  });

  it('a shard made before the sums counts what it holds once, when it wakes: the owner’s events and the inbox’s, gift wraps the owner published included', async () => {
    const owner = await addOwner('inbox_shard');
    const mine = await connect(`/r/${owner.pk}`);
    await mine.auth(owner);
    const own = sign(owner, { content: 'mine' });
    const ownWrap = sign(keys(), { kind: 1059, tags: [['p', owner.pk]], content: 'sealed' }); // published by the owner's connection
    const letter = sign(keys(), { content: 'a letter', tags: [['p', owner.pk]] });
    for (const e of [own, ownWrap, letter]) expect((await mine.publish(e))[2]).toBe(true);
    mine.close();
    const counted = await runInDurableObject(primary(owner.pk), (_i, state) => {
      const sql = state.storage.sql;
      const totals = () => sql.exec('SELECT events, bytes, inbox FROM stored_totals').one();
      const now = totals();
      // The shard as it was before: no sums, the ids of the owner's wraps kept apart.
      sql.exec('DROP TRIGGER stored_event_removed');
      sql.exec('DROP TABLE stored_sizes');
      sql.exec('DROP TABLE stored_totals');
      sql.exec('CREATE TABLE owner_wraps (id TEXT PRIMARY KEY) WITHOUT ROWID');
      sql.exec('INSERT INTO owner_wraps (id) VALUES (?)', ownWrap.id);
      new OwnerPlan(sql, env, () => owner.pk);
      const wrapsLeft = sql.exec("SELECT 1 FROM sqlite_master WHERE name = 'owner_wraps'").toArray().length;
      return { now, woken: totals(), wrapsLeft };
    });
    const bytes = bytesOf(own) + bytesOf(ownWrap) + bytesOf(letter);
    expect(counted).toEqual({ now: { events: 3, bytes, inbox: bytesOf(letter) }, woken: { events: 3, bytes, inbox: bytesOf(letter) }, wrapsLeft: 0 });
  });
});
