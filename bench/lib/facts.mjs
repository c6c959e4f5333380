// @ts-check
// Facts about the machine and the software under test, recorded with every bench run.

import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { cpus, loadavg, release, totalmem, type } from 'node:os';
import { join } from 'node:path';
import { ROOT } from './server.mjs';

/** @param {string} cmd @param {string[]} args */
function run(cmd, args) {
  try {
    return execFileSync(cmd, args, { cwd: ROOT, encoding: 'utf8', timeout: 10_000 }).trim();
  } catch {
    return 'unknown';
  }
}

/** @param {string} pkg */
function version(pkg) {
  try {
    return JSON.parse(readFileSync(join(ROOT, 'node_modules', pkg, 'package.json'), 'utf8')).version;
  } catch {
    return 'unknown';
  }
}

export async function machineFacts() {
  const dirty = run('git', ['status', '--porcelain', '--', 'src', 'workers']) !== '';
  return {
    date: new Date().toISOString(),
    nproc: run('nproc', []),
    cpu: cpus()[0]?.model ?? 'unknown',
    memGiB: Math.round(totalmem() / 2 ** 30),
    os: `${type()} ${release()}`,
    node: process.version,
    wrangler: version('wrangler'),
    miniflare: version('miniflare'),
    workerd: version('workerd'),
    commit: `${run('git', ['rev-parse', '--short', 'HEAD'])}${dirty ? ' + uncommitted changes in src/ or workers/' : ''}`,
    loadStart: loadavg().map((x) => x.toFixed(2)).join(' / '),
  };
}
