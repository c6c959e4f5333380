// `npm run deploy`'s check as the command runs it (scripts/deploy-check.mjs --check-only, offline:
// the secrets cannot be listed): EDGESTR_PLANS, RELAY_LIMITS and the sign-up settings go through the
// Worker's own rules (workers/accounts/plans.ts, workers/relay-do/limits.ts,
// workers/accounts/signup-limits.ts, bundled for Node), so a configuration the Worker would refuse
// at every /api call, whose relay limits the shards would ignore, or whose open sign-up it would
// answer 503, is refused before it is deployed; and wrangler.toml as shipped: its compatibility
// flags pass, and it is refused until EDGESTR_PUBLIC_URL is given; with --env, the environment's
// section is what is checked (wrangler does not inherit vars or bindings into it). --check-only:
// nothing is ever deployed here.

import { spawnSync } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { E2E_OWNER } from './e2e-keys.js';

const ROOT = fileURLToPath(new URL('../../', import.meta.url));

const PUBLIC_URL = 'EDGESTR_PUBLIC_URL:https://relay.example.org';

/** The check of wrangler.toml with an owner, `vars` and (unless `publicUrl` is false) EDGESTR_PUBLIC_URL given as --var. */
function deployCheck(...vars: string[]): { status: number | null; out: string } {
  return deployCheckOf(true, ...vars);
}

function deployCheckOf(publicUrl: boolean, ...vars: string[]): { status: number | null; out: string } {
  const given = [`EDGESTR_OWNERS:${E2E_OWNER}`, ...(publicUrl ? [PUBLIC_URL] : []), ...vars];
  const args = ['scripts/deploy-check.mjs', '--check-only', ...given.flatMap((v) => ['--var', v])];
  const r = spawnSync(process.execPath, args, { cwd: ROOT, encoding: 'utf8', timeout: 60_000, env: { ...process.env, WRANGLER_SEND_METRICS: 'false' } });
  return { status: r.status, out: `${r.stdout}${r.stderr}` };
}

describe('npm run deploy: wrangler.toml as shipped', () => {
  it('has the compatibility flags a deployment needs, and is refused until EDGESTR_PUBLIC_URL is set', () => {
    const unset = deployCheckOf(false);
    expect(unset.status, unset.out).toBe(1);
    expect(unset.out).toContain(
      'deploy refused: 1 problem(s) in the configuration\n' +
        '  - EDGESTR_PUBLIC_URL is not set: set it in wrangler.toml [vars] to the URL clients reach this deployment at ' +
        '(e.g. "https://relay.example.org", or "https://edgestr.<your subdomain>.workers.dev"); the Worker answers on its hostname only, ' +
        "so no owner's dial reaches this deployment under another of its names\n",
    );
    const set = deployCheck();
    expect(set.status, set.out).toBe(0);
    expect(set.out).toContain('deploy check passed');
  });
});

describe('npm run deploy -- --env <name>', () => {
  it('checks that environment’s section as wrangler resolves it, not the top level', () => {
    const dir = mkdtempSync(join(tmpdir(), 'edgestr-deploy-env-'));
    const config = join(dir, 'wrangler.toml');
    writeFileSync(
      config,
      [
        'name = "edgestr"',
        `main = ${JSON.stringify(join(ROOT, 'workers/index.ts'))}`,
        'compatibility_date = "2026-04-01"',
        'compatibility_flags = ["nodejs_compat", "global_fetch_strictly_public"]',
        '[vars]',
        `EDGESTR_OWNERS = "${E2E_OWNER}"`,
        'EDGESTR_PUBLIC_URL = "https://relay.example.org"',
        '[env.staging]',
        'compatibility_flags = ["nodejs_compat"]',
        '',
      ].join('\n'),
    );
    const run = (...args: string[]) => {
      const r = spawnSync(process.execPath, ['scripts/deploy-check.mjs', '--check-only', '--config', config, ...args], { cwd: ROOT, encoding: 'utf8', timeout: 60_000, env: { ...process.env, WRANGLER_SEND_METRICS: 'false' } });
      return { status: r.status, out: `${r.stdout}${r.stderr}` };
    };
    const top = run();
    expect(top.status, top.out).toBe(0);
    expect(top.out).toContain('deploy check passed');
    for (const args of [['--env', 'staging'], ['--env=staging'], ['-e', 'staging']]) {
      const staging = run(...args);
      expect(staging.status, staging.out).toBe(1);
      expect(staging.out).toContain('deploy refused: 3 problem(s) in the configuration\n  - compatibility_flags lacks global_fetch_strictly_public');
      expect(staging.out).toContain('  - EDGESTR_PUBLIC_URL is not set');
      expect(staging.out).toContain('  - no owner and no admin');
    }
  }, 180_000);
});

describe('npm run deploy: EDGESTR_PLANS', () => {
  it('refuses a plan named __proto__ with the Worker’s error, and passes valid plans', () => {
    const proto = deployCheck('EDGESTR_PLANS:{"default":{},"__proto__":{"agents":1}}');
    expect(proto.status, proto.out).toBe(1);
    expect(proto.out).toContain('deploy refused: 1 problem(s) in the configuration\n  - EDGESTR_PLANS.__proto__: "__proto__" cannot name a plan; choose another name\n');

    const noDefault = deployCheck('EDGESTR_PLANS:{"free":{}}');
    expect(noDefault.status, noDefault.out).toBe(1);
    expect(noDefault.out).toContain('  - EDGESTR_PLANS.default: a plan named "default" is required\n');

    const valid = deployCheck('EDGESTR_PLANS:{"default":{"agents":3},"constructor":{}}');
    expect(valid.status, valid.out).toBe(0);
    expect(valid.out).toContain('deploy check passed');
  });
});

describe('npm run deploy: RELAY_LIMITS', () => {
  it('refuses a misspelt key and a key an earlier version named with the relay’s reasons, and passes valid limits', () => {
    const wrong = deployCheck('RELAY_LIMITS:{"max_conections_per_ip":20,"max_connections_per_address":5}');
    expect(wrong.status, wrong.out).toBe(1);
    expect(wrong.out).toContain(
      'deploy refused: 2 problem(s) in the configuration\n' +
        '  - RELAY_LIMITS.max_connections_per_address is now named max_connections_per_ip: its value is used as max_connections_per_ip; rename it in your configuration\n' +
        '  - RELAY_LIMITS: Unrecognized key: "max_conections_per_ip"\n',
    );

    const valid = deployCheck('RELAY_LIMITS:{"max_connections_per_ip":20}');
    expect(valid.status, valid.out).toBe(0);
    expect(valid.out).toContain('deploy check passed');
  });
});

describe('npm run deploy: EDGESTR_SIGNUP=open', () => {
  // Offline, a provider key may be a secret: the default plan must name its models as well.
  const NEEDS_MODELS =
    '  - EDGESTR_SIGNUP=open with a paid model provider (OPENAI_API_KEY, ANTHROPIC_API_KEY or the AI binding) needs a default plan that sets models, ' +
    'since tokens_per_day counts a token of every model alike: list the models sign-ups may use in EDGESTR_PLANS, e.g. {"default":{"agents":3,"tokens_per_day":200000,"models":["gpt-4o-mini"]}} (["*"]: any model)\n';

  it('refuses open sign-up with an unlimited default plan, and one of any model; passes it once the default plan sets agents, tokens_per_day and models', () => {
    const unlimited = deployCheck('EDGESTR_SIGNUP:open');
    expect(unlimited.status, unlimited.out).toBe(1);
    expect(unlimited.out).toContain(
      'deploy refused: 2 problem(s) in the configuration\n' +
        '  - EDGESTR_SIGNUP=open needs a default plan that sets agents and tokens_per_day: set both in EDGESTR_PLANS, e.g. {"default":{"agents":3,"tokens_per_day":200000}}\n' +
        NEEDS_MODELS,
    );

    const anyModel = deployCheck('EDGESTR_SIGNUP:open', 'EDGESTR_PLANS:{"default":{"agents":3,"tokens_per_day":200000}}', 'EDGESTR_SIGNUP_MAX_OWNERS:500');
    expect(anyModel.status, anyModel.out).toBe(1);
    expect(anyModel.out).toContain(`deploy refused: 1 problem(s) in the configuration\n${NEEDS_MODELS}`);

    const bounded = deployCheck('EDGESTR_SIGNUP:open', 'EDGESTR_PLANS:{"default":{"agents":3,"tokens_per_day":200000,"models":["gpt-4o-mini"]}}', 'EDGESTR_SIGNUP_MAX_OWNERS:500');
    expect(bounded.status, bounded.out).toBe(0);
    expect(bounded.out).toContain('deploy check passed');
  });
});
