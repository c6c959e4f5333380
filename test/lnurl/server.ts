// A local LNURL-pay server with NIP-57 zap support, at the network boundary of the payment tests
// (started by test/lnurl/global-setup.ts on 127.0.0.1). It speaks real LUD-06/LUD-16 JSON and
// checks zap requests with nostr-tools' NIP-57 code (independent of edgestr's):
//   GET  /.well-known/lnurlp/bridge   zap-capable pay endpoint (allowsNostr, nostrPubkey, 1 sat – 1 BTC)
//   GET  /.well-known/lnurlp/plain    a pay endpoint without zap support
//   GET  /.well-known/lnurlp/liar     zap-capable, but its callback's invoice is for 1 sat more
//   GET  /.well-known/lnurlp/huge     zap-capable, but its callback's invoice is 50,000 characters
//                                     (under the 64 KiB read cap, over the 4096 characters accepted)
//   GET  /.well-known/lnurlp/down     HTTP 503
//   GET  /.well-known/lnurlp/aside    zap-capable, but its callback is on another origin: a second
//                                     listener on another 127.0.0.1 port (listed in the tests'
//                                     EDGESTR_OUTBOUND_ALLOW, as 127.0.0.1:*), standing for an
//                                     internal service; it counts what reaches it and answers an
//                                     LNURL error naming itself
//   GET  /lnurlp/<name>/callback?amount=<msat>&nostr=<zap request>[&lnurl=]
//        → {pr, routes: []}: a BOLT-11-shaped invoice for the amount (its human-readable part is
//          real; the data part is random bech32 characters), or {status: "ERROR", reason}
//   POST /test/pay {invoice, relays?}  test hook, "the invoice was paid": signs the zap receipt
//        (9735, nostr-tools makeZapReceipt) with the server's nostrPubkey, publishes it to each
//        ws:// relay given, and answers {receipt, published: [{relay, ok, message}]}
//   GET  /test/requests                the zap requests received, in order
//   GET  /test/aside                   {hits}: the requests that reached the `aside` listener

import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import { randomBytes } from 'node:crypto';
import WebSocket from 'ws';
import { finalizeEvent, generateSecretKey, getPublicKey, type Event } from 'nostr-tools/pure';
import { makeZapReceipt, validateZapRequest } from 'nostr-tools/nip57';

export interface LnurlServer {
  url: string;
  nostrPubkey: string;
  close(): Promise<void>;
}

const BECH32 = 'qpzry9x8gf2tvdw0s3jn54khce6mua7l';
const MIN_MSAT = 1_000;
const MAX_MSAT = 100_000_000_000;
const NAMES = new Set(['bridge', 'plain', 'liar', 'huge', 'aside']);
/** Characters of the `huge` user's invoices. */
const HUGE_INVOICE_CHARS = 50_000;

const json = (res: ServerResponse, status: number, body: unknown): void => {
  res.writeHead(status, { 'content-type': 'application/json' });
  res.end(JSON.stringify(body));
};

async function readBody(req: IncomingMessage): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const chunk of req) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks).toString('utf8');
}

/** A BOLT-11-shaped mainnet invoice for `msat`: n (whole 100 msat) or p multiplier, then random data (`chars` in all when given). */
function invoiceFor(msat: number, chars?: number): string {
  const hrp = msat % 100 === 0 ? `lnbc${msat / 100}n` : `lnbc${msat * 10}p`;
  const data = [...randomBytes(chars === undefined ? 180 : chars - hrp.length - 1)].map((b) => BECH32[b % 32]).join('');
  return `${hrp}1${data}`;
}

/** Starts `server` on a free 127.0.0.1 port: its origin. */
async function listen(server: ReturnType<typeof createServer>): Promise<string> {
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const address = server.address();
  if (typeof address !== 'object' || address === null) throw new Error('LNURL server has no address');
  return `http://127.0.0.1:${address.port}`;
}

/** Publishes `event` to a relay and waits for its OK (5 s). */
function publish(relay: string, event: Event): Promise<{ relay: string; ok: boolean; message: string }> {
  return new Promise((resolve) => {
    const ws = new WebSocket(relay);
    const done = (ok: boolean, message: string): void => {
      clearTimeout(timer);
      ws.terminate();
      resolve({ relay, ok, message });
    };
    const timer = setTimeout(() => done(false, 'timeout'), 5_000);
    ws.on('open', () => ws.send(JSON.stringify(['EVENT', event])));
    ws.on('message', (data) => {
      const frame = JSON.parse(String(data)) as unknown[];
      if (frame[0] === 'OK' && frame[1] === event.id) done(frame[2] === true, String(frame[3] ?? ''));
    });
    ws.on('error', (e) => done(false, e.message));
  });
}

export async function startLnurlServer(): Promise<LnurlServer> {
  const sk = generateSecretKey();
  const nostrPubkey = getPublicKey(sk);
  /** Invoices handed out: bolt11 → the zap request JSON it was made for. */
  const invoices = new Map<string, string>();
  const requests: unknown[] = [];
  let base = '';
  let asideBase = '';
  let asideHits = 0;
  const aside = createServer((_req, res) => {
    asideHits++;
    json(res, 200, { status: 'ERROR', reason: `the internal service at ${asideBase} answered` });
  });

  const server = createServer((req, res) => {
    void route(req, res).catch((e: unknown) => json(res, 500, { status: 'ERROR', reason: e instanceof Error ? e.message : String(e) }));
  });

  async function route(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const url = new URL(req.url ?? '/', base);
    const wellKnown = /^\/\.well-known\/lnurlp\/([a-z]+)$/.exec(url.pathname);
    if (req.method === 'GET' && wellKnown) {
      const name = wellKnown[1]!;
      if (name === 'down') return json(res, 503, { status: 'ERROR', reason: 'maintenance' });
      if (!NAMES.has(name)) return json(res, 404, { status: 'ERROR', reason: `no such user: ${name}` });
      return json(res, 200, {
        tag: 'payRequest',
        callback: name === 'aside' ? `${asideBase}/lnurlp/aside/callback` : `${base}/lnurlp/${name}/callback`,
        minSendable: MIN_MSAT,
        maxSendable: MAX_MSAT,
        metadata: JSON.stringify([['text/plain', `pay ${name}`], ['text/identifier', `${name}@127.0.0.1`]]),
        commentAllowed: 0,
        ...(name === 'plain' ? {} : { allowsNostr: true, nostrPubkey }),
      });
    }
    const callback = /^\/lnurlp\/([a-z]+)\/callback$/.exec(url.pathname);
    if (req.method === 'GET' && callback && NAMES.has(callback[1]!)) {
      const amount = Number(url.searchParams.get('amount'));
      if (!Number.isInteger(amount) || amount < MIN_MSAT || amount > MAX_MSAT) return json(res, 200, { status: 'ERROR', reason: 'amount out of range' });
      const nostr = url.searchParams.get('nostr');
      if (nostr !== null) {
        const problem = validateZapRequest(nostr);
        if (problem !== null) return json(res, 200, { status: 'ERROR', reason: problem });
        const zr = JSON.parse(nostr) as Event;
        if (zr.tags.find((t) => t[0] === 'amount')?.[1] !== String(amount)) return json(res, 200, { status: 'ERROR', reason: 'amount tag differs from amount' });
        requests.push(zr);
      }
      const pr = invoiceFor(callback[1] === 'liar' ? amount + 1_000 : amount, callback[1] === 'huge' ? HUGE_INVOICE_CHARS : undefined);
      if (nostr !== null) invoices.set(pr, nostr);
      return json(res, 200, { pr, routes: [] });
    }
    if (req.method === 'POST' && url.pathname === '/test/pay') {
      const body = JSON.parse(await readBody(req)) as { invoice?: string; relays?: string[] };
      const zapRequest = body.invoice === undefined ? undefined : invoices.get(body.invoice);
      if (zapRequest === undefined) return json(res, 404, { error: 'unknown invoice' });
      const receipt = finalizeEvent(makeZapReceipt({ zapRequest, bolt11: body.invoice!, paidAt: new Date() }), sk);
      const published = await Promise.all((body.relays ?? []).map((r) => publish(r, receipt)));
      const { id, pubkey, created_at, kind, tags, content, sig } = receipt;
      return json(res, 200, { receipt: { id, pubkey, created_at, kind, tags, content, sig }, published });
    }
    if (req.method === 'GET' && url.pathname === '/test/requests') return json(res, 200, requests);
    if (req.method === 'GET' && url.pathname === '/test/aside') return json(res, 200, { hits: asideHits });
    return json(res, 404, { status: 'ERROR', reason: 'not found' });
  }

  base = await listen(server);
  asideBase = await listen(aside);
  const close = (s: typeof server): Promise<void> => new Promise<void>((resolve) => s.close(() => resolve()));
  return {
    url: base,
    nostrPubkey,
    close: async () => {
      await Promise.all([close(server), close(aside)]);
    },
  };
}
