#!/usr/bin/env node
// `npm run deploy`: checks the deployment's configuration (scripts/deploy-config.mjs) and runs
// `wrangler deploy` with the same arguments only when nothing is wrong. It reads the configuration
// the deploy will use — wrangler.toml, or the file given with --config/-c, and with --env/-e NAME that
// environment's section as wrangler resolves it (vars and bindings are not inherited from the top
// level) — through wrangler's own reader (its vars, bindings and compatibility flags), the --var NAME:VALUE
// arguments given to the deploy, and the names of the secrets already set (`wrangler secret list`,
// which needs a login and an existing Worker; when it fails, the secret checks are reported as not
// made). Prints the list of problems and exits 1, or the unchecked items and deploys.
//   npm run deploy                      check, then wrangler deploy
//   npm run deploy -- --dry-run         check, then wrangler deploy --dry-run
//   npm run deploy -- --env staging     check [env.staging], then wrangler deploy --env staging
//   EDGESTR_ECHO_ONLY=true npm run deploy   deploy without a model provider, on purpose
//   node scripts/deploy-check.mjs --check-only

import { execFileSync, spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { build } from 'esbuild';
import { unstable_readConfig } from 'wrangler';
import { checkDeployment } from './deploy-config.mjs';

/**
 * A module of the Worker (its path from the repository root), bundled for Node with the esbuild that
 * comes with wrangler: the deploy check applies the very rules the Worker will (EDGESTR_PLANS:
 * workers/accounts/plans.ts `parsePlans`; RELAY_LIMITS: workers/relay-do/limits.ts `parseRelayLimits`;
 * EDGESTR_SIGNUP and its caps: workers/accounts/signup-limits.ts `signupProblems`).
 */
async function workerModule(path) {
  const bundle = await build({
    entryPoints: [fileURLToPath(new URL(`../${path}`, import.meta.url))],
    bundle: true,
    write: false,
    format: 'esm',
    platform: 'node',
    target: 'node20',
    logLevel: 'silent',
  });
  const code = Buffer.from(bundle.outputFiles[0].contents).toString('base64');
  return import(`data:text/javascript;base64,${code}`);
}

const args = process.argv.slice(2);
const checkOnly = args.includes('--check-only');
const deployArgs = args.filter((a) => a !== '--check-only');

/** The value of a wrangler option given as `--name value`, `--name=value` or `-x value` (the last one given). */
function option(long, short) {
  let value;
  for (let i = 0; i < deployArgs.length; i++) {
    const a = deployArgs[i];
    if (a === `--${long}` || a === `-${short}`) value = deployArgs[++i];
    else if (a.startsWith(`--${long}=`)) value = a.slice(long.length + 3);
  }
  return value;
}

const configFile = option('config', 'c') ?? 'wrangler.toml';
const environment = option('env', 'e');
const config = unstable_readConfig({ config: configFile, env: environment });
const vars = Object.fromEntries(Object.entries(config.vars ?? {}).map(([k, v]) => [k, typeof v === 'string' ? v : JSON.stringify(v)]));
for (let i = 0; i < deployArgs.length; i++) {
  if (deployArgs[i] !== '--var') continue;
  const [name, ...value] = (deployArgs[i + 1] ?? '').split(':');
  if (name) vars[name] = value.join(':');
}

const bindings = [
  ...(config.ai ? [config.ai.binding] : []),
  ...(config.r2_buckets ?? []).map((b) => b.binding),
  ...(config.durable_objects?.bindings ?? []).map((b) => b.name),
];

function secretNames() {
  try {
    const out = execFileSync('npx', ['wrangler', 'secret', 'list', '--format', 'json', '--config', configFile, ...(environment ? ['--env', environment] : [])], {
      encoding: 'utf8',
      stdio: ['ignore', 'pipe', 'ignore'],
      timeout: 30_000,
      env: { ...process.env, WRANGLER_SEND_METRICS: 'false' },
    });
    return JSON.parse(out).map((s) => s.name);
  } catch {
    return null;
  }
}

const { problems, unchecked } = checkDeployment({
  vars,
  secrets: secretNames(),
  bindings,
  compatibilityFlags: config.compatibility_flags ?? [],
  echoOnly: process.env.EDGESTR_ECHO_ONLY === 'true',
  parsePlans: (await workerModule('workers/accounts/plans.ts')).parsePlans,
  parseRelayLimits: (await workerModule('workers/relay-do/limits.ts')).parseRelayLimits,
  signupProblems: (await workerModule('workers/accounts/signup-limits.ts')).signupProblems,
});
for (const u of unchecked) console.warn(`not checked: ${u}`);
if (problems.length > 0) {
  console.error(`deploy refused: ${problems.length} problem(s) in the configuration\n${problems.map((p) => `  - ${p}`).join('\n')}`);
  console.error('See docs/OPERATIONS.md "Deploying".');
  process.exit(1);
}
console.log('deploy check passed');
if (!checkOnly) process.exit(spawnSync('npx', ['wrangler', 'deploy', ...deployArgs], { stdio: 'inherit' }).status ?? 1);
