// `npm start`: runs `wrangler dev` for local development (loopback, port 8787, EDGESTR_ENV=development)
// without the offline noise (the `Request.cf` download from workers.cloudflare.com and wrangler's
// update check), waits until GET /health answers, and then prints one banner with what a newcomer
// needs: the relay URLs, the demo owner and agent, the console, /mcp, and where provider keys go.
// Extra arguments go to wrangler (`npm start -- --port 9000`); a variable set in the caller's
// environment wins over the quiet defaults here. A non-loopback `--ip` (0.0.0.0, ::, a LAN address)
// is refused unless `--unsafe-remote-dev` is given too: see wranglerArgs. Plain Node (no build step): it runs before anything
// is compiled.

import { spawn } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { isIPv4, isIPv6 } from 'node:net';
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

/** The values of every `--flag value` / `--flag=value` in `args`, in order. */
function flagValues(args, flag) {
  const values = [];
  for (let i = 0; i < args.length; i++) {
    if (args[i] === flag) values.push(args[i + 1]);
    else if (args[i].startsWith(`${flag}=`)) values.push(args[i].slice(flag.length + 1));
  }
  return values;
}

/** The value of `--flag value` / `--flag=value` in `args` (the first). */
const flagValue = (args, flag) => flagValues(args, flag)[0];

/**
 * The flag with which a developer accepts binding a non-loopback address in development or test
 * mode (a container whose port is published to the host's loopback only, a trusted lab network).
 * It is ours: it is not passed on to wrangler.
 */
export const UNSAFE_REMOTE_DEV = '--unsafe-remote-dev';

/** The EDGESTR_ENV values whose Worker serves what must stay on this machine, and what a network peer could do with it. */
const LOCAL_MODES = {
  development: {
    name: 'development mode',
    risk:
      'manage agents with the public demo owner key, spend the provider keys of your .dev.vars, make the Worker fetch ' +
      'private addresses of your network (web_fetch, MCP servers) and pay invoices for free',
  },
  test: { name: 'test mode', risk: 'pay invoices for free (POST /api/bridge/pay), so use priced tools without paying' },
};

/**
 * Whether wrangler's `--ip` value binds loopback only: 127.0.0.0/8, ::1 (also as [::1]) or
 * localhost. Anything else (0.0.0.0, ::, *, a LAN address, a host name) is reachable from other
 * machines, or may be.
 */
export function isLoopbackIp(ip) {
  const host = ip.trim().toLowerCase();
  if (host === 'localhost') return true;
  if (isIPv4(host)) return host.split('.')[0] === '127';
  const v6 = /^\[(.*)\]$/.exec(host)?.[1] ?? host;
  return isIPv6(v6) && new URL(`http://[${v6}]/`).hostname === '[::1]';
}

/** The values of every `--var` in `args` (wrangler's --var takes one or more NAME:VALUE), in order. */
function varValues(args) {
  const values = [];
  for (let i = 0; i < args.length; i++) {
    if (args[i].startsWith('--var=')) values.push(args[i].slice('--var='.length));
    else if (args[i] === '--var') for (let j = i + 1; j < args.length && !args[j].startsWith('-'); j++) values.push(args[j]);
  }
  return values;
}

/** The EDGESTR_ENV the Worker gets from `args`: the last `--var EDGESTR_ENV:<value>` (wrangler's rule; it also wins over .dev.vars). */
function edgestrEnv(args) {
  return varValues(args).filter((v) => v.startsWith('EDGESTR_ENV:')).map((v) => v.slice('EDGESTR_ENV:'.length)).at(-1);
}

/**
 * wrangler's arguments: ours, unless the caller gave the same flag. Throws when they would bind a
 * non-loopback address while the Worker is in development or test mode, unless `extra` has
 * UNSAFE_REMOTE_DEV: the Worker decides "loopback" from the request's Host header, which under
 * `wrangler dev` any client sets (docs/SECURITY.md), so only the bound address keeps other machines out.
 */
export function wranglerArgs(extra) {
  const optIn = extra.includes(UNSAFE_REMOTE_DEV);
  const theirs = extra.filter((a) => a !== UNSAFE_REMOTE_DEV);
  const defaults = [
    ['--ip', '127.0.0.1'],
    ['--port', '8787'],
  ];
  const ours = defaults.filter(([flag]) => flagValue(theirs, flag) === undefined).flat();
  const args = ['dev', ...ours, '--var', 'EDGESTR_ENV:development', ...theirs];
  // Every --ip given counts (wrangler might take any of them).
  const ip = flagValues(args, '--ip').map((v) => v ?? '').find((v) => !isLoopbackIp(v));
  const env = edgestrEnv(args);
  if (!optIn && Object.hasOwn(LOCAL_MODES, env) && ip !== undefined) {
    throw new Error(
      `--ip ${ip} is not a loopback address. npm start runs ${LOCAL_MODES[env].name} (EDGESTR_ENV=${env}), which must ` +
        'stay on this machine: the Worker cannot tell a request from another machine from one of yours (it would take ' +
        `Host: 127.0.0.1 from anyone), so anyone who can reach that address could ${LOCAL_MODES[env].risk}. ` +
        'Bind a loopback address (127.0.0.1, ::1, localhost), or, on a network where you accept that (e.g. in a container ' +
        `whose port is published to the host's loopback only), add ${UNSAFE_REMOTE_DEV} (docs/OPERATIONS.md "Running locally").`,
    );
  }
  return args;
}

/** The URL origin that reaches wrangler bound to `ip` from this machine (an unspecified address: its loopback). */
export function localOrigin(ip, port) {
  const host = ip.replace(/^\[(.*)\]$/, '$1');
  if (host === '0.0.0.0' || host === '*') return `http://127.0.0.1:${port}`;
  if (isIPv6(host)) return `http://[${host === '::' ? '::1' : host}]:${port}`;
  return `http://${host}:${port}`;
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
  let args;
  try {
    args = wranglerArgs(extra);
  } catch (e) {
    console.error(`edgestr: ${e instanceof Error ? e.message : String(e)}`);
    process.exit(2);
  }
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

  const origin = localOrigin(flagValue(args, '--ip'), flagValue(args, '--port'));
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
