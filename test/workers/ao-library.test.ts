// NIP-AO client library (src/shared/ao-emitter.ts, ao-frame.ts, ao-payloads.ts, ao-control.ts, paced-publisher.ts,
// ao-observer.ts) inside workerd:
// frames go through the real relay over real WebSockets (RelayClient with a fetch-upgrade socket),
// except where a test needs exact control of timing or of malformed input (injected publish /
// subscribe functions with the same shapes).
import { env, SELF } from 'cloudflare:test';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { buildControlFrame, readControlFrame, sendControl } from '../../src/shared/ao-control.js';
import { TelemetryEmitter } from '../../src/shared/ao-emitter.js';
import { chunkForJson, coalescedItems, joinSplit, type Payload } from '../../src/shared/ao-payloads.js';
import type { EmitterTimers, PublishOutcome } from '../../src/shared/paced-publisher.js';
import { Observer, RingBuffer, type ObservedFrame, type SeqGap } from '../../src/shared/ao-observer.js';
import type { NostrEvent } from '../../src/shared/event.js';
import type { Filter } from '../../src/shared/filters.js';
import { AO_MAX_PAYLOAD_BYTES, timestampMillis } from '../../src/shared/nip-ao.js';
import { decrypt, encrypt, getConversationKey } from '../../src/shared/nip44.js';
import { signAttestation } from '../../src/shared/nip-oa.js';
import { RelayClient } from '../../src/shared/relay-client.js';
import { keys, now, sign, type Keys } from './helpers.js';

const RFC3339_MS = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/;
const utf8 = new TextEncoder();
const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

// ---- relay plumbing ----

const clients: RelayClient[] = [];
afterEach(() => {
  vi.useRealTimers();
  for (const c of clients.splice(0)) c.close();
});

/** A RelayClient for `path` that authenticates as `k` (with extra tags in its AUTH event). */
function relayClient(path: string, k: Keys, extraAuthTags: string[][] = []): RelayClient {
  const c = new RelayClient({
    url: `ws://relay.test${path}`,
    socket: async (u) => {
      const res = await SELF.fetch(u.replace(/^ws/, 'http'), { headers: { Upgrade: 'websocket' } });
      const ws = res.webSocket;
      if (!ws) throw new Error(`no upgrade: ${res.status}`);
      ws.accept();
      return ws;
    },
    auth: async (t) => sign(k, { ...t, tags: [...t.tags, ...extraAuthTags] }),
    reconnect: false,
  });
  clients.push(c);
  return c;
}

const provision = (owner: string, agent: string) =>
  env.RELAY_SHARD.get(env.RELAY_SHARD.idFromName(`owner:${owner}`)).provisionAgent(agent, owner);

interface World {
  owner: Keys;
  agent: Keys;
  path: string;
  agentClient: RelayClient;
  ownerClient: RelayClient;
}

/** Owner + agent proven on the owner's shard (provisioned), both connected and authenticated. */
async function world(): Promise<World> {
  const owner = keys();
  const agent = keys();
  const path = `/r/${owner.pk}`;
  await provision(owner.pk, agent.pk);
  const agentClient = relayClient(path, agent);
  const ownerClient = relayClient(path, owner);
  expect(await agentClient.authenticate()).toMatchObject({ ok: true });
  expect(await ownerClient.authenticate()).toMatchObject({ ok: true });
  return { owner, agent, path, agentClient, ownerClient };
}

/** An Observer on the owner's connection; resolves once the relay has confirmed the REQ (EOSE). */
async function liveObserver(
  w: World,
  extra: Partial<ConstructorParameters<typeof Observer>[0]> = {},
  tap?: (e: NostrEvent) => void,
): Promise<Observer> {
  let eose!: () => void;
  const ready = new Promise<void>((r) => (eose = r));
  const closed: string[] = [];
  const obs = new Observer({
    ownerSecretKey: w.owner.sk,
    agents: [w.agent.pk],
    subscribe: (filters, opts) =>
      w.ownerClient.subscribe(filters, {
        ...opts,
        onEvent: (e) => {
          tap?.(e);
          opts.onEvent(e);
        },
        onEose: () => eose(),
      }),
    publish: (e) => w.ownerClient.publish(e),
    onClosed: (m) => closed.push(m),
    ...extra,
  });
  obs.start();
  await Promise.race([ready, sleep(3000).then(() => Promise.reject(new Error(`no EOSE; closed: ${closed.join('; ')}`)))]);
  return obs;
}

async function waitFor(pred: () => boolean, what: string, timeoutMs = 8000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!pred()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(10);
  }
}

// ---- frame helpers ----

/** Decrypts a telemetry event as the owner: the parsed ObserverEvent and its plaintext size. */
function open(e: NostrEvent, owner: Keys): { body: Record<string, unknown>; bytes: number } {
  const r = decrypt(e.content, getConversationKey(owner.sk, e.pubkey));
  if (!r.ok) throw new Error(r.error);
  return { body: JSON.parse(r.value) as Record<string, unknown>, bytes: utf8.encode(r.value).length };
}

/** A hand-made telemetry event (for malformed input the emitter would never produce). */
function telemetry(
  signer: Keys,
  owner: string,
  body: unknown,
  o: { agentTag?: string; frame?: string; p?: string; created_at?: number; content?: string } = {},
): NostrEvent {
  const content = o.content ?? encrypt(typeof body === 'string' ? body : JSON.stringify(body), getConversationKey(signer.sk, owner));
  return sign(signer, {
    kind: 24200,
    created_at: o.created_at,
    content,
    tags: [['p', o.p ?? owner], ['agent', o.agentTag ?? signer.pk], ['frame', o.frame ?? 'telemetry']],
  });
}

const body = (seq: number, extra: Record<string, unknown> = {}) => ({
  seq,
  timestamp: new Date().toISOString(),
  kind: 'acp_read',
  agentIndex: null,
  channelId: null,
  sessionId: 's1',
  turnId: null,
  payload: {},
  ...extra,
});

/** A publish function that records events and answers from a script (default: OK). */
function fakeRelay(answer: (e: NostrEvent, n: number) => PublishOutcome = () => ({ ok: true, message: '' })) {
  const events: NostrEvent[] = [];
  let n = 0;
  return {
    events,
    publish: async (e: NostrEvent) => {
      events.push(e);
      return answer(e, n++);
    },
  };
}

/** A manual clock whose sleeps advance it (records every sleep); `after` timers never fire. */
function manualTime(start = Date.now()) {
  let t = start;
  const sleeps: number[] = [];
  const timers: EmitterTimers = {
    sleep: async (ms) => {
      sleeps.push(ms);
      t += ms;
    },
    after: () => () => undefined,
  };
  return { now: () => t, advance: (ms: number) => (t += ms), sleeps, timers };
}

/** An Observer fed by hand (injected subscribe) that records every callback. */
function handObserver(owner: Keys, agents: string[], o: Partial<ConstructorParameters<typeof Observer>[0]> = {}) {
  const rejected: Array<[string, string]> = [];
  const ignored: string[] = [];
  const gaps: SeqGap[] = [];
  const frames: ObservedFrame[] = [];
  let feed: ((e: NostrEvent) => void) | undefined;
  const filters: Filter[][] = [];
  const obs = new Observer({
    ownerSecretKey: owner.sk,
    agents,
    subscribe: (f, opts) => {
      filters.push(f);
      feed = opts.onEvent;
      return { close: () => (feed = undefined) };
    },
    onRejected: (reason, e) => rejected.push([reason, e.id]),
    onIgnored: (reason) => ignored.push(reason),
    onGap: (g) => gaps.push(g),
    onFrame: (f) => frames.push(f),
    ...o,
  });
  obs.start();
  return { obs, rejected, ignored, gaps, frames, filters, push: (e: NostrEvent) => feed!(e) };
}

// ---- emitter ----

describe('TelemetryEmitter: envelope', () => {
  it('seq counts from 0 per session, timestamps are RFC 3339 with ms, unknown ids are null (through the relay)', async () => {
    const w = await world();
    const obs = await liveObserver(w);
    const em = new TelemetryEmitter({ agentSecretKey: w.agent.sk, owner: w.owner.pk, publish: (e) => w.agentClient.publish(e) });
    expect(em.turnStarted({}, { sessionId: 'A', turnId: 't1', channelId: 'c1', agentIndex: 0 }).ok).toBe(true);
    em.acpWrite({ method: 'prompt' }, { sessionId: 'A', turnId: 't1' });
    em.turnStarted({}); // no ids at all
    em.acpRead({ text: 'x' }, { sessionId: 'B' });
    em.sessionResolved({ reason: 'done' }, { sessionId: 'A' });
    await em.flush();
    expect(em.stats).toMatchObject({ emitted: 5, frames: 5, sent: 5, dropped: 0, queued: 0 });
    await waitFor(() => obs.stats.accepted === 5, '5 frames');
    const got = obs.frames().map((f) => f.frame);
    expect(got.map((f) => [f.sessionId, f.seq, f.kind])).toEqual([
      ['A', 0, 'turn_started'],
      ['A', 1, 'acp_write'],
      [null, 0, 'turn_started'],
      ['B', 0, 'acp_read'],
      ['A', 2, 'session_resolved'],
    ]);
    for (const f of got) expect(f.timestamp).toMatch(RFC3339_MS);
    const ts = got.map((f) => timestampMillis(f.timestamp));
    expect([...ts].sort((a, b) => a - b)).toEqual(ts);
    expect(got[0]).toMatchObject({ agentIndex: 0, channelId: 'c1', turnId: 't1', payload: {} });
    expect(got[2]).toEqual({ seq: 0, timestamp: got[2]!.timestamp, kind: 'turn_started', agentIndex: null, channelId: null, sessionId: null, turnId: null, payload: {} });
    expect(got[1]).toMatchObject({ agentIndex: null, channelId: null, payload: { method: 'prompt' } });
    expect(obs.frames().every((f) => f.agent === w.agent.pk)).toBe(true);
    expect(obs.stats).toMatchObject({ gaps: 0, rejected: 0, duplicates: 0 });
  });

  it('uses the injected clock for timestamp and created_at, and the NIP-AO tags', async () => {
    const owner = keys();
    const agent = keys();
    const relay = fakeRelay();
    const t = Date.parse('2026-04-29T12:00:41.500Z');
    const em = new TelemetryEmitter({ agentSecretKey: agent.sk, owner: owner.pk, publish: relay.publish, now: () => t, agentIndex: 3 });
    em.acpWrite({ jsonrpc: '2.0', method: 'tools/call' }, { sessionId: 'a1b2', turnId: 'e5f6', channelId: '52a8' });
    await em.flush();
    const e = relay.events[0]!;
    expect(e.kind).toBe(24200);
    expect(e.created_at).toBe(Math.floor(t / 1000));
    expect(e.pubkey).toBe(agent.pk);
    expect(e.tags).toEqual([['p', owner.pk], ['agent', agent.pk], ['frame', 'telemetry']]);
    expect(open(e, owner).body).toEqual({
      seq: 0,
      timestamp: '2026-04-29T12:00:41.500Z',
      kind: 'acp_write',
      agentIndex: 3,
      channelId: '52a8',
      sessionId: 'a1b2',
      turnId: 'e5f6',
      payload: { jsonrpc: '2.0', method: 'tools/call' },
    });
  });

  it('refuses bad payloads as values and keeps the caller from mutating a queued frame', async () => {
    const owner = keys();
    const relay = fakeRelay();
    const em = new TelemetryEmitter({ agentSecretKey: keys().sk, owner: owner.pk, publish: relay.publish });
    const circular: Payload = {};
    circular.self = circular;
    expect(em.emit('acp_write', circular)).toEqual({ ok: false, error: expect.stringMatching(/^payload is not JSON-serialisable: /) });
    expect(em.emit('acp_write', [] as unknown as Payload)).toEqual({ ok: false, error: 'payload must be a JSON object' });
    expect(em.emit('', {})).toEqual({ ok: false, error: 'kind must be a non-empty string' });
    const p = { n: 1 };
    em.acpWrite(p);
    p.n = 2;
    await em.close();
    expect(em.emit('acp_write', {})).toEqual({ ok: false, error: 'emitter is closed' });
    expect(relay.events.map((e) => open(e, owner).body.payload)).toEqual([{ n: 1 }]);
    expect(em.stats).toMatchObject({ emitted: 1, frames: 1, sent: 1 });
  });
});

describe('TelemetryEmitter: coalescing', () => {
  it('merges consecutive acp_read chunks into one frame, content in order (through the relay)', async () => {
    const w = await world();
    const obs = await liveObserver(w);
    const em = new TelemetryEmitter({ agentSecretKey: w.agent.sk, owner: w.owner.pk, publish: (e) => w.agentClient.publish(e), coalesceMs: 200 });
    const chunks = Array.from({ length: 20 }, (_, i) => ({ text: `chunk ${i} ` }));
    for (const c of chunks) em.acpRead(c, { sessionId: 'S', turnId: 'T' });
    await sleep(300); // the window ends by itself
    await em.flush();
    expect(em.stats).toMatchObject({ emitted: 20, frames: 1, sent: 1, coalescedItems: 20 });
    await waitFor(() => obs.stats.accepted === 1, 'the coalesced frame');
    const [f] = obs.frames();
    expect(f!.frame.kind).toBe('acp_read');
    expect(f!.frame.seq).toBe(0);
    expect(coalescedItems(f!.frame.payload)).toEqual(chunks);
  });

  it('closes a batch on another kind, other ids, the end of the window, and maxCoalesced', async () => {
    const owner = keys();
    const relay = fakeRelay();
    const time = manualTime();
    const em = new TelemetryEmitter({
      agentSecretKey: keys().sk,
      owner: owner.pk,
      publish: relay.publish,
      now: time.now,
      timers: time.timers,
      coalesceMs: 50,
      maxCoalesced: 3,
      maxFramesPerSecond: Infinity,
    });
    const S = { sessionId: 'S' };
    em.acpRead({ i: 0 }, S);
    em.acpRead({ i: 1 }, S);
    em.acpWrite({ w: 'between' }, S); // another kind: the batch goes first
    em.acpRead({ i: 2 }, S);
    em.acpRead({ i: 3 }, { sessionId: 'S', turnId: 'other' }); // other ids
    em.acpRead({ i: 4 }, { sessionId: 'S', turnId: 'other' });
    time.advance(50); // the window (measured from the batch's first item) is over
    em.acpRead({ i: 5 }, { sessionId: 'S', turnId: 'other' });
    em.acpRead({ i: 6 }, S);
    em.acpRead({ i: 7 }, S);
    em.acpRead({ i: 8 }, S); // third item: maxCoalesced closes the batch at once
    em.acpRead({ i: 9 }, S);
    await em.flush();
    const payloads = relay.events.map((e) => open(e, owner).body);
    expect(payloads.map((b) => [b.seq, b.kind, b.payload])).toEqual([
      [0, 'acp_read', { coalesced: [{ i: 0 }, { i: 1 }] }],
      [1, 'acp_write', { w: 'between' }],
      [2, 'acp_read', { i: 2 }], // a batch of one keeps its payload
      [3, 'acp_read', { coalesced: [{ i: 3 }, { i: 4 }] }],
      [4, 'acp_read', { i: 5 }],
      [5, 'acp_read', { coalesced: [{ i: 6 }, { i: 7 }, { i: 8 }] }],
      [6, 'acp_read', { i: 9 }],
    ]);
    expect(payloads.flatMap((b) => coalescedItems(b.payload as Payload)).filter((p) => 'i' in (p as Payload))).toEqual(
      Array.from({ length: 10 }, (_, i) => ({ i })),
    );
  });

  it('starts a new frame rather than exceed 65,535 plaintext bytes', async () => {
    const owner = keys();
    const relay = fakeRelay();
    const em = new TelemetryEmitter({ agentSecretKey: keys().sk, owner: owner.pk, publish: relay.publish, maxFramesPerSecond: Infinity, coalesceMs: 10_000 });
    const big = 'y'.repeat(20_000);
    for (let i = 0; i < 7; i++) em.acpRead({ i, big });
    await em.flush();
    const opened = relay.events.map((e) => open(e, owner));
    expect(opened.length).toBe(3); // 3 + 3 + 1 items of ~20 KB
    for (const o of opened) expect(o.bytes).toBeLessThanOrEqual(AO_MAX_PAYLOAD_BYTES);
    expect(opened.flatMap((o) => coalescedItems(o.body.payload as Payload)).map((p) => (p as Payload).i)).toEqual([0, 1, 2, 3, 4, 5, 6]);
  });
});

describe('TelemetryEmitter: splitting', () => {
  it('sends a 200 KB payload as several frames of ≤ 65,535 plaintext bytes that reassemble (through the relay)', async () => {
    const w = await world();
    const events: NostrEvent[] = [];
    const obs = await liveObserver(w, {}, (e) => events.push(e));
    const em = new TelemetryEmitter({ agentSecretKey: w.agent.sk, owner: w.owner.pk, publish: (e) => w.agentClient.publish(e) });
    // Mixed content so that JSON escaping and multi-byte UTF-8 matter: quotes, backslashes,
    // control characters, 2-, 3- and 4-byte characters (surrogate pairs).
    const unit = 'plain "quoted" back\\slash\nnew\u0001ctl é € 😀 ';
    const text = unit.repeat(Math.ceil(200_000 / unit.length));
    const payload = { jsonrpc: '2.0', method: 'session/update', params: { text } };
    em.acpWrite(payload, { sessionId: 'big', turnId: 't' });
    em.turnStarted({}, { sessionId: 'big' });
    await em.flush();
    expect(utf8.encode(JSON.stringify(payload)).length).toBeGreaterThan(200_000);
    const parts = em.stats.frames - 1;
    expect(parts).toBeGreaterThanOrEqual(4);
    expect(em.stats).toMatchObject({ splitPayloads: 1, sent: parts + 1, dropped: 0 });
    await waitFor(() => obs.stats.accepted === parts + 1, 'all parts');
    expect(events.length).toBe(parts + 1);
    for (const e of events) expect(open(e, w.owner).bytes).toBeLessThanOrEqual(AO_MAX_PAYLOAD_BYTES);
    const frames = obs.frames().map((f) => f.frame);
    expect(frames.map((f) => f.seq)).toEqual(Array.from({ length: parts + 1 }, (_, i) => i));
    const splitFrames = frames.slice(0, parts);
    for (const [i, f] of splitFrames.entries()) {
      expect(f.kind).toBe('acp_write');
      expect(f.timestamp).toBe(frames[0]!.timestamp);
      expect(f.payload).toMatchObject({ split: 0, part: i, parts });
    }
    expect(joinSplit([...splitFrames].reverse().map((f) => f.payload))).toEqual({ ok: true, value: payload });
    expect(joinSplit(splitFrames.slice(1).map((f) => f.payload))).toEqual({ ok: false, error: `missing part(s) 0 of ${parts}` });
    expect(frames[parts]!.kind).toBe('turn_started');
  });

  it('chunkForJson respects the escaped size and never cuts a surrogate pair', () => {
    const s = '😀"a\u0000é'.repeat(50);
    const chunks = chunkForJson(s, 10);
    expect(chunks.join('')).toBe(s);
    for (const c of chunks) {
      expect(utf8.encode(JSON.stringify(c)).length - 2).toBeLessThanOrEqual(10);
      expect(c.charCodeAt(c.length - 1) >= 0xd800 && c.charCodeAt(c.length - 1) <= 0xdbff).toBe(false);
    }
  });
});

describe('TelemetryEmitter: pacing, retries, drops', () => {
  it('paces a burst of 150 frames to ≤ 100 per second through the real relay and loses none', { timeout: 30_000 }, async () => {
    const w = await world();
    const obs = await liveObserver(w);
    const attempts: number[] = [];
    const refusals: string[] = [];
    const em = new TelemetryEmitter({
      agentSecretKey: w.agent.sk,
      owner: w.owner.pk,
      publish: async (e) => {
        attempts.push(Date.now());
        const r = await w.agentClient.publish(e);
        if (!r.ok) refusals.push(r.message);
        return r;
      },
    });
    const started = Date.now();
    for (let i = 0; i < 150; i++) em.acpWrite({ i }, { sessionId: 'burst' });
    await em.flush();
    expect(Date.now() - started).toBeGreaterThanOrEqual(1000);
    for (let i = 0; i + 100 < attempts.length; i++) expect(attempts[i + 100]! - attempts[i]!).toBeGreaterThanOrEqual(1000);
    // Pacing keeps the relay from refusing (a rare refusal, from network jitter beyond the 50 ms
    // margin, would be a rate-limit that was retried, never a loss).
    expect(refusals.filter((m) => !m.startsWith('rate-limited: '))).toEqual([]);
    expect(em.stats).toMatchObject({ frames: 150, sent: 150, dropped: 0, droppedUnreported: 0, retries: refusals.length });
    await waitFor(() => obs.stats.accepted === 150, '150 frames');
    expect(obs.frames().map((f) => f.frame.seq)).toEqual(Array.from({ length: 150 }, (_, i) => i));
    expect(obs.frames().map((f) => f.frame.payload.i)).toEqual(Array.from({ length: 150 }, (_, i) => i));
    expect(obs.stats.gaps).toBe(0);
  });

  it('pacing: at most 100 attempts in any window of 1000 + 50 ms (manual clock, instant relay)', async () => {
    const owner = keys();
    const time = manualTime(1_000_000);
    const at: number[] = [];
    const em = new TelemetryEmitter({
      agentSecretKey: keys().sk,
      owner: owner.pk,
      now: time.now,
      timers: time.timers,
      publish: async () => {
        at.push(time.now());
        return { ok: true, message: '' };
      },
    });
    for (let i = 0; i < 250; i++) em.acpWrite({ i });
    await em.flush();
    expect(at).toEqual([...Array(100).fill(1_000_000), ...Array(100).fill(1_001_050), ...Array(50).fill(1_002_100)]);
    expect(em.stats).toMatchObject({ sent: 250, retries: 0 });
  });

  it('four emitters of one agent overrun the relay limit: rate-limited frames are retried, every loss is counted and reported', { timeout: 40_000 }, async () => {
    const w = await world();
    const obs = await liveObserver(w);
    const answers: string[] = [];
    const publish = async (e: NostrEvent) => {
      const r = await w.agentClient.publish(e);
      if (!r.ok) answers.push(r.message);
      return r;
    };
    // The relay's clock (Date, shared with the shard in this isolate) stands still while the emitters
    // keep their own (each paces itself to 100 frames a second by it): to the relay every frame comes
    // in the same millisecond, so four emitters pass its 100 frames a second however slow the
    // machine's round trips. A and C retry; B and D never do, so the refusals turn into drops for sure.
    const start = Date.now();
    const startedAt = performance.now();
    const emitterNow = () => start + Math.floor(performance.now() - startedAt);
    vi.useFakeTimers({ toFake: ['Date'] });
    vi.setSystemTime(start);
    const sessions = ['A', 'B', 'C', 'D'] as const;
    const emitters = sessions.map((sessionId, i) => {
      const drops: number[] = [];
      const em = new TelemetryEmitter({ agentSecretKey: w.agent.sk, owner: w.owner.pk, publish, now: emitterNow, ...(i % 2 ? { maxAttempts: 1 } : {}), onDrop: (d) => drops.push(d.seq) });
      return { sessionId, em, drops };
    });
    const N = 120;
    for (let i = 0; i < N; i++) for (const { sessionId, em } of emitters) em.acpWrite({ i }, { sessionId });
    const [a, b, c, d] = emitters.map(({ em }) => em);
    // Refused while the relay's clock stands: A and C have retried, B and D dropped; then it runs again.
    while (!(a!.stats.retries > 0 && c!.stats.retries > 0 && b!.stats.dropped > 0 && d!.stats.dropped > 0)) await sleep(10);
    vi.useRealTimers();
    await Promise.all(emitters.map(({ em }) => em.flush()));
    expect(answers.length).toBeGreaterThan(0);
    expect(new Set(answers)).toEqual(new Set(['rate-limited: telemetry is limited to 100 frames per second per agent']));
    // Once the window is clear, one more frame each carries whatever is still unreported.
    await sleep(1100);
    for (const { sessionId, em } of emitters) em.sessionResolved({}, { sessionId });
    await Promise.all(emitters.map(({ em }) => em.flush()));
    for (const { em, drops } of emitters) {
      expect(em.stats.frames).toBe(N + 1);
      expect(em.stats.sent + em.stats.dropped).toBe(N + 1);
      expect(em.stats.droppedUnreported).toBe(0);
      expect(drops.length).toBe(em.stats.dropped);
    }
    const total = emitters.reduce((n, { em }) => n + em.stats.sent, 0);
    await waitFor(() => obs.stats.accepted === total, `${total} frames`);
    await sleep(100);
    expect(obs.stats.accepted).toBe(total); // nothing more (no duplicates dispatched)
    for (const { sessionId, em, drops } of emitters) {
      const seen = obs.frames().filter((f) => f.frame.sessionId === sessionId);
      const seqs = seen.map((f) => f.frame.seq);
      // Every seq is either received or reported through onDrop — never both, never neither.
      expect([...seqs, ...drops].sort((x, y) => x - y)).toEqual(Array.from({ length: N + 1 }, (_, i) => i));
      // The dropped counts carried in payloads add up to the emitter's drops.
      const reported = seen.reduce((n, f) => n + (typeof f.frame.payload.dropped === 'number' ? f.frame.payload.dropped : 0), 0);
      expect(reported).toBe(em.stats.dropped);
    }
    expect(obs.stats.reportedDrops).toBe(emitters.reduce((n, { em }) => n + em.stats.dropped, 0));
  });

  it('retries rate-limited and error answers with exponential backoff, then gives up and reports the drop in the next frame', async () => {
    const owner = keys();
    const time = manualTime();
    const script: PublishOutcome[] = [
      { ok: false, message: 'rate-limited: slow down' },
      { ok: false, message: 'error: no OK from the relay within 10000 ms' },
      { ok: true, message: '' }, // frame 0 delivered on the 3rd attempt
      ...Array.from({ length: 5 }, () => ({ ok: false, message: 'rate-limited: slow down' })), // frame 1: 5 attempts, dropped
      { ok: false, message: 'restricted: no authenticated proof that this agent belongs to this owner (NIP-OA)' }, // frame 2: final at once
      { ok: true, message: '' }, // frame 3 carries dropped: 2
      { ok: true, message: '' }, // frame 4 carries nothing
    ];
    const relay = fakeRelay((_e, n) => script[n] ?? { ok: true, message: '' });
    const drops: Array<[number, string]> = [];
    const em = new TelemetryEmitter({
      agentSecretKey: keys().sk,
      owner: owner.pk,
      publish: relay.publish,
      now: time.now,
      timers: time.timers,
      onDrop: (d) => drops.push([d.seq, d.reason]),
    });
    for (let i = 0; i < 5; i++) em.acpWrite({ i });
    await em.flush();
    expect(time.sleeps).toEqual([250, 500, 250, 500, 1000, 2000]);
    expect(relay.events.length).toBe(11);
    expect(relay.events[0]!.id).toBe(relay.events[2]!.id); // a retry re-sends the same signed event
    expect(drops).toEqual([
      [1, 'rate-limited: slow down (gave up after 5 attempts)'],
      [2, 'restricted: no authenticated proof that this agent belongs to this owner (NIP-OA)'],
    ]);
    const delivered = [relay.events[2]!, relay.events[9]!, relay.events[10]!].map((e) => open(e, owner).body);
    expect(delivered.map((b) => [b.seq, b.payload])).toEqual([
      [0, { i: 0 }],
      [3, { i: 3, dropped: 2 }],
      [4, { i: 4 }],
    ]);
    expect(em.stats).toMatchObject({ frames: 5, sent: 3, dropped: 2, droppedUnreported: 0, retries: 6 });
  });

  it('a lost carrier rolls its count over to the next frame; a payload with its own "dropped" key is left alone', async () => {
    const owner = keys();
    const fail = { ok: false, message: 'invalid: nope' };
    const script = [fail, fail, { ok: true, message: '' }, { ok: true, message: '' }];
    const relay = fakeRelay((_e, n) => script[n] ?? { ok: true, message: '' });
    const em = new TelemetryEmitter({ agentSecretKey: keys().sk, owner: owner.pk, publish: relay.publish, maxFramesPerSecond: Infinity });
    em.acpWrite({ i: 0 }); // dropped
    em.acpWrite({ i: 1 }); // carries dropped: 1, lost too
    em.acpWrite({ i: 2, dropped: 'mine' }); // delivered, its own key untouched
    em.acpWrite({ i: 3 }); // carries dropped: 2
    await em.flush();
    expect(relay.events.map((e) => open(e, owner).body.payload)).toEqual([{ i: 0 }, { i: 1, dropped: 1 }, { i: 2, dropped: 'mine' }, { i: 3, dropped: 2 }]);
    expect(em.stats).toMatchObject({ sent: 2, dropped: 2, droppedUnreported: 0 });
  });

  it('a publish that throws is retried like an error answer; a full queue drops (and counts) new frames', async () => {
    const owner = keys();
    let calls = 0;
    const time = manualTime();
    const em = new TelemetryEmitter({
      agentSecretKey: keys().sk,
      owner: owner.pk,
      now: time.now,
      timers: time.timers,
      maxQueuedFrames: 2,
      publish: async () => {
        if (calls++ === 0) throw new Error('socket gone');
        return { ok: true, message: '' };
      },
    });
    const reasons: string[] = [];
    const em2 = new TelemetryEmitter({ agentSecretKey: keys().sk, owner: owner.pk, maxQueuedFrames: 2, publish: async () => ({ ok: true, message: '' }), onDrop: (d) => reasons.push(`${d.seq}: ${d.reason}`) });
    em.acpWrite({});
    await em.flush();
    expect(em.stats).toMatchObject({ sent: 1, retries: 1, dropped: 0 });
    for (let i = 0; i < 4; i++) em2.acpWrite({ i });
    await em2.flush();
    expect(reasons).toEqual(['2: send queue full (2 frames waiting)', '3: send queue full (2 frames waiting)']);
    expect(em2.stats).toMatchObject({ frames: 4, sent: 2, dropped: 2 });
  });

  it('the queue holds at most maxQueuedBytes of frames (a run\'s huge model requests cannot fill the agent\'s memory); a payload over it is dropped whole', async () => {
    const owner = keys();
    const reasons: string[] = [];
    let release: () => void = () => undefined;
    const held = new Promise<void>((r) => (release = r));
    const em = new TelemetryEmitter({
      agentSecretKey: keys().sk,
      owner: owner.pk,
      maxQueuedBytes: 300_000,
      publish: async () => {
        await held; // the relay is slow: everything waits
        return { ok: true, message: '' };
      },
      onDrop: (d) => reasons.push(`${d.seq}: ${d.reason}`),
    });
    const big = 'x'.repeat(200_000); // about four frames
    em.acpWrite({ request: big }); // seqs 0-3, ~200 KB waiting
    em.acpWrite({ request: big }); // seqs 4-7: would pass 300,000 bytes
    em.acpWrite({ small: 1 }); // seq 8 fits
    expect(em.stats.queued).toBe(5);
    expect(reasons).toEqual([4, 5, 6, 7].map((seq) => `${seq}: send queue full (at most 300000 bytes of frames waiting)`));
    expect(em.stats.queuedBytes).toBeGreaterThan(200_000);
    expect(em.stats.queuedBytes).toBeLessThanOrEqual(300_000);
    release();
    await em.flush();
    expect(em.stats).toMatchObject({ sent: 5, dropped: 4, queued: 0, queuedBytes: 0 });
  });
});

// ---- observer ----

describe('Observer: checks (exact reasons)', () => {
  it('subscribes live-only to #p = owner', () => {
    const owner = keys();
    const h = handObserver(owner, []);
    expect(h.filters).toEqual([[{ kinds: [24200], '#p': [owner.pk], since: expect.any(Number) }]]);
    expect(Math.abs(h.filters[0]![0]!.since! - now())).toBeLessThanOrEqual(1);
  });

  it('gives the relay client the filters to send again after a passing CLOSED: live from then (a fresh since)', () => {
    const owner = keys();
    let t = Date.now();
    const subs: Array<{ filters: Filter[]; resubscribe?: () => Filter[] }> = [];
    const obs = new Observer({
      ownerSecretKey: owner.sk,
      agents: [],
      now: () => t,
      subscribe: (filters, o) => {
        subs.push({ filters, resubscribe: o.resubscribe });
        return { close: () => undefined };
      },
    });
    obs.start();
    t += 90_000; // the relay closed it with error: and the relay client's backoff ran out
    expect(subs[0]!.resubscribe?.()).toEqual([{ kinds: [24200], '#p': [owner.pk], since: Math.floor(t / 1000) }]);
    expect(subs).toHaveLength(1);
  });

  it('subscribes again with a fresh since when a re-sent REQ is refused as history (at most once per 10 s)', () => {
    const owner = keys();
    let t = Date.now();
    const subs: Array<{ filters: Filter[]; onClosed?: (m: string) => void }> = [];
    const closed: string[] = [];
    const obs = new Observer({
      ownerSecretKey: owner.sk,
      agents: [],
      now: () => t,
      subscribe: (filters, o) => {
        subs.push({ filters, onClosed: o.onClosed });
        return { close: () => undefined };
      },
      onClosed: (m) => closed.push(m),
    });
    obs.start();
    obs.start(); // idempotent
    expect(subs.length).toBe(1);
    const history = 'restricted: kind 24200 frames are live only: subscribe with since = now, without until or ids';
    t += 120_000; // e.g. the relay client reconnected two minutes later and re-sent the old REQ
    subs[0]!.onClosed!(history);
    expect(subs.length).toBe(2);
    expect(subs[1]!.filters[0]!.since).toBe(Math.floor(t / 1000));
    subs[1]!.onClosed!(history); // refused again at once: not a stale since, so no loop
    expect(subs.length).toBe(2);
    obs.start();
    subs[2]!.onClosed!('auth-required: kind 24200 frames are only delivered to their authenticated recipient');
    expect(subs.length).toBe(3);
    expect(closed).toEqual([history, history, 'auth-required: kind 24200 frames are only delivered to their authenticated recipient']);
  });

  it('rejects a frame whose agent tag is not its signer', () => {
    const owner = keys();
    const agent = keys();
    const other = keys();
    const h = handObserver(owner, [agent.pk, other.pk]);
    const e = telemetry(agent, owner.pk, body(0), { agentTag: other.pk });
    expect(h.obs.handleEvent(e)).toEqual({ status: 'rejected', reason: 'invalid: a telemetry frame must be signed by the agent named in its "agent" tag' });
    expect(h.rejected).toEqual([['invalid: a telemetry frame must be signed by the agent named in its "agent" tag', e.id]]);
    expect(h.obs.stats.rejected).toBe(1);
  });

  it('rejects a bad signature and a tampered id', () => {
    const owner = keys();
    const agent = keys();
    const h = handObserver(owner, [agent.pk]);
    const e = telemetry(agent, owner.pk, body(0));
    h.push({ ...e, sig: e.sig.replace(/^./, (c) => (c === '0' ? '1' : '0')) });
    h.push({ ...e, content: `${e.content.slice(0, -4)}AAA=` });
    expect(h.rejected.map((r) => r[0])).toEqual(['invalid: signature verification failed', 'invalid: event id does not match the event hash']);
    expect(h.frames).toEqual([]);
  });

  it('rejects content that does not decrypt, non-JSON and non-ObserverEvent plaintexts, wrong p, control frames, stale frames', () => {
    const owner = keys();
    const agent = keys();
    const h = handObserver(owner, [agent.pk]);
    const elsewhere = keys().pk;
    const cases: Array<[NostrEvent, string]> = [
      [
        telemetry(agent, owner.pk, body(0), { content: encrypt(JSON.stringify(body(0)), getConversationKey(agent.sk, keys().pk)) }),
        'invalid: cannot decrypt the frame (invalid MAC): it was not encrypted by this agent for this owner',
      ],
      [telemetry(agent, owner.pk, body(0), { content: 'not base64 at all' }), 'invalid: cannot decrypt the frame (invalid payload length): it was not encrypted by this agent for this owner'],
      [telemetry(agent, owner.pk, 'hello'), 'invalid: the decrypted frame is not JSON'],
      [telemetry(agent, owner.pk, { ...body(0), seq: -1 }), 'invalid: the decrypted frame is not an ObserverEvent: seq: Too small: expected number to be >=0'],
      [telemetry(agent, owner.pk, { ...body(0), timestamp: 'yesterday' }), 'invalid: the decrypted frame is not an ObserverEvent: timestamp: must be an RFC 3339 string or integer milliseconds'],
      [telemetry(agent, owner.pk, { seq: 0, timestamp: 1, kind: 'acp_read' }), 'invalid: the decrypted frame is not an ObserverEvent: payload: Invalid input: expected record, received undefined'],
      [telemetry(agent, owner.pk, body(0), { p: elsewhere }), `restricted: the frame is addressed to ${elsewhere}, not to this owner`],
      [telemetry(agent, owner.pk, body(0), { created_at: now() - 301 }), 'invalid: created_at is more than 300 seconds from now (stale or replayed frame, or a wrong clock)'],
    ];
    const control = sign(owner, { kind: 24200, content: 'x', tags: [['p', agent.pk], ['agent', agent.pk], ['frame', 'control']] });
    cases.push([control, 'restricted: a control frame is addressed to an agent, not to an observer']);
    const notAFrame = sign(agent, { kind: 1, tags: [['p', owner.pk]] });
    cases.push([notAFrame, 'invalid: not a kind 24200 frame (kind 1)']);
    for (const [e, reason] of cases) expect(h.obs.handleEvent(e)).toEqual({ status: 'rejected', reason });
    expect(h.obs.stats).toMatchObject({ rejected: cases.length, accepted: 0 });
    expect(h.obs.frames()).toEqual([]);
  });

  it('rejects frames of an unknown agent and undecryptable frames that came through the relay', async () => {
    const w = await world();
    const rejected: string[] = [];
    const obs = await liveObserver(w, { agents: [], onRejected: (r) => rejected.push(r) });
    const em = new TelemetryEmitter({ agentSecretKey: w.agent.sk, owner: w.owner.pk, publish: (e) => w.agentClient.publish(e) });
    em.turnStarted({});
    await em.flush();
    await waitFor(() => rejected.length === 1, 'a rejection');
    expect(rejected).toEqual([`restricted: unknown agent ${w.agent.pk}: add it to the observer's agents to accept its frames`]);
    obs.addAgent(w.agent.pk);
    // Valid NIP-44 for someone else: the relay cannot tell, the observer can.
    const wrong = telemetry(w.agent, w.owner.pk, body(0), { content: encrypt(JSON.stringify(body(0)), getConversationKey(w.agent.sk, keys().pk)) });
    expect(await w.agentClient.publish(wrong)).toEqual({ ok: true, message: '' });
    await waitFor(() => rejected.length === 2, 'a second rejection');
    expect(rejected[1]).toBe('invalid: cannot decrypt the frame (invalid MAC): it was not encrypted by this agent for this owner');
    em.turnStarted({});
    await em.flush();
    await waitFor(() => obs.stats.accepted === 1, 'the frame of a now-known agent');
    expect(obs.stats).toMatchObject({ rejected: 2, accepted: 1 });
  });

  it('ignores unknown kinds (counted, still seq-tracked) and unknown frame values', () => {
    const owner = keys();
    const agent = keys();
    const h = handObserver(owner, [agent.pk]);
    expect(h.obs.handleEvent(telemetry(agent, owner.pk, body(0, { kind: 'tool_debug' })))).toEqual({ status: 'ignored', reason: 'unknown frame kind "tool_debug"' });
    expect(h.obs.handleEvent(telemetry(agent, owner.pk, body(1), { frame: 'debug' }))).toEqual({ status: 'ignored', reason: 'unknown "frame" value "debug"' });
    expect(h.obs.handleEvent(telemetry(agent, owner.pk, body(1))).status).toBe('accepted');
    expect(h.obs.stats).toMatchObject({ ignoredKinds: 1, ignoredFrames: 1, accepted: 1, gaps: 0, rejected: 0 });
    expect(h.ignored).toEqual(['unknown frame kind "tool_debug"', 'unknown "frame" value "debug"']);
    expect(h.obs.frames().map((f) => f.frame.seq)).toEqual([1]);
  });

  it('dedupes a replayed frame and a re-signed copy of the same (agent, session, seq, timestamp)', () => {
    const owner = keys();
    const agent = keys();
    const h = handObserver(owner, [agent.pk]);
    const b = body(0);
    const e = telemetry(agent, owner.pk, b);
    expect(h.obs.handleEvent(e).status).toBe('accepted');
    expect(h.obs.handleEvent(e)).toEqual({ status: 'duplicate' });
    expect(h.obs.handleEvent(telemetry(agent, owner.pk, b))).toEqual({ status: 'duplicate' }); // another event id, same frame
    expect(h.obs.handleEvent(telemetry(agent, owner.pk, { ...b, sessionId: 's2' })).status).toBe('accepted'); // other session
    expect(h.obs.stats).toMatchObject({ accepted: 2, duplicates: 2 });
    expect(h.frames.length).toBe(2);
    expect(h.ignored).toEqual(['duplicate frame', 'duplicate frame']);
  });

  it('reports seq gaps per (agent, session) as drops; a restart at seq 0 is not a gap', () => {
    const owner = keys();
    const a1 = keys();
    const a2 = keys();
    const h = handObserver(owner, [a1.pk, a2.pk]);
    for (const s of [0, 1, 4]) h.push(telemetry(a1, owner.pk, body(s)));
    for (const s of [0, 1]) h.push(telemetry(a2, owner.pk, body(s))); // same session id, other agent
    h.push(telemetry(a1, owner.pk, body(0, { timestamp: new Date(Date.now() + 5).toISOString() }))); // emitter restarted
    h.push(telemetry(a1, owner.pk, body(1, { timestamp: new Date(Date.now() + 6).toISOString() })));
    h.push(telemetry(a1, owner.pk, body(2, { sessionId: null })));
    h.push(telemetry(a1, owner.pk, body(3, { sessionId: null })));
    expect(h.gaps).toEqual([{ agent: a1.pk, sessionId: 's1', expected: 2, received: 4, missing: 2 }]);
    expect(h.obs.stats).toMatchObject({ gaps: 2, restarts: 1, accepted: 9 });
  });

  it('keeps at most 800 frames (oldest dropped first)', { timeout: 60_000 }, async () => {
    const owner = keys();
    const agent = keys();
    const h = handObserver(owner, [agent.pk]);
    const em = new TelemetryEmitter({
      agentSecretKey: agent.sk,
      owner: owner.pk,
      maxFramesPerSecond: Infinity,
      maxQueuedFrames: 10_000,
      publish: async (e) => {
        h.push(e);
        return { ok: true, message: '' };
      },
    });
    for (let i = 0; i < 850; i++) em.acpWrite({ i }, { sessionId: 'ring' });
    await em.flush();
    expect(h.obs.stats.accepted).toBe(850);
    const kept = h.obs.frames();
    expect(kept.length).toBe(800);
    expect(kept[0]!.frame.seq).toBe(50);
    expect(kept[799]!.frame.seq).toBe(849);
    const ring = new RingBuffer<number>(3);
    for (let i = 0; i < 5; i++) ring.push(i);
    expect([ring.size, ring.toArray()]).toEqual([3, [2, 3, 4]]);
  });

  it('accepts integer-millisecond timestamps', () => {
    const owner = keys();
    const agent = keys();
    const h = handObserver(owner, [agent.pk]);
    const ms = Date.now();
    const out = h.obs.handleEvent(telemetry(agent, owner.pk, { seq: 0, timestamp: ms, kind: 'turn_started', payload: {} }));
    expect(out.status).toBe('accepted');
    const f = h.obs.frames()[0]!.frame;
    expect(f).toEqual({ seq: 0, timestamp: ms, kind: 'turn_started', agentIndex: null, channelId: null, sessionId: null, turnId: null, payload: {} });
    expect(timestampMillis(f.timestamp)).toBe(ms);
    expect(h.obs.handleEvent(telemetry(agent, owner.pk, { seq: 1, timestamp: 1.5, kind: 'turn_started', payload: {} }))).toEqual({
      status: 'rejected',
      reason: 'invalid: the decrypted frame is not an ObserverEvent: timestamp: must be an RFC 3339 string or integer milliseconds',
    });
  });

  it('a throwing callback does not break frame handling', () => {
    const owner = keys();
    const agent = keys();
    const h = handObserver(owner, [agent.pk], {
      onFrame: () => {
        throw new Error('boom');
      },
    });
    h.push(telemetry(agent, owner.pk, body(0)));
    h.push(telemetry(agent, owner.pk, body(1)));
    expect(h.obs.stats.accepted).toBe(2);
  });
});

// ---- control ----

describe('cancel_turn control frames', () => {
  it('cancelTurn reaches an agent subscribed as itself (#p = agent), which decrypts {type: cancel_turn, channelId}', async () => {
    const owner = keys();
    const agent = keys();
    const path = `/r/${owner.pk}`;
    // The agent proves agent → owner with a NIP-OA tag in its AUTH event.
    const agentClient = relayClient(path, agent, [signAttestation(owner.sk, agent.pk, 'kind=22242')]);
    const ownerClient = relayClient(path, owner);
    expect(await agentClient.authenticate()).toMatchObject({ ok: true });
    expect(await ownerClient.authenticate()).toMatchObject({ ok: true });
    const received: NostrEvent[] = [];
    let eose!: () => void;
    const ready = new Promise<void>((r) => (eose = r));
    agentClient.subscribe([{ kinds: [24200], '#p': [agent.pk], since: now() }], { onEvent: (e) => received.push(e), onEose: () => eose() });
    await ready;
    const obs = new Observer({
      ownerSecretKey: owner.sk,
      agents: [agent.pk],
      subscribe: (f, o) => ownerClient.subscribe(f, o),
      publish: (e) => ownerClient.publish(e),
    });
    const channelId = '52a85618-0f8f-4542-94ec-599e6e1c6f2e';
    const sent = await obs.cancelTurn(agent.pk, channelId);
    expect(sent).toMatchObject({ ok: true, message: '' });
    expect(sent.event!.tags).toEqual([['p', agent.pk], ['agent', agent.pk], ['frame', 'control']]);
    await waitFor(() => received.length === 1, 'the control frame');
    expect(received[0]!.id).toBe(sent.event!.id);
    expect(readControlFrame(received[0]!, { agentSecretKey: agent.sk, owners: [owner.pk] })).toEqual({
      status: 'accepted',
      owner: owner.pk,
      control: { type: 'cancel_turn', channelId },
    });
    expect(await obs.cancelTurn(keys().pk, channelId)).toEqual({ ok: false, message: expect.stringMatching(/^restricted: unknown agent [0-9a-f]{64}: add it to the observer's agents first$/) });
  });

  it('an observer without publish, and sendControl with a bad agent, answer with errors', async () => {
    const owner = keys();
    const agent = keys();
    const h = handObserver(owner, [agent.pk]);
    expect(await h.obs.cancelTurn(agent.pk, 'c')).toEqual({ ok: false, message: 'error: this observer was created without a publish function' });
    const r = await sendControl({ ownerSecretKey: owner.sk, agent: 'nope', channelId: 'c', publish: async () => ({ ok: true, message: '' }) });
    expect(r).toEqual({ ok: false, message: 'error: could not build the control frame: buildControlFrame: agent must be a 64 lowercase hex pubkey' });
  });

  it('readControlFrame rejects a stranger, another agent, a telemetry frame; ignores unknown types', () => {
    const owner = keys();
    const agent = keys();
    const stranger = keys();
    const read = (e: NostrEvent) => readControlFrame(e, { agentSecretKey: agent.sk, owners: [owner.pk] });
    const byStranger = buildControlFrame({ ownerSecretKey: stranger.sk, agent: agent.pk, control: { type: 'cancel_turn', channelId: 'c' } });
    expect(read(byStranger)).toEqual({ status: 'rejected', reason: `restricted: ${stranger.pk} is not an owner of this agent` });
    const other = keys();
    const forOther = buildControlFrame({ ownerSecretKey: owner.sk, agent: other.pk, control: { type: 'cancel_turn', channelId: 'c' } });
    expect(read(forOther)).toEqual({ status: 'rejected', reason: `restricted: the frame targets agent ${other.pk}, not this agent` });
    expect(read(telemetry(agent, owner.pk, body(0)))).toEqual({ status: 'rejected', reason: 'restricted: a telemetry frame is addressed to an owner, not to an agent' });
    const unknownType = sign(owner, {
      kind: 24200,
      content: encrypt(JSON.stringify({ type: 'pause_turn' }), getConversationKey(owner.sk, agent.pk)),
      tags: [['p', agent.pk], ['agent', agent.pk], ['frame', 'control']],
    });
    expect(read(unknownType)).toEqual({ status: 'ignored', reason: 'unknown control type "pause_turn"' });
    const stale = buildControlFrame({ ownerSecretKey: owner.sk, agent: agent.pk, control: { type: 'cancel_turn', channelId: 'c' }, now: () => Date.now() - 400_000 });
    expect(read(stale)).toEqual({ status: 'rejected', reason: 'invalid: created_at is more than 300 seconds from now (stale or replayed frame)' });
  });
});
