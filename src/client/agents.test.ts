// Which relay of an agent's relay list (kind 10002, chosen by whoever runs the agent) the client
// dials (agents.ts chooseRelay): a shard of the user's deployment first; another host only when
// the one outbound-URL policy lets it be dialled, so that a stranger's agent cannot make
// `edgestr ask` open (and authenticate on) a socket to the user's LAN or loopback. The whole
// path through `edgestr ask` is in src/cli/untrusted-output.test.ts.
import { describe, expect, it } from 'vitest';
import { chooseRelay } from './agents.js';

const PUBLIC = 'https://edgestr.example.com';
const SHARD = 'wss://edgestr.example.com/r/shard-3';

describe('chooseRelay: the agent of a deployment on a public host', () => {
  it("a shard of the deployment is taken before any other entry, wherever it is listed", () => {
    expect(chooseRelay(PUBLIC, ['wss://relay.other.example', SHARD])).toEqual({ ok: true, value: SHARD });
  });

  it('a public relay elsewhere is taken when no shard of the deployment is listed', () => {
    expect(chooseRelay(PUBLIC, ['wss://relay.other.example/'])).toEqual({ ok: true, value: 'wss://relay.other.example/' });
  });

  it('a LAN, loopback or metadata address is passed over for a later public entry', () => {
    expect(chooseRelay(PUBLIC, ['ws://192.168.1.1/r/x', 'ws://127.0.0.1:7777', 'wss://relay.other.example'])).toEqual({ ok: true, value: 'wss://relay.other.example' });
  });

  it('only private or local entries: refused with the first one and why (exit 5 in the CLI)', () => {
    expect(chooseRelay(PUBLIC, ['wss://192.168.1.1/r/x', 'ws://localhost:7777', 'not a url'])).toEqual({
      ok: false,
      error: {
        reason: 'unreachable',
        message: "the agent's relay wss://192.168.1.1/r/x is not dialled: 192.168.1.1 is a private address",
      },
    });
    expect(chooseRelay(PUBLIC, ['wss://[::ffff:169.254.169.254]/'])).toMatchObject({
      ok: false,
      error: { message: "the agent's relay wss://[::ffff:169.254.169.254]/ is not dialled: [::ffff:a9fe:a9fe] is an IPv4-mapped form of 169.254.169.254, a link-local address" },
    });
  });

  it("an entry on the deployment's host is taken without the address check, but not with another scheme", () => {
    expect(chooseRelay(PUBLIC, ['wss://edgestr.example.com/'])).toEqual({ ok: true, value: 'wss://edgestr.example.com/' });
    expect(chooseRelay(PUBLIC, ['https://edgestr.example.com/r/x'])).toMatchObject({ ok: false, error: { message: "the agent's relay https://edgestr.example.com/r/x is not dialled: only ws and wss URLs are allowed" } });
  });

  it('plain ws:// to another host, credentials in the URL, another scheme: refused', () => {
    expect(chooseRelay(PUBLIC, ['ws://relay.other.example'])).toMatchObject({ ok: false, error: { message: expect.stringContaining('is not dialled: plain ws:// is allowed only in development') } });
    expect(chooseRelay(PUBLIC, ['wss://u:p@relay.other.example'])).toMatchObject({ ok: false, error: { message: expect.stringContaining('is not dialled: URLs with credentials are not allowed') } });
    expect(chooseRelay(PUBLIC, ['https://relay.other.example'])).toMatchObject({ ok: false, error: { message: expect.stringContaining('is not dialled: only ws and wss URLs are allowed') } });
  });
});

describe('chooseRelay: the agent of a local deployment (loopback, private or local-name host)', () => {
  it('loopback and private relays are taken, as in development', () => {
    expect(chooseRelay('http://127.0.0.1:8787', ['ws://127.0.0.1:9999/'])).toEqual({ ok: true, value: 'ws://127.0.0.1:9999/' });
    expect(chooseRelay('http://10.0.0.5:8787', ['ws://192.168.1.1/r/x'])).toEqual({ ok: true, value: 'ws://192.168.1.1/r/x' });
  });

  it('link-local (the cloud metadata address) stays refused', () => {
    expect(chooseRelay('http://127.0.0.1:8787', ['ws://169.254.169.254/r/x'])).toEqual({
      ok: false,
      error: { reason: 'unreachable', message: "the agent's relay ws://169.254.169.254/r/x is not dialled: 169.254.169.254 is a link-local address" },
    });
  });
});
