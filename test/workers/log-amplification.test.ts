// What a stranger's events may make the Workers log (Trust: log amplification): each event a
// bridge or a hosted agent drops or cannot answer because of what a stranger sent is counted, and
// logged as one summary line per kind of drop at most once a minute, with the counts by reason
// (workers/common/drop-summary.ts): the first at once, the rest in one line once the minute has
// passed (written by the next such event, or by the watchdog alarm). The kinds tested here:
//   - a bridge: gift wraps that do not open, zap receipts it does not take, answers its relay
//     refuses (the client asked to vanish, NIP-62: every wrap to it is refused `blocked:`), and
//     encrypted requests to a server with encryption off (the DVMCP dispatcher, before admission);
//   - a hosted agent: encrypted DVMCP requests with its encryption off, answers its relay refuses,
//     and the events of a run for a client that vanished (its outbox: each event refused `blocked:`).
// The events are handed to the object's onEvent as its public shard subscription does (as in
// bridge-amplification.test.ts), so that the test knows when each was handled; the clock the
// summary reads is moved past the minute, then the watchdog alarm runs.
import { env, runDurableObjectAlarm, runInDurableObject } from 'cloudflare:test';
import { describe, expect, it, vi } from 'vitest';
import type { NostrEvent } from '../../src/shared/event.js';
import { wrapDvmcp } from '../../src/shared/dvmcp-wrap.js';
import { ConversationKeyCache } from '../../src/shared/nip44.js';
import { DROP_LOG_WINDOW_MS, type DropSummary } from '../../workers/common/drop-summary.js';
import { ALL_RELAYS } from '../../workers/relay-do/vanish.js';
import { createTestAgent, NipXxClient } from './agent-helpers.js';
import { announcements, directBridge, DvmcpClient, everythingUrl } from './bridge-helpers.js';
import { BASE, keys, now, sign, type Keys } from './helpers.js';

const N = 50;
/** Answers to a client that vanished: fewer than the 30 requests a client may send a minute. */
const ANSWERS = 20;
/** Prompts of one client whose runs are answered (within the raised prompt windows). */
const PROMPTS = 5;
const PUBLIC_URL = `${BASE.replace(/^http/, 'ws')}/`;
const VANISHED = 'blocked: this pubkey asked to vanish from this relay (NIP-62)';
const cache = new ConversationKeyCache(64);

type Stub = DurableObjectStub;
const bridgeOf = (owner: string): Stub => env.BRIDGE.get(env.BRIDGE.idFromName(owner));
const agentOf = (agent: string): Stub => env.AGENT.get(env.AGENT.idFromName(agent));
/** Hands `e` to the object behind `stub` (a bridge or an agent) as its public shard subscription does, and waits until it is handled. */
const deliver = (stub: Stub, e: NostrEvent) =>
  runInDurableObject(stub, (i) => (i as unknown as { onEvent(e: NostrEvent, url: string): Promise<void> }).onEvent(e, PUBLIC_URL));

/** Every line written with console.log, console.warn or console.error while `run` ran. */
async function consoleLines(run: () => Promise<unknown>): Promise<string[]> {
  const spies = [vi.spyOn(console, 'log'), vi.spyOn(console, 'warn'), vi.spyOn(console, 'error')];
  try {
    await run();
    return spies.flatMap((s) => s.mock.calls.map((args) => args.map(String).join(' ')));
  } finally {
    for (const s of spies) s.mockRestore();
  }
}

/** The lines the object's watchdog alarm writes once the summary's minute has passed. */
async function afterTheMinute(stub: Stub): Promise<string[]> {
  await runInDurableObject(stub, (i) => {
    const later = Date.now() + DROP_LOG_WINDOW_MS;
    (i as unknown as { drops: DropSummary }).drops.now = () => later;
  });
  return consoleLines(async () => expect(await runDurableObjectAlarm(stub)).toBe(true));
}

/** `count` gift-wrapped DVMCP requests of `method` from `k` to `to` (a provider or an agent), each a fresh id. */
function wrappedRequests(k: Keys, to: string, method: string, count: number, s?: string): NostrEvent[] {
  return Array.from({ length: count }, (_, n) =>
    wrapDvmcp(
      { kind: 25910, created_at: now(), tags: [['p', to], ['method', method], ...(s === undefined ? [] : [['s', s]])], content: JSON.stringify({ method, params: { n } }) },
      k.sk,
      k.pk,
      to,
      cache,
      'wrapped',
    ),
  );
}

/** `c`'s key asks the public shard to vanish (ahead of now: every gift wrap to it, backdated or not, is refused). */
async function vanish(c: DvmcpClient | NipXxClient): Promise<void> {
  const request = sign(c.k, { kind: 62, content: '', tags: [['relay', ALL_RELAYS]], created_at: now() + 600 });
  expect((await c.sock.publish(request))[2]).toBe(true);
}

const summary = (prefix: string, count: number, what: string, reason: string): string =>
  `${prefix}: ${count} ${what} since the last report (${count} ${JSON.stringify(reason)}); reported at most once a minute`;

describe('a bridge logs what strangers send it as one line a minute per kind, with the counts by reason', () => {
  it(`${N} gift wraps that do not open: one line at once, the other ${N - 1} in one line once the minute has passed`, async () => {
    const { owner, provider } = await directBridge([{ id: 'a', url: everythingUrl(), public: false }]);
    const stub = bridgeOf(owner);
    const junk = Array.from({ length: N }, () => sign(keys(), { kind: 1059, tags: [['p', provider]], content: 'junk' }));
    const lines = await consoleLines(async () => {
      for (const e of junk) await deliver(stub, e);
    });
    const reason = 'cannot decrypt gift wrap: invalid payload length';
    expect(lines.filter((l) => l.includes('gift wrap'))).toEqual([summary(`bridge: provider ${provider}`, 1, 'gift wrap refused', reason)]);
    expect((await afterTheMinute(stub)).filter((l) => l.includes('gift wrap'))).toEqual([summary(`bridge: provider ${provider}`, N - 1, 'gift wraps refused', reason)]);
  });

  it(`${N} zap receipts it does not take: one line at once, the other ${N - 1} in one line once the minute has passed`, async () => {
    const { owner, provider } = await directBridge([{ id: 'a', url: everythingUrl(), public: false }]);
    const stub = bridgeOf(owner);
    const receipts = Array.from({ length: N }, (_, n) => sign(keys(), { kind: 9735, tags: [['p', provider], ['bolt11', `lnbc${n}junk`]], content: '' }));
    const lines = await consoleLines(async () => {
      for (const e of receipts) await deliver(stub, e);
    });
    const reason = 'this bridge does not take zaps';
    expect(lines.filter((l) => l.includes('zap receipt'))).toEqual([summary(`bridge: provider ${provider}`, 1, 'zap receipt ignored', reason)]);
    expect((await afterTheMinute(stub)).filter((l) => l.includes('zap receipt'))).toEqual([summary(`bridge: provider ${provider}`, N - 1, 'zap receipts ignored', reason)]);
  });

  it(`${ANSWERS} answers its relay refuses (the client asked to vanish): one line at once, the other ${ANSWERS - 1} once the minute has passed`, async () => {
    const { owner, provider } = await directBridge([{ id: 'a', url: everythingUrl(), public: false }]);
    const stub = bridgeOf(owner);
    const c = await DvmcpClient.open(provider);
    await vanish(c);
    const pings = wrappedRequests(c.k, provider, 'ping', ANSWERS);
    const lines = await consoleLines(async () => {
      for (const e of pings) await deliver(stub, e);
    });
    const reason = `${PUBLIC_URL}: ${VANISHED}`;
    expect(lines.filter((l) => l.includes('vanish'))).toEqual([summary(`bridge: provider ${provider}`, 1, 'event to a client refused by the relay', reason)]);
    expect((await afterTheMinute(stub)).filter((l) => l.includes('vanish'))).toEqual([summary(`bridge: provider ${provider}`, ANSWERS - 1, 'events to a client refused by the relay', reason)]);
    c.close();
  });

  it(`${N} encrypted requests to a server with encryption off (refused before admission): one line at once, the other ${N - 1} once the minute has passed`, async () => {
    const { owner, provider } = await directBridge([{ id: 'clear', url: everythingUrl(), public: true, encryption: false }]);
    const stub = bridgeOf(owner);
    const requests = wrappedRequests(keys(), provider, 'tools/list', N, 'clear');
    const lines = await consoleLines(async () => {
      for (const e of requests) await deliver(stub, e);
    });
    const what = (count: number) => `encrypted request${count === 1 ? '' : 's'} to a server with encryption off not answered`;
    expect(lines.filter((l) => l.includes('encrypt'))).toEqual([summary(`bridge: provider ${provider}`, 1, what(1), 'server clear')]);
    expect((await afterTheMinute(stub)).filter((l) => l.includes('encrypt'))).toEqual([summary(`bridge: provider ${provider}`, N - 1, what(N - 1), 'server clear')]);
  });
});

describe('a hosted agent logs what strangers send its DVMCP server as one line a minute per kind', () => {
  it(`${N} encrypted requests with its encryption off (refused before admission): one line at once, the other ${N - 1} once the minute has passed`, async () => {
    const agent = await createTestAgent({ dvmcp: { enabled: true, encryption: false } });
    const stub = agentOf(agent);
    const requests = wrappedRequests(keys(), agent, 'tools/list', N);
    const lines = await consoleLines(async () => {
      for (const e of requests) await deliver(stub, e);
    });
    const what = (count: number) => `encrypted request${count === 1 ? '' : 's'} to a server with encryption off not answered`;
    expect(lines.filter((l) => l.includes('encrypt'))).toEqual([summary(`agent ${agent}`, 1, what(1), 'server agent')]);
    expect((await afterTheMinute(stub)).filter((l) => l.includes('encrypt'))).toEqual([summary(`agent ${agent}`, N - 1, what(N - 1), 'server agent')]);
  });

  it(`${ANSWERS} answers its relay refuses (the client asked to vanish): one line at once, the other ${ANSWERS - 1} once the minute has passed`, async () => {
    const agent = await createTestAgent({ dvmcp: { enabled: true } });
    await announcements(agent, [31316], (es) => es.length > 0, '/');
    const stub = agentOf(agent);
    const c = await DvmcpClient.open(agent);
    await vanish(c);
    const pings = wrappedRequests(c.k, agent, 'ping', ANSWERS);
    const lines = await consoleLines(async () => {
      for (const e of pings) await deliver(stub, e);
    });
    const reason = `${PUBLIC_URL}: ${VANISHED}`;
    expect(lines.filter((l) => l.includes('vanish'))).toEqual([summary(`agent ${agent}`, 1, 'event to a client refused by the relay', reason)]);
    expect((await afterTheMinute(stub)).filter((l) => l.includes('vanish'))).toEqual([summary(`agent ${agent}`, ANSWERS - 1, 'events to a client refused by the relay', reason)]);
    c.close();
  });

  it(`${PROMPTS} runs for a client that vanished: their answers, each refused by the relay, make one line at once and the rest one line once the minute has passed`, async () => {
    const agent = await createTestAgent({ limits: { prompts_per_minute: 100, agent_prompts_per_minute: 100, max_concurrent_runs: PROMPTS } });
    const stub = agentOf(agent);
    const c = await NipXxClient.open(agent, keys(), '/');
    await vanish(c);
    const prompts = Array.from({ length: PROMPTS }, (_, n) => c.wrappedPrompt({ ver: 1, message: `answer me ${n}` }));
    const refused = () => runInDurableObject(stub, (_i, state) => state.storage.sql.exec<{ n: number }>("SELECT count(*) AS n FROM runs WHERE refused IS NOT NULL").one().n);
    const lines = await consoleLines(async () => {
      for (const p of prompts) await c.send(p.wrap);
      // Each run's terminal event is refused for good (blocked:) and recorded so.
      for (let i = 0; i < 300 && (await refused()) < PROMPTS; i++) await new Promise((r) => setTimeout(r, 50));
      expect(await refused()).toBe(PROMPTS);
    });
    const reason = `${PUBLIC_URL}: ${VANISHED}`;
    expect(lines.filter((l) => l.includes('vanish'))).toEqual([summary(`agent ${agent}`, 1, 'event to a client refused by the relay', reason)]);
    expect((await afterTheMinute(stub)).filter((l) => l.includes('vanish'))).toEqual([summary(`agent ${agent}`, PROMPTS - 1, 'events to a client refused by the relay', reason)]);
    c.sock.close();
  });
});
