// The runnable examples of edgestr/client (examples/*.mjs, plain JS importing the package by name)
// run end to end against the e2e `wrangler dev` instances, and print what they promise.
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import type { ChildProcess } from 'node:child_process';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { sha256 } from '@noble/hashes/sha2.js';
import { bytesToHex } from '../../src/shared/hex.js';
import { makeHttpAuthHeader } from '../../src/shared/nip98.js';
import { startEverything, stop } from '../mcp/global-setup.js';
import { E2E_OWNER_SK } from './e2e-keys.js';
import { ROOT } from './cli-run.js';
import { sleep } from './helpers.js';

const devUrl = inject('httpUrl');
const agentUrl = inject('agentHttpUrl');
const DEMO_OWNER_SK = sha256(new TextEncoder().encode('edgestr demo owner (local development only)'));


/** Runs an example; a failure carries what it printed (a timeout would otherwise show nothing). */
async function example(file: string, args: string[], env: Record<string, string>) {
  try {
    return await promisify(execFile)('node', [`examples/${file}`, ...args], { cwd: ROOT, env: { PATH: process.env.PATH ?? '', ...env }, timeout: 25_000 });
  } catch (e) {
    const { stdout, stderr, signal } = e as { stdout?: string; stderr?: string; signal?: string };
    throw new Error(`examples/${file} failed${signal ? ` (${signal})` : ''}\nstdout: ${stdout ?? ''}\nstderr: ${stderr ?? ''}`);
  }
}

describe('examples/', () => {
  it('ask.mjs streams the demo agent\'s answer', async () => {
    const { stdout } = await example('ask.mjs', ['demo', 'hello example'], { EDGESTR_URL: devUrl });
    expect(stdout).toBe('echo: hello example\n');
  });

  it('manage-agents.mjs creates an attested agent, asks it while observing, cancels a slow run, deletes it', async () => {
    const { stdout } = await example('manage-agents.mjs', [], {
      EDGESTR_URL: agentUrl,
      EDGESTR_KEY: bytesToHex(E2E_OWNER_SK),
      EXAMPLE_PROVIDER: 'openai',
      EXAMPLE_MODELS: 'gpt-e2e,fake-slow',
      EXAMPLE_SLOW_MODEL: 'fake-slow',
    });
    const lines = stdout.trim().split('\n');
    expect(lines[0]).toMatch(/^created npub1[0-9a-z]+ \(attested: auth\)$/);
    expect(lines[1]).toMatch(/^answer: .+/);
    expect(lines[2]).toBe('cancelled run: CANCELLED');
    expect(lines[3]).toMatch(/^telemetry frames: .*turn_started/);
    expect(lines[4]).toMatch(/^agents: \d+$/);
    expect(lines[5]).toMatch(/^deleted [0-9a-f]{64}$/);
  }, 30_000);

  describe('tools.mjs', () => {
    let everything: { url: string; child: ChildProcess };
    const id = `ex-${Date.now() % 1_000_000}`;

    const bridgeApi = (method: string, path: string, body?: string) => {
      const url = `${devUrl}/api/bridge/servers${path}`;
      return fetch(url, { method, headers: { Authorization: makeHttpAuthHeader(DEMO_OWNER_SK, url, method, body), 'Content-Type': 'application/json' }, ...(body ? { body } : {}) });
    };

    beforeAll(async () => {
      everything = await startEverything('streamableHttp');
      expect((await bridgeApi('POST', '', JSON.stringify({ id, url: everything.url }))).status).toBe(201);
    }, 40_000);

    afterAll(async () => {
      expect((await bridgeApi('DELETE', `/${id}`)).status).toBe(204);
      await stop(everything.child);
    });

    it('lists the announced tools and calls one', async () => {
      let out = '';
      for (let i = 0; i < 50 && !out.includes(`${id}:`); i++) {
        if (i) await sleep(200);
        out = (await example('tools.mjs', [], { EDGESTR_URL: devUrl })).stdout;
      }
      expect(out).toMatch(new RegExp(`^${id}: .*\\becho\\b`, 'm'));
      const { stdout } = await example('tools.mjs', [id, 'echo', '{"message":"from the example"}'], { EDGESTR_URL: devUrl });
      expect(stdout.trim().split('\n').at(-1)).toContain('from the example');
    }, 30_000);
  });
});
