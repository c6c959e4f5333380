// The deployment checks of `npm run deploy` (scripts/deploy-check.mjs), as one pure function so
// that they can be tested: given the variables wrangler will deploy, the names of the secrets
// already set (or null when they cannot be listed, e.g. offline or before the first deploy), the
// bindings and compatibility flags of wrangler.toml and the operator's explicit choices, it answers
// the problems that must stop the deploy and the checks it could not make. EDGESTR_PLANS,
// RELAY_LIMITS and the sign-up settings are checked with the Worker's own rules, passed in
// (`parsePlans`, `parseRelayLimits`, `signupProblems`): one rule, not a second copy here.

import { decode } from 'nostr-tools/nip19';

const HEX64 = /^[0-9a-f]{64}$/;
const PROVIDER_SETTINGS = ['OPENAI_API_KEY', 'OPENAI_BASE_URL', 'ANTHROPIC_API_KEY', 'ANTHROPIC_BASE_URL'];
/** The settings of a provider the operator pays per token (a base URL alone: a server of its own). */
const PAID_PROVIDER_KEYS = ['OPENAI_API_KEY', 'ANTHROPIC_API_KEY'];

/** Whether `s` is a pubkey as EDGESTR_OWNERS / EDGESTR_ADMINS accept it: 64 lowercase hex, or an npub. */
function isPubkey(s) {
  if (HEX64.test(s)) return true;
  if (!s.startsWith('npub1')) return false;
  try {
    return decode(s).type === 'npub';
  } catch {
    return false;
  }
}

/** Whether `s` is an http: or https: URL (with a host: the URL parser refuses `https://` alone). */
function isHttpUrl(s) {
  try {
    const url = new URL(s);
    return url.protocol === 'https:' || url.protocol === 'http:';
  } catch {
    return false;
  }
}

const entries = (value) => (value ?? '').split(',').map((s) => s.trim()).filter((s) => s !== '');

/**
 * @param {import('./deploy-config.d.mts').DeploymentInput} input
 * @returns {import('./deploy-config.d.mts').DeploymentVerdict}
 */
export function checkDeployment({ vars, secrets, bindings, compatibilityFlags, echoOnly, parsePlans, parseRelayLimits, signupProblems }) {
  const problems = [];
  const unchecked = [];
  const hasSecret = (name) => secrets !== null && secrets.includes(name);
  const set = (name) => (vars[name] ?? '').trim() !== '' || hasSecret(name);

  // global_fetch_strictly_public: without it, a fetch to a hostname of the Worker's own zone goes
  // straight to that host's origin, skipping its Cloudflare Access, WAF and Workers; an owner's
  // web_fetch, MCP server, bridge server or relay on another host of the operator's zone (the
  // outbound policy sees only a public name) would reach what the zone keeps behind them.
  if (!compatibilityFlags.includes('global_fetch_strictly_public')) {
    problems.push("compatibility_flags lacks global_fetch_strictly_public: owners' dials to this zone would reach origins past Access and the WAF; add it to wrangler.toml's compatibility_flags");
  }

  // EDGESTR_SECRET: a secret, never a plain variable in wrangler.toml.
  if ('EDGESTR_SECRET' in vars) problems.push('EDGESTR_SECRET is a plain [vars] value: remove it from wrangler.toml and run `npx wrangler secret put EDGESTR_SECRET`');
  else if (secrets === null) unchecked.push('EDGESTR_SECRET (secrets cannot be listed: run `npx wrangler secret list` once logged in)');
  else if (!hasSecret('EDGESTR_SECRET')) problems.push('EDGESTR_SECRET is not set: `npx wrangler secret put EDGESTR_SECRET` (at least 16 random characters, e.g. `openssl rand -hex 32`)');
  // EDGESTR_SECRET_PREVIOUS: the former secret during a rotation, a secret too, deleted once it is done.
  const rotation = 'docs/OPERATIONS.md, "Rotating EDGESTR_SECRET"';
  if ('EDGESTR_SECRET_PREVIOUS' in vars) problems.push(`EDGESTR_SECRET_PREVIOUS is a plain [vars] value: remove it from wrangler.toml; while rotating EDGESTR_SECRET, set it with \`npx wrangler secret put EDGESTR_SECRET_PREVIOUS\` (${rotation})`);
  else if (hasSecret('EDGESTR_SECRET_PREVIOUS')) {
    unchecked.push(`EDGESTR_SECRET_PREVIOUS is set (a rotation of EDGESTR_SECRET): delete it with \`npx wrangler secret delete EDGESTR_SECRET_PREVIOUS\` once every agent and bridge logged "every sealed value opens with EDGESTR_SECRET" (${rotation})`);
  }

  // EDGESTR_ENV: unset (or "production") on a deployment. "development" (demo keys known to
  // everyone) and "test" (invoices paid locally, for free) are for local runs; any other value is a
  // mistake (the Worker reads it as production, but not what its author meant).
  const env = (vars.EDGESTR_ENV ?? '').trim();
  if (env === 'development') problems.push('EDGESTR_ENV is "development": remove it (the demo keys are public, and a development Worker refuses every non-loopback request)');
  else if (env === 'test') problems.push('EDGESTR_ENV is "test": remove it (test mode settles invoices locally for free: anyone may POST /api/bridge/pay, so every priced tool is free)');
  else if (env !== '' && env !== 'production') problems.push(`EDGESTR_ENV is "${vars.EDGESTR_ENV}": remove it or set it to "production" (the Worker knows only "development" and "test", both for local runs)`);
  if (hasSecret('EDGESTR_ENV')) unchecked.push('EDGESTR_ENV is a secret: its value cannot be read; it must be unset or "production"');

  // EDGESTR_PUBLIC_URL: the Worker answers on its hostname only (421 elsewhere,
  // workers/common/served-host.ts), so a bridge server or web_fetch of an owner aimed at another
  // name of this Worker (its workers.dev one next to a custom domain) cannot reach it (a loop).
  const publicUrl = (vars.EDGESTR_PUBLIC_URL ?? '').trim();
  if (hasSecret('EDGESTR_PUBLIC_URL')) unchecked.push('EDGESTR_PUBLIC_URL is a secret: its value cannot be read; it must be the URL clients reach this deployment at');
  else if (publicUrl === '') {
    problems.push(
      'EDGESTR_PUBLIC_URL is not set: set it in wrangler.toml [vars] to the URL clients reach this deployment at ' +
        '(e.g. "https://relay.example.org", or "https://edgestr.<your subdomain>.workers.dev"); the Worker answers on its hostname only, ' +
        "so no owner's dial reaches this deployment under another of its names",
    );
  } else if (!isHttpUrl(publicUrl)) {
    problems.push(`EDGESTR_PUBLIC_URL is "${vars.EDGESTR_PUBLIC_URL}", not an http(s) URL: set it to the URL clients reach this deployment at, e.g. "https://relay.example.org"`);
  }

  // Who may own or operate.
  let people = 0;
  for (const name of ['EDGESTR_OWNERS', 'EDGESTR_ADMINS']) {
    for (const entry of entries(vars[name])) {
      if (isPubkey(entry)) people++;
      else problems.push(`${name} has "${entry}", which is neither a 64-hex pubkey nor an npub`);
    }
    if (hasSecret(name)) {
      people++;
      unchecked.push(`${name} is a secret: its entries cannot be read`);
    }
  }
  if (people === 0) problems.push('no owner and no admin: set EDGESTR_OWNERS (or EDGESTR_ADMINS) to your pubkey (hex or npub) in wrangler.toml [vars]');

  // Plans: the Worker's own rule (parsePlans of workers/accounts/plans.ts, given by the caller), so
  // that what the Worker would refuse at every /api call is refused before the deploy.
  if (vars.EDGESTR_PLANS !== undefined) {
    try {
      parsePlans(vars.EDGESTR_PLANS);
    } catch (e) {
      problems.push(e instanceof Error ? e.message : String(e));
    }
  }
  if (hasSecret('EDGESTR_PLANS')) unchecked.push('EDGESTR_PLANS is a secret: its JSON cannot be read');

  // Sign-up (signupProblems of workers/accounts/signup-limits.ts): its caps are whole numbers, and
  // EDGESTR_SIGNUP=open needs a default plan that bounds agents and model tokens (else the Worker
  // answers every sign-up 503: strangers would spend the provider keys without end) and, with a paid
  // provider (a key set, the AI binding, or keys that cannot be listed unless the operator deploys
  // echo-only), names the models its tokens were sized for.
  const paidProvider = PAID_PROVIDER_KEYS.some(set) || bindings.includes('AI') || (secrets === null && !echoOnly);
  problems.push(...signupProblems(vars, !hasSecret('EDGESTR_PLANS'), paidProvider));

  // Relay limits: the relay's own rule (parseRelayLimits of workers/relay-do/limits.ts). The shards
  // would ignore a wrong field (its limit at its default) and read a renamed key under its new name;
  // both are refused here so that the configuration says what is in force.
  if (vars.RELAY_LIMITS !== undefined) {
    const { renamed, problems: wrong } = parseRelayLimits(vars.RELAY_LIMITS);
    problems.push(...renamed, ...wrong);
  }
  if (hasSecret('RELAY_LIMITS')) unchecked.push('RELAY_LIMITS is a secret: its JSON cannot be read');

  // Edge objects per shard (workers/common/edges.ts, docs/SCALING.md): the same rule, before any shard refuses it.
  if ((vars.RELAY_EDGES ?? '').trim() !== '') {
    let edges;
    try {
      edges = JSON.parse(vars.RELAY_EDGES);
    } catch {
      edges = undefined;
    }
    const shardKey = (k) => k === '*' || k === 'public' || HEX64.test(k);
    const valid =
      typeof edges === 'object' && edges !== null && !Array.isArray(edges) &&
      Object.entries(edges).every(([k, v]) => shardKey(k) && Number.isInteger(v) && v >= 1 && v <= 64);
    if (!valid) problems.push('RELAY_EDGES is not a JSON object of K per shard ("*", "public" or a 64-hex owner key → an integer 1..64), e.g. {"public": 4, "*": 1}');
  }

  // A model provider, or the conscious choice of echo only.
  const provider = PROVIDER_SETTINGS.some(set) || bindings.includes('AI');
  if (!provider && !echoOnly) {
    if (secrets === null) unchecked.push(`a provider key (${PROVIDER_SETTINGS.join(', ')}) may be set as a secret: secrets cannot be listed`);
    else problems.push(`no model provider: set ${PROVIDER_SETTINGS.join(' or ')} (or add the AI binding), or deploy echo-only with EDGESTR_ECHO_ONLY=true`);
  }
  return { problems, unchecked };
}
