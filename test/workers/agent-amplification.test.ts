// What one stranger's event may make a hosted agent do on the public shard (audit round 16):
//   - an event addressed to the agent and to other keys (a NIP-XX prompt or cancel, a DVMCP
//     request or notification, a gift wrap: anything whose p tags are not exactly one naming the
//     agent) is dropped before any work: no answer, no run, no `seen` row, no slot of the prompt
//     windows, counted in one log line a minute (src/shared/recipient.ts soleRecipient);
//   - what the agent stores for a stranger expires (NIP-40): a response a day after it is written,
//     an error or refusal after 10 minutes, a DVMCP gift wrap after 10 minutes; the owner's
//     answers keep no expiration;
//   - DVMCP pings are held to the provider's ping window (limits.ts), and the progress
//     notifications of all asks to the agent's notification budget (notification-limits.ts).
import { env, runInDurableObject } from 'cloudflare:test';
import { describe, expect, it, vi } from 'vitest';
import type { NostrEvent } from '../../src/shared/event.js';
import { ConversationKeyCache, encrypt, getConversationKey } from '../../src/shared/nip44.js';
import { makeRumor, unwrap } from '../../src/shared/nip59.js';
import { nobleVerifier } from '../../src/shared/verify.js';
import type { ErrorAnswers, Limiter } from '../../workers/common/dvmcp-server/limits.js';
import { createTestAgent, NipXxClient } from './agent-helpers.js';
import { announcements, DvmcpClient } from './bridge-helpers.js';
import { BASE, keys, now, sign, type Keys } from './helpers.js';
import { TEST_OWNER, TEST_OWNER_SK } from './test-keys.js';

const PUBLIC = '/';
const stubOf = (agent: string) => env.AGENT.get(env.AGENT.idFromName(agent));
/** Hands `e` to `agent` as its public shard subscription does. */
const deliver = (agent: string, e: NostrEvent) =>
  runInDurableObject(stubOf(agent), (i) => (i as unknown as { onEvent(e: NostrEvent, relay: string): Promise<void> }).onEvent(e, `${BASE.replace(/^http/, 'ws')}/`));
const cache = new ConversationKeyCache(64);
const others = (n: number): string[][] => Array.from({ length: n }, () => ['p', keys().pk]);
const rows = (agent: string, table: string) => runInDurableObject(stubOf(agent), (_i, s) => s.storage.sql.exec<{ n: number }>(`SELECT count(*) AS n FROM ${table}`).one().n);
const seenHas = (agent: string, id: string) => runInDurableObject(stubOf(agent), (_i, s) => s.storage.sql.exec<{ n: number }>('SELECT count(*) AS n FROM seen WHERE id = ?', id).one().n === 1);

/** The agent's warnings logged while `run` ran. */
async function agentWarnings(run: () => Promise<unknown>): Promise<string[]> {
  const warn = vi.spyOn(console, 'warn');
  try {
    await run();
    return warn.mock.calls.map((args) => args.map(String).join(' ')).filter((l) => l.startsWith('agent'));
  } finally {
    warn.mockRestore();
  }
}

/** A gift wrap of `rumor` from `k` to `to`, with the wrap's tags `tags` (NIP-59 puts one p; this may put more). */
function wrapWithTags(k: Keys, to: string, rumor: Parameters<typeof makeRumor>[0], tags: string[][]): NostrEvent {
  const seal = sign(k, { kind: 13, tags: [], content: encrypt(JSON.stringify(makeRumor(rumor)), cache.get(k.sk, to)) });
  const oneTime = keys();
  return sign(oneTime, { kind: 1059, tags, content: encrypt(JSON.stringify(seal), getConversationKey(oneTime.sk, to)) });
}

/** An agent listening on the public shard, with a NIP-XX client there. */
async function agentOnPublic(body: object = {}, k: Keys = keys()): Promise<{ agent: string; client: NipXxClient }> {
  const agent = await createTestAgent(body);
  await announcements(agent, [31340], (es) => es.length > 0, PUBLIC);
  return { agent, client: await NipXxClient.open(agent, k, PUBLIC) };
}

// The deployment's shards refuse such events (src/shared/recipients.ts); the agent's other relays
// (its owner's `relays`), or a shard without that rule, deliver them as a subscription does: to the
// agent's onEvent, which these tests call with what a relay would hand it.
describe('an event that names the agent and other keys is dropped', () => {
  it('a prompt with the agent’s and 9 other p tags: no answer, no run, no seen row, no slot of the window, one log line; the same prompt to the agent alone is answered', async () => {
    // One prompt a minute for the whole agent: a dropped prompt taking the slot would refuse the real one.
    const { agent, client } = await agentOnPublic({ limits: { agent_prompts_per_minute: 1 } });
    const broad = client.prompt({ ver: 1, message: 'to ten agents' }, { tags: [['p', agent], ...others(9), ['encryption', 'nip44']] });
    const twice = client.prompt({ ver: 1, message: 'named twice' }, { tags: [['p', agent], ['p', agent], ['encryption', 'nip44']] });
    const cancel = sign(client.k, { kind: 25806, content: 'x', tags: [...others(1), ['p', agent], ['e', broad.id, '', 'root'], ['encryption', 'nip44']] });
    const logged = await agentWarnings(async () => {
      for (const e of [broad, twice, cancel]) await deliver(agent, e);
      const alone = client.prompt({ ver: 1, message: 'to this agent alone' });
      await client.send(alone);
      const answered = await client.collect(alone.id);
      expect(answered.terminal.kind).toBe(25803);
      expect(answered.terminal.payload.text).toBe('echo: to this agent alone');
      expect(await client.noTerminal(broad.id, 300)).toBe(true);
      expect(await client.noTerminal(twice.id, 10)).toBe(true);
      expect(await seenHas(agent, broad.id)).toBe(false);
      expect(await seenHas(agent, twice.id)).toBe(false);
      expect(await rows(agent, 'runs')).toBe(1);
    });
    expect(logged.filter((l) => l.includes('not addressed to it alone'))).toEqual([
      `agent ${agent}: 1 event not addressed to it alone (exactly one p tag, naming it) dropped since the last report; reported at most once a minute`,
    ]);
    client.sock.close();
  });

  it('a gift wrap naming the agent and another key is not opened: the prompt in it gets no run', async () => {
    const { agent, client } = await agentOnPublic();
    const rumor = { pubkey: client.k.pk, kind: 25802, created_at: now(), tags: [['p', agent], ['encryption', 'nip44']], content: encrypt(JSON.stringify({ ver: 1, message: 'wrapped to two' }), cache.get(client.k.sk, agent)) };
    await deliver(agent, wrapWithTags(client.k, agent, rumor, [['p', agent], ...others(1)]));
    const alone = client.prompt({ ver: 1, message: 'after the wrap' });
    await client.send(alone);
    expect((await client.collect(alone.id)).terminal.kind).toBe(25803);
    expect(await client.noTerminal(makeRumor(rumor).id, 300)).toBe(true);
    expect(await rows(agent, 'runs')).toBe(1);
    client.sock.close();
  });

  it('a DVMCP tools/call ask naming the agent and another key, plain or in such a gift wrap, runs nothing and is not answered; named alone it is', async () => {
    const agent = await createTestAgent({ dvmcp: { enabled: true } });
    await announcements(agent, [31316], (es) => es.length > 0, PUBLIC);
    const c = await DvmcpClient.open(agent, PUBLIC);
    const call = { name: 'ask', arguments: { message: 'to every agent' } };
    const plain = c.request('tools/call', call, { tags: [['p', agent], ...others(1), ['method', 'tools/call']] });
    const rumor = { pubkey: c.k.pk, kind: 25910, created_at: now(), tags: [['p', agent], ['method', 'tools/call']], content: JSON.stringify({ method: 'tools/call', params: call }) };
    const ping = c.request('ping', undefined, { tags: [['p', agent], ['p', agent], ['method', 'ping']] });
    for (const e of [plain, wrapWithTags(c.k, agent, rumor, [...others(1), ['p', agent]]), ping]) await deliver(agent, e);
    const alone = await c.call('tools/call', { name: 'ask', arguments: { message: 'to this agent' } });
    expect(alone.result).toEqual({ ok: true, value: { content: [{ type: 'text', text: 'echo: to this agent' }] } });
    await expect(c.answer(plain.id, 300)).rejects.toThrow();
    await expect(c.answer(makeRumor(rumor).id, 10)).rejects.toThrow();
    await expect(c.answer(ping.id, 10)).rejects.toThrow();
    // Only the ask named alone ran: one turn in the client's conversation.
    const turns = await runInDurableObject(stubOf(agent), (_i, s) => s.storage.sql.exec<{ turns: number }>('SELECT turns FROM conversations WHERE sender = ?', c.k.pk).toArray());
    expect(turns).toEqual([{ turns: 1 }]);
    c.close();
  });
});

describe('what the agent stores for others expires', () => {
  it('a stranger’s response expires a day after it is written, an error 10 minutes after (plain 25803/25805: the tag; gift-wrapped: on the 1059)', async () => {
    const { client } = await agentOnPublic({ limits: { max_prompt_bytes: 20 } });
    const p = client.prompt({ ver: 1, message: 'hello' });
    await client.send(p);
    const response = (await client.collect(p.id)).terminal.event;
    expect(response.kind).toBe(25803);
    expect(response.tags).toEqual([['p', client.k.pk], ['e', p.id, '', 'root'], ['s', `sender:${client.k.pk}`], ['encryption', 'nip44'], ['expiration', String(response.created_at + 86_400)]]);
    const long = client.prompt({ ver: 1, message: 'a message of more than twenty bytes' });
    await client.send(long);
    const error = (await client.collect(long.id)).terminal.event;
    expect(error.kind).toBe(25805);
    expect(error.tags).toContainEqual(['expiration', String(error.created_at + 600)]);
    const { wrap, rumorId } = client.wrappedPrompt({ ver: 1, message: 'wrapped' });
    await client.send(wrap);
    const wrapped = (await client.collect(rumorId)).terminal.event;
    expect(wrapped.kind).toBe(1059);
    const rumor = unwrap(wrapped, client.k.sk, cache, nobleVerifier);
    expect(rumor.ok).toBe(true);
    if (rumor.ok) expect(wrapped.tags).toEqual([['p', client.k.pk], ['expiration', String(rumor.value.rumor.created_at + 86_400)]]);
    client.sock.close();
  });

  it('a refusal (no run) to a stranger expires after 10 minutes; the owner’s answers keep no expiration', async () => {
    const { agent, client } = await agentOnPublic({ allow: [TEST_OWNER] });
    const p = client.prompt({ ver: 1, message: 'let me in' });
    await client.send(p);
    const refusal = (await client.collect(p.id)).terminal;
    expect(refusal.payload).toMatchObject({ code: 'UNAUTHORIZED' });
    expect(refusal.event.tags).toContainEqual(['expiration', String(refusal.event.created_at + 600)]);
    const owner = await NipXxClient.open(agent, { sk: TEST_OWNER_SK, pk: TEST_OWNER }, PUBLIC);
    const mine = owner.prompt({ ver: 1, message: 'mine' });
    await owner.send(mine);
    const kept = (await owner.collect(mine.id)).terminal.event;
    expect(kept.kind).toBe(25803);
    expect(kept.tags.some((t) => t[0] === 'expiration')).toBe(false);
    client.sock.close();
    owner.sock.close();
  });

  it('a gift-wrapped DVMCP answer and progress expire 10 minutes after they are sent', async () => {
    const agent = await createTestAgent({ dvmcp: { enabled: true } });
    await announcements(agent, [31316], (es) => es.length > 0, PUBLIC);
    const c = await DvmcpClient.open(agent, PUBLIC);
    const a = await c.call('tools/call', { name: 'ask', arguments: { message: 'wrapped' } }, { form: 'wrapped' });
    expect(a.event.kind).toBe(1059);
    expect(a.event.tags).toEqual([['p', c.k.pk], ['expiration', String(a.event.created_at + 600)]]);
    const id = a.tags.find((t) => t[0] === 'e')![1]!;
    const progress = c.notifications(id);
    expect(progress.length).toBeGreaterThan(0);
    for (const n of progress) expect(n.event.tags).toEqual([['p', c.k.pk], ['expiration', String(n.event.created_at + 600)]]);
    c.close();
  });
});

describe('the agent’s DVMCP answers are bounded', () => {
  it('pings: past the provider’s 300 a minute each stranger is told once (rate-limited), and past the error answers’ cap nothing is answered', async () => {
    const agent = await createTestAgent({ dvmcp: { enabled: true } });
    await announcements(agent, [31316], (es) => es.length > 0, PUBLIC);
    const c = await DvmcpClient.open(agent, PUBLIC);
    expect((await c.call('ping')).result).toEqual({ ok: true, value: {} });
    // 299 more pings from as many keys, through the agent's own Limiter (as the relay would bring them).
    await runInDurableObject(stubOf(agent), (i) => {
      const limiter = (i as unknown as { dvmcp: { limiter: Limiter } }).dvmcp.limiter;
      for (let n = 0; n < 299; n++) expect(limiter.admit(`flood-${n}`, [], 'ping').ok).toBe(true);
    });
    const late = await DvmcpClient.open(agent, PUBLIC);
    const refused = await late.call('ping');
    expect(!refused.result.ok && refused.result.error.message).toMatch(/^rate-limited: this provider answered 300 pings this minute; retry in \d+ s$/);
    // Error answers in all are capped too: once spent, a ping from yet another key gets nothing.
    await runInDurableObject(stubOf(agent), (i) => {
      const errors = (i as unknown as { dvmcp: { errors: ErrorAnswers } }).dvmcp.errors;
      for (let n = 0; n < 1000 && errors.allow(); n++);
    });
    const last = await DvmcpClient.open(agent, PUBLIC);
    const id = await last.send(last.request('ping'));
    await expect(last.answer(id, 800)).rejects.toThrow();
    for (const x of [c, late, last]) x.close();
  });

  it('the progress of all asks together: at most the agent’s 600 notifications a minute (logged once); every ask is still answered', async () => {
    const ASKS = 30;
    const agent = await createTestAgent({ provider: 'openai', models: ['gpt-test'], dvmcp: { enabled: true }, limits: { max_concurrent_runs: ASKS, prompts_per_minute: ASKS, agent_prompts_per_minute: ASKS } });
    await announcements(agent, [31316], (es) => es.length > 0, PUBLIC);
    const c = await DvmcpClient.open(agent, PUBLIC);
    const logged = vi.spyOn(console, 'warn');
    try {
      const ids = [];
      for (let n = 0; n < ASKS; n++) ids.push(await c.send(c.request('tools/call', { name: 'ask', arguments: { message: `scenario:slow ask ${n}` } })));
      for (const id of ids) expect((await c.answer(id, 60_000)).result.ok).toBe(true);
      const sent = ids.reduce((sum, id) => sum + c.notifications(id).length, 0);
      expect(sent).toBe(600);
      const lines = logged.mock.calls.map((args) => args.map(String).join(' ')).filter((l) => l.includes('spent its notification share'));
      expect(lines).toEqual([expect.stringMatching(/^agent dvmcp: server agent spent its notification share \(600 a minute: half of what the other servers left, at most 600\): its notifications are dropped for \d+ s$/)]);
    } finally {
      logged.mockRestore();
      c.close();
    }
  }, 90_000);
});
