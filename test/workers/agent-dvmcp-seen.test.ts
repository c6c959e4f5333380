// The ids of DVMCP requests an agent keeps in its `seen` table (workers/agent/run-store.ts): a
// request is served only while fresh (created_at within 60 s of now, as the bridge), so its id is
// kept 120 s past its created_at, long enough that a copy published again while fresh is ignored
// (also after a restart), and no longer: a flood of fresh requests from strangers holds about two
// minutes of rows, not the prompts' three days. A request dated over 60 s ahead is not served, nor
// kept (its id would otherwise have to be kept until then).
import { env, runDurableObjectAlarm, runInDurableObject } from 'cloudflare:test';
import { describe, expect, it } from 'vitest';
import type { NostrEvent } from '../../src/shared/event.js';
import type { Agent } from '../../workers/agent/agent-do.js';
import { createTestAgent, NipXxClient } from './agent-helpers.js';
import { announcements, DvmcpClient } from './bridge-helpers.js';
import { now } from './helpers.js';
import { TEST_OWNER } from './test-keys.js';

const OWNER_SHARD = `/r/${TEST_OWNER}`;
const stubOf = (agent: string) => env.AGENT.get(env.AGENT.idFromName(agent));
const seenIds = (agent: string) => runInDurableObject(stubOf(agent), (_i, s) => s.storage.sql.exec<{ id: string }>('SELECT id FROM seen').toArray().map((r) => r.id));
/** The watchdog's retention pass with the agent's clock at `t` (ms). */
const pruneAt = (agent: string, t: number) =>
  runInDurableObject(stubOf(agent), (i) => {
    const a = i as Agent;
    a.now = () => t;
    a.prune();
  });
/** 26910 answers to request `id` still in the frames of `c` (not yet taken by answer()). */
const answersLeft = (c: DvmcpClient, id: string): unknown[] =>
  c.sock.frames.filter((f) => f[0] === 'EVENT' && (f[2] as NostrEvent).kind === 26910 && (f[2] as NostrEvent).tags.some((t) => t[0] === 'e' && t[1] === id));

async function agentAndClient(): Promise<{ agent: string; c: DvmcpClient }> {
  const agent = await createTestAgent({ dvmcp: { enabled: true } });
  const c = await DvmcpClient.open(agent, OWNER_SHARD);
  await announcements(agent, [31316], (es) => es.length > 0, OWNER_SHARD);
  return { agent, c };
}

/** A ping of its own (two requests alike in the same second would be one event id). */
const ping = (c: DvmcpClient, timeoutMs?: number) => c.call('ping', { nonce: Math.random() }, { timeoutMs });

/** Pings until one is answered (at most ~10 s): the agent's subscription is live. */
async function listening(c: DvmcpClient): Promise<void> {
  for (let i = 0; ; i++) {
    const answered = await ping(c, 500).then(
      () => true,
      (e: unknown) => {
        if (i >= 20) throw e;
        return false;
      },
    );
    if (answered) return;
  }
}

describe('agent: DVMCP request ids in seen', () => {
  it('are kept 120 s past their created_at, then pruned; a prompt id kept at the same time stays', async () => {
    const { agent, c } = await agentAndClient();
    const request = c.request('tools/list');
    await c.send(request);
    expect((await c.answer(request.id)).result.ok).toBe(true);
    const nip = await NipXxClient.open(agent);
    const p = nip.prompt({ ver: 1, message: 'kept for days' });
    await nip.send(p);
    expect((await nip.collect(p.id)).terminal.kind).toBe(25803);
    expect(await seenIds(agent)).toEqual(expect.arrayContaining([request.id, p.id]));

    await pruneAt(agent, (request.created_at + 120) * 1000);
    expect(await seenIds(agent)).toEqual(expect.arrayContaining([request.id, p.id]));
    await pruneAt(agent, (request.created_at + 121) * 1000);
    const left = await seenIds(agent);
    expect(left).not.toContain(request.id);
    expect(left).toContain(p.id);
    c.close();
  });

  it('a copy published again while fresh is ignored, also after a restart: the ask runs once', { timeout: 30_000 }, async () => {
    const { agent, c } = await agentAndClient();
    const call = c.request('tools/call', { name: 'ask', arguments: { message: 'once' } });
    await c.send(call);
    expect((await c.answer(call.id)).result).toEqual({ ok: true, value: { content: [{ type: 'text', text: 'echo: once' }] } });
    // An eviction: memory gone (the claims too), storage kept; the watchdog reconnects.
    await runInDurableObject(stubOf(agent), (_i, state) => state.abort('simulated eviction')).catch(() => undefined);
    await runDurableObjectAlarm(stubOf(agent));
    // Once a request is answered the agent listens again (a 25910 sent before is not stored: lost); then the replay, then a second sentinel.
    await listening(c);
    expect(now() - call.created_at).toBeLessThan(60);
    expect((await c.sock.publish(call))[2]).toBe(true);
    expect((await ping(c)).result.ok).toBe(true);
    await new Promise((r) => setTimeout(r, 300));
    expect(answersLeft(c, call.id)).toEqual([]);
    expect((await stubOf(agent).usage()).filter((r) => r.run_id === call.id)).toHaveLength(1);
    c.close();
  });

  it('a request dated more than 60 s ahead is neither answered nor kept', async () => {
    const { agent, c } = await agentAndClient();
    const ahead = c.request('tools/list', undefined, { created_at: now() + 600 });
    await c.send(ahead);
    expect((await ping(c)).result.ok).toBe(true);
    await new Promise((r) => setTimeout(r, 300));
    expect(answersLeft(c, ahead.id)).toEqual([]);
    expect(await seenIds(agent)).not.toContain(ahead.id);
    c.close();
  });
});
