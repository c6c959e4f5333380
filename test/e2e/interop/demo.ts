// Shared by the interop tests (one file per client library): what every library needs apart from
// its transport — the demo owner and agent from /health, keys, NIP-44 prompts to the demo agent
// and their answers, and NIP-59 gift wraps. Crypto comes from this package's nostr-tools copy, so
// each library is exercised only as a relay client.
import { finalizeEvent, generateSecretKey, getPublicKey, type Event } from 'nostr-tools/pure';
import * as nip44 from 'nostr-tools/nip44';
import { unwrapEvent, wrapEvent } from 'nostr-tools/nip59';

export interface Demo {
  owner: string;
  agent: string;
  /** ws URL of the demo owner's shard (no trailing slash). */
  ownerShard: string;
}

export async function demo(httpUrl: string, relayUrl: string): Promise<Demo> {
  const health = (await (await fetch(`${httpUrl}/health`)).json()) as { demo?: { owner: string; agent: string; relay: string } };
  if (!health.demo) throw new Error('no demo block in /health (is EDGESTR_ENV=development?)');
  return { owner: health.demo.owner, agent: health.demo.agent, ownerShard: `${relayUrl}${health.demo.relay}` };
}

export interface Key {
  sk: Uint8Array;
  pk: string;
}

export const newKey = (): Key => {
  const sk = generateSecretKey();
  return { sk, pk: getPublicKey(sk) };
};

export const nowSeconds = (): number => Math.floor(Date.now() / 1000);

export const note = (key: Key, content: string, tags: string[][] = []): Event =>
  finalizeEvent({ kind: 1, created_at: nowSeconds(), tags, content }, key.sk);

/** A NIP-XX prompt (kind 25802) to `agent`, NIP-44 encrypted. */
export function prompt(key: Key, agent: string, message: string): Event {
  const content = nip44.encrypt(JSON.stringify({ ver: 1, message }), nip44.getConversationKey(key.sk, agent));
  return finalizeEvent({ kind: 25802, created_at: nowSeconds(), tags: [['p', agent], ['encryption', 'nip44']], content }, key.sk);
}

/** The decrypted payload of an event the agent sent to `key`. */
export function openFromAgent(key: Key, agent: string, e: { content: string }): Record<string, unknown> {
  return JSON.parse(nip44.decrypt(e.content, nip44.getConversationKey(key.sk, agent))) as Record<string, unknown>;
}

/** A NIP-59 gift wrap (kind 1059) of a kind 14 message from `key` to itself. */
export const wrapToSelf = (key: Key, text: string): Event => wrapEvent({ kind: 14, content: text, tags: [['p', key.pk]] }, key.sk, key.pk);

export const unwrappedText = (key: Key, wrap: Event): string => unwrapEvent(wrap, key.sk).content;

/** Collects what the demo agent sends about one run: deltas in order and the terminal event. */
export class RunCollector {
  readonly deltas: Array<{ seq: number; text: string }> = [];
  terminal: { kind: number; payload: Record<string, unknown> } | undefined;
  #done: () => void = () => undefined;
  readonly done: Promise<void> = new Promise((r) => (this.#done = r));

  constructor(
    readonly key: Key,
    readonly agent: string,
  ) {}

  take(e: { kind: number; pubkey: string; content: string }): void {
    if (e.pubkey !== this.agent) return;
    const payload = openFromAgent(this.key, this.agent, e);
    if (e.kind === 25801) this.deltas.push(payload as { seq: number; text: string });
    if (e.kind === 25803 || e.kind === 25805) {
      this.terminal = { kind: e.kind, payload };
      this.#done();
    }
  }

  /** The deltas joined in `seq` order. */
  get streamed(): string {
    return [...this.deltas].sort((a, b) => a.seq - b.seq).map((d) => d.text).join('');
  }
}

/** Rejects after `ms` with `what` (so a hung library call fails the test with a reason). */
export function within<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`timed out after ${ms} ms: ${what}`)), ms);
  });
  return Promise.race([p, timeout]).finally(() => clearTimeout(timer));
}
