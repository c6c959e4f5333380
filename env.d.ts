// Module declarations for non-TS imports bundled by wrangler.
declare module '*.wasm' {
  const module: WebAssembly.Module;
  export default module;
}

// The bindings of wrangler.toml, as seen by `env` from 'cloudflare:test' / 'cloudflare:workers'.
declare namespace Cloudflare {
  interface Env {
    RELAY_SHARD: DurableObjectNamespace<import('./workers/relay-do/shard.js').RelayShard>;
    EDGESTR_OWNERS?: string;
    EDGESTR_ENV?: string;
    RELAY_LIMITS?: string;
  }
}
