// Over a real socket against `wrangler dev`: a shard answers a connection's pipelined messages in
// the order they were sent, and each sees the effect of the ones before it (AUTH → REQ for a gated
// kind is answered as authenticated; EVENT → REQ returns the event; EVENT → COUNT counts it), on a
// shard that has never been used before. (In the workerd tests @cloudflare/vitest-pool-workers 0.15
// awaits its own set-up before each Durable Object handler, so pipelined frames can reach the
// object out of order there: this property is checked here.)
import { describe, expect, inject, it } from 'vitest';
import WebSocket from 'ws';
import { finalizeEvent, generateSecretKey, getPublicKey } from 'nostr-tools/pure';

const relayUrl = inject('relayUrl').replace(/\/$/, '');
const now = () => Math.floor(Date.now() / 1000);

type Frame = unknown[];

/** A socket that records every frame; `until` waits for a count of frames matching `pred`. */
async function open(url: string) {
  const ws = new WebSocket(url);
  const frames: Frame[] = [];
  let wake: () => void = () => undefined;
  ws.on('message', (m: WebSocket.RawData) => {
    frames.push(JSON.parse(m.toString()) as Frame);
    wake();
  });
  await new Promise<void>((resolve, reject) => {
    ws.once('open', () => resolve());
    ws.once('error', reject);
  });
  const until = async (pred: (f: Frame) => boolean, count = 1, timeoutMs = 15_000): Promise<Frame[]> => {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const got = frames.filter(pred);
      if (got.length >= count) return got;
      if (Date.now() > deadline) throw new Error(`timed out; frames: ${JSON.stringify(frames).slice(0, 2000)}`);
      await new Promise<void>((r) => {
        const t = setTimeout(r, 200);
        wake = () => {
          clearTimeout(t);
          r();
        };
      });
    }
  };
  return { ws, frames, until, send: (f: Frame) => ws.send(JSON.stringify(f)) };
}

describe('pipelined messages on a fresh owner shard', () => {
  it('are answered in order, each after the effect of the ones before it', async () => {
    const ownerSk = generateSecretKey();
    const owner = getPublicKey(ownerSk);
    const readerSk = generateSecretKey();
    const reader = getPublicKey(readerSk);
    const url = `${relayUrl}/r/${owner}`;
    const s = await open(url);
    // A gated REQ before AUTH: refused, and it makes sure the connection has a challenge (sent on
    // connect, or with the refusal).
    s.send(['REQ', 'early', { kinds: [25803], '#p': [reader] }]);
    expect((await s.until((f) => f[1] === 'early'))[0]).toEqual(['CLOSED', 'early', expect.stringMatching(/^auth-required: /)]);
    const challenge = (await s.until((f) => f[0] === 'AUTH'))[0]![1] as string;
    s.frames.length = 0;

    const auth = finalizeEvent({ kind: 22242, created_at: now(), content: '', tags: [['relay', url], ['challenge', challenge]] }, readerSk);
    const notes = Array.from({ length: 10 }, (_, i) => finalizeEvent({ kind: 1, created_at: now(), content: `n${i}`, tags: [] }, ownerSk));
    const expected: string[] = [];
    s.send(['AUTH', auth]);
    expected.push('OK auth true');
    s.send(['REQ', 'gated', { kinds: [25803], '#p': [reader] }]);
    expected.push('EOSE gated');
    notes.forEach((e, i) => {
      s.send(['EVENT', e]);
      expected.push(`OK n${i} true`);
      s.send(['REQ', `q${i}`, { ids: [e.id] }]);
      expected.push(`EVENT q${i} n${i}`, `EOSE q${i}`);
      s.send(['COUNT', `c${i}`, { authors: [owner] }]);
      expected.push(`COUNT c${i} ${i + 1}`);
    });
    const label = new Map<string, string>([[auth.id, 'auth'], ...notes.map((e, i): [string, string] => [e.id, `n${i}`])]);
    const answers = (f: Frame) => f[0] !== 'AUTH';
    await s.until(answers, expected.length);
    const got = s.frames.filter(answers).map((f) => {
      if (f[0] === 'OK') return `OK ${label.get(f[1] as string)} ${String(f[2])}`;
      if (f[0] === 'EVENT') return `EVENT ${f[1] as string} ${label.get((f[2] as { id: string }).id)}`;
      if (f[0] === 'COUNT') return `COUNT ${f[1] as string} ${(f[2] as { count: number }).count}`;
      return `${f[0] as string} ${f[1] as string}`;
    });
    expect(got).toEqual(expected);
    s.ws.close();
  });
});
