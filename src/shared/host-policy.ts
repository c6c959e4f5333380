// Host classification for outbound connections: host allowlist patterns ("example.com",
// "*.example.com"; with `ports` also "host:port" and "host:*", a bare host then meaning its
// scheme's default port only), and the class of every non-public host (private, loopback,
// link-local, CGNAT, multicast, unspecified, reserved addresses and local names) with a readable
// reason. Pure functions; the policy that decides what is dialled lives in
// outbound-url.ts.
//
// IPv4 is recognised in every notation that resolvers accept (inet_aton): dotted decimal,
// a single 32-bit number (2130706433), octal (0177.0.0.1), hex (0x7f.1) and short forms
// (127.1), so that a literal cannot slip through as a "name". IPv6 literals (with or without
// brackets, with an embedded dotted IPv4) are checked by range, and the IPv4 inside
// IPv4-mapped (::ffff:0:0/96), NAT64 (64:ff9b::/96) and 6to4 (2002::/16) addresses is checked as
// IPv4. A host whose last label is numeric but which is not a valid IPv4 address is refused.
//
// Names cannot be resolved here (workerd has no DNS API), so a public name that resolves to a
// private address is not caught by this module: on Cloudflare the Worker's egress cannot reach
// private networks, and the allowlist limits names to ones the operator chose.

/** A reason the host is refused, e.g. "127.0.0.1 is a loopback address", or undefined. */
export type HostVerdict = string | undefined;

/** The class of a non-public host. */
export type HostKind = 'unspecified' | 'private' | 'carrier-grade-nat' | 'loopback' | 'link-local' | 'reserved' | 'multicast' | 'local-name' | 'invalid';

/** A non-public host: its class and the reason text. */
export interface HostClass {
  readonly kind: HostKind;
  readonly reason: string;
}

interface Range4 {
  base: number;
  bits: number;
  kind: string;
  cls: HostKind;
}

const ip4 = (a: number, b: number, c: number, d: number): number => ((a << 24) | (b << 16) | (c << 8) | d) >>> 0;

const V4_RANGES: Range4[] = [
  { base: ip4(0, 0, 0, 0), bits: 8, kind: 'an unspecified', cls: 'unspecified' }, // "this network"; 0.0.0.0 itself
  { base: ip4(10, 0, 0, 0), bits: 8, kind: 'a private', cls: 'private' },
  { base: ip4(100, 64, 0, 0), bits: 10, kind: 'a carrier-grade NAT', cls: 'carrier-grade-nat' },
  { base: ip4(127, 0, 0, 0), bits: 8, kind: 'a loopback', cls: 'loopback' },
  { base: ip4(169, 254, 0, 0), bits: 16, kind: 'a link-local', cls: 'link-local' },
  { base: ip4(172, 16, 0, 0), bits: 12, kind: 'a private', cls: 'private' },
  { base: ip4(192, 0, 0, 0), bits: 24, kind: 'a reserved', cls: 'reserved' }, // IETF protocol assignments
  { base: ip4(192, 0, 2, 0), bits: 24, kind: 'a reserved', cls: 'reserved' }, // TEST-NET-1
  { base: ip4(192, 88, 99, 0), bits: 24, kind: 'a reserved', cls: 'reserved' }, // 6to4 relay anycast
  { base: ip4(192, 168, 0, 0), bits: 16, kind: 'a private', cls: 'private' },
  { base: ip4(198, 18, 0, 0), bits: 15, kind: 'a reserved', cls: 'reserved' }, // benchmarking
  { base: ip4(198, 51, 100, 0), bits: 24, kind: 'a reserved', cls: 'reserved' }, // TEST-NET-2
  { base: ip4(203, 0, 113, 0), bits: 24, kind: 'a reserved', cls: 'reserved' }, // TEST-NET-3
  { base: ip4(224, 0, 0, 0), bits: 4, kind: 'a multicast', cls: 'multicast' },
  { base: ip4(240, 0, 0, 0), bits: 4, kind: 'a reserved', cls: 'reserved' }, // incl. 255.255.255.255 broadcast
];

const inRange4 = (addr: number, r: Range4): boolean =>
  r.bits === 0 || addr >>> (32 - r.bits) === r.base >>> (32 - r.bits);

/** Dotted-decimal text of a 32-bit address. */
export const formatIPv4 = (addr: number): string =>
  [addr >>> 24, (addr >>> 16) & 255, (addr >>> 8) & 255, addr & 255].join('.');

function parseIPv4Part(part: string): number | undefined {
  if (part === '') return undefined;
  let digits = part;
  let radix = 10;
  if (/^0x/i.test(part)) {
    digits = part.slice(2);
    radix = 16;
    if (digits === '') return 0; // "0x" is zero for inet_aton and the WHATWG URL parser
    if (!/^[0-9a-f]+$/i.test(digits)) return undefined;
  } else if (part.length > 1 && part.startsWith('0')) {
    digits = part.slice(1);
    radix = 8;
    if (!/^[0-7]+$/.test(digits)) return undefined;
  } else if (!/^[0-9]+$/.test(part)) {
    return undefined;
  }
  const value = parseInt(digits, radix);
  return Number.isSafeInteger(value) ? value : undefined;
}

/**
 * Parses an IPv4 address in any inet_aton notation (1 to 4 parts, each decimal, octal with a
 * leading 0, or hex with 0x; the last part fills the remaining bytes; one trailing dot allowed).
 * Returns the 32-bit address, or undefined when `host` is not an IPv4 literal.
 */
export function parseIPv4(host: string): number | undefined {
  const parts = (host.endsWith('.') ? host.slice(0, -1) : host).split('.');
  if (parts.length < 1 || parts.length > 4) return undefined;
  const values: number[] = [];
  for (const part of parts) {
    const v = parseIPv4Part(part);
    if (v === undefined) return undefined;
    values.push(v);
  }
  const last = values.pop() ?? 0;
  if (values.some((v) => v > 255)) return undefined;
  if (last >= 256 ** (4 - values.length)) return undefined;
  let addr = 0;
  values.forEach((v, i) => {
    addr += v * 256 ** (3 - i);
  });
  return addr + last;
}

/** Parses an IPv6 literal (brackets optional, no zone id) into eight 16-bit groups. */
export function parseIPv6(host: string): number[] | undefined {
  let text = host.startsWith('[') && host.endsWith(']') ? host.slice(1, -1) : host;
  if (!text.includes(':') || text.includes('%')) return undefined;
  const lastColon = text.lastIndexOf(':');
  const lastPart = text.slice(lastColon + 1);
  if (lastPart.includes('.')) {
    // An embedded dotted IPv4 in the last 32 bits (strictly four decimal parts): rewritten as
    // two hex groups, "::ffff:127.0.0.1" → "::ffff:7f00:1".
    if (!/^\d{1,3}(\.\d{1,3}){3}$/.test(lastPart)) return undefined;
    const [a = 0, b = 0, c = 0, d = 0] = lastPart.split('.').map(Number);
    if (a > 255 || b > 255 || c > 255 || d > 255) return undefined;
    text = `${text.slice(0, lastColon + 1)}${((a << 8) | b).toString(16)}:${((c << 8) | d).toString(16)}`;
  }
  const halves = text.split('::');
  if (halves.length > 2) return undefined;
  const group = (g: string): number | undefined => (/^[0-9a-f]{1,4}$/i.test(g) ? parseInt(g, 16) : undefined);
  const parse = (s: string): number[] | undefined => {
    if (s === '') return [];
    const out: number[] = [];
    for (const g of s.split(':')) {
      const v = group(g);
      if (v === undefined) return undefined;
      out.push(v);
    }
    return out;
  };
  const head = parse(halves[0] ?? '');
  const rest = halves.length === 2 ? parse(halves[1] ?? '') : [];
  if (head === undefined || rest === undefined) return undefined;
  if (halves.length === 2) {
    const explicit = head.length + rest.length;
    return explicit > 7 ? undefined : [...head, ...new Array<number>(8 - explicit).fill(0), ...rest];
  }
  return head.length === 8 ? head : undefined;
}

/** The class of a non-public IPv4 address, or undefined when it is public. */
function classOfIPv4(addr: number): HostClass | undefined {
  const range = V4_RANGES.find((r) => inRange4(addr, r));
  return range ? { kind: range.cls, reason: `${formatIPv4(addr)} is ${range.kind} address` } : undefined;
}

const v4From = (hi: number, lo: number): number => ((hi << 16) | lo) >>> 0;

/** The class of a non-public IPv6 address (eight groups), or undefined when it is public. */
function classOfIPv6(g: number[], text: string): HostClass | undefined {
  const [g0 = 0, g1 = 0, g2 = 0, g3 = 0, g4 = 0, g5 = 0, g6 = 0, g7 = 0] = g;
  const is = (article: string, kind: HostKind): HostClass => ({ kind, reason: `${text} is ${article} ${kind} address` });
  const embedded = (addr: number, via: string): HostClass | undefined => {
    const v4 = classOfIPv4(addr);
    return v4 === undefined ? undefined : { kind: v4.kind, reason: `${text} is ${via} of ${formatIPv4(addr)}, ${v4.reason.slice(v4.reason.indexOf(' is ') + 4)}` };
  };
  const zeroPrefix = g0 === 0 && g1 === 0 && g2 === 0 && g3 === 0;
  if (zeroPrefix && g4 === 0 && g5 === 0 && g6 === 0 && g7 === 0) return is('an', 'unspecified');
  if (zeroPrefix && g4 === 0 && g5 === 0 && g6 === 0 && g7 === 1) return is('a', 'loopback');
  if (zeroPrefix && g4 === 0 && g5 === 0xffff) return embedded(v4From(g6, g7), 'an IPv4-mapped form');
  if (zeroPrefix && g4 === 0xffff && g5 === 0) return is('a', 'reserved'); // IPv4-translated (SIIT)
  if (zeroPrefix && g4 === 0 && g5 === 0) return is('a', 'reserved'); // deprecated IPv4-compatible ::/96
  if (g0 === 0x64 && g1 === 0xff9b && g2 === 0 && g3 === 0 && g4 === 0 && g5 === 0) {
    return embedded(v4From(g6, g7), 'a NAT64 form');
  }
  if (g0 === 0x64 && g1 === 0xff9b && g2 === 1) return is('a', 'reserved'); // local-use NAT64
  if (g0 === 0x100 && g1 === 0 && g2 === 0 && g3 === 0) return is('a', 'reserved'); // discard-only
  if (g0 === 0x2001 && g1 === 0) return is('a', 'reserved'); // Teredo (hides an IPv4 address)
  if (g0 === 0x2001 && g1 === 0xdb8) return is('a', 'reserved'); // documentation
  if (g0 === 0x2002) return embedded(v4From(g1, g2), 'a 6to4 form');
  if ((g0 & 0xfe00) === 0xfc00) return is('a', 'private'); // unique local fc00::/7
  if ((g0 & 0xffc0) === 0xfe80) return is('a', 'link-local'); // fe80::/10
  if ((g0 & 0xffc0) === 0xfec0) return is('a', 'private'); // deprecated site-local fec0::/10
  if ((g0 & 0xff00) === 0xff00) return is('a', 'multicast');
  return undefined;
}

const LOCAL_SUFFIXES = ['.localhost', '.local', '.internal', '.localdomain', '.home.arpa', '.lan', '.intranet'];

/**
 * The class of a URL host (as `new URL().hostname` gives it, or raw) when it is not public, or
 * undefined when it is: IP literals must be public; names must have a dot and must not be local
 * names (localhost, *.localhost, *.local, *.internal, *.localdomain, *.home.arpa, *.lan).
 */
export function classOfHost(rawHost: string): HostClass | undefined {
  const host = rawHost.toLowerCase();
  const invalid = (reason: string): HostClass => ({ kind: 'invalid', reason });
  if (host === '') return invalid('empty host');
  const v6 = parseIPv6(host);
  if (v6) return classOfIPv6(v6, host.startsWith('[') ? host : `[${host}]`);
  if (host.startsWith('[') || host.includes(':')) return invalid(`${rawHost} is not a valid address`);
  const name = host.endsWith('.') ? host.slice(0, -1) : host;
  const v4 = parseIPv4(name);
  if (v4 !== undefined) return classOfIPv4(v4);
  const lastLabel = name.slice(name.lastIndexOf('.') + 1);
  if (/^(0x[0-9a-f]*|[0-9]+)$/i.test(lastLabel)) return invalid(`${rawHost} is not a valid IPv4 address`);
  if (name === 'localhost' || LOCAL_SUFFIXES.some((s) => name.endsWith(s))) return { kind: 'local-name', reason: `${rawHost} is a local name` };
  if (!name.includes('.')) return { kind: 'local-name', reason: `${rawHost} is a single-label (local) name` };
  return undefined;
}

/** The refusal reason for a URL host (see classOfHost), or undefined when it is public. */
export const classifyHost = (rawHost: string): HostVerdict => classOfHost(rawHost)?.reason;

// ---- allowlist -----------------------------------------------------------------------------

/** A normalised allowlist entry: an exact host, or a suffix for "*.example.com"; the ports it allows. */
export interface HostPattern {
  readonly pattern: string;
  readonly exact?: string;
  readonly suffix?: string;
  /**
   * The port the entry allows: one port ("host:8080"), or `'default'`, the dialled URL's scheme's
   * default port (a bare host in `ports` mode: 80 for http/ws, 443 for https/wss); absent: every
   * port ("host:*", or any entry outside `ports` mode, where the port is not asked).
   */
  readonly port?: number | 'default';
}

/** The port an http(s)/ws(s) URL dials: its own, or its scheme's default. */
export const portOf = (url: URL): number => (url.port !== '' ? Number(url.port) : url.protocol === 'https:' || url.protocol === 'wss:' ? 443 : 80);

/**
 * Normalises allowlist entries: "example.com" (that host only) and "*.example.com" (any
 * subdomain of example.com at any depth, not example.com itself); case-insensitive, IDN names in
 * punycode, a trailing dot ignored, no scheme, path or other wildcard. With `ports`, an entry may
 * end in ":<port>" (1–65535; "[::1]:8080" for IPv6): that port only, or in ":*": every port; an
 * entry without a port allows its scheme's default port only (as a CSP host-source does: an
 * operator listing "10.0.0.5" for one service does not open its other ports). Without `ports`, no
 * port is written and none is asked. Returns the patterns and the entries that are not valid
 * patterns.
 */
export function parseAllowlist(entries: readonly string[], options: { ports?: boolean } = {}): { patterns: HostPattern[]; invalid: string[] } {
  const patterns: HostPattern[] = [];
  const invalid: string[] = [];
  for (const entry of entries) {
    const ported = options.ports === true ? /^(.*[^:]):(\d{1,5}|\*)$/.exec(entry) : null;
    const written = ported?.[2];
    const port = written === undefined || written === '*' ? undefined : Number(written);
    const hostPart = ported?.[1] ?? entry;
    const wildcard = hostPart.startsWith('*.');
    const body = wildcard ? hostPart.slice(2) : hostPart;
    let host: string | undefined;
    const ipv6 = /^\[[0-9a-f:.]+\]$/i.test(body);
    if (body !== '' && (ipv6 || !/[/:@?#*\s\\[\]]/.test(body))) {
      try {
        host = new URL(`http://${body}/`).hostname.replace(/\.$/, '');
      } catch {
        host = undefined;
      }
    }
    // IP literals are exact entries only ("*.1.2.3.4" means nothing).
    if (host === undefined || host === '' || (wildcard && (parseIPv4(host) !== undefined || host.startsWith('['))) || (port !== undefined && (port < 1 || port > 65535))) {
      invalid.push(entry);
      continue;
    }
    const at = port !== undefined ? { port } : options.ports === true && written === undefined ? { port: 'default' as const } : {};
    const shown = `${wildcard ? '*.' : ''}${host}${written === undefined ? '' : `:${written}`}`;
    patterns.push(wildcard ? { pattern: shown, suffix: `.${host}`, ...at } : { pattern: shown, exact: host, ...at });
  }
  return { patterns, invalid };
}

/** Whether `hostname` (from `new URL()`: lower case, punycode) matches one of the patterns, whatever their port. */
export function hostAllowed(hostname: string, patterns: readonly HostPattern[]): boolean {
  return patterns.some((p) => hostMatches(hostname, p));
}

/** Whether `url`'s host and port (its scheme's default when it names none) match one of the patterns. */
export function urlAllowed(url: URL, patterns: readonly HostPattern[]): boolean {
  return patterns.some((p) => hostMatches(url.hostname, p) && portMatches(url, p));
}

/** Whether `url`'s port is one `p` allows. */
function portMatches(url: URL, p: HostPattern): boolean {
  if (p.port === undefined) return true;
  // The URL parser drops a port equal to the scheme's default (http://h:80 → port "").
  return p.port === 'default' ? url.port === '' : p.port === portOf(url);
}

function hostMatches(hostname: string, p: HostPattern): boolean {
  const host = hostname.toLowerCase().replace(/\.$/, '');
  return p.exact !== undefined ? host === p.exact : p.suffix !== undefined && host.endsWith(p.suffix);
}
