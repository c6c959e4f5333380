// What self-made NIP-OA proofs (an agent's AUTH or kind 0 naming its owner) may make a shard store:
// anyone can make keys and attest one to another, so each AUTH of a fresh pair would otherwise add a
// row for good. An agent key keeps one owner per source (the newest proof), an owner shard keeps only
// proofs naming its own owner, an AUTH proof not renewed for AUTH_PROOF_TTL lapses and is removed,
// and a shard keeps at most MAX_AUTH_PROOFS of them, the one used longest ago going first (used: its
// last AUTH, or at most hourly an event of its agent it vouched for; that use does not extend the TTL).
import { env, runInDurableObject } from 'cloudflare:test';
import { describe, expect, it } from 'vitest';
import { signAttestation } from '../../src/shared/nip-oa.js';
import { shardStub } from '../../workers/common/shards.js';
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
