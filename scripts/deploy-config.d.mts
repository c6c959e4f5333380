// Types of scripts/deploy-config.mjs (a plain Node module, imported by tests).

export interface DeploymentInput {
  /** The plain variables wrangler will deploy: wrangler.toml [vars] and --var overrides. */
  vars: Record<string, string>;
  /** Names of the secrets set on the Worker, or null when they cannot be listed. */
  secrets: readonly string[] | null;
  /** Names of the bindings in wrangler.toml (e.g. "AI", "BACKUPS"). */
  bindings: readonly string[];
  /** wrangler.toml's compatibility_flags. */
  compatibilityFlags: readonly string[];
  /** The operator deploys with the echo provider only, on purpose (EDGESTR_ECHO_ONLY=true). */
  echoOnly: boolean;
  /** The Worker's EDGESTR_PLANS parser (workers/accounts/plans.ts `parsePlans`): throws an Error naming what is wrong. */
  parsePlans: (raw: string | undefined) => unknown;
  /** The relay's RELAY_LIMITS reader (workers/relay-do/limits.ts `parseRelayLimits`): the renamed keys used and what is wrong, as messages. */
  parseRelayLimits: (raw: string | undefined) => { renamed: string[]; problems: string[] };
  /**
   * The Worker's sign-up rules (workers/accounts/signup-limits.ts `signupProblems`): what is wrong of
   * the sign-up settings; `plansKnown` false when EDGESTR_PLANS is a secret; `paidProvider` when the
   * deployment has (or may have) an OpenAI or Anthropic key or the AI binding.
   */
  signupProblems: (vars: Record<string, string>, plansKnown: boolean, paidProvider: boolean) => string[];
}

export interface DeploymentVerdict {
  /** What must be fixed before deploying (the deploy is refused when any). */
  problems: string[];
  /** What could not be checked from here, and how to check it. */
  unchecked: string[];
}

export function checkDeployment(input: DeploymentInput): DeploymentVerdict;
