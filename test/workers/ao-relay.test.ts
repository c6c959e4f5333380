// NIP-AO on the relay: the authorization matrix, frame checks, freshness, rate limit,
// non-persistence, and ownership records surviving a restart.
import { env, runInDurableObject } from 'cloudflare:test';
import { describe, expect, it, vi } from 'vitest';
import { encrypt, getConversationKey } from '../../src/shared/nip44.js';
import { schnorr } from '@noble/curves/secp256k1.js';
import { bytesToHex } from '../../src/shared/hex.js';
import { attestationDigest, signAttestation } from '../../src/shared/nip-oa.js';
import { RelayShard } from '../../workers/relay-do/shard.js';
import { SHARD_HEADER, shardName } from '../../workers/common/shards.js';
import { EDGE_HEADER, edgeStub } from '../../workers/common/edges.js';
import { BASE, connect, eventFrame, keys, now, Sentinel, sign, TestSocket, type Keys } from './helpers.js';

const shardOf = (owner: string) => env.RELAY_SHARD.get(env.RELAY_SHARD.idFromName(shardName(owner)));

function frame(
  sender: Keys,
  recipient: string,
  agent: string,
  kind: string,
  opts: { created_at?: number; content?: string; extraTags?: string[][] } = {},
) {
  const content = opts.content ?? encrypt(JSON.stringify({ seq: 0, timestamp: new Date().toISOString(), kind: 'turn_started', payload: {} }), getConversationKey(sender.sk, recipient));
  return sign(sender, {
    kind: 24200,
    created_at: opts.created_at,
    content,
    tags: [['p', recipient], ['agent', agent], ['frame', kind], ...(opts.extraTags ?? [])],
  });
}

/** Authenticates the agent with a NIP-OA tag for `owner` on the owner's shard. */
async function attestViaAuth(s: TestSocket, agent: Keys, owner: Keys) {
  const e = sign(agent, {
    kind: 22242,
    content: '',
    tags: [['relay', s.url], ['challenge', s.challenge], signAttestation(owner.sk, agent.pk, 'kind=22242')],
  });
  s.send(['AUTH', e]);
  expect(await s.next((f) => f[0] === 'OK' && f[1] === e.id)).toEqual(['OK', e.id, true, '']);
}

type Actor = 'owner' | 'agent' | 'third';
type Dir = 'telemetry' | 'control';
type State = 'no AUTH' | 'AUTH without NIP-OA' | 'AUTH with NIP-OA' | 'provisioned';

const AUTH_REQ_PUB = 'auth-required: kind 24200 frames are accepted only from a connection authenticated as their signer';
const RESTRICTED_PUB = 'restricted: no authenticated proof that this agent belongs to this owner (NIP-OA)';
const AUTH_REQ_SUB = 'auth-required: kind 24200 frames are only delivered to their authenticated recipient';
const RESTRICTED_SUB = 'restricted: a kind 24200 subscription must carry #p of a pubkey this connection authenticated as';
const SHARD_RESTRICTED = "restricted: this shard accepts events from its owner and the owner's agents, or addressed to them";
const FORGED_TELEMETRY = 'invalid: a telemetry frame must be signed by the agent named in its "agent" tag';

/** Expected answer to a publish: [accepted, message]. */
function expectedPublish(actor: Actor, dir: Dir, state: State): [boolean, string] {
  if (dir === 'telemetry' && actor === 'owner') return [false, FORGED_TELEMETRY];
  if (state === 'no AUTH') return [false, AUTH_REQ_PUB];
  const proven = state === 'AUTH with NIP-OA' || state === 'provisioned';
  // A control frame p-tags the agent: with no proof, the owner shard's own write policy refuses it
  // before NIP-AO is consulted, unless the owner signed it.
  if (dir === 'control' && !proven && actor !== 'owner') return [false, SHARD_RESTRICTED];
  const legit = (dir === 'telemetry' && actor === 'agent') || (dir === 'control' && actor === 'owner');
  return proven && legit ? [true, ''] : [false, RESTRICTED_PUB];
}

/** Expected result of a subscription: CLOSED message, or whether a legitimate frame is received. */
function expectedSubscribe(actor: Actor, dir: Dir, state: State): { closed: string } | { receives: boolean } {
  if (state === 'no AUTH') return { closed: AUTH_REQ_SUB };
  const recipientRole: Actor = dir === 'telemetry' ? 'owner' : 'agent';
  if (actor !== recipientRole) return { closed: RESTRICTED_SUB };
  return { receives: state === 'AUTH with NIP-OA' || state === 'provisioned' };
}

const actors: Actor[] = ['owner', 'agent', 'third'];
const dirs: Dir[] = ['telemetry', 'control'];
const states: State[] = ['no AUTH', 'AUTH without NIP-OA', 'AUTH with NIP-OA', 'provisioned'];

interface World {
  owner: Keys;
  agent: Keys;
  third: Keys;
  path: string;
}

async function setUp(state: State): Promise<World> {
  const w = { owner: keys(), agent: keys(), third: keys(), path: '' };
  w.path = `/r/${w.owner.pk}`;
  if (state === 'provisioned' || state === 'no AUTH') await shardOf(w.owner.pk).provisionAgent(w.agent.pk, w.owner.pk);
  if (state === 'AUTH with NIP-OA') await attestViaAuth(await connect(w.path), w.agent, w.owner);
  return w;
}

/** The frame an actor publishes in a direction (what that actor would send for it). */
function frameBy(w: World, actor: Actor, dir: Dir) {
  const k = w[actor];
  if (dir === 'telemetry') return frame(k, w.owner.pk, actor === 'third' ? k.pk : w.agent.pk, 'telemetry');
  return frame(k, w.agent.pk, w.agent.pk, 'control');
}

describe('NIP-AO authorization matrix', () => {
  for (const actor of actors) {
    for (const dir of dirs) {
      for (const state of states) {
        const want = expectedPublish(actor, dir, state);
        it(`publish ${dir} as ${actor}, ${state} → ${want[0] ? 'OK' : want[1]}`, async () => {
          const w = await setUp(state);
          const s = await connect(w.path);
          if (state !== 'no AUTH') await s.auth(w[actor]);
          const e = frameBy(w, actor, dir);
          expect(await s.publish(e)).toEqual(['OK', e.id, ...want]);
        });

        const sub = expectedSubscribe(actor, dir, state);
        it(`subscribe to ${dir} as ${actor}, ${state} → ${'closed' in sub ? sub.closed : sub.receives ? 'receives' : 'receives nothing'}`, async () => {
          const w = await setUp(state);
          const s = await connect(w.path);
          if (state !== 'no AUTH') await s.auth(w[actor]);
          const recipient = dir === 'telemetry' ? w.owner.pk : w.agent.pk;
          const filter = { kinds: [24200], '#p': [recipient], since: now() };
          const res = await s.req('ao', filter);
          if ('closed' in sub) {
            expect(res.closed).toBe(sub.closed);
            return;
          }
          expect(res).toEqual({ events: [] });
          // The legitimate sender (agent for telemetry, owner for control) publishes, authenticated.
          const senderRole: Actor = dir === 'telemetry' ? 'agent' : 'owner';
          const p = await connect(w.path);
          await p.auth(w[senderRole]);
          const e = frameBy(w, senderRole, dir);
          const ok = await p.publish(e);
          expect(ok[2]).toBe(sub.receives);
          if (sub.receives) expect(await s.next((f) => f[0] === 'EVENT')).toEqual(['EVENT', 'ao', e]);
          else expect(await s.silence(eventFrame(e.id), await Sentinel.arm(s, p, w.owner))).toBe(true);
        });
      }
    }
  }

  it('a third party authenticated as itself cannot watch the owner even with a wide filter', async () => {
    const w = await setUp('provisioned');
    const spy = await connect(w.path);
    await spy.auth(w.third);
    await spy.req('wide', { '#p': [w.owner.pk] }); // no kinds: accepted, but frames are never delivered
    await spy.req('own', { kinds: [24200], '#p': [w.third.pk], since: now() });
    const a = await connect(w.path);
    await a.auth(w.agent);
    const e = frameBy(w, 'agent', 'telemetry');
    expect((await a.publish(e))[2]).toBe(true);
    expect(await spy.silence(eventFrame(e.id), await Sentinel.arm(spy, a, w.owner))).toBe(true);
  });

  it('a subscription without kinds still gets frames only through #p of an authenticated pubkey', async () => {
    const w = await setUp('provisioned');
    const owner = await connect(w.path);
    await owner.auth(w.owner);
    await owner.req('noPs', { authors: [w.agent.pk] });
    await owner.req('withP', { authors: [w.agent.pk], '#p': [w.owner.pk] });
    const a = await connect(w.path);
    await a.auth(w.agent);
    const e = frameBy(w, 'agent', 'telemetry');
    await a.publish(e);
    expect(await owner.next((f) => f[0] === 'EVENT')).toEqual(['EVENT', 'withP', e]);
    expect(await owner.silence((f) => f[0] === 'EVENT' && f[1] === 'noPs', await Sentinel.arm(owner, a, w.owner))).toBe(true);
  });
});

describe('NIP-AO frame checks', () => {
  async function agentSocket() {
    const w = await setUp('provisioned');
    const s = await connect(w.path);
    await s.auth(w.agent);
    return { w, s };
  }

  it.each([
    ['two p tags', (w: World) => frame(w.agent, w.owner.pk, w.agent.pk, 'telemetry', { extraTags: [['p', w.owner.pk]] }), 'invalid: kind 24200 needs exactly one "p" tag (found 2)'],
    ['missing agent tag', (w: World) => sign(w.agent, { kind: 24200, content: 'x', tags: [['p', w.owner.pk], ['frame', 'telemetry']] }), 'invalid: kind 24200 needs exactly one "agent" tag (found 0)'],
    ['two frame tags', (w: World) => frame(w.agent, w.owner.pk, w.agent.pk, 'telemetry', { extraTags: [['frame', 'control']] }), 'invalid: kind 24200 needs exactly one "frame" tag (found 2)'],
    ['agent tag ≠ pubkey', (w: World) => frame(w.agent, w.owner.pk, w.third.pk, 'telemetry'), FORGED_TELEMETRY],
    ['content not NIP-44', (w: World) => frame(w.agent, w.owner.pk, w.agent.pk, 'telemetry', { content: 'plain text' }), 'invalid: kind 24200 content must be NIP-44 v2 ciphertext'],
    // 5 s past the window: the relay checks a moment after the frame is made (one hop later at K = 4),
    // and a second may turn on the way, which made a 301 s case pass now and then.
    ['305 s old', (w: World) => frame(w.agent, w.owner.pk, w.agent.pk, 'telemetry', { created_at: now() - 305 }), 'invalid: kind 24200 created_at must be within ±300 seconds of now'],
    ['305 s ahead', (w: World) => frame(w.agent, w.owner.pk, w.agent.pk, 'telemetry', { created_at: now() + 305 }), 'invalid: kind 24200 created_at must be within ±300 seconds of now'],
  ])('%s → %s', async (_name, make, message) => {
    const { w, s } = await agentSocket();
    const e = make(w);
    expect(await s.publish(e)).toEqual(['OK', e.id, false, message]);
  });

  it('accepts frames at the edges of the freshness window (±298 s)', async () => {
    const { w, s } = await agentSocket();
    for (const dt of [-298, 298]) {
      const e = frame(w.agent, w.owner.pk, w.agent.pk, 'telemetry', { created_at: now() + dt });
      expect(await s.publish(e)).toEqual(['OK', e.id, true, '']);
    }
  });

  it('answers OK to an unknown frame value and drops it', async () => {
    const { w, s } = await agentSocket();
    const owner = await connect(w.path);
    await owner.auth(w.owner);
    await owner.req('ao', { kinds: [24200], '#p': [w.owner.pk], since: now() });
    const e = frame(w.agent, w.owner.pk, w.agent.pk, 'debug');
    expect(await s.publish(e)).toEqual(['OK', e.id, true, '']);
    expect(await owner.silence(eventFrame(e.id), await Sentinel.arm(owner, s, w.owner))).toBe(true);
  });

  it('refuses history queries for kind 24200', async () => {
    const w = await setUp('provisioned');
    const s = await connect(w.path);
    await s.auth(w.owner);
    const msg = 'restricted: kind 24200 frames are live only: subscribe with since = now, without until or ids';
    expect((await s.req('a', { kinds: [24200], '#p': [w.owner.pk], since: now() - 3600 })).closed).toBe(msg);
    expect((await s.req('b', { kinds: [24200], '#p': [w.owner.pk], until: now() })).closed).toBe(msg);
    expect((await s.req('c', { kinds: [24200], '#p': [w.owner.pk], ids: ['0'.repeat(64)] })).closed).toBe(msg);
    expect((await s.req('d', { kinds: [24200], '#p': [w.owner.pk] })).closed).toBeUndefined();
  });

  it('limits telemetry to 100 frames in any 1-second window per agent, exactly at the window edge', async () => {
    // The shard's clock is frozen (it runs in this isolate and reads the same Date): the answer
    // does not depend on how fast this machine is.
    vi.useFakeTimers({ toFake: ['Date'] });
    try {
      vi.setSystemTime(Date.now());
      const { w, s } = await agentSocket();
      /** Sends n frames at once and counts the accepted ones and the distinct refusals. */
      async function burst(n: number) {
        const frames = Array.from({ length: n }, () => frame(w.agent, w.owner.pk, w.agent.pk, 'telemetry'));
        for (const e of frames) s.send(['EVENT', e]);
        const answers = [];
        for (const e of frames) answers.push(await s.next((f) => f[0] === 'OK' && f[1] === e.id));
        return { accepted: answers.filter((a) => a[2] === true).length, refusals: [...new Set(answers.filter((a) => a[2] !== true).map((a) => a[3]))] };
      }
      const refusal = 'rate-limited: telemetry is limited to 100 frames per second per agent';
      expect(await burst(101)).toEqual({ accepted: 100, refusals: [refusal] });
      vi.setSystemTime(Date.now() + 999); // the 100 frames are still inside the window
      expect(await burst(1)).toEqual({ accepted: 0, refusals: [refusal] });
      vi.setSystemTime(Date.now() + 1); // exactly one window later they have left it
      expect(await burst(101)).toEqual({ accepted: 100, refusals: [refusal] });
    } finally {
      vi.useRealTimers();
    }
  });

  it('does not rate-limit control frames', async () => {
    const w = await setUp('provisioned');
    const s = await connect(w.path);
    await s.auth(w.owner);
    const frames = Array.from({ length: 150 }, () => frame(w.owner, w.agent.pk, w.agent.pk, 'control'));
    for (const e of frames) s.send(['EVENT', e]);
    for (const e of frames) expect((await s.next((f) => f[0] === 'OK' && f[1] === e.id))[2]).toBe(true);
  });

  it('never stores a frame: storage holds none after frames flow, and a REQ without since returns nothing', async () => {
    const { w, s } = await agentSocket();
    for (let i = 0; i < 5; i++) expect((await s.publish(frame(w.agent, w.owner.pk, w.agent.pk, 'telemetry')))[2]).toBe(true);
    const stored = await runInDurableObject(shardOf(w.owner.pk), (_i, state) =>
      state.storage.sql.exec('SELECT count(*) AS n FROM events WHERE kind = 24200').one().n,
    );
    expect(stored).toBe(0);
    const owner = await connect(w.path);
    await owner.auth(w.owner);
    expect(await owner.req('h', { kinds: [24200], '#p': [w.owner.pk] })).toEqual({ events: [] });
  });
});

describe('NIP-AO ownership records', () => {
  it('survive a shard restart (a fresh instance over the same storage)', async () => {
    const w = await setUp('AUTH with NIP-OA');
    const proven = await runInDurableObject(shardOf(w.owner.pk), (_i, state) => new RelayShard(state, env).isAgentOwner(w.agent.pk, w.owner.pk));
    expect(proven).toBe(true);
  });

  it('a kind 0 without the tag revokes only proofs dated at or before it: a stranger replaying an older one cancels no AUTH proof; a newer one does', async () => {
    const w = { owner: keys(), agent: keys() };
    const path = `/r/${w.owner.pk}`;
    const before = sign(w.agent, { kind: 0, content: '{"name":"before the AUTH"}', created_at: now() - 100 });
    const s = await connect(path);
    await attestViaAuth(s, w.agent, w.owner);
    const stranger = await connect(path); // not authenticated: the profile is accepted as signed by the owner's agent
    expect(await stranger.publish(before)).toEqual(['OK', before.id, true, '']);
    const still = frame(w.agent, w.owner.pk, w.agent.pk, 'telemetry');
    expect(await s.publish(still)).toEqual(['OK', still.id, true, '']);
    const after = sign(w.agent, { kind: 0, content: '{"name":"after the AUTH"}', created_at: now() + 1 });
    expect(await s.publish(after)).toEqual(['OK', after.id, true, '']);
    const revoked = frame(w.agent, w.owner.pk, w.agent.pk, 'telemetry');
    expect(await s.publish(revoked)).toEqual(['OK', revoked.id, false, RESTRICTED_PUB]);
  });

  it('a kind 0 proof lasts as long as its profile: the agent deleting the tagged profile (NIP-09) withdraws it', async () => {
    const w = { owner: keys(), agent: keys() };
    const path = `/r/${w.owner.pk}`;
    const s = await connect(path);
    await s.auth(w.agent);
    const tagged = sign(w.agent, { kind: 0, content: '{}', tags: [signAttestation(w.owner.sk, w.agent.pk, 'kind=0')], created_at: now() - 10 });
    expect((await s.publish(tagged))[2]).toBe(true);
    const before = frame(w.agent, w.owner.pk, w.agent.pk, 'telemetry');
    expect(await s.publish(before)).toEqual(['OK', before.id, true, '']);
    expect((await s.publish(sign(w.agent, { kind: 5, tags: [['e', tagged.id]] })))[2]).toBe(true);
    const after = frame(w.agent, w.owner.pk, w.agent.pk, 'telemetry');
    expect(await s.publish(after)).toEqual(['OK', after.id, false, RESTRICTED_PUB]);
  });

  it('a kind 0 with a NIP-OA tag proves ownership; a kind 0 without it, newer than the tagged one, revokes', async () => {
    const w = { owner: keys(), agent: keys() };
    const path = `/r/${w.owner.pk}`;
    const s = await connect(path);
    await s.auth(w.agent);
    const profile = sign(w.agent, { kind: 0, content: '{}', tags: [signAttestation(w.owner.sk, w.agent.pk, 'kind=0')], created_at: now() - 10 });
    expect((await s.publish(profile))[2]).toBe(true);
    expect((await s.publish(frame(w.agent, w.owner.pk, w.agent.pk, 'telemetry')))[2]).toBe(true);
    expect((await s.publish(sign(w.agent, { kind: 0, content: '{}', created_at: now() - 5 })))[2]).toBe(true);
    const after = frame(w.agent, w.owner.pk, w.agent.pk, 'telemetry');
    expect(await s.publish(after)).toEqual(['OK', after.id, false, RESTRICTED_PUB]);
  });

  it('an AUTH whose proof the primary could not record (at an edge) is refused and authenticates nothing; sent again, it does', async () => {
    const w = { owner: keys(), agent: keys() };
    // A socket on an edge of the owner's shard (as the router places one with RELAY_EDGES), in both test projects.
    const edge = edgeStub(env, w.owner.pk, 1);
    const res = await edge.fetch(`${BASE}/r/${w.owner.pk}`, { headers: { Upgrade: 'websocket', [SHARD_HEADER]: w.owner.pk, [EDGE_HEADER]: '1' } });
    res.webSocket!.accept();
    const s = new TestSocket(res.webSocket!, `ws://relay.test/r/${w.owner.pk}`);
    s.send(['AUTH']);
    await s.next((f) => f[0] === 'AUTH');
    // The edge's next call to its primary fails on the way (as an RPC whose connection is lost).
    await runInDurableObject(edge, (instance) => {
      type Link = { primary: () => { edgeBatch(shard: string, ops: unknown[]): Promise<unknown[]> } };
      const link = (instance as unknown as { edge(): Link }).edge();
      const primary = link.primary;
      link.primary = () => {
        link.primary = primary;
        return { edgeBatch: () => Promise.reject(new Error('connection lost')) };
      };
    });
    const auth = () => sign(w.agent, { kind: 22242, content: '', tags: [['relay', s.url], ['challenge', s.challenge], signAttestation(w.owner.sk, w.agent.pk, 'kind=22242')] });
    const failed = auth();
    s.send(['AUTH', failed]);
    expect(await s.next((f) => f[0] === 'OK' && f[1] === failed.id)).toEqual(['OK', failed.id, false, 'error: the shard could not be reached (connection lost); try again']);
    // Refused: the connection is not authenticated as the agent, and the primary holds no proof.
    const early = frame(w.agent, w.owner.pk, w.agent.pk, 'telemetry');
    expect(await s.publish(early)).toEqual(['OK', early.id, false, AUTH_REQ_PUB]);
    expect(await shardOf(w.owner.pk).isAgentOwner(w.agent.pk, w.owner.pk)).toBe(false);
    // Sent again, it is recorded and authenticates.
    const again = auth();
    s.send(['AUTH', again]);
    expect(await s.next((f) => f[0] === 'OK' && f[1] === again.id)).toEqual(['OK', again.id, true, '']);
    const later = frame(w.agent, w.owner.pk, w.agent.pk, 'telemetry');
    expect(await s.publish(later)).toEqual(['OK', later.id, true, '']);
    expect(await shardOf(w.owner.pk).isAgentOwner(w.agent.pk, w.owner.pk)).toBe(true);
  });

  it('the owner can revoke through the internal API', async () => {
    const w = await setUp('provisioned');
    await shardOf(w.owner.pk).revokeAgent(w.agent.pk, w.owner.pk);
    const s = await connect(w.path);
    await s.auth(w.agent);
    const e = frame(w.agent, w.owner.pk, w.agent.pk, 'telemetry');
    expect(await s.publish(e)).toEqual(['OK', e.id, false, RESTRICTED_PUB]);
  });

  /** An `auth` tag signed without any validation, to build malformed ones. */
  const rawTag = (signer: Keys, owner: string, agent: string, conditions: string) => [
    'auth',
    owner,
    conditions,
    bytesToHex(schnorr.sign(attestationDigest(agent, conditions), signer.sk)),
  ];

  it.each([
    ['two auth tags', (o: Keys, a: Keys) => [rawTag(o, o.pk, a.pk, ''), rawTag(o, o.pk, a.pk, 'kind=22242')]],
    ['3 elements', (o: Keys, a: Keys) => [rawTag(o, o.pk, a.pk, '').slice(0, 3)]],
    ['5 elements', (o: Keys, a: Keys) => [[...rawTag(o, o.pk, a.pk, ''), 'x']]],
    ['trailing &', (o: Keys, a: Keys) => [rawTag(o, o.pk, a.pk, 'kind=22242&')]],
    ['leading zero', (o: Keys, a: Keys) => [rawTag(o, o.pk, a.pk, 'kind=022242')]],
    ['self-attestation', (_o: Keys, a: Keys) => [rawTag(a, a.pk, a.pk, '')]],
    ['clause not holding', (o: Keys, a: Keys) => [rawTag(o, o.pk, a.pk, 'kind=1')]],
    ['signed by someone else', (o: Keys, a: Keys) => [rawTag(keys(), o.pk, a.pk, '')]],
  ])('an invalid NIP-OA tag in AUTH (%s) proves nothing', async (_name, tagsFor) => {
    const owner = keys();
    const agent = keys();
    const s = await connect(`/r/${owner.pk}`);
    const e = sign(agent, { kind: 22242, content: '', tags: [['relay', s.url], ['challenge', s.challenge], ...tagsFor(owner, agent)] });
    s.send(['AUTH', e]);
    expect(await s.next((f) => f[0] === 'OK')).toEqual(['OK', e.id, true, '']); // the AUTH itself is fine
    const f = frame(agent, owner.pk, agent.pk, 'telemetry');
    expect(await s.publish(f)).toEqual(['OK', f.id, false, RESTRICTED_PUB]);
  });

  it('the same AUTH with a valid tag does prove ownership (control for the table above)', async () => {
    const owner = keys();
    const agent = keys();
    const s = await connect(`/r/${owner.pk}`);
    const e = sign(agent, { kind: 22242, content: '', tags: [['relay', s.url], ['challenge', s.challenge], rawTag(owner, owner.pk, agent.pk, 'kind=22242')] });
    s.send(['AUTH', e]);
    await s.next((f) => f[0] === 'OK');
    const f = frame(agent, owner.pk, agent.pk, 'telemetry');
    expect(await s.publish(f)).toEqual(['OK', f.id, true, '']);
  });
});
