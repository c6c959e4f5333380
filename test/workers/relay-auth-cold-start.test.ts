// A shard handles a connection's messages in the order they arrive: the Wasm verifier is set up
// in the constructor (blockConcurrencyWhile), and the message handler does not await before its
// work is done. The runtime may deliver a connection's next message whenever a handler is
// suspended on an await (input gates only hold during storage operations), so these tests hand the
// shard two messages back to back, the second while the first would still be pending, through the
// real handler of the real server socket.
//
// (Pipelining through the test WebSocket cannot show this: in vitest-pool-workers the frames a test
// sends reach the Durable Object out of order — even synchronous COUNTs come back reversed in
// batches — while over a real socket against `wrangler dev` they arrive in order.)
import { runInDurableObject } from 'cloudflare:test';
import { describe, expect, it } from 'vitest';
import { RelayShard } from '../../workers/relay-do/shard.js';
import { onceAtATime } from '../../workers/common/verifier.js';
import { connect, freshOwner, keys, sign, socketObject, type TestSocket } from './helpers.js';

/** Delivers the frames to the shard's only socket (on its primary, or its edge) as the runtime would, without waiting between them. */
async function deliverBackToBack(owner: string, frames: unknown[][]): Promise<void> {
  await runInDurableObject(await socketObject(owner), async (instance: RelayShard, state) => {
    const [ws] = state.getWebSockets();
    if (!ws) throw new Error('the shard has no socket');
    await Promise.all(frames.map((f) => instance.webSocketMessage(ws, JSON.stringify(f))));
  });
}

async function freshShard(): Promise<{ owner: ReturnType<typeof freshOwner>; s: TestSocket }> {
  const owner = freshOwner();
  return { owner, s: await connect(`/r/${owner.pk}`) };
}

describe('a fresh shard keeps the order of a connection’s messages', () => {
  it('AUTH then a REQ for a gated kind: the REQ is answered as authenticated', async () => {
    const { owner, s } = await freshShard();
    const reader = keys();
    const auth = sign(reader, { kind: 22242, content: '', tags: [['relay', s.url], ['challenge', s.challenge]] });
    await deliverBackToBack(owner.pk, [['AUTH', auth], ['REQ', 'gated', { kinds: [25803], '#p': [reader.pk] }]]);
    expect(await s.next((f) => f[1] === auth.id || f[1] === 'gated')).toEqual(['OK', auth.id, true, '']);
    expect(await s.next((f) => f[1] === 'gated')).toEqual(['EOSE', 'gated']);
  });

  it('EVENT then REQ: the REQ returns the event (before its EOSE)', async () => {
    const { owner, s } = await freshShard();
    const note = sign(owner, { content: 'first' });
    await deliverBackToBack(owner.pk, [['EVENT', note], ['REQ', 'note', { ids: [note.id] }]]);
    expect(await s.next((f) => f[1] === note.id || f[1] === 'note')).toEqual(['OK', note.id, true, '']);
    expect(await s.next((f) => f[1] === 'note')).toEqual(['EVENT', 'note', note]);
    expect(await s.next((f) => f[1] === 'note')).toEqual(['EOSE', 'note']);
  });

  it('EVENT then COUNT, AUTH then EVENT needing that AUTH: each sees the one before', async () => {
    const { owner, s } = await freshShard();
    const note = sign(owner, { content: 'counted' });
    const auth = sign(owner, { kind: 22242, content: '', tags: [['relay', s.url], ['challenge', s.challenge]] });
    const protectedNote = sign(owner, { content: 'protected', tags: [['-']] });
    await deliverBackToBack(owner.pk, [
      ['EVENT', note],
      ['COUNT', 'n', { ids: [note.id] }],
      ['AUTH', auth],
      ['EVENT', protectedNote],
    ]);
    expect(await s.next((f) => f[1] === 'n')).toEqual(['COUNT', 'n', { count: 1 }]);
    expect(await s.next((f) => f[1] === protectedNote.id)).toEqual(['OK', protectedNote.id, true, '']);
  });
});

describe('onceAtATime (the verifier loader)', () => {
  it('does not keep a failed setup: the next call tries again', async () => {
    let calls = 0;
    const load = onceAtATime(async () => {
      calls += 1;
      if (calls === 1) throw new Error('setup failed');
      return calls;
    });
    await expect(load()).rejects.toThrow('setup failed');
    expect(load.ready).toBeUndefined();
    expect(await load()).toBe(2);
    expect(await load()).toBe(2);
    expect(load.ready).toBe(2);
    expect(calls).toBe(2);
  });

  it('shares one pending setup between concurrent callers', async () => {
    let calls = 0;
    const load = onceAtATime(async () => ++calls);
    expect(await Promise.all([load(), load(), load()])).toEqual([1, 1, 1]);
  });
});
