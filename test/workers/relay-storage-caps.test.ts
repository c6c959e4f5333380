// Storage bounds of relay shards: what a shard counts as stored (owner-plan.ts, kept with each
// stored event and removed with it, so a deletion, a replaced version or an expired event frees its
// room at once), and the deployment's bound on every shard (RELAY_LIMITS max_stored_bytes): the
// public shard's, with a reserve kept for what edgestr's own connections publish about themselves
// and to their owners (not their answers to others, nor what the connections the /mcp gateway opens
// for its callers publish; one owner's agents and bridges at most their share of it, all owners'
// at most the reserve), and an owner shard's when its plan sets none, so that strangers hold at
// most the inbox share of it.
import { env, runInDurableObject, SELF } from 'cloudflare:test';
import { describe, expect, it } from 'vitest';
import { api } from './api-helpers.js';
import { connect, keys, now, randomHex, sign, TestSocket, type Keys } from './helpers.js';
import type { NostrEvent } from '../../src/shared/event.js';
import { TEST_ADMIN_SK } from './test-keys.js';
import { countedBytes, INBOX_SHARE, OWNER_RESERVE_SHARE, OwnerPlan, RESERVED_SHARE } from '../../workers/relay-do/owner-plan.js';
import { DEFAULT_LIMITS, type RelayLimits } from '../../workers/relay-do/limits.js';
import { RelayShard } from '../../workers/relay-do/shard.js';
import { INTERNAL_HEADER, PUBLIC_SHARD, SHARD_HEADER, shardStub } from '../../workers/common/shards.js';
import { openRelaySocket, shardUpgradeHeaders } from '../../workers/common/relay-sockets.js';
import { relayVerifier } from '../../workers/common/verifier.js';
import { DVMCP_WRAP_TTL_SECONDS } from '../../src/shared/dvmcp-wrap.js';
import { requestTemplate } from '../../src/shared/dvmcp.js';
import { expiringWraps, wrapDvmcp } from '../../src/shared/dvmcp-wrap.js';
import { backendSigner } from '../../src/shared/event.js';
import { ConversationKeyCache } from '../../src/shared/nip44.js';

const bytesOf = (e: object) => new TextEncoder().encode(JSON.stringify(e)).length;
/** What the relay counts an event for (its JSON and the copies of its tag values the indexes keep). */
const countOf = (e: NostrEvent) => countedBytes(e, JSON.stringify(e));
const primary = (owner: string) => env.RELAY_SHARD.get(env.RELAY_SHARD.idFromName(`owner:${owner}`));

/**
 * A shard (`shard`: PUBLIC_SHARD or an owner's key) made by the test over a fresh Durable Object's
 * storage, with `limits` as RELAY_LIMITS, as the deployment would set them; `open` gives a connection
 * to it from address `from` ('internal': edgestr's own agents) whose frames reach this object and whose answers
 * come back on the socket (`headers`: the upgrade's headers, else those a client's or an agent's
 * upgrade has). The object is the shard's primary, which stores its events, also when the test
 * project gives shards edge objects.
 */
async function withShard<T>(shard: string, limits: Partial<RelayLimits>, run: (relay: RelayShard, open: (from: string, headers?: Headers) => Promise<TestSocket>) => Promise<T>): Promise<T> {
  return runInDurableObject(env.RELAY_SHARD.get(env.RELAY_SHARD.newUniqueId()), async (_i, state) => {
    const relay = new RelayShard(state, { ...env, RELAY_LIMITS: JSON.stringify(limits) });
    const path = shard === PUBLIC_SHARD ? '/' : `/r/${shard}`;
    const opened = new Set<WebSocket>();
    const open = async (from: string, given?: Headers): Promise<TestSocket> => {
      const headers = given ?? new Headers({ Upgrade: 'websocket', [SHARD_HEADER]: shard });
      if (given === undefined && from === 'internal') headers.set(INTERNAL_HEADER, 'agent');
      else if (given === undefined) headers.set('CF-Connecting-IP', from);
      const res = await relay.fetch(new Request(`http://relay.test${path}`, { headers }));
      const client = res.webSocket;
      if (!client) throw new Error(`no websocket: ${res.status} ${await res.text()}`);
      client.accept();
      // The socket just accepted: the first of `from`'s not opened before (several internal ones may be).
      const server = state.getWebSockets(`address:${from}`).find((ws) => !opened.has(ws));
      if (!server) throw new Error(`no socket of ${from}`);
      opened.add(server);
      const wire = {
        send: (data: string) => void relay.webSocketMessage(server, data),
        addEventListener: client.addEventListener.bind(client),
        close: () => client.close(),
      };
      const sock = new TestSocket(wire as unknown as WebSocket, `ws://relay.test${path}`);
      sock.send(['AUTH']);
      await sock.next((f) => f[0] === 'AUTH').then((f) => sock.frames.unshift(f));
      return sock;
    };
    return run(relay, open);
  });
}

/** A note of `k` of `size` bytes, unlike any other. */
const noteOf = (k: Keys, size: number) => {
  const [created_at, unique] = [now(), randomHex(8)];
  return sign(k, { content: unique + 'x'.repeat(size - bytesOf(sign(k, { content: unique, created_at }))), created_at });
};

async function addOwner(plan: string): Promise<Keys> {
  const k = keys();
  const r = await api(TEST_ADMIN_SK, 'POST', '/api/admin/owners', { pubkey: k.pk, plan });
  expect(r.status).toBe(201);
  return k;
}

describe('what a shard counts as stored', () => {
  it('a deletion and a replaced version free their bytes at once: the owner fills its plan again right after', async () => {
    const owner = await addOwner('small_shard'); // stored_bytes 1000
    const sock = await connect(`/r/${owner.pk}`);
    await sock.auth(owner);
    const note = sign(owner, { content: 'n'.repeat(100) });
    const deletion = sign(owner, { kind: 5, tags: [['e', note.id]], content: '' });
    expect(await sock.publish(note)).toEqual(['OK', note.id, true, '']);
    expect(await sock.publish(deletion)).toEqual(['OK', deletion.id, true, '']);
    // The note is gone: what is stored is the deletion alone, and the rest of the plan is free.
    const profile = (content: string, created_at: number) => sign(owner, { kind: 0, content, created_at });
    const empty = profile('', now() - 10);
    const first = profile('p'.repeat(1000 - countOf(deletion) - bytesOf(empty)), now() - 10);
    expect(countOf(deletion) + bytesOf(first)).toBe(1000);
    expect(await sock.publish(first)).toEqual(['OK', first.id, true, '']);
    // A newer version replaces it: its bytes are freed as it is removed.
    const second = profile('q'.repeat(1000 - countOf(deletion) - bytesOf(empty)), now() - 9);
    expect(await sock.publish(second)).toEqual(['OK', second.id, true, '']);
    expect(await primary(owner.pk).storedUsage()).toEqual({ events: 2, bytes: 1000 });
    const over = sign(owner, { content: '' });
    expect(await sock.publish(over)).toEqual(['OK', over.id, false, 'restricted: storage quota: the owner’s plan allows 1000 stored bytes on this shard']);
    sock.close();
  });

  it('on a full shard a deletion that frees at least its own bytes is stored (its targets go); one that frees less is refused', async () => {
    const owner = await addOwner('small_shard'); // stored_bytes 1000
    const sock = await connect(`/r/${owner.pk}`);
    await sock.auth(owner);
    const big = noteOf(owner, 600);
    expect(await sock.publish(big)).toEqual(['OK', big.id, true, '']);
    const filler = noteOf(owner, 1000 - countOf(big));
    expect(await sock.publish(filler)).toEqual(['OK', filler.id, true, '']);
    expect(await primary(owner.pk).storedUsage()).toEqual({ events: 2, bytes: 1000 });
    // Full: a deletion of nothing stored does not fit, nor one of the other key's…
    const ofNothing = sign(owner, { kind: 5, tags: [['e', randomHex(32)]], content: '' });
    expect(await sock.publish(ofNothing)).toEqual(['OK', ofNothing.id, false, 'restricted: storage quota: the owner’s plan allows 1000 stored bytes on this shard']);
    // …but the owner's deletion of its 600-byte note frees more than it takes: stored, the note gone.
    const deletion = sign(owner, { kind: 5, tags: [['e', big.id]], content: '' });
    expect(await sock.publish(deletion)).toEqual(['OK', deletion.id, true, '']);
    expect(await primary(owner.pk).storedUsage()).toEqual({ events: 2, bytes: countOf(filler) + countOf(deletion) });
    sock.close();
  });

  it('an event is counted with the copies of its tag values the indexes keep: each single-letter tag value twice, the `d` of an addressable event twice more', async () => {
    const owner = await addOwner('inbox_shard'); // stored_bytes 4000
    const sock = await connect(`/r/${owner.pk}`);
    await sock.auth(owner);
    const d = 'd'.repeat(300);
    const article = sign(owner, { kind: 30023, content: 'body', tags: [['d', d], ['t', 'nostr'], ['title', 'not indexed']] });
    const counted = bytesOf(article) + 2 * (d.length + 'nostr'.length) + 2 * d.length;
    expect(await sock.publish(article)).toEqual(['OK', article.id, true, '']);
    expect(await primary(owner.pk).storedUsage()).toEqual({ events: 1, bytes: counted });
    // The rest of the plan, and not a byte more, for a note without tags.
    const empty = sign(owner, { content: '' });
    const rest = sign(owner, { content: 'r'.repeat(4000 - counted - bytesOf(empty) + 1) });
    expect(await sock.publish(rest)).toEqual(['OK', rest.id, false, 'restricted: storage quota: the owner’s plan allows 4000 stored bytes on this shard']);
    const fits = sign(owner, { content: 'r'.repeat(4000 - counted - bytesOf(empty)) });
    expect(await sock.publish(fits)).toEqual(['OK', fits.id, true, '']);
    sock.close();
  });

  it('a shard made before owners were counted gets the columns when it wakes: what it stored counts as nobody’s, the sums stay', async () => {
    const woken = await runInDurableObject(env.RELAY_SHARD.get(env.RELAY_SHARD.newUniqueId()), (_i, state) => {
      const sql = state.storage.sql;
      new OwnerPlan(sql, env, () => null, 128_000);
      sql.exec('INSERT INTO stored_sizes (rid, bytes, inbox) VALUES (1, 700, 1)');
      // The shard as it was before: no owner column, no owners' sum.
      for (const t of ['stored_sizes_owner_added', 'stored_sizes_owner_removed']) sql.exec(`DROP TRIGGER ${t}`);
      sql.exec('DROP INDEX stored_sizes_owner');
      sql.exec('ALTER TABLE stored_sizes DROP COLUMN owner');
      sql.exec('ALTER TABLE stored_totals DROP COLUMN owners');
      const plan = new OwnerPlan(sql, env, () => null, 128_000);
      return { storage: plan.storage(), totals: sql.exec('SELECT owners FROM stored_totals').one(), sizes: sql.exec('SELECT owner FROM stored_sizes').toArray() };
    });
    expect(woken).toEqual({ storage: { events: 1, bytes: 700 }, totals: { owners: 0 }, sizes: [{ owner: null }] });
  });

  it('a shard made before the sums counts what it holds once, when it wakes: the owner’s events and the inbox’s, gift wraps the owner published included', async () => {
    const owner = await addOwner('inbox_shard');
    const mine = await connect(`/r/${owner.pk}`);
    await mine.auth(owner);
    const own = sign(owner, { content: 'mine' });
    const ownWrap = sign(keys(), { kind: 1059, tags: [['p', owner.pk]], content: 'sealed' }); // published by the owner's connection
    const letter = sign(keys(), { content: 'a letter', tags: [['p', owner.pk]] });
    for (const e of [own, ownWrap, letter]) expect((await mine.publish(e))[2]).toBe(true);
    mine.close();
    const counted = await runInDurableObject(primary(owner.pk), (_i, state) => {
      const sql = state.storage.sql;
      const totals = () => sql.exec('SELECT events, bytes, inbox FROM stored_totals').one();
      const now = totals();
      // The shard as it was before: no sums, the ids of the owner's wraps kept apart.
      sql.exec('DROP TRIGGER stored_event_removed');
      sql.exec('DROP TABLE stored_sizes');
      sql.exec('DROP TABLE stored_totals');
      sql.exec('CREATE TABLE owner_wraps (id TEXT PRIMARY KEY) WITHOUT ROWID');
      sql.exec('INSERT INTO owner_wraps (id) VALUES (?)', ownWrap.id);
      new OwnerPlan(sql, env, () => owner.pk, DEFAULT_LIMITS.max_stored_bytes);
      const wrapsLeft = sql.exec("SELECT 1 FROM sqlite_master WHERE name = 'owner_wraps'").toArray().length;
      return { now, woken: totals(), wrapsLeft };
    });
    const bytes = countOf(own) + countOf(ownWrap) + countOf(letter);
    expect(counted).toEqual({ now: { events: 3, bytes, inbox: countOf(letter) }, woken: { events: 3, bytes, inbox: countOf(letter) }, wrapsLeft: 0 });
  });
});

describe('the deployment’s bound on a shard’s storage (max_stored_bytes)', () => {
  it('the public shard: clients fill all but the reserve, then get `restricted: storage quota: …`; edgestr’s own connections use the reserve; REQ, AUTH and ephemeral events still work', async () => {
    const cap = 4000;
    const clients = Math.floor(cap * (1 - RESERVED_SHARE)); // 3500
    const answers = await withShard(PUBLIC_SHARD, { max_stored_bytes: cap }, async (relay, open) => {
      const stranger = keys();
      const sock = await open('198.51.100.7');
      const oks: Array<[boolean, string]> = [];
      for (let n = 0; n < 9; n++) oks.push((await sock.publish(noteOf(stranger, 500))).slice(2) as [boolean, string]);
      // Everything else a full shard's clients do still works: ephemeral events, reads, AUTH.
      const ephemeral = sign(stranger, { kind: 20001, content: 'still here' });
      const passing = (await sock.publish(ephemeral)).slice(2);
      const read = await sock.req('all', { kinds: [1] });
      const authed = (await sock.auth(stranger)).slice(2);
      // edgestr's own connection (an agent, a bridge) has the rest.
      const agent = keys();
      const own = await open('internal');
      const ownOks: Array<[boolean, string]> = [];
      for (let n = 0; n < 3; n++) ownOks.push((await own.publish(noteOf(agent, 400))).slice(2) as [boolean, string]);
      return { oks, passing, stored: read.events.length, closed: read.closed, authed, ownOks, usage: relay.storedUsage() };
    });
    const full: [boolean, string] = [false, `restricted: storage quota: clients may hold ${clients} of the ${cap} stored bytes the relay allows on this shard; the rest is kept for its own agents and bridges`];
    expect(answers.oks).toEqual([...Array(7).fill([true, '']), full, full]);
    expect(answers).toMatchObject({ passing: [true, ''], stored: 7, closed: undefined, authed: [true, ''], usage: { events: 8, bytes: 3900 } });
    expect(answers.ownOks).toEqual([
      [true, ''],
      [false, `restricted: storage quota: the relay allows ${cap} stored bytes on this shard`],
      [false, `restricted: storage quota: the relay allows ${cap} stored bytes on this shard`],
    ]);
  });

  it('the public shard: the connection the /mcp gateway opens for a caller (relay-sockets.ts) is the caller’s: its gift-wrapped calls fill the client share only, not the reserve', async () => {
    const cap = 40_000;
    const clients = Math.floor(cap * (1 - RESERVED_SHARE)); // 35000
    const caller = '198.51.100.10';
    const server = keys();
    const signer = expiringWraps(backendSigner(await relayVerifier()), DVMCP_WRAP_TTL_SECONDS);
    // A call as the gateway sends it to a server that announces encryption: a gift wrap from a fresh key.
    const call = () => {
      const k = keys();
      const t = requestTemplate(server.pk, 'tools/call', { name: 'echo', arguments: { text: randomHex(8) + 'x'.repeat(200) } }, 'srv');
      return wrapDvmcp(t, k.sk, k.pk, server.pk, new ConversationKeyCache(), 'wrapped', signer);
    };
    const size = countOf(call()); // every call's wrap counts as much (same lengths)
    const fitting = Math.floor(clients / size);
    const calls = Array.from({ length: fitting + 2 }, call);
    const answers = await withShard(PUBLIC_SHARD, { max_stored_bytes: cap }, async (_relay, open) => {
      const gateway = await open(caller, shardUpgradeHeaders(null, caller));
      const oks: Array<[boolean, string]> = [];
      for (const wrap of calls) oks.push((await gateway.publish(wrap)).slice(2) as [boolean, string]);
      // The reserve is not for a wrap to someone else, whoever sends it: edgestr's own connection
      // (an agent, a bridge) stores there only what it publishes about itself.
      const own = await open('internal');
      const ownWrap = (await own.publish(calls.at(-1)!)).slice(2);
      const ownNote = (await own.publish(noteOf(server, 400))).slice(2);
      return { oks, ownWrap, ownNote };
    });
    expect(calls.map(countOf)).toEqual(Array(calls.length).fill(size));
    const full: [boolean, string] = [false, `restricted: storage quota: clients may hold ${clients} of the ${cap} stored bytes the relay allows on this shard; the rest is kept for its own agents and bridges`];
    expect(answers.oks).toEqual([...Array(fitting).fill([true, '']), full, full]);
    expect(answers).toMatchObject({ ownWrap: full, ownNote: [true, ''] });
  });

  it('the public shard: edgestr’s own connections keep the reserve for what they publish about themselves and to their owner; their answers to others (which strangers cause) count against the clients’ share', async () => {
    const cap = 48_000;
    const clients = Math.floor(cap * (1 - RESERVED_SHARE)); // 42000: 7 notes of 6000 bytes
    const [agent, owner, stranger] = [keys(), keys(), keys()];
    const run = ['e', 'f'.repeat(64), '', 'root'];
    const answer = (kind: number, to: string) => sign(agent, { kind, tags: [['p', to], run, ['encryption', 'nip44']], content: `to ${to}` });
    // A gift wrap's author is a one-time key: who sends it is the connection, authenticated as the agent.
    const wrap = (to: string) => sign(keys(), { kind: 1059, tags: [['p', to]], content: `wrapped to ${to}` });
    const toOthers = [answer(25803, stranger.pk), answer(25805, stranger.pk), wrap(stranger.pk), sign(agent, { content: 'both', tags: [['p', agent.pk], ['p', stranger.pk]] })];
    const ownData = [
      sign(agent, { kind: 31340, tags: [['d', 'agent-info']], content: '{"ver":1}' }),
      sign(agent, { kind: 0, content: '{"name":"agent"}' }),
      sign(agent, { kind: 10002, tags: [['r', 'wss://relay.example.com/']], content: '' }),
      sign(agent, { kind: 31316, tags: [['d', 'server']], content: '{}' }),
      sign(agent, { kind: 5, tags: [['a', `31340:${agent.pk}:agent-info`]], content: 'agent deleted' }),
      sign(agent, { content: 'a note to itself', tags: [['p', agent.pk]] }),
      answer(25803, owner.pk),
      wrap(owner.pk),
    ];
    const answers = await withShard(PUBLIC_SHARD, { max_stored_bytes: cap }, async (relay, open) => {
      // The shard's record of the key's owner (a bridge's provider key is recorded so, deployment-bridges.ts).
      await relay.provisionAgent(agent.pk, owner.pk, 'provisioned');
      const outside = await open('198.51.100.11');
      const filled: Array<[boolean, string]> = [];
      for (let n = 0; n < 8; n++) filled.push((await outside.publish(noteOf(stranger, 6000))).slice(2) as [boolean, string]);
      const own = await open('internal');
      expect((await own.auth(agent))[2]).toBe(true);
      const others: Array<[boolean, string]> = [];
      for (const e of toOthers) others.push((await own.publish(e)).slice(2) as [boolean, string]);
      const mine: Array<[boolean, string]> = [];
      for (const e of ownData) mine.push((await own.publish(e)).slice(2) as [boolean, string]);
      return { filled, others, mine, usage: relay.storedUsage() };
    });
    const full: [boolean, string] = [false, `restricted: storage quota: clients may hold ${clients} of the ${cap} stored bytes the relay allows on this shard; the rest is kept for its own agents and bridges`];
    expect(answers.filled).toEqual([...Array(7).fill([true, '']), full]);
    expect(answers.others).toEqual(Array(toOthers.length).fill(full));
    expect(answers.mine).toEqual(Array(ownData.length).fill([true, '']));
    // The deletion removed the ai.info it names (its bytes freed); everything else is stored.
    const stored = ownData.filter((e) => e.kind !== 31340);
    expect(answers.usage).toEqual({ events: 7 + stored.length, bytes: clients + stored.reduce((n, e) => n + countOf(e), 0) });
  });

  it('the public shard: the agents and bridges of one owner (an internal connection serving it) hold at most their share of the reserve; another owner’s and a client still write', async () => {
    const cap = 128_000;
    const share = Math.floor(cap * RESERVED_SHARE * OWNER_RESERVE_SHARE); // 1000
    const [first, second] = [keys(), keys()];
    const answers = await withShard(PUBLIC_SHARD, { max_stored_bytes: cap }, async (relay, open) => {
      // A bridge of each owner (its upgrade names the owner it serves, as relay-sockets.ts makes it).
      const bridgeOf = async (owner: Keys) => {
        const provider = keys();
        await relay.provisionAgent(provider.pk, owner.pk, 'provisioned');
        const sock = await open('internal', shardUpgradeHeaders(null, undefined, { owner: owner.pk, component: provider.pk }));
        expect((await sock.auth(provider))[2]).toBe(true);
        return { provider, sock };
      };
      const a = await bridgeOf(first);
      const own: Array<[boolean, string]> = [];
      for (let n = 0; n < 3; n++) own.push((await a.sock.publish(noteOf(a.provider, 400))).slice(2) as [boolean, string]);
      const b = await bridgeOf(second);
      const other = (await b.sock.publish(noteOf(b.provider, 400))).slice(2);
      const client = await open('198.51.100.12');
      const note = (await client.publish(noteOf(keys(), 400))).slice(2);
      // The deployment's own components (no owner served) are not held to an owner's share.
      const deployment = await open('internal');
      const deployed = (await deployment.publish(noteOf(keys(), 1500))).slice(2);
      return { own, other, note, deployed };
    });
    const overShare: [boolean, string] = [false, `restricted: storage quota: the agents and bridges of one owner may hold ${share} of the ${cap} stored bytes the relay allows on this shard`];
    expect(answers.own).toEqual([[true, ''], [true, ''], overShare]);
    expect(answers).toMatchObject({ other: [true, ''], note: [true, ''], deployed: [true, ''] });
  });

  it('the public shard: all owners’ agents and bridges together hold at most the reserve; past it their writes count against the clients’ share, so sign-ups cannot fill it for clients or the deployment', async () => {
    const cap = 128_000;
    const clients = Math.floor(cap * (1 - RESERVED_SHARE)); // 112000
    const perOwner = Math.floor(cap * RESERVED_SHARE * OWNER_RESERVE_SHARE); // 1000: 16 owners fill the reserve
    const answers = await withShard(PUBLIC_SHARD, { max_stored_bytes: cap }, async (relay, open) => {
      const bridgeOf = async () => {
        const [owner, provider] = [keys(), keys()];
        await relay.provisionAgent(provider.pk, owner.pk, 'provisioned');
        const sock = await open('internal', shardUpgradeHeaders(null, undefined, { owner: owner.pk, component: provider.pk }));
        expect((await sock.auth(provider))[2]).toBe(true);
        return { provider, sock };
      };
      const filling: Array<[boolean, string]> = [];
      for (let n = 0; n < 1 / OWNER_RESERVE_SHARE; n++) {
        const b = await bridgeOf();
        for (let m = 0; m < 2; m++) filling.push((await b.sock.publish(noteOf(b.provider, perOwner / 2))).slice(2) as [boolean, string]);
      }
      const late = await bridgeOf();
      const lateFirst = (await late.sock.publish(noteOf(late.provider, 500))).slice(2); // in the clients' share
      const client = await open('198.51.100.13');
      const stranger = keys();
      const notes: Array<[boolean, string]> = [];
      for (let n = 0; n < 12; n++) notes.push((await client.publish(noteOf(stranger, 8000))).slice(2) as [boolean, string]);
      notes.push((await client.publish(noteOf(stranger, clients - 16_000 - 500 - 11 * 8000))).slice(2) as [boolean, string]); // the clients' share is full
      const lateSecond = (await late.sock.publish(noteOf(late.provider, 400))).slice(2);
      const deployment = await open('internal');
      const deployed = (await deployment.publish(noteOf(keys(), 500))).slice(2);
      return { filling, lateFirst, notes, lateSecond, deployed, usage: relay.storedUsage() };
    });
    const full: [boolean, string] = [false, `restricted: storage quota: clients may hold ${clients} of the ${cap} stored bytes the relay allows on this shard; the rest is kept for its own agents and bridges`];
    expect(answers.filling).toEqual(Array(32).fill([true, '']));
    expect(answers.lateFirst).toEqual([true, '']);
    // 112000 − 16000 − 500 leaves room for 11 notes of 8000 and one of 7500 (the late owner's note took the clients' share).
    expect(answers.notes).toEqual([...Array(11).fill([true, '']), full, [true, '']]);
    expect(answers).toMatchObject({ lateSecond: full, deployed: [true, ''] });
    expect(answers.usage).toEqual({ events: 32 + 1 + 12 + 1, bytes: clients + 500 });
  });

  it('the public shard: the owner an internal connection serves reaches the primary that stores its event (through an edge object when the shard has them), which counts the event as that owner’s', async () => {
    const [owner, provider] = [keys(), keys()];
    const sock = await openRelaySocket(env, 'ws://relay.test/', { origin: 'http://relay.test', owner: owner.pk, component: provider.pk });
    const note = noteOf(provider, 500);
    const ok = await new Promise<unknown[]>((resolve) => {
      sock.addEventListener('message', (m) => {
        const frame = JSON.parse(String(m.data)) as unknown[];
        if (frame[0] === 'OK' && frame[1] === note.id) resolve(frame);
      });
      sock.send(JSON.stringify(['EVENT', note]));
    });
    sock.close();
    expect(ok).toEqual(['OK', note.id, true, '']);
    const counted = await runInDurableObject(shardStub(env, null), (_i, state) =>
      state.storage.sql.exec<{ owner: string | null }>('SELECT s.owner AS owner FROM stored_sizes s JOIN events e ON e.rid = s.rid WHERE e.id = ?', note.id).toArray(),
    );
    expect(counted).toEqual([{ owner: owner.pk }]);
  });

  it(`an owner shard whose plan sets no stored_bytes: strangers hold at most ${INBOX_SHARE * 100} % of max_stored_bytes, the owner the rest; a plan allowing more is held to it too`, async () => {
    const cap = 4000;
    const share = Math.floor(cap * INBOX_SHARE); // 1000
    const owner = keys();
    const answers = await withShard(owner.pk, { max_stored_bytes: cap }, async (relay, open) => {
      const stranger = keys();
      const outside = await open('198.51.100.8');
      const letters: Array<[boolean, string]> = [];
      for (let n = 0; n < 4; n++) {
        const e = sign(stranger, { content: `${n}`.padEnd(300, 'l'), tags: [['p', owner.pk]] });
        letters.push((await outside.publish(e)).slice(2) as [boolean, string]);
      }
      const mine = await open('198.51.100.9');
      await mine.auth(owner);
      const notes: Array<[boolean, string]> = [];
      for (let n = 0; n < 9; n++) notes.push((await mine.publish(noteOf(owner, 500))).slice(2) as [boolean, string]);
      // A plan allowing more than the relay's bound (answers_shard: 60000) is held to the bound.
      relay.setOwnerAccount({ plan: 'answers_shard', suspended: false });
      const onBigPlan = (await mine.publish(noteOf(owner, 500))).slice(2);
      const letterOnBigPlan = (await outside.publish(sign(stranger, { content: 'late', tags: [['p', owner.pk]] }))).slice(2);
      return { letters, notes, onBigPlan, letterOnBigPlan, usage: relay.storedUsage() };
    });
    const letterSize = countOf(sign(owner, { content: 'l'.repeat(300), tags: [['p', owner.pk]] }));
    const fitting = Math.floor(share / letterSize);
    // A stranger is told no figure; the owner's side is (below).
    const inboxFull: [boolean, string] = [false, 'restricted: storage quota: this shard has no room for more events from others for now'];
    expect(answers.letters).toEqual([...Array(fitting).fill([true, '']), ...Array(4 - fitting).fill(inboxFull)]);
    const room = Math.floor((cap - fitting * letterSize) / 500);
    const full: [boolean, string] = [false, `restricted: storage quota: the relay allows ${cap} stored bytes on this shard`];
    expect(answers.notes).toEqual([...Array(room).fill([true, '']), ...Array(9 - room).fill(full)]);
    expect(answers.onBigPlan).toEqual(full);
    expect(answers.letterOnBigPlan).toEqual(inboxFull);
    expect(answers.usage).toEqual({ events: fitting + room, bytes: fitting * letterSize + room * 500 });
  });

  it('NIP-11 advertises max_stored_bytes (default and configured)', async () => {
    const doc = (await (await SELF.fetch('http://relay.test/', { headers: { Accept: 'application/nostr+json' } })).json()) as { limitation: { max_stored_bytes: number } };
    expect(doc.limitation.max_stored_bytes).toBe(DEFAULT_LIMITS.max_stored_bytes);
    const configured = await withShard(PUBLIC_SHARD, { max_stored_bytes: 12345 }, async (relay) => {
      const res = await relay.fetch(new Request('http://relay.test/', { headers: { Accept: 'application/nostr+json', [SHARD_HEADER]: PUBLIC_SHARD } }));
      return ((await res.json()) as { limitation: { max_stored_bytes: number } }).limitation.max_stored_bytes;
    });
    expect(configured).toBe(12345);
  });
});
