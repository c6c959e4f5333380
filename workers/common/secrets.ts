// Secrets at rest: AES-256-GCM under a key derived (HKDF) from EDGESTR_SECRET, with associated data
// naming the record, so that a ciphertext cannot be moved to another record. Secret keys of hosted
// agents and bridge providers (bound to their public key), and secret request headers, the one rule
// for the bridge's servers (bound to `<provider>/<server id>`) and hosted agents' MCP servers
// (bound to `<agent>/mcp/<server id>`, workers/agent/mcp-headers.ts).
// Rotation (docs/OPERATIONS.md "Rotating EDGESTR_SECRET"): values are always sealed with
// EDGESTR_SECRET; `openRotating` falls back to EDGESTR_SECRET_PREVIOUS and then hands back the value
// sealed again with EDGESTR_SECRET, which the agents' and bridges' watchdogs store in its place
// (AgentStore.reseal, ServerStore.reseal), so that after one pass the previous secret can go.

import { z } from 'zod';
import { base64Decode, base64Encode } from '../../src/shared/hex.js';
import { isDevelopment } from '../../src/shared/env-mode.js';
import { errorMessage } from '../../src/shared/errors.js';

const encoder = new TextEncoder();
const decoder = new TextDecoder();
const HeadersJson = z.record(z.string(), z.string());

export interface SecretEnv {
  EDGESTR_SECRET?: string;
  /** The former EDGESTR_SECRET while it is rotated: opens what it sealed, never seals. */
  EDGESTR_SECRET_PREVIOUS?: string;
  EDGESTR_ENV?: string;
}

/** The secret that seals (and opens first), and during a rotation the one that sealed before it. */
export interface SealingSecrets {
  current: string;
  previous?: string;
}

/** Used only when EDGESTR_ENV=development and no EDGESTR_SECRET is set (local `npm start`). */
const DEVELOPMENT_SECRET = 'edgestr-local-development-secret-not-for-production';

/** The key-sealing secret, or undefined when the deployment has none (creating agents then fails with a clear error). */
export function sealingSecret(env: SecretEnv): string | undefined {
  return env.EDGESTR_SECRET ?? (isDevelopment(env) ? DEVELOPMENT_SECRET : undefined);
}

/** The current secret (sealingSecret) and EDGESTR_SECRET_PREVIOUS when set to another value; undefined without a current one. */
export function sealingSecrets(env: SecretEnv): SealingSecrets | undefined {
  const current = sealingSecret(env);
  if (current === undefined) return undefined;
  const previous = env.EDGESTR_SECRET_PREVIOUS;
  return previous && previous !== current ? { current, previous } : { current };
}

async function deriveKey(secret: string, purpose: string, name = 'EDGESTR_SECRET'): Promise<CryptoKey> {
  if (secret.length < 16) throw new Error(`${name} must be at least 16 characters`);
  const base = await crypto.subtle.importKey('raw', encoder.encode(secret), 'HKDF', false, ['deriveKey']);
  return crypto.subtle.deriveKey(
    { name: 'HKDF', hash: 'SHA-256', salt: encoder.encode('edgestr/v1'), info: encoder.encode(purpose) },
    base,
    { name: 'AES-GCM', length: 256 },
    false,
    ['encrypt', 'decrypt'],
  );
}

/** Encrypts a 32-byte secret key; the result is "v1:<base64 iv||ciphertext>". */
export async function sealSecretKey(sk: Uint8Array, pubkey: string, secret: string): Promise<string> {
  const key = await deriveKey(secret, 'secret-keys');
  const iv = crypto.getRandomValues(new Uint8Array(12));
  const ct = new Uint8Array(await crypto.subtle.encrypt({ name: 'AES-GCM', iv, additionalData: encoder.encode(pubkey) }, key, sk));
  const out = new Uint8Array(iv.length + ct.length);
  out.set(iv);
  out.set(ct, iv.length);
  return `v1:${base64Encode(out)}`;
}

function parseSealed(sealed: string, what: string): Uint8Array {
  if (!sealed.startsWith('v1:')) throw new Error(`${what}: unknown sealed format`);
  const bytes = base64Decode(sealed.slice(3));
  if (!bytes || bytes.length < 13) throw new Error(`${what}: corrupt sealed record`);
  return bytes;
}

/** The plain bytes, or undefined when `secret` (with `binding` as associated data) does not open them. */
async function decryptWith(bytes: Uint8Array, binding: string, secret: string, name?: string): Promise<Uint8Array | undefined> {
  const key = await deriveKey(secret, 'secret-keys', name);
  try {
    return new Uint8Array(await crypto.subtle.decrypt({ name: 'AES-GCM', iv: bytes.slice(0, 12), additionalData: encoder.encode(binding) }, key, bytes.slice(12)));
  } catch {
    return undefined; // AES-GCM tells no more: another secret, or another binding
  }
}

/** What openRotating opened; `resealed`: only the previous secret opened it, and here it is sealed with the current one. */
export interface Opened {
  plain: Uint8Array;
  resealed?: string;
}

/**
 * Opens `sealed` (made by sealSecretKey or sealHeaders for `binding`) with the current secret, else
 * with the previous one. Neither: an error naming `what` (and, outside a rotation, what to do).
 */
export async function openRotating(sealed: string, binding: string, secrets: SealingSecrets, what: string): Promise<Opened> {
  const bytes = parseSealed(sealed, what);
  const plain = await decryptWith(bytes, binding, secrets.current);
  if (plain) return { plain };
  if (secrets.previous === undefined) {
    throw new Error(
      `${what}: EDGESTR_SECRET does not open it. If EDGESTR_SECRET was changed, set its former value as the secret EDGESTR_SECRET_PREVIOUS until every agent and bridge re-sealed it (docs/OPERATIONS.md, "Rotating EDGESTR_SECRET"); otherwise it was sealed for another record`,
    );
  }
  const old = await decryptWith(bytes, binding, secrets.previous, 'EDGESTR_SECRET_PREVIOUS');
  if (!old) throw new Error(`${what}: neither EDGESTR_SECRET nor EDGESTR_SECRET_PREVIOUS opens it (sealed with another secret, or for another record)`);
  return { plain: old, resealed: await sealSecretKey(old, binding, secrets.current) };
}

/** The headers in what openRotating opened of a sealHeaders value. */
export function headersOf(plain: Uint8Array): Record<string, string> {
  return HeadersJson.parse(JSON.parse(decoder.decode(plain)));
}

/** A watchdog's re-sealing pass during a rotation: values it sealed again with the current secret, and why others did not open. */
export interface ResealPass {
  resealed: number;
  failed: string[];
}

/**
 * In a re-sealing pass: `sealed` sealed again with the current secret when only the previous one
 * opens it, else undefined (the current one opens it; or neither does: why goes to `pass.failed`).
 */
export async function resealed(sealed: string, binding: string, secrets: SealingSecrets, what: string, pass: ResealPass): Promise<string | undefined> {
  try {
    return (await openRotating(sealed, binding, secrets, what)).resealed;
  } catch (e) {
    pass.failed.push(errorMessage(e));
    return undefined;
  }
}

/** Logs a re-sealing pass of `who` (e.g. `agent <pubkey>`): the lines an operator watches while rotating (docs/OPERATIONS.md). */
export function logResealPass(who: string, pass: ResealPass): void {
  if (pass.failed.length === 0) console.warn(`${who}: every sealed value opens with EDGESTR_SECRET (${pass.resealed} re-sealed from EDGESTR_SECRET_PREVIOUS by this pass)`);
  for (const failure of pass.failed) console.error(`${who}: not re-sealed: ${failure}`);
}

/** Seals a header dictionary bound to `binding` (the record it belongs to); none: '' (nothing stored). */
export async function sealHeaders(headers: Record<string, string>, binding: string, secret: string): Promise<string> {
  if (Object.keys(headers).length === 0) return '';
  return sealSecretKey(encoder.encode(JSON.stringify(headers)), binding, secret);
}
