// The configuration checks of `npm run deploy` (scripts/deploy-config.mjs): each refusal with its
// message, what cannot be checked without listing secrets, and a configuration that passes.
// EDGESTR_PLANS is read with the Worker's own parser (parsePlans), RELAY_LIMITS with the relay's
// (parseRelayLimits), and the sign-up settings with the Worker's (signupProblems), as
// scripts/deploy-check.mjs does.
import { describe, expect, it } from 'vitest';
import { npubEncode } from 'nostr-tools/nip19';
import { checkDeployment, type DeploymentInput } from '../../scripts/deploy-config.mjs';
import { keys } from './helpers.js';
import { parsePlans } from '../../workers/accounts/plans.js';
import { parseRelayLimits } from '../../workers/relay-do/limits.js';
import { signupProblems } from '../../workers/accounts/signup-limits.js';

const owner = keys().pk;
/** wrangler.toml's compatibility flags. */
const FLAGS = ['nodejs_compat', 'global_fetch_strictly_public'];
/** The URL the deployment is served at: required (the Worker answers on its hostname only). */
const PUBLIC_URL = 'https://relay.example.org';
const good: DeploymentInput = {
  vars: { EDGESTR_OWNERS: owner, EDGESTR_PUBLIC_URL: PUBLIC_URL },
  secrets: ['EDGESTR_SECRET', 'OPENAI_API_KEY'],
  bindings: [],
  compatibilityFlags: FLAGS,
  echoOnly: false,
  parsePlans,
  parseRelayLimits,
  signupProblems,
};
/** `good` with `over`; its vars keep EDGESTR_PUBLIC_URL unless they set it. */
const check = (over: Partial<DeploymentInput>) => checkDeployment({ ...good, ...over, vars: { EDGESTR_PUBLIC_URL: PUBLIC_URL, ...(over.vars ?? good.vars) } });

describe('deploy check', () => {
  it('passes a complete configuration (owner by hex or npub, admin alone, AI binding, echo-only)', () => {
    expect(check({})).toEqual({ problems: [], unchecked: [] });
    expect(check({ vars: { EDGESTR_OWNERS: ` ${npubEncode(owner)} ` } })).toEqual({ problems: [], unchecked: [] });
    expect(check({ vars: { EDGESTR_ADMINS: owner } })).toEqual({ problems: [], unchecked: [] });
    expect(check({ secrets: ['EDGESTR_SECRET'], bindings: ['AI'] })).toEqual({ problems: [], unchecked: [] });
    expect(check({ secrets: ['EDGESTR_SECRET'], echoOnly: true })).toEqual({ problems: [], unchecked: [] });
    expect(check({ vars: { EDGESTR_OWNERS: owner, EDGESTR_PLANS: '{"default":{},"free":{"runs_per_day":10}}' } }).problems).toEqual([]);
    expect(check({ vars: { EDGESTR_OWNERS: owner, EDGESTR_PLANS: '{"default":{},"constructor":{"agents":1}}' } }).problems).toEqual([]);
    expect(check({ vars: { EDGESTR_OWNERS: owner, RELAY_EDGES: `{"public":16,"${'a'.repeat(64)}":4,"*":1}` } }).problems).toEqual([]);
    expect(check({ vars: { EDGESTR_OWNERS: owner, RELAY_LIMITS: '{"max_connections_per_ip":20,"events_per_second_per_connection":50}' } }).problems).toEqual([]);
  });

  const NO_PUBLIC_URL =
    'EDGESTR_PUBLIC_URL is not set: set it in wrangler.toml [vars] to the URL clients reach this deployment at ' +
    '(e.g. "https://relay.example.org", or "https://edgestr.<your subdomain>.workers.dev"); the Worker answers on its hostname only, ' +
    'so no owner\'s dial reaches this deployment under another of its names';

  it('refuses with the full list of what is missing', () => {
    expect(checkDeployment({ ...good, vars: { EDGESTR_OWNERS: '', EDGESTR_ENV: 'development' }, secrets: [] }).problems).toEqual([
      'EDGESTR_SECRET is not set: `npx wrangler secret put EDGESTR_SECRET` (at least 16 random characters, e.g. `openssl rand -hex 32`)',
      'EDGESTR_ENV is "development": remove it (the demo keys are public, and a development Worker refuses every non-loopback request)',
      NO_PUBLIC_URL,
      'no owner and no admin: set EDGESTR_OWNERS (or EDGESTR_ADMINS) to your pubkey (hex or npub) in wrangler.toml [vars]',
      'no model provider: set OPENAI_API_KEY or OPENAI_BASE_URL or ANTHROPIC_API_KEY or ANTHROPIC_BASE_URL (or add the AI binding), or deploy echo-only with EDGESTR_ECHO_ONLY=true',
    ]);
  });

  it.each([
    ['a plaintext EDGESTR_SECRET', { vars: { EDGESTR_OWNERS: owner, EDGESTR_SECRET: 'x'.repeat(32) } }, 'EDGESTR_SECRET is a plain [vars] value: remove it from wrangler.toml and run `npx wrangler secret put EDGESTR_SECRET`'],
    ['a malformed owner', { vars: { EDGESTR_OWNERS: `${owner},npub1nope` } }, 'EDGESTR_OWNERS has "npub1nope", which is neither a 64-hex pubkey nor an npub'],
    [
      'a plaintext EDGESTR_SECRET_PREVIOUS',
      { vars: { EDGESTR_OWNERS: owner, EDGESTR_SECRET_PREVIOUS: 'x'.repeat(32) } },
      'EDGESTR_SECRET_PREVIOUS is a plain [vars] value: remove it from wrangler.toml; while rotating EDGESTR_SECRET, set it with `npx wrangler secret put EDGESTR_SECRET_PREVIOUS` (docs/OPERATIONS.md, "Rotating EDGESTR_SECRET")',
    ],
  ])('refuses %s', (_n, over, problem) => {
    expect(check(over).problems).toEqual([problem]);
  });

  // The Worker's rule, word for word: what parsePlans would throw at every /api call after the deploy.
  it.each([
    ['a plan named __proto__', '{"default":{},"__proto__":{"agents":1}}', 'EDGESTR_PLANS.__proto__: "__proto__" cannot name a plan; choose another name'],
    ['a __proto__ plan alone', '{"__proto__":{}}', 'EDGESTR_PLANS.__proto__: "__proto__" cannot name a plan; choose another name'],
    ['no default plan', '{"free":{"runs_per_day":10}}', 'EDGESTR_PLANS.default: a plan named "default" is required'],
    ['a bad plan name', '{"default":{},"Pro":{}}', 'EDGESTR_PLANS.Pro: plan names are 1-32 of a-z 0-9 _ -'],
    ['a negative limit', '{"default":{"agents":-1}}', 'EDGESTR_PLANS.default.agents: Too small: expected number to be >=0'],
    ['an unknown limit', '{"default":{"agent":1}}', 'EDGESTR_PLANS.default: Unrecognized key: "agent"'],
    ['plans that are not JSON', '{free', 'EDGESTR_PLANS is not JSON'],
    ['plans that are a list', '[{"name":"free"}]', 'EDGESTR_PLANS: Invalid input: expected record, received array'],
  ])('refuses %s in EDGESTR_PLANS with the Worker\'s own error', (_n, plans, problem) => {
    expect(() => parsePlans(plans)).toThrowError(problem);
    expect(check({ vars: { EDGESTR_OWNERS: owner, EDGESTR_PLANS: plans } }).problems).toEqual([problem]);
  });

  // The relay's rule (parseRelayLimits of workers/relay-do/limits.ts): what every shard would ignore after the deploy, refused before it.
  it.each([
    ['a misspelt key', '{"max_conections_per_ip":20}', 'RELAY_LIMITS: Unrecognized key: "max_conections_per_ip"'],
    [
      'a key an earlier version named',
      '{"max_connections_per_address":20}',
      'RELAY_LIMITS.max_connections_per_address is now named max_connections_per_ip: its value is used as max_connections_per_ip; rename it in your configuration',
    ],
    [
      'a key an earlier version named, with its new name',
      '{"max_connections_per_address":20,"max_connections_per_ip":30}',
      'RELAY_LIMITS.max_connections_per_address is now named max_connections_per_ip, which is set too: its value is ignored; remove it from your configuration',
    ],
    ['a bad value', '{"max_connections":0}', 'RELAY_LIMITS.max_connections: Too small: expected number to be >0'],
    ['limits that are not JSON', '{max_connections: 500}', 'RELAY_LIMITS is not JSON'],
    ['limits that are a list', '[500]', 'RELAY_LIMITS: Invalid input: expected object, received array'],
  ])("refuses %s in RELAY_LIMITS with the relay's own reason", (_n, limits, problem) => {
    expect(check({ vars: { EDGESTR_OWNERS: owner, RELAY_LIMITS: limits } }).problems).toEqual([problem]);
  });

  // Open sign-up with an unlimited default plan would let any stranger spend the operator's provider
  // keys without end (the Worker answers such sign-ups 503); the caps are whole numbers.
  const OPEN_NEEDS_LIMITS = 'EDGESTR_SIGNUP=open needs a default plan that sets agents and tokens_per_day: set both in EDGESTR_PLANS, e.g. {"default":{"agents":3,"tokens_per_day":200000}}';
  // A plan's token limits count a token of every model alike: with a paid provider, open sign-up
  // needs the default plan to name the models its tokens_per_day was sized for.
  const OPEN_NEEDS_MODELS =
    'EDGESTR_SIGNUP=open with a paid model provider (OPENAI_API_KEY, ANTHROPIC_API_KEY or the AI binding) needs a default plan that sets models, ' +
    'since tokens_per_day counts a token of every model alike: list the models sign-ups may use in EDGESTR_PLANS, e.g. {"default":{"agents":3,"tokens_per_day":200000,"models":["gpt-4o-mini"]}} (["*"]: any model)';
  const BOUNDED = '{"default":{"agents":3,"tokens_per_day":200000}}';
  it.each([
    ['open sign-up without EDGESTR_PLANS', { EDGESTR_SIGNUP: 'open' }, [OPEN_NEEDS_LIMITS, OPEN_NEEDS_MODELS]],
    ['open sign-up with a default plan of unlimited agents', { EDGESTR_SIGNUP: 'open', EDGESTR_PLANS: '{"default":{"tokens_per_day":200000,"models":["gpt-4o-mini"]}}' }, [OPEN_NEEDS_LIMITS]],
    ['open sign-up with a default plan of unlimited tokens', { EDGESTR_SIGNUP: 'open', EDGESTR_PLANS: '{"default":{"agents":3,"tokens_per_month":100,"models":["gpt-4o-mini"]}}' }, [OPEN_NEEDS_LIMITS]],
    ['open sign-up with a default plan of any model (an OpenAI key)', { EDGESTR_SIGNUP: 'open', EDGESTR_PLANS: BOUNDED }, [OPEN_NEEDS_MODELS]],
    ['open sign-up with plans that are not JSON (said once)', { EDGESTR_SIGNUP: 'open', EDGESTR_PLANS: '{default' }, ['EDGESTR_PLANS is not JSON']],
    ['a cap of owners that is not a whole number', { EDGESTR_SIGNUP_MAX_OWNERS: '10k' }, ['EDGESTR_SIGNUP_MAX_OWNERS is "10k": a whole number, 0 or more (default 10000)']],
    ['a negative cap of sign-ups a day', { EDGESTR_SIGNUP_MAX_PER_DAY: '-1' }, ['EDGESTR_SIGNUP_MAX_PER_DAY is "-1": a whole number, 0 or more (default 1000)']],
  ])('refuses %s', (_n, vars, problems) => {
    expect(check({ vars: { EDGESTR_OWNERS: owner, ...vars } }).problems).toEqual(problems);
  });

  it('refuses open sign-up with a default plan of any model whatever the paid provider (Anthropic key, AI binding, keys that cannot be listed); not on an echo-only deployment', () => {
    const vars = { EDGESTR_OWNERS: owner, EDGESTR_SIGNUP: 'open', EDGESTR_PLANS: BOUNDED };
    expect(check({ vars, secrets: ['EDGESTR_SECRET', 'ANTHROPIC_API_KEY'] }).problems).toEqual([OPEN_NEEDS_MODELS]);
    expect(check({ vars, secrets: ['EDGESTR_SECRET'], bindings: ['AI'] }).problems).toEqual([OPEN_NEEDS_MODELS]);
    expect(check({ vars, secrets: null }).problems).toEqual([OPEN_NEEDS_MODELS]);
    expect(check({ vars, secrets: ['EDGESTR_SECRET'], echoOnly: true })).toEqual({ problems: [], unchecked: [] });
    expect(check({ vars, secrets: null, echoOnly: true }).problems).toEqual([]);
  });

  it('passes open sign-up with a default plan that sets agents, tokens_per_day and models, and caps that are whole numbers; plans kept as a secret cannot be read (said so)', () => {
    const vars = {
      EDGESTR_OWNERS: owner,
      EDGESTR_SIGNUP: 'open',
      EDGESTR_PLANS: '{"default":{"agents":3,"tokens_per_day":200000,"models":["gpt-4o-mini"]}}',
      EDGESTR_SIGNUP_MAX_OWNERS: '500',
      EDGESTR_SIGNUP_MAX_PER_DAY: '0',
    };
    expect(check({ vars })).toEqual({ problems: [], unchecked: [] });
    expect(check({ vars: { ...vars, EDGESTR_PLANS: '{"default":{"agents":3,"tokens_per_day":200000,"models":["*"]}}' } })).toEqual({ problems: [], unchecked: [] });
    expect(check({ vars: { EDGESTR_OWNERS: owner, EDGESTR_SIGNUP: 'open' }, secrets: ['EDGESTR_SECRET', 'OPENAI_API_KEY', 'EDGESTR_PLANS'] })).toEqual({
      problems: [],
      unchecked: ['EDGESTR_PLANS is a secret: its JSON cannot be read'],
    });
  });

  it.each([
    ['test', 'EDGESTR_ENV is "test": remove it (test mode settles invoices locally for free: anyone may POST /api/bridge/pay, so every priced tool is free)'],
    ['staging', 'EDGESTR_ENV is "staging": remove it or set it to "production" (the Worker knows only "development" and "test", both for local runs)'],
    ['Development', 'EDGESTR_ENV is "Development": remove it or set it to "production" (the Worker knows only "development" and "test", both for local runs)'],
  ])('refuses EDGESTR_ENV %s', (value, problem) => {
    expect(check({ vars: { EDGESTR_OWNERS: owner, EDGESTR_ENV: value } }).problems).toEqual([problem]);
  });

  it.each(['production', '', ' '])('passes EDGESTR_ENV %j', (value) => {
    expect(check({ vars: { EDGESTR_OWNERS: owner, EDGESTR_ENV: value } })).toEqual({ problems: [], unchecked: [] });
  });

  it.each(['{"*":65}', '{"*":0}', '{"npub1x":2}', '[4]', 'four'])('refuses RELAY_EDGES %s', (edges) => {
    expect(check({ vars: { EDGESTR_OWNERS: owner, RELAY_EDGES: edges } }).problems).toEqual([
      'RELAY_EDGES is not a JSON object of K per shard ("*", "public" or a 64-hex owner key → an integer 1..64), e.g. {"public": 4, "*": 1}',
    ]);
  });

  // Without the flag, a Worker's fetch to a hostname of its own zone goes straight to that host's
  // origin: an owner's web_fetch, MCP server, bridge server or relay on another host of the
  // operator's zone would skip that host's Access and WAF.
  it('refuses compatibility_flags without global_fetch_strictly_public', () => {
    const problem = "compatibility_flags lacks global_fetch_strictly_public: owners' dials to this zone would reach origins past Access and the WAF; add it to wrangler.toml's compatibility_flags";
    expect(check({ compatibilityFlags: ['nodejs_compat'] }).problems).toEqual([problem]);
    expect(check({ compatibilityFlags: [] }).problems).toEqual([problem]);
    expect(check({ compatibilityFlags: ['nodejs_compat', 'global_fetch_private_origin'] }).problems).toEqual([problem]);
  });

  // Without it, the Worker answers on every name it is served under (its workers.dev one next to a
  // custom domain): an owner's bridge server or web_fetch there reached this deployment (a loop).
  it('refuses a configuration without EDGESTR_PUBLIC_URL, or with one that is not an http(s) URL; one kept as a secret cannot be read (said so)', () => {
    expect(checkDeployment({ ...good, vars: { EDGESTR_OWNERS: owner } }).problems).toEqual([NO_PUBLIC_URL]);
    expect(checkDeployment({ ...good, vars: { EDGESTR_OWNERS: owner, EDGESTR_PUBLIC_URL: ' ' } }).problems).toEqual([NO_PUBLIC_URL]);
    expect(checkDeployment({ ...good, vars: { EDGESTR_OWNERS: owner }, secrets: null }).problems).toEqual([NO_PUBLIC_URL]);
    for (const value of ['relay.example.org', 'wss://relay.example.org', 'https://']) {
      expect(check({ vars: { EDGESTR_OWNERS: owner, EDGESTR_PUBLIC_URL: value } }).problems, value).toEqual([
        `EDGESTR_PUBLIC_URL is "${value}", not an http(s) URL: set it to the URL clients reach this deployment at, e.g. "https://relay.example.org"`,
      ]);
    }
    expect(check({ vars: { EDGESTR_OWNERS: owner, EDGESTR_PUBLIC_URL: 'https://edgestr.example.workers.dev' } })).toEqual({ problems: [], unchecked: [] });
    expect(checkDeployment({ ...good, vars: { EDGESTR_OWNERS: owner }, secrets: ['EDGESTR_SECRET', 'OPENAI_API_KEY', 'EDGESTR_PUBLIC_URL'] })).toEqual({
      problems: [],
      unchecked: ['EDGESTR_PUBLIC_URL is a secret: its value cannot be read; it must be the URL clients reach this deployment at'],
    });
  });

  it('says what it cannot check when secrets cannot be listed, and refuses nothing for it', () => {
    expect(check({ secrets: null })).toEqual({
      problems: [],
      unchecked: [
        'EDGESTR_SECRET (secrets cannot be listed: run `npx wrangler secret list` once logged in)',
        'a provider key (OPENAI_API_KEY, OPENAI_BASE_URL, ANTHROPIC_API_KEY, ANTHROPIC_BASE_URL) may be set as a secret: secrets cannot be listed',
      ],
    });
    expect(check({ vars: {}, secrets: ['EDGESTR_SECRET', 'OPENAI_API_KEY', 'EDGESTR_OWNERS'] })).toEqual({
      problems: [],
      unchecked: ['EDGESTR_OWNERS is a secret: its entries cannot be read'],
    });
    expect(check({ secrets: ['EDGESTR_SECRET', 'OPENAI_API_KEY', 'RELAY_LIMITS'] })).toEqual({
      problems: [],
      unchecked: ['RELAY_LIMITS is a secret: its JSON cannot be read'],
    });
    expect(check({ secrets: ['EDGESTR_SECRET', 'OPENAI_API_KEY', 'EDGESTR_ENV'] })).toEqual({
      problems: [],
      unchecked: ['EDGESTR_ENV is a secret: its value cannot be read; it must be unset or "production"'],
    });
    // A rotation under way: deployable, with the reminder of its last step.
    expect(check({ secrets: ['EDGESTR_SECRET', 'OPENAI_API_KEY', 'EDGESTR_SECRET_PREVIOUS'] })).toEqual({
      problems: [],
      unchecked: [
        'EDGESTR_SECRET_PREVIOUS is set (a rotation of EDGESTR_SECRET): delete it with `npx wrangler secret delete EDGESTR_SECRET_PREVIOUS` once every agent and bridge logged "every sealed value opens with EDGESTR_SECRET" (docs/OPERATIONS.md, "Rotating EDGESTR_SECRET")',
      ],
    });
  });
});
