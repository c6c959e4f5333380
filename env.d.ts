// Module declarations for non-TS imports bundled by wrangler.
declare module '*.wasm' {
  const module: WebAssembly.Module;
  export default module;
}

// The bindings of wrangler.toml, as seen by `env` from 'cloudflare:test' / 'cloudflare:workers'.
declare namespace Cloudflare {
  interface Env {
    RELAY_SHARD: DurableObjectNamespace<import('./workers/relay-do/shard.js').RelayShard>;
    AGENT: DurableObjectNamespace<import('./workers/agent/agent-do.js').Agent>;
    API_STATE: DurableObjectNamespace<import('./workers/api/api-state.js').ApiState>;
    BRIDGE: DurableObjectNamespace<import('./workers/bridge/bridge-do.js').Bridge>;
    ACCOUNTS: DurableObjectNamespace<import('./workers/accounts/accounts-do.js').Accounts>;
    EDGESTR_ADMINS?: string;
    EDGESTR_PLANS?: string;
    EDGESTR_SIGNUP?: string;
    EDGESTR_SIGNUP_MAX_OWNERS?: string;
    EDGESTR_SIGNUP_MAX_PER_DAY?: string;
    EDGESTR_SECRET?: string;
    EDGESTR_SECRET_PREVIOUS?: string;
    OPENAI_API_KEY?: string;
    OPENAI_BASE_URL?: string;
    ANTHROPIC_API_KEY?: string;
    ANTHROPIC_BASE_URL?: string;
    EDGESTR_OWNERS?: string;
    EDGESTR_ENV?: string;
    EDGESTR_OPEN_SHARDS?: string;
    EDGESTR_PUBLIC_URL?: string;
    EDGESTR_OUTBOUND_ALLOW?: string;
    EDGESTR_DEFAULT_MODEL?: string;
    RELAY_LIMITS?: string;
    RELAY_EDGES?: string;
    BACKUPS?: R2Bucket;
    MCP_RATE_LIMIT?: RateLimit;
    SIGNUP_RATE_LIMIT?: RateLimit;
    ASSETS: Fetcher;
  }
}
