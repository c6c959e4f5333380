// A restore of this deployment's own backups puts back what the shard accepted live, counted as it
// was counted live. Live, each event was judged by who sent it; a restore used to judge every line
// as published by the owner: a stranger's protected (NIP-70) event was refused, a self-run agent's
// events counted as the inbox's until its profile (the proof, restored last) came, and were refused
// past the inbox share, and strangers' gift wraps to the owner became the owner's data (the inbox
// share freed for more). On the public shard, what an owner's agents and bridges held of the reserve
// started from zero. Now a restore authenticates also as each event's author, and the backup carries
// the side each event was counted in (["COUNTED", …] lines), which the restore takes instead of
// judging it again; an owner's import (its file is not trusted) is judged live and refuses the
// line. Backups also carry the shard's retention rules (["RETENTION", rules]), put back by a restore
// into a shard on which none were set, never by an import.
import { env, runInDurableObject } from 'cloudflare:test';
import { describe, expect, it } from 'vitest';
import { ConversationKeyCache } from '../../src/shared/nip44.js';
import { giftWrap, makeRumor } from '../../src/shared/nip59.js';
import { signAttestation } from '../../src/shared/nip-oa.js';
import type { NostrEvent } from '../../src/shared/event.js';
import { SHARD_HEADER, shardStub } from '../../workers/common/shards.js';
import { shardUpgradeHeaders } from '../../workers/common/relay-sockets.js';
import { backupKey, backupName, backupShard, readBackupLines } from '../../workers/relay-do/backup.js';
import { emptyReport, mergeReports, NOT_RESTORED_COUNTED, NOT_RESTORED_RETENTION, type ImportReport } from '../../workers/relay-do/import.js';
import { INBOX_SHARE } from '../../workers/relay-do/owner-plan.js';
import { RetentionRules, type RetentionRule } from '../../workers/relay-do/retention.js';
import type { RelayShard } from '../../workers/relay-do/shard.js';
import { api } from './api-helpers.js';
import { connect, keys, now, sign, TestSocket, type Keys } from './helpers.js';
import { importInto, importRpc, opsCall } from './relay-ops-helpers.js';
import { TEST_ADMIN_SK } from './test-keys.js';

const cache = new ConversationKeyCache(64);
const urlOf = (owner: string | null) => `ws://relay.test/${owner ? `r/${owner}` : ''}`;

async function addOwner(plan: string): Promise<Keys> {
  const k = keys();
  expect((await api(TEST_ADMIN_SK, 'POST', '/api/admin/owners', { pubkey: k.pk, plan })).status).toBe(201);
  return k;
}

type Totals = { events: number; bytes: number; inbox: number; owners: number };
/** A shard object's stored totals (owner-plan.ts): events, counted bytes, of them the inbox's, and owners' agents' and bridges' in the public shard's reserve. */
const totalsOf = (shard: DurableObjectStub<RelayShard>): Promise<Totals> =>
  runInDurableObject(shard, (_i, state) => state.storage.sql.exec<Totals>('SELECT events, bytes, inbox, owners FROM stored_totals').one());

/** The retention rules a shard object holds. */
const rulesOf = (shard: DurableObjectStub<RelayShard>): Promise<RetentionRule[]> => runInDurableObject(shard, (_i, state) => new RetentionRules(state.storage.sql).get());

let second = 0;
/** Backs up the shard of `owner` (null: the public shard) as the cron does, under a name of its own; the name. */
async function backUp(owner: string | null): Promise<string> {
  const name = backupName(Date.UTC(2027, 0, 1, 0, 0, second++));
  expect(await backupShard(env, env.BACKUPS!, owner, backupKey(owner, name))).toBeGreaterThan(0);
  return name;
}

/** The lines of a backup, parsed. */
const linesOf = async (owner: string | null, name: string): Promise<unknown[]> =>
  (await (await env.BACKUPS!.get(backupKey(owner, name)))!.text())
    .split('\n')
    .filter((l) => l !== '')
    .map((l) => JSON.parse(l) as unknown);

/**
 * Restores `owner`'s backup `name` (null: the public shard's) into `shard` through its import RPC
 * under one lease, as the restore routes do, in batches of 7 lines (a page's COUNTED line and its
 * events in different batches). `evict`: the shard object restarts (a deploy, an eviction) after
 * the first batch that held a COUNTED line, and the restore goes on with the new instance.
 */
async function restoreInto(shard: DurableObjectStub<RelayShard>, owner: string | null, name: string, evict = false): Promise<ImportReport> {
  const lease = await shard.beginBulk('restore');
  if (!lease.ok) throw new Error(lease.error);
  let report = emptyReport();
  let countedSent = false;
  try {
    for await (const batch of (await readBackupLines(env.BACKUPS!, owner, name, 7))!) {
      if (evict && countedSent) {
        await runInDurableObject(shard, (_i, state) => state.abort('simulated eviction')).catch(() => undefined);
        shard = env.RELAY_SHARD.get(shard.id);
        evict = false;
      }
      countedSent ||= batch.some((l) => l.startsWith('["COUNTED"'));
      const done = await shard.importEvents(owner, batch, urlOf(owner), lease.value, 'restore');
      if (!done.ok) throw new Error(done.error);
      report = mergeReports(report, done.value);
    }
  } finally {
    await shard.endBulk(lease.value);
  }
  return report;
}

/** A new shard object (as after a wipe), on `plan` when given. */
async function freshShard(plan?: string): Promise<DurableObjectStub<RelayShard>> {
  const shard = env.RELAY_SHARD.get(env.RELAY_SHARD.newUniqueId());
  if (plan !== undefined) await shard.setOwnerAccount({ plan, suspended: false });
  return shard;
}

/** A stranger's gift wrap to `to` (signed by a one-time key), published on `sock`. */
async function wrapTo(sock: TestSocket, to: string): Promise<NostrEvent> {
  const from = keys();
  const wrap = giftWrap(makeRumor({ pubkey: from.pk, kind: 14, created_at: now(), tags: [['p', to]], content: 'hello '.repeat(40) }), from.sk, to, cache);
  expect((await sock.publish(wrap)).slice(2)).toEqual([true, '']);
  return wrap;
}

describe('a restore puts back what an owner shard accepted live, counted as it was', () => {
  it('a stranger’s protected event (NIP-70) p-tagged to the owner comes back; an owner’s import of it is still refused', async () => {
    const owner = keys();
    const stranger = keys();
    const sock = await connect(`/r/${owner.pk}`);
    await sock.auth(stranger);
    const letter = sign(stranger, { content: 'for the owner, from its author only', tags: [['-'], ['p', owner.pk]] });
    expect(await sock.publish(letter)).toEqual(['OK', letter.id, true, '']);
    sock.close();
    const before = await totalsOf(shardStub(env, owner.pk));
    const name = await backUp(owner.pk);

    const fresh = await freshShard();
    expect(await restoreInto(fresh, owner.pk, name)).toEqual({ accepted: 1, duplicate: 0, refused: {} });
    expect(await totalsOf(fresh)).toEqual(before);
    // The owner's own file proves nothing of who published it.
    expect(await importRpc(await freshShard(), owner.pk, [JSON.stringify(letter)], urlOf(owner.pk))).toEqual({
      accepted: 0,
      duplicate: 0,
      refused: { 'restricted: this event is protected: only its author may publish it': 1 },
    });
  });

  it.each([
    ['', false],
    [' (the shard restarts between a COUNTED line and the rest of its page: each batch carries the sides of its own events)', true],
  ])('every event of a self-run agent (proven by AUTH live, its profile newest) comes back as the owner’s data, and strangers’ wraps as the inbox’s%s', async (_, evict) => {
    const owner = await addOwner('answers_shard'); // stored_bytes 60000: 15000 for others
    const agent = keys();
    const tag = signAttestation(owner.sk, agent.pk, '');
    const sock = await connect(`/r/${owner.pk}`);
    sock.send(['AUTH', sign(agent, { kind: 22242, content: '', tags: [['relay', sock.url], ['challenge', sock.challenge], tag] })]);
    expect((await sock.next((f) => f[0] === 'OK')).slice(2)).toEqual([true, '']);
    const t = now() - 3600;
    const posts = Array.from({ length: 40 }, (_, i) => sign(agent, { content: `${i} ${'x'.repeat(500)}`, created_at: t + i, tags: [['p', owner.pk]] }));
    const profile = sign(agent, { kind: 0, content: '{"name":"self-run"}', created_at: t + 100, tags: [tag] });
    for (const e of [...posts, profile]) expect((await sock.publish(e)).slice(2)).toEqual([true, '']);
    sock.close();
    const outside = await connect(`/r/${owner.pk}`);
    for (const to of [owner.pk, owner.pk, agent.pk]) await wrapTo(outside, to);
    outside.close();
    const before = await totalsOf(shardStub(env, owner.pk));
    expect(before.events).toBe(44);
    expect(before.bytes - before.inbox).toBeGreaterThan(60000 * INBOX_SHARE); // the agent's alone would overflow the inbox share
    expect(before.inbox).toBeGreaterThan(0);
    const name = await backUp(owner.pk);
    // The owner's own events are judged the same by the rule: only the others' sides are carried.
    const counted = (await linesOf(owner.pk, name)).filter((l) => Array.isArray(l) && l[0] === 'COUNTED');
    expect(counted.length).toBeGreaterThan(0);

    const fresh = await freshShard('answers_shard');
    expect(await restoreInto(fresh, owner.pk, name, evict)).toEqual({ accepted: 44, duplicate: 0, refused: {} });
    const restored = env.RELAY_SHARD.get(fresh.id); // a stub of the object that restarted
    expect(await totalsOf(restored)).toEqual(before);
    expect(await restored.isAgentOwner(agent.pk, owner.pk)).toBe(true);
  });

  it('an owner’s import of a COUNTED line refuses it: its events are judged as they come', async () => {
    const owner = keys();
    const line = JSON.stringify(['COUNTED', [['a'.repeat(64), 0, null]]]);
    expect(await importInto(owner, `${line}\n`)).toEqual({ status: 200, json: { accepted: 0, duplicate: 0, refused: { [NOT_RESTORED_COUNTED]: 1 } } });
    expect(NOT_RESTORED_COUNTED).toBe(
      "restricted: the sides events were counted in come back only with a restore of this deployment's backups (POST /api/relay/restore), not in an import: an import's events are judged as they come",
    );
  });
});

describe('a restore of the public shard puts back what each owner’s agents and bridges hold of its reserve', () => {
  it('stored_totals.owners equal before and after a restore into a fresh shard', async () => {
    const owner = keys();
    const provider = keys();
    const pub = shardStub(env, null);
    expect(await pub.provisionAgent(provider.pk, owner.pk, 'provisioned')).toBe(true);
    const res = await pub.fetch(new Request('http://relay.test/', { headers: shardUpgradeHeaders(null, undefined, { owner: owner.pk, component: provider.pk }) }));
    const ws = res.webSocket!;
    ws.accept();
    const sock = new TestSocket(ws, 'ws://relay.test/');
    sock.send(['AUTH']);
    await sock.next((f) => f[0] === 'AUTH').then((f) => sock.frames.unshift(f));
    await sock.auth(provider);
    for (let i = 0; i < 3; i++) expect((await sock.publish(sign(provider, { content: `announcement ${i}`, tags: [['p', owner.pk]] }))).slice(2)).toEqual([true, '']);
    sock.close();
    const before = await totalsOf(pub);
    expect(before.owners).toBeGreaterThan(0);
    const name = await backUp(null);

    const fresh = await freshShard();
    const report = await restoreInto(fresh, null, name);
    expect(report.refused).toEqual({});
    expect(await totalsOf(fresh)).toEqual(before);
  });
});

describe('backups carry the retention rules', () => {
  const rules: RetentionRule[] = [{ kinds: [25802, 25803, 25805], days: 30 }];

  it('an owner’s rules come back with a restore into a fresh shard (NIP-11 then advertises them); a shard with rules of its own keeps them, none included', async () => {
    const owner = keys();
    const set = (body: unknown) => opsCall(owner, 'PATCH', '/api/relay/retention', JSON.stringify(body));
    expect((await set({ rules })).status).toBe(200);
    const name = await backUp(owner.pk);
    expect(await linesOf(owner.pk, name)).toEqual([['RETENTION', rules]]);

    const fresh = await freshShard();
    expect(await restoreInto(fresh, owner.pk, name)).toEqual({ accepted: 1, duplicate: 0, refused: {} });
    expect(await rulesOf(fresh)).toEqual(rules);
    const nip11 = await fresh.fetch(new Request(`http://relay.test/r/${owner.pk}`, { headers: { Accept: 'application/nostr+json', [SHARD_HEADER]: owner.pk } }));
    expect(((await nip11.json()) as { retention?: unknown }).retention).toEqual([{ kinds: [25802, 25803, 25805], time: 30 * 86_400 }]);
    expect(await restoreInto(fresh, owner.pk, name)).toEqual({ accepted: 0, duplicate: 1, refused: {} });

    // The owner changed its rules since, or cleared them (to restore what they removed): its choice stays.
    const own: RetentionRule[] = [{ kinds: [1], days: 7 }];
    const kept = "restricted: this shard has retention rules of its own (PATCH /api/relay/retention): the backup's are not restored over them";
    for (const now of [own, []]) {
      expect((await set({ rules: now })).status).toBe(200);
      expect(await opsCall(owner, 'POST', '/api/relay/restore', JSON.stringify({ backup: name })).then((r) => r.json())).toEqual({ accepted: 0, duplicate: 0, refused: { [kept]: 1 } });
      expect(await rulesOf(shardStub(env, owner.pk))).toEqual(now);
    }
  });

  it('the operator’s rules of the public shard come back with a restore into a fresh shard', async () => {
    const pub = shardStub(env, null);
    await pub.setRetentionRules(rules);
    const name = await backUp(null);
    const fresh = await freshShard();
    expect((await restoreInto(fresh, null, name)).refused).toEqual({});
    expect(await rulesOf(fresh)).toEqual(rules);
    await pub.setRetentionRules([]);
  });

  it('an owner’s import of a RETENTION line refuses it, and the shard’s rules stay', async () => {
    const owner = keys();
    expect(await importInto(owner, `${JSON.stringify(['RETENTION', rules])}\n`)).toEqual({ status: 200, json: { accepted: 0, duplicate: 0, refused: { [NOT_RESTORED_RETENTION]: 1 } } });
    expect(NOT_RESTORED_RETENTION).toBe(
      "restricted: retention rules come back only with a restore of this deployment's backups (POST /api/relay/restore), not in an import: set them with PATCH /api/relay/retention",
    );
    expect(await rulesOf(shardStub(env, owner.pk))).toEqual([]);
  });
});
