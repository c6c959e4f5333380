// The relay client against a scripted in-process relay (a `ws` server), for behaviour the real
// relay cannot be made to show on demand: backoff bounds, sockets that arrive already open (an
// accepted workerd socket), factories that fail, reconnect=false, throwing callbacks, repeated
// AUTH challenges, and events a relay should not have sent.

import { afterEach, describe, expect, it, vi } from 'vitest';
import WebSocket, { WebSocketServer } from 'ws';
import { backoffDelay, DEFAULT_BACKOFF, RelayClient, RESUBSCRIBE_STABLE_MS } from '../../src/shared/relay-client.js';
import { newKey, signed, signer, sleep, waitFor } from './helpers.js';

type Frame = [string, ...unknown[]];

interface Scripted {
  url: string;
  /** Frames received, per connection. */
  received: Frame[][];
  connections: WebSocket[];
}

const servers: WebSocketServer[] = [];
const clients: RelayClient[] = [];
afterEach(async () => {
  for (const c of clients.splice(0)) c.close();
  for (const s of servers.splice(0)) {
    for (const ws of s.clients) ws.terminate();
    await new Promise((r) => s.close(r));
  }
});

/** Starts a relay that calls `onFrame(frame, socket, connectionIndex)` for each client frame. */
async function scriptedRelay(
  onFrame: (frame: Frame, ws: WebSocket, conn: number) => void = () => undefined,
  onConnect: (ws: WebSocket, conn: number) => void = () => undefined,
): Promise<Scripted> {
  const server = new WebSocketServer({ host: '127.0.0.1', port: 0 });
  servers.push(server);
  await new Promise((r) => server.once('listening', r));
  const address = server.address();
  const port = typeof address === 'object' && address ? address.port : 0;
  const s: Scripted = { url: `ws://127.0.0.1:${port}`, received: [], connections: [] };
  server.on('connection', (ws) => {
    const conn = s.connections.length;
    s.connections.push(ws);
    s.received.push([]);
    ws.on('message', (data) => {
      const frame = JSON.parse(String(data)) as Frame;
      s.received[conn]!.push(frame);
      onFrame(frame, ws, conn);
    });
    onConnect(ws, conn);
  });
  return s;
}

const track = (c: RelayClient): RelayClient => {
  clients.push(c);
  return c;
};

const send = (ws: WebSocket, ...frame: unknown[]): void => ws.send(JSON.stringify(frame));

describe('backoffDelay', () => {
  const o = { initialDelayMs: 100, maxDelayMs: 1_000, factor: 2 };
  it('grows exponentially, stays within [cap/2, cap], and never exceeds maxDelayMs', () => {
    expect([0, 1, 2, 3].map((a) => backoffDelay(a, o, () => 0))).toEqual([50, 100, 200, 400]);
    expect([0, 1, 2, 3].map((a) => backoffDelay(a, o, () => 0.999999))).toEqual([100, 200, 400, 800]);
    expect(backoffDelay(4, o, () => 0.5)).toBe(750); // capped at 1000: 500 + 250
    expect(backoffDelay(10_000, o, () => 1)).toBe(1_000); // no overflow to Infinity/NaN
    expect(backoffDelay(3, DEFAULT_BACKOFF, () => 0)).toBe(1_000);
  });
});

describe('connection handling', () => {
  it('uses a socket that is already open when the factory resolves (accepted workerd socket)', async () => {
    const relay = await scriptedRelay((f, ws) => {
      if (f[0] === 'REQ') send(ws, 'EOSE', f[1]);
    });
    const client = track(
      new RelayClient({
        url: relay.url,
        socket: async (u) => {
          const ws = new WebSocket(u);
          await new Promise((r) => ws.once('open', r));
          return ws;
        },
      }),
    );
    let eose = false;
    client.subscribe([{ kinds: [1] }], { onEvent: () => undefined, onEose: () => (eose = true) });
    await waitFor(() => eose, 'EOSE');
    expect(client.status).toBe('open');
  });

  it('keeps retrying when the factory throws; connect() then times out', async () => {
    let calls = 0;
    const client = track(
      new RelayClient({
        url: 'ws://127.0.0.1:1',
        reconnect: { initialDelayMs: 10, maxDelayMs: 20 },
        socket: () => {
          calls++;
          throw new Error('no sockets today');
        },
      }),
    );
    const r = await client.connect({ timeoutMs: 200 });
    expect(r).toMatchObject({ ok: false, timeout: true });
    expect(calls).toBeGreaterThanOrEqual(3);
  });

  it('with reconnect: false, stays down after a drop and reconnects on the next use', async () => {
    const relay = await scriptedRelay((f, ws) => {
      if (f[0] === 'EVENT') send(ws, 'OK', (f[1] as { id: string }).id, true, '');
    });
    const client = track(new RelayClient({ url: relay.url, reconnect: false, socket: (u) => new WebSocket(u) }));
    expect((await client.connect()).ok).toBe(true);
    relay.connections[0]!.terminate();
    await waitFor(() => client.status === 'idle', 'the drop');
    await sleep(100);
    expect(relay.connections).toHaveLength(1);
    expect(await client.publish(signed(newKey(), 1, 'x'))).toEqual({ ok: true, message: '' });
    expect(relay.connections).toHaveLength(2);
  });

  it('grows the backoff while connections fail right after opening, and resets it after a stable one', async () => {
    const relay = await scriptedRelay(undefined, (ws) => ws.close());
    const delays = (stableAfterMs: number) => {
      const seen: string[] = [];
      const client = track(
        new RelayClient({
          url: relay.url,
          reconnect: { initialDelayMs: 20, maxDelayMs: 10_000 },
          stableAfterMs,
          random: () => 0.999999,
          socket: (u) => new WebSocket(u),
          onStatus: (s, detail) => {
            if (s === 'waiting') seen.push(/in (\d+) ms/.exec(detail)?.[1] ?? detail);
          },
        }),
      );
      client.subscribe([{ kinds: [1] }], { onEvent: () => undefined });
      return seen;
    };
    const unstable = delays(5_000);
    const stable = delays(0); // every connection that opened counts as stable
    await waitFor(() => unstable.length >= 4 && stable.length >= 4, 'four reconnects each');
    expect(unstable.slice(0, 4)).toEqual(['20', '40', '80', '160']);
    expect(stable.slice(0, 4)).toEqual(['20', '20', '20', '20']);
  });
});

describe('callbacks and relay input', () => {
  it('survives a throwing onEvent and reports it through onError', async () => {
    const key = newKey();
    const a = signed(key, 1, 'a');
    const b = signed(key, 1, 'b');
    const relay = await scriptedRelay((f, ws) => {
      if (f[0] !== 'REQ') return;
      send(ws, 'EVENT', f[1], a);
      send(ws, 'EVENT', f[1], b);
      send(ws, 'EOSE', f[1]);
    });
    const errors: unknown[] = [];
    const client = track(new RelayClient({ url: relay.url, socket: (u) => new WebSocket(u), onError: (e) => errors.push(e) }));
    const got: string[] = [];
    let eose = false;
    client.subscribe([{ authors: [key.pk] }], {
      onEvent: (e) => {
        got.push(e.content);
        if (e.content === 'a') throw new Error('boom');
      },
      onEose: () => (eose = true),
    });
    await waitFor(() => eose, 'EOSE');
    expect(got).toEqual(['a', 'b']);
    expect(errors).toHaveLength(1);
  });

  it('resubscribe: a subscription closed with error: or rate-limited: is sent again after a growing backoff with fresh filters; any other CLOSED, or a close() meanwhile, ends it', async () => {
    // The relay closes the first REQ of each subscription with `error:` and its second with
    // `rate-limited:`, answers the third with EOSE then closes it with `error:` again; 'final' is `restricted:`.
    const reqs = new Map<string, number>();
    const relay = await scriptedRelay((f, ws) => {
      if (f[0] !== 'REQ') return;
      const id = String(f[1]);
      const n = (reqs.get(id) ?? 0) + 1;
      reqs.set(id, n);
      if (id === 'final') return send(ws, 'CLOSED', id, 'restricted: not for you');
      if (n === 1) return send(ws, 'CLOSED', id, 'error: live events were lost on the way to this connection (the relay is overloaded); subscribe again');
      if (n === 2) return send(ws, 'CLOSED', id, 'rate-limited: slow down');
      send(ws, 'EOSE', id);
      if (n === 3) send(ws, 'CLOSED', id, 'error: again');
    });
    const client = track(new RelayClient({ url: relay.url, socket: (u) => new WebSocket(u), random: () => 0 }));
    const closed: string[] = [];
    let since = 100;
    const live = client.subscribe([{ kinds: [1], since }], {
      id: 'live',
      onEvent: () => undefined,
      onClosed: (m) => closed.push(`live ${m}`),
      resubscribe: () => [{ kinds: [1], since: ++since }],
    });
    client.subscribe([{ kinds: [1] }], { id: 'final', onEvent: () => undefined, onClosed: (m) => closed.push(`final ${m}`), resubscribe: () => [{ kinds: [1] }] });
    const started = Date.now();
    await waitFor(() => (reqs.get('live') ?? 0) >= 4, 'four REQs of live');
    // Backoff with random() = 0: 500 ms, 1 s, then 2 s: an EOSE followed at once by a CLOSED does not
    // start it over (a relay cannot make the client send its REQ faster and faster).
    expect(Date.now() - started).toBeGreaterThanOrEqual(3_500 - 50);
    const sent = relay.received[0]!.filter((f) => f[0] === 'REQ' && f[1] === 'live').map((f) => f[2]);
    expect(sent).toEqual([{ kinds: [1], since: 100 }, { kinds: [1], since: 101 }, { kinds: [1], since: 102 }, { kinds: [1], since: 103 }]);
    expect(live.filters).toEqual([{ kinds: [1], since: 103 }]);
    expect(closed).toEqual(['final restricted: not for you']);
    // Closed by the caller while a resend waits: nothing more is sent.
    const gone = client.subscribe([{ kinds: [2] }], { id: 'gone', onEvent: () => undefined, resubscribe: () => [{ kinds: [2] }] });
    await waitFor(() => reqs.get('gone') === 1, 'the REQ of gone');
    await sleep(50); // its CLOSED arrives
    gone.close();
    await sleep(700);
    expect(reqs.get('gone')).toBe(1);
    expect(relay.received[0]!.filter((f) => f[0] === 'CLOSE').map((f) => f[1])).toEqual(['gone']);
  });

  it('resubscribe: the backoff starts over once a subscription stayed open RESUBSCRIBE_STABLE_MS past its EOSE', async () => {
    // The relay closes the first two REQs (error:, rate-limited:) and answers the third with EOSE; the
    // test closes that one later. The clock (Date only; timers stay real) is moved past
    // RESUBSCRIBE_STABLE_MS in between, as if the subscription had been open that long.
    const reqAt: number[] = [];
    const relay = await scriptedRelay((f, ws) => {
      if (f[0] !== 'REQ') return;
      reqAt.push(performance.now());
      if (reqAt.length === 1) send(ws, 'CLOSED', f[1], 'error: the shard could not be reached; try again');
      else if (reqAt.length === 2) send(ws, 'CLOSED', f[1], 'rate-limited: slow down');
      else send(ws, 'EOSE', f[1]);
    });
    const client = track(new RelayClient({ url: relay.url, socket: (u) => new WebSocket(u), random: () => 0 }));
    let eoses = 0;
    client.subscribe([{ kinds: [1] }], { id: 'steady', onEvent: () => undefined, onEose: () => eoses++, resubscribe: () => [{ kinds: [1] }] });
    await waitFor(() => eoses === 1, 'the EOSE of the third REQ');
    // Backoff with random() = 0: 500 ms, then 1 s; a third CLOSED in a row would wait 2 s.
    expect(reqAt[2]! - reqAt[0]!).toBeGreaterThanOrEqual(1_500 - 50);
    vi.useFakeTimers({ toFake: ['Date'] });
    try {
      vi.setSystemTime(Date.now() + RESUBSCRIBE_STABLE_MS + 1_000);
      const closedAt = performance.now();
      send(relay.connections[0]!, 'CLOSED', 'steady', 'error: live events were lost on the way to this connection (the relay is overloaded); subscribe again');
      await waitFor(() => reqAt.length === 4, 'the REQ after the stable period');
      // Started over: the first delay again (500 ms), not the third (2 s).
      expect(reqAt[3]! - closedAt).toBeGreaterThanOrEqual(500 - 50);
      expect(reqAt[3]! - closedAt).toBeLessThan(1_500);
    } finally {
      vi.useRealTimers();
    }
  });

  it('drops malformed events and events that do not match the subscription', async () => {
    const key = newKey();
    const good = signed(key, 1, 'good');
    const otherKind = signed(key, 7, '+');
    const relay = await scriptedRelay((f, ws) => {
      if (f[0] !== 'REQ') return;
      send(ws, 'EVENT', f[1], { ...good, kind: 'one' });
      send(ws, 'EVENT', f[1], otherKind);
      send(ws, 'EVENT', 'someone-elses-sub', good);
      send(ws, 'EVENT', f[1], good);
      send(ws, 'EOSE', f[1]);
    });
    const client = track(new RelayClient({ url: relay.url, socket: (u) => new WebSocket(u) }));
    const got: string[] = [];
    let eose = false;
    client.subscribe([{ authors: [key.pk], kinds: [1] }], { onEvent: (e) => got.push(e.id), onEose: () => (eose = true) });
    await waitFor(() => eose, 'EOSE');
    expect(got).toEqual([good.id]);
  });

  it('answers every AUTH challenge of a connection when authOn is "challenge"', async () => {
    const me = newKey();
    const relay = await scriptedRelay(
      (f, ws) => {
        if (f[0] === 'AUTH') send(ws, 'OK', (f[1] as { id: string }).id, true, '');
      },
      (ws) => send(ws, 'AUTH', 'first'),
    );
    const client = track(new RelayClient({ url: relay.url, socket: (u) => new WebSocket(u), auth: signer(me) }));
    expect((await client.connect()).ok).toBe(true);
    await waitFor(() => client.authenticatedAs === me.pk, 'the first AUTH');
    send(relay.connections[0]!, 'AUTH', 'second');
    await waitFor(() => relay.received[0]!.length === 2, 'the second AUTH');
    const challenges = relay.received[0]!.map((f) => (f[1] as { tags: string[][] }).tags.find((t) => t[0] === 'challenge')?.[1]);
    expect(challenges).toEqual(['first', 'second']);
    const relayTags = relay.received[0]!.map((f) => (f[1] as { tags: string[][] }).tags.find((t) => t[0] === 'relay')?.[1]);
    expect(relayTags).toEqual([relay.url, relay.url]);
  });

  it('authenticate() uses a challenge a relay sends on connect, with no request of its own', async () => {
    const me = newKey();
    const relay = await scriptedRelay(
      (f, ws) => {
        if (f[0] === 'AUTH' && f.length === 2) send(ws, 'OK', (f[1] as { id: string }).id, true, '');
      },
      (ws) => send(ws, 'AUTH', 'on-connect'),
    );
    const client = track(new RelayClient({ url: relay.url, socket: (u) => new WebSocket(u), auth: signer(me), authOn: 'demand' }));
    expect((await client.connect()).ok).toBe(true);
    await waitFor(() => client.challenge === 'on-connect', 'the challenge');
    expect(await client.authenticate()).toEqual({ ok: true, message: '' });
    expect(relay.received[0]!.map((f) => f.length)).toEqual([2]);
  });

  it('authenticate() with no challenge asks once with ["AUTH"] and waits for one sent later', async () => {
    const me = newKey();
    const relay = await scriptedRelay((f, ws) => {
      if (f[0] === 'AUTH' && f.length === 1) send(ws, 'NOTICE', 'invalid: AUTH takes exactly one event'); // a relay that does not know the request
      if (f[0] === 'AUTH' && f.length === 2) send(ws, 'OK', (f[1] as { id: string }).id, true, '');
    });
    const client = track(new RelayClient({ url: relay.url, socket: (u) => new WebSocket(u), auth: signer(me), authOn: 'demand' }));
    const authenticated = client.authenticate({ timeoutMs: 10_000 });
    await waitFor(() => relay.received[0]?.length === 1, 'the request for a challenge');
    send(relay.connections[0]!, 'AUTH', 'later');
    expect(await authenticated).toEqual({ ok: true, message: '' });
    const frames = relay.received[0]!;
    expect(frames[0]).toEqual(['AUTH']);
    expect((frames[1]![1] as { tags: string[][] }).tags).toContainEqual(['challenge', 'later']);
    expect(frames).toHaveLength(2);
  });

  it('does not answer a repeated challenge again (edgestr repeats it with every auth-required: answer)', async () => {
    const me = newKey();
    const relay = await scriptedRelay(
      (f, ws) => {
        if (f[0] === 'AUTH') send(ws, 'OK', (f[1] as { id: string }).id, true, '');
        if (f[0] === 'REQ') {
          send(ws, 'AUTH', 'same');
          send(ws, 'EOSE', f[1]);
        }
      },
      (ws) => send(ws, 'AUTH', 'same'),
    );
    const client = track(new RelayClient({ url: relay.url, socket: (u) => new WebSocket(u), auth: signer(me) }));
    expect((await client.connect()).ok).toBe(true);
    await waitFor(() => client.authenticatedAs === me.pk, 'authentication');
    let eoses = 0;
    client.subscribe([{ kinds: [1] }], { onEvent: () => undefined, onEose: () => eoses++ });
    await waitFor(() => eoses === 1, 'EOSE (after the repeated challenge)');
    // A second round trip: anything the client did about the repeated challenge has reached the relay.
    client.subscribe([{ kinds: [2] }], { onEvent: () => undefined, onEose: () => eoses++ });
    await waitFor(() => eoses === 2, 'the sentinel EOSE');
    expect(relay.received[0]!.map((f) => f[0])).toEqual(['AUTH', 'REQ', 'REQ']);
  });

  it('returns ok=false (not a throw) for a malformed COUNT answer', async () => {
    const relay = await scriptedRelay((f, ws) => {
      if (f[0] === 'COUNT') send(ws, 'COUNT', f[1], { count: 'many' });
    });
    const client = track(new RelayClient({ url: relay.url, socket: (u) => new WebSocket(u) }));
    const r = await client.count([{ kinds: [1] }]);
    expect(r.ok).toBe(false);
  });
});
