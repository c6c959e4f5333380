// Shard routing and isolation, the owner-shard write policy, NIP-11, and state that survives
// hibernation (a fresh object instance rebuilt from storage and socket attachments).
import { env, runInDurableObject, SELF } from 'cloudflare:test';
import { describe, expect, it } from 'vitest';
import { npubEncode } from 'nostr-tools/nip19';
import { DEFAULT_LIMITS } from '../../workers/relay-do/limits.js';
import { SUPPORTED_NIPS } from '../../workers/relay-do/nip11.js';
import { RelayShard } from '../../workers/relay-do/shard.js';
import { shardName } from '../../workers/common/shards.js';
import { signAttestation } from '../../src/shared/nip-oa.js';
import { eventJson } from '../../src/shared/event.js';
import { BASE, connect, edgesOf, eventFrame, freshOwner, keys, Sentinel, sign, socketObject } from './helpers.js';

describe('NIP-11', () => {
  it.each([
    ['application/nostr+json'],
    ['text/html, application/nostr+json;q=0.9, */*'],
  ])('serves the document for Accept: %s, with CORS', async (accept) => {
    const res = await SELF.fetch(`${BASE}/`, { headers: { Accept: accept } });
    expect(res.status).toBe(200);
    expect(res.headers.get('Content-Type')).toBe('application/nostr+json');
    expect(res.headers.get('Access-Control-Allow-Origin')).toBe('*');
    const doc = (await res.json()) as { supported_nips: number[]; limitation: Record<string, unknown>; pubkey?: string };
    expect(doc.supported_nips).toEqual([...SUPPORTED_NIPS]);
    expect(doc.limitation).toMatchObject({
      max_message_length: DEFAULT_LIMITS.max_message_length,
      max_subscriptions: DEFAULT_LIMITS.max_subscriptions,
      max_limit: DEFAULT_LIMITS.max_limit,
      max_subid_length: DEFAULT_LIMITS.max_subid_length,
      max_event_tags: DEFAULT_LIMITS.max_event_tags,
      max_content_length: DEFAULT_LIMITS.max_content_length,
      max_count: 100_000,
      created_at_lower_limit: DEFAULT_LIMITS.created_at_lower_limit,
      created_at_upper_limit: DEFAULT_LIMITS.created_at_upper_limit,
      restricted_writes: false,
      auth_required: false,
    });
    expect(doc.pubkey).toBeUndefined();
  });

  it('answers CORS preflight', async () => {
    const res = await SELF.fetch(`${BASE}/`, { method: 'OPTIONS' });
    expect(res.status).toBe(204);
    expect(res.headers.get('Access-Control-Allow-Origin')).toBe('*');
  });

  it('an owner shard names its owner and restricts writes', async () => {
    const owner = freshOwner();
    const res = await SELF.fetch(`${BASE}/r/${npubEncode(owner.pk)}`, { headers: { Accept: 'application/nostr+json' } });
    const doc = (await res.json()) as { pubkey: string; limitation: { restricted_writes: boolean } };
    expect(doc.pubkey).toBe(owner.pk);
    expect(doc.limitation.restricted_writes).toBe(true);
  });

  it('serves a plain page without the NIP-11 Accept header, and 400 for a bad owner', async () => {
    const res = await SELF.fetch(`${BASE}/`);
    expect(res.headers.get('Content-Type')).toMatch(/^text\/plain/);
    const bad = await SELF.fetch(`${BASE}/r/not-a-key`, { headers: { Upgrade: 'websocket' } });
    expect(bad.status).toBe(400);
    expect(await bad.json()).toEqual({ error: 'the shard owner must be a 64-hex pubkey or an npub' });
  });
});

describe('shards', () => {
  it('hex and npub reach the same shard; shards are isolated from each other and from the public shard', async () => {
    const owner = freshOwner();
    const viaHex = await connect(`/r/${owner.pk}`);
    const e = sign(owner, { content: 'in my shard' });
    expect((await viaHex.publish(e))[2]).toBe(true);
    const viaNpub = await connect(`/r/${npubEncode(owner.pk)}`);
    expect((await viaNpub.req('a', { ids: [e.id] })).events).toEqual([e]);
    const viaUpper = await connect(`/r/${owner.pk.toUpperCase()}`);
    expect((await viaUpper.req('a', { ids: [e.id] })).events).toEqual([e]);
    const pub = await connect('/');
    expect((await pub.req('b', { ids: [e.id] })).events).toEqual([]);
    const otherShard = await connect(`/r/${keys().pk}`);
    expect((await otherShard.req('c', { ids: [e.id] })).events).toEqual([]);
  });

  it('a request that did not come through the router (no shard header) is refused before anything is served (rejectConnection)', async () => {
    const owner = freshOwner();
    const stub = env.RELAY_SHARD.get(env.RELAY_SHARD.idFromName(shardName(owner.pk)));
    for (const headers of [{ Upgrade: 'websocket' }, { Accept: 'application/nostr+json' }] as Record<string, string>[]) {
      const res = await stub.fetch(`${BASE}/r/${owner.pk}`, { headers });
      expect(res.status).toBe(400);
      expect(await res.text()).toBe('missing shard header');
      expect(res.webSocket).toBeNull();
    }
  });

  it('ephemeral events fan out only within their shard', async () => {
    const owner = freshOwner();
    const inShard = await connect(`/r/${owner.pk}`);
    const publicSub = await connect('/');
    await inShard.req('e', { kinds: [20001], authors: [owner.pk] });
    await publicSub.req('e', { kinds: [20001], authors: [owner.pk] });
    const eph = sign(owner, { kind: 20001 });
    const pub = await connect(`/r/${owner.pk}`);
    expect(await pub.publish(eph)).toEqual(['OK', eph.id, true, '']);
    expect(await inShard.next((f) => f[0] === 'EVENT')).toEqual(['EVENT', 'e', eph]);
    // The sentinel goes through the public shard after the owner shard answered OK: a copy of the
    // event routed to (or fanned out by) the public shard would have been sent before it.
    const sentinel = await Sentinel.arm(publicSub, await connect('/'), keys());
    expect(await publicSub.silence(eventFrame(eph.id), sentinel)).toBe(true);
  });

  it('the public shard accepts anyone', async () => {
    const s = await connect('/');
    const e = sign(keys());
    expect(await s.publish(e)).toEqual(['OK', e.id, true, '']);
  });

  it('owner shard write policy: owner, attested agents, and the inbox; everything else restricted', async () => {
    const owner = freshOwner();
    const agent = keys();
    const stranger = keys();
    const s = await connect(`/r/${owner.pk}`);
    const restricted = "restricted: this shard accepts events from its owner and the owner's agents, or addressed to them";
    const strangerNote = sign(stranger);
    expect(await s.publish(strangerNote)).toEqual(['OK', strangerNote.id, false, restricted]);
    const agentNote = sign(agent);
    expect(await s.publish(agentNote)).toEqual(['OK', agentNote.id, false, restricted]);
    // The agent publishes its kind 0 carrying the owner's NIP-OA attestation: admitted, and recorded.
    const profile = sign(agent, { kind: 0, content: '{"name":"agent"}', tags: [signAttestation(owner.sk, agent.pk, '')] });
    expect((await s.publish(profile))[2]).toBe(true);
    expect((await s.publish(agentNote))[2]).toBe(true);
    // Inbox: anything p-tagging the owner or one of the owner's agents.
    const toOwner = sign(stranger, { tags: [['p', owner.pk]], content: 'hi owner' });
    const toAgent = sign(stranger, { kind: 25802, tags: [['p', agent.pk], ['encryption', 'nip44']], content: 'prompt' });
    expect((await s.publish(toOwner))[2]).toBe(true);
    expect((await s.publish(toAgent))[2]).toBe(true);
    // A newer kind 0 without the tag revokes the agent.
    const plain = sign(agent, { kind: 0, content: '{"name":"agent"}', created_at: profile.created_at + 1 });
    expect((await s.publish(plain))[2]).toBe(true);
    const late = sign(agent, { content: 'after revocation' });
    expect(await s.publish(late)).toEqual(['OK', late.id, false, restricted]);
  });

  it('an agent authenticating with a NIP-OA tag in its AUTH event may write to its owner’s shard', async () => {
    const owner = freshOwner();
    const agent = keys();
    const s = await connect(`/r/${owner.pk}`);
    const authEvent = sign(agent, {
      kind: 22242,
      content: '',
      tags: [['relay', s.url], ['challenge', s.challenge], signAttestation(owner.sk, agent.pk, 'kind=22242')],
    });
    s.send(['AUTH', authEvent]);
    expect(await s.next((f) => f[0] === 'OK')).toEqual(['OK', authEvent.id, true, '']);
    const note = sign(agent);
    expect((await s.publish(note))[2]).toBe(true);
    // An attestation for another owner proves nothing here.
    const other = keys();
    const s2 = await connect(`/r/${owner.pk}`);
    const foreign = sign(other, { kind: 22242, content: '', tags: [['relay', s2.url], ['challenge', s2.challenge], signAttestation(keys().sk, other.pk, '')] });
    s2.send(['AUTH', foreign]);
    await s2.next((f) => f[0] === 'OK');
    expect((await s2.publish(sign(other)))[2]).toBe(false);
  });
});

describe('hibernation', () => {
  it('subscriptions and AUTH survive: a fresh instance rebuilt from storage serves the same sockets', async () => {
    const owner = freshOwner();
    const recipient = keys();
    const sub = await connect(`/r/${owner.pk}`);
    await sub.auth(recipient);
    await sub.req('live', { kinds: [25803] });
    const stub = await socketObject(owner.pk);
    const resp = sign(owner, { kind: 25803, tags: [['p', recipient.pk], ['encryption', 'nip44']], content: 'x' });
    await runInDurableObject(stub, async (_instance, state) => {
      // What a wake from hibernation does: a new object over the same storage and sockets.
      const woken = new RelayShard(state, env);
      const sockets = state.getWebSockets();
      expect(sockets.length).toBe(1);
      // At K = 1 the woken shard takes the EVENT itself; on an edge, the primary's delivery is what
      // reaches the subscriptions, so the woken edge is handed that delivery.
      if (edgesOf(owner.pk) === 1) await woken.webSocketMessage(sockets[0]!, JSON.stringify(['EVENT', resp]));
      else woken.deliver([{ stamp: { epoch: 1, seq: 1 }, event: resp, raw: eventJson(resp) }], undefined);
    });
    // The woken instance delivered the private event: it knew both the subscription and the AUTH.
    expect(await sub.next((f) => f[0] === 'EVENT')).toEqual(['EVENT', 'live', resp]);
  });

  it('a shard from before ApiState loses its http_auth_seen table (NIP-98 replay ids) when it starts', async () => {
    const owner = freshOwner();
    const stub = env.RELAY_SHARD.get(env.RELAY_SHARD.idFromName(shardName(owner.pk)));
    const tables = (state: DurableObjectState) =>
      state.storage.sql.exec<{ n: number }>("SELECT count(*) AS n FROM sqlite_master WHERE type = 'table' AND name = 'http_auth_seen'").one().n;
    const [before, after] = await runInDurableObject(stub, (_i, state) => {
      // What an old shard's storage holds: the table and a replay id in it.
      state.storage.sql.exec('CREATE TABLE IF NOT EXISTS http_auth_seen (id TEXT PRIMARY KEY, expires_at INTEGER NOT NULL) WITHOUT ROWID');
      state.storage.sql.exec('INSERT INTO http_auth_seen (id, expires_at) VALUES (?, ?)', 'a'.repeat(64), 2 ** 31);
      const before = tables(state);
      new RelayShard(state, env);
      return [before, tables(state)];
    });
    expect([before, after]).toEqual([1, 0]);
  });

  it('forgets subscriptions of sockets that are gone after a restart', async () => {
    const owner = freshOwner();
    const s = await connect(`/r/${owner.pk}`);
    await s.req('gone', { kinds: [1] });
    const holder = await socketObject(owner.pk);
    s.close();
    await new Promise((r) => setTimeout(r, 100));
    const rows = await runInDurableObject(holder, (_i, state) => {
      new RelayShard(state, env);
      return state.storage.sql.exec('SELECT count(*) AS n FROM conn_subs').one().n;
    });
    expect(rows).toBe(0);
  });
});
