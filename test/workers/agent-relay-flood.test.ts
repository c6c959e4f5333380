// An external relay (one of the agent's `relays`, which anyone may post to) cannot make the agent do
// unbounded work: each event it sends costs a Schnorr verification (a gift wrap also an ECDH), and
// each prompt acted on a run and a `seen` row, so each relay link takes events through a token
// bucket before any of that (EXTERNAL_EVENTS_PER_SECOND sustained, EXTERNAL_EVENTS_BURST at once); the excess is
// dropped, counted, and logged in one line a minute (workers/common/drop-summary.ts: the first drop
// at once, the rest with the next line a minute later). The flooding relay is
// test/fake-provider/flood-relay.ts: on the agent's REQ it streams 3,000 signed 25802 prompts from
// fresh keys p-tagging the agent.
import { env, runInDurableObject } from 'cloudflare:test';
import { describe, expect, inject, it, vi } from 'vitest';
import { Agent } from '../../workers/agent/agent-do.js';
import { EXTERNAL_EVENTS_BURST, EXTERNAL_EVENTS_PER_SECOND } from '../../workers/agent/relay-links.js';
import { NipXxClient, createTestAgent } from './agent-helpers.js';

declare module 'vitest' {
  export interface ProvidedContext {
    floodRelayUrl: string;
  }
}

const stubOf = (agent: string) => env.AGENT.get(env.AGENT.idFromName(agent));
const seenRows = (agent: string) => runInDurableObject(stubOf(agent), (_i, state) => state.storage.sql.exec<{ n: number }>('SELECT COUNT(*) AS n FROM seen').one().n);
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe('an external relay flooding the agent', () => {
  it('gets at most the burst plus the rate through; a prompt on the owner’s shard is answered meanwhile', async () => {
    const tag = `flood-${Math.random().toString(36).slice(2)}`;
    const flooder = inject('floodRelayUrl');
    const stats = async () => (await (await fetch(`${flooder.replace(/^ws/, 'http')}/stats?tag=${tag}`)).json()) as { connections: number; sent: number; done: boolean };
    const started = Date.now();
    // The prompt caps are raised so that only the relay's bucket stands between the flood and the agent.
    const limits = { agent_prompts_per_minute: 100_000, max_concurrent_runs: 100 };
    const relay = `${flooder}/${tag}/3000/hold`;
    const agent = await createTestAgent({ relays: [relay], limits });
    const warned = vi.spyOn(console, 'warn');
    // The client subscribes before the flood starts (local workerd runs every object, the flooded
    // agent's included, on one thread: under load its REQs' EOSE took over 10 s once the flood ran).
    const c = await NipXxClient.open(agent);
    await fetch(`${flooder.replace(/^ws/, 'http')}/start?tag=${tag}`);
    const released = Date.now();
    while ((await stats()).sent === 0) {
      expect(Date.now() - released, 'the agent subscribes to the flooding relay').toBeLessThan(10_000);
      await sleep(50);
    }
    // The burst the bucket lets through may fill the agent's 100 concurrent runs for a moment (that
    // cap is its own protection): a refusal for it says when to retry, and the retry is answered.
    let answer: Record<string, unknown> = {};
    for (let attempt = 0; attempt < 5; attempt++) {
      const p = c.prompt({ ver: 1, message: 'still there?' });
      await c.send(p);
      // The burst's runs share the machine (and with K = 4 edges, every one of their events takes an
      // extra hop): on a loaded two-core machine the answer has taken over 20 s.
      answer = (await c.collect(p.id, 45_000)).terminal.payload;
      if (answer['code'] !== 'RATE_LIMIT' || !String(answer['message']).includes('concurrent runs')) break;
      await sleep(Number(answer['retry_after'] ?? 1) * 1000);
    }
    expect(answer).toMatchObject({ text: 'echo: still there?' });
    while (!(await stats()).done) await sleep(50);
    // Let the agent read what the relay sent (the old code then holds a row per event).
    await sleep(1500);
    const rows = await seenRows(agent);
    const seconds = (Date.now() - started) / 1000;
    // The flood's rows, plus the owner-shard prompt.
    expect(rows).toBeLessThanOrEqual(EXTERNAL_EVENTS_BURST + Math.ceil(EXTERNAL_EVENTS_PER_SECOND * seconds) + 1);
    expect(rows).toBeGreaterThan(EXTERNAL_EVENTS_BURST / 2);
    const dropped = await runInDurableObject(stubOf(agent), (i) => (i as Agent).droppedFromRelays);
    expect(dropped).toBeGreaterThanOrEqual(3000 - rows);
    const lines = warned.mock.calls.map((args) => args.map(String).join(' ')).filter((l) => l.includes('external relay'));
    warned.mockRestore();
    expect(lines).toEqual([
      `agent ${agent}: 1 event over an external relay's limit dropped since the last report (1 "${relay}: more than ${EXTERNAL_EVENTS_PER_SECOND} a second (burst ${EXTERNAL_EVENTS_BURST})"); reported at most once a minute`,
    ]);
    // Signing 3,000 events with fresh keys takes the relay seconds on a loaded machine.
  }, 120_000);
});
