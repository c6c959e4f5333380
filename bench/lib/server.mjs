// @ts-check
// Starts the relay for the bench: bundles bench/workerd/entry.ts with the project's wrangler.toml
// (`wrangler deploy --dry-run`, the same esbuild bundling as `wrangler dev`/`deploy`) and serves the
// bundle with Miniflare (the workerd runner inside `wrangler dev`) on 127.0.0.1, configured from
// wrangler.toml the way vitest-pool-workers does it, with SQLite-backed Durable Objects persisted to
// a fresh temporary directory. Serving the bundle directly avoids the extra proxy hop (a second
// workerd process) that `wrangler dev` puts in front of the Worker. Extra vars (the agent pass:
// OPENAI_BASE_URL, EDGESTR_OWNERS, EDGESTR_SECRET) override those of wrangler.toml.

import { execFile, execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { mkdtemp, readdir, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { Log, LogLevel, Miniflare } from 'miniflare';
import { unstable_getMiniflareWorkerOptions } from 'wrangler';

export const ROOT = fileURLToPath(new URL('../../', import.meta.url));
const CONFIG = 'wrangler.toml';
const ENTRY = 'bench/workerd/entry.ts';
const BUILD_TIMEOUT_MS = 180_000;
const READY_TIMEOUT_MS = 60_000;

/**
 * @typedef {object} RunningRelay
 * @property {string} httpUrl  http://127.0.0.1:PORT
 * @property {string} wsUrl    ws://127.0.0.1:PORT
 * @property {() => Promise<void>} stop
 */

/**
 * @param {{ relayLimits: string, storageRoot?: string, bindings?: Record<string, string> }} options  RELAY_LIMITS
 *   (JSON) for the relay; the directory under which the Durable Objects' SQLite files are created
 *   (default: os.tmpdir()); further string bindings (vars) over those of wrangler.toml
 * @returns {Promise<RunningRelay>}
 */
export async function startRelay({ relayLimits, storageRoot = tmpdir(), bindings = {} }) {
  const build = await mkdtemp(join(tmpdir(), 'edgestr-bench-build-'));
  const persist = await mkdtemp(join(storageRoot, 'edgestr-bench-do-'));
  const cleanup = async () => {
    await rm(build, { recursive: true, force: true });
    await rm(persist, { recursive: true, force: true });
  };
  try {
    await promisify(execFile)('npx', ['wrangler', 'deploy', '--dry-run', '-c', CONFIG, ENTRY, '--outdir', build], {
      cwd: ROOT,
      // No banner: the banner is what makes wrangler look for a newer version on the npm registry.
      env: { ...process.env, WRANGLER_SEND_METRICS: 'false', WRANGLER_HIDE_BANNER: 'true', NO_COLOR: '1', FORCE_COLOR: '0' },
      timeout: BUILD_TIMEOUT_MS,
      maxBuffer: 16 * 1024 * 1024,
    });
  } catch (e) {
    await cleanup();
    const out = /** @type {{ stdout?: string, stderr?: string }} */ (e);
    throw new Error(`bundling ${ENTRY} failed:\n${out.stdout ?? ''}\n${out.stderr ?? ''}`);
  }
  const script = (await readdir(build)).find((f) => f.endsWith('.js'));
  if (!script) {
    await cleanup();
    throw new Error(`bundling ${ENTRY} produced no .js file`);
  }
  // Bindings, Durable Object classes (SQLite or not), compatibility date and flags from wrangler.toml.
  const { workerOptions } = unstable_getMiniflareWorkerOptions(join(ROOT, CONFIG));
  const mf = new Miniflare({
    ...workerOptions,
    modules: true,
    scriptPath: join(build, script),
    modulesRoot: build,
    modulesRules: [{ type: 'CompiledWasm', include: ['**/*.wasm'] }],
    durableObjectsPersist: persist,
    bindings: { ...workerOptions.bindings, ...bindings, RELAY_LIMITS: relayLimits },
    host: '127.0.0.1',
    port: 0,
    cf: false, // never fetch the Request.cf placeholder from the network
    log: new Log(LogLevel.WARN),
  });
  let timer;
  try {
    const url = await Promise.race([
      mf.ready,
      new Promise((_, reject) => {
        timer = setTimeout(() => reject(new Error(`Miniflare not ready after ${READY_TIMEOUT_MS} ms`)), READY_TIMEOUT_MS);
      }),
    ]);
    const httpUrl = /** @type {URL} */ (url).origin;
    return {
      httpUrl,
      wsUrl: httpUrl.replace(/^http/, 'ws'),
      stop: async () => {
        await mf.dispose();
        await cleanup();
      },
    };
  } catch (e) {
    await mf.dispose().catch(() => {});
    await cleanup();
    throw e;
  } finally {
    clearTimeout(timer);
  }
}

/**
 * CPU time (user + system, all threads, ms) used so far by the workerd process serving the relay:
 * Miniflare's workerd is a child of this Node process. Clock ticks are 10 ms on Linux (CLK_TCK 100).
 * @returns {() => number}
 */
export function workerdCpuMeter() {
  const stat = `/proc/${workerdPid()}/stat`;
  return () => {
    // Fields after "(comm)": state is field 3; utime and stime are fields 14 and 15.
    const fields = readFileSync(stat, 'utf8').split(') ')[1]?.split(' ') ?? [];
    return (Number(fields[11]) + Number(fields[12])) * 10;
  };
}

/**
 * Resident memory (VmRSS, bytes) of the workerd process serving the relay, now.
 * @returns {() => number}
 */
export function workerdRssMeter() {
  const status = `/proc/${workerdPid()}/status`;
  return () => {
    const kb = /^VmRSS:\s+(\d+) kB$/m.exec(readFileSync(status, 'utf8'))?.[1];
    if (kb === undefined) throw new Error(`no VmRSS in ${status}`);
    return Number(kb) * 1024;
  };
}

/** The workerd process of this Node process's Miniflare (its only workerd child). */
function workerdPid() {
  const pids = execFileSync('pgrep', ['-P', String(process.pid), 'workerd'], { encoding: 'utf8', timeout: 5_000 }).trim().split('\n');
  if (pids.length !== 1 || !pids[0]) throw new Error(`expected one workerd child process, found: ${pids.join(', ') || 'none'}`);
  return pids[0];
}
