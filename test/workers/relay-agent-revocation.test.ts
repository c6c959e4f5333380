// An owner revokes an agent key it attested itself (NIP-OA: an `auth` tag in the agent's AUTH or
// kind 0) through the management API, as it deletes a hosted agent: DELETE /api/agents/<key> is
// 200 {revoked: <key>} for any key that is not one of its hosted agents (204 is a hosted agent
// deleted), whether its shard holds a proof of it now or
// not (the key's holder can have its proofs forgotten first: a kind 0 without the tag), and the
// revocation sticks: an attestation signature is permanent, so the key is burned for this owner
// (on its shard and on the public shard): re-presenting the attestation, in an AUTH or a kind 0,
// old or newly signed, no longer makes the key the owner's agent. A revocation touches only the
// caller's own attestations, and an owner revokes at most MAX_REVOKED_PER_OWNER keys (409 past it).
import { env, runInDurableObject } from 'cloudflare:test';
import { describe, expect, it } from 'vitest';
import { encrypt, getConversationKey } from '../../src/shared/nip44.js';
import { signAttestation } from '../../src/shared/nip-oa.js';
import { shardStub } from '../../workers/common/shards.js';
import { MAX_REVOKED_PER_OWNER } from '../../workers/relay-do/ownership.js';
import { api } from './api-helpers.js';
import { connect, keys, sign, type Keys, type TestSocket } from './helpers.js';
import { TEST_ADMIN_SK } from './test-keys.js';

const SHARD_RESTRICTED = "restricted: this shard accepts events from its owner and the owner's agents, or addressed to them";
const NO_PROOF = 'restricted: no authenticated proof that this agent belongs to this owner (NIP-OA)';

async function addOwner(): Promise<Keys> {
  const k = keys();
  expect(await api(TEST_ADMIN_SK, 'POST', '/api/admin/owners', { pubkey: k.pk })).toMatchObject({ status: 201 });
  return k;
}

/** A socket on `path` authenticated as `agent` with an attestation by `owner` (signed anew unless `tag` is given); the AUTH's answer. */
async function authedAgent(path: string, agent: Keys, owner: Keys, tag = signAttestation(owner.sk, agent.pk, 'kind=22242')): Promise<{ s: TestSocket; ok: unknown[] }> {
  const s = await connect(path);
  const e = sign(agent, { kind: 22242, content: '', tags: [['relay', s.url], ['challenge', s.challenge], tag] });
  s.send(['AUTH', e]);
  return { s, ok: (await s.next((f) => f[0] === 'OK' && f[1] === e.id)).slice(2) };
}

/** A new owner and an agent key authenticated on the owner's shard with the owner's attestation (`tag`). */
async function attestedOnOwnerShard(): Promise<{ owner: Keys; agent: Keys; path: string; tag: ReturnType<typeof signAttestation>; s: TestSocket }> {
  const owner = await addOwner();
  const agent = keys();
  const path = `/r/${owner.pk}`;
  const tag = signAttestation(owner.sk, agent.pk, 'kind=22242');
  const { s, ok } = await authedAgent(path, agent, owner, tag);
  expect(ok).toEqual([true, '']);
  return { owner, agent, path, tag, s };
}

/** A telemetry frame (NIP-AO) of `agent` to `owner`. */
const telemetry = (agent: Keys, owner: string) =>
  sign(agent, {
    kind: 24200,
    content: encrypt(JSON.stringify({ seq: 0, timestamp: new Date().toISOString(), kind: 'turn_started', payload: {} }), getConversationKey(agent.sk, owner)),
    tags: [['p', owner], ['agent', agent.pk], ['frame', 'telemetry']],
  });

const published = async (s: TestSocket, e: Parameters<TestSocket['publish']>[0]): Promise<[boolean, string]> => {
  const ok = await s.publish(e);
  return [ok[2], ok[3]];
};

/** The shard's ownership records of `agent` (null: the public shard). */
const recordsOf = (shardOwner: string | null, agent: string) =>
  runInDurableObject(shardStub(env, shardOwner), (_i, state) =>
    state.storage.sql.exec<{ owner: string; source: string }>('SELECT owner, source FROM agent_owners WHERE agent = ? ORDER BY source', agent).toArray(),
  );

describe('the owner revokes an agent it attested itself (NIP-OA)', () => {
  it('DELETE /api/agents/<key> → 200 {revoked}; the agent is a stranger on the owner’s shard from then on, and its attestation no longer restores it', async () => {
    const { owner, agent, path, tag, s } = await attestedOnOwnerShard();
    // Its profile attests it too (the other self-made source).
    const profile = sign(agent, { kind: 0, content: '{}', tags: [signAttestation(owner.sk, agent.pk, 'kind=0')] });
    expect(await published(s, profile)).toEqual([true, '']);
    expect(await recordsOf(owner.pk, agent.pk)).toEqual([
      { owner: owner.pk, source: 'auth' },
      { owner: owner.pk, source: 'kind0' },
    ]);
    // Its rights: a note of its own, a telemetry frame to the owner.
    expect(await published(s, sign(agent, { kind: 1, content: 'as the owner’s agent' }))).toEqual([true, '']);
    expect(await published(s, telemetry(agent, owner.pk))).toEqual([true, '']);

    expect(await api(owner.sk, 'DELETE', `/api/agents/${agent.pk}`)).toEqual({ status: 200, json: { revoked: agent.pk } });
    expect(await recordsOf(owner.pk, agent.pk)).toEqual([]);

    // The same socket: judged as a stranger's (a note addressed to nobody here, a frame without proof).
    expect(await published(s, sign(agent, { kind: 1, content: 'still here?' }))).toEqual([false, SHARD_RESTRICTED]);
    expect(await published(s, telemetry(agent, owner.pk))).toEqual([false, NO_PROOF]);
    // A note addressed to the owner is a stranger's letter: the inbox takes it, as from anyone.
    expect(await published(s, sign(agent, { kind: 1, content: 'a letter', tags: [['p', owner.pk]] }))).toEqual([true, '']);
    // Re-authenticating with the same attestation (the AUTH itself succeeds), or with a new one, restores nothing.
    for (const again of [tag, signAttestation(owner.sk, agent.pk, 'kind=22242')]) {
      const next = await authedAgent(path, agent, owner, again);
      expect(next.ok).toEqual([true, '']);
      expect(await published(next.s, sign(agent, { kind: 1, content: 'back?' }))).toEqual([false, SHARD_RESTRICTED]);
      expect(await published(next.s, telemetry(agent, owner.pk))).toEqual([false, NO_PROOF]);
      next.s.close();
    }
    // Nor does a new profile carrying an attestation: it is a stranger's kind 0 now.
    const newer = sign(agent, { kind: 0, content: '{"name":"back"}', created_at: profile.created_at + 1, tags: [signAttestation(owner.sk, agent.pk, 'kind=0')] });
    expect(await published(s, newer)).toEqual([false, SHARD_RESTRICTED]);
    expect(await recordsOf(owner.pk, agent.pk)).toEqual([]);
    // Revoking it again: 200 (it stays revoked; a retry after a failure reaches the public shard too).
    expect(await api(owner.sk, 'DELETE', `/api/agents/${agent.pk}`)).toEqual({ status: 200, json: { revoked: agent.pk } });
    s.close();
  });

  it('the revocation holds on the public shard too: the agent’s frames to its owner there are refused', async () => {
    const owner = await addOwner();
    const agent = keys();
    const own = await authedAgent(`/r/${owner.pk}`, agent, owner);
    const pub = await authedAgent('/', agent, owner);
    expect(await published(pub.s, telemetry(agent, owner.pk))).toEqual([true, '']);
    expect(await api(owner.sk, 'DELETE', `/api/agents/${agent.pk}`)).toEqual({ status: 200, json: { revoked: agent.pk } });
    expect(await published(pub.s, telemetry(agent, owner.pk))).toEqual([false, NO_PROOF]);
    const again = await authedAgent('/', agent, owner);
    expect(again.ok).toEqual([true, '']);
    expect(await published(again.s, telemetry(agent, owner.pk))).toEqual([false, NO_PROOF]);
    expect(await recordsOf(null, agent.pk)).toEqual([]);
    // An agent that had never authenticated on the public shard before its revocation: burned there too.
    const later = keys();
    const ownLater = await authedAgent(`/r/${owner.pk}`, later, owner);
    expect(await api(owner.sk, 'DELETE', `/api/agents/${later.pk}`)).toEqual({ status: 200, json: { revoked: later.pk } });
    const first = await authedAgent('/', later, owner);
    expect(first.ok).toEqual([true, '']);
    expect(await published(first.s, telemetry(later, owner.pk))).toEqual([false, NO_PROOF]);
    for (const s of [own.s, pub.s, again.s, ownLater.s, first.s]) s.close();
  });

  it('the key’s holder cannot dodge the revocation by having its proofs forgotten first (a tag-less kind 0): DELETE is 200 {revoked} and the attestation no longer restores it', async () => {
    const { owner, agent, path, tag, s } = await attestedOnOwnerShard();
    expect(await published(s, sign(agent, { kind: 1, content: 'as the owner’s agent' }))).toEqual([true, '']);
    // The holder publishes a profile without the attestation: the shard forgets its proofs…
    expect(await published(s, sign(agent, { kind: 0, content: '{"name":"plain"}' }))).toEqual([true, '']);
    expect(await recordsOf(owner.pk, agent.pk)).toEqual([]);
    // …and the owner's revocation is taken all the same.
    expect(await api(owner.sk, 'DELETE', `/api/agents/${agent.pk}`)).toEqual({ status: 200, json: { revoked: agent.pk } });
    const again = await authedAgent(path, agent, owner, tag);
    expect(again.ok).toEqual([true, '']);
    expect(await published(again.s, sign(agent, { kind: 1, content: 'back?' }))).toEqual([false, SHARD_RESTRICTED]);
    expect(await recordsOf(owner.pk, agent.pk)).toEqual([]);
    // On the public shard too.
    const pub = await authedAgent('/', agent, owner, tag);
    expect(await published(pub.s, telemetry(agent, owner.pk))).toEqual([false, NO_PROOF]);
    for (const socket of [s, again.s, pub.s]) socket.close();
  });

  it('any key may be revoked, held now or not (never attested, or attested to another owner): 200 {revoked}, and it touches only the caller’s attestations', async () => {
    const [owner, other] = [await addOwner(), await addOwner()];
    // A key the owner attested but whose proof the shard never held (the 30-day lapse, pushed out past the cap, never used here).
    const unused = keys();
    expect(await api(owner.sk, 'DELETE', `/api/agents/${unused.pk}`)).toEqual({ status: 200, json: { revoked: unused.pk } });
    const late = await authedAgent(`/r/${owner.pk}`, unused, owner);
    expect(late.ok).toEqual([true, '']);
    expect(await published(late.s, sign(unused, { kind: 1, content: 'first time here' }))).toEqual([false, SHARD_RESTRICTED]);
    // Another owner's revocation of the owner's agent burns it for the other owner only.
    const agent = keys();
    const { s } = await authedAgent(`/r/${owner.pk}`, agent, owner);
    expect(await api(other.sk, 'DELETE', `/api/agents/${agent.pk}`)).toEqual({ status: 200, json: { revoked: agent.pk } });
    expect(await published(s, sign(agent, { kind: 1, content: 'still the owner’s' }))).toEqual([true, '']);
    const pub = await authedAgent('/', agent, owner);
    expect(await published(pub.s, telemetry(agent, owner.pk))).toEqual([true, '']);
    // What is not a key: 400.
    expect(await api(owner.sk, 'DELETE', '/api/agents/npub1nope')).toEqual({ status: 400, json: { error: 'not an agent key: expected a 64-hex pubkey or an npub' } });
    for (const socket of [late.s, s, pub.s]) socket.close();
  });

  it(`an owner revokes at most MAX_REVOKED_PER_OWNER (${MAX_REVOKED_PER_OWNER}) keys on a shard: past it 409, nothing revoked`, async () => {
    expect(MAX_REVOKED_PER_OWNER).toBe(10_000);
    const owner = await addOwner();
    // The owner's shard takes as many revocations as the API would make.
    const revokedKey = (n: number) => `b${n.toString(16).padStart(63, '0')}`;
    await runInDurableObject(shardStub(env, owner.pk), async (instance) => {
      for (let n = 0; n < MAX_REVOKED_PER_OWNER; n++) expect(await instance.revokeAttestedAgent(revokedKey(n), owner.pk)).toBe(true);
    });
    const agent = keys();
    const { s } = await authedAgent(`/r/${owner.pk}`, agent, owner);
    expect(await api(owner.sk, 'DELETE', `/api/agents/${agent.pk}`)).toEqual({
      status: 409,
      json: { error: 'the owner has revoked 10000 agent keys, the most this deployment keeps per owner: this key is not revoked (an attestation with a created_at<T clause lapses by itself at T)' },
    });
    expect(await published(s, sign(agent, { kind: 1, content: 'still the owner’s' }))).toEqual([true, '']);
    // A key revoked already is still 200 (a retry), and other owners are not held by this one's rows.
    expect(await api(owner.sk, 'DELETE', `/api/agents/${revokedKey(0)}`)).toEqual({ status: 200, json: { revoked: revokedKey(0) } });
    const other = await addOwner();
    expect(await api(other.sk, 'DELETE', `/api/agents/${agent.pk}`)).toEqual({ status: 200, json: { revoked: agent.pk } });
    s.close();
  });
});
