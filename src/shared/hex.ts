// Hex helpers shared by every module: strict lowercase hex checks and byte conversion.

/** 64 lowercase hex characters: event ids, pubkeys. The one definition every schema uses. */
export const HEX64 = /^[0-9a-f]{64}$/;
const HEX128 = /^[0-9a-f]{128}$/;

export const isHex64 = (s: unknown): boolean => typeof s === 'string' && HEX64.test(s);
export const isHex128 = (s: unknown): boolean => typeof s === 'string' && HEX128.test(s);

/** Value of a hex digit's char code, or -1. */
const NIBBLE = new Int8Array(128).fill(-1);
for (let i = 0; i < 10; i++) NIBBLE[48 + i] = i;
for (let i = 0; i < 6; i++) NIBBLE[65 + i] = NIBBLE[97 + i] = 10 + i;

export function hexToBytes(hex: string): Uint8Array {
  if (hex.length % 2 !== 0) throw new Error('invalid hex');
  const out = new Uint8Array(hex.length / 2);
  for (let i = 0; i < out.length; i++) {
    const hi = NIBBLE[hex.charCodeAt(2 * i)] ?? -1;
    const lo = NIBBLE[hex.charCodeAt(2 * i + 1)] ?? -1;
    if (hi < 0 || lo < 0) throw new Error('invalid hex');
    out[i] = (hi << 4) | lo;
  }
  return out;
}

const HEX_DIGITS = Array.from({ length: 256 }, (_, i) => i.toString(16).padStart(2, '0'));

export function bytesToHex(bytes: Uint8Array): string {
  let s = '';
  for (let i = 0; i < bytes.length; i++) s += HEX_DIGITS[bytes[i]!];
  return s;
}
