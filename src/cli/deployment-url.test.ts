// What `--url` (and $EDGESTR_URL, and `relay info [url]`) must be: an http(s) or ws(s) URL with a
// host. Anything else is bad usage (exit 2) with the reason, on every command that talks to the
// deployment, before any connection; both forms of a good one work. And an error main() did not
// expect is one line saying what failed (exit 1), never a stack.
import { createServer, type Server } from 'node:http';
import { PassThrough, Writable } from 'node:stream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { generateSecretKey } from 'nostr-tools/pure';
import { runCli } from '../../test/helpers-node/run-cli.js';
import { bytesToHex } from '../shared/hex.js';
import { main } from './main.js';

const KEY = { EDGESTR_KEY: bytesToHex(generateSecretKey()) };
const USE = 'is not a deployment URL: use https://host or wss://host';

/** A deployment that has no agents for anyone (GET /api/agents) and counts the requests it got. */
let server: Server;
let port = 0;
let requests = 0;
beforeAll(async () => {
  server = createServer((req, res) => {
    requests++;
    if (req.url === '/api/agents') res.writeHead(200, { 'content-type': 'application/json' }).end('{"agents":[]}');
    else res.writeHead(404, { 'content-type': 'application/json' }).end('{"error":"not found"}');
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', () => resolve()));
  port = (server.address() as { port: number }).port;
});
afterAll(() => new Promise((resolve) => server.close(resolve)));

describe('--url that is not a deployment URL', () => {
  const commands: string[][] = [['agent', 'list'], ['agent', 'show', 'ab'.repeat(32)], ['ask', 'demo', 'hi'], ['tools'], ['observe'], ['call', 'weather', 'forecast'], ['relay', 'info'], ['cancel-turn', 'demo', 'run1']];

  it('no scheme (edgestr.example.com) or a host:port (localhost:8787): exit 2 with the reason, on every command, nothing sent', async () => {
    for (const url of ['edgestr.example.com', `localhost:${port}`]) {
      for (const argv of commands) {
        const r = await runCli([...argv, '--url', url], KEY);
        expect(r, `${argv.join(' ')} --url ${url}`).toEqual({ code: 2, stdout: '', stderr: `edgestr: --url ${url} ${USE}\n` });
      }
    }
    expect(requests).toBe(0);
  });

  it('other schemes, credentials, a query, no host: exit 2', async () => {
    for (const url of ['ftp://127.0.0.1/', `http://u:p@127.0.0.1:${port}`, `http://127.0.0.1:${port}/?x=1`, `http://127.0.0.1:${port}/#x`, 'file:///etc/passwd', 'https://']) {
      const r = await runCli(['agent', 'list', '--url', url], KEY);
      expect(r, url).toEqual({ code: 2, stdout: '', stderr: `edgestr: --url ${url} ${USE}\n` });
    }
    expect(requests).toBe(0);
  });

  it('$EDGESTR_URL likewise, named as such; a command that needs no deployment does not read it', async () => {
    const r = await runCli(['agent', 'list'], { ...KEY, EDGESTR_URL: 'edgestr.example.com' });
    expect(r).toEqual({ code: 2, stdout: '', stderr: `edgestr: EDGESTR_URL edgestr.example.com ${USE}\n` });
    expect((await runCli(['whoami'], { ...KEY, EDGESTR_URL: 'edgestr.example.com' })).code).toBe(0);
  });

  it('relay info <url> that is not a relay URL: exit 2', async () => {
    for (const url of ['notaurl', 'localhost:8787', 'ftp://127.0.0.1/']) {
      const r = await runCli(['relay', 'info', url], KEY);
      expect(r, url).toEqual({ code: 2, stdout: '', stderr: `edgestr: relay info: ${url} is not a relay URL: use wss://host or https://host\n` });
    }
  });

  it('both forms of a deployment URL work: http(s) and ws(s), with or without a trailing slash, in any case', async () => {
    for (const url of [`http://127.0.0.1:${port}`, `ws://127.0.0.1:${port}/`, `WS://127.0.0.1:${port}`, `HTTP://127.0.0.1:${port}//`]) {
      expect(await runCli(['agent', 'list', '--url', url], KEY), url).toEqual({ code: 0, stdout: 'no agents\n', stderr: '' });
    }
  });
});

describe('an error main() did not expect', () => {
  it('is one line naming the command and the error, exit 1, no stack', async () => {
    const failing = new Writable();
    failing.write = () => {
      throw new Error('EPIPE: broken pipe, write');
    };
    let stderr = '';
    const sink = new Writable({ write: (chunk: Buffer, _e, cb) => { stderr += chunk.toString(); cb(); } });
    const stdin = new PassThrough();
    stdin.end();
    const code = await main(['whoami'], { stdin, stdout: failing, stderr: sink, env: KEY });
    expect({ code, stderr }).toEqual({ code: 1, stderr: 'edgestr: internal error in whoami: EPIPE: broken pipe, write (a bug of edgestr: please report it)\n' });
  });
});
