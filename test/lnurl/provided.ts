// The value test/lnurl/global-setup.ts provides to the payment tests (inject('lnurlUrl')).
// Shared by the Node side (tsconfig.node.json) and the workerd side (tsconfig.json) as types only.

declare module 'vitest' {
  export interface ProvidedContext {
    /** http://127.0.0.1:PORT — the LNURL-pay server of test/lnurl/server.ts (pay endpoints under /.well-known/lnurlp/<name>). */
    lnurlUrl: string;
  }
}

export {};
