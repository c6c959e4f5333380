// Retention rules: PATCH /api/relay/retention (and an operator's PATCH /api/admin/shards/<shard>/retention,
// for the public shard too), NIP-11 `retention`, and the alarm removing events
// past their rule at the boundary (one second under is kept, one over is removed) in bounded batches.
import { env, runInDurableObject, SELF } from 'cloudflare:test';
import { describe, expect, it } from 'vitest';
import { eventJson } from '../../src/shared/event.js';
import { WRAP_LOOKBACK_SECONDS } from '../../src/shared/nip59.js';
import { shardStub } from '../../workers/common/shards.js';
import { RETENTION_INTERVAL_SECONDS, RetentionRules } from '../../workers/relay-do/retention.js';
import { EventStore } from '../../workers/relay-do/store.js';
import { BASE, connect, keys, now, sign, type Keys } from './helpers.js';
import { NOT_AN_ADMIN } from '../../workers/api/admin.js';
import { TEST_ADMIN, TEST_ADMIN_SK } from './test-keys.js';
import { exportOf, importInto, jsonl, opsCall } from './relay-ops-helpers.js';

const DAY = 86_400;

const patch = async (k: Keys, body: unknown) => {
  const res = await opsCall(k, 'PATCH', '/api/relay/retention', typeof body === 'string' ? body : JSON.stringify(body));
  return { status: res.status, json: await res.json() };
};

const nip11 = async (k: Keys) =>
  (await (await SELF.fetch(`${BASE}/r/${k.pk}`, { headers: { Accept: 'application/nostr+json' } })).json()) as { retention?: unknown };

describe('PATCH /api/relay/retention', () => {
  it('answers the rules in force and advertises them in NIP-11 (time in seconds); [] clears them', async () => {
    const owner = keys();
    const rules = [
      { kinds: [1], days: 365 },
      { kinds: [25802, 25803, 25805], days: 30 },
    ];
    expect(await patch(owner, { rules })).toEqual({ status: 200, json: { rules } });
    expect((await nip11(owner)).retention).toEqual([
      { kinds: [1], time: 365 * DAY },
      { kinds: [25802, 25803, 25805], time: 30 * DAY },
    ]);
    expect(await patch(owner, { rules: [] })).toEqual({ status: 200, json: { rules: [] } });
    expect((await nip11(owner)).retention).toBeUndefined();
  });

  it.each([
    ['days 0', { rules: [{ kinds: [1], days: 0 }] }, 'rules.0.days'],
    ['no kinds', { rules: [{ kinds: [], days: 3 }] }, 'rules.0.kinds'],
    ['kind out of range', { rules: [{ kinds: [70000], days: 3 }] }, 'rules.0.kinds.0'],
    ['unknown field', { rules: [{ kinds: [1], days: 3, hours: 2 }] }, 'rules.0'],
    ['no rules', {}, 'rules'],
  ])('422 for %s', async (_n, body, path) => {
    const r = await patch(keys(), body);
    expect(r.status).toBe(422);
    expect((r.json as { error: string }).error).toBe('invalid retention');
    expect((r.json as { issues: Array<{ path: string }> }).issues.map((i) => i.path)).toContain(path);
  });

  it('422 for a body that is not JSON', async () => {
    expect(await patch(keys(), '{nope')).toEqual({ status: 422, json: { error: 'body is not JSON', issues: [] } });
  });
});

describe('retention by the alarm', () => {
  it('keeps an event exactly `days` old, removes one a second older, leaves other kinds', async () => {
    const owner = keys();
    // The shard's clock at the manual alarm below; the alarm the PATCH sets (real clock) removes nothing.
    const t = now() + 100;
    const atCutoff = sign(owner, { content: 'at cutoff', created_at: t - 30 * DAY });
    const over = sign(owner, { content: 'one second over', created_at: t - 30 * DAY - 1 });
    const otherKind = sign(owner, { kind: 7, content: '+', created_at: t - 40 * DAY });
    expect((await importInto(owner, jsonl([atCutoff, over, otherKind]))).json).toEqual({ accepted: 3, duplicate: 0, refused: {} });
    await patch(owner, { rules: [{ kinds: [1], days: 30 }] });
    const next = await runInDurableObject(shardStub(env, owner.pk), async (shard, state) => {
      shard.clock = () => t * 1000;
      await shard.alarm();
      return state.storage.getAlarm();
    });
    expect((await exportOf(owner)).map((e) => e.id).sort()).toEqual([atCutoff.id, otherKind.id].sort());
    expect(next).toBe((t + RETENTION_INTERVAL_SECONDS) * 1000);
  });

  it('refuses a write already past its rule: exactly `days` old is accepted, a second older refused', async () => {
    const owner = keys();
    await patch(owner, { rules: [{ kinds: [1], days: 30 }] });
    const t = now();
    await runInDurableObject(shardStub(env, owner.pk), (shard) => {
      shard.clock = () => t * 1000;
    });
    const atCutoff = sign(owner, { content: 'at cutoff', created_at: t - 30 * DAY });
    const over = sign(owner, { content: 'over', created_at: t - 30 * DAY - 1 });
    const otherKind = sign(owner, { kind: 7, content: '+', created_at: t - 40 * DAY });
    expect((await importInto(owner, jsonl([atCutoff, over, otherKind]))).json).toEqual({
      accepted: 2,
      duplicate: 0,
      refused: { 'invalid: this shard keeps kind 1 for 30 days (NIP-11 retention)': 1 },
    });
  });

  it(`a gift wrap (kind 1059, dated up to two days back by NIP-59) gets ${WRAP_LOOKBACK_SECONDS} s more: under a 1-day rule one dated 30 h back is accepted and kept, one past 1 day + ${WRAP_LOOKBACK_SECONDS} s refused and removed`, async () => {
    const owner = keys();
    const shard = shardStub(env, owner.pk);
    const t = now();
    await runInDurableObject(shard, (s) => {
      s.clock = () => t * 1000;
    });
    const wrap = (created_at: number) => sign(keys(), { kind: 1059, content: 'sealed', tags: [['p', owner.pk]], created_at });
    const recent = wrap(t - 30 * 3600);
    const atCutoff = wrap(t - DAY - WRAP_LOOKBACK_SECONDS);
    const over = wrap(t - DAY - WRAP_LOOKBACK_SECONDS - 1);
    const note = sign(owner, { content: 'a note is not a wrap', created_at: t - 30 * 3600 });
    expect(await patch(owner, { rules: [{ kinds: [1, 1059], days: 1 }] })).toMatchObject({ status: 200 });
    expect((await importInto(owner, jsonl([recent, atCutoff, over, note]))).json).toEqual({
      accepted: 2,
      duplicate: 0,
      refused: {
        [`invalid: this shard keeps kind 1059 for 1 days (NIP-11 retention), plus ${WRAP_LOOKBACK_SECONDS} s as NIP-59 dates it up to two days back`]: 1,
        'invalid: this shard keeps kind 1 for 1 days (NIP-11 retention)': 1,
      },
    });
    // Stored before the rule, the one past it is removed by the alarm; the others stay.
    await patch(owner, { rules: [] });
    expect((await importInto(owner, jsonl([over]))).json).toEqual({ accepted: 1, duplicate: 0, refused: {} });
    await patch(owner, { rules: [{ kinds: [1059], days: 1 }] });
    await runInDurableObject(shard, (s) => s.alarm());
    expect((await exportOf(owner)).map((e) => e.id).sort()).toEqual([recent.id, atCutoff.id].sort());
  });

  it('removes at most one batch per run and comes back at once while more remain', async () => {
    const owner = keys();
    const t = now();
    const old = Array.from({ length: 5 }, (_, i) => sign(owner, { content: `old ${i}`, created_at: t - 2 * DAY - i }));
    const runs = await runInDurableObject(shardStub(env, owner.pk), (_shard, state) => {
      const store = new EventStore(state.storage.sql);
      const rules = new RetentionRules(state.storage.sql);
      for (const e of old) store.insert(e, eventJson(e), state.storage);
      rules.set([{ kinds: [1], days: 1 }]);
      const out: Array<[number | undefined, number]> = [];
      for (let i = 0; i < 3; i++) out.push([rules.apply(store, t, 2), store.size()]);
      rules.set([]);
      out.push([rules.apply(store, t, 2), store.size()]);
      return out;
    });
    expect(runs).toEqual([
      [t + 1, 3],
      [t + 1, 1],
      [t + RETENTION_INTERVAL_SECONDS, 0],
      [undefined, 0],
    ]);
  });
});

describe('PATCH /api/admin/shards/<shard>/retention (operators, any shard)', () => {
  const admin: Keys = { sk: TEST_ADMIN_SK, pk: TEST_ADMIN };
  const adminPatch = async (k: Keys, shard: string, body: unknown) => {
    const res = await opsCall(k, 'PATCH', `/api/admin/shards/${shard}/retention`, JSON.stringify(body));
    return { status: res.status, json: await res.json() };
  };

  it('the public shard (no owner to set them): the rules in force, in its NIP-11, applied by its alarm; owners 403, unknown shards 404, bad rules 422', async () => {
    const ws = await connect('/');
    const old = sign(keys(), { content: 'an old public note', created_at: now() - 3 * DAY });
    const fresh = sign(keys(), { content: 'a fresh public note' });
    for (const e of [old, fresh]) expect((await ws.publish(e))[2]).toBe(true);
    const rules = [{ kinds: [1], days: 1 }];
    expect(await adminPatch(admin, 'public', { rules })).toEqual({ status: 200, json: { rules } });
    const info = (await (await SELF.fetch(`${BASE}/`, { headers: { Accept: 'application/nostr+json' } })).json()) as { retention?: unknown };
    expect(info.retention).toEqual([{ kinds: [1], time: DAY }]);
    await runInDurableObject(shardStub(env, null), (s) => s.alarm());
    expect((await ws.req('kept', { ids: [old.id, fresh.id] })).events.map((e) => e.id)).toEqual([fresh.id]);
    expect(await adminPatch(admin, 'public', { rules: [] })).toEqual({ status: 200, json: { rules: [] } });

    const owner = keys();
    expect(await adminPatch(owner, 'public', { rules })).toEqual({ status: 403, json: { error: NOT_AN_ADMIN } });
    expect(await adminPatch(admin, 'owner:x', { rules })).toEqual({ status: 404, json: { error: 'no such shard: "public" or an owner’s 64-hex pubkey or npub' } });
    expect((await adminPatch(admin, owner.pk, { rules: [{ kinds: [1], days: 0 }] })).status).toBe(422);
    // An owner's shard by its key: what the owner's own PATCH would set.
    expect(await adminPatch(admin, owner.pk, { rules })).toEqual({ status: 200, json: { rules } });
    expect((await nip11(owner)).retention).toEqual([{ kinds: [1], time: DAY }]);
    ws.close();
  });
});
