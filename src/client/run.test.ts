// AgentConversation (run.ts) against a fake relay at the network boundary (test/helpers-node/fake-relay.ts)
// standing for an agent that sends more than one terminal event for a run (NIP-XX says clients MUST
// keep only the terminal with the highest created_at, then the highest id), for a stranger who
// stores junk gift wraps for the user, and for an agent whose deltas never line up.
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { schnorr } from '@noble/curves/secp256k1.js';
import { finalizeEvent } from 'nostr-tools/pure';
import { MAX_EARLY_DELTAS } from '../shared/delta-order.js';
import { computeEventId, type NostrEvent } from '../shared/event.js';
import { bytesToHex, hexToBytes } from '../shared/hex.js';
import { KIND } from '../shared/kinds.js';
import { ConversationKeyCache, encrypt } from '../shared/nip44.js';
import { giftWrap, makeRumor, unwrap, type Rumor } from '../shared/nip59.js';
import { NIPXX_VERSION } from '../shared/nip-xx.js';
import { nobleVerifier } from '../shared/verify.js';
import { fakeRelay, type FakeRelay } from '../../test/helpers-node/fake-relay.js';
import { newKeyPair } from './keys.js';
import { AgentConversation, MAX_PROBLEMS_KEPT } from './run.js';

const agent = newKeyPair();
const cache = new ConversationKeyCache(4);
let relay: FakeRelay | undefined;
let conv: AgentConversation | undefined;
afterEach(async () => {
  conv?.close();
  await relay?.close();
});

/** The text of each response made, by event id. */
const texts = new Map<string, string>();

/** A 25803 from the agent to the prompt's author, for the prompt `e`, with `text`, dated `createdAt`. */
function response(prompt: NostrEvent, text: string, createdAt: number): NostrEvent {
  const content = encrypt(JSON.stringify({ ver: NIPXX_VERSION, text }), cache.get(agent.sk, prompt.pubkey));
  const e = finalizeEvent({ kind: KIND.AI_RESPONSE, created_at: createdAt, tags: [['p', prompt.pubkey], ['e', prompt.id, '', 'root']], content }, agent.sk);
  texts.set(e.id, text);
  return e;
}

/** Runs one prompt whose agent answers with `terminals(prompt)`, delivered in that order. */
async function runWith(terminals: (prompt: NostrEvent) => NostrEvent[]): Promise<unknown> {
  relay = await fakeRelay({
    onEvent: (e, r) => {
      if (e.kind === KIND.AI_PROMPT) for (const t of terminals(e)) r.deliver(t);
    },
  });
  const opened = await AgentConversation.open(relay.url.replace(/^http/, 'ws'), agent.pk, newKeyPair());
  if (!opened.ok) throw new Error(opened.error);
  conv = opened.value;
  const run = await conv.prompt('hello', { timeoutMs: 5_000 });
  if (!run.ok) throw new Error(run.error);
  return run.value.done;
}

describe('AgentConversation: several terminal events for one run', () => {
  it('equal created_at: the one with the highest id is kept, though it arrives second', async () => {
    const t = Math.floor(Date.now() / 1000);
    let higher: string | undefined;
    const outcome = await runWith((p) => {
      const both = [response(p, 'one', t), response(p, 'two', t)].sort((a, b) => (a.id < b.id ? -1 : 1));
      higher = texts.get(both[1]!.id);
      return both; // the lower id arrives first
    });
    expect(outcome).toEqual({ kind: 'response', text: higher });
  });

  it('a later created_at is kept over an earlier one that arrived first; an earlier one arriving second does not replace it', async () => {
    const t = Math.floor(Date.now() / 1000);
    expect(await runWith((p) => [response(p, 'older', t - 1), response(p, 'newer', t)])).toEqual({ kind: 'response', text: 'newer' });
    await relay?.close();
    conv?.close();
    expect(await runWith((p) => [response(p, 'newer', t), response(p, 'older', t - 1)])).toEqual({ kind: 'response', text: 'newer' });
  });
});

// A stranger stores junk gift wraps for the user's key (any key may publish a 1059 with any `p`),
// and a hostile agent streams deltas that never become contiguous: what AgentConversation keeps and
// opens stays bounded. The junk is signed (as the relay requires) by one stranger key, made once.
const user = newKeyPair();
const stranger = newKeyPair();
const JUNK_WRAPS = 5_000;
const junk: NostrEvent[] = [];
beforeAll(() => {
  const now = Math.floor(Date.now() / 1000);
  for (let i = 0; i < JUNK_WRAPS; i++) {
    const fields = { pubkey: stranger.pk, created_at: now - (i % 100_000), kind: KIND.GIFT_WRAP, tags: [['p', user.pk]], content: `AgI${'A'.repeat(300)}${i}` };
    const id = computeEventId(fields);
    junk.push({ ...fields, id, sig: bytesToHex(schnorr.sign(hexToBytes(id), stranger.sk)) });
  }
}, 120_000);

/** A fake relay holding the junk, whose agent answers each prompt (plain or wrapped) with `answer`'s events, in its form. */
async function relayWithJunk(answer: (prompt: Rumor) => { kind: number; payload: object }[]): Promise<FakeRelay> {
  const r = await fakeRelay({
    onEvent: (e, relayed) => {
      let prompt: Rumor = e;
      const wrapped = e.kind === KIND.GIFT_WRAP || e.kind === KIND.EPHEMERAL_GIFT_WRAP;
      if (wrapped) {
        const u = unwrap(e, agent.sk, cache, nobleVerifier);
        if (!u.ok) throw new Error(u.error);
        prompt = u.value.rumor;
      }
      if (prompt.kind !== KIND.AI_PROMPT) return;
      for (const { kind, payload } of answer(prompt)) {
        const content = encrypt(JSON.stringify(payload), cache.get(agent.sk, prompt.pubkey));
        const template = { kind, created_at: Math.floor(Date.now() / 1000), tags: [['p', prompt.pubkey], ['e', prompt.id, '', 'root']], content };
        relayed.deliver(wrapped ? giftWrap(makeRumor({ ...template, pubkey: agent.pk }), agent.sk, prompt.pubkey, cache) : finalizeEvent(template, agent.sk));
      }
    },
  });
  r.stored.push(...junk);
  return r;
}

const answerWith = (text: string) => () => [{ kind: KIND.AI_RESPONSE, payload: { ver: NIPXX_VERSION, text } }];

describe('AgentConversation: junk gift wraps and deltas that never line up', () => {
  it(`${JUNK_WRAPS} junk gift wraps stored for the user: open and a plain prompt open none of them`, async () => {
    relay = await relayWithJunk(answerWith('plain answer'));
    const opened = await AgentConversation.open(relay.url.replace(/^http/, 'ws'), agent.pk, user);
    if (!opened.ok) throw new Error(opened.error);
    conv = opened.value;
    expect(conv.problems).toEqual([]);
    expect(conv.problemCount).toBe(0);
    const run = await conv.prompt('hello', { timeoutMs: 5_000 });
    if (!run.ok) throw new Error(run.error);
    expect(await run.value.done).toEqual({ kind: 'response', text: 'plain answer' });
    expect(conv.problemCount).toBe(0);
  }, 60_000);

  it('a wrapped prompt: the stored junk is not opened, the wrapped answer is; a live junk wrap while it waits is opened once', async () => {
    let prompts = 0;
    relay = await relayWithJunk(() => (++prompts === 1 ? answerWith('wrapped answer')() : []));
    const opened = await AgentConversation.open(relay.url.replace(/^http/, 'ws'), agent.pk, user);
    if (!opened.ok) throw new Error(opened.error);
    conv = opened.value;
    const run = await conv.prompt('hello', { wrap: true, timeoutMs: 5_000 });
    if (!run.ok) throw new Error(run.error);
    expect(await run.value.done).toEqual({ kind: 'response', text: 'wrapped answer' });
    expect(conv.problemCount).toBe(0);

    // The second prompt is not answered: while it waits, a stored junk wrap sent again is not
    // opened (seen), a new one is, once, though it comes twice.
    const waiting = await conv.prompt('again', { wrap: true, timeoutMs: 1_000 });
    if (!waiting.ok) throw new Error(waiting.error);
    const fields = { pubkey: stranger.pk, created_at: Math.floor(Date.now() / 1000), kind: KIND.GIFT_WRAP, tags: [['p', user.pk]], content: `AgI${'B'.repeat(300)}` };
    const id = computeEventId(fields);
    const fresh = { ...fields, id, sig: bytesToHex(schnorr.sign(hexToBytes(id), stranger.sk)) };
    for (const e of [junk[0]!, fresh, fresh]) relay.deliver(e);
    expect(await waiting.value.done).toEqual({ kind: 'timeout' });
    expect(conv.problemCount).toBe(1);
    expect(conv.problems).toEqual([`cannot unwrap ${id}: cannot decrypt gift wrap: invalid base64`]);
  }, 60_000);

  it(`deltas seq 1..2,000 and never seq 0: at most ${MAX_EARLY_DELTAS} wait, the others are dropped (counted, the last ${MAX_PROBLEMS_KEPT} problems kept)`, async () => {
    const COUNT = 2_000;
    relay = await relayWithJunk(() => [
      ...Array.from({ length: COUNT }, (_, i) => ({ kind: KIND.AI_DELTA, payload: { ver: NIPXX_VERSION, text: `d${i + 1} `, seq: i + 1 } })),
      { kind: KIND.AI_DELTA, payload: { ver: NIPXX_VERSION, text: 'd0 ', seq: 0 } },
      { kind: KIND.AI_RESPONSE, payload: { ver: NIPXX_VERSION, text: 'done' } },
    ]);
    const opened = await AgentConversation.open(relay.url.replace(/^http/, 'ws'), agent.pk, user);
    if (!opened.ok) throw new Error(opened.error);
    conv = opened.value;
    const seqs: number[] = [];
    const run = await conv.prompt('count', { timeoutMs: 30_000, onDelta: (_t, seq) => seqs.push(seq) });
    if (!run.ok) throw new Error(run.error);
    expect(await run.value.done).toEqual({ kind: 'response', text: 'done' });
    // seq 0 came last: it and the deltas that waited for it are handed on, in order.
    expect(seqs).toEqual(Array.from({ length: MAX_EARLY_DELTAS + 1 }, (_, i) => i));
    expect(conv.problemCount).toBe(COUNT - MAX_EARLY_DELTAS);
    expect(conv.problems).toHaveLength(MAX_PROBLEMS_KEPT);
    expect(conv.problems.at(-1)).toBe(`delta ${COUNT} dropped: ${MAX_EARLY_DELTAS} later deltas already wait for delta 0`);
  }, 60_000);
});

// NIP-XX: "Clients MUST NOT apply deltas after a terminal event has been accepted for a run" (and
// SHOULD ignore its status and tool calls): during the settle time after the first terminal
// nothing more reaches the handlers, not even a delta that another one was waiting for.
describe('AgentConversation: events after the terminal', () => {
  it('a delta that fills a gap, status and a tool call after the 25803 reach no handler', async () => {
    const p = (kind: number, payload: object) => ({ kind, payload: { ver: NIPXX_VERSION, ...payload } });
    relay = await relayWithJunk(() => [
      p(KIND.AI_DELTA, { text: 'The answer ', seq: 0 }),
      p(KIND.AI_DELTA, { text: '42.', seq: 2 }),
      p(KIND.AI_RESPONSE, { text: 'The answer is 42.' }),
      p(KIND.AI_DELTA, { text: 'is ', seq: 1 }),
      p(KIND.AI_STATUS, { state: 'thinking' }),
      p(KIND.AI_TOOL_CALL, { name: 'late', phase: 'start' }),
    ]);
    const opened = await AgentConversation.open(relay.url.replace(/^http/, 'ws'), agent.pk, user);
    if (!opened.ok) throw new Error(opened.error);
    conv = opened.value;
    const seen: string[] = [];
    const run = await conv.prompt('hello', {
      timeoutMs: 5_000,
      onDelta: (text, seq) => seen.push(`delta ${seq} ${text}`),
      onStatus: (s) => seen.push(`status ${s.state}`),
      onToolCall: (t) => seen.push(`tool ${t.name}`),
    });
    if (!run.ok) throw new Error(run.error);
    expect(await run.value.done).toEqual({ kind: 'response', text: 'The answer is 42.' });
    expect(seen).toEqual(['delta 0 The answer ']);
  });
});

// A hostile relay (one a stranger's agent names in its relay list) holds the conversation's
// subscription without ever answering it, or ends it after its EOSE: opening and prompting fail
// with the reason instead of waiting for ever, and a run the relay stopped serving ends at once.
describe('AgentConversation: a relay that never answers the subscription, or ends it', () => {
  const isWraps = (filters: { kinds?: number[] }[]): boolean => filters.some((f) => f.kinds?.includes(KIND.GIFT_WRAP) === true);
  const wsOf = (r: FakeRelay): string => r.url.replace(/^http/, 'ws');

  it('no EOSE for the REQ of the run kinds: open fails after its timeout, naming the relay', async () => {
    relay = await fakeRelay({ ignoreReq: () => true });
    const started = Date.now();
    const opened = await AgentConversation.open(wsOf(relay), agent.pk, user, { timeoutMs: 1_000 });
    expect(opened).toEqual({ ok: false, error: `subscription refused by ${wsOf(relay)}: no EOSE within 1000 ms` });
    expect(Date.now() - started).toBeLessThan(3_000);
  });

  it('no EOSE for the gift wraps REQ: the wrapped prompt fails within its timeout, and the next one subscribes again', async () => {
    let wrapReqs = 0;
    relay = await fakeRelay({
      ignoreReq: (filters) => isWraps(filters) && ++wrapReqs === 1,
      onEvent: (e, r) => {
        const u = unwrap(e, agent.sk, cache, nobleVerifier);
        if (!u.ok || u.value.rumor.kind !== KIND.AI_PROMPT) return;
        const prompt = u.value.rumor;
        const content = encrypt(JSON.stringify({ ver: NIPXX_VERSION, text: 'wrapped answer' }), cache.get(agent.sk, prompt.pubkey));
        const rumor = makeRumor({ kind: KIND.AI_RESPONSE, created_at: Math.floor(Date.now() / 1000), tags: [['p', prompt.pubkey], ['e', prompt.id, '', 'root']], content, pubkey: agent.pk });
        r.deliver(giftWrap(rumor, agent.sk, prompt.pubkey, cache));
      },
    });
    const opened = await AgentConversation.open(wsOf(relay), agent.pk, user);
    if (!opened.ok) throw new Error(opened.error);
    conv = opened.value;
    const started = Date.now();
    expect(await conv.prompt('hello', { wrap: true, timeoutMs: 1_000 })).toEqual({ ok: false, error: `subscription refused by ${wsOf(relay)}: no EOSE within 1000 ms` });
    expect(Date.now() - started).toBeLessThan(3_000);
    const run = await conv.prompt('hello', { wrap: true, timeoutMs: 5_000 });
    if (!run.ok) throw new Error(run.error);
    expect(await run.value.done).toEqual({ kind: 'response', text: 'wrapped answer' });
    expect(wrapReqs).toBe(2);
  });

  it('CLOSED "blocked: x" after the EOSE: the waiting run ends at once with the relay\'s message, and a later prompt fails with it', async () => {
    relay = await fakeRelay({ closeOnEvent: (e) => (e.kind === KIND.AI_PROMPT ? 'blocked: x' : undefined) });
    const opened = await AgentConversation.open(wsOf(relay), agent.pk, user);
    if (!opened.ok) throw new Error(opened.error);
    conv = opened.value;
    const started = Date.now();
    const run = await conv.prompt('hello', { timeoutMs: 30_000 });
    if (!run.ok) throw new Error(run.error);
    expect(await run.value.done).toEqual({ kind: 'closed', message: `subscription closed by ${wsOf(relay)}: blocked: x` });
    expect(Date.now() - started).toBeLessThan(2_000);
    expect(await conv.prompt('again', { timeoutMs: 30_000 })).toEqual({ ok: false, error: `subscription closed by ${wsOf(relay)}: blocked: x` });
  });

  it('CLOSED "rate-limited: …" after the EOSE: the subscription is sent again after a pause and the answer stored meanwhile is heard', async () => {
    let closes = 0;
    relay = await fakeRelay({
      closeOnEvent: (e) => (e.kind === KIND.AI_PROMPT && ++closes === 1 ? 'rate-limited: too many live events for your address (50 per second); subscribe again later' : undefined),
      onEvent: (e, r) => {
        if (e.kind === KIND.AI_PROMPT) r.deliver(response(e, 'stored while closed', Math.floor(Date.now() / 1000)), true);
      },
    });
    const opened = await AgentConversation.open(wsOf(relay), agent.pk, user);
    if (!opened.ok) throw new Error(opened.error);
    conv = opened.value;
    const run = await conv.prompt('hello', { timeoutMs: 10_000 });
    if (!run.ok) throw new Error(run.error);
    expect(await run.value.done).toEqual({ kind: 'response', text: 'stored while closed' });
    expect(closes).toBe(1);
  });
});
