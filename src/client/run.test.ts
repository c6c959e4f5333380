// AgentConversation (run.ts) against a fake relay at the network boundary (test/helpers-node/fake-relay.ts)
// standing for an agent that sends more than one terminal event for a run: NIP-XX says clients MUST
// keep only the terminal with the highest created_at, then the highest id.
import { afterEach, describe, expect, it } from 'vitest';
import { finalizeEvent } from 'nostr-tools/pure';
import type { NostrEvent } from '../shared/event.js';
import { KIND } from '../shared/kinds.js';
import { ConversationKeyCache, encrypt } from '../shared/nip44.js';
import { NIPXX_VERSION } from '../shared/nip-xx.js';
import { fakeRelay, type FakeRelay } from '../../test/helpers-node/fake-relay.js';
import { newKeyPair } from './keys.js';
import { AgentConversation } from './run.js';

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
