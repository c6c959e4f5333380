// Strangers may write to an owner's shard (its inbox: events addressed to the owner or its agents),
// but not spend the owner's plan: events from others hold at most INBOX_SHARE of stored_bytes, and
// their events per second are counted apart from the owner's own. Only the owner's side is told the
// plan's figures; a stranger's refusal names none.
import { env, runInDurableObject } from 'cloudflare:test';
import { describe, expect, it } from 'vitest';
import { countedBytes, INBOX_SHARE } from '../../workers/relay-do/owner-plan.js';
import type { NostrEvent } from '../../src/shared/event.js';
import { api } from './api-helpers.js';
import { connect, keys, sign, type Keys } from './helpers.js';
import { TEST_ADMIN_SK } from './test-keys.js';

async function addOwner(plan: string): Promise<Keys> {
  const k = keys();
  const r = await api(TEST_ADMIN_SK, 'POST', '/api/admin/owners', { pubkey: k.pk, plan });
  expect(r.status).toBe(201);
  return k;
}

/** What the relay counts an event for (owner-plan.ts: its JSON and the copies of its tag values the indexes keep). */
const countOf = (e: NostrEvent) => countedBytes(e, JSON.stringify(e));

describe('the inbox of an owner shard under its plan', () => {
  it(`events from others hold at most ${INBOX_SHARE * 100} % of stored_bytes; the owner still has the rest`, async () => {
    const owner = await addOwner('inbox_shard'); // stored_bytes 4000: 1000 for others
    const stranger = keys();
    const sock = await connect(`/r/${owner.pk}`);
    const letter = (n: number) => sign(stranger, { content: `${n}`.padEnd(30, '.'), tags: [['p', owner.pk]] });
    expect(countOf(letter(0))).toBeGreaterThan(1000 / 2); // the p tag's value counts three times (owner-plan.ts countedBytes)
    expect(countOf(letter(0))).toBeLessThan(1000);
    const answers = [];
    for (let n = 0; n < 8; n++) answers.push((await sock.publish(letter(n))).slice(2));
    expect(answers[0]).toEqual([true, '']);
    for (const a of answers.slice(1)) expect(a).toEqual([false, 'restricted: storage quota: this shard has no room for more events from others for now']);
    await sock.auth(owner);
    const own = sign(owner, { content: 'x'.repeat(2500) });
    expect(countOf(own)).toBeGreaterThan(4000 - 8 * countOf(letter(0)));
    expect(await sock.publish(own)).toEqual(['OK', own.id, true, '']);
    sock.close();
  });

  it('events per second from others are counted apart from the owner’s', async () => {
    const owner = await addOwner('slow_shard'); // 2 events per second
    const frozen = Date.now();
    await runInDurableObject(env.RELAY_SHARD.get(env.RELAY_SHARD.idFromName(`owner:${owner.pk}`)), (i) => {
      (i as unknown as { clock: () => number }).clock = () => frozen;
    });
    const stranger = keys();
    const outside = await connect(`/r/${owner.pk}`);
    const letter = (n: number) => sign(stranger, { content: `letter ${n}`, tags: [['p', owner.pk]] });
    expect((await outside.publish(letter(1)))[2]).toBe(true);
    expect((await outside.publish(letter(2)))[2]).toBe(true);
    expect((await outside.publish(letter(3))).slice(2)).toEqual([false, 'rate-limited: too many events from others on this shard; retry in a second']);
    const mine = await connect(`/r/${owner.pk}`);
    await mine.auth(owner);
    for (const n of [1, 2]) expect((await mine.publish(sign(owner, { content: `mine ${n}` })))[2]).toBe(true);
    expect((await mine.publish(sign(owner, { content: 'mine 3' })))[3]).toBe('rate-limited: the owner’s plan allows 2 events per second on this shard');
    outside.close();
    mine.close();
  });

  it('a stranger sending the owner’s own events again spends the bucket of others, never the owner’s', async () => {
    const owner = await addOwner('slow_shard'); // 2 events per second
    const frozen = Date.now();
    await runInDurableObject(env.RELAY_SHARD.get(env.RELAY_SHARD.idFromName(`owner:${owner.pk}`)), (i) => {
      (i as unknown as { clock: () => number }).clock = () => frozen;
    });
    const mine = await connect(`/r/${owner.pk}`);
    await mine.auth(owner);
    const profile = sign(owner, { kind: 0, content: '{"name":"now"}' });
    expect(await mine.publish(profile)).toEqual(['OK', profile.id, true, '']); // one of the owner's 2
    const older = sign(owner, { kind: 0, content: '{"name":"before"}', created_at: profile.created_at - 60 });
    const ephemeral = sign(owner, { kind: 20001, content: 'typing' });
    const stranger = await connect(`/r/${owner.pk}`);
    await stranger.auth(keys());
    // Stored, or an older version: answered before any bucket is asked, however often.
    for (let n = 0; n < 5; n++) expect(await stranger.publish(profile)).toEqual(['OK', profile.id, true, 'duplicate: already have this event']);
    for (let n = 0; n < 5; n++) expect(await stranger.publish(older)).toEqual(['OK', older.id, false, 'duplicate: a newer version of this event is already stored']);
    // New (an ephemeral event is, each time): counted as from others, whoever signed it.
    expect((await stranger.publish(ephemeral)).slice(2)).toEqual([true, '']);
    expect((await stranger.publish(ephemeral)).slice(2)).toEqual([true, '']);
    expect((await stranger.publish(ephemeral)).slice(2)).toEqual([false, 'rate-limited: too many events from others on this shard; retry in a second']);
    const note = sign(owner, { content: 'mine' });
    expect(await mine.publish(note)).toEqual(['OK', note.id, true, '']);
    expect((await mine.publish(sign(owner, { content: 'one too many' })))[3]).toBe('rate-limited: the owner’s plan allows 2 events per second on this shard');
    stranger.close();
    mine.close();
  });
});
