// Reading a request body with a size cap: a declared Content-Length over the cap is refused
// before anything is read, and a streamed body is read only up to the cap (then cancelled).

import { err, ok, type Result } from '../../src/shared/errors.js';

/** Largest management API body, in bytes. */
export const MAX_API_BODY_BYTES = 256 * 1024;

export const bodyTooLarge = (max: number): string => `request body too large (max ${max} bytes)`;

/** The body's bytes, or the 413 message when it is (or claims to be) longer than `max` bytes. */
export async function readBoundedBody(request: Request, max: number): Promise<Result<Uint8Array, string>> {
  const declared = request.headers.get('Content-Length');
  if (declared !== null && !(/^\d+$/.test(declared) && Number(declared) <= max)) return err(bodyTooLarge(max));
  if (!request.body) return ok(new Uint8Array(0));
  const reader = request.body.getReader();
  const chunks: Uint8Array[] = [];
  let size = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    size += value.byteLength;
    if (size > max) {
      await reader.cancel();
      return err(bodyTooLarge(max));
    }
    chunks.push(value);
  }
  const bytes = new Uint8Array(size);
  let offset = 0;
  for (const c of chunks) {
    bytes.set(c, offset);
    offset += c.byteLength;
  }
  return ok(bytes);
}
