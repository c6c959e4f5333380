// A DVMCP server peer for tests, at the network boundary: it publishes real signed 26910/21316
// events (plain, or gift-wrapped in the form it was asked in) through a real relay, built from the
// protocol core (src/shared/dvmcp.ts). It announces one server (31316 + 31317) and answers tools:
//   echo {text}            → text content
//   slow {steps, ms}       → `steps` progress notifications `ms` apart, then "done"
//   hang                   → never answers (records notifications/cancel it receives)
//   paid {}                → payment-required (sats 21, invoice "lnbc210n1test"); answers "paid" once
//                            `markPaid(requestId)` is called (the tests' local payment verifier)
//   underpriced {}         → payment-required stating 0 sats with an invoice of 1,000,000 sats
//                            ("lnbc10m1test"); answers "paid" once `markPaid(requestId)` is called
//   noisy {}               → first a forged answer (wrong author), an answer with a wrong `e`, then "real"
//   backdated {text}       → text content; gift-wrapped, the seal and wrap dated an hour back (NIP-59)
//   spec-tags {text}       → text content, plain, tagged as the spec's Call Tool Response
//                            template: only ["e", <request id>] (no `p`)
//   deep {levels}          → a result nesting `levels` levels (>= 2): no content, a structuredContent
//                            {nest} holding levels-2 nested arrays (written by hand: JSON.stringify
//                            cannot write 50,000 levels); list it with `options.tools` (DEEP_TOOL)
//   (underpriced, backdated, spec-tags and deep are not announced: the announcement tests list the tools above)
//   anything else          → protocol error -32602 "Unknown tool: <name>"
// With `options.tools`, tools/list answers those instead (the announcement still carries the tools
// above), in pages (cursor "<n>") of at most `options.pageChars` characters of tools' JSON (default
// 100,000; a tool larger alone is a page of its own). With `options.announce: false` it announces
// nothing (a private server: only who knows its provider and id can call it). It answers a request
// in the form it came in, whatever `encryption` it announces.
// Used by the workerd tests (test/workers/dvmcp-client.test.ts) and the /mcp e2e test from Node.

import { finalizeEvent, generateSecretKey, getPublicKey } from 'nostr-tools/pure';
import {
  errorTemplate,
  listAnnouncement,
  LISTS,
  notificationTemplate,
  parseMessage,
  paymentRequiredTemplate,
  responseTemplate,
  RPC,
  rpcError,
  serverAnnouncement,
  type Incoming,
  type Requester,
} from '../../src/shared/dvmcp.js';
import { unwrapDvmcp, wrapDvmcp, type Form } from '../../src/shared/dvmcp-wrap.js';
import { giftWrap, makeRumor } from '../../src/shared/nip59.js';
import type { NostrEvent } from '../../src/shared/event.js';
import { KIND } from '../../src/shared/kinds.js';
import { ConversationKeyCache } from '../../src/shared/nip44.js';
import { RelayClient, type EventTemplate, type SocketFactory } from '../../src/shared/relay-client.js';
import { nobleVerifier } from '../../src/shared/verify.js';

export const RESPONDER_TOOLS = [
  { name: 'echo', description: 'Echoes text', inputSchema: { type: 'object', properties: { text: { type: 'string' } }, required: ['text'] } },
  { name: 'slow', description: 'Reports progress', inputSchema: { type: 'object', properties: { steps: { type: 'number' }, ms: { type: 'number' } } } },
  { name: 'hang', description: 'Never answers', inputSchema: { type: 'object', properties: {} } },
  { name: 'paid', description: 'Costs 21 sats', inputSchema: { type: 'object', properties: {} } },
  { name: 'noisy', description: 'Answers after noise', inputSchema: { type: 'object', properties: {} } },
];

/** The `deep` tool as tools/list gives it (not among RESPONDER_TOOLS). */
export const DEEP_TOOL = { name: 'deep', description: 'Answers a deep result', inputSchema: { type: 'object', properties: { levels: { type: 'number' } } } };

const signWith = (sk: Uint8Array, t: EventTemplate): NostrEvent => {
  const { id, pubkey, created_at, kind, tags, content, sig } = finalizeEvent(t, sk);
  return { id, pubkey, created_at, kind, tags, content, sig };
};

/** A tool as tools/list gives it. */
export interface ResponderTool {
  name: string;
  description?: string;
  inputSchema: Record<string, unknown>;
}

/** `tools` in pages of at most `pageChars` characters of JSON (a tool larger alone on its own page). */
function pagesOf(tools: readonly ResponderTool[], pageChars: number): ResponderTool[][] {
  const pages: ResponderTool[][] = [[]];
  let chars = 0;
  for (const tool of tools) {
    const size = JSON.stringify(tool).length;
    if (chars + size > pageChars && pages.at(-1)!.length > 0) {
      pages.push([]);
      chars = 0;
    }
    pages.at(-1)!.push(tool);
    chars += size;
  }
  return pages;
}

export class DvmcpResponder {
  readonly sk = generateSecretKey();
  readonly provider = getPublicKey(this.sk);
  /** Request ids of notifications/cancel received. */
  readonly cancels: string[] = [];
  /** Requests received (method, how they travelled, id, author; the gift wrap a wrapped one came in). */
  readonly requests: Array<{ method: string; form: Form; id: string; client: string; wrap?: NostrEvent }> = [];
  readonly #relay: RelayClient;
  readonly #keys = new ConversationKeyCache();
  readonly #paid = new Map<string, () => void>();
  readonly #pages: ResponderTool[][];
  readonly #announce: boolean;
  #closed = false;

  constructor(
    url: string,
    socket: SocketFactory,
    readonly serverId = 'test-server',
    readonly encryption = true,
    options: { tools?: readonly ResponderTool[]; pageChars?: number; announce?: boolean } = {},
  ) {
    this.#relay = new RelayClient({ url, socket, auth: async (t) => signWith(this.sk, t), reconnect: false });
    this.#pages = pagesOf(options.tools ?? RESPONDER_TOOLS, options.tools ? (options.pageChars ?? 100_000) : Number.POSITIVE_INFINITY);
    this.#announce = options.announce ?? true;
  }

  /** Subscribes to requests (waits for EOSE) and publishes the announcements (unless told not to). */
  async start(): Promise<void> {
    const since = Math.floor(Date.now() / 1000) - 5;
    await new Promise<void>((resolve, reject) => {
      let waiting = 2;
      const opts = (onEvent: (e: NostrEvent) => void) => ({ onEvent, onEose: () => void (--waiting === 0 && resolve()), onClosed: (m: string) => reject(new Error(m)) });
      this.#relay.subscribe([{ kinds: [KIND.DVMCP_REQUEST, KIND.DVMCP_NOTIFICATION], '#p': [this.provider], since }], opts((e) => this.#handle(this.#on(e, 'plain'))));
      this.#relay.subscribe([{ kinds: [KIND.GIFT_WRAP], '#p': [this.provider], since }], opts((e) => this.#handle(this.#onWrap(e))));
    });
    if (!this.#announce) return;
    const init = { protocolVersion: '2025-03-26', capabilities: { tools: {} }, serverInfo: { name: 'responder', version: '1.0.0' } };
    await this.#publish(serverAnnouncement({ id: this.serverId, name: 'Test responder', encryption: this.encryption }, init));
    await this.#publish(listAnnouncement(this.serverId, LISTS[0], RESPONDER_TOOLS, { paid: { price: '21', unit: 'sats' } }));
  }

  close(): void {
    this.#closed = true;
    this.#relay.close();
  }

  /** A request's handling failed: logged, unless the responder was closed meanwhile (a test ended). */
  #handle(p: Promise<void>): void {
    p.catch((e: unknown) => {
      if (!this.#closed) console.error('dvmcp responder:', e);
    });
  }

  /** The local payment verifier: the paid request is answered now. */
  markPaid(requestId: string): void {
    this.#paid.get(requestId)?.();
  }

  /** Publishes `t` signed by `sk` (default the provider) in `form` to `to`. */
  async send(t: EventTemplate, form: Form, to: string, sk = this.sk): Promise<void> {
    const e = form === 'plain' ? signWith(sk, t) : wrapDvmcp(t, sk, getPublicKey(sk), to, this.#keys, form);
    await this.#publish(e);
  }

  async #publish(t: EventTemplate | NostrEvent): Promise<void> {
    const e = 'sig' in t ? t : signWith(this.sk, t);
    const r = await this.#relay.publish(e, { timeoutMs: 5000 });
    if (!r.ok) throw new Error(`responder publish refused: ${r.message}`);
  }

  async #onWrap(e: NostrEvent): Promise<void> {
    const opened = unwrapDvmcp(e, this.sk, this.#keys, nobleVerifier);
    if (opened.ok) await this.#on(opened.value.message, opened.value.form, e);
  }

  async #on(e: Incoming, form: Form, wrap?: NostrEvent): Promise<void> {
    const m = parseMessage(e);
    if (!m.ok) return;
    const msg = m.value;
    if (msg.type === 'notification') {
      if (msg.method === 'notifications/cancel' && msg.refersTo) this.cancels.push(msg.refersTo);
      return;
    }
    this.requests.push({ method: msg.method, form, id: msg.requestId, client: msg.client, ...(wrap ? { wrap } : {}) });
    const to: Requester = { requestId: msg.requestId, client: msg.client };
    const answer = (result: Record<string, unknown>) => this.send(responseTemplate(to, result), form, msg.client);
    if (msg.method === 'tools/list') {
      const page = typeof msg.params.cursor === 'string' ? Number(msg.params.cursor) : 0;
      return answer({ tools: this.#pages[page] ?? [], ...(page + 1 < this.#pages.length ? { nextCursor: String(page + 1) } : {}) });
    }
    if (msg.method !== 'tools/call') return this.send(errorTemplate(to, rpcError(RPC.METHOD_NOT_FOUND, `Method not found: ${msg.method}`)), form, msg.client);
    const args = (msg.params.arguments ?? {}) as Record<string, unknown>;
    const text = (t: string) => ({ content: [{ type: 'text', text: t }] });
    switch (msg.params.name) {
      case 'echo':
        return answer(text(String(args.text)));
      case 'slow': {
        const steps = Number(args.steps ?? 2);
        for (let i = 1; i <= steps; i++) {
          await new Promise((r) => setTimeout(r, Number(args.ms ?? 50)));
          await this.send(notificationTemplate(msg.client, 'notifications/progress', { progress: i, total: steps, message: `step ${i}` }, { requestId: msg.requestId }), form, msg.client);
        }
        return answer(text('done'));
      }
      case 'hang':
        return;
      case 'paid':
        this.#paid.set(msg.requestId, () => this.#handle(answer(text('paid'))));
        return this.send(paymentRequiredTemplate(to, 21, 'lnbc210n1test'), form, msg.client);
      case 'underpriced':
        this.#paid.set(msg.requestId, () => this.#handle(answer(text('paid'))));
        return this.send(paymentRequiredTemplate(to, 0, 'lnbc10m1test'), form, msg.client);
      case 'noisy': {
        await this.send(responseTemplate(to, text('forged')), form, msg.client, generateSecretKey());
        await this.send(responseTemplate({ ...to, requestId: 'f'.repeat(64) }, text('wrong e')), form, msg.client);
        return answer(text('real'));
      }
      case 'spec-tags':
        return this.#publish({ ...responseTemplate(to, text(String(args.text))), tags: [['e', msg.requestId]] });
      case 'deep': {
        const arrays = Number(args.levels ?? 2) - 2;
        return this.send({ ...responseTemplate(to, {}), content: `{"content":[],"structuredContent":{"nest":${'['.repeat(arrays)}${']'.repeat(arrays)}}}` }, form, msg.client);
      }
      case 'backdated': {
        if (form === 'plain') return answer(text(String(args.text)));
        const t = responseTemplate(to, text(String(args.text)));
        const rumor = makeRumor({ pubkey: this.provider, created_at: t.created_at, kind: t.kind, tags: t.tags, content: t.content });
        return this.#publish(giftWrap(rumor, this.sk, msg.client, this.#keys, t.created_at - 3600, { kind: KIND.GIFT_WRAP, exactTime: true }));
      }
      default:
        return this.send(errorTemplate(to, rpcError(RPC.INVALID_PARAMS, `Unknown tool: ${String(msg.params.name)}`)), form, msg.client);
    }
  }
}
