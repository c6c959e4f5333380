// Module declarations for non-TS imports bundled by wrangler.
declare module '*.wasm' {
  const module: WebAssembly.Module;
  export default module;
}
