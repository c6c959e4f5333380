// Starts the Worker twice with `wrangler dev`, in parallel, each on a free port with empty storage
// (a fresh --persist-to directory), waits for GET /health, provides the URLs to the tests, and kills
// every process tree (and the fake provider) on teardown:
//   1. inject('relayUrl'), inject('httpUrl'): no provider configured (`EDGESTR_ENV=development`),
//      so the demo agent answers with the offline echo model (what a user gets after `npm start`).
//   2. inject('agentRelayUrl'), inject('agentHttpUrl'): hosted agents against the fake LLM provider
//      (test/fake-provider, started here; inject('fakeProviderUrl')), with the fixed e2e owner
//      (test/e2e/e2e-keys.ts) in EDGESTR_OWNERS, an EDGESTR_SECRET and `EDGESTR_ENV=test`.
// `--var KEY:VALUE` is split at the first ':' only (wrangler joins the rest back), so URLs are fine.
// The configuration is exactly those vars: wrangler is given an empty `--env-file`, so it reads
// neither the developer's `.dev.vars` nor `.env` (a real provider key must never reach a test run),
// and CLOUDFLARE_INCLUDE_PROCESS_ENV=false keeps the shell's variables out. The offline noise is
// off (no Request.cf download, no banner with its update check), as under `npm start`.

import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { TestProject } from 'vitest/node';
import { startFakeProvider, type FakeProvider } from '../fake-provider/server.js';
import { E2E_OWNER, E2E_SECRET } from './e2e-keys.js';
import { build } from './cli-run.js';
import { freePort, sleep } from '../helpers-node/processes.js';

declare module 'vitest' {
  export interface ProvidedContext {
    /** ws://127.0.0.1:PORT — the public shard. */
    relayUrl: string;
    /** http://127.0.0.1:PORT */
    httpUrl: string;
    /** ws://127.0.0.1:PORT2 — the public shard of the instance configured for hosted agents. */
    agentRelayUrl: string;
    /** http://127.0.0.1:PORT2 — its management API (/api/agents) and /health. */
    agentHttpUrl: string;
    /** http://127.0.0.1:PORT3 — the fake provider (OpenAI base `${url}/v1`, Anthropic base `${url}`). */
    fakeProviderUrl: string;
  }
}

const ROOT = fileURLToPath(new URL('../../', import.meta.url));
const READY_TIMEOUT_MS = 60_000;
const MAX_LOG_CHARS = 200_000;

/** The environment of a test's wrangler: quiet offline, no metrics, no colours, no process env as config. */
export const QUIET_WRANGLER_ENV = {
  WRANGLER_SEND_METRICS: 'false',
  CLOUDFLARE_CF_FETCH_ENABLED: 'false',
  WRANGLER_HIDE_BANNER: 'true',
  CLOUDFLARE_INCLUDE_PROCESS_ENV: 'false',
  NO_COLOR: '1',
  FORCE_COLOR: '0',
};

/** SIGTERM to the process group (npx → wrangler → workerd), then SIGKILL if it lingers. */
export async function killTree(child: ChildProcess): Promise<void> {
  const pid = child.pid;
  if (pid === undefined || child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise<void>((r) => child.once('exit', () => r()));
  const signal = (sig: NodeJS.Signals): void => {
    try {
      process.kill(-pid, sig);
    } catch {
      // the group is already gone
    }
  };
  signal('SIGTERM');
  await Promise.race([exited, sleep(5_000)]);
  signal('SIGKILL');
}

export interface RunningWorker {
  httpUrl: string;
  log: () => string;
  cleanup: () => Promise<void>;
}

/**
 * `wrangler dev` with `vars` (KEY:VALUE) on a free port and fresh storage, configured by those vars
 * only (an empty env file); resolves once healthy. `configPath`: another wrangler.toml.
 */
export async function startWrangler(label: string, vars: string[], configPath?: string): Promise<RunningWorker> {
  const [port, inspectorPort] = [await freePort(), await freePort()];
  const persistDir = await mkdtemp(join(tmpdir(), 'edgestr-e2e-'));
  const httpUrl = `http://127.0.0.1:${port}`;
  const envFile = join(persistDir, 'empty.env');
  await writeFile(envFile, '');

  const args = [
    'wrangler',
    'dev',
    '--ip',
    '127.0.0.1',
    '--port',
    String(port),
    '--inspector-port',
    String(inspectorPort),
    '--local', // no remote bindings: this machine has no network
    '--persist-to',
    persistDir,
    '--env-file',
    envFile,
    ...(configPath ? ['--config', configPath] : []),
    ...vars.flatMap((v) => ['--var', v]),
    '--show-interactive-dev-session=false',
  ];
  const child = spawn('npx', args, {
    cwd: ROOT,
    env: { ...process.env, ...QUIET_WRANGLER_ENV },
    detached: true, // its own process group, so teardown can kill wrangler and workerd together
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let log = '';
  const collect = (chunk: Buffer): void => {
    log = (log + chunk.toString('utf8').replace(/\x1b\[[0-9;]*m/g, '')).slice(-MAX_LOG_CHARS);
  };
  child.stdout?.on('data', collect);
  child.stderr?.on('data', collect);
  let exitInfo: string | undefined;
  child.once('exit', (code, sig) => {
    exitInfo = `wrangler exited (code ${code ?? '-'}, signal ${sig ?? '-'})`;
  });

  const cleanup = async (): Promise<void> => {
    await killTree(child);
    await rm(persistDir, { recursive: true, force: true });
  };

  // wrangler dev stays up after a build error (waiting for a file change), so watch for that too.
  const buildFailed = (): boolean => /Build failed|✘ \[ERROR\]/.test(log);
  const deadline = Date.now() + READY_TIMEOUT_MS;
  let failure: string | undefined;
  let lastError = 'no answer yet';
  for (;;) {
    try {
      const res = await fetch(`${httpUrl}/health`, { signal: AbortSignal.timeout(2_000) });
      if (res.status === 200) break;
      lastError = `GET /health answered ${res.status}`;
    } catch (e) {
      lastError = e instanceof Error ? e.message : String(e);
    }
    if (exitInfo) failure = exitInfo;
    else if (buildFailed()) failure = 'wrangler reported an error';
    else if (Date.now() > deadline) failure = `timeout after ${READY_TIMEOUT_MS} ms: ${lastError}`;
    if (failure) break;
    await sleep(250);
  }
  if (failure) {
    await sleep(200); // let the rest of the error reach the log
    await cleanup();
    throw new Error(
      `wrangler dev (${label}) did not become healthy on ${httpUrl} (${failure}).\n` +
        `--- wrangler output ---\n${log}\n--- end of wrangler output ---`,
    );
  }
  return { httpUrl, log: () => log, cleanup };
}

export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  // dist/ (the CLI, the library and the console's assets) from the current sources, once and before
  // any wrangler starts: wrangler dev watches the console's assets and restarts when they change, so
  // no test may rebuild while the instances run.
  build();
  const fake: FakeProvider = await startFakeProvider();
  const started = await Promise.allSettled([
    startWrangler('echo', ['EDGESTR_ENV:development']),
    startWrangler('agents', [
      `OPENAI_BASE_URL:${fake.url}/v1`,
      'OPENAI_API_KEY:sk-fake',
      `ANTHROPIC_BASE_URL:${fake.url}`,
      'ANTHROPIC_API_KEY:sk-ant-fake',
      `EDGESTR_OWNERS:${E2E_OWNER}`,
      `EDGESTR_SECRET:${E2E_SECRET}`,
      'EDGESTR_ENV:test',
    ]),
  ]);
  const workers = started.flatMap((s) => (s.status === 'fulfilled' ? [s.value] : []));
  const cleanup = async (): Promise<void> => {
    await Promise.all(workers.map((w) => w.cleanup()));
    await fake.close();
  };
  const failures = started.flatMap((s) => (s.status === 'rejected' ? [s.reason instanceof Error ? s.reason.message : String(s.reason)] : []));
  const [echo, agents] = workers;
  if (failures.length > 0 || !echo || !agents) {
    await cleanup();
    throw new Error(failures.join('\n\n'));
  }

  project.provide('httpUrl', echo.httpUrl);
  project.provide('relayUrl', echo.httpUrl.replace(/^http/, 'ws'));
  project.provide('agentHttpUrl', agents.httpUrl);
  project.provide('agentRelayUrl', agents.httpUrl.replace(/^http/, 'ws'));
  project.provide('fakeProviderUrl', fake.url);

  return async () => {
    if (process.env.E2E_WRANGLER_LOG) {
      console.log(`--- wrangler output (echo) ---\n${echo.log()}\n--- end ---`);
      console.log(`--- wrangler output (agents) ---\n${agents.log()}\n--- end ---`);
    }
    await cleanup();
  };
}
