// Everything specific to the `nostr-wasm` package, in one file: its libsecp256k1 build
// (public/out/secp256k1.wasm), bound by the build's minified import and export names, gives BIP-340
// Schnorr verification and signing and SHA-256 (for event ids). Workers refuse to compile Wasm from
// bytes at run time, so the module is imported here and compiled by wrangler at deploy time. The
// names belong to one build: package.json pins the version exactly, and the module's exports are
// checked against them before use (test/workers/wasm-verifier.test.ts fails loudly on a change).

// A relative path: wrangler's bundler applies its CompiledWasm rule to it (a bare alias is not matched).
import secp256k1 from '../../node_modules/nostr-wasm/public/out/secp256k1.wasm';
import type { SchnorrSigner, SchnorrVerifier } from '../../src/shared/verify.js';

/** The nostr-wasm release whose build these names belong to (package.json pins exactly this). */
export const NOSTR_WASM_VERSION = '0.1.0';

/** The build's minified export names this binding calls, by what they do. */
export const EXPECTED_EXPORTS = {
  memory: 'g',
  init: 'h',
  malloc: 'i',
  sha256Initialize: 'l',
  sha256Write: 'm',
  sha256Finalize: 'n',
  contextCreate: 'o',
  xonlyPubkeyParse: 'p',
  xonlyPubkeySerialize: 'q',
  keypairCreate: 'r',
  keypairXonlyPub: 's',
  schnorrsigSign32: 't',
  schnorrsigVerify: 'u',
} as const;

/** The functions the build imports from module "a" (all provided by `wasmImports`). */
export const EXPECTED_IMPORTS = ['a', 'b', 'c', 'd', 'e', 'f'] as const;

/**
 * Why a module (by default the bundled one) is not the build this binding was written for, or
 * undefined when its imports and the exports above match (names and kinds).
 */
export function bindingMismatch(
  exports: WebAssembly.ModuleExportDescriptor[] = WebAssembly.Module.exports(secp256k1),
  imports: WebAssembly.ModuleImportDescriptor[] = WebAssembly.Module.imports(secp256k1),
): string | undefined {
  const exported = new Map(exports.map((e) => [e.name, e.kind]));
  const problems: string[] = [];
  for (const [role, name] of Object.entries(EXPECTED_EXPORTS)) {
    const want = role === 'memory' ? 'memory' : 'function';
    const got = exported.get(name);
    if (got !== want) problems.push(`export "${name}" (${role}) should be a ${want}, is ${got ?? 'missing'}`);
  }
  const provided: ReadonlySet<string> = new Set(EXPECTED_IMPORTS);
  for (const i of imports) {
    if (i.module !== 'a' || !provided.has(i.name) || i.kind !== 'function') problems.push(`unexpected import "${i.module}.${i.name}" (${i.kind})`);
  }
  if (problems.length === 0) return undefined;
  const expected = Object.entries(EXPECTED_EXPORTS).map(([role, name]) => `${name}=${role}`).join(', ');
  return (
    `secp256k1.wasm is not the nostr-wasm ${NOSTR_WASM_VERSION} build this binding was written for: ${problems.join('; ')}. ` +
    `Expected exports: ${expected}; imports a.${EXPECTED_IMPORTS.join(', a.')}. Re-derive the names from the new build before changing the version.`
  );
}

/** The build's exports as named functions. */
interface Secp256k1Exports {
  memory: WebAssembly.Memory;
  init(): void;
  malloc(size: number): number;
  contextCreate(flags: number): number;
  xonlyPubkeyParse(ctx: number, out: number, input32: number): number;
  schnorrsigVerify(ctx: number, sig64: number, msg: number, msgLen: number, pubkey: number): number;
  keypairCreate(ctx: number, keypair: number, sk32: number): number;
  keypairXonlyPub(ctx: number, xonly: number, parity: number, keypair: number): number;
  xonlyPubkeySerialize(ctx: number, out32: number, xonly: number): number;
  schnorrsigSign32(ctx: number, sig64: number, msg32: number, keypair: number, aux32: number): number;
  sha256Initialize(state: number): void;
  sha256Write(state: number, data: number, len: number): void;
  sha256Finalize(state: number, out32: number): void;
}

const CONTEXT_SIGN_AND_VERIFY = 513 | 257;
const KEYPAIR_STRUCT = 96;
const XONLY_PUBKEY_STRUCT = 64;
const SHA256_STRUCT = 104;
/** Input is hashed through a fixed buffer in chunks of this size (the module's memory cannot grow). */
const HASH_CHUNK = 16_384;

/** Binds the exports checked by `bindingMismatch`. */
function bindExports(raw: WebAssembly.Exports): Secp256k1Exports {
  const fn = (name: string) => raw[name] as (...args: number[]) => number;
  const x = EXPECTED_EXPORTS;
  return {
    memory: raw[x.memory] as WebAssembly.Memory,
    init: () => void fn(x.init)(),
    malloc: (size) => fn(x.malloc)(size),
    contextCreate: (flags) => fn(x.contextCreate)(flags),
    xonlyPubkeyParse: (ctx, out, input) => fn(x.xonlyPubkeyParse)(ctx, out, input),
    schnorrsigVerify: (ctx, sig, msg, len, pub) => fn(x.schnorrsigVerify)(ctx, sig, msg, len, pub),
    keypairCreate: (ctx, keypair, sk) => fn(x.keypairCreate)(ctx, keypair, sk),
    keypairXonlyPub: (ctx, xonly, parity, keypair) => fn(x.keypairXonlyPub)(ctx, xonly, parity, keypair),
    xonlyPubkeySerialize: (ctx, out, xonly) => fn(x.xonlyPubkeySerialize)(ctx, out, xonly),
    schnorrsigSign32: (ctx, sig, msg, keypair, aux) => fn(x.schnorrsigSign32)(ctx, sig, msg, keypair, aux),
    sha256Initialize: (state) => void fn(x.sha256Initialize)(state),
    sha256Write: (state, data, len) => void fn(x.sha256Write)(state, data, len),
    sha256Finalize: (state, out) => void fn(x.sha256Finalize)(state, out),
  };
}

/** The module's imports, plus a setter for the heap view they write through. */
function wasmImports(): { imports: WebAssembly.Imports; setHeap(h: Uint8Array<ArrayBufferLike>): void } {
  let heap: Uint8Array<ArrayBufferLike> = new Uint8Array(0);
  const imports = {
    a: {
      a: () => {
        throw new Error('secp256k1.wasm aborted');
      },
      f: (dst: number, src: number, size: number) => {
        heap.copyWithin(dst, src, src + size);
        return dst;
      },
      d: (size: number) => {
        throw new Error(`secp256k1.wasm: out of memory (resizing ${size})`);
      },
      e: () => 52,
      c: () => 70,
      // fd_write: libsecp256k1 only writes on illegal-argument callbacks; report bytes as consumed.
      b: (_fd: number, iov: number, iovCount: number, written: number) => {
        const view = new DataView(heap.buffer);
        let total = 0;
        for (let i = 0; i < iovCount; i++) total += view.getUint32(iov + i * 8 + 4, true);
        view.setUint32(written, total, true);
        return 0;
      },
    },
  };
  return { imports, setHeap: (h) => void (heap = h) };
}

/** Instantiates the Wasm verifier (and signer); rejects with `bindingMismatch`'s reason on another build. */
export async function createWasmVerifier(): Promise<SchnorrVerifier & SchnorrSigner> {
  const mismatch = bindingMismatch();
  if (mismatch) throw new Error(mismatch);
  const { imports, setHeap } = wasmImports();
  const instance = await WebAssembly.instantiate(secp256k1, imports);
  const wasm = bindExports(instance.exports);
  let heap: Uint8Array<ArrayBufferLike> = new Uint8Array(wasm.memory.buffer);
  setHeap(heap);
  wasm.init();
  const msg = wasm.malloc(32);
  const pub = wasm.malloc(32);
  const sig = wasm.malloc(64);
  const xonly = wasm.malloc(XONLY_PUBKEY_STRUCT);
  const ctx = wasm.contextCreate(CONTEXT_SIGN_AND_VERIFY);
  const hashState = wasm.malloc(SHA256_STRUCT);
  const hashInput = wasm.malloc(HASH_CHUNK);
  const hashOut = wasm.malloc(32);
  const secret = wasm.malloc(32);
  const keypair = wasm.malloc(KEYPAIR_STRUCT);
  const aux = wasm.malloc(32);
  const sigOut = wasm.malloc(64);
  const freshHeap = () => {
    if (heap.buffer !== wasm.memory.buffer) {
      heap = new Uint8Array(wasm.memory.buffer);
      setHeap(heap);
    }
  };
  return {
    name: 'libsecp256k1 (wasm)',
    sha256(data: Uint8Array): Uint8Array {
      freshHeap();
      wasm.sha256Initialize(hashState);
      for (let i = 0; i < data.length; i += HASH_CHUNK) {
        const chunk = data.subarray(i, i + HASH_CHUNK);
        heap.set(chunk, hashInput);
        wasm.sha256Write(hashState, hashInput, chunk.length);
      }
      wasm.sha256Finalize(hashState, hashOut);
      return heap.slice(hashOut, hashOut + 32);
    },
    sign(message: Uint8Array, secretKey: Uint8Array): { signature: Uint8Array; pubkey: Uint8Array } {
      if (message.length !== 32 || secretKey.length !== 32) throw new Error('sign: a 32-byte message and a 32-byte secret key are required');
      freshHeap();
      try {
        heap.set(secretKey, secret);
        if (wasm.keypairCreate(ctx, keypair, secret) !== 1) throw new Error('sign: invalid secret key');
        wasm.keypairXonlyPub(ctx, xonly, 0, keypair);
        wasm.xonlyPubkeySerialize(ctx, pub, xonly);
        heap.set(message, msg);
        heap.set(crypto.getRandomValues(new Uint8Array(32)), aux);
        if (wasm.schnorrsigSign32(ctx, sigOut, msg, keypair, aux) !== 1) throw new Error('sign: signing failed');
        return { signature: heap.slice(sigOut, sigOut + 64), pubkey: heap.slice(pub, pub + 32) };
      } finally {
        // Do not leave key material in the module's memory.
        heap.fill(0, secret, secret + 32);
        heap.fill(0, keypair, keypair + KEYPAIR_STRUCT);
      }
    },
    publicKey(secretKey: Uint8Array): Uint8Array {
      if (secretKey.length !== 32) throw new Error('publicKey: a 32-byte secret key is required');
      freshHeap();
      try {
        heap.set(secretKey, secret);
        if (wasm.keypairCreate(ctx, keypair, secret) !== 1) throw new Error('publicKey: invalid secret key');
        wasm.keypairXonlyPub(ctx, xonly, 0, keypair);
        wasm.xonlyPubkeySerialize(ctx, pub, xonly);
        return heap.slice(pub, pub + 32);
      } finally {
        heap.fill(0, secret, secret + 32);
        heap.fill(0, keypair, keypair + KEYPAIR_STRUCT);
      }
    },
    verify(signature: Uint8Array, message: Uint8Array, pubkey: Uint8Array): boolean {
      if (signature.length !== 64 || message.length !== 32 || pubkey.length !== 32) return false;
      freshHeap();
      heap.set(signature, sig);
      heap.set(message, msg);
      heap.set(pubkey, pub);
      if (wasm.xonlyPubkeyParse(ctx, xonly, pub) !== 1) return false;
      return wasm.schnorrsigVerify(ctx, sig, msg, 32, xonly) === 1;
    },
  };
}
