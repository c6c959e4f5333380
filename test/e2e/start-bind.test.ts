// `npm start` binds loopback only (scripts/start.mjs): development mode has a public demo owner key,
// and a Worker under `wrangler dev` cannot tell a network peer from this machine (the Host header,
// and even CF-Connecting-IP, are the client's). A non-loopback `--ip` is refused unless the
// developer opts in with `--unsafe-remote-dev`; the script exits before starting wrangler.

import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { UNSAFE_REMOTE_DEV, wranglerArgs } from '../../scripts/start.mjs';
import { freePort, sleep } from '../helpers-node/processes.js';
import { killTree } from './global-setup.js';

const ROOT = fileURLToPath(new URL('../../', import.meta.url));
const DEV = ['--var', 'EDGESTR_ENV:development'];

const cleanups: Array<() => Promise<void>> = [];
afterAll(async () => {
  await Promise.all(cleanups.map((c) => c()));
});

describe('wranglerArgs: the address npm start binds', () => {
  it('is 127.0.0.1 by default', () => {
    expect(wranglerArgs([])).toEqual(['dev', '--ip', '127.0.0.1', '--port', '8787', ...DEV]);
  });

  it.each(['127.0.0.1', '127.0.0.2', '127.255.255.254', '::1', '[::1]', 'localhost', 'LOCALHOST'])('accepts the loopback address %s', (ip) => {
    expect(wranglerArgs(['--ip', ip])).toEqual(['dev', '--port', '8787', ...DEV, '--ip', ip]);
    expect(wranglerArgs([`--ip=${ip}`])).toEqual(['dev', '--port', '8787', ...DEV, `--ip=${ip}`]);
  });

  it.each([['0.0.0.0'], ['::'], ['[::]'], ['*'], ['192.168.1.10'], ['10.0.0.5'], ['2001:db8::1'], ['my-laptop.local'], ['128.0.0.1']])(
    'refuses %s in development mode, naming the risk and the opt-in',
    (ip) => {
      for (const args of [['--ip', ip], [`--ip=${ip}`], ['--port', '9000', '--ip', ip]]) {
        expect(() => wranglerArgs(args)).toThrowError(
          `--ip ${ip} is not a loopback address. npm start runs development mode (EDGESTR_ENV=development), which must ` +
            'stay on this machine: the Worker cannot tell a request from another machine from one of yours (it would take ' +
            'Host: 127.0.0.1 from anyone), so anyone who can reach that address could manage agents with the public demo ' +
            'owner key, spend the provider keys of your .dev.vars, make the Worker fetch private addresses of your network ' +
            '(web_fetch, MCP servers) and pay invoices for free. Bind a loopback address (127.0.0.1, ::1, localhost), or, ' +
            "on a network where you accept that (e.g. in a container whose port is published to the host's loopback only), " +
            'add --unsafe-remote-dev (docs/OPERATIONS.md "Running locally").',
        );
      }
    },
  );

  it('checks every --ip given', () => {
    expect(() => wranglerArgs(['--ip', '127.0.0.1', '--ip', '0.0.0.0'])).toThrowError(/^--ip 0\.0\.0\.0 is not a loopback address/);
  });

  it('refuses it under EDGESTR_ENV=test as well, and allows it when the caller sets another EDGESTR_ENV', () => {
    expect(() => wranglerArgs(['--ip', '0.0.0.0', '--var', 'EDGESTR_ENV:test'])).toThrowError(
      /^--ip 0\.0\.0\.0 is not a loopback address\. npm start runs test mode \(EDGESTR_ENV=test\), .*could pay invoices for free \(POST \/api\/bridge\/pay\)/,
    );
    expect(wranglerArgs(['--ip', '0.0.0.0', '--var', 'OTHER:1', 'EDGESTR_ENV:production'])).toEqual([
      'dev', '--port', '8787', ...DEV, '--ip', '0.0.0.0', '--var', 'OTHER:1', 'EDGESTR_ENV:production',
    ]);
    // A later --var wins in wrangler; so it does here.
    expect(() => wranglerArgs(['--var', 'EDGESTR_ENV:production', '--ip', '0.0.0.0', '--var=EDGESTR_ENV:development'])).toThrowError(/is not a loopback address/);
  });

  it(`accepts any address with ${UNSAFE_REMOTE_DEV}, which it does not pass on to wrangler`, () => {
    expect(UNSAFE_REMOTE_DEV).toBe('--unsafe-remote-dev');
    expect(wranglerArgs(['--ip', '0.0.0.0', '--unsafe-remote-dev'])).toEqual(['dev', '--port', '8787', ...DEV, '--ip', '0.0.0.0']);
    expect(wranglerArgs(['--unsafe-remote-dev', '--ip=::'])).toEqual(['dev', '--port', '8787', ...DEV, '--ip=::']);
  });
});

describe('npm start with a non-loopback --ip', () => {
  it.each([['0.0.0.0'], ['::']])('--ip %s: exits 2 with the message before starting wrangler', async (ip) => {
    const port = await freePort();
    const child = spawn(process.execPath, ['scripts/start.mjs', '--ip', ip, '--port', String(port)], {
      cwd: ROOT,
      detached: true,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    // On a build without the check this would start wrangler on that address: stop it whatever happens.
    cleanups.push(() => killTree(child));
    let out = '';
    child.stdout.on('data', (b: Buffer) => (out += b.toString('utf8')));
    child.stderr.on('data', (b: Buffer) => (out += b.toString('utf8')));
    const deadline = Date.now() + 15_000;
    while (child.exitCode === null && child.signalCode === null && Date.now() < deadline) await sleep(50);
    await killTree(child);
    expect(child.exitCode, out).toBe(2);
    expect(out).toBe(`edgestr: ${(() => {
      try {
        wranglerArgs(['--ip', ip]);
      } catch (e) {
        return (e as Error).message;
      }
      return 'no refusal';
    })()}\n`);
    expect(out).toContain(`--ip ${ip} is not a loopback address`);
    expect(out).toContain('--unsafe-remote-dev');
  });
});
