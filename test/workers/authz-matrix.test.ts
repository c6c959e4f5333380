// The authorization matrix (issue 7, systematic work): who may publish, subscribe live, read history
// and COUNT each kind class of ../shared/DESIGN.md's "Kind policy of a shard" table, on an owner shard and on
// the public shard, authenticated (NIP-42) or not; and who may manage an agent through /api/agents.
//
// Subjects: the shard's owner (TEST_OWNER, the one owner EDGESTR_OWNERS allows in these tests), an
// agent of that owner (on the relay: attested by NIP-OA, its AUTH event carrying the owner's `auth`
// tag; in the API: provisioned the way POST /api/agents does), another tenant and a stranger. The
// test configuration allows a single owner, so the other tenant is a key of its own that is not
// this shard's owner nor one of its agents: by design it has exactly a stranger's rights here, and
// the matrix checks that it gets no more. Conversation
// kinds are read from a conversation between the agent and a client (a fifth key, not a subject):
// the agent is its author or p-tagged recipient, so it is the only subject that may read them once
// authenticated; the owner is not a party to its agent's conversations. The expected outcomes below
// are derived from ../shared/DESIGN.md, not from the code. Kind 24200 has its own matrix in ao-relay.test.ts.

import { env } from 'cloudflare:test';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { apiWithEnv } from './app-env.js';
import { signAttestation } from '../../src/shared/nip-oa.js';
import type { NostrEvent } from '../../src/shared/event.js';
import { createAgent } from '../../workers/api/agents.js';
import { CreateAgentSchema } from '../../workers/agent/config.js';
import { api } from './api-helpers.js';
import { connect, eventFrame, keys, now, randomHex, Sentinel, sign, type Keys, type TestSocket } from './helpers.js';
import { TEST_OWNER, TEST_OWNER_SK } from './test-keys.js';

type Subject = 'owner' | 'agent' | 'tenant' | 'stranger';
type Where = 'owner shard' | 'public shard';
type Class = 'regular' | 'replaceable' | 'addressable' | 'NIP-XX durable' | 'NIP-XX run event' | 'ephemeral gift wrap' | 'gift wrap' | 'ephemeral';
/** Who the target event is between: public (by the agent, no p tag), client → agent, agent → client. */
type Party = 'public' | 'to agent' | 'from agent';

interface KindCase {
  kind: number;
  cls: Class;
  party: Party;
}

const KINDS: KindCase[] = [
  { kind: 1, cls: 'regular', party: 'public' },
  { kind: 10002, cls: 'replaceable', party: 'public' },
  { kind: 30023, cls: 'addressable', party: 'public' },
  { kind: 25802, cls: 'NIP-XX durable', party: 'to agent' },
  { kind: 25803, cls: 'NIP-XX durable', party: 'from agent' },
  { kind: 25805, cls: 'NIP-XX durable', party: 'from agent' },
  { kind: 25800, cls: 'NIP-XX run event', party: 'from agent' },
  { kind: 25801, cls: 'NIP-XX run event', party: 'from agent' },
  { kind: 25804, cls: 'NIP-XX run event', party: 'from agent' },
  { kind: 25806, cls: 'NIP-XX run event', party: 'to agent' },
  { kind: 21059, cls: 'ephemeral gift wrap', party: 'to agent' },
  { kind: 1059, cls: 'gift wrap', party: 'to agent' },
  { kind: 20001, cls: 'ephemeral', party: 'public' },
  { kind: 25910, cls: 'ephemeral', party: 'to agent' },
];

const SUBJECTS: Subject[] = ['owner', 'agent', 'tenant', 'stranger'];
const WHERE: Where[] = ['owner shard', 'public shard'];
const AUTHED = [true, false];

const RESTRICTED = "restricted: this shard accepts events from its owner and the owner's agents, or addressed to them";
const AUTH_REQUIRED = 'auth-required: these kinds are only served to their authenticated author or recipient';

const STORED: ReadonlySet<Class> = new Set<Class>(['regular', 'replaceable', 'addressable', 'NIP-XX durable', 'gift wrap']);
/** Classes served only to a connection authenticated as a party (../shared/DESIGN.md). */
const PRIVATE: ReadonlySet<Class> = new Set<Class>(['NIP-XX durable', 'NIP-XX run event', 'ephemeral gift wrap', 'gift wrap']);
/** Private classes that the relay stores: a REQ/COUNT naming only them, unauthenticated, is answered auth-required (PROTOCOL.md). */
const PRIVATE_STORED: ReadonlySet<Class> = new Set<Class>(['NIP-XX durable', 'gift wrap']);
/** Private classes whose rule is being added by B in parallel. */
const PRIVATE_LIVE_ONLY: ReadonlySet<Class> = new Set<Class>(['NIP-XX run event', 'ephemeral gift wrap']);

/** Whether the subject is a party to the target event and proved it. */
const isReader = (k: KindCase, s: Subject, authed: boolean) => k.party !== 'public' && s === 'agent' && authed;

// ---- expected outcomes (from ../shared/DESIGN.md) ----

/** Publishing the subject's own event of the kind, addressed to nobody on this shard. */
function expectPublish(where: Where, s: Subject): string {
  if (where === 'public shard') return '';
  return s === 'owner' || s === 'agent' ? '' : RESTRICTED;
}

/** Reading: 'target' (the event is served), 'nothing' (EOSE/count 0), or 'auth-required' (CLOSED). */
type Read = 'target' | 'nothing' | 'auth-required' | 'nothing or auth-required';
function expectRead(k: KindCase, s: Subject, authed: boolean): Read {
  if (!STORED.has(k.cls)) {
    // Never stored: history is empty; unauthenticated, B may answer the private ones auth-required.
    return PRIVATE_LIVE_ONLY.has(k.cls) && !authed ? 'nothing or auth-required' : 'nothing';
  }
  if (!PRIVATE.has(k.cls)) return 'target';
  if (!authed && PRIVATE_STORED.has(k.cls)) return 'auth-required';
  return isReader(k, s, authed) ? 'target' : 'nothing';
}

/** Live: whether a newly published target reaches the subject's subscription (or it is refused). */
function expectLive(k: KindCase, s: Subject, authed: boolean): { read: Read } {
  if (!PRIVATE.has(k.cls)) return { read: 'target' };
  if (isReader(k, s, authed)) return { read: 'target' };
  if (!authed && PRIVATE_STORED.has(k.cls)) return { read: 'auth-required' };
  if (PRIVATE_LIVE_ONLY.has(k.cls)) return { read: authed ? 'nothing' : 'nothing or auth-required' };
  return { read: 'nothing' };
}

// ---- the world of one row: shard, kind, keys, and one socket per subject ----

interface World {
  where: Where;
  k: KindCase;
  path: string;
  ip: string;
  owner: Keys;
  agent: Keys;
  tenant: Keys;
  stranger: Keys;
  client: Keys;
  /** The author of gift wraps (a one-time key in real use). */
  wrapper: Keys;
  /** The stored target event read by the history and COUNT cells. */
  target: NostrEvent;
  /** created_at for the next event: strictly increasing, so replaceable versions always win. */
  clock: number;
  /** One connection per (subject, authenticated), and one unauthenticated publisher. */
  sockets: Map<string, TestSocket>;
  publisher: TestSocket;
}

const ownerKeys: Keys = { sk: TEST_OWNER_SK, pk: TEST_OWNER };

/** Authenticates as the subject; the agent's AUTH carries the owner's NIP-OA attestation. */
async function authAs(s: TestSocket, w: World, who: Subject): Promise<void> {
  const k = w[who];
  const tags = [
    ['relay', s.url],
    ['challenge', s.challenge],
    ...(who === 'agent' ? [signAttestation(w.owner.sk, w.agent.pk, '')] : []),
  ];
  const e = sign(k, { kind: 22242, content: '', tags });
  s.send(['AUTH', e]);
  expect(await s.next((f) => f[0] === 'OK' && f[1] === e.id)).toEqual(['OK', e.id, true, '']);
}

/** A target event of the row's kind, between the row's parties. */
function targetEvent(w: World, content: string): NostrEvent {
  const { kind, party } = w.k;
  const created_at = w.clock++;
  const d = w.k.cls === 'addressable' ? [['d', 'matrix']] : [];
  const wraps = w.k.cls === 'gift wrap' || w.k.cls === 'ephemeral gift wrap';
  if (party === 'public') return sign(w.agent, { kind, content, created_at, tags: d });
  if (party === 'to agent') return sign(wraps ? w.wrapper : w.client, { kind, content, created_at, tags: [['p', w.agent.pk]] });
  return sign(w.agent, { kind, content, created_at, tags: [['p', w.client.pk], ['e', randomHex()]] });
}

const socketKey = (s: Subject, authed: boolean) => `${s}/${authed}`;

async function makeWorld(where: Where, k: KindCase): Promise<World> {
  const w: World = {
    where,
    k,
    path: where === 'owner shard' ? `/r/${TEST_OWNER}` : '/',
    ip: `10.${Math.floor(Math.random() * 250)}.${Math.floor(Math.random() * 250)}.${Math.floor(Math.random() * 250)}`,
    owner: ownerKeys,
    agent: keys(),
    tenant: keys(),
    stranger: keys(),
    client: keys(),
    wrapper: keys(),
    target: undefined as unknown as NostrEvent,
    clock: now() - 5,
    sockets: new Map(),
    publisher: undefined as unknown as TestSocket,
  };
  const open = () => connect(w.path, { 'CF-Connecting-IP': w.ip });
  // The agent proves it belongs to the owner on the owner's shard (NIP-OA on its AUTH); the
  // agent's authenticated socket below does it again, on every shard.
  const attest = await open();
  await authAs(attest, w, 'agent');
  attest.close();
  w.publisher = await open();
  w.target = targetEvent(w, 'target');
  expect(await w.publisher.publish(w.target)).toEqual(['OK', w.target.id, true, '']);
  for (const s of SUBJECTS) {
    for (const authed of AUTHED) {
      const sock = await open();
      if (authed) await authAs(sock, w, s);
      w.sockets.set(socketKey(s, authed), sock);
    }
  }
  return w;
}

/** Asserts a REQ or COUNT answer against the expected read outcome. */
function checkRead(read: Read, got: { events?: NostrEvent[]; count?: number; closed?: string }, targetId: string) {
  const closed = got.closed;
  const served = got.events ? got.events.map((e) => e.id) : got.count;
  if (read === 'target') {
    expect(closed).toBeUndefined();
    expect(served).toEqual(got.events ? [targetId] : 1);
  } else if (read === 'auth-required') {
    expect(closed).toBe(AUTH_REQUIRED);
  } else if (read === 'nothing or auth-required' && closed !== undefined) {
    expect(closed).toMatch(/^auth-required: /);
  } else {
    expect(closed).toBeUndefined();
    expect(served).toEqual(got.events ? [] : 0);
  }
}

const label = (s: Subject, authed: boolean) => `${s}${authed ? ' (authenticated)' : ' (not authenticated)'}`;
const rows = SUBJECTS.flatMap((s) => AUTHED.map((authed) => [s, authed] as const));

for (const where of WHERE) {
  for (const k of KINDS) {
    describe(`${where}, kind ${k.kind} (${k.cls})`, () => {
      let w: World;
      const sock = (s: Subject, authed: boolean) => w.sockets.get(socketKey(s, authed))!;
      beforeAll(async () => {
        w = await makeWorld(where, k);
      });
      afterAll(() => {
        for (const s of w.sockets.values()) s.close();
        w.publisher.close();
      });

      // History first: later cells publish newer versions of replaceable and addressable targets.
      for (const [s, authed] of rows) {
        const read = expectRead(k, s, authed);
        it(`REQ history and COUNT as ${label(s, authed)} → ${read}`, async () => {
          const reader = sock(s, authed);
          const filter = { ids: [w.target.id], kinds: [k.kind] };
          checkRead(read, await reader.req('history', filter), w.target.id);
          reader.send(['CLOSE', 'history']);
          reader.send(['COUNT', 'n', filter]);
          const f = await reader.next((x) => (x[0] === 'COUNT' || x[0] === 'CLOSED') && x[1] === 'n');
          checkRead(read, f[0] === 'CLOSED' ? { closed: f[2] as string } : { count: (f[2] as { count: number }).count }, w.target.id);
        });
      }

      for (const [s, authed] of rows) {
        const live = expectLive(k, s, authed);
        it(`subscribe live as ${label(s, authed)} → ${live.read}`, async () => {
          const watcher = sock(s, authed);
          const subId = `live-${randomHex(4)}`;
          const sub = await watcher.req(subId, { kinds: [k.kind], limit: 0 });
          if (live.read === 'auth-required' || (live.read === 'nothing or auth-required' && sub.closed !== undefined)) {
            checkRead(live.read, sub, '');
            return;
          }
          expect(sub).toEqual({ events: [] });
          const e = targetEvent(w, `live ${randomHex(4)}`);
          expect(await w.publisher.publish(e)).toEqual(['OK', e.id, true, '']);
          if (live.read === 'target') expect(await watcher.next(eventFrame(e.id))).toEqual(['EVENT', subId, e]);
          else expect(await watcher.silence(eventFrame(e.id), await Sentinel.arm(watcher, w.publisher, w.agent))).toBe(true);
          watcher.send(['CLOSE', subId]);
        });
      }

      for (const [s, authed] of rows) {
        const publish = expectPublish(where, s);
        it(`publish as ${label(s, authed)} → ${publish === '' ? 'OK' : publish}`, async () => {
          const tags = [...(k.cls === 'addressable' ? [['d', `by ${s}`]] : []), ...(k.party === 'public' ? [] : [['p', w.client.pk]])];
          const e = sign(w[s], { kind: k.kind, content: 'mine', created_at: w.clock++, tags });
          expect(await sock(s, authed).publish(e)).toEqual(['OK', e.id, publish === '', publish]);
        });
      }

      if (where === 'owner shard') {
        for (const s of ['tenant', 'stranger'] as const) {
          it(`publish addressed to the agent as ${s} → OK (the owner shard's inbox)`, async () => {
            const tags = [...(k.cls === 'addressable' ? [['d', `to agent by ${s}`]] : []), ['p', w.agent.pk]];
            const e = sign(w[s], { kind: k.kind, content: 'to the agent', created_at: w.clock++, tags });
            expect(await sock(s, false).publish(e)).toEqual(['OK', e.id, true, '']);
          });
        }
      }
    });
  }
}

// ---- management: GET / PATCH / DELETE /api/agents/<agent> ----

describe('management of an agent (/api/agents/<agent>)', () => {
  let agent: string;
  // The agent subject signs with the agent's own key: it is provisioned with a key the test knows
  // (createAgent is what POST /api/agents runs once the caller is allowed to own).
  const others = { agent: keys(), tenant: keys(), stranger: keys() };
  // Keys that may not own on this deployment are refused before the agent is looked up; an allowed
  // owner of other agents (a real other tenant) does not find it among its own agents (404; its
  // DELETE only revokes its own NIP-OA attestations of the key: 200 {revoked}).
  const NOT_AN_OWNER = { status: 403, json: { error: 'this pubkey is not an owner on this deployment; ask the operators to add it' } };
  const NOT_YOURS = { status: 404, json: { error: 'no such agent' } };

  beforeAll(async () => {
    const created = await createAgent(env, TEST_OWNER, CreateAgentSchema.parse({ name: 'matrix' }), 'http://relay.test', others.agent.sk);
    expect(created).toMatchObject({ status: 201, body: { pubkey: others.agent.pk, owner: TEST_OWNER } });
    agent = others.agent.pk;
  });

  afterAll(async () => {
    await api(TEST_OWNER_SK, 'DELETE', `/api/agents/${agent}`);
  });

  it('owner (authenticated): GET 200, PATCH 200', async () => {
    expect(await api(TEST_OWNER_SK, 'GET', `/api/agents/${agent}`)).toMatchObject({ status: 200, json: { pubkey: agent, owner: TEST_OWNER } });
    expect(await api(TEST_OWNER_SK, 'PATCH', `/api/agents/${agent}`, { about: 'patched' })).toMatchObject({ status: 200, json: { about: 'patched' } });
  });

  it('owner (authenticated): DELETE 204, then the agent is gone (404)', async () => {
    const r = await api(TEST_OWNER_SK, 'POST', '/api/agents', { name: 'to delete' });
    const doomed = (r.json as { pubkey: string }).pubkey;
    expect((await api(TEST_OWNER_SK, 'DELETE', `/api/agents/${doomed}`)).status).toBe(204);
    expect(await api(TEST_OWNER_SK, 'GET', `/api/agents/${doomed}`)).toEqual({ status: 404, json: { error: 'no such agent' } });
  });

  for (const who of ['agent', 'tenant', 'stranger'] as const) {
    for (const method of ['GET', 'PATCH', 'DELETE'] as const) {
      it(`${who} (authenticated): ${method} → 403`, async () => {
        expect(await api(others[who].sk, method, `/api/agents/${agent}`, method === 'PATCH' ? { about: 'mine now' } : undefined)).toEqual(NOT_AN_OWNER);
      });
    }
  }

  for (const method of ['GET', 'PATCH'] as const) {
    it(`tenant allowed to own (EDGESTR_OWNERS lists it too): ${method} → 404`, async () => {
      const owners = { EDGESTR_OWNERS: `${TEST_OWNER},${others.tenant.pk}` };
      expect(await apiWithEnv(owners, others.tenant.sk, method, `/api/agents/${agent}`, method === 'PATCH' ? { about: 'mine now' } : undefined)).toEqual(NOT_YOURS);
    });
  }

  it('tenant allowed to own: DELETE → 200 {revoked}, a revocation of its own NIP-OA attestations of the key only (the agent is untouched, below)', async () => {
    const owners = { EDGESTR_OWNERS: `${TEST_OWNER},${others.tenant.pk}` };
    expect(await apiWithEnv(owners, others.tenant.sk, 'DELETE', `/api/agents/${agent}`)).toEqual({ status: 200, json: { revoked: agent } });
  });

  for (const method of ['GET', 'PATCH', 'DELETE'] as const) {
    it(`anyone not authenticated: ${method} → 401`, async () => {
      expect(await api(TEST_OWNER_SK, method, `/api/agents/${agent}`, method === 'PATCH' ? { about: 'x' } : undefined, '')).toEqual({
        status: 401,
        json: { error: 'NIP-98: missing Authorization header' },
      });
    });
  }

  it('the agent still exists and is unchanged after every refused call', async () => {
    expect(await api(TEST_OWNER_SK, 'GET', `/api/agents/${agent}`)).toMatchObject({ status: 200, json: { pubkey: agent, about: 'patched' } });
  });

  describe('an owner removed from EDGESTR_OWNERS', () => {
    // The agent was created while its owner was allowed (createAgent is what POST /api/agents runs
    // after the allow-list check); the owner is not in this deployment's EDGESTR_OWNERS now.
    const removed = keys();
    let orphan: string;
    beforeAll(async () => {
      const created = await createAgent(env, removed.pk, CreateAgentSchema.parse({ name: 'orphan' }), 'http://relay.test');
      expect(created.status).toBe(201);
      orphan = (created.body as { pubkey: string }).pubkey;
    });

    for (const method of ['GET', 'PATCH', 'DELETE'] as const) {
      it(`${method} by the removed owner → 403`, async () => {
        const r = await api(removed.sk, method, `/api/agents/${orphan}`, method === 'PATCH' ? { about: 'still mine?' } : undefined);
        expect(r.status).toBe(403);
        expect(typeof (r.json as { error?: unknown }).error).toBe('string');
      });
    }
  });
});
