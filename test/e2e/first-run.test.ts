// The first run: `npm start`'s path (scripts/start.mjs) started for real prints the banner a
// newcomer needs (relay URLs, demo owner and agent as npub and hex, console, /mcp, where provider
// keys go) and none of the offline noise; and the e2e instances never read a `.dev.vars` (a
// developer's provider key must not reach a test run), shown with a sentinel `.dev.vars` beside a
// copy of the wrangler config.

import { spawn } from 'node:child_process';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { sha256 } from '@noble/hashes/sha2.js';
import { getPublicKey } from 'nostr-tools/pure';
import { npubEncode } from 'nostr-tools/nip19';
import { makeHttpAuthHeader } from '../../src/shared/nip98.js';
import { freePort, sleep } from '../helpers-node/processes.js';
import { killTree, startWrangler, type RunningWorker } from './global-setup.js';

const ROOT = fileURLToPath(new URL('../../', import.meta.url));
/** The local demo keys (workers/common/owners.ts): derived from public labels, development only. */
const DEMO_OWNER_SK = sha256(new TextEncoder().encode('edgestr demo owner (local development only)'));
const DEMO_OWNER = getPublicKey(DEMO_OWNER_SK);
const DEMO_AGENT = getPublicKey(sha256(new TextEncoder().encode('edgestr demo agent (local development only)')));

const cleanups: Array<() => Promise<void>> = [];
afterAll(async () => {
  await Promise.all(cleanups.map((c) => c()));
});

describe('npm start (scripts/start.mjs)', () => {
  it('prints the banner once /health answers, without the Request.cf / update-check noise', async () => {
    const [port, inspectorPort] = [await freePort(), await freePort()];
    const dir = await mkdtemp(join(tmpdir(), 'edgestr-start-'));
    const envFile = join(dir, 'empty.env');
    await writeFile(envFile, '');
    // The script sets the quiet variables itself: the test leaves them out of the environment it passes.
    const quiet = new Set(['WRANGLER_SEND_METRICS', 'CLOUDFLARE_CF_FETCH_ENABLED', 'WRANGLER_HIDE_BANNER']);
    const env = { ...Object.fromEntries(Object.entries(process.env).filter(([k]) => !quiet.has(k))), NO_COLOR: '1', FORCE_COLOR: '0' };
    const child = spawn(
      process.execPath,
      ['scripts/start.mjs', '--port', String(port), '--inspector-port', String(inspectorPort), '--persist-to', dir, '--env-file', envFile, '--show-interactive-dev-session=false'],
      { cwd: ROOT, env, detached: true, stdio: ['ignore', 'pipe', 'pipe'] },
    );
    cleanups.push(async () => {
      await killTree(child);
      await rm(dir, { recursive: true, force: true });
    });
    let out = '';
    child.stdout.on('data', (b: Buffer) => (out += b.toString('utf8')));
    child.stderr.on('data', (b: Buffer) => (out += b.toString('utf8')));
    const deadline = Date.now() + 90_000;
    while (!/^ {2}Logs /m.test(out)) {
      if (child.exitCode !== null || Date.now() > deadline) throw new Error(`no banner; output:\n${out}`);
      await sleep(100);
    }
    await sleep(500); // anything wrangler prints right after
    const origin = `http://127.0.0.1:${port}`;
    const ws = `ws://127.0.0.1:${port}`;
    const lines = out.split('\n');
    const expected = [
      `  Relay (public shard)  ${ws}/`,
      `  Demo owner's shard    ${ws}/r/${DEMO_OWNER}`,
      `  Demo owner            ${npubEncode(DEMO_OWNER)}  (hex ${DEMO_OWNER})`,
      `  Demo agent            ${npubEncode(DEMO_AGENT)}  (hex ${DEMO_AGENT})`,
      `  Console               ${origin}/console`,
      `  MCP endpoint          ${origin}/mcp`,
      `  Health                ${origin}/health`,
      '  Model provider        none: agents answer with the offline echo model',
      '  Configure             .dev.vars in the project directory (restart npm start after editing):',
    ];
    for (const line of expected) expect(lines).toContain(line);
    expect(lines.filter((l) => /^edgestr \S+ is running \(local development\)$/.test(l))).toHaveLength(1);
    expect(out).toMatch(/OPENAI_API_KEY=.*OPENAI_BASE_URL=/);
    expect(out).toMatch(/EDGESTR_OWNERS=<your npub or hex>/);
    for (const noise of ['Request.cf', 'ENOTFOUND', 'workers.cloudflare.com', 'update available']) expect(out).not.toContain(noise);
    // The demo agent's lifecycle is logged as JSON lines.
    expect(lines.map((l) => l.trim())).toContain(JSON.stringify({ msg: 'agent.created', agent: DEMO_AGENT, owner: DEMO_OWNER }));
  });
});

describe('test runs and .dev.vars', () => {
  let worker: RunningWorker;
  it('a wrangler started like the e2e instances ignores a .dev.vars beside its config', async () => {
    // A copy of the config in a directory that also holds a .dev.vars with a provider (sentinel values).
    const dir = await mkdtemp(join(tmpdir(), 'edgestr-devvars-'));
    cleanups.push(() => rm(dir, { recursive: true, force: true }));
    // Paths of the copy point back into the checkout (the Worker entry and the console's built assets).
    const toml = (await readFile(join(ROOT, 'wrangler.toml'), 'utf8'))
      .replace(/^main = "(.*)"$/m, (_l, main: string) => `main = "${join(ROOT, main)}"`)
      .replace(/^directory = "(.*)"$/m, (_l, d: string) => `directory = "${join(ROOT, d)}"`);
    await writeFile(join(dir, 'wrangler.toml'), toml);
    await writeFile(join(dir, '.dev.vars'), 'OPENAI_BASE_URL=http://127.0.0.1:9/v1\nOPENAI_API_KEY=sk-dev-vars-sentinel\nEDGESTR_OWNERS=npub-sentinel\n');
    worker = await startWrangler('dev-vars', ['EDGESTR_ENV:development'], join(dir, 'wrangler.toml'));
    cleanups.push(() => worker.cleanup());
    // The demo agent follows the deployment's provider: echo, since no provider reached the Worker.
    const url = `${worker.httpUrl}/api/agents/${DEMO_AGENT}`;
    expect((await fetch(`${worker.httpUrl}/health`)).status).toBe(200);
    const res = await fetch(url, { headers: { Authorization: makeHttpAuthHeader(DEMO_OWNER_SK, url, 'GET') } });
    expect(res.status).toBe(200);
    const view = (await res.json()) as Record<string, unknown>;
    expect(view).toMatchObject({ pubkey: DEMO_AGENT, effective_provider: 'echo' });
    expect(view.provider).toBeUndefined(); // it names none: it follows the deployment's
    expect(worker.log()).not.toContain('.dev.vars');
    expect(worker.log()).not.toContain('sk-dev-vars-sentinel');
  });
});
