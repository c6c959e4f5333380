// Property tests of the outbound policy's address rules: every address of a forbidden IPv4 range,
// written in any notation a resolver or URL parser accepts (dotted, one number, hex, octal,
// IPv4-mapped, NAT64 and 6to4 IPv6), is refused in production; development allows only loopback
// and private ranges. Also: a NIP-98 id is remembered for as long as its event is valid.
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { formatIPv4 } from './host-policy.js';
import { HTTP_AUTH_WINDOW_SECONDS, replayExpiry } from './nip98.js';
import { outboundPolicy, outboundRefusal, STRICT_OUTBOUND } from './outbound-url.js';

const RANGES = [
  { base: 0x7f000000, bits: 8, development: true }, // loopback
  { base: 0x0a000000, bits: 8, development: true }, // private
  { base: 0xac100000, bits: 12, development: true },
  { base: 0xc0a80000, bits: 16, development: true },
  { base: 0xa9fe0000, bits: 16, development: false }, // link-local (metadata)
  { base: 0x64400000, bits: 10, development: false }, // CGNAT
  { base: 0x00000000, bits: 8, development: false }, // unspecified / "this network"
] as const;

const addressIn = fc
  .constantFrom(...RANGES)
  .chain((r) => fc.nat({ max: 2 ** (32 - r.bits) - 1 }).map((offset) => ({ addr: (r.base + offset) >>> 0, range: r })));

const hex16 = (n: number) => n.toString(16);
const NOTATIONS: Array<(a: number) => string> = [
  (a) => formatIPv4(a),
  (a) => String(a),
  (a) => `0x${a.toString(16)}`,
  (a) => formatIPv4(a).split('.').map((p) => `0${Number(p).toString(8)}`).join('.'),
  (a) => formatIPv4(a).split('.').map((p) => `0x${Number(p).toString(16)}`).join('.'),
  (a) => `${a >>> 24}.${a & 0xffffff}`,
  (a) => `[::ffff:${formatIPv4(a)}]`,
  (a) => `[::ffff:${hex16(a >>> 16)}:${hex16(a & 0xffff)}]`,
  (a) => `[64:ff9b::${hex16(a >>> 16)}:${hex16(a & 0xffff)}]`,
  (a) => `[2002:${hex16(a >>> 16)}:${hex16(a & 0xffff)}::1]`,
];
const DEVELOPMENT = outboundPolicy({ EDGESTR_ENV: 'development' });

describe('outbound policy properties', () => {
  it('refuses every forbidden IPv4 address in every notation (https and wss alike)', () => {
    fc.assert(
      fc.property(addressIn, fc.nat({ max: NOTATIONS.length - 1 }), fc.boolean(), ({ addr, range }, n, relay) => {
        const url = new URL(`${relay ? 'wss' : 'https'}://${NOTATIONS[n]!(addr)}/path`);
        const production = outboundRefusal(url, relay ? 'relay' : 'http', STRICT_OUTBOUND);
        expect(production).toContain(formatIPv4(addr));
        const development = outboundRefusal(url, relay ? 'relay' : 'http', DEVELOPMENT);
        if (range.development) expect(development).toBeUndefined();
        else expect(development).toContain(formatIPv4(addr));
      }),
      { numRuns: 2000 },
    );
  });

  it('remembers a NIP-98 id at least until its event stops being valid', () => {
    fc.assert(
      fc.property(fc.integer({ min: 1_600_000_000, max: 2_000_000_000 }), fc.integer({ min: -HTTP_AUTH_WINDOW_SECONDS, max: HTTP_AUTH_WINDOW_SECONDS }), (now, skew) => {
        const createdAt = now + skew;
        const until = replayExpiry({ created_at: createdAt }, now);
        // Valid while |created_at - t| <= window, i.e. up to t = created_at + window.
        expect(until).toBeGreaterThanOrEqual(createdAt + HTTP_AUTH_WINDOW_SECONDS);
        expect(until).toBeGreaterThanOrEqual(now);
      }),
    );
  });
});
