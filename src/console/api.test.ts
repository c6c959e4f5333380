// What the console says after deleting an agent (api.ts deletedStatus): a hosted agent deleted
// (204), or a key that was no longer one (200 {revoked}: only the owner's attestation revoked).
import { describe, expect, it } from 'vitest';
import { deletedStatus } from './api.js';

describe('deletedStatus', () => {
  it('says deleted for 204, and that only the attestation was revoked for 200 {revoked}', () => {
    expect(deletedStatus('helper', { status: 204, json: null })).toBe('helper deleted');
    expect(deletedStatus('helper', { status: 200, json: { revoked: 'ab'.repeat(32) } })).toBe(
      'helper was no longer one of your hosted agents: your attestation of its key is revoked',
    );
  });
});
