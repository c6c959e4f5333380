// What strangers make an owner's agents store on the owner's shard: the agents' answers to them
// (refusals included) count against the inbox share (INBOX_SHARE of stored_bytes) like the prompts
// that caused them, by one rule asked of each event as it is stored (owner-plan.ts `ownersData`); and a
// prompt that came in an ephemeral gift wrap (21059) is refused in one, stored nowhere. Gift wraps
// the owner and its agents publish to each other (on connections authenticated as them) are the
// owner's data, so a full inbox share does not block them. An answer the shard refuses for good
// (`restricted: storage quota`, the prompt having fit) is followed by a short 25805 so that the client
// stops waiting, and the owner's NIP-AO `session_resolved` says it was not delivered, and why.
import { env, runInDurableObject } from 'cloudflare:test';
import { describe, expect, it } from 'vitest';
import { eventJson, type NostrEvent } from '../../src/shared/event.js';
import { ConversationKeyCache, decrypt, encrypt } from '../../src/shared/nip44.js';
import { giftWrap, makeRumor, unwrap } from '../../src/shared/nip59.js';
import { nobleVerifier } from '../../src/shared/verify.js';
import { countedBytes, INBOX_SHARE } from '../../workers/relay-do/owner-plan.js';
import { api } from './api-helpers.js';
import { NipXxClient, watchRunsEnded } from './agent-helpers.js';
import { connect, keys, now, sign, type Keys, type TestSocket } from './helpers.js';
import { TEST_ADMIN_SK } from './test-keys.js';

const cache = new ConversationKeyCache(4096);
const STORED_BYTES = 60_000; // the answers_shard plan (test-keys.ts)
const SESSION = 's'.repeat(256); // the longest session id an agent echoes into every answer

const primary = (owner: string) => env.RELAY_SHARD.get(env.RELAY_SHARD.idFromName(`owner:${owner}`));

/**
 * The shard's inbox bytes as summed while events were stored and removed, and the counted bytes of
 * the inbox's events stored now (owner-plan.ts keeps each event's count with it): their JSON, and
 * their indexed tag values and `d` twice each.
 */
async function inboxCounts(owner: string): Promise<{ running: number; stored: number }> {
  return runInDurableObject(primary(owner), (_i, state) => {
    const sql = state.storage.sql;
    const running = sql.exec<{ inbox: number }>('SELECT inbox FROM stored_totals').one().inbox;
    const stored = sql
      .exec<{ n: number }>(
        `SELECT coalesce(sum(octet_length(e.raw) + 2 * coalesce(octet_length(e.d), 0)
           + 2 * coalesce((SELECT sum(octet_length(t.value)) FROM tags t WHERE t.rid = e.rid), 0)), 0) AS n
         FROM events e JOIN stored_sizes s ON s.rid = e.rid WHERE s.inbox = 1`,
      )
      .one().n;
    return { running, stored };
  });
}

async function ownerWithPrivateAgent(): Promise<{ owner: Keys; agent: string }> {
  return ownerWithAgent([keys().pk]);
}

/** An owner on the answers_shard plan with an echo agent (only `allow` may prompt it, when given), connected. */
async function ownerWithAgent(allow?: string[]): Promise<{ owner: Keys; agent: string }> {
  const owner = keys();
  expect((await api(TEST_ADMIN_SK, 'POST', '/api/admin/owners', { pubkey: owner.pk, plan: 'answers_shard' })).status).toBe(201);
  const r = await api(owner.sk, 'POST', '/api/agents', { name: allow ? 'private' : 'public', provider: 'echo', ...(allow ? { allow } : {}), limits: { agent_prompts_per_minute: 1000 } });
  expect(r.status).toBe(201);
  const agent = (r.json as { pubkey: string }).pubkey;
  // The agent is connected and subscribed once its ai.info is on the shard.
  const s = await connect(`/r/${owner.pk}`);
  for (let i = 0; i < 100 && !(await s.req(`i${i}`, { kinds: [31340], authors: [agent] })).events.length; i++) await new Promise((res) => setTimeout(res, 100));
  s.close();
  return { owner, agent };
}

function prompt(k: Keys, agent: string): { kind: number; tags: string[][]; content: string; created_at: number } {
  return {
    kind: 25802,
    created_at: now(),
    tags: [['p', agent], ['encryption', 'nip44'], ['s', SESSION]],
    content: encrypt(JSON.stringify({ ver: 1, message: 'hi' }), cache.get(k.sk, agent)),
  };
}

function wrapped(k: Keys, agent: string, kind: 1059 | 21059): NostrEvent {
  const rumor = makeRumor({ ...prompt(k, agent), pubkey: k.pk });
  return giftWrap(rumor, k.sk, agent, cache, now(), kind === 21059 ? { kind, exactTime: true } : {});
}

/** Room left in the shard's inbox share (its running sum). */
async function inboxRoom(owner: string): Promise<number> {
  return Math.floor(STORED_BYTES * INBOX_SHARE) - (await inboxCounts(owner)).running;
}

/**
 * Fills the inbox share with a stranger's notes to the owner (the inbox's, as every stranger's
 * event) until exactly `room` counted bytes are left.
 */
async function fillInboxTo(owner: string, room: number): Promise<void> {
  const sock = await connect(`/r/${owner}`);
  const filler = keys();
  const note = (content: string) => sign(filler, { content, tags: [['p', owner]], created_at: now() });
  const empty = countedBytes(note(''), eventJson(note('')));
  for (let left = (await inboxRoom(owner)) - room; left > 0; left = (await inboxRoom(owner)) - room) {
    const size = left > 6000 ? 4000 : left; // never leave a remainder smaller than an empty note
    const e = note('x'.repeat(size - empty));
    expect(countedBytes(e, eventJson(e))).toBe(size);
    expect((await sock.publish(e))[2]).toBe(true);
  }
  expect(await inboxRoom(owner)).toBe(room);
  sock.close();
}

/** Waits until the shard's stored bytes stop changing for a second and a half. */
async function settled(owner: string): Promise<{ events: number; bytes: number }> {
  let last = await primary(owner).storedUsage();
  for (let quiet = 0, i = 0; quiet < 3 && i < 60; i++) {
    await new Promise((res) => setTimeout(res, 500));
    const next = await primary(owner).storedUsage();
    quiet = next.bytes === last.bytes ? quiet + 1 : 0;
    last = next;
  }
  return last;
}

describe('what strangers make an owner’s agents store', () => {
  it('a refused prompt that came as a 21059 is answered with a 21059, and nothing is stored for it', async () => {
    const { owner, agent } = await ownerWithPrivateAgent();
    const stranger = keys();
    const sock: TestSocket = await connect(`/r/${owner.pk}`);
    await sock.auth(stranger);
    await sock.req('mine', { kinds: [1059, 21059, 25805], '#p': [stranger.pk] }); // a fresh key: nothing is stored for it yet
    const before = await settled(owner.pk);
    const wrap = wrapped(stranger, agent, 21059);
    expect((await sock.publish(wrap))[2]).toBe(true);
    const answer = (await sock.next((f) => f[0] === 'EVENT' && f[1] === 'mine', 10_000))[2] as NostrEvent;
    expect(answer.kind).toBe(21059);
    const opened = unwrap(answer, stranger.sk, cache, nobleVerifier);
    if (!opened.ok) throw new Error(opened.error);
    expect(opened.value.rumor).toMatchObject({ kind: 25805, pubkey: agent });
    const payload = decrypt(opened.value.rumor.content, cache.get(stranger.sk, agent));
    expect(payload.ok && JSON.parse(payload.value)).toMatchObject({ code: 'UNAUTHORIZED' });
    expect(await settled(owner.pk)).toEqual(before);
    expect((await sock.req('stored', { kinds: [1059, 25805], '#p': [stranger.pk] })).events).toEqual([]);
    sock.close();
  }, 40_000);

  it(`strangers' prompts and the answers they get hold at most ${INBOX_SHARE * 100} % of stored_bytes; the owner's note is still accepted; the sums match what is stored`, async () => {
    const { owner, agent } = await ownerWithPrivateAgent();
    const share = Math.floor(STORED_BYTES * INBOX_SHARE);
    const before = await settled(owner.pk);
    const sock = await connect(`/r/${owner.pk}`);
    // Plain and gift-wrapped (1059) prompts from fresh keys: each stored, each refused by the agent
    // with a stored answer (plain 25805, or 25805 wrapped in 1059) echoing the 256-character session.
    let refused = 0;
    // (one key each: an agent answers a sender's refusals once per window)
    for (let n = 0; n < 24; n++) {
      const [k, w] = [keys(), keys()];
      for (const e of [sign(k, prompt(k, agent)), wrapped(w, agent, 1059)]) {
        const ok = await sock.publish(e);
        if (!ok[2]) {
          expect(ok[3]).toBe('restricted: storage quota: this shard has no room for more events from others for now'); // no figure for a stranger
          refused++;
        }
      }
    }
    expect(refused).toBeGreaterThan(0);
    const after = await settled(owner.pk);
    const counts = await inboxCounts(owner.pk);
    expect(counts.running).toBe(counts.stored);
    expect(counts.stored).toBeLessThanOrEqual(share);
    expect(counts.stored).toBeGreaterThan(share - 3000); // the flood did fill the share
    expect(after.bytes - before.bytes).toBeLessThanOrEqual(share);
    const mine = await connect(`/r/${owner.pk}`);
    await mine.auth(owner);
    const note = sign(owner, { content: 'x'.repeat(2000) });
    expect(await mine.publish(note)).toEqual(['OK', note.id, true, '']);
    sock.close();
    mine.close();
  }, 90_000);

  it('gift wraps the owner and its agents publish to each other are the owner’s data: with the inbox share full, the owner’s wrapped prompt and its agent’s wrapped answer are stored; the sums match what is stored', async () => {
    const { owner, agent } = await ownerWithPrivateAgent();
    const share = Math.floor(STORED_BYTES * INBOX_SHARE);
    const sock = await connect(`/r/${owner.pk}`);
    // Strangers fill the inbox share with gift wraps to the agent (signed by one-time keys, like every wrap).
    let full = false;
    for (let n = 0; n < 200 && !full; n++) {
      const ok = await sock.publish(wrapped(keys(), agent, 1059));
      full = ok[2] === false;
    }
    expect(full).toBe(true);
    await settled(owner.pk);
    const mine = await connect(`/r/${owner.pk}`);
    await mine.auth(owner);
    await mine.req('answers', { kinds: [1059], '#p': [owner.pk] });
    const wrap = wrapped(owner, agent, 1059);
    expect(await mine.publish(wrap)).toEqual(['OK', wrap.id, true, '']);
    const answer = (await mine.next((f) => f[0] === 'EVENT' && f[1] === 'answers', 15_000))[2] as NostrEvent;
    const opened = unwrap(answer, owner.sk, cache, nobleVerifier);
    if (!opened.ok) throw new Error(opened.error);
    expect(opened.value.rumor.pubkey).toBe(agent);
    await settled(owner.pk);
    // Both are stored (only the agent may read the owner's wrap, so the shard's table is asked).
    const stored = await runInDurableObject(primary(owner.pk), (_i, state) =>
      state.storage.sql.exec<{ id: string }>('SELECT id FROM events WHERE id IN (?, ?) ORDER BY id', wrap.id, answer.id).toArray().map((r) => r.id),
    );
    expect(stored).toEqual([wrap.id, answer.id].sort());
    const counts = await inboxCounts(owner.pk);
    expect(counts.running).toBe(counts.stored);
    expect(counts.stored).toBeLessThanOrEqual(share);
    // A stranger's wrap is still the inbox's, and still refused.
    const late = wrapped(keys(), agent, 1059);
    expect((await sock.publish(late))[3]).toBe('restricted: storage quota: this shard has no room for more events from others for now');
    sock.close();
    mine.close();
  }, 90_000);

  it('an answer the shard refuses for good (its inbox share full, the prompt having fit) is followed by a short 25805; the owner’s session_resolved says it was not delivered, and why', async () => {
    const { owner, agent } = await ownerWithAgent();
    const stranger = keys();
    const c = await NipXxClient.open(agent, stranger, `/r/${owner.pk}`);
    const watch = await watchRunsEnded([agent], owner);
    try {
      // The echo answer repeats the prompt's 3,000 characters: with 1,500 bytes left once the
      // prompt is in, the prompt fits and the answer does not; the 25805 that follows does.
      const p = c.prompt({ ver: 1, message: 'm'.repeat(3000) });
      await fillInboxTo(owner.pk, countedBytes(p, eventJson(p)) + 1500);
      await c.send(p);
      const run = await c.collect(p.id, 15_000);
      expect(run.deltas.map((d) => d.text).join('')).toBe(`echo: ${'m'.repeat(3000)}`);
      expect(run.terminal.kind).toBe(25805);
      // no figure of the owner's plan for a stranger
      expect(run.terminal.payload).toEqual({ ver: 1, code: 'INTERNAL_ERROR', message: 'the answer could not be stored on this relay; the agent owner can see why' });
      await watch.until(1);
      expect(watch.resolved).toHaveLength(1);
      expect(watch.resolved[0]).toMatchObject({ run_id: p.id, outcome: 'response', delivered: false });
      expect(watch.resolved[0]!['detail']).toMatch(
        new RegExp(`^the relay refused the answer for good \\(wss?://[^ ]+/r/${owner.pk}: restricted: storage quota: events from others may hold 15000 of the 60000 stored bytes the owner’s plan allows on this shard\\); the client was told INTERNAL_ERROR$`),
      );
    } finally {
      watch.stop();
      c.sock.close();
    }
  }, 60_000);

  it('a gift-wrapped run’s answer refused for good is followed by a 25805 in an ephemeral gift wrap (21059), stored nowhere: it needs no room', async () => {
    const { owner, agent } = await ownerWithAgent();
    const c = await NipXxClient.open(agent, keys(), `/r/${owner.pk}`);
    try {
      const { wrap, rumorId } = c.wrappedPrompt({ ver: 1, message: 'w'.repeat(3000) });
      await fillInboxTo(owner.pk, countedBytes(wrap, eventJson(wrap)) + 100);
      await c.send(wrap);
      const run = await c.collect(rumorId, 15_000);
      expect(run.terminal.kind).toBe(25805);
      expect(run.terminal.event.kind).toBe(21059);
      expect(run.terminal.payload).toEqual({ ver: 1, code: 'INTERNAL_ERROR', message: 'the answer could not be stored on this relay; the agent owner can see why' });
      expect(await inboxRoom(owner.pk)).toBe(100);
    } finally {
      c.sock.close();
    }
  }, 60_000);
});
