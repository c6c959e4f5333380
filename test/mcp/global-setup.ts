// Node-side global setup of the in-runtime tool tests (test/workers/tools*.test.ts): starts the
// fixture HTTP server (test/mcp/fixture-server.ts) and the real MCP "everything" server
// (@modelcontextprotocol/server-everything, `mcp-server-everything streamableHttp`, endpoint /mcp)
// plus a second instance in the legacy HTTP+SSE mode (`mcp-server-everything sse`, endpoint /sse)
// on free 127.0.0.1 ports, provides their URLs (inject('toolsFixtureUrl'),
// inject('mcpEverythingUrl'), inject('mcpEverythingSseUrl')), and stops them on teardown.

import { spawn, type ChildProcess } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { TestProject } from 'vitest/node';
import { startFixtureServer } from './fixture-server.js';
import { freePort, sleep } from '../helpers-node/processes.js';
import './provided.js';

const ROOT = fileURLToPath(new URL('../../', import.meta.url));
const EVERYTHING_DIR = join(ROOT, 'node_modules', '@modelcontextprotocol', 'server-everything');
const READY_TIMEOUT_MS = 30_000;
const MAX_LOG_CHARS = 100_000;



/** The `mcp-server-everything` bin of the installed package (what `npx mcp-server-everything` runs). */
function everythingBin(): string {
  const pkg = JSON.parse(readFileSync(join(EVERYTHING_DIR, 'package.json'), 'utf8')) as { bin: Record<string, string> };
  const bin = pkg.bin['mcp-server-everything'];
  if (!bin) throw new Error('@modelcontextprotocol/server-everything has no mcp-server-everything bin');
  return join(EVERYTHING_DIR, bin);
}

export async function stop(child: ChildProcess): Promise<void> {
  const pid = child.pid;
  if (pid === undefined || child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise<void>((r) => child.once('exit', () => r()));
  const signal = (sig: NodeJS.Signals): void => {
    try {
      process.kill(-pid, sig); // its own process group (detached)
    } catch {
      // already gone
    }
  };
  signal('SIGTERM');
  await Promise.race([exited, sleep(3_000)]);
  signal('SIGKILL');
}

/** How each mode is started and probed: its endpoint, and the status a GET gets once express listens. */
const MODES = {
  streamableHttp: { endpoint: '/mcp', probe: '/mcp', ready: 400 }, // a GET without a session
  sse: { endpoint: '/sse', probe: '/probe', ready: 404 }, // any unknown path (GET /sse would open a session)
} as const;

/** Starts server-everything in `mode` and waits until express is listening. */
export async function startEverything(mode: keyof typeof MODES): Promise<{ url: string; child: ChildProcess; log: () => string }> {
  const port = await freePort();
  const { endpoint, probe, ready } = MODES[mode];
  const url = `http://127.0.0.1:${port}${endpoint}`;
  const probeUrl = `http://127.0.0.1:${port}${probe}`;
  const child = spawn(process.execPath, [everythingBin(), mode], {
    cwd: ROOT,
    env: { ...process.env, PORT: String(port), NO_COLOR: '1' },
    detached: true,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let log = '';
  const collect = (chunk: Buffer): void => {
    log = (log + chunk.toString('utf8')).slice(-MAX_LOG_CHARS);
  };
  child.stdout?.on('data', collect);
  child.stderr?.on('data', collect);
  let exitInfo: string | undefined;
  child.once('exit', (code, sig) => {
    exitInfo = `server-everything exited (code ${code ?? '-'}, signal ${sig ?? '-'})`;
  });

  const deadline = Date.now() + READY_TIMEOUT_MS;
  let lastError = 'no answer yet';
  for (;;) {
    try {
      const res = await fetch(probeUrl, { signal: AbortSignal.timeout(2_000) });
      await res.body?.cancel();
      if (res.status === ready) break;
      lastError = `GET ${probe} answered ${res.status}`;
    } catch (e) {
      lastError = e instanceof Error ? e.message : String(e);
    }
    const failure = exitInfo ?? (Date.now() > deadline ? `timeout after ${READY_TIMEOUT_MS} ms: ${lastError}` : undefined);
    if (failure) {
      await stop(child);
      throw new Error(`server-everything (${mode}) did not start on ${url} (${failure}).\n--- output ---\n${log}\n--- end ---`);
    }
    await sleep(100);
  }
  return { url, child, log: () => log };
}

export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  const fixture = await startFixtureServer();
  const started: Awaited<ReturnType<typeof startEverything>>[] = [];
  const teardown = async (): Promise<void> => {
    for (const s of started) {
      if (process.env.MCP_EVERYTHING_LOG) console.log(`--- server-everything ${s.url} ---\n${s.log()}\n--- end ---`);
      await stop(s.child);
    }
    await fixture.close();
  };
  try {
    started.push(await startEverything('streamableHttp'));
    started.push(await startEverything('sse'));
  } catch (e) {
    await teardown();
    throw e;
  }
  const [everything, everythingSse] = started;
  if (!everything || !everythingSse) throw new Error('server-everything did not start');
  project.provide('toolsFixtureUrl', fixture.url);
  project.provide('mcpEverythingUrl', everything.url);
  project.provide('mcpEverythingSseUrl', everythingSse.url);
  return teardown;
}
