// NIP-OA conditions are checked at use, not only when the attestation is recorded: a recorded
// agent→owner proof with `created_at<T` lapses at T (relay clock) and never covers an event dated
// at or after T; `created_at>T` never covers an event dated at or before T. The shard's clock is
// injected (frozen, then moved past T) so nothing depends on the machine's speed.
import { env, runInDurableObject } from 'cloudflare:test';
import { describe, expect, it } from 'vitest';
import { encrypt, getConversationKey } from '../../src/shared/nip44.js';
import { signAttestation } from '../../src/shared/nip-oa.js';
import { RelayShard } from '../../workers/relay-do/shard.js';
import { AUTH_PROOF_TTL } from '../../workers/relay-do/ownership.js';
import { shardName } from '../../workers/common/shards.js';
import { connect, keys, sign, type Keys, type TestSocket } from './helpers.js';

const shardOf = (owner: string) => env.RELAY_SHARD.get(env.RELAY_SHARD.idFromName(shardName(owner)));
const SHARD_RESTRICTED = "restricted: this shard accepts events from its owner and the owner's agents, or addressed to them";
const NO_PROOF = 'restricted: no authenticated proof that this agent belongs to this owner (NIP-OA)';

const setClock = (owner: string, seconds: number) =>
  runInDurableObject(shardOf(owner), (instance: RelayShard) => {
    instance.clock = () => seconds * 1000;
  });

function telemetry(agent: Keys, owner: string, createdAt: number) {
  const content = encrypt(JSON.stringify({ seq: 0, timestamp: new Date(createdAt * 1000).toISOString(), kind: 'turn_started', payload: {} }), getConversationKey(agent.sk, owner));
  return sign(agent, { kind: 24200, created_at: createdAt, content, tags: [['p', owner], ['agent', agent.pk], ['frame', 'telemetry']] });
}

/** The agent authenticates on its owner's shard with an AUTH event carrying `conditions`. */
async function attested(owner: Keys, agent: Keys, conditions: string, at: number): Promise<TestSocket> {
  const s = await connect(`/r/${owner.pk}`);
  await setClock(owner.pk, at);
  const e = sign(agent, { kind: 22242, content: '', created_at: at, tags: [['relay', s.url], ['challenge', s.challenge], signAttestation(owner.sk, agent.pk, conditions)] });
  s.send(['AUTH', e]);
  expect(await s.next((f) => f[1] === e.id)).toEqual(['OK', e.id, true, '']);
  return s;
}

describe('NIP-OA conditions at use', () => {
  it('created_at<T: before T the agent writes and sends frames; from T on both are refused, also backdated', async () => {
    const owner = keys();
    const agent = keys();
    const stranger = keys();
    const t0 = Math.floor(Date.now() / 1000);
    const T = t0 + 100;
    const s = await attested(owner, agent, `kind=22242&created_at<${T}`, t0);
    const watcher = await connect(`/r/${owner.pk}`);
    await watcher.auth(owner);
    expect(await watcher.req('ao', { kinds: [24200], '#p': [owner.pk], since: t0 })).toEqual({ events: [] });

    const note = sign(agent, { content: 'before T', created_at: t0 });
    expect(await s.publish(note)).toEqual(['OK', note.id, true, '']);
    const frame = telemetry(agent, owner.pk, t0);
    expect(await s.publish(frame)).toEqual(['OK', frame.id, true, '']);
    expect(await watcher.next((f) => f[0] === 'EVENT')).toEqual(['EVENT', 'ao', frame]);
    const toAgent = sign(stranger, { tags: [['p', agent.pk]], content: 'inbox', created_at: t0 });
    expect((await s.publish(toAgent))[2]).toBe(true);

    await setClock(owner.pk, T);
    const backdated = sign(agent, { content: 'after T, dated before', created_at: t0 + 1 });
    expect(await s.publish(backdated)).toEqual(['OK', backdated.id, false, SHARD_RESTRICTED]);
    const late = telemetry(agent, owner.pk, T);
    expect(await s.publish(late)).toEqual(['OK', late.id, false, NO_PROOF]);
    const lateInbox = sign(stranger, { tags: [['p', agent.pk]], content: 'inbox', created_at: T });
    expect(await s.publish(lateInbox)).toEqual(['OK', lateInbox.id, false, SHARD_RESTRICTED]);
    // The owner's control frames to the agent lapse too (they need the same proof).
    const control = sign(owner, {
      kind: 24200,
      created_at: T,
      content: encrypt('{}', getConversationKey(owner.sk, agent.pk)),
      tags: [['p', agent.pk], ['agent', agent.pk], ['frame', 'control']],
    });
    expect(await watcher.publish(control)).toEqual(['OK', control.id, false, NO_PROOF]);
  });

  it('created_at<T: an event dated at T is not covered even while the relay clock is before T', async () => {
    const owner = keys();
    const agent = keys();
    const t0 = Math.floor(Date.now() / 1000);
    const T = t0 + 60;
    const s = await attested(owner, agent, `created_at<${T}`, t0);
    const future = sign(agent, { content: 'dated T', created_at: T });
    expect(await s.publish(future)).toEqual(['OK', future.id, false, SHARD_RESTRICTED]);
    const fine = sign(agent, { content: 'dated T-1', created_at: T - 1 });
    expect(await s.publish(fine)).toEqual(['OK', fine.id, true, '']);
  });

  it('created_at>T: an event dated at or before T is not covered', async () => {
    const owner = keys();
    const agent = keys();
    const t0 = Math.floor(Date.now() / 1000);
    const T = t0 - 100;
    const s = await attested(owner, agent, `created_at>${T}`, t0);
    const old = sign(agent, { content: 'dated T', created_at: T });
    expect(await s.publish(old)).toEqual(['OK', old.id, false, SHARD_RESTRICTED]);
    const fine = sign(agent, { content: 'dated now', created_at: t0 });
    expect(await s.publish(fine)).toEqual(['OK', fine.id, true, '']);
  });

  it('a kind 0 attestation with created_at<T lapses at T as well', async () => {
    const owner = keys();
    const agent = keys();
    const t0 = Math.floor(Date.now() / 1000);
    const T = t0 + 100;
    const s = await connect(`/r/${owner.pk}`);
    await setClock(owner.pk, t0);
    const profile = sign(agent, { kind: 0, content: '{}', created_at: t0, tags: [signAttestation(owner.sk, agent.pk, `kind=0&created_at<${T}`)] });
    expect(await s.publish(profile)).toEqual(['OK', profile.id, true, '']);
    const note = sign(agent, { content: 'before T', created_at: t0 });
    expect(await s.publish(note)).toEqual(['OK', note.id, true, '']);
    await setClock(owner.pk, T + 1);
    const late = sign(agent, { content: 'after T', created_at: T + 1 });
    expect(await s.publish(late)).toEqual(['OK', late.id, false, SHARD_RESTRICTED]);
    // Nor can the agent introduce itself again with the expired tag on a backdated profile.
    const again = sign(agent, { kind: 0, content: '{"v":2}', created_at: t0 + 1, tags: [signAttestation(owner.sk, agent.pk, `kind=0&created_at<${T}`)] });
    expect(await s.publish(again)).toEqual(['OK', again.id, false, SHARD_RESTRICTED]);
  });

  it('the conditions are stored with the record: a fresh instance over the same storage still applies them', async () => {
    const owner = keys();
    const agent = keys();
    const t0 = Math.floor(Date.now() / 1000);
    const T = t0 + 100;
    await attested(owner, agent, `created_at<${T}`, t0);
    const [before, after] = await runInDurableObject(shardOf(owner.pk), (_i, state) => {
      const fresh = new RelayShard(state, env);
      fresh.clock = () => (T - 1) * 1000;
      const b = fresh.isAgentOwner(agent.pk, owner.pk);
      fresh.clock = () => T * 1000;
      return [b, fresh.isAgentOwner(agent.pk, owner.pk)];
    });
    expect([before, after]).toEqual([true, false]);
  });

  it('provisioned agents do not lapse; an unconditional AUTH attestation lasts AUTH_PROOF_TTL unless renewed', async () => {
    const owner = keys();
    const agent = keys();
    const hosted = keys();
    const t0 = Math.floor(Date.now() / 1000);
    const s = await attested(owner, agent, '', t0);
    await shardOf(owner.pk).provisionAgent(hosted.pk, owner.pk);
    const write = async (k: Keys, at: number) => {
      await setClock(owner.pk, at);
      const note = sign(k, { content: `at ${at}`, created_at: at });
      return (await s.publish(note)).slice(2);
    };
    expect(await write(agent, t0 + AUTH_PROOF_TTL)).toEqual([true, '']);
    expect(await write(agent, t0 + AUTH_PROOF_TTL + 1)).toEqual([false, SHARD_RESTRICTED]);
    expect(await write(hosted, t0 + 10 * 365 * 86400)).toEqual([true, '']);
  });
});
