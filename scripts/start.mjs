// `npm start`: runs `wrangler dev` for local development (loopback, port 8787, EDGESTR_ENV=development)
// without the offline noise (the `Request.cf` download from workers.cloudflare.com and wrangler's
// update check), waits until GET /health answers, and then prints one banner with what a newcomer
// needs: the relay URLs, the demo owner and agent, the console, /mcp, and where provider keys go.
// Extra arguments go to wrangler (`npm start -- --port 9000`); a variable set in the caller's
// environment wins over the quiet defaults here. Plain Node (no build step): it runs before anything
// is compiled.

import { spawn } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { npubEncode } from 'nostr-tools/nip19';

const ROOT = fileURLToPath(new URL('../', import.meta.url));
const HEALTH_TIMEOUT_MS = 120_000;

/** The provider settings (names only, never values) a `.dev.vars` file sets. */
export const PROVIDER_VARS = ['OPENAI_API_KEY', 'OPENAI_BASE_URL', 'ANTHROPIC_API_KEY', 'ANTHROPIC_BASE_URL'];

/** The names of the variables set in a dotenv-style file (KEY=value lines), or undefined when there is no file. */
export function varNames(path) {
  if (!existsSync(path)) return undefined;
  return readFileSync(path, 'utf8')
    .split('\n')
    .map((line) => /^\s*(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)\s*=/.exec(line)?.[1])
    .filter((name) => name !== undefined);
}

/**
 * The banner lines for a running deployment at `origin` whose /health answered `health`;
 * `devVars`: the variable names of the env file wrangler read (undefined: none).
 */
export function bannerLines(origin, health, devVars) {
  const ws = origin.replace(/^http/, 'ws');
  const providers = (devVars ?? []).filter((n) => PROVIDER_VARS.includes(n));
  const lines = [
    '',
    `edgestr ${health.version} is running (local development)`,
    `  Relay (public shard)  ${ws}/`,
  ];
  if (health.demo) {
    lines.push(
      `  Demo owner's shard    ${ws}${health.demo.relay}`,
      `  Demo owner            ${npubEncode(health.demo.owner)}  (hex ${health.demo.owner})`,
      `  Demo agent            ${npubEncode(health.demo.agent)}  (hex ${health.demo.agent})`,
    );
  }
  lines.push(
    `  Console               ${origin}/console`,
    `  MCP endpoint          ${origin}/mcp`,
    `  Health                ${origin}/health`,
    providers.length === 0
      ? '  Model provider        none: agents answer with the offline echo model'
      : (devVars ?? []).includes('EDGESTR_DEFAULT_MODEL')
        ? `  Model provider        configured (${providers.join(', ')}, EDGESTR_DEFAULT_MODEL); name the model when creating an agent ("models": [...])`
        : `  Model provider        configured (${providers.join(', ')}); set EDGESTR_DEFAULT_MODEL=<model> for the demo agent, and name the model when creating an agent ("models": [...])`,
    '  Configure             .dev.vars in the project directory (restart npm start after editing):',
    '                          OPENAI_API_KEY=sk-...   or OPENAI_BASE_URL=http://127.0.0.1:11434/v1 (Ollama, vLLM, llama.cpp)',
    '                          ANTHROPIC_API_KEY=sk-ant-...',
    '                          EDGESTR_OWNERS=<your npub or hex>   (who may create agents; the demo owner always may here)',
    '  Logs                  one JSON line per agent lifecycle step and per run (agent.created, agent.connected, agent.run, agent.removed)',
    '',
  );
  return lines;
}

/** The value of `--flag value` / `--flag=value` in `args`. */
function flagValue(args, flag) {
  for (let i = 0; i < args.length; i++) {
    if (args[i] === flag) return args[i + 1];
    if (args[i].startsWith(`${flag}=`)) return args[i].slice(flag.length + 1);
  }
  return undefined;
}

/** wrangler's arguments: ours, unless the caller gave the same flag. */
export function wranglerArgs(extra) {
  const defaults = [
    ['--ip', '127.0.0.1'],
    ['--port', '8787'],
  ];
  const ours = defaults.filter(([flag]) => flagValue(extra, flag) === undefined).flat();
  return ['dev', ...ours, '--var', 'EDGESTR_ENV:development', ...extra];
}

async function waitForHealth(origin, child) {
  const deadline = Date.now() + HEALTH_TIMEOUT_MS;
  while (child.exitCode === null && child.signalCode === null && Date.now() < deadline) {
    try {
      const res = await fetch(`${origin}/health`, { signal: AbortSignal.timeout(2_000) });
      if (res.ok) return await res.json();
    } catch {
      // not listening yet
    }
    await new Promise((r) => setTimeout(r, 250));
  }
  return undefined;
}

async function main() {
  const extra = process.argv.slice(2);
  const args = wranglerArgs(extra);
  const wrangler = join(dirname(createRequire(import.meta.url).resolve('wrangler/package.json')), 'bin', 'wrangler.js');
  const child = spawn(process.execPath, [wrangler, ...args], {
    cwd: ROOT,
    stdio: 'inherit',
    env: {
      // Offline quiet: no Request.cf download (a placeholder is used), no banner with its update check, no metrics.
      CLOUDFLARE_CF_FETCH_ENABLED: 'false',
      WRANGLER_HIDE_BANNER: 'true',
      WRANGLER_SEND_METRICS: 'false',
      ...process.env,
    },
  });
  for (const signal of ['SIGINT', 'SIGTERM', 'SIGHUP']) process.on(signal, () => child.kill(signal));
  child.on('exit', (code, signal) => process.exit(code ?? (signal ? 1 : 0)));

  const host = flagValue(args, '--ip');
  const origin = `http://${host === '0.0.0.0' ? '127.0.0.1' : host}:${flagValue(args, '--port')}`;
  const health = await waitForHealth(origin, child);
  if (!health) {
    if (child.exitCode === null) console.error(`edgestr: ${origin}/health did not answer within ${HEALTH_TIMEOUT_MS / 1000} s`);
    return;
  }
  // What wrangler reads: the --env-file given, else .dev.vars, else .env.
  const envFile = flagValue(args, '--env-file');
  const devVars = envFile ? varNames(resolve(ROOT, envFile)) : (varNames(join(ROOT, '.dev.vars')) ?? varNames(join(ROOT, '.env')));
  console.log(bannerLines(origin, health, devVars).join('\n'));
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) await main();
