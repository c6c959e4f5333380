// What a stranger can make the bridge do: requests per client per minute, requests in progress per
// client (through the relay, against server-everything), and requests per server per minute (the
// Limiter itself, with its clock moved), each refusal a JSON-RPC error -32029 `rate-limited: …`.
// Error answers are bounded too: bad requests count in the client's minute, a refusal is answered
// once per client per minute, and error answers in all at most ErrorAnswers' cap a minute.
import { beforeAll, describe, expect, it } from 'vitest';
import { RPC } from '../../src/shared/dvmcp.js';
import { ErrorAnswers, Limiter } from '../../workers/common/dvmcp-server/limits.js';
import { bridgeReady, directBridge, DvmcpClient, everythingUrl, expectErrorBudget, floodWithBadRequests } from './bridge-helpers.js';

let provider: string;

beforeAll(async () => {
  ({ provider } = await directBridge([{ id: 'lim', url: everythingUrl(), public: false }]));
  await bridgeReady(provider);
});

describe('bridge limits', () => {
  it('30 requests a minute per client key: the 31st is refused with rate-limited and the wait', async () => {
    const c = await DvmcpClient.open(provider);
    for (let i = 0; i < 30; i++) {
      // Distinct params: identical requests in one second would be one event (answered once).
      const a = await c.call('ping', { i }, { s: 'lim' });
      expect(a.content).toBe('{}');
    }
    const refused = await c.call('tools/list', {}, { s: 'lim' });
    expect(refused.result.ok).toBe(false);
    expect(!refused.result.ok && refused.result.error.code).toBe(RPC.RATE_LIMITED);
    expect(!refused.result.ok && refused.result.error.message).toMatch(/^rate-limited: more than 30 requests a minute from your key; retry in \d+ s$/);
    // Another key is not affected.
    const other = await DvmcpClient.open(provider);
    expect((await other.call('ping', undefined, { s: 'lim' })).content).toBe('{}');
    c.close();
    other.close();
  });

  it('4 requests in progress per client key: a 5th is refused while they run', async () => {
    const c = await DvmcpClient.open(provider);
    const running = [];
    for (let i = 1; i <= 4; i++) running.push(await c.send(c.request('tools/call', { name: 'trigger-long-running-operation', arguments: { duration: 2 + i, steps: 8 } }, { s: 'lim' })));
    // Each of them runs upstream once its first progress arrives (the first ends in 3 s).
    for (const id of running) {
      for (let t = 0; t < 100 && c.notifications(id).length === 0; t++) await new Promise((r) => setTimeout(r, 50));
    }
    const refused = await c.call('tools/list', {}, { s: 'lim' });
    expect(refused.result).toEqual({ ok: false, error: { code: RPC.RATE_LIMITED, message: 'rate-limited: 4 of your requests are in progress; retry in 1 s' } });
    for (const id of running) expect((await c.answer(id)).result.ok).toBe(true);
    const after = await c.call('tools/list', {}, { s: 'lim' });
    expect(after.result.ok).toBe(true);
    c.close();
  });

  it('per server: its requests a minute across all clients; the windows reset after a minute', () => {
    const limiter = new Limiter({ clientPerMinute: 100, clientConcurrent: 10, serverPerMinute: 3 });
    let clock = 1_000_000;
    limiter.now = () => clock;
    for (const client of ['a', 'b', 'c']) {
      const r = limiter.admit(client, ['s1']);
      expect(r.ok).toBe(true);
      if (r.ok) r.release();
    }
    const refused = limiter.admit('d', ['s1']);
    expect(refused).toEqual({ ok: false, error: { code: -32029, message: 'rate-limited: server s1 took 3 requests this minute; retry in 60 s' }, retryMs: 60_000 });
    expect(limiter.admit('d', ['s2']).ok).toBe(true);
    clock += 45_000;
    expect(limiter.admit('d', ['s1'])).toEqual({ ok: false, error: { code: -32029, message: 'rate-limited: server s1 took 3 requests this minute; retry in 15 s' }, retryMs: 15_000 });
    clock += 15_000;
    expect(limiter.admit('d', ['s1']).ok).toBe(true);
  });

  it('error answers: at most perMinute a minute in all; a refusal of a client once until the retry time it gave', () => {
    const answers = new ErrorAnswers(3);
    let clock = 1_000_000;
    answers.now = () => clock;
    const e = { code: RPC.RATE_LIMITED, message: 'rate-limited: too many; retry in 10 s' };
    expect(answers.refusal('a', e, 10_000)).toEqual({ ok: false, error: e });
    expect(answers.refusal('a', e, 10_000)).toEqual({ ok: false });
    clock += 9_999;
    expect(answers.refusal('a', e, 10_000)).toEqual({ ok: false });
    clock += 1;
    expect(answers.refusal('a', e, 10_000)).toEqual({ ok: false, error: e });
    expect(answers.allow()).toBe(true);
    // Three answered this minute: nothing more goes out, a refusal of another client neither.
    expect(answers.allow()).toBe(false);
    expect(answers.refusal('b', e, 1_000)).toEqual({ ok: false });
    clock = 1_060_000;
    expect(answers.refusal('b', e, 1_000)).toEqual({ ok: false, error: e });
  });

  it('a flood of bad requests from one key: 30 error answers a minute, one rate-limited refusal, the rest unanswered', async () => {
    const c = await DvmcpClient.open(provider);
    expectErrorBudget(await floodWithBadRequests(c, provider, 'lim'));
    c.close();
  });
});
