// Payments through the whole bridge, as a DVMCP client sees them (EDGESTR_ENV=test: the local
// verifier; EDGESTR_PAYMENT_EXPIRY=5 in vitest.config.ts): a priced tools/call on the real
// server-everything gets 21316 payment-required (amount, local invoice, `e` = the request), is paid
// through POST /api/bridge/pay and then answered with the tool's result (plain and gift-wrapped,
// each in the form it was asked in); an unpaid call is answered NOT_PAID when the Bridge's alarm
// sees its invoice expire; a cancelled call's invoice cannot be paid; the pay endpoint's every refusal.
// How calls waiting for their payment count against the owner's bridge_calls_per_day:
// bridge-quota-holds.test.ts.
import { env, runInDurableObject, SELF } from 'cloudflare:test';
import { beforeAll, describe, expect, inject, it } from 'vitest';
import type { NostrEvent } from '../../src/shared/event.js';
import { KIND } from '../../src/shared/kinds.js';
import { localInvoice } from '../../workers/bridge/payments-local.js';
import { localPayRoutes } from '../../workers/bridge/payments-route.js';
import { PAYMENT_RPC } from '../../workers/bridge/payments.js';
import { announcements, DvmcpClient, healthWhen, registerServer } from './bridge-helpers.js';
import { BASE, randomHex } from './helpers.js';
import { TEST_OWNER } from './test-keys.js';

const SERVER = 'paid';
/** server-everything with a static resource priced by its name and a resource template priced by its name. */
const RESOURCES = 'paid-resources';
const DOC = 'demo://resource/static/document/architecture.md';
/** The fixture's /mcp-paged listing 21 pages of one resource each, the last one priced by its name. */
const PAGED = 'paid-paged';
let client: DvmcpClient;
let resourceAnnouncements: NostrEvent[];

beforeAll(async () => {
  const { provider } = await registerServer({ id: SERVER, prices: { echo: { price: '21', unit: 'sats' } } });
  await registerServer({ id: RESOURCES, prices: { 'architecture.md': { price: '13', unit: 'sats' }, 'Dynamic Text Resource': { price: '8', unit: 'sats' } } });
  // The announcement is published after the bridge subscribed on the same connection: requests sent now reach it.
  await announcements(provider, [KIND.DVMCP_TOOLS], (es) => es.some((e) => e.tags.some((t) => t[0] === 's' && t[1] === SERVER)));
  resourceAnnouncements = await announcements(provider, [KIND.DVMCP_RESOURCES], (es) => es.filter((e) => e.tags.some((t) => t[0] === 's' && t[1] === RESOURCES)).length === 2);
  client = await DvmcpClient.open(provider);
});

const pay = async (body: unknown): Promise<{ status: number; json: unknown }> => {
  const res = await SELF.fetch(`${BASE}/api/bridge/pay`, { method: 'POST', body: typeof body === 'string' ? body : JSON.stringify(body) });
  return { status: res.status, json: await res.json() };
};

/** Sends a priced echo call and waits for its payment-required notification; the request id and invoice. */
async function pricedCall(message: string): Promise<{ id: string; note: NostrEvent; invoice: string }> {
  return pricedRequest('tools/call', { name: 'echo', arguments: { message } }, SERVER);
}

/** Sends a priced request (from `c`) and waits for its payment-required notification; the request id and invoice. */
async function pricedRequest(method: string, params: Record<string, unknown>, s: string, c = client): Promise<{ id: string; note: NostrEvent; invoice: string }> {
  const id = await c.send(c.request(method, params, { s }));
  const frame = await c.sock.next((f) => {
    const e = f[2] as NostrEvent | undefined;
    return f[0] === 'EVENT' && e?.kind === KIND.DVMCP_NOTIFICATION && e.tags.some((t) => t[0] === 'e' && t[1] === id) && e.tags.some((t) => t[0] === 'status');
  });
  const note = frame[2] as NostrEvent;
  return { id, note, invoice: note.tags.find((t) => t[0] === 'amount')![2]! };
}

describe('payments through the bridge', () => {
  it('payment-required → paid (local) → the tool result', async () => {
    const { id, note, invoice } = await pricedCall('paid hello');
    expect(note.content).toBe('');
    expect(note.tags).toEqual([['status', 'payment-required'], ['amount', '21', invoice], ['e', id], ['p', client.k.pk]]);
    expect(invoice).toMatch(/^lnbcrt210n1edgestrdev/);

    expect(await pay({ invoice })).toEqual({ status: 200, json: { paid: true, sats: 21, request_id: id } });
    const answer = await client.answer(id);
    expect(answer.result.ok && answer.result.value.content).toEqual([{ type: 'text', text: 'Echo: paid hello' }]);
    expect(await pay({ invoice })).toEqual({ status: 409, json: { error: 'invoice already paid' } });
  });

  it('a gift-wrapped priced call gets its payment-required and its answer wrapped', async () => {
    const id = await client.send(client.request('tools/call', { name: 'echo', arguments: { message: 'sealed' } }, { s: SERVER }), 'wrapped');
    const frame = await client.sock.next((f) => {
      const e = f[2] as NostrEvent | undefined;
      const m = f[0] === 'EVENT' && e?.kind === KIND.GIFT_WRAP ? client.opened(e) : undefined;
      return m !== undefined && m.tags.some((t) => t[0] === 'e' && t[1] === id) && m.tags.some((t) => t[0] === 'status');
    });
    const note = client.opened(frame[2] as NostrEvent)!;
    expect(note.kind).toBe(KIND.DVMCP_NOTIFICATION);
    const invoice = note.tags.find((t) => t[0] === 'amount')![2]!;
    expect(note.tags).toEqual([['status', 'payment-required'], ['amount', '21', invoice], ['e', id], ['p', client.k.pk]]);
    expect((await pay({ invoice })).status).toBe(200);
    const answer = await client.answer(id);
    expect(answer.event.kind).toBe(KIND.GIFT_WRAP);
    expect(answer.result.ok && answer.result.value.content).toEqual([{ type: 'text', text: 'Echo: sealed' }]);
  });

  it('an unpaid call is answered NOT_PAID when its invoice expires, and cannot be paid after', async () => {
    const { id, invoice } = await pricedCall('never paid');
    const answer = await client.answer(id, 20_000);
    expect(answer.result).toEqual({ ok: false, error: { code: PAYMENT_RPC.NOT_PAID, message: 'payment not received within 5 s: the invoice expired' } });
    expect(await pay({ invoice })).toEqual({ status: 410, json: { error: 'invoice expired' } });
  });

  it('a call cancelled while it waits cannot be paid after (its request would never run)', async () => {
    const { id, invoice } = await pricedCall('cancelled');
    await client.send(client.sign21316('notifications/cancel', id));
    const bridge = env.BRIDGE.get(env.BRIDGE.idFromName(TEST_OWNER));
    const cancelled = (): Promise<boolean> => runInDurableObject(bridge, (_i, state) => state.storage.sql.exec('SELECT 1 FROM payments WHERE invoice = ? AND cancelled_at IS NOT NULL', invoice).toArray().length > 0);
    for (let i = 0; i < 100 && !(await cancelled()); i++) await new Promise((r) => setTimeout(r, 20));
    expect(await pay({ invoice })).toEqual({ status: 410, json: { error: 'invoice cancelled' } });
    expect(await runInDurableObject(bridge, (_i, state) => state.storage.sql.exec('SELECT paid_at FROM payments WHERE invoice = ?', invoice).one())).toEqual({ paid_at: null });
  });

  it('only a call that reaches upstream is metered (and counts against bridge_calls_per_day): an unpaid priced call is not', async () => {
    const day = new Date().toISOString().slice(0, 10);
    const bridge = env.BRIDGE.get(env.BRIDGE.idFromName(TEST_OWNER));
    const echoCalls = async (): Promise<number> => (await bridge.usage(day, day)).find((r) => r.server === SERVER && r.method === 'tools/call')?.calls ?? 0;
    const before = await echoCalls();
    const unpaid = await pricedCall('never paid either');
    expect((await client.answer(unpaid.id, 20_000)).result).toMatchObject({ ok: false, error: { code: PAYMENT_RPC.NOT_PAID } });
    expect(await echoCalls()).toBe(before);
    const paid = await pricedCall('paid, so metered');
    expect((await pay({ invoice: paid.invoice })).status).toBe(200);
    expect((await client.answer(paid.id)).result.ok).toBe(true);
    expect(await echoCalls()).toBe(before + 1);
  });

  it('a resource priced by its name, and a resource template priced by its name, are charged as announced', async () => {
    const caps = resourceAnnouncements.flatMap((e) => e.tags.filter((t) => t[0] === 'cap' && t[2] !== undefined));
    expect(caps).toEqual(expect.arrayContaining([['cap', 'architecture.md', '13', 'sats'], ['cap', 'Dynamic Text Resource', '8', 'sats']]));

    const byName = await pricedRequest('resources/read', { uri: DOC }, RESOURCES);
    expect(byName.note.tags).toEqual([['status', 'payment-required'], ['amount', '13', byName.invoice], ['e', byName.id], ['p', client.k.pk]]);
    expect((await pay({ invoice: byName.invoice })).status).toBe(200);
    const read = await client.answer(byName.id);
    expect(read.result.ok && (read.result.value.contents as Array<{ uri: string }>).map((c) => c.uri)).toEqual([DOC]);

    const byTemplate = await pricedRequest('resources/read', { uri: 'demo://resource/dynamic/text/7' }, RESOURCES);
    expect(byTemplate.note.tags).toEqual([['status', 'payment-required'], ['amount', '8', byTemplate.invoice], ['e', byTemplate.id], ['p', client.k.pk]]);
    client.send(client.sign21316('notifications/cancel', byTemplate.id)).catch(() => undefined);

    // A resource of the same server that nobody priced is read at once.
    const free = await client.call('resources/read', { uri: 'demo://resource/static/document/features.md' }, { s: RESOURCES });
    expect(free.result.ok && (free.result.value.contents as Array<{ uri: string }>).map((c) => c.uri)).toEqual(['demo://resource/static/document/features.md']);
    expect(client.notifications(free.event.tags.find((t) => t[0] === 'e')![1]!)).toEqual([]);
  });

  it('another spelling of a priced uri is charged as the uri itself: the scheme in capitals, a ./ segment, a template expansion in capitals', async () => {
    const own = await DvmcpClient.open(client.provider);
    const spellings: Array<[string, string]> = [
      ['DEMO://resource/static/document/architecture.md', '13'],
      ['demo://resource/static/document/./architecture.md', '13'],
      ['DEMO://resource/dynamic/text/7', '8'],
    ];
    for (const [uri, sats] of spellings) {
      const asked = await pricedRequest('resources/read', { uri }, RESOURCES, own);
      expect(asked.note.tags).toEqual([['status', 'payment-required'], ['amount', sats, asked.invoice], ['e', asked.id], ['p', own.k.pk]]);
      if (uri.includes('/./')) {
        // Paid, what was priced is what upstream serves: the uri as upstream spells it.
        expect((await pay({ invoice: asked.invoice })).status).toBe(200);
        const read = await own.answer(asked.id);
        expect(read.result.ok && (read.result.value.contents as Array<{ uri: string }>).map((c) => c.uri)).toEqual([DOC]);
      } else {
        await own.send(own.sign21316('notifications/cancel', asked.id));
      }
    }
    // A resource nobody priced, spelled another way, is read at once.
    const free = await own.call('resources/read', { uri: 'DEMO://resource/static/document/features.md' }, { s: RESOURCES });
    expect(free.result.ok && (free.result.value.contents as Array<{ uri: string }>).map((c) => c.uri)).toEqual(['demo://resource/static/document/features.md']);
    expect(own.notifications(free.event.tags.find((t) => t[0] === 'e')![1]!)).toEqual([]);
    own.close();
  });

  it('on a server with prices, a uri that is not a URI (or not a string, nor a tool name), or that the server neither lists nor expands from a template, is refused -32602 before any invoice', async () => {
    const own = await DvmcpClient.open(client.provider);
    const notUri = await own.call('resources/read', { uri: 'architecture.md' }, { s: RESOURCES });
    expect(notUri.result).toEqual({ ok: false, error: { code: -32602, message: 'invalid params: the resources/read uri "architecture.md" is not an absolute URI' } });
    const unknown = await own.call('resources/read', { uri: 'DEMO://resource/static/document/../document/nope.md' }, { s: RESOURCES });
    expect(unknown.result).toEqual({
      ok: false,
      error: { code: -32602, message: 'invalid params: demo://resource/static/document/nope.md is not a resource of paid-resources (it lists no resource with that uri and no resource template that expands to it)' },
    });
    // A uri (or a tool's name) that is not a string would reach upstream unpriced: an upstream that coerces it would serve the priced resource.
    const listed = await own.call('resources/read', { uri: ['demo://resource/static/document/architecture.md'] }, { s: RESOURCES });
    expect(listed.result).toEqual({ ok: false, error: { code: -32602, message: 'invalid params: the resources/read uri must be a string' } });
    const named = await own.call('tools/call', { name: { toString: 'echo' }, arguments: {} }, { s: RESOURCES });
    expect(named.result).toEqual({ ok: false, error: { code: -32602, message: 'invalid params: the tools/call name must be a string' } });
    for (const answered of [notUri, unknown, listed, named]) expect(own.notifications(answered.event.tags.find((t) => t[0] === 'e')![1]!)).toEqual([]);
    own.close();
  });

  it('a resource priced by its name on the 21st page of the server’s resource list: its read is refused, its price could not be determined', async () => {
    const { provider } = await registerServer({ id: PAGED, url: `${inject('toolsFixtureUrl')}/mcp-paged?resource-pages=21`, prices: { r20: { price: '5', unit: 'sats' } } });
    const own = await DvmcpClient.open(provider);
    const read = await own.call('resources/read', { uri: 'paged://resource/20' }, { s: PAGED });
    expect(read.result).toEqual({
      ok: false,
      error: { code: -32603, message: `the price of paged://resource/20 on ${PAGED} could not be determined (its resource list failed); try again later` },
    });
    expect(own.notifications(read.event.tags.find((t) => t[0] === 'e')![1]!)).toEqual([]);
    own.close();
    // Nor is the list announced cut at 20 pages: the owner reads why in the server's health.
    const health = await healthWhen(TEST_OWNER, PAGED, (h) => h.list_errors['resources/list'] !== undefined);
    expect(health.list_errors['resources/list']).toBe('resources/list answered more than 20 pages, the most one listing may hold');
  });

  it('a client has at most 3 unpaid invoices, and its notifications/cancel frees one at once', async () => {
    const own = await DvmcpClient.open(client.provider);
    const asked = async (message: string): Promise<string> => own.send(own.request('tools/call', { name: 'echo', arguments: { message } }, { s: SERVER }));
    const required = async (id: string): Promise<string> => {
      const frame = await own.sock.next((f) => {
        const e = f[2] as NostrEvent | undefined;
        return f[0] === 'EVENT' && e?.kind === KIND.DVMCP_NOTIFICATION && e.tags.some((t) => t[0] === 'e' && t[1] === id) && e.tags.some((t) => t[0] === 'status');
      });
      return (frame[2] as NostrEvent).tags.find((t) => t[0] === 'amount')![2]!;
    };
    const waiting = [await asked('one'), await asked('two'), await asked('three')];
    for (const id of waiting) await required(id);
    const fourth = await own.answer(await asked('four'));
    expect(fourth.result).toEqual({ ok: false, error: { code: PAYMENT_RPC.TOO_MANY_UNPAID, message: 'too many unpaid invoices: at most 3 per client; pay one, cancel its request or let it expire' } });
    await own.send(own.sign21316('notifications/cancel', waiting[0]!));
    // The cancel and the next request travel separately: the next one is asked again until the cancel has landed.
    let invoice: string | undefined;
    for (let i = 0; i < 10 && invoice === undefined; i++) {
      const id = await asked(`five ${i}`);
      const first = await Promise.race([required(id), own.answer(id).then(() => undefined)]);
      if (first === undefined) await new Promise((r) => setTimeout(r, 100));
      invoice = first;
    }
    expect(invoice).toMatch(/^lnbcrt210n1edgestrdev/);
    own.close();
  });

  it('the pay endpoint refuses bad bodies, foreign invoices and unknown ones', async () => {
    const shape = { status: 422, json: { error: 'the body must be {"invoice": "<local invoice>"}' } };
    expect(await pay('{not json')).toEqual(shape);
    expect(await pay({ invoice: 42 })).toEqual(shape);
    expect(await pay({ invoice: 'x'.repeat(1001) })).toEqual(shape);
    expect(await pay({ invoice: 'x'.repeat(5000) })).toEqual({ status: 413, json: { error: 'request body too large (max 4096 bytes)' } });
    expect(await pay({ invoice: 'lnbc210n1pvjluezsp5zyg3zyg3zyg3' })).toEqual({ status: 422, json: { error: 'not a local invoice of this deployment (lnbcrt…n1edgestrdev…)' } });
    expect(await pay({ invoice: localInvoice(TEST_OWNER, randomHex(16), 21) })).toEqual({ status: 404, json: { error: 'unknown invoice' } });
  });

  it('the pay endpoint reads at most 4096 bytes of a body: a longer one is cut while it streams (413), not read whole first', async () => {
    let pulled = 0;
    const long = new ReadableStream<Uint8Array>({
      pull(controller) {
        pulled++;
        if (pulled > 256) controller.close();
        else controller.enqueue(new Uint8Array(1024).fill(0x20));
      },
    });
    const res = await SELF.fetch(`${BASE}/api/bridge/pay`, { method: 'POST', body: long, duplex: 'half' } as RequestInit);
    expect(res.status).toBe(413);
    expect(await res.json()).toEqual({ error: 'request body too large (max 4096 bytes)' });
    expect(pulled).toBeLessThan(64);
  });

  it('the pay endpoint does not exist outside development and test', async () => {
    const app = localPayRoutes(() => {
      throw new Error('no bridge is asked');
    });
    const res = await app.request('/', { method: 'POST', body: JSON.stringify({ invoice: localInvoice(TEST_OWNER, randomHex(16), 21) }) }, { EDGESTR_ENV: 'production' });
    expect(res.status).toBe(404);
    expect(await res.json()).toEqual({ error: 'not found' });
  });
});
