// BIP-340 Schnorr verification with libsecp256k1 compiled to Wasm (the binary shipped by the
// `nostr-wasm` package). Workers refuse to compile Wasm from bytes at run time, so this binding
// takes an already compiled WebAssembly.Module (a `.wasm` import in workerd, WebAssembly.compile
// of the file's bytes in Node) and talks to the module's exports directly.

import type { SchnorrVerifier } from './verify.js';

/** The minified export names of nostr-wasm's secp256k1.wasm build. */
interface Secp256k1Exports {
  memory: WebAssembly.Memory;
  init(): void;
  malloc(size: number): number;
  contextCreate(flags: number): number;
  xonlyPubkeyParse(ctx: number, out: number, input32: number): number;
  schnorrsigVerify(ctx: number, sig64: number, msg: number, msgLen: number, pubkey: number): number;
}

const CONTEXT_VERIFY = 257;
const XONLY_PUBKEY_STRUCT = 64;

function bindExports(raw: WebAssembly.Exports): Secp256k1Exports {
  const fn = (name: string) => {
    const f = raw[name];
    if (typeof f !== 'function') throw new Error(`secp256k1.wasm: missing export ${name}`);
    return f as (...args: number[]) => number;
  };
  const memory = raw['g'];
  if (!(memory instanceof WebAssembly.Memory)) throw new Error('secp256k1.wasm: missing memory');
  return {
    memory,
    init: () => void fn('h')(),
    malloc: (size) => fn('i')(size),
    contextCreate: (flags) => fn('o')(flags),
    xonlyPubkeyParse: (ctx, out, input) => fn('p')(ctx, out, input),
    schnorrsigVerify: (ctx, sig, msg, len, pub) => fn('u')(ctx, sig, msg, len, pub),
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

/** Instantiates the Wasm verifier from a compiled module. */
export async function createWasmVerifier(module: WebAssembly.Module): Promise<SchnorrVerifier> {
  const { imports, setHeap } = wasmImports();
  const instance = await WebAssembly.instantiate(module, imports);
  const wasm = bindExports(instance.exports);
  let heap: Uint8Array<ArrayBufferLike> = new Uint8Array(wasm.memory.buffer);
  setHeap(heap);
  wasm.init();
  const msg = wasm.malloc(32);
  const pub = wasm.malloc(32);
  const sig = wasm.malloc(64);
  const xonly = wasm.malloc(XONLY_PUBKEY_STRUCT);
  const ctx = wasm.contextCreate(CONTEXT_VERIFY);
  return {
    name: 'libsecp256k1 (wasm)',
    verify(signature: Uint8Array, message: Uint8Array, pubkey: Uint8Array): boolean {
      if (signature.length !== 64 || message.length !== 32 || pubkey.length !== 32) return false;
      if (heap.buffer !== wasm.memory.buffer) {
        heap = new Uint8Array(wasm.memory.buffer);
        setHeap(heap);
      }
      heap.set(signature, sig);
      heap.set(message, msg);
      heap.set(pubkey, pub);
      if (wasm.xonlyPubkeyParse(ctx, xonly, pub) !== 1) return false;
      return wasm.schnorrsigVerify(ctx, sig, msg, 32, xonly) === 1;
    },
  };
}
