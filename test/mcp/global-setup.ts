// Node-side global setup of the in-runtime tool tests (test/workers/tools*.test.ts): starts the
// fixture HTTP server (test/mcp/fixture-server.ts) and the real MCP "everything" server
// (@modelcontextprotocol/server-everything, `mcp-server-everything streamableHttp`, endpoint /mcp)
// on free 127.0.0.1 ports, provides their URLs (inject('toolsFixtureUrl'),
// inject('mcpEverythingUrl')), and stops both on teardown.

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

async function stop(child: ChildProcess): Promise<void> {
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

/** Starts server-everything over Streamable HTTP and waits until it accepts an initialize. */
async function startEverything(): Promise<{ url: string; child: ChildProcess; log: () => string }> {
  const port = await freePort();
  const url = `http://127.0.0.1:${port}/mcp`;
  const child = spawn(process.execPath, [everythingBin(), 'streamableHttp'], {
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
      // A GET without a session is answered 400 once express is listening.
      const res = await fetch(url, { signal: AbortSignal.timeout(2_000) });
      await res.body?.cancel();
      if (res.status === 400) break;
      lastError = `GET /mcp answered ${res.status}`;
    } catch (e) {
      lastError = e instanceof Error ? e.message : String(e);
    }
    const failure = exitInfo ?? (Date.now() > deadline ? `timeout after ${READY_TIMEOUT_MS} ms: ${lastError}` : undefined);
    if (failure) {
      await stop(child);
      throw new Error(`server-everything did not start on ${url} (${failure}).\n--- output ---\n${log}\n--- end ---`);
    }
    await sleep(100);
  }
  return { url, child, log: () => log };
}

export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  const fixture = await startFixtureServer();
  let everything: Awaited<ReturnType<typeof startEverything>>;
  try {
    everything = await startEverything();
  } catch (e) {
    await fixture.close();
    throw e;
  }
  project.provide('toolsFixtureUrl', fixture.url);
  project.provide('mcpEverythingUrl', everything.url);
  return async () => {
    if (process.env.MCP_EVERYTHING_LOG) console.log(`--- server-everything ---\n${everything.log()}\n--- end ---`);
    await stop(everything.child);
    await fixture.close();
  };
}
