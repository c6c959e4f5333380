// Helpers for agent tests: create an agent through the API, and act as a NIP-XX client over a real
// WebSocket to the owner's shard (encrypting prompts, decrypting the agent's events).
import { runInDurableObject, SELF } from 'cloudflare:test';
import type { NostrEvent } from '../../src/shared/event.js';
import { Observer, type ObservedFrame } from '../../src/shared/ao-observer.js';
import { RelayClient } from '../../src/shared/relay-client.js';
import { ConversationKeyCache, decrypt, encrypt } from '../../src/shared/nip44.js';
import { giftWrap, makeRumor, unwrap } from '../../src/shared/nip59.js';
import { nobleVerifier } from '../../src/shared/verify.js';
import { api } from './api-helpers.js';
import { connect, keys, now, sign, socketObjects, type Keys, type TestSocket } from './helpers.js';
import { TEST_OWNER, TEST_OWNER_SK } from './test-keys.js';

export async function createTestAgent(body: object = {}): Promise<string> {
  const r = await api(TEST_OWNER_SK, 'POST', '/api/agents', { name: 'test agent', provider: 'echo', ...body });
  if (r.status !== 201) throw new Error(`agent not created: ${r.status} ${JSON.stringify(r.json)}`);
  return (r.json as { pubkey: string }).pubkey;
}

export interface RunEvents {
  status: Array<Record<string, unknown>>;
  deltas: Array<{ text: string; seq: number }>;
  tools: Array<Record<string, unknown>>;
  terminal: { kind: number; payload: Record<string, unknown>; event: NostrEvent };
}

const cache = new ConversationKeyCache(64);

export class NipXxClient {
  readonly k: Keys;
  readonly sock: TestSocket;
  private constructor(k: Keys, sock: TestSocket, readonly agent: string) {
    this.k = k;
    this.sock = sock;
  }

  /** A client on the owner's shard (or on `path`, e.g. `/` for the public shard). */
  static async open(agent: string, k: Keys = keys(), path = `/r/${TEST_OWNER}`): Promise<NipXxClient> {
    const sock = await connect(path);
    await sock.auth(k);
    const c = new NipXxClient(k, sock, agent);
    await sock.req('mine', { kinds: [25800, 25801, 25803, 25804, 25805], '#p': [k.pk], since: now() - 5 });
    await sock.req('wrapped', { kinds: [1059, 21059], '#p': [k.pk], since: now() - 3 * 24 * 3600 });
    return c;
  }

  /** Builds a prompt event (plain). `payload` may be an object or raw content. */
  prompt(payload: object | string, opts: { tags?: string[][]; session?: string; created_at?: number } = {}): NostrEvent {
    const content = typeof payload === 'string' ? payload : encrypt(JSON.stringify(payload), cache.get(this.k.sk, this.agent));
    return sign(this.k, {
      kind: 25802,
      content,
      created_at: opts.created_at,
      tags: opts.tags ?? [['p', this.agent], ['encryption', 'nip44'], ...(opts.session ? [['s', opts.session]] : [])],
    });
  }

  cancel(runId: string): NostrEvent {
    return sign(this.k, {
      kind: 25806,
      content: encrypt(JSON.stringify({ ver: 1, reason: 'user_cancel' }), cache.get(this.k.sk, this.agent)),
      tags: [['p', this.agent], ['e', runId, '', 'root'], ['encryption', 'nip44']],
    });
  }

  /** A gift-wrapped prompt (NIP-59 privacy-first profile). */
  wrappedPrompt(payload: object): { wrap: NostrEvent; rumorId: string } {
    const rumor = makeRumor({
      pubkey: this.k.pk,
      kind: 25802,
      created_at: now(),
      tags: [['p', this.agent], ['encryption', 'nip44']],
      content: encrypt(JSON.stringify(payload), cache.get(this.k.sk, this.agent)),
    });
    return { wrap: giftWrap(rumor, this.k.sk, this.agent, cache), rumorId: rumor.id };
  }

  async send(e: NostrEvent): Promise<void> {
    const ok = await this.sock.publish(e);
    if (!ok[2]) throw new Error(`prompt refused: ${ok[3]}`);
  }

  private open(e: NostrEvent): { kind: number; tags: string[][]; payload: Record<string, unknown>; event: NostrEvent } | undefined {
    let inner: { kind: number; tags: string[][]; content: string; pubkey: string } = e;
    if (e.kind === 1059 || e.kind === 21059) {
      const u = unwrap(e, this.k.sk, cache, nobleVerifier);
      if (!u.ok) throw new Error(`cannot unwrap: ${u.error}`);
      inner = u.value.rumor;
    }
    if (inner.pubkey !== this.agent) return undefined;
    const text = decrypt(inner.content, cache.get(this.k.sk, this.agent));
    if (!text.ok) throw new Error(`cannot decrypt agent event: ${text.error}`);
    return { kind: inner.kind, tags: inner.tags, payload: JSON.parse(text.value) as Record<string, unknown>, event: e };
  }

  /** Collects the events of run `runId` until its terminal event. */
  async collect(runId: string, timeoutMs = 8000): Promise<RunEvents> {
    const out: Omit<RunEvents, 'terminal'> = { status: [], deltas: [], tools: [] };
    const deadline = Date.now() + timeoutMs;
    // Nostr delivery is at least once (the agent re-sends an event whose OK it did not get, e.g.
    // across a reconnect): a client counts each event id once, as every client library does.
    const seen = new Set<string>();
    for (;;) {
      const f = await this.sock.next((x) => x[0] === 'EVENT', Math.max(1, deadline - Date.now()));
      const id = (f[2] as NostrEvent).id;
      if (seen.has(id)) continue;
      seen.add(id);
      const opened = this.open(f[2] as NostrEvent);
      if (!opened) continue;
      const root = opened.tags.find((t) => t[0] === 'e' && t[3] === 'root')?.[1];
      if (root !== runId) continue;
      if (opened.kind === 25800) out.status.push(opened.payload);
      else if (opened.kind === 25801) out.deltas.push(opened.payload as { text: string; seq: number });
      else if (opened.kind === 25804) out.tools.push(opened.payload);
      else if (opened.kind === 25803 || opened.kind === 25805) return { ...out, terminal: { kind: opened.kind, payload: opened.payload, event: opened.event } };
    }
  }

  /** Asserts no further terminal event for `runId` arrives within `ms`. */
  async noTerminal(runId: string, ms = 400): Promise<boolean> {
    await new Promise((r) => setTimeout(r, ms));
    return !this.sock.frames.some((f) => {
      if (f[0] !== 'EVENT') return false;
      const o = this.open(f[2] as NostrEvent);
      return !!o && (o.kind === 25803 || o.kind === 25805) && o.tags.some((t) => t[0] === 'e' && t[1] === runId);
    });
  }
}

/** The test owner as a RelayClient on its own shard (over SELF), authenticated on demand, no reconnects. */
/** A relay client on the owner's shard that authenticates as the owner (TEST_OWNER unless `owner` is given). */
export function ownerRelayClient(owner: { sk: Uint8Array; pk: string } = { sk: TEST_OWNER_SK, pk: TEST_OWNER }): RelayClient {
  return new RelayClient({
    url: `ws://relay.test/r/${owner.pk}`,
    socket: async (u) => {
      const res = await SELF.fetch(u.replace(/^ws/, 'http'), { headers: { Upgrade: 'websocket' } });
      const ws = res.webSocket!;
      ws.accept();
      return ws;
    },
    auth: async (t) => sign(owner, t),
    reconnect: false,
  });
}

/** What `watchRunsEnded` gives: the payloads seen so far (and every frame), a wait for `n` of them, and the end of the watch. */
export interface RunsEnded {
  readonly resolved: Array<Record<string, unknown>>;
  /** Every frame the owner's observer accepted, in order (session_resolved ones too). */
  readonly frames: ObservedFrame[];
  /** Waits (polled, at most ~3 s) until `n` payloads arrived. */
  until(n: number): Promise<void>;
  stop(): void;
}

/** The owner's NIP-AO `session_resolved` payloads (and all frames) of `agents`' runs, from now on (over the owner's authenticated shard connection). */
export async function watchRunsEnded(agents: string[], owner: { sk: Uint8Array; pk: string } = { sk: TEST_OWNER_SK, pk: TEST_OWNER }): Promise<RunsEnded> {
  const relay = ownerRelayClient(owner);
  await relay.connect();
  await relay.authenticate();
  const resolved: Array<Record<string, unknown>> = [];
  const frames: ObservedFrame[] = [];
  const observer = new Observer({
    ownerSecretKey: owner.sk,
    agents,
    subscribe: (filters, opts) => relay.subscribe(filters, opts),
    publish: (e) => relay.publish(e),
    onFrame: (f) => {
      frames.push(f);
      if (f.frame.kind === 'session_resolved') resolved.push(f.frame.payload);
    },
  });
  observer.start();
  await new Promise((r) => setTimeout(r, 100));
  return {
    resolved,
    frames,
    until: async (n) => {
      for (let i = 0; i < 60 && resolved.length < n; i++) await new Promise((r) => setTimeout(r, 50));
    },
    stop: () => {
      observer.stop();
      relay.close();
    },
  };
}

/** Closes, from the relay's side, every connection of the owner's shard authenticated as `agent`; how many. */
export async function dropAgentConnections(agent: string): Promise<number> {
  let n = 0;
  // The shard's primary, or each of its edges when RELAY_EDGES splits it (vitest.edges.config.ts).
  for (const shard of socketObjects(TEST_OWNER)) {
    n += await runInDurableObject(shard, (_i, state) => {
      const cids = state.storage.sql.exec<{ cid: string }>('SELECT cid FROM conn_auth WHERE pubkey = ?', agent).toArray().map((r) => r.cid);
      let dropped = 0;
      for (const ws of state.getWebSockets()) {
        const att = ws.deserializeAttachment() as { cid: string } | null;
        if (att && cids.includes(att.cid)) {
          ws.close(1012, 'service restart');
          dropped++;
        }
      }
      return dropped;
    });
  }
  return n;
}

/** The agent's ai.info (31340) on the owner's shard, polled until it is published (at most ~4 s). */
export async function agentInfo(agent: string): Promise<NostrEvent | undefined> {
  const s = await connect(`/r/${TEST_OWNER}`);
  let info: NostrEvent | undefined;
  for (let i = 0; i < 40 && !info; i++) {
    info = (await s.req(`i${i}`, { kinds: [31340], authors: [agent] })).events[0];
    if (!info) await new Promise((r) => setTimeout(r, 100));
  }
  s.close();
  return info;
}

/** Polls the fake provider at `fake` until the request carrying `marker` was closed by the agent (at most ~5 s); whether it was. */
export async function providerClosed(fake: string, marker: string): Promise<boolean> {
  for (let i = 0; i < 50; i++) {
    const records = (await (await fetch(`${fake}/_requests?contains=${encodeURIComponent(marker)}`)).json()) as Array<{ clientClosed: boolean }>;
    if (records[0]?.clientClosed) return true;
    await new Promise((r) => setTimeout(r, 100));
  }
  return false;
}
