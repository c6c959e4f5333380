// DVMCP protocol core (src/shared/dvmcp.ts, dvmcp-wrap.ts): parsing the captured reference and
// ContextVM requests, every malformed input with its JSON-RPC error, the shapes of everything the
// bridge publishes, and gift wraps in both rumor forms (and the reference's unauthenticated seals,
// and ContextVM's single-layer wraps, both refused).
import { describe, expect, it } from 'vitest';
import { finalizeEvent, generateSecretKey, getPublicKey } from 'nostr-tools/pure';
import { hexToBytes } from '@noble/hashes/utils.js';
import refPlain from '../../test/vectors/interop/dvmcp-ref-public-plain.jsonl?raw';
import refPrivate from '../../test/vectors/interop/dvmcp-ref-private-initialize.jsonl?raw';
import refWrapped from '../../test/vectors/interop/dvmcp-ref-public-giftwrap.jsonl?raw';
import cvmPlain from '../../test/vectors/interop/cvm-0.11.14-plain.jsonl?raw';
import cvmWrapped from '../../test/vectors/interop/cvm-0.11.14-giftwrap.jsonl?raw';
import {
  announcementDeletion,
  errorTemplate,
  initializeResponse,
  LISTS,
  listAnnouncement,
  canonicalUri,
  matchesUriTemplate,
  priceOf,
  readPrice,
  notificationTemplate,
  parseMessage,
  parseResponse,
  paymentRequiredTemplate,
  responseTemplate,
  RPC,
  serverAnnouncement,
  withoutInjectedName,
  type Incoming,
  type Prices,
} from './dvmcp.js';
import { unwrapDvmcp, wrapDvmcp } from './dvmcp-wrap.js';
import { ConversationKeyCache, encrypt, getConversationKey } from './nip44.js';
import { computeEventId, type NostrEvent } from './event.js';
import { nobleVerifier } from './verify.js';

interface Captured {
  t: number;
  ok: boolean;
  e: NostrEvent;
}
const lines = (raw: string): Captured[] => raw.trim().split('\n').map((l) => JSON.parse(l) as Captured);

const BRIDGE_SK = hexToBytes('33'.repeat(32));
const CLIENT_SK = hexToBytes('44'.repeat(32));
const BRIDGE = getPublicKey(BRIDGE_SK);
const CLIENT = getPublicKey(CLIENT_SK);
const keys = new ConversationKeyCache(16);

const incoming = (content: string, tags: string[][] = [], kind = 25910): Incoming => ({ id: 'a'.repeat(64), pubkey: CLIENT, kind, tags, content });

describe('DVMCP: reading requests', () => {
  it('reads every request and notification the reference client sent (plain and private initialize)', () => {
    const requests = [...lines(refPlain), ...lines(refPrivate)].map((c) => c.e).filter((e) => e.kind === 25910);
    expect(requests.length).toBeGreaterThanOrEqual(9);
    for (const e of requests) {
      const m = parseMessage(e);
      expect(m.ok, e.content).toBe(true);
      if (!m.ok) continue;
      const content = JSON.parse(e.content) as { method: string };
      expect(m.value.method).toBe(content.method);
      expect(m.value.client).toBe(e.pubkey);
      // The reference sends notifications/initialized as 25910: a notification, never answered.
      expect(m.value.type).toBe(content.method.startsWith('notifications/') ? 'notification' : 'request');
      if (m.value.type === 'request') expect(m.value.requestId).toBe(e.id);
    }
    const init = requests.map((e) => parseMessage(e)).find((m) => m.ok && m.value.method === 'initialize');
    expect(init?.ok && init.value.serverId).toBeUndefined(); // no `s`: every server of the provider answers
  });

  it('tolerates ContextVM-style content with jsonrpc and id (dropped)', () => {
    const call = lines(cvmPlain).map((c) => c.e).find((e) => e.content.startsWith('{"method":"tools/call"') && e.content.includes('get-sum'))!;
    const m = parseMessage(call);
    expect(m).toMatchObject({ ok: true, value: { type: 'request', method: 'tools/call', params: { name: 'get-sum', arguments: { a: 2, b: 40 } } } });
  });

  it.each([
    ['not JSON', 'nope', [], RPC.PARSE_ERROR, 'Parse error: content is not JSON'],
    ['no method', '{"params":{}}', [], RPC.INVALID_REQUEST, 'Invalid request: content needs a method'],
    ['method not a string', '{"method":5}', [], RPC.INVALID_REQUEST, 'Invalid request: content needs a method'],
    ['params an array', '{"method":"tools/list","params":[1]}', [], RPC.INVALID_REQUEST, 'Invalid request: params must be an object'],
    ['content an array', '[1,2]', [], RPC.INVALID_REQUEST, 'Invalid request: content needs a method'],
    ['method tag differs', '{"method":"tools/list"}', [['method', 'tools/call']], RPC.INVALID_REQUEST, 'Invalid request: method tag "tools/call" differs from content method "tools/list"'],
  ])('refuses %s with the JSON-RPC error', (_name, content, tags, code, message) => {
    expect(parseMessage(incoming(content, tags as string[][]))).toEqual({ ok: false, error: { code, message } });
  });

  it('refuses oversized content before parsing it', () => {
    const big = `{"method":"tools/call","params":{"x":"${'a'.repeat(256 * 1024)}"}}`;
    expect(parseMessage(incoming(big))).toEqual({ ok: false, error: { code: RPC.INVALID_REQUEST, message: 'Invalid request: content over 262144 characters' } });
  });

  it('refuses kinds that are not DVMCP requests', () => {
    expect(parseMessage(incoming('{"method":"ping"}', [], 1))).toMatchObject({ ok: false, error: { code: RPC.INVALID_REQUEST } });
  });

  it('reads 21316 as a notification with the request it refers to', () => {
    const m = parseMessage(incoming('{"method":"notifications/cancel","params":{"id":"x"}}', [['e', 'b'.repeat(64)], ['s', 'srv']], 21316));
    expect(m).toEqual({ ok: true, value: { type: 'notification', method: 'notifications/cancel', params: { id: 'x' }, serverId: 'srv', refersTo: 'b'.repeat(64), client: CLIENT } });
  });

  it("drops the reference client's injected `name` argument only when the tool does not declare one", () => {
    const echo = { type: 'object', properties: { message: { type: 'string' } } };
    expect(withoutInjectedName({ message: 'hi', name: 'echo_3c72' }, 'echo', echo)).toEqual({ message: 'hi' });
    const named = { type: 'object', properties: { name: { type: 'string' } } };
    expect(withoutInjectedName({ name: 'echo_3c72' }, 'echo', named)).toEqual({ name: 'echo_3c72' });
    expect(withoutInjectedName({ name: 'Alice' }, 'echo', echo)).toEqual({ name: 'Alice' });
  });
});

describe('DVMCP: what the bridge publishes', () => {
  const to = { requestId: 'c'.repeat(64), client: CLIENT };
  const profile = { id: 'everything', name: 'Everything', about: 'demo', encryption: true };
  const init = { protocolVersion: '2025-11-25', capabilities: { tools: { listChanged: true } }, serverInfo: { name: 'x', version: '1' } };

  it('answers with e and p tags and the result at the root', () => {
    const t = responseTemplate(to, { content: [{ type: 'text', text: 'hi' }] });
    expect(t.kind).toBe(26910);
    expect(t.tags).toEqual([['e', to.requestId], ['p', CLIENT]]);
    expect(JSON.parse(t.content)).toEqual({ content: [{ type: 'text', text: 'hi' }] });
    expect(JSON.parse(errorTemplate(to, { code: -32601, message: 'Method not found' }).content)).toEqual({ error: { code: -32601, message: 'Method not found' } });
  });

  it('reads responses: results, protocol errors, and the reference full JSON-RPC error', () => {
    expect(parseResponse('{"tools":[]}')).toEqual({ ok: true, value: { tools: [] } });
    expect(parseResponse('{"error":{"code":-32602,"message":"bad"}}')).toEqual({ ok: false, error: { code: -32602, message: 'bad' } });
    expect(parseResponse('{"jsonrpc":"2.0","id":3,"error":{"code":-32601,"message":"nope"}}')).toEqual({ ok: false, error: { code: -32601, message: 'nope' } });
    expect(parseResponse('{"jsonrpc":"2.0","id":3,"result":{"content":[]}}')).toEqual({ ok: true, value: { content: [] } });
    expect(parseResponse('x')).toMatchObject({ ok: false, error: { code: RPC.PARSE_ERROR } });
  });

  it('announces a server (31316) as the spec and the reference do', () => {
    const t = serverAnnouncement({ ...profile, picture: '', website: 'https://example.com' }, init);
    expect(t.kind).toBe(31316);
    expect(t.tags).toEqual([['d', 'everything'], ['k', '25910'], ['name', 'Everything'], ['about', 'demo'], ['website', 'https://example.com'], ['support_encryption', 'true']]);
    expect(JSON.parse(t.content)).toEqual(init);
    const ref = lines(refPlain).map((c) => c.e).find((e) => e.kind === 31316)!;
    expect(Object.keys(JSON.parse(ref.content)).sort()).toEqual(Object.keys(JSON.parse(t.content)).sort());
  });

  it('announces capability lists with one cap tag per item and prices as ["cap", name, price, unit]', () => {
    const tools = LISTS.find((l) => l.method === 'tools/list')!;
    const t = listAnnouncement('everything', tools, [{ name: 'echo' }, { name: 'get-sum' }], { 'get-sum': { price: '21', unit: 'sats' } });
    expect(t.kind).toBe(31317);
    expect(t.tags).toEqual([['d', 'everything/tools/list'], ['s', 'everything'], ['cap', 'echo'], ['cap', 'get-sum', '21', 'sats']]);
    const templates = LISTS.find((l) => l.method === 'resources/templates/list')!;
    const r = listAnnouncement('everything', templates, [{ name: 'Dynamic', uriTemplate: 'demo://{id}' }]);
    expect(r.kind).toBe(31318);
    expect(r.tags[0]).toEqual(['d', 'everything/resources/templates/list']);
    expect(Object.keys(JSON.parse(r.content))).toEqual(['resourceTemplates']);
    // The reference's d tags follow the same scheme.
    const refDs = lines(refPlain).map((c) => c.e).filter((e) => e.kind >= 31317 && e.kind <= 31319).map((e) => e.tags[0]![1]!.split('/').slice(1).join('/'));
    expect(refDs.sort()).toEqual(LISTS.map((l) => l.method).sort());
  });

  it('matchesUriTemplate: the literal text in order, anything in place of each expression', () => {
    const t = 'demo://resource/dynamic/text/{resourceId}';
    expect(matchesUriTemplate(t, 'demo://resource/dynamic/text/7')).toBe(true);
    expect(matchesUriTemplate(t, 'demo://resource/dynamic/text/')).toBe(true); // an empty expansion
    expect(matchesUriTemplate(t, 'demo://resource/dynamic/blob/7')).toBe(false);
    expect(matchesUriTemplate('file:///{dir}/x/{name}.md', 'file:///a/x/b/x/c.md')).toBe(true);
    expect(matchesUriTemplate('file:///{dir}/x/{name}.md', 'file:///a/y/c.md')).toBe(false);
    expect(matchesUriTemplate('a{x}b{y}b', 'ab')).toBe(false); // literals may not overlap
    expect(matchesUriTemplate('{+path}', 'anything/at/all')).toBe(true);
    expect(matchesUriTemplate('demo://static', 'demo://static')).toBe(true);
    expect(matchesUriTemplate('demo://static', 'demo://static/2')).toBe(false);
    // Linear: a long uri against a template of many literals is quick.
    const started = Date.now();
    expect(matchesUriTemplate(`${'a{x}'.repeat(500)}b`, 'a'.repeat(256 * 1024))).toBe(false);
    expect(Date.now() - started).toBeLessThan(1000);
  });

  it('readPrice: by uri, by the listed resource\'s name, by the template the uri expands', () => {
    const sats = (price: string) => ({ price, unit: 'sats' });
    const index = {
      resources: [{ uri: 'demo://doc/a.md', name: 'a.md' }, { uri: 'demo://doc/b.md', name: 'b.md' }],
      templates: [{ uriTemplate: 'demo://doc/{name}', name: 'Docs' }, { uriTemplate: 'demo://img/{id}', name: 'Images' }],
    };
    const prices = { 'a.md': sats('1'), Docs: sats('2'), 'demo://img/{id}': sats('3'), 'demo://doc/b.md': sats('4') };
    const priced = (uri: string, p: Prices = prices, i: Parameters<typeof readPrice>[2] = index) => {
      const r = readPrice(uri, p, i);
      return r.ok ? r.value.price : r.error;
    };
    expect(priced('demo://doc/a.md')).toEqual(sats('1'));
    expect(priced('demo://doc/b.md')).toEqual(sats('4'));
    expect(priced('demo://doc/c.md')).toEqual(sats('2')); // not listed: the template
    expect(priced('demo://img/9')).toEqual(sats('3'));
    // Announced as charged: a template priced by its uriTemplate carries the price too.
    const templates = LISTS.find((l) => l.method === 'resources/templates/list')!;
    expect(listAnnouncement('s', templates, index.templates, prices).tags.slice(2)).toEqual([['cap', 'Docs', '2', 'sats'], ['cap', 'Images', '3', 'sats']]);
    // A listed resource is served as itself: unpriced, even under a priced template.
    expect(priced('demo://doc/b.md', { Docs: sats('2') })).toBeUndefined();
    // Neither listed nor expanded from a template: not a resource of the server (it could not be priced).
    expect(priced('demo://other')).toEqual({ kind: 'not-a-resource', uri: 'demo://other' });
    expect(priced('constructor', {}, { resources: [{ uri: 'constructor', name: 'toString' }], templates: [] })).toEqual({
      kind: 'not-a-uri',
      reason: 'the resources/read uri "constructor" is not an absolute URI',
    });
    // Without an index, by uri only.
    expect(readPrice('DEMO://doc/b.md', prices, undefined)).toEqual({ ok: true, value: { uri: 'demo://doc/b.md', price: sats('4') } });
    expect(readPrice('demo://other', prices, undefined)).toEqual({ ok: true, value: { uri: 'demo://other', price: undefined } });
  });

  it('readPrice: every spelling of a uri is priced, and read, as the one upstream reads (canonicalUri)', () => {
    const sats = (price: string) => ({ price, unit: 'sats' });
    const index = {
      resources: [{ uri: 'demo://resource/static/document/architecture.md', name: 'architecture.md' }, { uri: 'HTTPS://Example.COM:443/a', name: 'a' }],
      templates: [{ uriTemplate: 'DEMO://resource/dynamic/text/{resourceId}', name: 'Dynamic Text Resource' }, { uriTemplate: '{+base}/x.md', name: 'anywhere' }],
    };
    const prices = { 'architecture.md': sats('13'), 'Dynamic Text Resource': sats('8'), a: sats('5'), anywhere: sats('2'), 'Demo://keyed/./x': sats('7') };
    const read = (uri: string) => readPrice(uri, prices, index);
    const doc = { uri: 'demo://resource/static/document/architecture.md', price: sats('13') };
    expect(read('demo://resource/static/document/architecture.md')).toEqual({ ok: true, value: doc });
    expect(read('DEMO://resource/static/document/architecture.md')).toEqual({ ok: true, value: doc });
    expect(read('demo://resource/static/document/./architecture.md')).toEqual({ ok: true, value: doc });
    expect(read('demo://resource/static/x/../document/architecture.md')).toEqual({ ok: true, value: doc });
    expect(read('DEMO://resource/dynamic/text/7')).toEqual({ ok: true, value: { uri: 'demo://resource/dynamic/text/7', price: sats('8') } });
    expect(read('https://example.com/a')).toEqual({ ok: true, value: { uri: 'https://example.com/a', price: sats('5') } });
    expect(read('demo://keyed/x')).toEqual({ ok: true, value: { uri: 'demo://keyed/x', price: sats('7') } });
    // A template whose scheme is an expression is matched by its literal text.
    expect(read('file:///x.md')).toEqual({ ok: true, value: { uri: 'file:///x.md', price: sats('2') } });
    expect(canonicalUri('not a uri')).toEqual({ ok: false, error: 'the resources/read uri "not a uri" is not an absolute URI' });
    // Announced in any spelling of its key, as charged.
    const resources = LISTS.find((l) => l.method === 'resources/list')!;
    expect(listAnnouncement('s', resources, [{ uri: 'demo://keyed/x', name: 'keyed' }], prices).tags.slice(2)).toEqual([['cap', 'keyed', '7', 'sats']]);
  });

  it('prices only by own entries: an item named after a member of Object.prototype is not priced', () => {
    const tools = LISTS.find((l) => l.method === 'tools/list')!;
    const t = listAnnouncement('everything', tools, [{ name: 'constructor' }, { name: 'toString' }, { name: '__proto__' }], {});
    expect(t.tags.slice(2)).toEqual([['cap', 'constructor'], ['cap', 'toString'], ['cap', '__proto__']]);
    expect(priceOf({}, 'constructor')).toBeUndefined();
    expect(priceOf({ echo: { price: '1', unit: 'sats' } }, 'echo')).toEqual({ price: '1', unit: 'sats' });
  });

  it('answers initialize with d and support_encryption', () => {
    const t = initializeResponse(to, profile, init);
    expect(t.tags).toEqual([['e', to.requestId], ['p', CLIENT], ['d', 'everything'], ['support_encryption', 'true']]);
  });

  it('sends progress with the request e tag, and payment-required with empty content', () => {
    const p = notificationTemplate(CLIENT, 'notifications/progress', { progress: 1, total: 2 }, { requestId: to.requestId });
    expect(p).toMatchObject({ kind: 21316, tags: [['p', CLIENT], ['method', 'notifications/progress'], ['e', to.requestId]] });
    expect(JSON.parse(p.content)).toEqual({ method: 'notifications/progress', params: { progress: 1, total: 2 } });
    const pay = paymentRequiredTemplate(to, 21, 'lnbc210n1...');
    expect(pay).toMatchObject({ kind: 21316, content: '', tags: [['status', 'payment-required'], ['amount', '21', 'lnbc210n1...'], ['e', to.requestId], ['p', CLIENT]] });
  });

  it('deletes every announcement of a server by `a` (NIP-09)', () => {
    const d = announcementDeletion(BRIDGE, 'everything');
    expect(d.kind).toBe(5);
    expect(d.tags.filter((t) => t[0] === 'a').map((t) => t[1])).toEqual([
      `31316:${BRIDGE}:everything`,
      `31317:${BRIDGE}:everything/tools/list`,
      `31318:${BRIDGE}:everything/resources/list`,
      `31318:${BRIDGE}:everything/resources/templates/list`,
      `31319:${BRIDGE}:everything/prompts/list`,
    ]);
    expect(d.tags.filter((t) => t[0] === 'k').map((t) => t[1])).toEqual(['31316', '31317', '31318', '31319']);
  });
});

describe('DVMCP: gift wraps', () => {
  const request = { kind: 25910, created_at: Math.floor(Date.now() / 1000), tags: [['p', BRIDGE], ['method', 'tools/list'], ['s', 'everything']], content: '{"method":"tools/list"}' };

  it('round-trips a wrapped DVMCP event: kind 1059 at the real time, the rumor id as the request id', () => {
    const wrap = wrapDvmcp(request, CLIENT_SK, CLIENT, BRIDGE, keys);
    expect(wrap.kind).toBe(1059);
    expect(wrap.created_at).toBe(request.created_at);
    expect(wrap.tags).toEqual([['p', BRIDGE]]);
    const opened = unwrapDvmcp(wrap, BRIDGE_SK, keys, nobleVerifier);
    expect(opened.ok).toBe(true);
    if (!opened.ok) return;
    expect(opened.value.form).toBe('wrapped');
    expect(opened.value.createdAt).toBe(request.created_at);
    expect(opened.value.message).toEqual({ id: computeEventId({ pubkey: CLIENT, ...request }), pubkey: CLIENT, kind: 25910, tags: request.tags, content: request.content });
    expect(parseMessage(opened.value.message)).toMatchObject({ ok: true, value: { type: 'request', method: 'tools/list', serverId: 'everything' } });
  });

  it('round-trips the spec text form (kind 14 rumor) and says so', () => {
    const opened = unwrapDvmcp(wrapDvmcp(request, CLIENT_SK, CLIENT, BRIDGE, keys, 'wrapped-dm'), BRIDGE_SK, keys, nobleVerifier);
    expect(opened).toMatchObject({ ok: true, value: { form: 'wrapped-dm', message: { kind: 14, pubkey: CLIENT } } });
    expect(opened.ok && parseMessage(opened.value.message)).toMatchObject({ ok: true, value: { type: 'request', method: 'tools/list' } });
  });

  it('accepts a rumor without an id (as the reference sends) when the seal is signed by its author', () => {
    const rumor = { pubkey: CLIENT, ...request }; // no id
    const seal = finalizeEvent({ kind: 13, created_at: request.created_at, tags: [], content: encrypt(JSON.stringify(rumor), getConversationKey(CLIENT_SK, BRIDGE)) }, CLIENT_SK);
    const oneTime = generateSecretKey();
    const wrap = finalizeEvent({ kind: 1059, created_at: request.created_at, tags: [['p', BRIDGE]], content: encrypt(JSON.stringify(seal), getConversationKey(oneTime, BRIDGE)) }, oneTime);
    const opened = unwrapDvmcp(wrap, BRIDGE_SK, keys, nobleVerifier);
    expect(opened).toMatchObject({ ok: true, value: { message: { id: computeEventId(rumor), pubkey: CLIENT } } });
  });

  it("refuses the reference implementation's wraps: their seal is signed by a random key, not the rumor's author", () => {
    const wraps = lines(refWrapped).map((c) => c.e);
    expect(wraps).toHaveLength(6);
    for (const w of wraps) {
      const sk = w.tags[0]![1] === BRIDGE ? BRIDGE_SK : CLIENT_SK;
      expect(unwrapDvmcp(w, sk, keys, nobleVerifier)).toEqual({ ok: false, error: 'seal signer is not the rumor author' });
    }
  });

  it("refuses ContextVM's single-layer wraps (1059/21059: one NIP-44 layer around the message, no seal), not DVMCP's two-layer NIP-59", () => {
    const byKey = new Map([hexToBytes('11'.repeat(32)), hexToBytes('22'.repeat(32))].map((sk) => [getPublicKey(sk), sk]));
    const wraps = lines(cvmWrapped).map((c) => c.e);
    expect(wraps.map((w) => w.kind).sort()).toEqual([1059, ...Array<number>(14).fill(21059)]);
    for (const w of wraps) {
      const expected = w.kind === 1059 ? 'invalid seal: kind 25910, expected 13' : 'not a DVMCP gift wrap (kind 21059)';
      expect(unwrapDvmcp(w, byKey.get(w.tags[0]![1]!)!, keys, nobleVerifier)).toEqual({ ok: false, error: expected });
    }
  });

  it('refuses wraps for someone else, of other kinds, and with non-DVMCP rumors', () => {
    const wrap = wrapDvmcp(request, CLIENT_SK, CLIENT, BRIDGE, keys);
    expect(unwrapDvmcp(wrap, CLIENT_SK, keys, nobleVerifier)).toEqual({ ok: false, error: 'gift wrap is not addressed to this key' });
    expect(unwrapDvmcp({ ...wrap, kind: 21059 }, BRIDGE_SK, keys, nobleVerifier)).toEqual({ ok: false, error: 'not a DVMCP gift wrap (kind 21059)' });
    const note = wrapDvmcp({ ...request, kind: 1 }, CLIENT_SK, CLIENT, BRIDGE, keys);
    expect(unwrapDvmcp(note, BRIDGE_SK, keys, nobleVerifier)).toEqual({ ok: false, error: 'rumor kind 1 is not a DVMCP message' });
  });
});
