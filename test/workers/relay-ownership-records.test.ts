// What self-made NIP-OA proofs (an agent's AUTH or kind 0 naming its owner) may make a shard store:
// anyone can make keys and attest one to another, so each AUTH of a fresh pair would otherwise add a
// row for good. An agent key keeps one owner per source (the newest proof), an owner shard keeps only
// proofs naming its own owner, and an AUTH proof not renewed for AUTH_PROOF_TTL lapses and is removed.
import { env, runInDurableObject } from 'cloudflare:test';
import { describe, expect, it } from 'vitest';
import { signAttestation } from '../../src/shared/nip-oa.js';
import { shardStub } from '../../workers/common/shards.js';
import { AUTH_PROOF_TTL, OwnershipRegistry } from '../../workers/relay-do/ownership.js';
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
});
