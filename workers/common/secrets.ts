// Secrets at rest: AES-256-GCM under a key derived (HKDF) from EDGESTR_SECRET, with associated data
// naming the record, so that a ciphertext cannot be moved to another record. Secret keys of hosted
// agents and bridge providers (bound to their public key), and secret request headers, the one rule
// for the bridge's servers (bound to `<provider>/<server id>`) and hosted agents' MCP servers
// (bound to `<agent>/mcp/<server id>`, workers/agent/mcp-headers.ts).

import { z } from 'zod';
import { base64Decode, base64Encode } from '../../src/shared/hex.js';
import { isDevelopment } from '../../src/shared/env-mode.js';

const encoder = new TextEncoder();
const decoder = new TextDecoder();

export interface SecretEnv {
  EDGESTR_SECRET?: string;
  EDGESTR_ENV?: string;
}

/** Used only when EDGESTR_ENV=development and no EDGESTR_SECRET is set (local `npm start`). */
const DEVELOPMENT_SECRET = 'edgestr-local-development-secret-not-for-production';

/** The key-sealing secret, or undefined when the deployment has none (creating agents then fails with a clear error). */
export function sealingSecret(env: SecretEnv): string | undefined {
  return env.EDGESTR_SECRET ?? (isDevelopment(env) ? DEVELOPMENT_SECRET : undefined);
}

async function deriveKey(secret: string, purpose: string): Promise<CryptoKey> {
  if (secret.length < 16) throw new Error('EDGESTR_SECRET must be at least 16 characters');
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

export async function openSecretKey(sealed: string, pubkey: string, secret: string): Promise<Uint8Array> {
  if (!sealed.startsWith('v1:')) throw new Error('unknown secret key format');
  const bytes = base64Decode(sealed.slice(3));
  if (!bytes || bytes.length < 13) throw new Error('corrupt secret key record');
  const key = await deriveKey(secret, 'secret-keys');
  const pt = await crypto.subtle.decrypt({ name: 'AES-GCM', iv: bytes.slice(0, 12), additionalData: encoder.encode(pubkey) }, key, bytes.slice(12));
  return new Uint8Array(pt);
}

const HeadersJson = z.record(z.string(), z.string());

/** Seals a header dictionary bound to `binding` (the record it belongs to); none: '' (nothing stored). */
export async function sealHeaders(headers: Record<string, string>, binding: string, secret: string): Promise<string> {
  if (Object.keys(headers).length === 0) return '';
  return sealSecretKey(encoder.encode(JSON.stringify(headers)), binding, secret);
}

/** Opens what sealHeaders made for the same `binding`; throws for another binding, secret or a corrupt record. */
export async function openHeaders(sealed: string, binding: string, secret: string): Promise<Record<string, string>> {
  if (sealed === '') return {};
  return HeadersJson.parse(JSON.parse(decoder.decode(await openSecretKey(sealed, binding, secret))));
}
