// What self-made NIP-OA proofs (an agent's AUTH or kind 0 naming its owner) may make a shard store:
// anyone can make keys and attest one to another, so each AUTH of a fresh pair would otherwise add a
// row for good. An agent key keeps one owner per source (the newest proof), an owner shard keeps only
// proofs naming its own owner, an AUTH proof not renewed for AUTH_PROOF_TTL lapses and is removed,
// and a shard keeps at most MAX_AUTH_PROOFS of them, the one used longest ago going first (used: its
// last AUTH, or at most hourly an event of its agent it vouched for; that use does not extend the TTL).
// A proof learnt from a kind 0 lasts as long as that profile is stored: when the profile leaves the
// shard (expiry, deletion, retention, a request to vanish, a newer version) the proof goes with it.
import { env, runDurableObjectAlarm, runInDurableObject } from 'cloudflare:test';
import { describe, expect, it } from 'vitest';
import { signAttestation } from '../../src/shared/nip-oa.js';
import { shardStub } from '../../workers/common/shards.js';
import { eventJson } from '../../src/shared/event.js';
import { EventStore } from '../../workers/relay-do/store.js';
import { AUTH_PROOF_TTL, MAX_AUTH_PROOFS, OwnershipRegistry, RENEW_ON_USE_SECONDS } from '../../workers/relay-do/ownership.js';
import { connect, keys, now, sign, type Keys, type TestSocket } from './helpers.js';

type Row = { agent: string; owner: string; source: string };

const rowsOf = (shardOwner: string | null, agent: string): Promise<Row[]> =>
  runInDurableObject(shardStub(env, shardOwner), (_i, state) =>
    state.storage.sql.exec<Row>('SELECT agent, owner, source FROM agent_owners WHERE agent = ? ORDER BY owner', agent).toArray(),
  );

/** Authenticates `agent` on `s` with an attestation by `owner`; the relay's answer. */
async function authAs(s: TestSocket, agent: Keys, owner: Keys, conditions = 'kind=22242') {
  const e = sign(agent, { kind: 22242, content: '', tags: [['relay', s.url], ['challenge', s.challenge], signAttestation(owner.sk, agent.pk, conditions)] });
  s.send(['AUTH', e]);
  return s.next((f) => f[0] === 'OK' && f[1] === e.id);
}

describe('self-made ownership proofs are bounded', () => {
  it('an owner shard keeps only proofs naming its owner (the AUTH still succeeds)', async () => {
    const [shardOwner, agent, foreign] = [keys(), keys(), keys()];
    const s = await connect(`/r/${shardOwner.pk}`);
    await s.next((f) => f[0] === 'AUTH');
    const answer = await authAs(s, agent, foreign);
    expect(answer.slice(2)).toEqual([true, '']);
    expect(await rowsOf(shardOwner.pk, agent.pk)).toEqual([]);
    expect((await authAs(s, agent, shardOwner)).slice(2)).toEqual([true, '']);
    expect(await rowsOf(shardOwner.pk, agent.pk)).toEqual([{ agent: agent.pk, owner: shardOwner.pk, source: 'auth' }]);
    s.close();
  });

  it('an agent key keeps one owner per source on the public shard: the newest AUTH, the newest profile', async () => {
    const agent = keys();
    const owners = [keys(), keys(), keys(), keys(), keys()];
    const s = await connect('/');
    await s.next((f) => f[0] === 'AUTH');
    for (const owner of owners) expect((await authAs(s, agent, owner)).slice(2)).toEqual([true, '']);
    const last = owners[owners.length - 1]!;
    expect(await rowsOf(null, agent.pk)).toEqual([{ agent: agent.pk, owner: last.pk, source: 'auth' }]);

    const t = now() - 10;
    for (const [n, owner] of owners.slice(0, 2).entries()) {
      const profile = sign(agent, { kind: 0, content: '{}', created_at: t + n, tags: [signAttestation(owner.sk, agent.pk, 'kind=0')] });
      expect(await s.publish(profile)).toEqual(['OK', profile.id, true, '']);
    }
    const rows = await rowsOf(null, agent.pk);
    expect(rows.filter((r) => r.source === 'kind0')).toEqual([{ agent: agent.pk, owner: owners[1]!.pk, source: 'kind0' }]);
    expect(rows.filter((r) => r.source === 'auth')).toEqual([{ agent: agent.pk, owner: last.pk, source: 'auth' }]);
    s.close();
  });

  it(`an AUTH proof lapses ${AUTH_PROOF_TTL} s after it was last made, and new proofs remove the stale ones`, async () => {
    const stub = env.RELAY_SHARD.get(env.RELAY_SHARD.newUniqueId());
    const seen = await runInDurableObject(stub, (_i, state) => {
      const registry = new OwnershipRegistry(state.storage.sql, () => null);
      const [owner, t0] = ['0'.repeat(64), 1_800_000_000];
      const agents = Array.from({ length: 150 }, (_, n) => n.toString(16).padStart(64, 'a'));
      for (const agent of agents) registry.record(agent, owner, 'auth', t0);
      registry.record(agents[0]!, owner, 'provisioned', t0);
      const count = () => state.storage.sql.exec<{ n: number }>("SELECT count(*) AS n FROM agent_owners WHERE source = 'auth'").one().n;
      const before = [registry.isAgentOwner(agents[1]!, owner, { now: t0 + AUTH_PROOF_TTL }), registry.isAgentOwner(agents[1]!, owner, { now: t0 + AUTH_PROOF_TTL + 1 })];
      const late = t0 + AUTH_PROOF_TTL + 1;
      registry.record('f'.repeat(64), owner, 'auth', late); // removes a batch of 100 stale proofs
      const afterOne = count();
      registry.record('e'.repeat(64), owner, 'auth', late);
      return { before, afterOne, afterTwo: count(), provisioned: registry.isAgentOwner(agents[0]!, owner, { now: late }) };
    });
    expect(seen).toEqual({ before: [true, false], afterOne: 150 - 100 + 1, afterTwo: 2, provisioned: true });
  });

  it(`a shard keeps at most MAX_AUTH_PROOFS (${MAX_AUTH_PROOFS}) AUTH proofs: past it the one used longest ago goes; an event of its agent counts as a use, hourly`, async () => {
    expect([MAX_AUTH_PROOFS, RENEW_ON_USE_SECONDS]).toEqual([100_000, 3_600]);
    const stub = env.RELAY_SHARD.get(env.RELAY_SHARD.newUniqueId());
    const seen = await runInDurableObject(stub, (_i, state) => {
      const registry = new OwnershipRegistry(state.storage.sql, () => null, 5);
      const [owner, t0] = ['0'.repeat(64), 1_800_000_000];
      const agent = (n: number) => n.toString(16).padStart(64, 'a');
      const proofs = () => state.storage.sql.exec<{ agent: string }>("SELECT agent FROM agent_owners WHERE source = 'auth' ORDER BY agent").toArray().map((r) => r.agent);
      for (let n = 0; n < 5; n++) registry.record(agent(n), owner, 'auth', t0 + n);
      registry.record(agent(0), owner, 'provisioned', t0);
      registry.record(agent(4), owner, 'auth', t0 + 10); // a renewal adds nothing
      const full = proofs();
      // Agent 1 is at work: its own event (a telemetry frame) marks its proof used, once an hour at most.
      const late = t0 + RENEW_ON_USE_SECONDS + 100;
      const used = registry.isAgentOwner(agent(1), owner, { now: late, eventCreatedAt: late });
      registry.record(agent(5), owner, 'auth', late + 1);
      registry.record(agent(6), owner, 'auth', late + 2);
      const afterTwo = proofs();
      // A revoked proof frees its place: the count stays exact.
      registry.revoke(agent(5), owner);
      registry.record(agent(7), owner, 'auth', late + 3);
      return { full, used, afterTwo, afterRevoke: proofs(), count: registry.authProofs(), provisioned: registry.isAgentOwner(agent(0), owner, { now: late }) };
    });
    const agent = (n: number) => n.toString(16).padStart(64, 'a');
    expect(seen.full).toEqual([0, 1, 2, 3, 4].map(agent));
    expect(seen.used).toBe(true);
    // The two new ones pushed out 0 and 2 (used longest ago), not 1 (used since).
    expect(seen.afterTwo).toEqual([1, 3, 4, 5, 6].map(agent));
    expect(seen.afterRevoke).toEqual([1, 3, 4, 6, 7].map(agent));
    expect(seen.count).toBe(5);
    // edgestr's own provisioning records are never pushed out.
    expect(seen.provisioned).toBe(true);
  });
});

/** A profile of `agent` attested by `owner` (conditions kind=0), with `tags` more. */
const attestedProfile = (agent: Keys, owner: Keys, createdAt: number, tags: string[][] = []) =>
  sign(agent, { kind: 0, content: '{}', created_at: createdAt, tags: [signAttestation(owner.sk, agent.pk, 'kind=0'), ...tags] });

describe('a proof learnt from a profile lasts as long as the profile', () => {
  it('a profile that expires takes its proof with it when the alarm purges it; one deleted (NIP-09) too', async () => {
    const s = await connect('/');
    const [agent, owner] = [keys(), keys()];
    const expiresAt = now() + 2;
    const profile = attestedProfile(agent, owner, now(), [['expiration', String(expiresAt)]]);
    expect(await s.publish(profile)).toEqual(['OK', profile.id, true, '']);
    expect(await rowsOf(null, agent.pk)).toEqual([{ agent: agent.pk, owner: owner.pk, source: 'kind0' }]);
    await new Promise((r) => setTimeout(r, (expiresAt + 1) * 1000 - Date.now()));
    await runDurableObjectAlarm(shardStub(env, null)); // false when the alarm already ran on its own
    expect((await s.req('gone', { ids: [profile.id] })).events).toEqual([]);
    expect(await rowsOf(null, agent.pk)).toEqual([]);

    const [deleter, itsOwner] = [keys(), keys()];
    const deleted = attestedProfile(deleter, itsOwner, now());
    expect(await s.publish(deleted)).toEqual(['OK', deleted.id, true, '']);
    expect(await rowsOf(null, deleter.pk)).toEqual([{ agent: deleter.pk, owner: itsOwner.pk, source: 'kind0' }]);
    const deletion = sign(deleter, { kind: 5, tags: [['e', deleted.id]] });
    expect(await s.publish(deletion)).toEqual(['OK', deletion.id, true, '']);
    expect(await rowsOf(null, deleter.pk)).toEqual([]);
    s.close();
  });

  it('a newer profile carrying the attestation keeps the proof, dated by it; an expiring one replaced by a lasting one keeps it past the expiry', async () => {
    const s = await connect('/');
    const [agent, owner] = [keys(), keys()];
    const t = now() - 10;
    const first = attestedProfile(agent, owner, t, [['expiration', String(now() + 2)]]);
    const second = attestedProfile(agent, owner, t + 1);
    for (const p of [first, second]) expect(await s.publish(p)).toEqual(['OK', p.id, true, '']);
    const dated = () =>
      runInDurableObject(shardStub(env, null), (_i, state) =>
        state.storage.sql.exec<{ owner: string; recorded_at: number }>("SELECT owner, recorded_at FROM agent_owners WHERE agent = ? AND source = 'kind0'", agent.pk).toArray(),
      );
    expect(await dated()).toEqual([{ owner: owner.pk, recorded_at: t + 1 }]);
    await new Promise((r) => setTimeout(r, 3_000));
    await runDurableObjectAlarm(shardStub(env, null));
    expect(await dated()).toEqual([{ owner: owner.pk, recorded_at: t + 1 }]);
    s.close();
  });

  it('a shard made before the rule drops, when it wakes, the profile proofs whose profile is gone, and only those', async () => {
    const stub = env.RELAY_SHARD.get(env.RELAY_SHARD.newUniqueId());
    const [kept, orphan, owner] = [keys(), keys(), keys()];
    const profile = attestedProfile(kept, owner, now());
    const left = await runInDurableObject(stub, (_i, state) => {
      const sql = state.storage.sql;
      const store = new EventStore(sql);
      const registry = new OwnershipRegistry(sql, () => null);
      expect(store.insert(profile, eventJson(profile), state.storage)).toEqual({ status: 'stored' });
      registry.record(kept.pk, owner.pk, 'kind0', profile.created_at, 'kind=0');
      registry.record(kept.pk, owner.pk, 'auth', profile.created_at, 'kind=22242');
      registry.record(orphan.pk, owner.pk, 'auth', profile.created_at, 'kind=22242');
      // As an older shard left it: no rule, and the proof of a profile it purged.
      sql.exec('DROP TRIGGER kind0_proofs_leave_with_profile');
      registry.record(orphan.pk, owner.pk, 'kind0', profile.created_at, 'kind=0');
      new OwnershipRegistry(sql, () => null);
      return sql.exec<Row>('SELECT agent, owner, source FROM agent_owners ORDER BY agent, source').toArray();
    });
    const rows = [
      { agent: kept.pk, owner: owner.pk, source: 'auth' },
      { agent: kept.pk, owner: owner.pk, source: 'kind0' },
      { agent: orphan.pk, owner: owner.pk, source: 'auth' },
    ];
    expect(left).toEqual(rows.sort((a, b) => (a.agent === b.agent ? a.source.localeCompare(b.source) : a.agent < b.agent ? -1 : 1)));
  });
});
